// client-2026.mjs — the TypeScript SDK v2 client (@modelcontextprotocol/client 2.4.0) through
// mod_mcp's stateless (2026-07-28) path, with tests/node/modern-backend.mjs behind it.
//
// Usage: NODE22 client-2026.mjs MCP_URL MODE [EXPECT]
//   MODE: 2026-07-28 (pinned) or auto (probe with server/discover, fall back to initialize);
//   EXPECT: the version the connection must end up with (default 2026-07-28). With 2025-11-25
//   (a gateway location whose backend serves the 2025 era only: -32022, then initialize) only
//   the connection and tools/list are checked.
//
// Connects (server/discover), lists tools, calls test_tool_with_progress (progress
// notifications), opens subscriptions/listen and sees a tools list change arrive on it, runs an
// input-required round (confirm_action: the client answers the elicitation, the SDK retries with
// the requestState), and cancels a slow_count call by aborting it (the SDK closes the response:
// in this revision that is the cancellation) and asks the backend whether it saw the abort.
//
// Prints a JSON summary on stdout; exits 0 only when every check passed.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

import { deadline, errText, requireNode22, runMain, waitFor } from "./lib.mjs";

requireNode22("client-2026.mjs");
const [url, mode, expect = "2026-07-28"] = process.argv.slice(2);
if (!url || !/^https?:\/\//.test(url) || !mode) {
    process.stderr.write("usage: node client-2026.mjs MCP_URL 2026-07-28|auto\n");
    process.exit(2);
}
const text = (result) => result?.content?.find((c) => c.type === "text")?.text;

await runMain("client-2026.mjs", 60000, async (checks, summary) => {
    const client = new Client({ name: "mod_mcp-client-2026", version: "1.0.0" }, {
        capabilities: { elicitation: {} },
        versionNegotiation: { mode: mode === "auto" ? "auto" : { pin: mode } },
    });
    let elicited = 0;
    client.setRequestHandler("elicitation/create", async () => {
        elicited++;
        return { action: "accept", content: { ok: true } };
    });
    let listChanged = 0;
    client.setNotificationHandler("notifications/tools/list_changed", async () => { listChanged++; });

    await deadline(client.connect(new StreamableHTTPClientTransport(new URL(url))), 15000, "connect");
    summary.protocolVersion = client.getNegotiatedProtocolVersion();
    checks.equal(`negotiated ${expect}`, summary.protocolVersion, expect);

    const tools = await client.listTools();
    if (expect !== "2026-07-28") {
        checks.check("tools/list after the fallback", tools.tools.length > 0, tools);
        await client.close();
        return;
    }
    const names = tools.tools.map((t) => t.name);
    checks.check("tools/list has the fixtures", ["slow_count", "confirm_action", "test_tool_with_progress"]
        .every((n) => names.includes(n)), names);

    const progress = [];
    const r = await client.callTool({ name: "test_tool_with_progress", arguments: {} },
                                    { onprogress: (p) => progress.push(p.progress) });
    checks.equal("progress notifications", progress, [0, 50, 100]);
    checks.check("tool result", text(r) !== undefined, r);

    const sub = await deadline(client.listen({ toolsListChanged: true }), 10000, "listen");
    await client.callTool({ name: "test_trigger_tool_change", arguments: {} });
    checks.check("tools/list_changed on the listen stream", await waitFor(() => listChanged > 0, 5000),
                 { listChanged });
    await sub.close();

    const confirmed = await client.callTool({ name: "confirm_action", arguments: { action: "deploy" } });
    checks.check("input-required round: elicitation answered", elicited === 1, { elicited });
    checks.check("input-required round: completed with the state", /^did deploy/.test(text(confirmed) ?? ""),
                 confirmed);

    const before = JSON.parse(text(await client.callTool({ name: "cancelled_calls", arguments: {} })));
    const abort = new AbortController();
    let seen = 0;
    const slow = client.callTool({ name: "slow_count", arguments: { count: 100, ms: 100 } }, {
        signal: abort.signal,
        onprogress: () => { if (++seen === 2) abort.abort(); },
    });
    let outcome;
    try {
        outcome = await deadline(slow, 15000, "slow_count");
    } catch (err) {
        outcome = errText(err);
    }
    checks.check("the aborted call did not complete", seen >= 2 && typeof outcome === "string", { seen, outcome });
    let sawAbort = false;
    for (const end = Date.now() + 5000; !sawAbort && Date.now() < end;) {
        const now = JSON.parse(text(await client.callTool({ name: "cancelled_calls", arguments: {} })));
        sawAbort = now.length > before.length;
        if (!sawAbort) await new Promise((res) => setTimeout(res, 100));
    }
    checks.check("the backend saw its request aborted (disconnect = cancellation)", sawAbort);
    await client.close();
});
