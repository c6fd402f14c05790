"""W3C trace context through the gateway (README, "Logs"): the client's traceparent reaches the
backend with the same trace id and flags and a parent id of the gateway's own, its tracestate as
it came; a client that sends none (or an invalid one) gets a trace started for it; the trace id
is the request note mcp-trace, in the access log (tests/stack's mcp_log, its last column)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from waiting import wait_for

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = "00f067aa0ba902b7"


def backend_saw(s, headers: dict | None = None) -> dict:
    """What the backend received with this session_info call (its own request's headers)."""
    result = s.call("tools/call", {"name": "session_info", "arguments": {}}, headers=headers)
    return json.loads(result["content"][0]["text"])


def note_of(stack, session_tag: str, request_id) -> str:
    """The mcp-trace note of that request in the first instance's mcp_log."""
    path = Path(stack["MCP_STACK_DIR"]) / "httpd-1" / "mcp_log"

    def line():
        for parts in reversed([ln.split("\t") for ln in path.read_text().splitlines()]):
            if len(parts) >= 10 and parts[7] == session_tag and parts[4] == json.dumps(request_id):
                return parts[9]
        return None

    return wait_for(line, 10, "the request's line in mcp_log")


def test_the_clients_trace_reaches_the_backend(stack, mcp):
    s = mcp(stack["MCP_URLS"].split()[0])
    s.initialize()
    info = backend_saw(s, {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01",
                           "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"})
    m = TRACEPARENT.match(info["traceparent"] or "")
    assert m, info
    assert m.group(1) == CLIENT_TRACE          # the same trace
    assert m.group(2) != CLIENT_PARENT         # the gateway's own span
    assert m.group(3) == "01"                  # the client's flags
    assert info["tracestate"] == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    tag = __import__("hashlib").md5(s.session_id.encode()).hexdigest()[:8]
    assert note_of(stack, tag, s.last_request_id) == CLIENT_TRACE
    # Flags and a later version's extra fields: kept / ignored.
    info = backend_saw(s, {"traceparent": f"cc-{CLIENT_TRACE}-{CLIENT_PARENT}-00-more"})
    assert TRACEPARENT.match(info["traceparent"]).group(3) == "00"
    assert TRACEPARENT.match(info["traceparent"]).group(1) == CLIENT_TRACE
    s.close()


def test_a_trace_is_started_when_the_client_sent_none_or_a_bad_one(stack, mcp):
    s = mcp(stack["MCP_URLS"].split()[0])
    s.initialize()
    tag = __import__("hashlib").md5(s.session_id.encode()).hexdigest()[:8]
    seen = set()
    for headers in (None,
                    {"traceparent": f"00-{CLIENT_TRACE.upper()}-{CLIENT_PARENT}-01"},  # upper case
                    {"traceparent": f"00-{'0' * 32}-{CLIENT_PARENT}-01"},               # zero id
                    {"traceparent": "garbage", "tracestate": "caf\u00e9=1"}):
        info = backend_saw(s, headers)
        m = TRACEPARENT.match(info["traceparent"] or "")
        assert m, (headers, info)
        assert m.group(1) not in (CLIENT_TRACE, CLIENT_TRACE.upper(), "0" * 32), headers
        assert m.group(3) == "01"             # a started trace is sampled
        assert info["tracestate"] is None     # nothing invalid is passed on
        assert note_of(stack, tag, s.last_request_id) == m.group(1)
        seen.add(m.group(1))
    assert len(seen) == 4                     # a new trace each time
    s.close()


def test_the_trace_id_is_stored_with_the_session_and_each_stream(stack, mcp, pg):
    """mcp.sessions.trace_id is initialize's, mcp.streams.trace_id each request's (and a GET's),
    readable through mcp.tool_calls and mcp.session_transcript: the same id the backend got."""
    other = "0af7651916cd43dd8448eb211c80319c"
    s = mcp(stack["MCP_URLS"].split()[0])
    s.initialize(headers={"traceparent": f"00-{other}-{CLIENT_PARENT}-01"})
    info = backend_saw(s, {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01"})
    assert TRACEPARENT.match(info["traceparent"]).group(1) == CLIENT_TRACE
    started = TRACEPARENT.match(backend_saw(s)["traceparent"]).group(1)   # one of the gateway's
    with pg.cursor() as cur:
        cur.execute("SELECT trace_id FROM mcp.sessions WHERE id = %s", (s.session_id,))
        assert cur.fetchone()[0] == other
        cur.execute("SELECT trace_id FROM mcp.tool_calls WHERE session_id = %s"
                    " AND tool = 'session_info' ORDER BY started_at, stream_id", (s.session_id,))
        assert [r[0] for r in cur.fetchall()] == [CLIENT_TRACE, started]
        cur.execute("SELECT DISTINCT trace_id FROM mcp.session_transcript WHERE session_id = %s"
                    " AND stream_id IS NOT NULL", (s.session_id,))
        assert {r[0] for r in cur.fetchall()} == {CLIENT_TRACE, started}
    events = s.get_stream(headers={"traceparent": f"00-{other}-{CLIENT_PARENT}-01"})
    try:
        next(events)   # the priming event: its stream's row is stored before it is written
        with pg.cursor() as cur:
            cur.execute("SELECT trace_id FROM mcp.streams WHERE session_id = %s"
                        " AND kind = 'standalone'", (s.session_id,))
            assert cur.fetchone()[0] == other
    finally:
        s.last_response.close()
    s.close()
