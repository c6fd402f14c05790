// modern-backend.mjs — a backend MCP server of both eras, built on the TypeScript SDK v2
// (@modelcontextprotocol/server 2.4.0, createMcpHandler): 2026-07-28 requests statelessly,
// 2025-era traffic through the SDK's stateless legacy fallback. It carries the fixture tools,
// resources and prompts the conformance suite's scenarios call (test_simple_text, ...), plus
// what the gateway's own tests need:
//   slow_count {count, ms}   sends `count` progress notifications `ms` apart, then answers;
//                            when its request is aborted (the gateway closed the connection:
//                            a cancellation) it records the progress token;
//   cancelled_calls          the progress tokens of the slow_count calls that were aborted;
//   echo_headers             the mcp-* headers of the HTTP request that carried the call;
//   confirm_action {action}  multi-round trip: answers InputRequiredResult (an elicitation and a
//                            signed requestState) until the retry carries the answer.
//
//   test_sampling, test_elicitation, test_elicitation_sep1034_defaults,
//   test_elicitation_sep1330_enums
//                            the 2025 conformance suite's server->client fixtures, written the
//                            2026 way (InputRequiredResult), for the gateway's era shim;
//   legacy_seen              how many HTTP requests came without the 2026-07-28
//                            MCP-Protocol-Version header (a 2026-only backend must see none
//                            from the gateway's era shim).
// Each server/discover request is logged on stdout as a line "server/discover" (the gateway's
// probes for a backend's eras are counted from it).
//
// Usage: NODE22 modern-backend.mjs PORT [--host 127.0.0.1] [--modern-only]   (PORT 0: any; the
// chosen port is printed as "listening <port>" on stdout). --modern-only: a 2026-only server,
// the way the SDK makes one (createMcpHandler's `legacy: 'reject'`): initialize, 2025-era GET
// and DELETE are refused.
//
// Test-only code: run with the node 22 that scripts/node-deps prints.

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { AsyncLocalStorage } from "node:async_hooks";
import http from "node:http";
import { Readable } from "node:stream";

import {
    McpServer, MissingRequiredClientCapabilityError, ResourceTemplate, acceptedContent, createMcpHandler,
    fromJsonSchema, inputRequired,
} from "@modelcontextprotocol/server";
import * as z from "zod";

const IMAGE = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const AUDIO = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";
const sleep = (ms, signal) => new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(t); reject(new Error("aborted")); }, { once: true });
});
const text = (t) => ({ content: [{ type: "text", text: t }] });

const cancelled = [];
let legacySeen = 0;   // HTTP requests without the 2026-07-28 version header
const httpHeaders = new AsyncLocalStorage();   // the headers of the HTTP request being served

// Multi-round-trip state: signed (HMAC) so that a tampered requestState is refused.
const KEY = randomBytes(32);
const b64u = (b) => Buffer.from(b).toString("base64url");
const mac = (body) => createHmac("sha256", KEY).update(body).digest();
function mint(payload) {
    const body = b64u(JSON.stringify(payload));
    return `${body}.${b64u(mac(body))}`;
}
function verify(state) {
    if (typeof state !== "string" || !state.includes(".")) throw new Error("requestState is missing or malformed");
    const [body, sig] = state.split(".");
    const want = mac(body), got = Buffer.from(sig, "base64url");
    if (got.length !== want.length || !timingSafeEqual(got, want)) throw new Error("requestState failed its integrity check");
    return JSON.parse(Buffer.from(body, "base64url").toString());
}
const ask = (message, props) => inputRequired.elicit({
    message, requestedSchema: { type: "object", properties: props, required: Object.keys(props) },
});
const answered = (ctx, key) => {
    const v = ctx.mcpReq.inputResponses?.[key];
    return v && typeof v === "object" && !Array.isArray(v) ? v : undefined;
};
const elicited = (ctx, key) => {
    const v = answered(ctx, key);
    return v && v.action === "accept" && v.content && typeof v.content === "object" ? v.content : undefined;
};

function build() {
    const server = new McpServer(
        { name: "mod_mcp-modern-backend", version: "1.0.0" },
        {
            capabilities: {
                tools: { listChanged: true },
                resources: { subscribe: true, listChanged: true },
                prompts: { listChanged: true },
                logging: {},
                completions: {},
            },
            instructions: "Test backend of mod_mcp (both protocol eras).",
            // A requestState that fails its HMAC is refused before any handler runs (-32602);
            // handlers read the verified payload through ctx.mcpReq.requestState().
            requestState: { verify: (state) => verify(state) },
        },
    );

    // ---- the conformance suite's fixtures ----
    server.registerTool("test_simple_text", { description: "simple text" },
        async () => text("This is a simple text response for testing."));
    server.registerTool("test_image_content", { description: "image" },
        async () => ({ content: [{ type: "image", data: IMAGE, mimeType: "image/png" }] }));
    server.registerTool("test_audio_content", { description: "audio" },
        async () => ({ content: [{ type: "audio", data: AUDIO, mimeType: "audio/wav" }] }));
    server.registerTool("test_embedded_resource", { description: "embedded resource" }, async () => ({
        content: [{ type: "resource", resource: { uri: "test://embedded-resource", mimeType: "text/plain",
                                                  text: "This is an embedded resource content." } }],
    }));
    server.registerTool("test_multiple_content_types", { description: "text, image, resource" }, async () => ({
        content: [
            { type: "text", text: "Multiple content types test:" },
            { type: "image", data: IMAGE, mimeType: "image/png" },
            { type: "resource", resource: { uri: "test://mixed-content-resource", mimeType: "application/json",
                                            text: JSON.stringify({ test: "data", value: 123 }) } },
        ],
    }));
    server.registerTool("test_tool_with_logging", { description: "logs", inputSchema: z.object({}) },
        async (_args, ctx) => {
            for (const data of ["Tool execution started", "Tool processing data", "Tool execution completed"]) {
                await ctx.mcpReq.notify({ method: "notifications/message", params: { level: "info", data } });
                await sleep(50);
            }
            return text("Tool with logging executed successfully");
        });
    server.registerTool("test_tool_with_progress", { description: "progress", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const progressToken = ctx.mcpReq._meta?.progressToken ?? 0;
            for (const progress of [0, 50, 100]) {
                await ctx.mcpReq.notify({ method: "notifications/progress",
                                          params: { progressToken, progress, total: 100,
                                                    message: `Completed step ${progress} of 100` } });
                if (progress !== 100) await sleep(50);
            }
            return text(String(progressToken));
        });
    server.registerTool("test_error_handling", { description: "fails" }, async () => {
        throw new Error("This tool intentionally returns an error for testing");
    });
    server.registerTool("json_schema_2020_12_tool", {
        description: "JSON Schema 2020-12",
        inputSchema: z.object({ name: z.string().optional(),
                                address: z.object({ street: z.string().optional(), city: z.string().optional() }).optional() }),
    }, async (args) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`));

    server.registerResource("static-text", "test://static-text",
        { title: "Static Text Resource", description: "static text", mimeType: "text/plain" },
        async () => ({ contents: [{ uri: "test://static-text", mimeType: "text/plain",
                                    text: "This is the content of the static text resource." }] }));
    server.registerResource("static-binary", "test://static-binary",
        { title: "Static Binary Resource", description: "static binary", mimeType: "image/png" },
        async () => ({ contents: [{ uri: "test://static-binary", mimeType: "image/png", blob: IMAGE }] }));
    server.registerResource("template", new ResourceTemplate("test://template/{id}/data", { list: undefined }),
        { title: "Resource Template", description: "template", mimeType: "application/json" },
        async (uri, variables) => ({ contents: [{ uri: uri.toString(), mimeType: "application/json",
            text: JSON.stringify({ id: variables.id, templateTest: true, data: `Data for ID: ${variables.id}` }) }] }));
    server.registerResource("watched-resource", "test://watched-resource",
        { title: "Watched Resource", description: "watched", mimeType: "text/plain" },
        async () => ({ contents: [{ uri: "test://watched-resource", mimeType: "text/plain", text: "Watched resource content" }] }));

    server.registerPrompt("test_simple_prompt", { title: "Simple Test Prompt", description: "simple" },
        async () => ({ messages: [{ role: "user", content: { type: "text", text: "This is a simple prompt for testing." } }] }));
    server.registerPrompt("test_prompt_with_arguments", {
        title: "Prompt With Arguments", description: "arguments",
        argsSchema: z.object({ arg1: z.string().describe("First test argument"), arg2: z.string().describe("Second test argument") }),
    }, async (args) => ({ messages: [{ role: "user", content: { type: "text",
        text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` } }] }));
    server.registerPrompt("test_prompt_with_embedded_resource", {
        title: "Prompt With Embedded Resource", description: "embedded resource",
        argsSchema: z.object({ resourceUri: z.string().describe("URI of the resource to embed") }),
    }, async (args) => ({ messages: [
        { role: "user", content: { type: "resource", resource: { uri: args.resourceUri, mimeType: "text/plain",
                                                                 text: "Embedded resource content for testing." } } },
        { role: "user", content: { type: "text", text: "Please process the embedded resource above." } },
    ] }));
    server.registerPrompt("test_prompt_with_image", { title: "Prompt With Image", description: "image" },
        async () => ({ messages: [
            { role: "user", content: { type: "image", data: IMAGE, mimeType: "image/png" } },
            { role: "user", content: { type: "text", text: "Please analyze the image above." } },
        ] }));
    server.server.setRequestHandler("completion/complete", async () => ({ completion: { values: [], total: 0, hasMore: false } }));

    // ---- 2026-07-28 diagnostics and multi-round trips (the suite's fixture names) ----
    server.registerTool("test_missing_capability", { description: "needs the sampling capability",
                                                    inputSchema: z.object({}) },
        async (_args, ctx) => {
            if (answered(ctx, "capital")) return text("sampled");
            // Asking a client that did not declare sampling makes the SDK answer -32021.
            return inputRequired({ inputRequests: { capital: inputRequired.createMessage({
                messages: [{ role: "user", content: { type: "text", text: "Capital of France?" } }], maxTokens: 50 }) } });
        });
    server.registerTool("test_streaming_elicitation", { description: "progress, then an input request", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const progressToken = ctx.mcpReq._meta?.progressToken;
            if (progressToken !== undefined) {
                await ctx.mcpReq.notify({ method: "notifications/progress", params: { progressToken, progress: 1, total: 2 } });
            }
            if (elicited(ctx, "answer")) return text("thanks");
            return inputRequired({ inputRequests: { answer: ask("Anything to add?", { note: { type: "string" } }) } });
        });
    server.registerTool("test_logging_tool", { description: "logs only when the request's _meta asks for it", inputSchema: z.object({}) },
        async (_args, ctx) => {
            await ctx.mcpReq.log("info", "test_logging_tool ran");
            return text("logged (if asked to)");
        });
    server.registerTool("test_trigger_tool_change", { description: "announces a changed tool list" },
        async () => { handler.notify.toolsChanged(); return text("tools changed"); });
    server.registerTool("test_trigger_prompt_change", { description: "announces a changed prompt list" },
        async () => { handler.notify.promptsChanged(); return text("prompts changed"); });

    server.registerTool("test_input_required_result_elicitation", { description: "MRTR: elicitation", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const got = elicited(ctx, "user_name");
            if (got && typeof got.name === "string") return text(`Hello, ${got.name}!`);
            return inputRequired({ inputRequests: { user_name: ask("What is your name?", { name: { type: "string" } }) } });
        });
    server.registerTool("test_input_required_result_sampling", { description: "MRTR: sampling", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const got = answered(ctx, "capital");
            if (got) return text(`The model said: ${JSON.stringify(got.content ?? got)}`);
            return inputRequired({ inputRequests: { capital: inputRequired.createMessage({
                messages: [{ role: "user", content: { type: "text", text: "What is the capital of France?" } }],
                maxTokens: 50 }) } });
        });
    server.registerTool("test_input_required_result_list_roots", { description: "MRTR: roots", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const got = answered(ctx, "roots");
            if (got) return text(`roots: ${JSON.stringify(got.roots ?? [])}`);
            return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
        });
    const stateful = (name, rounds) => server.registerTool(name, { description: `MRTR: ${rounds.length} round(s) with requestState`,
                                                         inputSchema: z.object({}) },
        async (_args, ctx) => {
            const raw = ctx.mcpReq.requestState();   // verified and decoded (requestState.verify)
            const state = raw === undefined ? { round: 0, answers: {} } : raw;
            const round = rounds[state.round];
            const missing = Object.keys(round).filter((k) => !answered(ctx, k));
            if (raw === undefined || missing.length) {
                const requests = {};
                for (const k of (raw === undefined ? Object.keys(round) : missing)) requests[k] = round[k];
                return inputRequired({ inputRequests: requests, requestState: mint({ ...state, nonce: b64u(randomBytes(6)) }) });
            }
            for (const k of Object.keys(round)) state.answers[k] = answered(ctx, k);
            if (state.round + 1 < rounds.length) {
                const next = { round: state.round + 1, answers: state.answers, nonce: b64u(randomBytes(6)) };
                return inputRequired({ inputRequests: rounds[next.round], requestState: mint(next) });
            }
            return text(`done: ${JSON.stringify(state.answers)}`);
        });
    stateful("test_input_required_result_request_state", [{ confirm: ask("Proceed?", { ok: { type: "boolean" } }) }]);
    stateful("test_input_required_result_tampered_state", [{ confirm: ask("Proceed?", { ok: { type: "boolean" } }) }]);
    stateful("test_input_required_result_multiple_inputs", [{
        user_name: ask("What is your name?", { name: { type: "string" } }),
        capital: inputRequired.createMessage({ messages: [{ role: "user", content: { type: "text", text: "Capital of France?" } }], maxTokens: 50 }),
        roots: inputRequired.listRoots(),
    }]);
    stateful("test_input_required_result_multi_round", [
        { user_name: ask("What is your name?", { name: { type: "string" } }) },
        { color: ask("Favourite colour?", { color: { type: "string" } }) },
    ]);
    server.registerTool("test_input_required_result_capabilities", { description: "MRTR: only what the client can answer", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const caps = ctx.mcpReq.envelope?.["io.modelcontextprotocol/clientCapabilities"] ?? {};
            if (answered(ctx, "capital") || answered(ctx, "user_name")) return text("done");
            const requests = {};
            if (caps.sampling) requests.capital = inputRequired.createMessage({ messages: [{ role: "user", content: { type: "text", text: "Capital of France?" } }], maxTokens: 50 });
            if (caps.elicitation) requests.user_name = ask("What is your name?", { name: { type: "string" } });
            if (!Object.keys(requests).length) return text("the client can answer nothing: done without asking");
            return inputRequired({ inputRequests: requests });
        });
    server.registerPrompt("test_input_required_result_prompt", { title: "MRTR prompt", description: "asks before it answers" },
        async (...params) => {
            const ctx = params[params.length - 1];
            const got = elicited(ctx, "user_name");
            if (got) return { messages: [{ role: "user", content: { type: "text", text: `Write a poem for ${got.name}.` } }] };
            return inputRequired({ inputRequests: { user_name: ask("Whom is the poem for?", { name: { type: "string" } }) } });
        });

    // ---- the 2025 suite's server->client fixtures, written the 2026-07-28 way (input-required
    // rounds): what the era shim turns back into sampling/elicitation requests ----
    server.registerTool("test_sampling", { description: "asks the client's model (2025 suite)",
                                           inputSchema: z.object({ prompt: z.string() }) },
        async ({ prompt }, ctx) => {
            const got = answered(ctx, "sample");
            if (got) return text(`LLM response: ${got.content?.text ?? JSON.stringify(got.content)}`);
            return inputRequired({ inputRequests: { sample: inputRequired.createMessage({
                messages: [{ role: "user", content: { type: "text", text: prompt } }], maxTokens: 100 }) } });
        });
    server.registerTool("test_elicitation", { description: "asks the user (2025 suite)",
                                              inputSchema: z.object({ message: z.string() }) },
        async ({ message }, ctx) => {
            const got = answered(ctx, "info");
            if (got) return text(`User response: action=${got.action}, content=${JSON.stringify(got.content ?? {})}`);
            return inputRequired({ inputRequests: { info: ask(message, { username: { type: "string" },
                                                                          email: { type: "string" } }) } });
        });
    server.registerTool("test_elicitation_sep1034_defaults", { description: "defaults (SEP-1034)", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const got = answered(ctx, "defaults");
            if (got) return text(`Elicitation completed: action=${got.action}, content=${JSON.stringify(got.content ?? {})}`);
            return inputRequired({ inputRequests: { defaults: inputRequired.elicit({
                message: "Please review and update the form fields with defaults",
                requestedSchema: { type: "object", properties: {
                    name: { type: "string", description: "User name", default: "John Doe" },
                    age: { type: "integer", description: "User age", default: 30 },
                    score: { type: "number", description: "User score", default: 95.5 },
                    status: { type: "string", description: "User status", enum: ["active", "inactive", "pending"], default: "active" },
                    verified: { type: "boolean", description: "Verification status", default: true },
                }, required: [] } }) } });
        });
    server.registerTool("test_elicitation_sep1330_enums", { description: "enum variants (SEP-1330)", inputSchema: z.object({}) },
        async (_args, ctx) => {
            const got = answered(ctx, "enums");
            if (got) return text(`Elicitation completed: action=${got.action}, content=${JSON.stringify(got.content ?? {})}`);
            return inputRequired({ inputRequests: { enums: inputRequired.elicit({
                message: "Please select options from the enum fields",
                requestedSchema: { type: "object", properties: {
                    untitledSingle: { type: "string", description: "Select one option", enum: ["option1", "option2", "option3"] },
                    titledSingle: { type: "string", description: "Select one option with titles", oneOf: [
                        { const: "value1", title: "First Option" }, { const: "value2", title: "Second Option" },
                        { const: "value3", title: "Third Option" }] },
                    legacyEnum: { type: "string", description: "Select one option (legacy)", enum: ["opt1", "opt2", "opt3"],
                                  enumNames: ["Option One", "Option Two", "Option Three"] },
                    untitledMulti: { type: "array", description: "Select multiple options", minItems: 1, maxItems: 3,
                                     items: { type: "string", enum: ["option1", "option2", "option3"] } },
                    titledMulti: { type: "array", description: "Select multiple options with titles", minItems: 1, maxItems: 3,
                                   items: { anyOf: [{ const: "value1", title: "First Choice" }, { const: "value2", title: "Second Choice" },
                                                    { const: "value3", title: "Third Choice" }] } },
                }, required: [] } }) } });
        });

    // ---- the gateway's own tests ----
    server.registerTool("slow_count", {
        description: "progress every ms milliseconds, count times; records an abort",
        inputSchema: z.object({ count: z.number().int(), ms: z.number().int() }),
    }, async ({ count, ms }, ctx) => {
        const progressToken = ctx.mcpReq._meta?.progressToken ?? null;
        const signal = ctx.mcpReq.signal;
        try {
            for (let i = 1; i <= count; i++) {
                await sleep(ms, signal);
                if (progressToken !== null) {
                    await ctx.mcpReq.notify({ method: "notifications/progress",
                                              params: { progressToken, progress: i, total: count } });
                }
            }
        } catch (e) {
            cancelled.push(progressToken);
            throw e;
        }
        if (signal?.aborted) cancelled.push(progressToken);
        return text(`counted to ${count}`);
    });
    server.registerTool("echo_headers", { description: "the Mcp-* headers of the HTTP request that carried this call",
                                          inputSchema: z.object({}) },
        async () => {
            const h = httpHeaders.getStore() ?? {};
            return text(JSON.stringify(Object.fromEntries(Object.entries(h).filter(([k]) => k.startsWith("mcp-")))));
        });
    server.registerTool("legacy_seen", { description: "HTTP requests that came without MCP-Protocol-Version 2026-07-28" },
        async () => text(String(legacySeen)));
    server.registerTool("cancelled_calls", { description: "progress tokens of aborted slow_count calls" },
        async () => text(JSON.stringify(cancelled)));
    server.registerTool("confirm_action", {
        description: "asks for a confirmation (InputRequiredResult) before it acts",
        inputSchema: z.object({ action: z.string() }),
    }, async ({ action }, ctx) => {
        const answer = acceptedContent(ctx.mcpReq.inputResponses, "confirm");
        if (!answer) {
            return inputRequired({
                inputRequests: { confirm: inputRequired.elicit({
                    message: `Really ${action}?`,
                    requestedSchema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] },
                }) },
                requestState: mint({ pending: action }),
            });
        }
        return text(`${answer.ok ? "did" : "did not"} ${action} (state ${JSON.stringify(ctx.mcpReq.requestState())})`);
    });
    return server;
}

const args = process.argv.slice(2);
const modernOnly = args.includes("--modern-only");
const handler = createMcpHandler(() => build(), modernOnly ? { legacy: "reject" } : undefined);

async function bridge(req, res) {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    if (req.headers["mcp-protocol-version"] !== "2026-07-28") legacySeen++;
    if (req.headers["mcp-method"] === "server/discover") process.stdout.write("server/discover\n");
    const abort = new AbortController();
    // The gateway closing the connection before the answer is complete is a cancellation.
    res.on("close", () => { if (!res.writableFinished) abort.abort(); });
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
    const request = new Request(`http://${req.headers.host ?? "localhost"}${req.url}`, {
        method: req.method, headers, signal: abort.signal,
        body: chunks.length && req.method !== "GET" && req.method !== "HEAD" ? Buffer.concat(chunks) : undefined,
        duplex: "half",
    });
    const answer = await httpHeaders.run(req.headers, () => handler.fetch(request));
    res.statusCode = answer.status;
    for (const [k, v] of answer.headers.entries()) res.setHeader(k, v);
    if (answer.body) {
        const body = Readable.fromWeb(answer.body);
        body.on("error", () => res.destroy());
        res.on("close", () => body.destroy());
        body.pipe(res);
    } else {
        res.end();
    }
}

const port = Number(args[0] ?? 0);
const host = args.includes("--host") ? args[args.indexOf("--host") + 1] : "127.0.0.1";
const srv = http.createServer((req, res) => {
    bridge(req, res).catch((e) => {
        process.stderr.write(`bridge error: ${e?.stack ?? e}\n`);
        if (!res.headersSent) { res.statusCode = 500; }
        res.end();
    });
});
srv.listen(port, host, () => process.stdout.write(`listening ${srv.address().port}\n`));
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => { srv.close(); process.exit(0); });
