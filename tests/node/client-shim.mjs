// client-shim.mjs — the TypeScript SDK v1 client (@modelcontextprotocol/sdk, 2025 era only)
// through mod_mcp's era shim, in front of a 2026-only backend (modern-backend.mjs --modern-only).
//
// Usage: NODE22 client-shim.mjs MCP_URL
//
// It initializes (answered by the gateway from the backend's server/discover), opens the
// standalone GET stream (subscriptions/listen behind it) and receives a tools/list_changed
// notification there, lists the tools, calls one with progress, answers an elicitation request
// (an InputRequiredResult of the backend, turned into elicitation/create on the call's stream)
// and gets the retried call's result, pings, and terminates the session (DELETE).
//
// Prints a JSON summary on stdout; exits 0 only when every check passed.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

import { deadline, errText, makeRecordingFetch, requireNode22, runMain, waitFor } from "./lib.mjs";

requireNode22("client-shim.mjs");
const url = process.argv[2];
if (!url || !/^https?:\/\//.test(url)) {
    process.stderr.write("usage: node client-shim.mjs MCP_URL\n");
    process.exit(2);
}
const text = (result) => result?.content?.find((c) => c.type === "text")?.text;

await runMain("client-shim.mjs", 90000, async (checks, summary) => {
    const check = checks.check.bind(checks), equal = checks.equal.bind(checks);
    const rec = makeRecordingFetch();
    summary.http = rec.log;
    summary.transportErrors = [];

    const client = new Client({ name: "mod_mcp-shim-client", version: "1.0.0" },
                              { capabilities: { elicitation: {} } });
    const elicitations = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
        elicitations.push(req.params.message);
        return { action: "accept", content: { ok: true } };
    });
    const changed = [];
    client.setNotificationHandler(ToolListChangedNotificationSchema, (n) => changed.push(n));
    const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: rec.fetch });
    client.onerror = (err) => summary.transportErrors.push(errText(err));

    await deadline(client.connect(transport), 15000, "initialize");
    summary.sessionId = transport.sessionId;
    summary.serverInfo = client.getServerVersion();
    equal("initialize: negotiated protocol version", transport.protocolVersion, "2025-11-25");
    equal("initialize: the backend's serverInfo", client.getServerVersion()?.name, "mod_mcp-modern-backend");
    check("initialize: capabilities carried over", Boolean(client.getServerCapabilities()?.tools?.listChanged));
    const standalone = await waitFor(() => rec.log.find((e) => e.method === "GET" && !e.lastEventId && e.status), 10000);
    check("standalone GET stream: 200 text/event-stream",
          standalone?.status === 200 && standalone?.contentType?.startsWith("text/event-stream"), standalone);

    const tools = (await deadline(client.listTools(), 15000, "tools/list")).tools.map((t) => t.name);
    check("tools/list: has confirm_action", tools.includes("confirm_action"), tools);

    const progress = [];
    const p = await deadline(client.callTool({ name: "test_tool_with_progress", arguments: {} }, undefined,
                                             { timeout: 20000, onprogress: (x) => progress.push(x.progress) }),
                             25000, "test_tool_with_progress");
    equal("progress: three notifications", progress, [0, 50, 100]);
    check("progress: result", typeof text(p) === "string", p);

    const c = await deadline(client.callTool({ name: "confirm_action", arguments: { action: "deploy" } }, undefined,
                                             { timeout: 20000 }), 25000, "confirm_action");
    summary.confirm = text(c);
    equal("elicitation: the client was asked", elicitations, ["Really deploy?"]);
    check("elicitation: the retried call's result", text(c)?.startsWith("did deploy"), text(c));
    check("the result has no 2026-only fields", c.resultType === undefined && c._meta === undefined, c);

    await deadline(client.callTool({ name: "test_trigger_tool_change", arguments: {} }), 15000, "trigger");
    const got = await waitFor(() => changed.length > 0, 10000);
    check("standalone stream: tools/list_changed from subscriptions/listen", Boolean(got), changed);

    await deadline(client.ping(), 10000, "ping");
    await deadline(transport.terminateSession(), 10000, "DELETE");
    const del = rec.log.find((e) => e.method === "DELETE");
    equal("DELETE: 200", del?.status, 200);
    await client.close();
});
