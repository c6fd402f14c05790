#!/usr/bin/python3
"""bench/input_costs.py — what inputs a client controls cost the gateway, per element (issue 21).

    bench/input_costs.py [--tree DIR] [--module SO] [--sizes 100,1000,10000,100000]
                         [--repeat 3] [--only NAME,...] [--keep]

Starts its own stack (tests/stack up, with bench's own small MCP backend in this process, so
that the backend's answers are as large as a measurement needs: N tools, a tool with N
x-mcp-header arguments, N events on one stream) and prints, for each input and each size N, the
best of --repeat wall times of one request (of up to 10 times more for N < 1,000 and for N0,
whose requests take a few ms each: a difference of two such times is mostly noise otherwise)
and the cost per element beyond the smallest request's, (t(N) - t(N0)) / (N - N0) (N0 = 1; 2
for replay, 51 for a refused batch), so that the fixed cost of a request (session look-up,
backend round trip) does not hide a growing one. Every row's per-element cost should stay within 2x of its
smallest size's: no step may be quadratic. The last column is that ratio (largest size /
smallest size).

Inputs (N elements each):
  batch-refused  a batch of N pings over MCPMaxBatchSize (50 here): the 413
  batch-served   a batch of N pings served (MCPMaxBatchSize 0): ids, settle, storing, answer
  object-keys    one ping whose params hold N keys
  headers        one ping with N extra request headers (LimitRequestFields raised)
  tools-list     tools/list of a backend with N tools (2025-06-18 session, relayed and stored)
  bridge-tools   a 2026-07-28 tools/call through the era bridge, backend with N tools: the
                 bridge reads, declares and caches the list (MCPEraBridgeToolsTTL 10ms: each call)
  mcp-params     the same call of a tool with N x-mcp-header arguments, N Mcp-Param-* headers
                 sent (checked against the cached list)
  replay         GET with Last-Event-ID replaying a stored stream of N events

Not a test: it prints numbers and exits 0 unless something failed outright. It never builds
mod_mcp; it uses DIR/mod_mcp/.libs/mod_mcp.so as it is (--tree: another built checkout).
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BENCH = os.path.dirname(os.path.abspath(__file__))
ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"

# What the backend serves; set by each measurement before its requests.
STATE = {"tools": 10, "params": 1, "events": 10}


# ---- the backend --------------------------------------------------------------------------------

def tool_list():
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object", "properties": {
        "a": {"type": "string", "x-mcp-header": "A"}}}} for i in range(STATE["tools"])]
    tools.append({"name": "wide", "inputSchema": {"type": "object", "properties": {
        f"p{i}": {"type": "string", "x-mcp-header": f"P{i}"} for i in range(STATE["params"])}}})
    tools.append({"name": "stream", "inputSchema": {"type": "object"}})
    return tools


def answer(msg):
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        return None
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "bench", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": tool_list()}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "ok"}]}
    else:
        result = {}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


class Backend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # Headers and body leave in two writes: without this, Nagle and the gateway's delayed
        # ACK add 40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def reply(self, status, body=b"", ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(405, extra=[("Allow", "POST, DELETE")])

    def do_DELETE(self):
        self.reply(200)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if isinstance(body, list):
            out = [a for a in map(answer, body) if a]
            return self.reply(200, json.dumps(out).encode()) if out else self.reply(202)
        if body.get("method") == "tools/call" and body["params"].get("name") == "stream":
            return self.stream(body)
        a = answer(body)
        if a is None:
            return self.reply(202)
        extra = [("Mcp-Session-Id", "bench-%d" % id(body))] if body["method"] == "initialize" else []
        self.reply(200, json.dumps(a).encode(), extra=extra)

    def stream(self, call):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        note = {"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "x"}}
        chunk = ("data: %s\n\n" % json.dumps(note)).encode()
        n = STATE["events"] - 1
        for i in range(0, n, 1000):
            self.wfile.write(chunk * min(1000, n - i))
        self.wfile.write(("data: %s\n\n" % json.dumps(answer(call))).encode())
        self.wfile.flush()
        self.close_connection = True


# ---- the stack ----------------------------------------------------------------------------------

CONF = """
LimitRequestFields 200000
LimitRequestFieldSize 65536
<Location /bench-refuse>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPMaxMessageSize 268435456
    MCPMaxBatchSize 50
</Location>
<Location /bench>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPMaxMessageSize 268435456
    MCPMaxBatchSize 0
    MCPEraBridgeToolsTTL 10ms
    MCPStreamTimeout 600
    MCPBackendTimeout 600
</Location>
"""


def read_env(path):
    env = {}
    for line in open(path):
        if "=" in line and not line.startswith("#"):
            k, v = line.rstrip("\n").split("=", 1)
            env[k] = v.strip("'")
    return env


class Client:
    def __init__(self, base):
        self.host, self.port = base

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=900)
        h = {"Accept": ACCEPT}
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        # http.client refuses nothing about the number of headers; putheader keeps order.
        c.putrequest(method, path, skip_accept_encoding=True)
        for k, v in h.items():
            c.putheader(k, v)
        data = body.encode() if isinstance(body, str) else body
        if data is not None:
            c.putheader("Content-Length", str(len(data)))
        t = time.perf_counter()
        c.endheaders(data)
        r = c.getresponse()
        payload = r.read()
        dt = time.perf_counter() - t
        c.close()
        return r.status, dict(r.getheaders()), payload, dt

    def session(self, path, version):
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": version, "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}}}
        st, h, body, _ = self.request("POST", path, json.dumps(init))
        if st != 200:
            raise RuntimeError(f"initialize: {st} {body[:200]!r}")
        sid = h.get("Mcp-Session-Id") or h.get("mcp-session-id")
        hdrs = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": version}
        self.request("POST", path, json.dumps({"jsonrpc": "2.0",
                                               "method": "notifications/initialized"}), hdrs)
        return hdrs


def modern_call(name, arguments, extra_headers=None):
    params = {"name": name, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}}
    h = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    h.update(extra_headers or {})
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}), h


# ---- the measurements ---------------------------------------------------------------------------

def expect(st, want, what, body):
    if st != want:
        raise RuntimeError(f"{what}: HTTP {st}, expected {want}: {body[:300]!r}")


def m_batch_refused(cl, n):
    body = json.dumps([{"jsonrpc": "2.0", "id": i + 1, "method": "ping"} for i in range(n)])
    hdrs = cl.session("/bench-refuse", "2025-03-26")
    st, _, out, dt = cl.request("POST", "/bench-refuse", body, hdrs)
    expect(st, 413, "batch-refused", out)
    return dt


def m_batch_served(cl, n):
    body = json.dumps([{"jsonrpc": "2.0", "id": i + 1, "method": "ping"} for i in range(n)])
    hdrs = cl.session("/bench", "2025-03-26")
    st, _, out, dt = cl.request("POST", "/bench", body, hdrs)
    expect(st, 200, "batch-served", out)
    if out.count(b'"result"') != n:
        raise RuntimeError("batch-served: not every request was answered")
    return dt


def m_object_keys(cl, n):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping",
                       "params": {f"k{i}": i for i in range(n)}})
    hdrs = cl.session("/bench", "2025-06-18")
    st, _, out, dt = cl.request("POST", "/bench", body, hdrs)
    expect(st, 200, "object-keys", out)
    return dt


def m_headers(cl, n):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    hdrs = cl.session("/bench", "2025-06-18")
    hdrs.update({f"X-Bench-{i}": "v" for i in range(n)})
    st, _, out, dt = cl.request("POST", "/bench", body, hdrs)
    expect(st, 200, "headers", out)
    return dt


def m_tools_list(cl, n):
    STATE["tools"] = n
    hdrs = cl.session("/bench", "2025-06-18")
    st, _, out, dt = cl.request("POST", "/bench", json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), hdrs)
    expect(st, 200, "tools-list", out)
    return dt


def m_bridge_tools(cl, n):
    STATE["tools"], STATE["params"] = n, 1
    time.sleep(1.1)   # the list's age is counted in whole seconds: read again only after one
    body, h = modern_call("t0", {})
    st, _, out, dt = cl.request("POST", "/bench", body, h)
    expect(st, 200, "bridge-tools", out)
    return dt


def m_mcp_params(cl, n):
    STATE["tools"], STATE["params"] = 1, n
    time.sleep(1.1)
    body, h = modern_call("wide", {f"p{i}": "v" for i in range(n)},
                          {f"Mcp-Param-P{i}": "v" for i in range(n)})
    st, _, out, dt = cl.request("POST", "/bench", body, h)
    expect(st, 200, "mcp-params", out)
    return dt


def m_replay(cl, n):
    STATE["events"] = n
    hdrs = cl.session("/bench", "2025-06-18")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "stream", "arguments": {}}})
    st, _, out, _ = cl.request("POST", "/bench", body, hdrs)
    expect(st, 200, "replay (the stream)", out)
    first = next(line[4:] for line in out.decode().splitlines() if line.startswith("id: "))
    got = dict(hdrs, **{"Last-Event-ID": first.strip()})
    st, _, out, dt = cl.request("GET", "/bench", None, got)
    expect(st, 200, "replay", out)
    if out.count(b"\ndata: ") + out.startswith(b"data: ") < n - 1:
        raise RuntimeError(f"replay: {out.count(b'data: ')} events replayed, expected {n - 1}")
    return dt


# name, measurement, largest N (None: every size), the N whose time is the fixed cost
MEASUREMENTS = [
    ("batch-refused", m_batch_refused, None, 51),
    ("batch-served", m_batch_served, None, 1),
    ("object-keys", m_object_keys, None, 1),
    ("headers", m_headers, 10000, 1),
    ("tools-list", m_tools_list, None, 1),
    ("bridge-tools", m_bridge_tools, None, 1),
    ("mcp-params", m_mcp_params, 10000, 1),
    ("replay", m_replay, None, 2),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--tree", default=os.path.dirname(BENCH))
    ap.add_argument("--module", help="the mod_mcp.so to load (default: the tree's)")
    ap.add_argument("--sizes", default="100,1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated input names")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    only = set(filter(None, args.only.split(",")))

    def reps(n):
        return args.repeat * min(10, max(1, 1000 // max(n, 1)))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = f"http://127.0.0.1:{server.server_address[1]}/mcp"

    work = tempfile.mkdtemp(prefix="mcp-input-costs.", dir="/tmp")
    os.chmod(work, 0o755)
    conf = os.path.join(work, "bench.conf")
    with open(conf, "w") as f:
        f.write(CONF)
    stack = os.path.join(args.tree, "tests", "stack")
    sdir = os.path.join(work, "stack")
    failed = 0
    try:
        subprocess.run([stack, "up", "--dir", sdir, "--backend", backend, "--conf", conf,
                        "--module", args.module
                        or os.path.join(args.tree, "mod_mcp/.libs/mod_mcp.so")],
                       check=True, stdout=subprocess.DEVNULL)
        env = read_env(os.path.join(sdir, "stack.env"))
        host, port = env["MCP_URL"].split("//")[1].split("/")[0].split(":")
        cl = Client((host, int(port)))
        print(f"# bench/input_costs.py: {args.tree}, best of {args.repeat}; each cell: ms for "
              "the request / us per element, (t(N) - t(N0)) / (N - N0), N0 = 1 (replay 2, "
              "batch-refused 51); ratio: last / first non-zero")
        print("%-14s" % "input" + "".join("%22s" % f"N={n:,}" for n in sizes) + "%8s" % "ratio")
        for name, fn, cap, b in MEASUREMENTS:
            if only and name not in only:
                continue
            cells, per = [], []
            try:
                base = min(fn(cl, b) for _ in range(reps(b)))
            except Exception as e:   # noqa: BLE001 — a row that fails says so, the rest run
                print(f"# {name} N={b}: {e}", file=sys.stderr)
                failed += 1
                continue
            for n in sizes:
                if cap and n > cap:
                    cells.append("%22s" % "-")
                    continue
                try:
                    best = min(fn(cl, n) for _ in range(reps(n)))
                except Exception as e:   # noqa: BLE001
                    print(f"# {name} N={n}: {e}", file=sys.stderr)
                    cells.append("%22s" % "failed")
                    failed += 1
                    continue
                marginal = max(best - base, 0) * 1e6 / (n - b)
                per.append(marginal)
                cells.append("%22s" % f"{best * 1e3:.1f} / {marginal:.2f}")
            nonzero = [x for x in per if x > 0]
            ratio = ("%8.2f" % (per[-1] / nonzero[0]) if len(per) > 1 and nonzero
                     else "%8s" % "-")
            print("%-14s" % name + "".join(cells) + ratio, flush=True)
    finally:
        subprocess.run([stack, "down", "--dir", sdir], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        server.shutdown()
        if not args.keep and not failed:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
