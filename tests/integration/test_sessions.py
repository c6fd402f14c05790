"""Sessions through mod_mcp: initialize, use from any httpd instance, terminate.

Real parts only: the stack's PostgreSQL, two independent httpd instances with the built module,
and the C test backend behind them.
"""

import json
import os
import re
import threading
import time

import requests

from mcp_client import ACCEPT_BOTH, McpError
from waiting import wait_for

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{32}$")


def text_of(result):
    return result["content"][0]["text"]


def backend_info(session):
    """What the backend saw of this session (its own session id, counters)."""
    return json.loads(text_of(session.call("tools/call", {"name": "session_info", "arguments": {}})))


def session_row(pg, sid):
    with pg.cursor() as cur:
        cur.execute("""SELECT backend_session_id, protocol_version, principal, client_info,
                              server_info, terminated_at, terminated_by, backend_url
                         FROM mcp.sessions WHERE id = %s""", (sid,))
        row = cur.fetchone()
    if row is None:
        return None
    keys = ("backend_session_id", "protocol_version", "principal", "client_info", "server_info",
            "terminated_at", "terminated_by", "backend_url")
    return dict(zip(keys, row))


def test_initialize_stores_the_session(mcp, pg, stack):
    s = mcp()
    result = s.initialize(client_info={"name": "pytest-client", "version": "9.9"})
    assert s.last_response is not None
    assert SESSION_ID.match(s.session_id), s.session_id
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["name"] == "mcp-test-backend"

    row = session_row(pg, s.session_id)
    assert row is not None
    assert row["protocol_version"] == "2025-11-25"
    assert row["principal"] is None
    assert row["client_info"] == {"name": "pytest-client", "version": "9.9"}
    assert row["server_info"]["name"] == "mcp-test-backend"
    assert row["terminated_at"] is None
    assert row["backend_url"] == stack["MCP_BACKEND_URL"]
    # The gateway's id is its own; the backend's is kept and used for forwarding.
    assert row["backend_session_id"] and row["backend_session_id"] != s.session_id
    assert backend_info(s)["session"] == row["backend_session_id"]


def test_session_ids_are_unique_and_random(mcp):
    ids = set()
    for _ in range(5):
        s = mcp()
        s.initialize()
        ids.add(s.session_id)
    assert len(ids) == 5


def test_older_protocol_version_is_negotiated(mcp, pg):
    s = mcp(protocol_version="2025-03-26")
    assert s.initialize()["protocolVersion"] == "2025-03-26"
    assert session_row(pg, s.session_id)["protocol_version"] == "2025-03-26"


def test_tools_list_and_call(mcp):
    s = mcp()
    s.initialize()
    names = {t["name"] for t in s.call("tools/list")["tools"]}
    assert {"echo", "add", "slow"} <= names
    assert text_of(s.call("tools/call", {"name": "echo", "arguments": {"text": "héllo/√"}})) == "héllo/√"
    assert text_of(s.call("tools/call", {"name": "add", "arguments": {"a": 2, "b": 40}})) == "42"
    # A JSON-RPC error from the backend is relayed as it is.
    resp = s.request("no/such/method")
    assert resp["error"]["code"] == -32601


def test_slow_tool_streams_progress_as_it_happens(mcp):
    s = mcp()
    s.initialize()
    count, interval_ms = 4, 300
    arrivals, messages = [], []
    for ev in s.request_stream("tools/call", {"name": "slow",
                                              "arguments": {"count": count, "interval_ms": interval_ms},
                                              "_meta": {"progressToken": "tok-1"}}):
        if ev.data == "":
            continue   # the priming event
        arrivals.append(time.monotonic())
        messages.append(ev.json)
    assert s.last_response.headers["Content-Type"].startswith("text/event-stream")
    assert s.last_response.headers.get("Cache-Control") == "no-cache, no-transform"
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert [m["params"]["progress"] for m in progress] == list(range(1, count + 1))
    assert all(m["params"]["progressToken"] == "tok-1" for m in progress)
    assert messages[-1]["id"] == s.last_request_id
    assert text_of(messages[-1]["result"]) == f"slow done: {count} steps"
    # Relayed as they happen, not gathered up: the first progress event reached the client
    # well before the backend produced the last one (a buffering relay delivers all at once).
    assert arrivals[-1] - arrivals[0] >= (count - 1) * interval_ms / 1000 * 0.8


def test_notifications_and_responses_get_202_and_reach_the_backend(mcp):
    s = mcp()
    s.initialize()
    r = s.notify("notifications/roots/list_changed")
    assert r.status_code == 202 and r.content == b""
    r = s.respond("not-pending-1", {"ok": True})
    assert r.status_code == 202 and r.content == b""
    info = backend_info(s)
    assert info["notifications"].get("notifications/roots/list_changed") == 1
    assert info["notifications"].get("notifications/initialized") == 1
    assert info["responses"] == 1
    # The protocol version forwarded is the negotiated one.
    assert info["protocolVersionHeader"] == "2025-11-25"


def test_one_session_served_by_two_httpd_instances(mcp, stack):
    urls = stack["MCP_URLS"].split()
    assert len(urls) >= 2, "the stack must run two httpd instances"
    first = mcp(urls[0])
    first.initialize()
    second = mcp(urls[1])
    second.session_id = first.session_id
    second.protocol_version = first.protocol_version
    second.initialized = True
    assert text_of(second.call("tools/call", {"name": "echo", "arguments": {"text": "via 2"}})) == "via 2"
    # Both instances reach the same backend session.
    assert backend_info(first)["session"] == backend_info(second)["session"]
    assert backend_info(second)["requests"] >= 3


def test_delete_is_seen_by_every_instance(mcp, stack, pg):
    urls = stack["MCP_URLS"].split()
    s = mcp(urls[0])
    s.initialize()
    backend_sid = session_row(pg, s.session_id)["backend_session_id"]

    other = mcp(urls[1])
    other.session_id, other.initialized = s.session_id, True

    r = s.delete()
    assert r.status_code == 200
    row = session_row(pg, s.session_id)
    assert row["terminated_at"] is not None and row["terminated_by"] == "client"

    for client in (other, s):
        r = client.post_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == -32001
    assert other.delete().status_code == 404

    # The DELETE reached the backend: its own session is gone too.
    r = requests.post(stack["MCP_BACKEND_URL"],
                      data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
                      headers={"Accept": ACCEPT_BOTH, "Content-Type": "application/json",
                               "Mcp-Session-Id": backend_sid}, timeout=10)
    assert r.status_code == 404


def test_session_belongs_to_its_user(mcp, stack, pg):
    alice = mcp(stack["MCP_AUTH_URL"], auth=("alice", "alice-pw"))
    alice.initialize()
    assert session_row(pg, alice.session_id)["principal"] == "alice"

    # Bob holding Alice's session id is treated as if it did not exist.
    bob = mcp(stack["MCP_AUTH_URL"], auth=("bob", "bob-pw"))
    bob.session_id, bob.initialized = alice.session_id, True
    r = bob.post_raw(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
    assert r.status_code == 404
    assert bob.delete().status_code == 404

    # An anonymous endpoint does not serve an authenticated user's session either.
    anon = mcp(stack["MCP_URL"])
    anon.session_id, anon.initialized = alice.session_id, True
    assert anon.post_raw(json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/list"})).status_code == 404

    # Alice's session is untouched by all that.
    assert "tools" in alice.call("tools/list")
    assert session_row(pg, alice.session_id)["terminated_at"] is None


def test_unauthenticated_request_on_protected_endpoint_is_401(stack):
    r = requests.post(stack["MCP_AUTH_URL"], data="{}", headers={"Accept": ACCEPT_BOTH,
                      "Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 401


def test_concurrent_calls_on_one_session_touch_it_and_race_its_delete(mcp, stack, pg, wire):
    """Many calls at once on one session over both instances, a DELETE racing them. Record,
    then dispatch locks the session's row in one mode only (an UPDATE that touches it when its
    activity is over a second old, FOR KEY SHARE otherwise; a termination takes FOR UPDATE
    first): no deadlock (PostgreSQL breaks one after deadlock_timeout and logs it, the store's
    retry hides it from the client; the calls stall meanwhile), and no touch lost (a call
    started after the activity was made stale records its own)."""
    log = stack["MCP_PG_LOG"]
    log_from = os.path.getsize(log)
    with pg.cursor() as cur:   # a broken lock order fails the test, never hangs it
        cur.execute("SET statement_timeout = '20s'")
    first = mcp(wire.url(0), timeout=15)
    first.initialize()
    sid = first.session_id

    def clone(instance):
        c = mcp(wire.url(instance), timeout=15)
        c.session_id, c.protocol_version, c.initialized = sid, first.protocol_version, True
        return c

    clients = [clone(i % 2) for i in range(12)]
    lock = threading.Lock()
    outcomes = []          # (started, finished, status, JSON-RPC answer or None)
    stop = threading.Event()

    def worker(c):
        while not stop.is_set():
            started = time.monotonic()
            try:
                answer, status = c.request("tools/call", {"name": "echo", "arguments": {"text": "x"}}), 200
            except McpError as e:
                status = e.response.status_code if e.response is not None else 0
                answer = e.response.json() if status == 404 else str(e)
            except requests.RequestException as e:
                answer, status = str(e), 0
            with lock:
                outcomes.append((started, time.monotonic(), status, answer))

    def done_after(t):
        with lock:
            return any(o[0] > t and o[2] == 200 for o in outcomes)

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    try:
        # The activity made stale (2 minutes ago: a session is marked seen at most once a
        # minute) again and again: a call that starts after that must leave it fresh, whatever
        # the other calls hold at that moment.
        for _ in range(8):
            with pg.cursor() as cur:
                cur.execute("UPDATE mcp.sessions SET last_seen_at = now() - interval '2 minutes'"
                            " WHERE id = %s RETURNING last_seen_at", (sid,))
                stale = cur.fetchone()[0]
            mark = time.monotonic()
            wait_for(lambda: done_after(mark), timeout=20, what="a call after the reset")
            # (A touch records its transaction's start: one begun just before the reset and
            # committed after it may record a time a little before the reset's, not before
            # the stale value.)
            with pg.cursor() as cur:
                cur.execute("SELECT last_seen_at > %s FROM mcp.sessions WHERE id = %s",
                            (stale, sid))
                assert cur.fetchone()[0], "a call on a stale session did not touch it"
        # The DELETE, with every worker still calling.
        deleted_at = time.monotonic()
        assert first.delete().status_code == 200
        deleted = time.monotonic()
        wait_for(lambda: sum(1 for o in outcomes if o[0] > deleted) >= len(clients), timeout=20,
                 what="calls after the DELETE")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)

    before = [o for o in outcomes if o[1] < deleted_at]
    after = [o for o in outcomes if o[0] > deleted]
    assert len(before) > 50
    assert all(o[2] == 200 and o[3].get("result") for o in before), \
        [o for o in before if o[2] != 200 or not o[3].get("result")][:3]
    # Once the DELETE was answered, the session is gone for every call, on both instances.
    assert after and all(o[2] == 404 and o[3]["error"]["code"] == -32001 for o in after), \
        [o for o in after if o[2] != 404][:3]
    # Calls overlapping it were answered before it (200 with their result) or refused
    # (404), or their stream was ended by it (a JSON-RPC error on the 200 stream).
    assert all(o[2] in (200, 404) for o in outcomes), [o for o in outcomes if o[2] not in (200, 404)][:3]
    with pg.cursor() as cur:
        cur.execute("SELECT count(*) FILTER (WHERE status = 'open'), count(*)"
                    "  FROM mcp.streams WHERE session_id = %s", (sid,))
        still_open, streams = cur.fetchone()
    assert still_open == 0 and streams >= len(before)
    with open(log, errors="replace") as f:
        f.seek(log_from)
        assert "deadlock detected" not in f.read()
