"""The era bridge's former limits (issue 14's closing note), closed — 2026-07-28 clients through
the 2025-only C test backend, on a stack of this module's own:

* Mcp-Param-* headers checked against the backend's x-mcp-header arguments (400, -32020), from
  the pooled session's tool list cached in PostgreSQL (mcp.bridge_sessions.tool_headers): read
  when missing or older than MCPEraBridgeToolsTTL, read again before a refusal on an older
  list, refreshed by a client's complete tools/list;
* mcp.tool_calls counts a bridged call once (the client's stream; the backend stream is its
  backend_stream_id), a round as 'input required';
* a client's notifications/cancelled reaches the backend with the call's backend-side id;
  other client notifications are stored and accepted, not forwarded;
* a second listen's own pooled session ends with the listen (and is DELETEd upstream);
* concurrent calls that find the pool empty, or its session lost upstream, start one session
  per process; an old tool list is read again once per process;
* a backend's -32042 (URL elicitations required) becomes a round of URL-mode elicitation/create
  requests; its retry sends the call again (the fault backend, tests/backend/mcp-fault-backend).
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from conftest import database, own_stack, run_dir
from test_database_faults import log_sizes, new_lines
from waiting import wait_for

V = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def bridge():
    d = run_dir("mcp-bridge-limits.")
    with own_stack(d, "--conf", str(Path(__file__).resolve().parent / "gateway-bridge.conf")) as env:
        env["URL"] = env["MCP_URLS"].split()[0]
        yield env


@pytest.fixture
def db(bridge):
    with database(bridge) as conn:
        yield conn


def caps_of(tag):
    """Client capabilities of a pooled session of this test's own (the pool is keyed by them)."""
    return {"elicitation": {}, "experimental": {tag: {}}}


def post(url, rid, method, params=None, caps=None, headers=None, stream=False, notification=False,
         **meta):
    params = dict(params or {})
    params["_meta"] = {**meta,"io.modelcontextprotocol/protocolVersion": V,
                       "io.modelcontextprotocol/clientCapabilities": caps or {},
                       "io.modelcontextprotocol/clientInfo": {"name": "test_bridge_limits",
                                                              "version": "1"}}
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": V,
         "Mcp-Method": method}
    if method == "tools/call":
        h["Mcp-Name"] = params["name"]
    h.update(headers or {})
    body = {"jsonrpc": "2.0", "method": method, "params": params}
    if not notification:
        body["id"] = rid
    return requests.post(url, data=json.dumps(body), headers=h, stream=stream, timeout=30)


def call(url, rid, name, arguments, caps, headers=None, **kw):
    return post(url, rid, "tools/call", {"name": name, "arguments": arguments}, caps, headers, **kw)


def final(resp):
    if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        msgs = [json.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:")]
    else:
        msgs = [resp.json()]
    assert msgs and "id" in msgs[-1], resp.text
    return msgs[-1]


def b64(text):
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def pooled(db, tag):
    with db.cursor() as cur:
        cur.execute("SELECT session_id, tool_headers, tools_fetched_at FROM mcp.bridge_sessions"
                    " WHERE capabilities_key = %s", (json.dumps(caps_of(tag), sort_keys=True,
                                                                separators=(",", ":")),))
        rows = cur.fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def client_stream(db, rid):
    with db.cursor() as cur:
        cur.execute("SELECT id, status, bridged_to FROM mcp.streams WHERE session_id IS NULL"
                    " AND request_id = %s::jsonb ORDER BY id DESC LIMIT 1", (json.dumps(rid),))
        return cur.fetchone()


def session_info(url, rid, caps):
    r = call(url, rid, "session_info", {}, caps)
    assert r.status_code == 200, r.text
    return json.loads(final(r)["result"]["content"][0]["text"])


def refused_32020(r, words):
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == -32020, error
    assert words in error["message"], error


# ---- Mcp-Param-* ---------------------------------------------------------------------------------


def test_mcp_param_headers_are_checked_against_the_x_mcp_header_arguments(bridge, db):
    caps, url = caps_of("param"), bridge["URL"]
    ok = call(url, "p-1", "test_custom_header", {"region": "Hello"}, caps,
              {"Mcp-Param-Region": b64("Hello")})
    assert ok.status_code == 200, ok.text
    assert final(ok)["result"]["content"][0]["text"] == "region: Hello"
    literal = call(url, "p-2", "test_custom_header", {"region": "eu-west"}, caps,
                   {"mcp-param-region": "eu-west  "})
    assert literal.status_code == 200, literal.text

    refused_32020(call(url, "p-3", "test_custom_header", {"region": "eu"}, caps),
                  "Mcp-Param-Region header is required")
    refused_32020(call(url, "p-4", "test_custom_header", {"region": "Hello"}, caps,
                       {"Mcp-Param-Region": "=?base64?SGVsbG8?="}), "not canonical base64")
    refused_32020(call(url, "p-5", "test_custom_header", {"region": "eu"}, caps,
                       {"Mcp-Param-Region": "us"}), "Mcp-Param-Region is 'us'")
    # A tool without declarations, and one the list does not name, are not checked here.
    assert call(url, "p-6", "echo", {"text": "x"}, caps, {"Mcp-Param-Region": "zz"}).status_code == 200
    nope = call(url, "p-7", "no_such_tool", {"region": "x"}, caps)
    assert "error" in final(nope) and final(nope)["error"]["code"] != -32020

    # A refused call is stored on the client's stream (failed, its answer as sent) and never
    # reached the backend: no backend stream.
    cid, status, bridged_to = client_stream(db, "p-5")
    assert (status, bridged_to) == ("failed", None)
    with db.cursor() as cur:
        cur.execute("SELECT message->'error'->>'code' FROM mcp.events WHERE stream_id = %s"
                    " AND direction = 'out'", (cid,))
        assert cur.fetchall() == [("-32020",)]
    _, headers, fetched = pooled(db, "param")
    assert headers["test_custom_header"] == [{"header": "Region", "type": "string",
                                              "path": ["region"]}]
    assert headers["echo"] == [] and fetched is not None


def test_the_cached_tool_list_is_used_and_read_again_when_old(bridge, db):
    caps, url = caps_of("cache"), bridge["URL"]
    assert call(url, "c-1", "test_custom_header", {"region": "a"}, caps,
                {"Mcp-Param-Region": "a"}).status_code == 200
    sid, _, _ = pooled(db, "cache")
    # The backend's tool "changed" (as far as the cache knows) and the list was read just now:
    # the cached declarations decide, without asking the backend.
    fake = json.dumps({"test_custom_header": [{"header": "Zone", "type": "string",
                                               "path": ["region"]}]})
    with db.cursor() as cur:
        cur.execute("UPDATE mcp.bridge_sessions SET tool_headers = %s, tools_fetched_at = now()"
                    " WHERE session_id = %s", (fake, sid))
    refused_32020(call(url, "c-2", "test_custom_header", {"region": "a"}, caps,
                       {"Mcp-Param-Region": "a"}), "Mcp-Param-Zone header is required")
    # The same list, read 5 s ago: a refusal is never made on it; the list is read again, and
    # the call (right by the backend's real list) passes.
    with db.cursor() as cur:
        cur.execute("UPDATE mcp.bridge_sessions SET tool_headers = %s,"
                    " tools_fetched_at = now() - interval '5 s' WHERE session_id = %s", (fake, sid))
    r = call(url, "c-3", "test_custom_header", {"region": "a"}, caps, {"Mcp-Param-Region": "a"})
    assert r.status_code == 200, r.text
    _, headers, _ = pooled(db, "cache")
    assert headers["test_custom_header"][0]["header"] == "Region"
    # Older than MCPEraBridgeToolsTTL (60 s): read again before the check.
    with db.cursor() as cur:
        cur.execute("UPDATE mcp.bridge_sessions SET tool_headers = '{}',"
                    " tools_fetched_at = now() - interval '61 s' WHERE session_id = %s", (sid,))
    refused_32020(call(url, "c-4", "test_custom_header", {"region": "a"}, caps),
                  "Mcp-Param-Region header is required")


def test_a_clients_complete_tools_list_refreshes_the_cache(bridge, db):
    caps, url = caps_of("listed"), bridge["URL"]
    assert call(url, "l-1", "echo", {"text": "x"}, caps).status_code == 200
    sid, _, _ = pooled(db, "listed")
    with db.cursor() as cur:
        cur.execute("UPDATE mcp.bridge_sessions SET tool_headers = '{}',"
                    " tools_fetched_at = now() - interval '1 hour' WHERE session_id = %s", (sid,))
    r = post(url, "l-2", "tools/list", {}, caps)
    assert r.status_code == 200 and "tools" in final(r)["result"], r.text
    _, headers, fetched = pooled(db, "listed")
    assert headers["test_custom_header"][0]["header"] == "Region"
    with db.cursor() as cur:
        cur.execute("SELECT now() - %s < interval '30 s'", (fetched,))
        assert cur.fetchone()[0]


def burst(n, fn):
    """fn(i) in n threads let go at once; their results in order."""
    results = [None] * n
    go = threading.Barrier(n)

    def one(i):
        go.wait()
        results[i] = fn(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def starts_by_pid(lines):
    """The processes of the 'pooled session ... started' lines, one entry per line."""
    return [re.search(r"\[pid (\d+)", l).group(1) for l in lines
            if re.search(r"era bridge: pooled session \S+ started for", l)]


def pool_rows(db, tag):
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM mcp.bridge_sessions WHERE capabilities_key = %s",
                    (json.dumps(caps_of(tag), sort_keys=True, separators=(",", ":")),))
        return cur.fetchone()[0]


def test_an_old_tool_list_is_read_once_per_process_by_concurrent_calls(bridge, db):
    """When the list (and the pooled session's row) get old under load, every call in flight
    finds them so at once. One call of each process reads the list again; the others check
    against the list they found (bench/run's bridged point: 8 reads, then 8 updates of the pool's
    row taken in turn, cost the first 8 calls ~200 ms each). Every call is answered."""
    caps, url = caps_of("burst"), bridge["URL"]
    assert call(url, "b-0", "echo", {"text": "x"}, caps).status_code == 200
    sid, _, fetched_before = pooled(db, "burst")
    with db.cursor() as cur:
        cur.execute("UPDATE mcp.bridge_sessions SET tools_fetched_at = now() - interval '1 hour'"
                    " WHERE session_id = %s", (sid,))
        cur.execute("UPDATE mcp.sessions SET last_seen_at = now() - interval '2 minutes'"
                    " WHERE id = %s", (sid,))
    sizes = log_sizes(bridge)
    results = burst(16, lambda i: call(url, f"b-{i + 1}", "echo", {"text": f"burst {i}"}, caps))
    for i, r in enumerate(results):
        assert r.status_code == 200 and f"burst {i}" in r.text, r.text
    reads = [l for l in new_lines(sizes) if f"pooled session {sid}: tool list read" in l]
    pids = [re.search(r"\[pid (\d+)", l).group(1) for l in reads]
    assert reads, "nobody read the old list again"
    assert len(pids) == len(set(pids)), "\n".join(reads)
    _, _, fetched = pooled(db, "burst")
    assert fetched > fetched_before
    with db.cursor() as cur:
        cur.execute("SELECT last_seen_at > now() - interval '1 minute' FROM mcp.sessions"
                    " WHERE id = %s", (sid,))
        assert cur.fetchone()[0], "the pooled session was not marked seen"


def test_an_empty_pool_is_started_once_per_process_by_concurrent_calls(bridge, db):
    """The first calls of a pool key arrive together (an agent's parallel calls, or any load
    once the key's pooled session expired): one call of each process initializes the pool's
    session, the others await it and take it. Before, each started a session of its own: 16
    initialize exchanges upstream and 16 rows for one key, of which only the newest was used."""
    caps, url = caps_of("empty-burst"), bridge["URL"]
    sizes = log_sizes(bridge)
    results = burst(16, lambda i: call(url, f"e-{i}", "echo", {"text": f"empty {i}"}, caps))
    for i, r in enumerate(results):
        assert r.status_code == 200 and f"empty {i}" in r.text, r.text
    pids = starts_by_pid(new_lines(sizes))
    assert pids, "no pooled session was started"
    assert len(pids) == len(set(pids)), f"starts per process: {pids}"
    assert pool_rows(db, "empty-burst") == len(pids)


def test_a_session_the_backend_lost_is_started_again_once_per_process(bridge, db):
    """Every call in flight on a pooled session that the backend forgot gets a 404 and starts the
    session again: one call of each process does, the others await it and send on the new one."""
    caps, url = caps_of("lost-burst"), bridge["URL"]
    before = session_info(url, "lb-0", caps)
    r = requests.delete(bridge["MCP_BACKEND_URL"], headers={"Mcp-Session-Id": before["session"],
                                                            "MCP-Protocol-Version": "2025-11-25"},
                        timeout=10)
    assert r.status_code in (200, 204), r.text
    sizes = log_sizes(bridge)
    results = burst(16, lambda i: call(url, f"lb-{i + 1}", "echo", {"text": f"lost {i}"}, caps))
    for i, r in enumerate(results):
        assert r.status_code == 200 and f"lost {i}" in r.text, r.text
    lines = new_lines(sizes)
    assert any("the backend lost pooled session" in l for l in lines), "no call saw the 404"
    pids = starts_by_pid(lines)
    assert pids and len(pids) == len(set(pids)), f"starts per process: {pids}"
    assert session_info(url, "lb-17", caps)["session"] != before["session"]


# ---- the audit --------------------------------------------------------------------------------


def test_tool_calls_counts_a_bridged_call_once(bridge, db):
    caps, url = caps_of("audit"), bridge["URL"]
    assert call(url, "a-1", "echo", {"text": "once"}, caps).status_code == 200
    r = call(url, "a-2", "test_elicitation", {"message": "Who?"}, caps)
    assert final(r)["result"]["resultType"] == "input_required", r.text
    sid, _, _ = pooled(db, "audit")
    with db.cursor() as cur:
        for rid, outcome in (("a-1", "ok"), ("a-2", "input required")):
            cid, _, bridged_to = client_stream(db, rid)
            assert bridged_to is not None
            cur.execute("SELECT stream_id, session_id, tool, outcome, backend_stream_id"
                        " FROM mcp.tool_calls WHERE stream_id IN (%s, %s)", (cid, bridged_to))
            tool = "echo" if rid == "a-1" else "test_elicitation"
            assert cur.fetchall() == [(cid, None, tool, outcome, bridged_to)]
        cur.execute("SELECT count(*) FROM mcp.tool_calls WHERE session_id = %s", (sid,))
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM mcp.streams WHERE session_id = %s AND method = 'tools/call'",
                    (sid,))
        assert cur.fetchone()[0] == 2   # the backend streams are there, linked, just not counted


# ---- client notifications ---------------------------------------------------------------------


def test_a_clients_notifications_cancelled_reaches_the_backend(bridge, db):
    caps, url = caps_of("cancel"), bridge["URL"]
    r = call(url, "n-1", "slow", {"count": 100, "interval_ms": 100}, caps, stream=True,
             progressToken="n")
    assert r.status_code == 200
    lines = r.iter_lines()
    assert any(line.startswith(b"data:") for line in lines)   # the call runs upstream
    cid, _, bid = client_stream(db, "n-1")
    n = post(url, None, "notifications/cancelled", {"requestId": "n-1", "reason": "changed my mind"},
             caps, notification=True)
    assert n.status_code == 202, n.text
    rest = b"\n".join(lines)   # the backend ends the call's stream: so does the client's
    assert b"slow done" not in rest
    r.close()
    assert cid in session_info(url, "n-2", caps)["cancelled"]   # the backend-side id is cid
    sid, _, _ = pooled(db, "cancel")
    with db.cursor() as cur:
        cur.execute("SELECT message FROM mcp.events WHERE session_id = %s AND stream_id IS NULL"
                    " AND direction = 'in' AND message->>'method' = 'notifications/cancelled'",
                    (sid,))
        assert cur.fetchall() == [({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                    "params": {"requestId": cid, "reason": "changed my mind"}},)]
    wait_for(lambda: client_stream(db, "n-1")[1] != "open", timeout=10,
             what="the cancelled call's client stream to end")


def test_notifications_without_a_meaning_upstream_are_stored_not_forwarded(bridge, db):
    caps, url = caps_of("other"), bridge["URL"]
    before = session_info(url, "o-1", caps)["notifications"]
    for method, params in (("notifications/cancelled", {"requestId": "never-made"}),
                           ("notifications/progress", {"progressToken": "t", "progress": 1})):
        n = post(url, None, method, params, caps, notification=True)
        assert n.status_code == 202, n.text
    after = session_info(url, "o-2", caps)["notifications"]
    assert after == before
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM mcp.events WHERE session_id IS NULL AND stream_id IS NULL"
                    " AND message->'params'->>'requestId' = 'never-made'")
        assert cur.fetchone()[0] == 1


# ---- listens ------------------------------------------------------------------------------------


def next_data(lines):
    for line in lines:
        if line.startswith(b"data:"):
            return json.loads(line[5:])
    raise AssertionError("the listen stream ended")


def test_a_second_listens_own_pooled_session_ends_with_it(bridge, db):
    caps, url = caps_of("listen"), bridge["URL"]
    listens = []
    for rid in ("s-1", "s-2"):
        r = post(url, rid, "subscriptions/listen", {"notifications": {"toolsListChanged": True}},
                 caps, stream=True)
        assert r.status_code == 200, r.text
        lines = r.iter_lines()
        assert next_data(lines)["method"] == "notifications/subscriptions/acknowledged"
        listens.append(r)
    key = json.dumps(caps, sort_keys=True, separators=(",", ":"))
    with db.cursor() as cur:
        cur.execute("SELECT b.session_id, s.backend_session_id FROM mcp.bridge_sessions b"
                    " JOIN mcp.sessions s ON s.id = b.session_id WHERE b.capabilities_key LIKE %s",
                    (key + "#listen-%",))
        (own, backend_sid), = cur.fetchall()

    def ended():
        with db.cursor() as cur:
            cur.execute("SELECT terminated_by FROM mcp.sessions WHERE id = %s", (own,))
            return cur.fetchone()[0]
    assert ended() is None
    listens[1].close()
    wait_for(lambda: ended() == "client", timeout=15, what="the second listen's pooled session to end")
    wait_for(lambda: f"DELETE /mcp session={backend_sid}" in Path(bridge["MCP_BACKEND_LOG"]).read_text(),
             timeout=10, what="the backend to get the session's DELETE")
    # The first listen's pooled session (the one calls share) lives on.
    with db.cursor() as cur:
        cur.execute("SELECT s.terminated_at FROM mcp.bridge_sessions b JOIN mcp.sessions s"
                    " ON s.id = b.session_id WHERE b.capabilities_key = %s", (key,))
        assert cur.fetchall() == [(None,)]
    listens[0].close()


# ---- -32042: URL elicitations -------------------------------------------------------------------


@pytest.fixture(scope="module")
def faults(bridge):
    """The fault backend on the socket gateway-bridge.conf's /mcp-bridge-faults points at."""
    binary = Path(__file__).resolve().parents[2] / "tests" / "backend" / "mcp-fault-backend"
    d = Path(bridge["MCP_STACK_DIR"])
    with open(d / "faults.log", "ab") as log:
        proc = subprocess.Popen([str(binary), "--unix", str(d / "faults.sock")],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
    try:
        assert proc.stdout.readline().strip() == b"ready", "mcp-fault-backend did not start"
        yield bridge["URL"].rsplit("/", 1)[0] + "/mcp-bridge-faults"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


URL_NEEDED = {"jsonrpc": "2.0", "id": "{{id}}", "error": {
    "code": -32042, "message": "This request requires more information.",
    "data": {"elicitations": [{"mode": "url", "elicitationId": "e-7",
                               "url": "https://auth.example.com/connect?e=7",
                               "message": "Authorize access to your files."}]}}}


def test_a_url_elicitation_required_error_becomes_a_round(faults, db):
    caps = {"elicitation": {"url": {}}}
    body = json.dumps(URL_NEEDED).replace('"{{id}}"', "{{id}}")
    raw = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body
    args = {"parts": [[raw, 1]], "then": "close", "delay_ms": 0}
    r = call(faults, "u-1", "raw", args, caps)
    assert r.status_code == 200, r.text
    result = final(r)["result"]
    assert result["resultType"] == "input_required", result
    assert result["inputRequests"] == {"e-7": {"method": "elicitation/create", "params": {
        "mode": "url", "elicitationId": "e-7", "url": "https://auth.example.com/connect?e=7",
        "message": "Authorize access to your files."}}}
    # The retry (the URL flow done) sends the call again: a backend stream of its own; this
    # backend asks again, so the answer is a new round with a new requestState.
    again = post(faults, "u-2", "tools/call",
                 {"name": "raw", "arguments": args, "requestState": result["requestState"],
                  "inputResponses": {"e-7": {"action": "accept"}}}, caps)
    assert again.status_code == 200, again.text
    second = final(again)["result"]
    assert second["resultType"] == "input_required" and second["requestState"] != result["requestState"]
    first_cid, _, first_bid = client_stream(db, "u-1")
    second_cid, _, second_bid = client_stream(db, "u-2")
    assert None not in (first_bid, second_bid) and first_bid != second_bid
    with db.cursor() as cur:
        cur.execute("SELECT message->'params'->'requestState' IS NULL FROM mcp.events"
                    " WHERE stream_id = %s AND seq = 0", (second_bid,))
        assert cur.fetchone() == (True,)   # the request as sent again: no retry members
    # The round is used: a replay is refused; without the client's elicitation capability, -32021.
    replay = post(faults, "u-3", "tools/call",
                  {"name": "raw", "arguments": args, "requestState": result["requestState"],
                   "inputResponses": {"e-7": {"action": "accept"}}}, caps)
    assert replay.status_code == 400 and "used already" in replay.json()["error"]["message"]
    refused = call(faults, "u-4", "raw", args, {})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32021, refused.text
