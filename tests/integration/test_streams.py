"""Stored streams: record-then-dispatch, priming, resumption with Last-Event-ID, the standalone
GET stream, disconnects that are not cancellations, and the bounded relay.

Every test runs over HTTP/1.1, h2c and HTTP/2 over TLS (the `wire` fixture; see conftest.py)."""

import json
import threading

import pytest

from waiting import wait_for
from mcp_client import McpError


@pytest.fixture
def wire(any_wire):
    return any_wire


def slow_params(count, interval_ms, token="tok"):
    return {"name": "slow", "arguments": {"count": count, "interval_ms": interval_ms},
            "_meta": {"progressToken": token}}


def stream_rows(pg, stream_id):
    with pg.cursor() as cur:
        cur.execute("""SELECT id, seq, direction, kind, message FROM mcp.events
                        WHERE stream_id = %s ORDER BY seq""", (stream_id,))
        return cur.fetchall()


def stream_of(event_id):
    return int(event_id.split("-")[0])



def stream_status(pg, stream_id):
    with pg.cursor() as cur:
        cur.execute("SELECT status FROM mcp.streams WHERE id = %s", (stream_id,))
        row = cur.fetchone()
        return row[0] if row else None


@pytest.fixture
def session(mcp):
    s = mcp()
    s.initialize()
    return s


def test_priming_event_comes_first_and_is_stored_before_backend_output(session, pg):
    events = session.request_stream("tools/call", slow_params(3, 400), include_empty=True)
    priming = next(events)
    # The priming event: an id, empty data, and a retry hint (MCPRetryInterval, 1 s by default).
    assert priming.id and priming.data == "" and priming.retry == 1000
    stream_id = stream_of(priming.id)
    assert priming.id == f"{stream_id}-1"
    first = next(events)
    assert first.json["method"] == "notifications/progress"
    assert first.id == f"{stream_id}-2"

    # While the tool still runs: the inbound request, then the priming row, then what the
    # backend sent, in storage (insertion) order as well as in stream order.
    rows = stream_rows(pg, stream_id)
    assert [(r[1], r[2], r[3]) for r in rows[:3]] == [(0, "in", "message"), (1, "out", "priming"),
                                                      (2, "out", "message")]
    assert rows[0][4]["params"]["name"] == "slow"
    assert rows[1][0] < rows[2][0], "the priming row was stored after backend output"
    assert stream_status(pg, stream_id) == "open"
    rest = list(events)
    assert rest[-1].json["result"]["content"][0]["text"] == "slow done: 3 steps"
    wait_for(lambda: stream_status(pg, stream_id) == "complete", what="stream completion")
    # Every event the client got is stored, with the same id and the same message.
    stored = {f"{stream_id}-{r[1]}": r[4] for r in stream_rows(pg, stream_id) if r[2] == "out" and r[4]}
    for ev in [first] + rest:
        assert stored[ev.id] == ev.json


def test_older_clients_get_no_priming_but_resumable_ids(mcp, pg):
    s = mcp(protocol_version="2025-06-18")
    s.initialize()
    evs = list(s.request_stream("tools/call", slow_params(2, 50), include_empty=True))
    assert all(ev.data != "" for ev in evs), "a priming event was sent to a 2025-06-18 client"
    assert [ev.id.split("-")[1] for ev in evs] == ["2", "3", "4"]
    # No priming event is ever sent on an older session's stream: none is stored (seq 1 stays
    # free), and the stream resumes from any event the client got.
    stream_id = stream_of(evs[0].id)
    assert [(r[1], r[2], r[3]) for r in stream_rows(pg, stream_id)] == [
        (0, "in", "message"), (2, "out", "message"), (3, "out", "message"), (4, "out", "message")]
    replay = list(s.get_stream(last_event_id=evs[0].id))
    assert [(e.id, e.json) for e in replay] == [(ev.id, ev.json) for ev in evs[1:]]
    # A JSON answer from the backend stays JSON for an older client, and is stored.
    r = s.post_raw(json.dumps({"jsonrpc": "2.0", "id": "e1", "method": "tools/call",
                               "params": {"name": "echo", "arguments": {"text": "old"}}}))
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json()["result"]["content"][0]["text"] == "old"
    with pg.cursor() as cur:
        cur.execute("""SELECT e.seq, e.direction, e.kind, e.message
                         FROM mcp.events e JOIN mcp.streams s ON s.id = e.stream_id
                        WHERE s.session_id = %s AND s.request_id = '"e1"' ORDER BY e.seq""",
                    (s.session_id,))
        rows = cur.fetchall()
    assert [r[:3] for r in rows] == [(0, "in", "message"), (2, "out", "message")]
    assert rows[1][3] == r.json()


def test_json_backend_answer_becomes_a_resumable_stream_for_new_clients(session, pg):
    events = list(session.request_stream("tools/call", {"name": "echo", "arguments": {"text": "j"}},
                                         include_empty=True))
    assert session.last_response.headers["Content-Type"].startswith("text/event-stream")
    assert events[0].data == "" and events[0].id.endswith("-1")
    assert events[1].json["result"]["content"][0]["text"] == "j"
    assert events[1].id == f"{stream_of(events[0].id)}-2"
    # Resuming after the priming event replays the stored answer.
    replay = list(session.get_stream(last_event_id=events[0].id))
    assert [(e.id, e.json) for e in replay] == [(events[1].id, events[1].json)]


def test_disconnect_mid_call_then_resume_gets_every_event_exactly_once(session, pg, stack):
    count = 8
    events = session.request_stream("tools/call", slow_params(count, 250), include_empty=True)
    got = [next(events), next(events), next(events)]   # priming + two progress events
    session.last_response.close()                        # the client goes away mid-call
    stream_id = stream_of(got[0].id)

    # The gateway keeps relaying and storing (a disconnect is not a cancellation); resume from
    # the last event received, possibly while it still runs.
    resumed = list(session.get_stream(last_event_id=got[-1].id))
    all_events = [e for e in got[1:]] + resumed
    seqs = [int(e.id.split("-")[1]) for e in all_events]
    assert seqs == list(range(2, 2 + count + 1)), seqs          # in order, none missing, no dups
    progress = [e.json["params"]["progress"] for e in all_events[:-1]]
    assert progress == list(range(1, count + 1))
    assert all_events[-1].json["result"]["content"][0]["text"] == f"slow done: {count} steps"
    wait_for(lambda: stream_status(pg, stream_id) == "complete", what="stream completion")


def test_disconnect_is_not_cancellation(session, pg):
    events = session.request_stream("tools/call", slow_params(4, 200), include_empty=True)
    priming = next(events)
    session.last_response.close()
    stream_id = stream_of(priming.id)
    wait_for(lambda: stream_status(pg, stream_id) == "complete", what="stream completion")
    rows = stream_rows(pg, stream_id)
    assert rows[-1][4]["result"]["content"][0]["text"] == "slow done: 4 steps"


def test_resume_on_the_other_httpd_instance(mcp, wire, pg):
    urls = wire.urls
    a = mcp(urls[0])
    a.initialize()
    events = a.request_stream("tools/call", slow_params(5, 200), include_empty=True)
    got = [next(events), next(events)]
    a.last_response.close()
    b = mcp(urls[1])
    b.session_id, b.protocol_version, b.initialized = a.session_id, a.protocol_version, True
    resumed = list(b.get_stream(last_event_id=got[-1].id))
    seqs = [int(e.id.split("-")[1]) for e in got[1:] + resumed]
    assert seqs == list(range(2, 2 + 5 + 1))
    assert "result" in resumed[-1].json


def test_replay_is_denied_across_sessions_and_for_unknown_ids(mcp, session):
    evs = list(session.request_stream("tools/call", {"name": "echo", "arguments": {"text": "x"}},
                                      include_empty=True))
    other = mcp()
    other.initialize()
    for bad, says in [(evs[0].id, "names no event of this session"),
                      ("999999999-1", "names no event of this session"),
                      (f"{stream_of(evs[0].id)}-99", "names no event of this session"),
                      ("garbage", "is not an event id"), ("1-01", "is not an event id")]:
        with pytest.raises(McpError) as e:
            list(other.get_stream(last_event_id=bad))
        r = e.value.response
        assert r.status_code == 400, (bad, r.status_code)
        assert says in r.json()["error"]["message"], r.text
    # The owner can replay its own stream.
    assert [e.id for e in session.get_stream(last_event_id=evs[0].id)] == [evs[1].id]


def test_replay_of_another_session_says_why(mcp, session):
    evs = list(session.request_stream("tools/call", {"name": "echo", "arguments": {"text": "x"}},
                                      include_empty=True))
    other = mcp()
    other.initialize()
    r = other.get_raw({"Accept": "text/event-stream", "Mcp-Session-Id": other.session_id,
                       "Last-Event-ID": evs[0].id}, timeout=10)
    assert r.status_code == 400
    assert r.json()["error"]["message"].endswith("names no event of this session")


def test_standalone_stream_relays_backend_messages_and_is_one_per_session(session, pg, wire):
    got = []
    opened = threading.Event()

    def reader():
        for ev in session.get_stream(include_empty=True):
            got.append(ev)
            opened.set()
            if ev.json and ev.json.get("params", {}).get("data") == "ping-2":
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    assert opened.wait(10), "no priming event on the standalone stream"
    assert got[0].data == "" and got[0].id.endswith("-0")

    # A second standalone stream for the session, on any instance: 409.
    for url in wire.urls:
        r = session.get_raw({"Accept": "text/event-stream", "Mcp-Session-Id": session.session_id},
                            timeout=10, url=url)
        assert r.status_code == 409, r.text
        assert "already has an open standalone stream" in r.json()["error"]["message"]

    for text in ("ping-1", "ping-2"):
        session.call("tools/call", {"name": "notify", "arguments": {"text": text}})
    t.join(10)
    assert not t.is_alive()
    texts = [e.json["params"]["data"] for e in got[1:]]
    assert texts == ["ping-1", "ping-2"]
    stream_id = stream_of(got[0].id)
    stored = [r[4]["params"]["data"] for r in stream_rows(pg, stream_id) if r[4]]
    assert stored == ["ping-1", "ping-2"]
    session.last_response.close()
    # Once the client is gone the stream is closed and a new one may open.
    wait_for(lambda: stream_status(pg, stream_id) == "closed", what="standalone stream closed")
    def reopen():
        r = session.get_raw({"Accept": "text/event-stream", "Mcp-Session-Id": session.session_id},
                            stream=True, timeout=10)
        r.close()
        assert r.status_code in (200, 409), r.status_code   # 409 until the backend notices
        return r.status_code == 200
    wait_for(reopen, what="a new standalone stream")


def test_get_must_accept_event_stream(session):
    r = session.get_raw({"Accept": "application/json", "Mcp-Session-Id": session.session_id},
                        timeout=10)
    assert r.status_code == 406
    assert r.json()["error"]["code"] == -32000


def test_sampling_request_answered_by_the_client_reaches_the_backend(session, pg):
    events = session.request_stream("tools/call", {"name": "sample",
                                                   "arguments": {"prompt": "say hi"}})
    request = None
    for ev in events:
        if ev.json and ev.json.get("method") == "sampling/createMessage":
            request = ev.json
            break
    assert request is not None
    r = session.respond(request["id"], {"role": "assistant", "model": "test",
                                        "content": {"type": "text", "text": "hi there"}})
    assert r.status_code == 202
    final = [ev.json for ev in events][-1]
    assert final["result"]["content"][0]["text"] == "sampled: hi there"
    with pg.cursor() as cur:   # the client's response is in the audit trail
        cur.execute("""SELECT count(*) FROM mcp.events WHERE session_id = %s AND direction = 'in'
                         AND stream_id IS NULL AND message->'id' = %s""",
                    (session.session_id, json.dumps(request["id"])))
        assert cur.fetchone()[0] == 1


def test_cancellation_is_forwarded(session):
    events = session.request_stream("tools/call", slow_params(20, 200, token="c"), request_id="c-77")
    next(events)
    r = session.notify("notifications/cancelled", {"requestId": "c-77", "reason": "test"})
    assert r.status_code == 202
    list(events)   # the stream ends (the backend stops; the gateway answers with an error)
    info = json.loads(session.call("tools/call", {"name": "session_info",
                                                  "arguments": {}})["content"][0]["text"])
    assert "c-77" in info["cancelled"]


def test_keepalive_comments_on_idle_streams(mcp, wire):
    # /mcp-short: MCPKeepAliveInterval 200ms. The gateway looks about once a second, so a
    # backend that is silent for 2.5 s makes it send at least one keep-alive.
    s = mcp(wire.url(0, "/mcp-short"))
    s.initialize()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": slow_params(1, 2500)})
    r = s.post_raw(body, stream=True, timeout=30)
    raw = b"".join(r.iter_content(chunk_size=None))  # to the end of the stream
    assert b": keepalive\n\n" in raw
    assert b"retry: 2500" in raw   # MCPRetryInterval 2500ms


def test_a_client_that_does_not_read_blocks_only_itself(mcp):
    stuck = mcp()
    stuck.initialize()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "slow", "arguments": {"count": 1000, "interval_ms": 0},
                                  "_meta": {"progressToken": "big"}}})
    # Send the request and never read the answer.
    r = stuck.post_raw(body, stream=True, timeout=30)
    assert r.status_code == 200
    try:
        other = mcp()
        other.initialize()
        for i in range(5):
            assert other.call("tools/call", {"name": "echo", "arguments": {"text": str(i)}})
    finally:
        r.close()


def test_small_queue_still_delivers_everything_in_order(mcp, wire):
    s = mcp(wire.url(0, "/mcp-queue1"))
    s.initialize()
    evs = list(s.request_stream("tools/call", slow_params(30, 0)))
    seqs = [int(e.id.split("-")[1]) for e in evs if e.data]
    assert seqs == list(range(2, 2 + 31))


def test_close_after_makes_clients_poll_without_losing_anything(mcp, wire, pg):
    # /mcp-poll: MCPStreamCloseAfter 500ms. The POST stream and every resumed GET end early with
    # a retry: hint; the client keeps resuming from its last event id until the response.
    s = mcp(wire.url(0, "/mcp-poll"))
    s.initialize()
    count = 8
    received, connections, last_id = [], 1, None
    for ev in s.request_stream("tools/call", slow_params(count, 200), include_empty=True):
        if ev.id:
            last_id = ev.id
            received.append(ev)
        else:
            assert ev.retry == 1000, ev      # the hint that ends a connection early
    while not received or "result" not in (received[-1].json or {}):
        assert connections < 50, "no progress"
        connections += 1
        for ev in s.get_stream(last_event_id=last_id, include_empty=True):
            if ev.id:
                last_id = ev.id
                received.append(ev)
    assert connections > 1, "the stream was never closed early"
    seqs = [int(e.id.split("-")[1]) for e in received]
    assert seqs == list(range(1, 2 + count + 1)), seqs    # priming, progress..., response
    assert received[-1].json["result"]["content"][0]["text"] == f"slow done: {count} steps"
    assert stream_status(pg, stream_of(received[0].id)) == "complete"
