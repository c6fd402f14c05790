// everything.mjs — the official MCP TypeScript SDK client against mod_mcp in front of
// @modelcontextprotocol/server-everything (its Streamable HTTP mode).
//
// Usage: NODE22 everything.mjs MCP_URL    (NODE22: the path scripts/node-deps prints)
//
// Initializes (with the sampling capability, so that the server registers its sampling tool),
// lists tools, prompts and resources, calls echo, get-sum, get-structured-content,
// trigger-long-running-operation (progress notifications), trigger-sampling-request (a
// sampling/createMessage answered here), turns simulated logging on to receive a message on
// the standalone GET stream, runs the long operation again with its response stream cut so
// that the SDK resumes it with Last-Event-ID, and terminates the session.
//
// Prints a JSON summary on stdout (with the gateway's session id and the stream ids); exits 0
// only when every check passed.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
    CreateMessageRequestSchema,
    LoggingMessageNotificationSchema,
    ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

import {
    callTool, deadline, errText, makeRecordingFetch, range, requireNode22, runMain, seqs, streamOf, text,
    waitFor,
} from "./lib.mjs";

requireNode22("everything.mjs");
const url = process.argv[2];
if (!url || !/^https?:\/\//.test(url)) {
    process.stderr.write("usage: node everything.mjs MCP_URL\n");
    process.exit(2);
}

const CLIENT_INFO = { name: "mod_mcp-node-everything", version: "1.0.0" };
const LONG = { duration: 1.2, steps: 4 };          // progress every 0.3 s
const RESUME = { duration: 3, steps: 6 };          // progress every 0.5 s; cut after two of them
const CUT_AFTER_EVENTS = 3;                         // priming + 2 progress notifications
const SAMPLED_TEXT = "sampled by the node test client";
const STANDALONE_WAIT_MS = 3000;

await runMain("everything.mjs", 120000, async (checks, summary) => {
    const check = checks.check.bind(checks);
    const equal = checks.equal.bind(checks);
    const rec = makeRecordingFetch();
    summary.url = url;
    summary.http = rec.log;
    summary.transportErrors = [];
    summary.streams = {};

    const client = new Client(CLIENT_INFO, { capabilities: { sampling: {} } });
    const samplingRequests = [];
    client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
        samplingRequests.push({
            prompt: req.params.messages?.[0]?.content?.text,
            maxTokens: req.params.maxTokens,
            systemPrompt: req.params.systemPrompt,
        });
        return {
            model: "mod_mcp-node-test-model",
            role: "assistant",
            content: { type: "text", text: SAMPLED_TEXT },
            stopReason: "endTurn",
        };
    });
    const logMessages = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logMessages.push(n.params));
    let listChanged = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => { listChanged++; });
    client.onerror = (err) => summary.transportErrors.push(errText(err));

    const transport = new StreamableHTTPClientTransport(new URL(url), {
        fetch: rec.fetch,
        reconnectionOptions: { initialReconnectionDelay: 200, maxReconnectionDelay: 2000,
            reconnectionDelayGrowFactor: 1.5, maxRetries: 5 },
    });

    // ---- initialize -------------------------------------------------------------------------
    await deadline(client.connect(transport), 15000, "initialize");
    const sessionId = transport.sessionId;
    summary.sessionId = sessionId;
    summary.protocolVersion = transport.protocolVersion;
    summary.serverInfo = client.getServerVersion();
    check("initialize: gateway issued an Mcp-Session-Id", typeof sessionId === "string" && sessionId.length >= 22,
        sessionId);
    equal("initialize: negotiated protocol version", transport.protocolVersion, "2025-11-25");
    equal("initialize: server is server-everything", summary.serverInfo?.name, "mcp-servers/everything");
    check("initialize: server instructions passed through", (client.getInstructions() || "").length > 0);
    // The SDK opens the standalone GET stream once notifications/initialized was accepted. The
    // server sends that stream's headers at once but no byte of body until it has something to
    // say (or its keep-alive, 15 s later); how long the gateway takes to answer the GET is
    // recorded (standaloneGet.headersMs; null: not within STANDALONE_WAIT_MS) and judged by the
    // pytest, not here.
    const getSent = await waitFor(() => rec.log.find((e) => e.method === "GET" && !e.lastEventId), 5000);
    check("standalone GET stream: the SDK asked for it", Boolean(getSent), rec.log);
    const standalone = await waitFor(() => getSent?.status && getSent, STANDALONE_WAIT_MS);
    summary.standaloneGet = { headersMs: standalone ? standalone.headersMs : null, waitedMs: STANDALONE_WAIT_MS };

    // ---- lists ----------------------------------------------------------------------------------
    // The server registers its capability-dependent tools (sampling) right after initialization.
    let tools = (await deadline(client.listTools(), 15000, "tools/list")).tools.map((t) => t.name);
    if (!tools.includes("trigger-sampling-request")) {
        await waitFor(() => listChanged > 0, 5000);
        tools = (await deadline(client.listTools(), 15000, "tools/list")).tools.map((t) => t.name);
    }
    summary.tools = tools;
    for (const t of ["echo", "get-sum", "get-structured-content", "trigger-long-running-operation",
                     "trigger-sampling-request", "toggle-simulated-logging"]) {
        check(`tools/list: has ${t}`, tools.includes(t), tools);
    }
    const prompts = (await deadline(client.listPrompts(), 15000, "prompts/list")).prompts.map((p) => p.name);
    summary.prompts = prompts;
    check("prompts/list: has simple-prompt", prompts.includes("simple-prompt"), prompts);
    const prompt = await deadline(client.getPrompt({ name: "simple-prompt" }), 15000, "prompts/get");
    check("prompts/get simple-prompt: a user message", prompt.messages?.[0]?.role === "user", prompt);
    const resources = (await deadline(client.listResources(), 15000, "resources/list")).resources;
    summary.resources = resources.length;
    check("resources/list: not empty", resources.length > 0);
    if (resources.length) {
        const read = await deadline(client.readResource({ uri: resources[0].uri }), 15000, "resources/read");
        check("resources/read: contents for the first resource",
            read.contents?.[0]?.uri === resources[0].uri, read.contents?.[0]?.uri);
    }

    // ---- simple tools ---------------------------------------------------------------------------
    const echo = await callTool(client, "echo", { message: "hello through httpd" });
    summary.echo = text(echo.result);
    equal("echo: result text", text(echo.result), "Echo: hello through httpd");
    check("echo: answered on a resumable stream (priming event id first)", /^\d+-1$/.test(echo.tokens[0] || ""),
        echo.tokens);
    const sum = await callTool(client, "get-sum", { a: 1234, b: 4321 });
    summary.getSum = text(sum.result);
    equal("get-sum: result text", text(sum.result), "The sum of 1234 and 4321 is 5555.");
    const sc = await callTool(client, "get-structured-content", { location: "Chicago" });
    summary.structured = sc.result.structuredContent;
    equal("get-structured-content: structuredContent (validated by the SDK against the outputSchema)",
        sc.result.structuredContent, { temperature: 36, conditions: "Light rain / drizzle", humidity: 82 });

    // ---- progress ----------------------------------------------------------------------------------
    const long = await callTool(client, "trigger-long-running-operation", LONG, { progress: true });
    summary.streams.long = long.stream;
    summary.long = { progress: long.progress, result: text(long.result), eventIds: long.tokens };
    equal(`long-running: progress 1..${LONG.steps} once each, in order`, long.progress.map((p) => p.progress),
        range(1, LONG.steps));
    check(`long-running: total ${LONG.steps} on every notification`,
        long.progress.every((p) => p.total === LONG.steps), long.progress);
    equal("long-running: result", text(long.result),
        `Long running operation completed. Duration: ${LONG.duration} seconds, Steps: ${LONG.steps}.`);
    equal("long-running: event ids contiguous (priming, progress, result)", seqs(long.tokens),
        range(1, LONG.steps + 2));

    // ---- sampling -------------------------------------------------------------------------------
    const sampling = await callTool(client, "trigger-sampling-request", { prompt: "hello httpd", maxTokens: 42 });
    summary.streams.sampling = sampling.stream;
    summary.sampling = { requests: samplingRequests, result: text(sampling.result) };
    equal("sampling: one sampling/createMessage reached the handler", samplingRequests.length, 1);
    equal("sampling: request as the tool built it", samplingRequests[0],
        { prompt: "Resource trigger-sampling-request context: hello httpd", maxTokens: 42,
          systemPrompt: "You are a helpful test server." });
    check("sampling: the tool result holds our answer", (text(sampling.result) || "").includes(SAMPLED_TEXT),
        text(sampling.result));
    // The SDK posts our response without awaiting its answer: the tool's result can arrive
    // before that POST's status is recorded (seen under ASan), so wait for it.
    const isResponsePost = (e) => e.method === "POST" && /^response#/.test(e.rpc || "");
    await waitFor(() => rec.log.find(isResponsePost)?.status !== undefined, 5000);
    const samplingResponse = rec.log.find(isResponsePost);
    check("sampling: our response POST was accepted (202)", samplingResponse?.status === 202, samplingResponse);

    // ---- standalone stream: simulated logging -------------------------------------------------------
    await deadline(client.setLoggingLevel("debug"), 15000, "logging/setLevel");
    const on = await callTool(client, "toggle-simulated-logging", {});
    check("toggle-simulated-logging: started", /^Started simulated/.test(text(on.result) || ""), text(on.result));
    const gotLog = await waitFor(() => logMessages.length > 0, 12000);
    summary.logMessages = logMessages.slice(0, 3);
    check("logging: notifications/message arrived on the standalone stream", gotLog, logMessages);
    check("standalone GET stream: 200 text/event-stream (by now)",
        getSent?.status === 200 && getSent?.contentType?.startsWith("text/event-stream"), getSent);
    summary.standaloneGet.status = getSent?.status;
    summary.standaloneGet.finalHeadersMs = getSent?.headersMs;
    const off = await callTool(client, "toggle-simulated-logging", {});
    check("toggle-simulated-logging: stopped", /^Stopped simulated/.test(text(off.result) || ""), text(off.result));

    // ---- resume after a cut ----------------------------------------------------------------------
    rec.arm((body) => {
        const m = JSON.parse(body);
        return m.method === "tools/call" && m.params?.name === "trigger-long-running-operation";
    }, CUT_AFTER_EVENTS);
    const errorsBefore = summary.transportErrors.length;
    const resumed = await callTool(client, "trigger-long-running-operation", RESUME, { progress: true });
    const resumeGets = rec.log.filter((e) => e.method === "GET" && e.lastEventId);
    summary.streams.resume = resumed.stream;
    summary.resume = {
        cut: rec.cuts[0],
        eventIds: resumed.tokens,
        progress: resumed.progress.map((p) => p.progress),
        result: text(resumed.result),
        resumedWith: resumeGets.map((e) => ({ lastEventId: e.lastEventId, status: e.status })),
        errorsSeen: summary.transportErrors.slice(errorsBefore),
    };
    check("resume: the response stream was cut mid-call", rec.cuts.length === 1 && rec.cuts[0].ok, rec.cuts);
    equal("resume: exactly one GET with Last-Event-ID", resumeGets.length, 1);
    equal("resume: Last-Event-ID is the last event before the cut", resumeGets[0]?.lastEventId,
        resumed.tokens[CUT_AFTER_EVENTS - 1]);
    equal("resume: the GET was answered 200", resumeGets[0]?.status, 200);
    equal(`resume: progress 1..${RESUME.steps} once each, in order`, resumed.progress.map((p) => p.progress),
        range(1, RESUME.steps));
    equal("resume: result", text(resumed.result),
        `Long running operation completed. Duration: ${RESUME.duration} seconds, Steps: ${RESUME.steps}.`);
    equal("resume: event ids of one stream, contiguous, none twice",
        [new Set(resumed.tokens.map(streamOf)).size, seqs(resumed.tokens)], [1, range(1, RESUME.steps + 2)]);

    // ---- terminate --------------------------------------------------------------------------------
    await deadline(transport.terminateSession(), 15000, "DELETE");
    const del = rec.log.find((e) => e.method === "DELETE");
    summary.terminate = { deleteStatus: del?.status };
    equal("terminate: DELETE answered 200", del?.status, 200);
    await client.close();
    const after = await fetch(url, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
                   "Mcp-Session-Id": sessionId, "MCP-Protocol-Version": summary.protocolVersion },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        signal: AbortSignal.timeout(15000),
    });
    await after.body?.cancel();
    summary.terminate.afterwards = after.status;
    equal("after terminate: POST gets 404", after.status, 404);
});
