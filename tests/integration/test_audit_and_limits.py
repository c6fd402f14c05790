"""The audit trail (events, views), session expiry and limits, Origin/Host checks."""

import json

import pytest
import requests

from mcp_client import ACCEPT_BOTH


def base(stack):
    return stack["MCP_URL"].rsplit("/", 1)[0]


def call_tool(s, name, arguments):
    return s.request("tools/call", {"name": name, "arguments": arguments})


def test_tool_calls_view_answers_who_called_what(mcp, stack, pg):
    alice = mcp(stack["MCP_AUTH_URL"], auth=("alice", "alice-pw"))
    alice.initialize()
    call_tool(alice, "add", {"a": 1, "b": 2})
    call_tool(alice, "fail", {})
    call_tool(alice, "no-such-tool", {})
    with pg.cursor() as cur:
        cur.execute("""SELECT "user", tool, arguments, outcome, duration >= interval '0'
                         FROM mcp.tool_calls WHERE session_id = %s ORDER BY started_at""",
                    (alice.session_id,))
        rows = cur.fetchall()
    assert rows == [("alice", "add", {"a": 1, "b": 2}, "ok", True),
                    ("alice", "fail", {}, "tool error", True),
                    ("alice", "no-such-tool", {}, "error", True)]


def test_session_transcript_is_complete_and_in_order(mcp, pg):
    s = mcp()
    s.initialize()
    s.call("tools/call", {"name": "echo", "arguments": {"text": "t"}})
    s.notify("notifications/roots/list_changed")
    with pg.cursor() as cur:
        cur.execute("""SELECT direction, kind, method, jsonrpc_id, sse_event_id
                         FROM mcp.session_transcript WHERE session_id = %s ORDER BY event_id""",
                    (s.session_id,))
        rows = cur.fetchall()
    shape = [(d, k, m) for d, k, m, _, _ in rows]
    assert shape == [("in", "message", "initialize"), ("out", "message", None),
                     ("in", "message", "notifications/initialized"),
                     ("in", "message", "tools/call"), ("out", "priming", None),
                     ("out", "message", None),
                     ("in", "message", "notifications/roots/list_changed")]
    assert rows[3][4] is None and rows[4][4].endswith("-1") and rows[5][4].endswith("-2")


def test_expired_session_answers_404(mcp, pg):
    s = mcp()
    s.initialize()
    # An hour and a bit of inactivity (MCPSessionIdleTimeout defaults to 1h).
    with pg.cursor() as cur:
        cur.execute("UPDATE mcp.sessions SET last_seen_at = now() - interval '61 minutes' "
                    "WHERE id = %s", (s.session_id,))
    r = s.post_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    assert r.status_code == 404
    with pg.cursor() as cur:
        cur.execute("SELECT terminated_by FROM mcp.sessions WHERE id = %s", (s.session_id,))
        assert cur.fetchone()[0] == "expired"


def test_a_session_is_marked_seen_at_most_once_a_minute(mcp, pg):
    """Each mark of a session's activity is a new version of its row (last_seen_at is indexed):
    calls within a minute of the last mark leave the row as it is, the first call after a
    minute marks it."""
    s = mcp()
    s.initialize()
    with pg.cursor() as cur:
        cur.execute("UPDATE mcp.sessions SET last_seen_at = now() - interval '30 seconds' "
                    "WHERE id = %s RETURNING xmin::text", (s.session_id,))
        version = cur.fetchone()[0]
    for i in range(3):
        assert s.call("tools/call", {"name": "echo", "arguments": {"text": str(i)}})
    with pg.cursor() as cur:
        cur.execute("SELECT xmin::text, now() - last_seen_at > interval '29 seconds'"
                    "  FROM mcp.sessions WHERE id = %s", (s.session_id,))
        assert cur.fetchone() == (version, True), "a call rewrote a session seen 30 s ago"
        cur.execute("UPDATE mcp.sessions SET last_seen_at = now() - interval '61 seconds' "
                    "WHERE id = %s", (s.session_id,))
    assert s.call("tools/call", {"name": "echo", "arguments": {"text": "late"}})
    with pg.cursor() as cur:
        cur.execute("SELECT now() - last_seen_at < interval '5 seconds' FROM mcp.sessions "
                    "WHERE id = %s", (s.session_id,))
        assert cur.fetchone()[0], "a call did not mark a session last seen over a minute ago"


def test_activity_keeps_a_session_alive(mcp, pg):
    s = mcp()
    s.initialize()
    with pg.cursor() as cur:
        cur.execute("UPDATE mcp.sessions SET last_seen_at = now() - interval '59 minutes' "
                    "WHERE id = %s", (s.session_id,))
    assert "tools" in s.call("tools/list")
    with pg.cursor() as cur:
        cur.execute("SELECT now() - last_seen_at < interval '1 minute' FROM mcp.sessions "
                    "WHERE id = %s", (s.session_id,))
        assert cur.fetchone()[0]


def test_an_open_stream_counts_as_activity(mcp, stack, pg):
    # /mcp-short: sessions expire after 2 s idle; the stream's lease (1 s) is renewed every ~0.33 s
    # and each renewal is activity. The call runs 3 s, longer than the idle timeout.
    s = mcp(base(stack) + "/mcp-short")
    s.initialize()
    result = s.call("tools/call", {"name": "slow", "arguments": {"count": 3, "interval_ms": 1000}})
    assert result["content"][0]["text"] == "slow done: 3 steps"
    assert "tools" in s.call("tools/list")


def test_max_sessions_is_enforced_with_429(mcp, stack, pg):
    with pg.cursor() as cur:   # leave no other live session behind (earlier tests made some)
        cur.execute("UPDATE mcp.sessions SET terminated_at = now(), terminated_by = 'client' "
                    "WHERE terminated_at IS NULL")
    url = base(stack) + "/mcp-capped"
    first, second, third = mcp(url), mcp(url), mcp(url)
    first.initialize()
    second.initialize()
    r = third.post_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                   "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                              "clientInfo": {"name": "t", "version": "0"}}}),
                       with_session=False)
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) >= 1
    assert "MCPMaxSessions" in r.json()["error"]["message"]
    assert r.json()["error"]["data"] == {"limit": "MCPMaxSessions", "max": 2}
    # Ending one makes room.
    assert first.delete().status_code == 200
    third.initialize()


@pytest.mark.parametrize("origin", ["https://evil.example.com", "null", "http://127.0.0.1.evil.com"])
def test_foreign_origin_is_403(stack, origin):
    r = requests.post(stack["MCP_URL"], data="{}", timeout=10,
                      headers={"Accept": ACCEPT_BOTH, "Content-Type": "application/json",
                               "Origin": origin})
    assert r.status_code == 403
    assert "Origin" in r.json()["error"]["message"]


def test_own_and_loopback_origins_are_allowed(mcp, stack):
    port = stack["MCP_URL"].split(":")[2].split("/")[0]
    for origin in (f"http://127.0.0.1:{port}", "http://localhost:3000"):
        s = mcp()
        s.initialize(headers={"Origin": origin})
        assert s.session_id


def test_configured_origins_replace_the_defaults(mcp, stack):
    url = base(stack) + "/mcp-origins"
    s = mcp(url)
    s.initialize(headers={"Origin": "https://app.example.com"})
    r = requests.post(url, data="{}", timeout=10, headers={
        "Accept": ACCEPT_BOTH, "Content-Type": "application/json", "Origin": "http://localhost:3000"})
    assert r.status_code == 403


def test_dns_rebinding_host_is_403(stack):
    r = requests.post(stack["MCP_URL"], data="{}", timeout=10,
                      headers={"Accept": ACCEPT_BOTH, "Content-Type": "application/json",
                               "Host": "evil.example.com"})
    assert r.status_code == 403
    assert "Host" in r.json()["error"]["message"]


def test_own_host_names_are_allowed(mcp, stack):
    port = stack["MCP_URL"].split(":")[2].split("/")[0]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        s = mcp()
        s.initialize(headers={"Host": host})
        assert s.session_id
