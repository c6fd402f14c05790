// Shared helpers of client.mjs and everything.mjs: checks, a recording fetch for the SDK's
// StreamableHTTPClientTransport (with an optional mid-stream cut), and the JSON summary.
//
// Test-only code: run with the node 22 that scripts/node-deps prints.

export const NODE_MAJOR_MIN = 22;

/** Collects named checks; `ok` is false once any check failed. */
export class Checks {
    constructor() {
        this.list = [];
    }
    check(name, cond, detail) {
        const entry = { name, ok: Boolean(cond) };
        if (!cond && detail !== undefined) entry.detail = detail;
        this.list.push(entry);
        return Boolean(cond);
    }
    /** equal(name, actual, expected): deep equality by JSON text. */
    equal(name, actual, expected) {
        const a = JSON.stringify(actual), e = JSON.stringify(expected);
        return this.check(name, a === e, { actual, expected });
    }
    get failed() {
        return this.list.filter((c) => !c.ok);
    }
    get ok() {
        return this.list.length > 0 && this.failed.length === 0;
    }
}

function jsonrpcSummary(body) {
    if (typeof body !== "string") return undefined;
    try {
        const m = JSON.parse(body);
        const one = (x) =>
            x.method ? `${x.method}${x.id !== undefined ? `#${x.id}` : ""}${x.method === "tools/call" ? `(${x.params?.name})` : ""}`
                : `response#${x.id}`;
        return Array.isArray(m) ? m.map(one).join(",") : one(m);
    } catch {
        return "(not JSON)";
    }
}

/** Index just past the end of the `want`-th complete SSE event in `bytes` (an event ends at a
 *  blank line: LF LF or CR LF CR LF), counting from the state in `st`; -1 if not in this chunk. */
function eventBoundary(bytes, st, want) {
    for (let i = 0; i < bytes.length; i++) {
        const b = bytes[i];
        if (b === 0x0a) {
            if (st.lineEmpty) {
                st.events++;
                if (st.events >= want) return i + 1;
            }
            st.lineEmpty = true;
        } else if (b !== 0x0d) {
            st.lineEmpty = false;
        }
    }
    return -1;
}

/**
 * A fetch for StreamableHTTPClientTransport that records every exchange and can cut one
 * response stream: `arm(predicate, afterEvents)` makes the next POST whose body satisfies
 * `predicate` lose its connection right after the `afterEvents`-th complete SSE event (the
 * events before it reach the SDK whole; then the body errors as a network failure would, and
 * the TCP connection is aborted so that the server sees the client go away).
 */
export function makeRecordingFetch() {
    const log = [];
    let armed = null;
    const cuts = [];

    async function recordingFetch(url, init = {}) {
        const method = (init.method || "GET").toUpperCase();
        const headers = new Headers(init.headers || {});
        const entry = {
            at: new Date().toISOString(),
            url: String(url),
            method,
            rpc: jsonrpcSummary(init.body),
            sessionId: headers.get("mcp-session-id") || undefined,
            protocolVersion: headers.get("mcp-protocol-version") || undefined,
            lastEventId: headers.get("last-event-id") || undefined,
        };
        const sentAt = Date.now();
        log.push(entry);
        let cutPlan = null;
        if (armed && method === "POST" && typeof init.body === "string" && armed.predicate(init.body)) {
            cutPlan = armed;
            armed = null;
        }
        // Our own controller, following the SDK's, so that a cut can abort this one connection.
        const ac = new AbortController();
        const outer = init.signal;
        if (outer) {
            if (outer.aborted) ac.abort(outer.reason);
            else outer.addEventListener("abort", () => ac.abort(outer.reason), { once: true });
        }
        let res;
        try {
            res = await fetch(url, { ...init, signal: ac.signal });
        } catch (err) {
            entry.error = String(err);
            throw err;
        }
        entry.status = res.status;
        entry.headersMs = Date.now() - sentAt;   // until the response's status and headers came
        entry.contentType = res.headers.get("content-type") || undefined;
        if (!cutPlan || !res.body || !String(entry.contentType).startsWith("text/event-stream")) {
            if (cutPlan) {
                entry.cut = "not cut: no event stream";
                cuts.push({ ok: false, why: entry.cut });
            }
            return res;
        }
        const reader = res.body.getReader();
        const st = { events: 0, lineEmpty: true };
        const cutInfo = { ok: false, afterEvents: cutPlan.afterEvents, at: null };
        cuts.push(cutInfo);
        let done = false;
        const body = new ReadableStream({
            async pull(ctrl) {
                if (done) {
                    ctrl.error(new TypeError("terminated: connection cut by the test"));
                    return;
                }
                let r;
                try {
                    r = await reader.read();
                } catch (err) {
                    ctrl.error(err);
                    return;
                }
                if (r.done) {
                    cutInfo.why = `stream ended after ${st.events} events, before the cut`;
                    ctrl.close();
                    return;
                }
                const end = eventBoundary(r.value, st, cutPlan.afterEvents);
                if (end < 0) {
                    ctrl.enqueue(r.value);
                    return;
                }
                ctrl.enqueue(r.value.subarray(0, end));
                done = true;
                cutInfo.ok = true;
                cutInfo.at = new Date().toISOString();
                entry.cut = `after ${cutPlan.afterEvents} events`;
                ac.abort(new Error("cut by the test"));   // closes the TCP connection
                reader.cancel().catch(() => {});
            },
            cancel(reason) {
                reader.cancel(reason).catch(() => {});
            },
        });
        return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    }

    return {
        fetch: recordingFetch,
        log,
        cuts,
        arm(predicate, afterEvents) {
            armed = { predicate, afterEvents };
        },
    };
}

/** Rejects after `ms` with a message naming `what` (the timer does not keep node alive). */
export function deadline(promise, ms, what) {
    let t;
    const timeout = new Promise((_, reject) => {
        t = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(t));
}

/** Polls `cond` every 20 ms until it is true or `ms` passed; returns its last value. */
export async function waitFor(cond, ms) {
    const end = Date.now() + ms;
    for (;;) {
        const v = cond();
        if (v || Date.now() >= end) return v;
        await new Promise((r) => setTimeout(r, 20));
    }
}

export function errText(err) {
    if (!err) return undefined;
    return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/** The stream number of an event id `<stream>-<seq>` (mod_mcp's form), or null. */
export function streamOf(eventId) {
    const m = /^(\d+)-(\d+)$/.exec(eventId || "");
    return m ? Number(m[1]) : null;
}

/** The text of a tools/call result's first text content. */
export const text = (result) => result?.content?.find((c) => c.type === "text")?.text;
/** The seqs of event ids `<stream>-<seq>`. */
export const seqs = (tokens) => tokens.map((t) => Number(t.split("-")[1]));
/** [from, from + 1, ..., to]. */
export const range = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** tools/call through the SDK, collecting the event ids (resumption tokens) of its stream. */
export async function callTool(client, name, args, opts = {}) {
    const tokens = [];
    const progress = [];
    const result = await deadline(client.callTool({ name, arguments: args }, undefined, {
        timeout: 30000,
        onresumptiontoken: (t) => tokens.push(t),
        ...(opts.progress ? { onprogress: (p) => progress.push(p) } : {}),
    }), 40000, `tools/call ${name}`);
    return { result, tokens, progress, stream: streamOf(tokens[0]) };
}

export function requireNode22(argv0) {
    const major = Number(process.versions.node.split(".")[0]);
    if (major < NODE_MAJOR_MIN) {
        process.stderr.write(`${argv0}: needs node >= ${NODE_MAJOR_MIN} (this is ${process.version}); ` +
            "run it with the node that scripts/node-deps prints\n");
        process.exit(2);
    }
}

/**
 * Runs `main(checks, summary)` with an overall deadline; prints the summary as JSON on stdout
 * and exits 0 only if every check passed.
 */
export async function runMain(name, totalMs, main) {
    const checks = new Checks();
    const summary = { tool: name, node: process.version, ok: false };
    const started = Date.now();
    let fatal;
    let finished = false;
    const guard = setTimeout(() => {
        summary.fatal = `overall deadline of ${totalMs} ms passed`;
        finish(3);
    }, totalMs);
    function finish(code) {
        if (finished) return;
        finished = true;
        clearTimeout(guard);
        summary.elapsedMs = Date.now() - started;
        summary.checks = checks.list;
        summary.failed = checks.failed.map((c) => c.name);
        summary.ok = code === 0 && checks.ok;
        process.stdout.write(JSON.stringify(summary, null, 2) + "\n", () => process.exit(summary.ok ? 0 : code || 1));
    }
    try {
        await main(checks, summary);
    } catch (err) {
        fatal = err;
        summary.fatal = errText(err);
        if (err?.stack) process.stderr.write(`${name}: ${err.stack}\n`);
    }
    finish(fatal ? 1 : 0);
}
