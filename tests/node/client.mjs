// client.mjs — drives mod_mcp (in front of tests/backend/mcp-test-backend) with the official
// MCP TypeScript SDK: Client + StreamableHTTPClientTransport.
//
// Usage: NODE22 client.mjs MCP_URL        (NODE22: the path scripts/node-deps prints)
//
// It initializes, lists the tools, calls echo and add, calls slow with an onprogress handler,
// answers the sampling/createMessage request of the sample tool, receives a notify message on
// the standalone GET stream, then calls slow again and has its response stream cut after a few
// events so that the SDK's own reconnection (GET with Last-Event-ID) completes the call, and
// finally terminates the session (DELETE) and shows that later calls get 404.
//
// Prints a JSON summary on stdout (session id, stream ids, progress, event ids, checks, every
// HTTP exchange); exits 0 only when every check passed.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
    CreateMessageRequestSchema,
    LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

import {
    callTool, deadline, errText, makeRecordingFetch, range, requireNode22, runMain, seqs, streamOf, text,
    waitFor,
} from "./lib.mjs";

requireNode22("client.mjs");
const url = process.argv[2];
if (!url || !/^https?:\/\//.test(url)) {
    process.stderr.write("usage: node client.mjs MCP_URL\n");
    process.exit(2);
}

const CLIENT_INFO = { name: "mod_mcp-node-client", version: "1.0.0" };
const RECONNECTION = {
    initialReconnectionDelay: 200,
    maxReconnectionDelay: 2000,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 5,
};
const RESUME_COUNT = 8;        // progress notifications of the slow call that is cut
const RESUME_INTERVAL_MS = 250;
const CUT_AFTER_EVENTS = 3;    // priming event + two progress notifications, then the cut
const SAMPLED_PREFIX = "node-sampled:";

await runMain("client.mjs", 120000, async (checks, summary) => {
    const { check, equal } = {
        check: checks.check.bind(checks),
        equal: checks.equal.bind(checks),
    };
    const rec = makeRecordingFetch();
    summary.url = url;
    summary.http = rec.log;
    summary.transportErrors = [];
    summary.streams = {};

    const client = new Client(CLIENT_INFO, { capabilities: { sampling: {} } });
    const samplingRequests = [];
    client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
        const prompt = req.params.messages?.[0]?.content?.text;
        samplingRequests.push({ prompt, maxTokens: req.params.maxTokens });
        return {
            model: "mod_mcp-node-test-model",
            role: "assistant",
            content: { type: "text", text: `${SAMPLED_PREFIX} ${prompt}` },
            stopReason: "endTurn",
        };
    });
    const logMessages = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logMessages.push(n.params));

    const transport = new StreamableHTTPClientTransport(new URL(url), {
        fetch: rec.fetch,
        reconnectionOptions: RECONNECTION,
    });
    client.onerror = (err) => summary.transportErrors.push(errText(err));

    // ---- initialize -------------------------------------------------------------------------
    await deadline(client.connect(transport), 15000, "initialize");
    const sessionId = transport.sessionId;
    summary.sessionId = sessionId;
    summary.protocolVersion = transport.protocolVersion;
    summary.serverInfo = client.getServerVersion();
    check("initialize: gateway issued an Mcp-Session-Id", typeof sessionId === "string" && sessionId.length >= 22,
        sessionId);
    equal("initialize: negotiated protocol version", transport.protocolVersion, "2025-11-25");
    check("initialize: server capabilities include tools", Boolean(client.getServerCapabilities()?.tools));
    const initPost = rec.log.find((e) => e.rpc?.startsWith("initialize"));
    check("initialize: answered 200", initPost?.status === 200, initPost);
    const initialized = rec.log.find((e) => e.rpc === "notifications/initialized");
    check("notifications/initialized: answered 202", initialized?.status === 202, initialized);
    // The SDK opens the standalone GET stream once notifications/initialized was accepted.
    const standalone = await waitFor(() => rec.log.find((e) => e.method === "GET" && !e.lastEventId && e.status),
        10000);
    summary.standaloneGet = { status: standalone?.status, headersMs: standalone?.headersMs };
    check("standalone GET stream: 200 text/event-stream",
        standalone?.status === 200 && standalone?.contentType?.startsWith("text/event-stream"), standalone);

    // ---- tools/list, echo, add ------------------------------------------------------------------
    const tools = (await deadline(client.listTools(), 15000, "tools/list")).tools.map((t) => t.name);
    summary.tools = tools;
    for (const t of ["echo", "add", "slow", "sample", "notify"]) {
        check(`tools/list: has ${t}`, tools.includes(t), tools);
    }
    const echo = await callTool(client, "echo", { text: "hello from the TypeScript SDK" });
    summary.echo = text(echo.result);
    equal("echo: result text", text(echo.result), "hello from the TypeScript SDK");
    check("echo: answered on a resumable stream (priming event id first)", /^\d+-1$/.test(echo.tokens[0] || ""),
        echo.tokens);
    const add = await callTool(client, "add", { a: 19, b: 23 });
    summary.add = { text: text(add.result), structuredContent: add.result.structuredContent };
    equal("add: result text", text(add.result), "42");
    equal("add: structuredContent", add.result.structuredContent, { sum: 42 });

    // ---- slow with progress ----------------------------------------------------------------------
    const slow = await callTool(client, "slow", { count: 5, interval_ms: 100 }, { progress: true });
    summary.streams.slow = slow.stream;
    summary.slow = { progress: slow.progress.map((p) => p.progress), result: text(slow.result), eventIds: slow.tokens };
    equal("slow: progress 1..5 once each, in order", slow.progress.map((p) => p.progress), range(1, 5));
    check("slow: progress carries total 5 and a message",
        slow.progress.every((p, i) => p.total === 5 && p.message === `step ${i + 1} of 5`), slow.progress);
    equal("slow: result", text(slow.result), "slow done: 5 steps");
    equal("slow: event ids contiguous (priming, 5 progress, result)", seqs(slow.tokens), range(1, 7));

    // ---- sampling ------------------------------------------------------------------------------
    const sample = await callTool(client, "sample", { prompt: "say hi to httpd" });
    summary.streams.sample = sample.stream;
    summary.sampling = { requests: samplingRequests, result: text(sample.result), eventIds: sample.tokens };
    equal("sample: one sampling/createMessage request reached the handler", samplingRequests.length, 1);
    equal("sample: the request carried the prompt", samplingRequests[0]?.prompt, "say hi to httpd");
    equal("sample: the tool got our answer", text(sample.result), `sampled: ${SAMPLED_PREFIX} say hi to httpd`);
    check("sample: not an error", !sample.result.isError, sample.result);
    // The backend may hand the tool its answer (and the result reach us) before its 202 to our
    // response POST has come back through the gateway: the status is awaited, not assumed.
    const samplingResponse = await waitFor(
        () => rec.log.find((e) => e.method === "POST" && /^response#srv-/.test(e.rpc || "") && e.status), 10000);
    check("sample: our response POST was accepted (202)", samplingResponse?.status === 202, samplingResponse);
    summary.sampling.responseId = samplingResponse?.rpc?.slice("response#".length);

    // ---- standalone stream: notify -------------------------------------------------------------
    const notify = await callTool(client, "notify", { text: "node-ping" });
    summary.notify = { result: text(notify.result) };
    check("notify: sent or queued", ["sent", "queued"].includes(text(notify.result)), notify.result);
    const got = await waitFor(() => logMessages.find((m) => m.data === "node-ping"), 10000);
    summary.notify.received = logMessages;
    check("notify: notifications/message arrived on the standalone stream", Boolean(got), logMessages);

    // ---- resume after a cut mid-call -------------------------------------------------------------
    rec.arm((body) => {
        const m = JSON.parse(body);
        return m.method === "tools/call" && m.params?.name === "slow";
    }, CUT_AFTER_EVENTS);
    const errorsBefore = summary.transportErrors.length;
    const started = Date.now();
    const resumed = await callTool(client, "slow", { count: RESUME_COUNT, interval_ms: RESUME_INTERVAL_MS },
        { progress: true });
    const resumeGets = rec.log.filter((e) => e.method === "GET" && e.lastEventId);
    summary.streams.resume = resumed.stream;
    summary.resume = {
        cut: rec.cuts[0],
        eventIds: resumed.tokens,
        progress: resumed.progress.map((p) => p.progress),
        result: text(resumed.result),
        resumedWith: resumeGets.map((e) => ({ lastEventId: e.lastEventId, status: e.status, contentType: e.contentType })),
        errorsSeen: summary.transportErrors.slice(errorsBefore),
        ms: Date.now() - started,
    };
    check("resume: the response stream was cut mid-call", rec.cuts.length === 1 && rec.cuts[0].ok, rec.cuts);
    check("resume: the SDK saw the stream break",
        summary.resume.errorsSeen.some((e) => /SSE stream disconnected/.test(e)), summary.resume.errorsSeen);
    equal("resume: exactly one GET with Last-Event-ID", resumeGets.length, 1);
    equal("resume: Last-Event-ID is the last event before the cut", resumeGets[0]?.lastEventId,
        resumed.tokens[CUT_AFTER_EVENTS - 1]);
    check("resume: the GET was answered 200 text/event-stream",
        resumeGets[0]?.status === 200 && resumeGets[0]?.contentType?.startsWith("text/event-stream"), resumeGets);
    equal(`resume: progress 1..${RESUME_COUNT} once each, in order`, resumed.progress.map((p) => p.progress),
        range(1, RESUME_COUNT));
    equal("resume: result", text(resumed.result), `slow done: ${RESUME_COUNT} steps`);
    equal("resume: event ids of one stream, contiguous, none twice",
        [new Set(resumed.tokens.map(streamOf)).size, seqs(resumed.tokens)], [1, range(1, RESUME_COUNT + 2)]);

    // ---- terminate; afterwards 404 ----------------------------------------------------------------
    await deadline(transport.terminateSession(), 15000, "DELETE");
    const del = rec.log.find((e) => e.method === "DELETE");
    summary.terminate = { deleteStatus: del?.status };
    equal("terminate: DELETE answered 200", del?.status, 200);
    equal("terminate: the transport forgot the session id", transport.sessionId, undefined);
    await client.close();

    // The SDK, told the old session id, gets 404 on its next request.
    const rec2 = makeRecordingFetch();
    const stale = new StreamableHTTPClientTransport(new URL(url), { fetch: rec2.fetch, sessionId });
    const client2 = new Client(CLIENT_INFO, { capabilities: {} });
    client2.onerror = () => {};
    await client2.connect(stale);   // a transport with a session id: no initialize
    stale.setProtocolVersion(summary.protocolVersion);
    let afterErr;
    try {
        await deadline(client2.callTool({ name: "echo", arguments: { text: "too late" } }), 15000, "echo after DELETE");
    } catch (err) {
        afterErr = err;
    }
    await client2.close();
    summary.terminate.sdkAfterwards = { code: afterErr?.code, error: errText(afterErr), http: rec2.log };
    equal("after terminate: the SDK's tools/call fails with HTTP 404", afterErr?.code, 404);

    // And without the SDK: the same POST, and a resumption of the cut stream.
    const headers = {
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        "Mcp-Session-Id": sessionId,
        "MCP-Protocol-Version": summary.protocolVersion,
    };
    const post = await fetch(url, {
        method: "POST", headers,
        body: JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/list" }),
        signal: AbortSignal.timeout(15000),
    });
    const postBody = await post.json().catch(() => null);
    const get = await fetch(url, {
        method: "GET",
        headers: { Accept: "text/event-stream", "Mcp-Session-Id": sessionId, "Last-Event-ID": resumed.tokens[1] },
        signal: AbortSignal.timeout(15000),
    });
    const getBody = await get.json().catch(() => null);
    summary.terminate.rawAfterwards = { post: { status: post.status, body: postBody },
        get: { status: get.status, body: getBody } };
    equal("after terminate: POST gets 404", post.status, 404);
    equal("after terminate: POST error is JSON-RPC -32001 with our id", [postBody?.error?.code, postBody?.id],
        [-32001, 99]);
    equal("after terminate: GET with Last-Event-ID gets 404", get.status, 404);
});
