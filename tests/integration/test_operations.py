"""Operating mod_mcp: the access-log notes, mod_status's mod_mcp section, the Prometheus metrics
(README "Operating mod_mcp")."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import requests

from waiting import wait_for


def _base(url: str) -> str:
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc}"


def _notes_lines(stack, httpd: int = 1) -> list[list[str]]:
    path = Path(stack["MCP_STACK_DIR"]) / f"httpd-{httpd}" / "mcp_log"
    return [line.split("\t") for line in path.read_text().splitlines()]


def test_access_log_notes(stack, mcp):
    url = stack["MCP_URLS"].split()[0]
    s = mcp(url)
    s.initialize()
    result = s.call("tools/call", {"name": "echo", "arguments": {"text": "log me"}})
    assert result["content"][0]["text"] == "log me"
    call_id = s.last_request_id
    # Wait for the line: httpd logs after the response went out.
    fields = ["status", "http_method", "method", "name", "id", "stream", "protocol", "session",
              "user"]

    def line_of_call():
        # The newest such line: the shared stack's log has other sessions' calls with the same
        # request id (ids count per session).
        found = None
        for parts in _notes_lines(stack):
            row = dict(zip(fields, parts))
            if (row.get("method") == "tools/call" and row.get("id") == str(call_id)
                    and row.get("name") == "echo"):
                found = row
        return found

    row = wait_for(line_of_call, what="the access-log line of the tools/call")
    assert row["status"] == "200" and row["http_method"] == "POST"
    assert row["name"] == "echo"
    assert re.fullmatch(r"\d+", row["stream"]), row
    assert row["protocol"] == s.protocol_version
    # The session appears by its tag only, never the id itself (a bearer token).
    assert row["session"] not in ("-", "") and s.session_id not in row["session"]
    assert row["session"] not in s.session_id
    # initialize is logged with its negotiated protocol version and the new session's tag.
    init = [dict(zip(fields, p)) for p in _notes_lines(stack)
            if len(p) > 2 and p[2] == "initialize" and p[7] == row["session"]]
    assert init and init[0]["protocol"] == s.protocol_version and init[0]["stream"] == "-"


def test_a_batchs_note_joins_its_methods(stack, mcp):
    """The mcp-method note of a batch: its methods joined by ", " (joined once: it was merged
    message by message, quadratic in the batch's length)."""
    s = mcp(stack["MCP_URLS"].split()[0], protocol_version="2025-03-26")
    s.initialize()
    r = s.post_raw('[{"jsonrpc":"2.0","id":"n1","method":"ping"},'
                   '{"jsonrpc":"2.0","method":"notifications/progress",'
                   '"params":{"progressToken":"t","progress":1}},'
                   '{"jsonrpc":"2.0","id":"n2","method":"tools/list"}]')
    assert r.status_code == 200, r.text

    def line():
        return next((p for p in _notes_lines(stack)
                     if len(p) > 2 and p[2] == "ping, notifications/progress, tools/list"), None)

    wait_for(line, what="the access-log line of the batch")


def _auto(base: str) -> dict[str, str]:
    r = requests.get(base + "/server-status?auto", timeout=10)
    assert r.status_code == 200, r.text[:300]
    out = {}
    for line in r.text.splitlines():
        k, sep, v = line.partition(": ")
        if sep:
            out[k] = v
    return out


def test_server_status_section(stack, mcp):
    url = stack["MCP_URLS"].split()[0]
    base = _base(url)
    before = _auto(base)
    for key in ("MCPLiveSessions", "MCPOpenRequestStreams", "MCPOpenStandaloneStreams",
                "MCPFollowers", "MCPCalls", "MCPEventsStored", "MCPBytesStored",
                "MCPLeaseTakeovers", "MCPSweeps", "MCPDatabaseConnectionsInUse",
                "MCPListenersConnected", "MCPChildren"):
        assert key in before, f"{key} missing from ?auto: {sorted(before)}"
    assert before["MCPDatabase"] == "up"
    assert int(before["MCPChildren"]) >= 1
    # Each child's listener connects shortly after it starts.
    wait_for(lambda: int(_auto(base)["MCPListenersConnected"]) == int(_auto(base)["MCPChildren"]),
             what="every child's listener connected")
    listeners = {k: v for k, v in _auto(base).items() if k.startswith("MCPListener") and
                 k[len("MCPListener"):].isdigit()}
    assert listeners and set(listeners.values()) == {"connected"}, listeners

    s = mcp(url)
    s.initialize()
    s.call("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    r = s.post_raw(b"{not json")            # a 400 is counted by status
    assert r.status_code == 400
    after = _auto(base)
    assert int(after["MCPLiveSessions"]) >= 1
    assert int(after["MCPCalls"]) >= int(before["MCPCalls"]) + 1
    assert int(after["MCPEventsStored"]) >= int(before["MCPEventsStored"]) + 1
    assert int(after["MCPBytesStored"]) > int(before["MCPBytesStored"])
    assert int(after["MCPSessionsStarted"]) >= int(before["MCPSessionsStarted"]) + 1
    assert int(after.get("MCPRejected400", 0)) >= int(before.get("MCPRejected400", 0)) + 1

    # An open standalone stream is counted by kind (from the database, every host).
    g = mcp(url)
    g.initialize()
    events = g.get_stream(include_empty=True)
    next(events)                                   # the stream is open (its priming event)
    try:
        wait_for(lambda: int(_auto(base)["MCPOpenStandaloneStreams"]) >= 1,
                 what="the open standalone stream in server-status")
        # Every child LISTENs on one channel: a session's DELETE notifies each stream it ends
        # (for its owner, wherever it is), and that notification wakes every child. (A plain
        # call notifies nothing: only followed streams are notified.)
        assert g.delete().status_code in (200, 204)

        def all_woken():
            ago = {k: v for k, v in _auto(base).items() if k.startswith("MCPLastWakeupAgo")}
            return ago and all(v != "-" and float(v) >= 0 for v in ago.values())

        wait_for(all_woken, what="a wake-up in every child's status slot")
    finally:
        g.last_response.close()

    html = requests.get(base + "/server-status", timeout=10).text
    assert "<h2>mod_mcp</h2>" in html and "Live sessions (all hosts)" in html


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.eE+]+|\+Inf|NaN)$')


def _scrape(base: str) -> tuple[dict[str, float], dict[str, str]]:
    """Parses the Prometheus text format strictly: every line is a comment (# HELP/# TYPE) or a
    sample of a declared family."""
    r = requests.get(base + "/mcp-metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, float] = {}
    types: dict[str, str] = {}
    for line in r.text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            assert typ in ("counter", "gauge", "histogram"), line
            types[name] = typ
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name = m.group(1)
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, f"sample of an undeclared family: {line!r}"
        samples[name + (m.group(2) or "")] = float(m.group(3))
    return samples, types


def test_metrics_scrape(stack, mcp):
    url = stack["MCP_URLS"].split()[0]
    base = _base(url)
    before, types = _scrape(base)
    for h in ("mcp_backend_latency_seconds", "mcp_store_latency_seconds",
              "mcp_time_to_first_event_seconds"):
        assert types[h] == "histogram"
        # Buckets are cumulative and end with +Inf == _count.
        buckets = [(k, v) for k, v in before.items() if k.startswith(h + "_bucket")]
        values = [v for _, v in buckets]
        assert values == sorted(values), buckets
        assert before[f'{h}_bucket{{le="+Inf"}}'] == before[h + "_count"]
    assert types["mcp_calls_total"] == "counter"
    assert before["mcp_database_up"] == 1

    s = mcp(url)
    s.initialize()
    for i in range(3):
        s.call("tools/call", {"name": "echo", "arguments": {"text": str(i)}})
    # Every child shows the same totals (shared memory): scrapes on fresh connections land on
    # either of the server's processes.
    for _ in range(5):
        again, _ = _scrape(base)
        assert again["mcp_calls_total"] >= before["mcp_calls_total"] + 3
    after, _ = _scrape(base)
    assert after["mcp_calls_total"] >= before["mcp_calls_total"] + 3
    assert after["mcp_events_stored_total"] >= before["mcp_events_stored_total"] + 3
    assert after["mcp_sessions_started_total"] >= before["mcp_sessions_started_total"] + 1
    for h in ("mcp_backend_latency_seconds", "mcp_store_latency_seconds",
              "mcp_time_to_first_event_seconds"):
        assert after[h + "_count"] >= before[h + "_count"] + 3, h
        assert after[h + "_sum"] > before[h + "_sum"], h
    assert after["mcp_live_sessions"] >= 1
    assert 'mcp_open_streams{kind="request"}' in after
    # Only GET.
    r = requests.post(base + "/mcp-metrics", timeout=10)
    assert r.status_code == 405
    assert "GET" in [m.strip() for m in r.headers["Allow"].split(",")], r.headers
