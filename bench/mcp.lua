-- bench/mcp.lua — wrk script: MCP tools/call over Streamable HTTP with pre-created sessions.
--
--   wrk -t T -c C -d D -s bench/mcp.lua URL -- SESSIONS_FILE PROTOCOL_VERSION TOOL ARGS_JSON T
--
-- SESSIONS_FILE holds one Mcp-Session-Id per line (initialize + notifications/initialized were
-- done beforehand); each wrk thread takes every T-th of them and cycles through them, one
-- request at a time per connection. Every request is a JSON-RPC tools/call with the headers a
-- Streamable HTTP client must send. wrk reads each answer to its end (Content-Length or the last
-- chunk of an SSE stream); response() checks that it is a 200 holding a JSON-RPC result, and
-- done() prints one JSON line (prefix "BENCH ") with the counts and latency percentiles.
-- TOOL "tools/list" (a method, not a tool's name) sends tools/list instead (ARGS unused).
-- PROTOCOL_VERSION 2026-07-28: stateless calls (no session: SESSIONS_FILE's lines are unused
-- but must exist), with the Mcp-Method and Mcp-Name headers and the _meta that era asks for.
local threads = {}
local counter = 0

function setup(thread)
   thread:set("tid", counter)
   counter = counter + 1
   table.insert(threads, thread)
end

local sessions = {}
local nsess = 0
local next_sess = 0
local next_id = 0
local path, proto, tool, args
bad = 0
good = 0
first_bad = ""

function init(argv)
   local file = argv[1]
   local nthreads = tonumber(argv[5] or "1")
   proto = argv[2] or "2025-11-25"
   tool = argv[3] or "echo"
   args = argv[4] or '{"text":"hello"}'
   local i = 0
   for line in io.lines(file) do
      if line ~= "" then
         if (i % nthreads) == tid then
            table.insert(sessions, line)
         end
         i = i + 1
      end
   end
   if #sessions == 0 then
      -- fewer sessions than threads: share the first one
      local f = io.open(file); table.insert(sessions, f:read("*l")); f:close()
   end
   nsess = #sessions
   path = wrk.path
end

function request()
   next_sess = next_sess % nsess + 1
   next_id = next_id + 1
   local body
   if tool == "tools/list" then
      body = '{"jsonrpc":"2.0","id":' .. next_id .. ',"method":"tools/list","params":{}}'
   elseif proto == "2026-07-28" then
      body = '{"jsonrpc":"2.0","id":' .. next_id .. ',"method":"tools/call","params":{"name":"'
         .. tool .. '","arguments":' .. args .. ',"_meta":{'
         .. '"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
         .. '"io.modelcontextprotocol/clientCapabilities":{}}}}'
   else
      body = '{"jsonrpc":"2.0","id":' .. next_id .. ',"method":"tools/call","params":{"name":"'
         .. tool .. '","arguments":' .. args .. '}}'
   end
   local headers = {
      ["Content-Type"] = "application/json",
      ["Accept"] = "application/json, text/event-stream",
      ["MCP-Protocol-Version"] = proto,
   }
   if proto == "2026-07-28" then
      -- Stateless: no session; the method and the tool's name as headers too.
      headers["Mcp-Method"] = "tools/call"
      headers["Mcp-Name"] = tool
   else
      headers["Mcp-Session-Id"] = sessions[next_sess]
   end
   return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
   if status == 200 and body and string.find(body, '"result"', 1, true) then
      good = good + 1
   else
      bad = bad + 1
      if first_bad == "" then
         first_bad = tostring(status) .. " " .. string.sub(body or "", 1, 200)
      end
   end
end

function done(summary, latency, requests)
   local g, b, fb = 0, 0, ""
   for _, t in ipairs(threads) do
      g = g + (t:get("good") or 0)
      b = b + (t:get("bad") or 0)
      local f = t:get("first_bad")
      if fb == "" and f and f ~= "" then fb = f end
   end
   local e = summary.errors
   fb = string.gsub(fb, '[%c"\\]', " ")
   io.write(string.format(
      'BENCH {"requests":%d,"duration_us":%d,"good":%d,"bad":%d,"connect_err":%d,"read_err":%d,'
      .. '"write_err":%d,"status_err":%d,"timeout_err":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
      .. '"mean_us":%.1f,"max_us":%d,"first_bad":"%s"}\n',
      summary.requests, summary.duration, g, b, e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean,
      latency.max, fb))
end
