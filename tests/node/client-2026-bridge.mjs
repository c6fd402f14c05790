// client-2026-bridge.mjs — the TypeScript SDK v2 client (@modelcontextprotocol/client 2.4.0)
// pinned to 2026-07-28, for mod_mcp's era bridge: a 2026-07-28 client in front of a 2025-era
// backend (server-everything in 2025 mode, or the C test backend). Usable against any URL.
//
// Usage: NODE22 client-2026-bridge.mjs MCP_URL [everything|c-backend|modern-backend|auto]
//   The profile picks the backend's tools (auto, the default: from tools/list):
//     everything  progress: trigger-long-running-operation; sampling: trigger-sampling-request;
//                 slow call: trigger-long-running-operation (long)
//     c-backend   progress: test_tool_with_progress; sampling: test_input_required_result_sampling;
//                 slow call: slow (and session_info, to see the backend's cancellation)
//     modern-backend  tests/node/modern-backend.mjs, a 2026-07-28 backend (no bridge): to check
//                 this script through mod_mcp's native stateless path
//
// Steps, each printed as one JSON line on stdout as it ends ({"step", "ok", ...details}):
//   connect     server/discover, pinned to 2026-07-28 (no fallback)
//   tools/list  the tools, and the profile chosen
//   progress    a tools/call with a progressToken: progress notifications, increasing, then the
//               result
//   sampling    a tools/call whose backend asks for sampling: through the bridge an
//               InputRequiredResult round, which the SDK fulfils itself (its input-required
//               driver calls our sampling handler and retries with inputResponses and the
//               requestState); the result carries our sampled text
//   cancel      a slow call aborted after two progress notifications (the SDK closes the
//               response: in this revision that is the cancellation); the call must not
//               complete, and the client must still work (c-backend: the backend must have
//               got notifications/cancelled, per session_info)
//   done        ok: whether every step passed
// Exits 0 only when every step passed. Diagnostics go to stderr.
//
// Test-only code: run with the node 22 that scripts/node-deps prints.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

import { deadline, errText, requireNode22 } from "./lib.mjs";

requireNode22("client-2026-bridge.mjs");
const [url, profileArg = "auto"] = process.argv.slice(2);
if (!url || !/^https?:\/\//.test(url) || !["auto", "everything", "c-backend", "modern-backend"].includes(profileArg)) {
    process.stderr.write("usage: node client-2026-bridge.mjs MCP_URL [everything|c-backend|modern-backend|auto]\n");
    process.exit(2);
}

const SAMPLED_TEXT = "sampled by the 2026-07-28 bridge client";
const PROFILES = {
    everything: {
        marker: "trigger-long-running-operation",
        progress: { name: "trigger-long-running-operation", arguments: { duration: 1.2, steps: 4 } },
        sampling: { name: "trigger-sampling-request", arguments: { prompt: "hello bridge", maxTokens: 42 } },
        slow: { name: "trigger-long-running-operation", arguments: { duration: 30, steps: 60 } },
    },
    // tests/node/modern-backend.mjs (2026-07-28 natively): checks the script itself, with no
    // bridge involved.
    "modern-backend": {
        marker: "cancelled_calls",
        progress: { name: "test_tool_with_progress", arguments: {} },
        sampling: { name: "test_input_required_result_sampling", arguments: {} },
        slow: { name: "slow_count", arguments: { count: 100, ms: 100 } },
        cancelled: async (client) => JSON.parse(text(await client.callTool({ name: "cancelled_calls", arguments: {} })))
            .length,
    },
    "c-backend": {
        marker: "test_input_required_result_sampling",
        progress: { name: "test_tool_with_progress", arguments: {} },
        sampling: { name: "test_input_required_result_sampling", arguments: {} },
        slow: { name: "slow", arguments: { count: 100, interval_ms: 100 } },
        cancelled: async (client) => JSON.parse(text(await client.callTool({ name: "session_info", arguments: {} })))
            .cancelled.length,
    },
};

const text = (result) => result?.content?.find((c) => c.type === "text")?.text;
// The SDK's input-required driver reports its rounds through onprogress as well.
const isDriverRound = (p) => typeof p.message === "string" && p.message.startsWith("Fulfilling input required");

let allOk = true;
function step(name, ok, details = {}) {
    allOk &&= Boolean(ok);
    process.stdout.write(JSON.stringify({ step: name, ok: Boolean(ok), ...details }) + "\n");
    return Boolean(ok);
}

async function attempt(name, fn) {
    try {
        return await fn();
    } catch (err) {
        if (err?.stack) process.stderr.write(`client-2026-bridge.mjs: ${name}: ${err.stack}\n`);
        step(name, false, { error: errText(err) });
        return undefined;
    }
}

async function main() {
    const client = new Client({ name: "mod_mcp-client-2026-bridge", version: "1.0.0" }, {
        capabilities: { sampling: {}, elicitation: {}, roots: {} },
        versionNegotiation: { mode: { pin: "2026-07-28" } },
    });
    const sampled = [];
    client.setRequestHandler("sampling/createMessage", async (req) => {
        sampled.push({ prompt: req.params.messages?.[0]?.content?.text, maxTokens: req.params.maxTokens });
        return { role: "assistant", model: "test-model", stopReason: "endTurn",
                 content: { type: "text", text: SAMPLED_TEXT } };
    });
    client.setRequestHandler("elicitation/create", async () => ({ action: "accept", content: {} }));
    client.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file:///bridge", name: "bridge" }] }));

    const connected = await attempt("connect", async () => {
        await deadline(client.connect(new StreamableHTTPClientTransport(new URL(url))), 15000, "connect");
        const version = client.getNegotiatedProtocolVersion();
        return step("connect", version === "2026-07-28", { protocolVersion: version,
                                                           server: client.getServerVersion?.() });
    });
    if (!connected) return;

    const profile = await attempt("tools/list", async () => {
        const names = (await deadline(client.listTools(), 15000, "tools/list")).tools.map((t) => t.name);
        const chosen = profileArg !== "auto" ? profileArg
            : Object.keys(PROFILES).find((p) => names.includes(PROFILES[p].marker));
        const p = PROFILES[chosen];
        const ok = p && [p.progress.name, p.sampling.name, p.slow.name].every((n) => names.includes(n));
        step("tools/list", ok, { profile: chosen ?? null, tools: names.length, sample: names.slice(0, 12) });
        return ok ? p : undefined;
    });
    if (!profile) return;

    await attempt("progress", async () => {
        const progress = [];
        const r = await deadline(client.callTool(profile.progress, {
            onprogress: (p) => { if (!isDriverRound(p)) progress.push(p.progress); },
        }), 30000, "progress call");
        const increasing = progress.every((v, i) => i === 0 || v > progress[i - 1]);
        step("progress", progress.length >= 3 && increasing && text(r) !== undefined && !r.isError,
             { progress, result: text(r) });
    });

    await attempt("sampling", async () => {
        const rounds = [];
        const before = sampled.length;
        const r = await deadline(client.callTool(profile.sampling, {
            onprogress: (p) => { if (isDriverRound(p)) rounds.push(p.progress); },
        }), 30000, "sampling call");
        const handled = sampled.length - before;
        step("sampling", handled === 1 && (text(r) ?? "").includes(SAMPLED_TEXT) && !r.isError,
             { handlerCalls: handled, request: sampled[sampled.length - 1], inputRequiredRounds: rounds.length,
               result: text(r) });
    });

    await attempt("cancel", async () => {
        const before = profile.cancelled ? await profile.cancelled(client) : undefined;
        const abort = new AbortController();
        let seen = 0;
        let outcome;
        const started = Date.now();
        try {
            const r = await deadline(client.callTool(profile.slow, {
                signal: abort.signal,
                onprogress: (p) => { if (!isDriverRound(p) && ++seen === 2) abort.abort(); },
            }), 20000, "slow call");
            outcome = { completed: text(r) };
        } catch (err) {
            outcome = errText(err);
        }
        const details = { progressBeforeAbort: seen, outcome, ms: Date.now() - started };
        let ok = seen >= 2 && typeof outcome === "string";
        // The client goes on working after the abort.
        const after = await deadline(client.listTools(), 15000, "tools/list after the abort");
        details.usableAfter = after.tools.length > 0;
        ok &&= details.usableAfter;
        if (profile.cancelled) {
            let now = before;
            for (const end = Date.now() + 5000; now === before && Date.now() < end;) {
                now = await profile.cancelled(client);
                if (now === before) await new Promise((res) => setTimeout(res, 100));
            }
            details.backendCancelled = now - before;
            ok &&= now > before;
        }
        step("cancel", ok, details);
    });
    await client.close().catch(() => {});
}

const guard = setTimeout(() => {
    step("done", false, { error: "overall deadline of 120 s passed" });
    process.exit(3);
}, 120000);
await main().catch((err) => step("fatal", false, { error: errText(err) }));
clearTimeout(guard);
step("done", allOk);
process.exit(allOk ? 0 : 1);
