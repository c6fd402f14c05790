"""Every misbehaving backend gets a precise, stored answer (issue 9).

The backend here is tests/backend/mcp-fault-backend, started by this module on
MCP_STACK_DIR/faults.sock, which the /mcp-faults locations of gateway.conf point at. Its `raw`
tool sends exactly the bytes a test gives it (status line and headers included), so each test
below is one fault. For each one the test asserts:

* the request id gets a response or a JSON-RPC error, on the client's stream and stored in
  PostgreSQL, within a named bound (seconds);
* the stream row ends in a terminal state;
* no CPU stays busy: the httpd processes use less than CPU_IDLE_MAX seconds of CPU over
  CPU_WINDOW seconds after the answer;
* the error log holds at most a named number of lines about the stream;
* the next request on the same gateway succeeds.

/mcp-faults has MCPStreamTimeout 4, MCPBackendTimeout 4, MCPMaxMessageSize 65536 and
MCPKeepAliveInterval 1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import fault_backend
from mcp_client import McpError, McpSession
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

STREAM_TIMEOUT = 4.0          # MCPStreamTimeout of /mcp-faults
MAX_MESSAGE = 65536           # MCPMaxMessageSize of /mcp-faults
CPU_WINDOW = 1.0              # seconds over which the gateway's CPU time is measured
CPU_IDLE_MAX = 0.2            # at most this much CPU time (s) in that window: nothing spins
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Bounds (seconds) from the request to its answer on the client's stream.
PROMPT = 2.0                  # faults the gateway sees at once (a status, a close, bad bytes)
TIMED = STREAM_TIMEOUT + 2.0  # faults only a timeout ends (a backend that never answers)


# ---- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def faults(stack):
    """The fault backend, listening where /mcp-faults expects it; stopped after the module."""
    with fault_backend(stack["MCP_STACK_DIR"]):
        base = urlsplit(stack["MCP_URL"])
        yield f"{base.scheme}://{base.netloc}"


@pytest.fixture
def fsession(faults, mcp):
    """factory: fsession(path="/mcp-faults", **kw) -> an initialized McpSession."""

    def make(path: str = "/mcp-faults", **kw) -> McpSession:
        s = mcp(url=faults + path, **kw)
        s.initialize()
        return s

    return make


def fixed_id() -> int:
    """A request id of exactly six digits, as long as the "{{id}}" the fault backend replaces
    by it: Content-Length headers computed beforehand stay right."""
    return 100000 + McpSession.next_id()


def raw(parts, then="close", delay_ms=0) -> dict:
    """tools/call params for the fault backend's raw tool. parts: [(text, count)]; text is bytes
    as Latin-1 code points, "{{id}}" the request's id."""
    return {"name": "raw", "arguments": {"parts": [[t, n] for t, n in parts], "then": then,
                                         "delay_ms": delay_ms}}


def http_head(status: str, headers: dict | None = None, body: str | None = None) -> str:
    lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body.encode('latin-1'))}")
    lines.append("Connection: close")
    return "\r\n".join(lines) + "\r\n\r\n" + (body or "")


SSE_HEAD = http_head("200 OK", {"Content-Type": "text/event-stream"})


def json_answer(body: str, ctype: str = "application/json", status: str = "200 OK") -> list:
    return [(http_head(status, {"Content-Type": ctype}, body), 1)]


def httpd_pids(stack) -> list[int]:
    parents = []
    for pf in stack["MCP_HTTPD_PIDFILES"].split():
        try:
            parents.append(int(Path(pf).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    pids = list(parents)
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) in parents:
                pids.append(int(p.name))
    return pids


def cpu_seconds(pids) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime
    return total / CLK_TCK


def assert_idle(stack):
    """No httpd process keeps a CPU busy: measured over CPU_WINDOW from /proc."""
    pids = httpd_pids(stack)
    before = cpu_seconds(pids)
    time.sleep(CPU_WINDOW)
    used = cpu_seconds(pids) - before
    assert used < CPU_IDLE_MAX, f"httpd used {used:.2f} s of CPU in {CPU_WINDOW} s after the fault"


def log_lines_about(stack, stream_id: int) -> list[str]:
    """The error log's lines about the stream, trace levels left out (a parked stream's life —
    parked, its connection handed over, its response ended — is traced at trace1, one line
    each, however the backend behaves)."""
    pat = re.compile(rf"\bstream {stream_id}\b")
    out = []
    for f in stack["MCP_HTTPD_ERROR_LOGS"].split():
        with open(f, "rb") as fh:
            for line in fh:
                text = line.decode("utf-8", "replace")
                if pat.search(text) and "[mcp:trace" not in text:
                    out.append(text)
    return out


def stored_answer(pg, stream_id: int, rid) -> dict | None:
    """The stored answer (result or error) for request id rid on the stream, read from the exact
    texts (message_text), so that rows whose jsonb copy is lossy or NULL count too."""
    texts = stored_answer_texts(pg, stream_id, rid)
    assert len(texts) <= 1, f"stream {stream_id} holds {len(texts)} answers for id {rid}"
    return json.loads(texts[0]) if texts else None


def stored_answer_texts(pg, stream_id: int, rid) -> list[str]:
    with pg.cursor() as c:
        c.execute("SELECT message_text FROM mcp.events WHERE stream_id = %s AND direction = 'out'"
                  "   AND kind = 'message' ORDER BY seq", (stream_id,))
        texts = [row[0] for row in c.fetchall()]
    out = []
    for t in texts:
        m = json.loads(t)
        if isinstance(m, dict) and m.get("id") == rid and ("result" in m or "error" in m):
            out.append(t)
    return out


def stream_status(pg, stream_id: int) -> str:
    with pg.cursor() as c:
        c.execute("SELECT status FROM mcp.streams WHERE id = %s", (stream_id,))
        return c.fetchone()[0]


def call_fault(s: McpSession, params: dict, bound: float, read_timeout: float = 10.0):
    """Sends tools/call and reads its SSE answer to the end. Returns (stream id, the answer for
    the request id or None, seconds taken, the other messages)."""
    t0 = time.monotonic()
    stream_id = None
    answer = None
    others = []
    for ev in s.request_stream("tools/call", params, timeout=read_timeout, request_id=fixed_id()):
        if ev.id and stream_id is None:
            stream_id = int(ev.id.split("-")[0])
        m = ev.json
        if m is None:
            continue
        if isinstance(m, dict) and m.get("id") == s.last_request_id and ("result" in m or "error" in m):
            answer = m
        else:
            others.append(m)
        assert time.monotonic() - t0 < bound + 5, "the stream goes on far past its bound"
    return stream_id, answer, time.monotonic() - t0, others


def report(took: float, log_lines: int) -> None:
    """With MCP_FAULTS_REPORT=FILE, each fault's measured time and log lines are appended to FILE
    (one JSON line per test): the numbers of README's failure table."""
    path = os.environ.get("MCP_FAULTS_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                                "seconds": round(took, 3), "log_lines": log_lines}) + "\n")


def check_fault(stack, pg, s: McpSession, params: dict, *, bound: float, max_log_lines: int,
                error: str | None = None, status: str = "failed", read_timeout: float = 10.0) -> dict:
    """The checks every fault must pass (see the module's docstring). error: a regular
    expression the JSON-RPC error's message must match; None: the answer is a result."""
    stream_id, answer, took, _ = call_fault(s, params, bound, read_timeout)
    rid = s.last_request_id
    assert stream_id is not None, "no priming event"
    assert answer is not None, f"no answer for id {rid} on the stream"
    assert took < bound, f"answered after {took:.2f} s, bound {bound} s"
    if error is None:
        assert "result" in answer, answer
    else:
        assert "error" in answer, answer
        assert re.search(error, answer["error"]["message"]), answer["error"]
    stored = stored_answer(pg, stream_id, rid)
    assert stored is not None, f"no answer for id {rid} stored on stream {stream_id}"
    assert ("error" in stored) == (error is not None)
    wait_for(lambda: stream_status(pg, stream_id) != "open", 5, "the stream's terminal state")
    assert stream_status(pg, stream_id) == status
    assert_idle(stack)
    lines = log_lines_about(stack, stream_id)
    report(took, len(lines))
    assert len(lines) <= max_log_lines, f"{len(lines)} log lines about stream {stream_id}:\n" + \
        "".join(lines[:20])
    # The next request on the same gateway (and session) succeeds.
    assert s.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"
    return answer


# ---- non-2xx statuses ----------------------------------------------------------------------


def test_status_500_without_body(stack, pg, fsession):
    s = fsession()
    check_fault(stack, pg, s, raw([(http_head("500 Internal Server Error", body=""), 1)]),
                bound=PROMPT, max_log_lines=2, error=r"backend answered HTTP 500")


def test_status_503_with_html_body(stack, pg, fsession):
    body = "<html><body>upstream overloaded</body></html>"
    s = fsession()
    ans = check_fault(stack, pg, s, raw(json_answer(body, "text/html", "503 Service Unavailable")),
                      bound=PROMPT, max_log_lines=2, error=r"HTTP 503")
    assert "upstream overloaded" in json.dumps(ans["error"].get("data", {}))


def test_status_403_with_json_error_body(stack, pg, fsession):
    body = '{"error":"forbidden"}'
    s = fsession()
    check_fault(stack, pg, s, raw(json_answer(body, "application/json", "403 Forbidden")),
                bound=PROMPT, max_log_lines=2, error=r"HTTP 403")


def test_status_500_with_invalid_utf8_content_type(stack, pg, fsession):
    """The issue's reproducer: an endless loop and 1.7 million log lines before the fix."""
    s = fsession()
    ans = check_fault(stack, pg, s, raw([("HTTP/1.1 500\r\nContent-Type: text/html\xff\r\n"
                                          "Content-Length: 0\r\n\r\n", 1)]),
                      bound=PROMPT, max_log_lines=2, error=r"HTTP 500")
    assert "\ufffd" in ans["error"]["message"] or "\\xff" in ans["error"]["message"]


def test_status_500_invalid_utf8_older_client_gets_json(stack, pg, fsession):
    """A 2025-06-18 session gets no stream: the same fault is a 502 with a JSON body."""
    s = fsession(protocol_version="2025-06-18")
    r = s.post_raw(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": raw(
        [("HTTP/1.1 500\r\nContent-Type: text/html\xff\r\nContent-Length: 0\r\n\r\n", 1)])}),
        timeout=PROMPT + 5)
    assert r.status_code == 502
    body = r.json()
    assert body["id"] == 7 and "HTTP 500" in body["error"]["message"]
    assert_idle(stack)
    assert s.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


def test_session_id_with_invalid_bytes_is_refused(stack, pg, faults, mcp):
    """A backend session id that is not visible ASCII would be stored and sent back on every
    request: initialize gets 502 naming it, nothing is stored."""
    s = mcp(url=faults + "/mcp-faults")
    with pg.cursor() as c:
        c.execute("SELECT count(*) FROM mcp.sessions")
        before = c.fetchone()[0]
    with pytest.raises(McpError) as e:
        s.initialize(client_info={"name": "bad-session-id", "version": "0"})
    assert e.value.response.status_code == 502
    assert "Mcp-Session-Id" in e.value.response.json()["error"]["message"]
    with pg.cursor() as c:
        c.execute("SELECT count(*) FROM mcp.sessions")
        assert c.fetchone()[0] == before
    s2 = mcp(url=faults + "/mcp-faults")
    s2.initialize()
    assert s2.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


def test_batch_refused_every_id_gets_a_stored_error(stack, pg, fsession):
    """A 2025-03-26 batch of two requests that the backend refuses (it answers arrays with a bare
    400): each id gets its own stored error, the stream fails."""
    s = fsession(protocol_version="2025-03-26")
    ids = [fixed_id(), fixed_id()]
    batch = [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo"}}
             for i in ids]
    t0 = time.monotonic()
    r = s.post_raw(json.dumps(batch), timeout=PROMPT + 5)
    assert time.monotonic() - t0 < PROMPT
    assert r.status_code == 400 and "HTTP 400" in r.json()["error"]["message"]
    with pg.cursor() as c:
        c.execute("SELECT id, status FROM mcp.streams WHERE session_id = %s", (s.session_id,))
        (stream_id, status), = c.fetchall()
    assert status == "failed"
    for i in ids:
        assert stored_answer(pg, stream_id, i)["error"]["code"] == -32002
    assert_idle(stack)
    assert len(log_lines_about(stack, stream_id)) <= 1
    assert s.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


# ---- bodies that are not what they say -------------------------------------------------------


def test_json_body_that_is_not_json(stack, pg, fsession):
    s = fsession()
    check_fault(stack, pg, s, raw(json_answer("this is not JSON")), bound=PROMPT,
                max_log_lines=2, error=r"not JSON")


def test_json_body_with_invalid_utf8(stack, pg, fsession):
    s = fsession()
    body = '{"jsonrpc":"2.0","id":{{id}},"result":{"text":"caf\xe9 \xff"}}'
    check_fault(stack, pg, s, raw(json_answer(body)), bound=PROMPT, max_log_lines=2,
                error=r"not JSON")


def test_sse_events_with_invalid_utf8(stack, pg, fsession):
    """1,000 events the gateway must drop: one log line for all of them, not one per event."""
    s = fsession()
    check_fault(stack, pg, s, raw([(SSE_HEAD, 1), ("data: {\"bad\":\"\xff\"}\n\n", 1000)]),
                bound=PROMPT, max_log_lines=3, error=r"not JSON")


# ---- streams that break ----------------------------------------------------------------------


def test_sse_event_that_never_ends(stack, pg, fsession):
    """data lines without the blank line that ends an event, past MCPMaxMessageSize."""
    s = fsession()
    check_fault(stack, pg, s, raw([(SSE_HEAD, 1), ("data: " + "x" * 1000 + "\n", -1)]),
                bound=PROMPT, max_log_lines=2, error=r"MCPMaxMessageSize")


def test_sse_endless_comments(stack, pg, fsession):
    """Comments and nothing else, as fast as the backend can send them."""
    s = fsession()
    check_fault(stack, pg, s, raw([(SSE_HEAD, 1), (": nothing to see\n", -1)]),
                bound=PROMPT, max_log_lines=2, error=r"without a message")


def test_sse_slow_comments_end_at_stream_timeout(stack, pg, fsession):
    """A keep-alive comment, then silence and never an answer: MCPStreamTimeout ends it."""
    s = fsession()
    parts = [(SSE_HEAD, 1)] + [(": still thinking\n\n", 1)]
    params = raw(parts, then="hang")
    check_fault(stack, pg, s, params, bound=TIMED, max_log_lines=2, error=r"MCPStreamTimeout")


def test_close_mid_event(stack, pg, fsession):
    s = fsession()
    check_fault(stack, pg, s, raw([(SSE_HEAD, 1), ('data: {"jsonrpc":"2.0","id":{{id}},"res', 1)]),
                bound=PROMPT, max_log_lines=2, error=r"ended before")


def test_close_mid_chunk(stack, pg, fsession):
    head = http_head("200 OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
    s = fsession()
    check_fault(stack, pg, s, raw([(head, 1), ("40\r\ndata: {\"jsonrpc\"", 1)]),
                bound=PROMPT, max_log_lines=2, error=r"exchange with the backend failed")


def test_close_before_headers(stack, pg, fsession):
    s = fsession()
    check_fault(stack, pg, s, raw([]), bound=PROMPT, max_log_lines=2,
                error=r"exchange with the backend failed")


def test_close_in_the_middle_of_the_headers(stack, pg, fsession):
    s = fsession()
    check_fault(stack, pg, s, raw([("HTTP/1.1 200 OK\r\nContent-Ty", 1)]), bound=PROMPT,
                max_log_lines=2, error=r"closed in the middle of the response headers")


def test_accept_and_never_answer(stack, pg, fsession):
    s = fsession()
    check_fault(stack, pg, s, raw([], then="hang"), bound=TIMED, max_log_lines=2,
                error=r"MCPStreamTimeout")


def test_answer_after_the_client_left(stack, pg, fsession):
    """Disconnect is not cancellation: the late answer is stored and replayed on resume."""
    s = fsession()
    body = '{"jsonrpc":"2.0","id":{{id}},"result":{"content":[{"type":"text","text":"late"}]}}'
    events = s.request_stream("tools/call", raw(json_answer(body), delay_ms=1500),
                              request_id=fixed_id())
    priming = next(events)
    events.close()                                  # the client leaves
    stream_id = int(priming.id.split("-")[0])
    t0 = time.monotonic()
    wait_for(lambda: stream_status(pg, stream_id) != "open", 1.5 + PROMPT + 1,
             "the late answer to be stored")
    report(time.monotonic() - t0, len(log_lines_about(stack, stream_id)))
    assert stream_status(pg, stream_id) == "complete"
    assert stored_answer(pg, stream_id, s.last_request_id)["result"]["content"][0]["text"] == "late"
    replay = [e.json for e in s.get_stream(last_event_id=priming.id) if e.json]
    assert replay == [stored_answer(pg, stream_id, s.last_request_id)]
    assert_idle(stack)
    assert len(log_lines_about(stack, stream_id)) <= 3
    assert s.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


# ---- 404 -------------------------------------------------------------------------------------


def session_row(pg, sid):
    with pg.cursor() as c:
        c.execute("SELECT terminated_by FROM mcp.sessions WHERE id = %s", (sid,))
        return c.fetchone()


def test_404_for_a_live_session_ends_it(stack, pg, fsession):
    """A backend's JSON-RPC 404 means it lost the session: the client gets 'session not found'
    (as the spec tells it to start a new session) and the gateway's session ends too."""
    body = '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}'
    s = fsession()
    stream_id, answer, took, _ = call_fault(s, raw(json_answer(body, status="404 Not Found")),
                                            PROMPT)
    assert took < PROMPT and answer["error"]["code"] == -32001, answer
    report(took, len(log_lines_about(stack, stream_id)))
    assert stream_status(pg, stream_id) == "failed"
    assert session_row(pg, s.session_id)[0] == "backend"
    with pytest.raises(McpError) as e:
        s.call("tools/call", {"name": "echo"})
    assert e.value.response.status_code == 404
    assert_idle(stack)
    assert len(log_lines_about(stack, stream_id)) <= 2
    s2 = fsession()
    assert s2.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


def test_404_without_jsonrpc_body_is_a_misrouted_backend(stack, pg, fsession):
    """An HTML 404 (a proxy or a wrong MCPBackend path) does not end the session: it is a
    502 naming the status, and the session goes on."""
    s = fsession()
    check_fault(stack, pg, s, raw(json_answer("<h1>Not Found</h1>", "text/html", "404 Not Found")),
                bound=PROMPT, max_log_lines=2, error=r"HTTP 404.*not a JSON-RPC")
    assert session_row(pg, s.session_id)[0] is None


# ---- valid JSON of every shape ---------------------------------------------------------------


def result_body(result_json: str) -> list:
    return json_answer('{"jsonrpc":"2.0","id":{{id}},"result":' + result_json + "}")


def test_result_with_a_300_digit_number(stack, pg, fsession):
    big = "9" * 300
    s = fsession()
    ans = check_fault(stack, pg, s, raw(result_body('{"n":' + big + ',"f":-1' + "0" * 300 + '.5e-3}')),
                      bound=PROMPT, max_log_lines=1, status="complete")
    assert ans["result"]["n"] == int(big)


def test_result_with_duplicate_keys(stack, pg, fsession):
    s = fsession()
    ans = check_fault(stack, pg, s, raw(result_body('{"k":1,"k":2,"content":[]}')), bound=PROMPT,
                      max_log_lines=1, status="complete")
    assert ans["result"]["k"] in (1, 2)


def test_result_nested_at_the_parsers_limit(stack, pg, fsession):
    """MCP_JSONRPC_MAX_DEPTH (64) levels in all: the message object, then 63 arrays."""
    s = fsession()
    depth = 64 - 1
    ans = check_fault(stack, pg, s, raw(result_body("[" * depth + "]" * depth)), bound=PROMPT,
                      max_log_lines=1, status="complete")
    d, v = 0, ans["result"]
    while isinstance(v, list) and v:
        d, v = d + 1, v[0]
    assert d == depth - 1


def test_result_nested_past_the_parsers_limit(stack, pg, fsession):
    s = fsession()
    depth = 64
    check_fault(stack, pg, s, raw(result_body("[" * depth + "]" * depth)), bound=PROMPT,
                max_log_lines=2, error=r"not JSON")


def check_byte_exact(stack, pg, s: McpSession, result_json: str, expected_text: str) -> None:
    """A result the backend sends with an escape jsonb cannot hold reaches the client, is stored
    exactly as sent (message_text) and replays unchanged with Last-Event-ID."""
    body = '{"jsonrpc":"2.0","id":{{id}},"result":' + result_json + "}"
    stream_id, answer, took, _ = call_fault(s, raw(json_answer(body)), PROMPT, PROMPT + 1)
    rid = s.last_request_id
    assert answer is not None and took < PROMPT, (answer, took)
    assert answer["result"]["text"] == expected_text
    exact = body.replace("{{id}}", json.dumps(rid))
    wait_for(lambda: stream_status(pg, stream_id) != "open", 5, "the stream's terminal state")
    assert stream_status(pg, stream_id) == "complete"
    assert stored_answer_texts(pg, stream_id, rid) == [exact]
    replay = [e.data for e in s.get_stream(last_event_id=f"{stream_id}-1") if e.data]
    assert replay == [exact]
    assert_idle(stack)
    lines = log_lines_about(stack, stream_id)
    report(took, len(lines))
    assert len(lines) <= 1, lines
    assert s.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


def test_result_holding_nul(stack, pg, fsession):
    check_byte_exact(stack, pg, fsession(), '{"text":"a\\u0000b"}', "a\x00b")


def test_result_holding_a_lone_surrogate(stack, pg, fsession):
    check_byte_exact(stack, pg, fsession(), '{"text":"a\\ud800b"}', "a\ud800b")


# ---- volume ----------------------------------------------------------------------------------

BURST = 10_000
BURST_BOUND = 30.0


def test_ten_thousand_events_in_one_burst(stack, pg, fsession):
    note = ('data: {"jsonrpc":"2.0","method":"notifications/message",'
            '"params":{"level":"info","data":"burst"}}\n\n')
    answer = 'data: {"jsonrpc":"2.0","id":{{id}},"result":{"content":[]}}\n\n'
    # Default bounds: MCPStreamTimeout is a hard bound on relaying (checked per piece of the
    # answer), and 10,000 events relayed and stored may take longer than /mcp-faults' 4 s on a
    # loaded machine (they did in the sanitizer pass).
    s = fsession("/mcp-faults-long")
    stream_id, ans, took, others = call_fault(s, raw([(SSE_HEAD, 1), (note, BURST), (answer, 1)]),
                                              BURST_BOUND, read_timeout=BURST_BOUND)
    assert ans is not None and "result" in ans
    assert took < BURST_BOUND, f"{took:.1f} s for {BURST} events"
    assert len(others) == BURST
    with pg.cursor() as c:
        c.execute("SELECT count(*) FROM mcp.events WHERE stream_id = %s AND kind = 'message'"
                  " AND direction = 'out'", (stream_id,))
        assert c.fetchone()[0] == BURST + 1
    assert stream_status(pg, stream_id) == "complete"
    report(took, len(log_lines_about(stack, stream_id)))
    assert_idle(stack)
    assert len(log_lines_about(stack, stream_id)) <= 1
    assert s.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


# ---- sessions and their streams --------------------------------------------------------------

DELETE_BOUND = 2.5   # seconds from a DELETE to its streams' end (WATCH_INTERVAL 1 s + NOTIFY)


def backend_tool(s: McpSession, name: str, **arguments):
    return s.call("tools/call", {"name": name, "arguments": arguments})["content"][0]["text"]


def backend_session_id(pg, sid):
    with pg.cursor() as c:
        c.execute("SELECT backend_session_id FROM mcp.sessions WHERE id = %s", (sid,))
        return c.fetchone()[0]


def notify_from_elsewhere(s: McpSession) -> None:
    """Another connection of the same session has the backend send a notification on the
    session's GET streams."""
    other = McpSession(s.url)
    other.session_id, other.initialized = s.session_id, True
    other.protocol_version = s.protocol_version
    try:
        assert int(backend_tool(other, "notify")) >= 1
    finally:
        other.close()


def test_delete_ends_the_sessions_open_streams(stack, pg, fsession):
    """A hung request stream stops at its session's DELETE: the relay stops, the backend's
    transfer is released, the request gets a stored error, the backend gets its DELETE."""
    s = fsession("/mcp-faults-long")
    probe = fsession("/mcp-faults-long")
    events = s.request_stream("tools/call", raw([], then="hang"), request_id=fixed_id(),
                              timeout=30)
    priming = next(events)
    stream_id, rid = int(priming.id.split("-")[0]), s.last_request_id
    bsid = backend_session_id(pg, s.session_id)
    wait_for(lambda: backend_tool(probe, "hanging", session=bsid) == "1", 5,
             "the backend to hold the request")

    t0 = time.monotonic()
    assert s.delete().status_code == 200
    assert stream_status(pg, stream_id) == "failed"          # ended with the DELETE itself
    stored = stored_answer(pg, stream_id, rid)
    assert stored["error"]["code"] == -32001 and "DELETE" in stored["error"]["message"]
    rest = list(events)                                       # the client's response ends
    took = time.monotonic() - t0
    assert took < DELETE_BOUND, f"the stream outlived its session's DELETE by {took:.1f} s"
    report(took, len(log_lines_about(stack, stream_id)))
    assert not [e for e in rest if e.json]                    # nothing after the end
    wait_for(lambda: backend_tool(probe, "hanging", session=bsid) == "0", DELETE_BOUND,
             "the backend's transfer to be released")
    assert bsid in json.loads(backend_tool(probe, "deleted"))
    assert_idle(stack)
    assert len(log_lines_about(stack, stream_id)) <= 2
    assert probe.call("tools/call", {"name": "echo"})["content"][0]["text"] == "ok"


def test_delete_ends_the_standalone_stream(stack, pg, fsession):
    s = fsession("/mcp-faults-long")
    events = s.get_stream(timeout=30)
    priming = next(events)
    stream_id = int(priming.id.split("-")[0])
    t0 = time.monotonic()
    assert s.delete().status_code == 200
    assert stream_status(pg, stream_id) == "closed"
    list(events)
    assert time.monotonic() - t0 < DELETE_BOUND
    assert_idle(stack)


def test_delete_answers_only_ids_without_a_stored_response(stack, pg, fsession):
    """Answered ids are read from the exact texts: a response whose jsonb copy is lossy
    (\\u0000 in its id) or NULL (a number beyond numeric's range) still counts, so the DELETE
    stores an error for the one unanswered id only (never two answers for one id)."""
    s = fsession()
    lossy = '{"jsonrpc":"2.0","id":"a\\u0000","result":{"content":[]}}'
    no_jsonb = '{"jsonrpc":"2.0","id":3,"result":{"n":1e1000000}}'
    with pg.cursor() as c:
        c.execute("""INSERT INTO mcp.streams (session_id, kind, request_id_text, request_id,
                                              method, owner, lease_until)
                     VALUES (%s, 'request', '["a\\u0000", 2, 3]',
                             mcp.audit_jsonb('["a\\u0000", 2, 3]'), 'tools/call', 'gone:1',
                             now() + interval '1 hour') RETURNING id""", (s.session_id,))
        stream_id = c.fetchone()[0]
        c.execute("""INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind,
                                             message_text, message)
                     VALUES (%s, %s, 0, 'in', 'message', '[]', '[]'),
                            (%s, %s, 1, 'out', 'priming', NULL, NULL),
                            (%s, %s, 2, 'out', 'message', %s, mcp.audit_jsonb(%s)),
                            (%s, %s, 3, 'out', 'message', %s, mcp.audit_jsonb(%s))
                     RETURNING message IS NULL""",
                  (s.session_id, stream_id, s.session_id, stream_id, s.session_id, stream_id,
                   lossy, lossy, s.session_id, stream_id, no_jsonb, no_jsonb))
        assert [r[0] for r in c.fetchall()] == [False, True, False, True]
    assert s.delete().status_code == 200
    assert stream_status(pg, stream_id) == "failed"
    with pg.cursor() as c:
        c.execute("SELECT seq, message_text FROM mcp.events WHERE stream_id = %s AND seq > 1"
                  " ORDER BY seq", (stream_id,))
        rows = c.fetchall()
    assert rows[:2] == [(2, lossy), (3, no_jsonb)]
    assert len(rows) == 3, rows
    error = json.loads(rows[2][1])
    assert error["id"] == 2 and error["error"]["code"] == -32001


def test_expired_session_sends_delete_to_its_backend(stack, pg, fsession):
    """The sweep (MCPSweepInterval 1) expires a session idle past its MCPSessionIdleTimeout (2 s
    on /mcp-faults-short) and tells its backend, without the client coming back."""
    s = fsession("/mcp-faults-short")
    probe = fsession()
    bsid = backend_session_id(pg, s.session_id)
    assert bsid
    t0 = time.monotonic()
    wait_for(lambda: bsid in json.loads(backend_tool(probe, "deleted")), 2 + 1 + 3,
             "the backend's DELETE for the expired session")
    took = time.monotonic() - t0
    assert took >= 1.5, f"expired after {took:.1f} s of a 2 s idle timeout"
    assert session_row(pg, s.session_id)[0] == "expired"
    with pytest.raises(McpError) as e:
        s.call("tools/call", {"name": "echo"})
    assert e.value.response.status_code == 404


def test_request_that_finds_its_session_expired_sends_the_delete(stack, pg, fsession):
    """A session the sweep does not know the timeout of (a row from before the schema stored
    it) is expired by the request that finds it idle, which tells the backend."""
    s = fsession("/mcp-faults-short")
    probe = fsession()
    bsid = backend_session_id(pg, s.session_id)
    with pg.cursor() as c:
        c.execute("UPDATE mcp.sessions SET idle_timeout_secs = NULL,"
                  "       last_seen_at = now() - interval '1 minute' WHERE id = %s",
                  (s.session_id,))
    with pytest.raises(McpError) as e:
        s.call("tools/call", {"name": "echo"})
    assert e.value.response.status_code == 404
    assert session_row(pg, s.session_id)[0] == "expired"
    assert bsid in json.loads(backend_tool(probe, "deleted"))


def test_resumed_standalone_stream_comes_back_live(stack, pg, fsession):
    """MCPStreamCloseAfter (1 s on /mcp-faults-poll) ends the standalone stream's response; the
    client resumes it and later server->client messages still reach it."""
    s = fsession("/mcp-faults-poll")
    # The gateway says Connection: close on a stream MCPStreamCloseAfter will end, so the next
    # request does not race the close on a reused connection.
    first = list(s.get_stream(include_empty=True, timeout=10))
    last = [e.last_event_id for e in first if e.last_event_id][-1]
    old_stream = int(last.split("-")[0])
    assert any(e.retry is not None for e in first)          # ended with a retry: hint

    resumed = s.get_stream(last_event_id=last, include_empty=True, timeout=10)
    priming = next(resumed)                                  # the new stream's cursor
    new_stream = int(priming.id.split("-")[0])
    assert new_stream != old_stream

    notify_from_elsewhere(s)
    got = [e.json for e in resumed if e.json]
    assert any(m.get("method") == "notifications/message"
               and m["params"]["data"] == "hello from the backend" for m in got), got
    wait_for(lambda: stream_status(pg, new_stream) == "closed", 5, "the new stream to close")


def test_standalone_stream_comes_back_live_after_a_graceful_restart(stack, pg, fsession):
    s = fsession("/mcp-faults-long")
    # A graceful restart ends the response and its connection unannounced: a client that
    # reused the connection would race the close (RemoteDisconnected). Not what is under test.
    events = s.get_stream(include_empty=True, timeout=30, headers={"Connection": "close"})
    priming = next(events)
    old_stream = int(priming.id.split("-")[0])
    subprocess.run([str(REPO / "tests" / "stack"), "graceful", "--dir", stack["MCP_STACK_DIR"]],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)
    rest = list(events)                   # the old child ends the response with a retry: hint
    assert rest and rest[-1].retry is not None, rest
    wait_for(lambda: stream_status(pg, old_stream) == "closed", 10, "the old stream to close")

    resumed = s.get_stream(last_event_id=priming.id, include_empty=True, timeout=10)
    new_priming = next(resumed)
    assert int(new_priming.id.split("-")[0]) != old_stream
    notify_from_elsewhere(s)
    for ev in resumed:
        if ev.json and ev.json.get("method") == "notifications/message":
            break
    else:
        raise AssertionError("the notification never reached the resumed stream")
    resumed.close()
