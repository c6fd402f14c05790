// bridge-2026.mjs — the TypeScript SDK v2 client (@modelcontextprotocol/client 2.4.0) pinned to
// 2026-07-28, through mod_mcp's era bridge, with @modelcontextprotocol/server-everything (a
// 2025-era server) behind it (tests/integration/test_node_peers.py).
//
// Usage: NODE22 bridge-2026.mjs MCP_URL [MCP_URL_2]
//
// Connects (server/discover, answered by the gateway from the backend's InitializeResult), lists
// tools, calls echo, trigger-long-running-operation (progress notifications),
// trigger-sampling-request (server-everything's sampling/createMessage becomes an
// InputRequiredResult; the SDK calls our handler and retries with the requestState), and aborts
// a long-running call after its first progress (the SDK closes the response: the gateway sends
// notifications/cancelled upstream; the Python side checks the stored rows).
//
// With a second URL (another httpd instance of the same stack), the transport's fetch sends every
// POST whose JSON body carries params.requestState (the input-required retry) there instead: the
// sampling round starts on the first instance and completes on the second.
//
// Prints a JSON summary on stdout; exits 0 only when every check passed.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

import { deadline, errText, requireNode22, runMain } from "./lib.mjs";

requireNode22("bridge-2026.mjs");
const [url, url2] = process.argv.slice(2);
if (!url || !/^https?:\/\//.test(url) || (url2 !== undefined && !/^https?:\/\//.test(url2))) {
    process.stderr.write("usage: node bridge-2026.mjs MCP_URL [MCP_URL_2]\n");
    process.exit(2);
}

// The transport's fetch: a POST carrying params.requestState goes to url2 (when given).
const retries = [];
const routingFetch = async (target, init) => {
    let requestState;
    if (url2 && init?.method === "POST" && typeof init.body === "string") {
        try {
            requestState = JSON.parse(init.body)?.params?.requestState;
        } catch {
            requestState = undefined;
        }
    }
    if (typeof requestState !== "string")
        return fetch(target, init);
    const response = await fetch(url2, init);
    retries.push({ to: url2, method: JSON.parse(init.body).method, status: response.status });
    return response;
};
const text = (result) => result?.content?.find((c) => c.type === "text")?.text;
const SAMPLED = "bridged sampling answer";

await runMain("bridge-2026.mjs", 60000, async (checks, summary) => {
    const client = new Client({ name: "mod_mcp-bridge-2026", version: "1.0.0" }, {
        capabilities: { sampling: {} },
        versionNegotiation: { mode: { pin: "2026-07-28" } },
    });
    const sampled = [];
    client.setRequestHandler("sampling/createMessage", async (req) => {
        sampled.push(req.params.messages?.[0]?.content?.text);
        return { model: "mod_mcp-bridge-model", role: "assistant",
                 content: { type: "text", text: SAMPLED }, stopReason: "endTurn" };
    });

    await deadline(client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: routingFetch })), 15000, "connect");
    summary.protocolVersion = client.getNegotiatedProtocolVersion();
    checks.equal("negotiated 2026-07-28", summary.protocolVersion, "2026-07-28");
    summary.serverInfo = client.getServerVersion?.();
    checks.check("serverInfo from the backend's initialize", summary.serverInfo?.name === "mcp-servers/everything",
                 summary.serverInfo);

    const tools = (await client.listTools()).tools.map((t) => t.name);
    checks.check("tools/list through the bridge",
                 ["echo", "trigger-long-running-operation", "trigger-sampling-request"].every((n) => tools.includes(n)),
                 tools);

    const echo = await client.callTool({ name: "echo", arguments: { message: "over the bridge" } });
    checks.check("echo", (text(echo) ?? "").includes("over the bridge"), echo);

    const progress = [];
    const long = await client.callTool({ name: "trigger-long-running-operation", arguments: { duration: 0.8, steps: 4 } },
                                       { onprogress: (p) => progress.push(p.progress) });
    checks.equal("progress notifications relayed", progress, [1, 2, 3, 4]);
    checks.check("long-running result", /completed/.test(text(long) ?? ""), long);

    const sampling = await deadline(client.callTool({ name: "trigger-sampling-request",
                                                      arguments: { prompt: "hello bridge", maxTokens: 21 } }),
                                    15000, "sampling round");
    summary.sampled = sampled;
    checks.equal("sampling: one request reached the handler (an input-required round)", sampled.length, 1);
    checks.check("sampling: the tool result holds our answer", (text(sampling) ?? "").includes(SAMPLED), sampling);
    summary.retries = retries.slice();
    if (url2)
        checks.equal("sampling: the retry (requestState) went to the second instance and succeeded",
                     retries, [{ to: url2, method: "tools/call", status: 200 }]);

    const abort = new AbortController();
    let seen = 0;
    const cut = client.callTool({ name: "trigger-long-running-operation", arguments: { duration: 10, steps: 20 } }, {
        signal: abort.signal,
        onprogress: () => { if (++seen === 1) abort.abort(); },
    });
    let outcome;
    try {
        outcome = await deadline(cut, 15000, "the aborted call");
    } catch (err) {
        outcome = errText(err);
    }
    summary.aborted = { seen, outcome };
    checks.check("the aborted call did not complete", seen >= 1 && typeof outcome === "string", summary.aborted);
    await client.close();
});
