"""Streams that follow the client anywhere: live delivery across httpd instances (LISTEN/NOTIFY),
owner leases, the sweep, PostgreSQL restarts and graceful restarts.

The stack runs two independent httpd instances ("hosts"), each with several children. Every
test runs over HTTP/1.1, h2c and HTTP/2 over TLS (the `wire` fixture; see conftest.py).
"""

import os
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path

import psycopg2
import pytest

from waiting import wait_for
from mcp_client import McpSession

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def wire(any_wire):
    return any_wire


def base(url):
    return url.rsplit("/", 1)[0]


def slow(count, interval_ms, token="t"):
    return {"name": "slow", "arguments": {"count": count, "interval_ms": interval_ms},
            "_meta": {"progressToken": token}}


def seq_of(ev):
    return int(ev.id.split("-")[1])


def stream_of(ev):
    return int(ev.id.split("-")[0])



def stream_row(pg, stream_id):
    with pg.cursor() as cur:
        cur.execute("SELECT status, owner, extract(epoch FROM completed_at)::float8 FROM mcp.streams "
                    "WHERE id = %s", (stream_id,))
        return cur.fetchone()


def followed(pg, stream_id) -> bool:
    with pg.cursor() as cur:
        cur.execute("SELECT followed FROM mcp.streams WHERE id = %s", (stream_id,))
        return cur.fetchone()[0]


def event_times(pg, stream_id):
    with pg.cursor() as cur:
        cur.execute("SELECT seq, extract(epoch FROM created_at)::float8 FROM mcp.events "
                    "WHERE stream_id = %s AND direction = 'out'", (stream_id,))
        return dict(cur.fetchall())


def joined(session, url):
    """The same MCP session, through another endpoint."""
    other = McpSession(url, auth=session.auth, transport=session.transport, ca=session.ca)
    other.session_id, other.protocol_version, other.initialized = (
        session.session_id, session.protocol_version, True)
    return other


def start_and_drop(session, params, keep=2):
    """Start a tools/call, read `keep` events after the priming event, then drop the connection."""
    events = session.request_stream("tools/call", params, include_empty=True)
    got = [next(events) for _ in range(keep + 1)]
    session.last_response.close()
    return got


def follow(session, last_id, received, stamps=None):
    assert last_id, "resuming needs an event id"
    for ev in session.get_stream(last_event_id=last_id):
        received.append(ev)
        if stamps is not None:
            stamps.append(time.time())


def test_resume_on_other_host_gets_replay_then_live_tail(mcp, wire, stack, pg):
    host1, host2 = wire.urls[:2]
    s = mcp(host1)
    s.initialize()
    count, interval = 12, 300
    got = start_and_drop(s, slow(count, interval))
    stream_id = stream_of(got[0])

    resumed, stamps = [], []
    other = joined(s, host2)
    try:
        follow(other, got[-1].id, resumed, stamps)
    finally:
        other.close()

    seqs = [seq_of(e) for e in got[1:] + resumed]
    assert seqs == list(range(2, 2 + count + 1)), seqs   # every event, once, in order
    assert "result" in resumed[-1].json

    # Delivered live: host 2 received events before host 1 finished relaying the stream.
    status, owner, completed = stream_row(pg, stream_id)
    assert status == "complete"
    assert min(stamps) < completed
    # The delay from insert (host 1) to delivery (host 2), for the events that came live.
    created = event_times(pg, stream_id)
    delays = [(t - created[seq_of(e)]) * 1000 for e, t in zip(resumed, stamps)
              if t - created[seq_of(e)] < interval / 1000]
    assert delays, "no event was delivered live"
    print(f"\ncross-host delivery delay insert->client: n={len(delays)} "
          f"p50={statistics.median(delays):.1f} ms max={max(delays):.1f} ms")


def test_many_followers_one_of_them_stuck(mcp, wire, stack, pg):
    host1, host2 = wire.urls[:2]
    # The stuck client: a resumed stream with a lot to send that it never reads.
    stuck_session = mcp(host1)
    stuck_session.initialize()
    big = start_and_drop(stuck_session, slow(3000, 0), keep=1)
    stuck = stuck_session.get_raw({"Accept": "text/event-stream",
                                   "Mcp-Session-Id": stuck_session.session_id,
                                   "Last-Event-ID": big[-1].id}, stream=True, timeout=60, url=host2)
    assert stuck.status_code == 200

    followers = []
    try:
        for i in range(8):
            s = mcp(host1)
            s.initialize()
            got = start_and_drop(s, slow(10, 200, token=f"f{i}"), keep=1)
            followers.append((s, got))
        results = [([], []) for _ in followers]
        threads = [threading.Thread(target=follow, args=(joined(s, host2), got[-1].id, *results[i]),
                                    daemon=True)
                   for i, (s, got) in enumerate(followers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        delays = []
        for (s, got), (received, stamps) in zip(followers, results):
            seqs = [seq_of(e) for e in got[1:] + received]
            assert seqs == list(range(2, 2 + 11)), seqs
            created = event_times(pg, stream_of(got[0]))
            delays += [(t - created[seq_of(e)]) * 1000 for e, t in zip(received, stamps)
                       if t - created[seq_of(e)] < 0.2]
        if delays:
            print(f"\n8 followers beside a stuck one: live delay p50="
                  f"{statistics.median(delays):.1f} ms max={max(delays):.1f} ms (n={len(delays)})")
    finally:
        stuck.close()


def owner_pid(pg, stream_id):
    owner = stream_row(pg, stream_id)[1]
    return int(owner.rsplit(":", 1)[1])


def test_owner_killed_resuming_client_gets_terminal_error(mcp, wire, stack, pg):
    host1, host2 = wire.urls[:2]
    s = mcp(base(host1) + "/mcp-lease")          # MCPStreamLease 2
    s.initialize()
    events = s.request_stream("tools/call", slow(100, 300), include_empty=True,
                              request_id="doomed-1")
    got = [next(events), next(events)]
    stream_id = stream_of(got[0])
    os.kill(owner_pid(pg, stream_id), signal.SIGKILL)   # the child relaying it dies
    s.last_response.close()

    other = joined(s, base(host2) + "/mcp-lease")
    received = []
    follow(other, got[-1].id, received)
    other.close()
    last = received[-1].json
    assert last["id"] == "doomed-1"
    assert last["error"]["code"] == -32002
    assert "lease ran out" in last["error"]["message"]
    assert stream_row(pg, stream_id)[0] == "failed"
    assert [seq_of(e) for e in got[1:] + received] == list(range(2, 2 + len(got) - 1 + len(received)))


def test_owner_killed_nobody_following_the_sweep_finishes_it(mcp, wire, stack, pg):
    host1 = wire.urls[0]
    s = mcp(base(host1) + "/mcp-lease")
    s.initialize()
    events = s.request_stream("tools/call", slow(100, 300), include_empty=True, request_id="swept")
    got = [next(events), next(events)]
    stream_id = stream_of(got[0])
    os.kill(owner_pid(pg, stream_id), signal.SIGKILL)
    s.last_response.close()
    wait_for(lambda: stream_row(pg, stream_id)[0] == "failed", what="the sweep")
    with pg.cursor() as cur:
        cur.execute("""SELECT message FROM mcp.events WHERE stream_id = %s
                        ORDER BY seq DESC LIMIT 1""", (stream_id,))
        last = cur.fetchone()[0]
    assert last["id"] == "swept" and last["error"]["code"] == -32002
    # Exactly one terminal answer, however many processes tried.
    with pg.cursor() as cur:
        cur.execute("""SELECT count(*) FROM mcp.events WHERE stream_id = %s
                        AND message ? 'error'""", (stream_id,))
        assert cur.fetchone()[0] == 1


def run_stack(stack, *args):
    subprocess.run([str(REPO / "tests" / "stack"), *args, "--dir", stack["MCP_STACK_DIR"]],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)


def test_postgres_restart_while_streams_wait(mcp, wire, stack, pg):
    host1, host2 = wire.urls[:2]
    s = mcp(host1)
    s.initialize()
    count = 16
    got = start_and_drop(s, slow(count, 250), keep=1)
    received = []
    other = joined(s, host2)
    t = threading.Thread(target=follow, args=(other, got[-1].id, received), daemon=True)
    t.start()
    wait_for(lambda: len(received) >= 2, what="live events before the restart")
    run_stack(stack, "restart-pg")
    t.join(60)
    assert not t.is_alive()
    seqs = [seq_of(e) for e in got[1:] + received]
    assert seqs == list(range(2, 2 + count + 1)), seqs
    assert received[-1].json["result"]["content"][0]["text"] == f"slow done: {count} steps"
    # And new work goes through without an httpd restart.
    fresh = mcp(host2)
    fresh.initialize()
    assert fresh.call("tools/call", {"name": "echo", "arguments": {"text": "after"}})


def test_graceful_restart_hands_streams_to_new_children(mcp, wire, stack, pg):
    host1 = wire.urls[0]
    s = mcp(host1)
    s.initialize()
    count = 12
    events = s.request_stream("tools/call", slow(count, 300), include_empty=True)
    got = [next(events), next(events)]
    stream_id = stream_of(got[0])
    run_stack(stack, "graceful")
    for ev in events:                 # the old child ends the response with a retry: hint
        got.append(ev)
    hint = got.pop()
    assert hint.data is None and hint.retry == 1000, hint   # a block with only retry:
    assert "result" not in (got[-1].json or {}), "the stream was not handed over"
    resumed = []
    # The old child closes its idle keep-alive connections as it exits; reusing one races with
    # that close (RemoteDisconnected, seen under ASan's slower exit). HTTP lets a server do so,
    # and real SSE clients just reconnect: start from fresh connections.
    s.http.close()
    follow(s, hint.last_event_id, resumed)    # same host: a new child picks it up
    seqs = [seq_of(e) for e in got[1:] + resumed]
    assert seqs == list(range(2, 2 + count + 1)), seqs
    assert "result" in resumed[-1].json
    assert stream_row(pg, stream_id)[0] == "complete"


def notifications_until_marker(listener, marker):
    """The payloads on mcp_events up to our own marker notification: notifications reach a
    listener in commit order, so whatever the gateway's committed transactions sent is in."""
    with listener.cursor() as cur:
        cur.execute("NOTIFY mcp_events, %s", (marker,))
    got = []

    def marker_seen():
        listener.poll()
        while listener.notifies:
            got.append(listener.notifies.pop(0).payload)
        return marker in got

    wait_for(marker_seen, what="our marker notification")
    return got[:got.index(marker)]


def test_only_followed_streams_are_notified(mcp, stack, pg):
    """A call nobody follows takes no notify lock; a stream with a follower wakes it."""
    host1, host2 = stack["MCP_URLS"].split()[:2]
    listener = psycopg2.connect(stack["MCP_PG"])
    listener.autocommit = True
    try:
        with listener.cursor() as cur:
            cur.execute("LISTEN mcp_events")
        s = mcp(host1)
        s.initialize()
        for _ in range(3):
            s.call("tools/call", {"name": "echo", "arguments": {"text": "nobody follows"}})
        s.call("tools/call", slow(2, 10, "p"))   # progress notifications, then the answer
        assert notifications_until_marker(listener, "m1") == []

        # A stream that stays open until the test lets it end: the backend's sampling request
        # waits for the client's answer, given only once the follower on the other instance is
        # registered (a timed stream once ended first under a prefork ASan run, slower than
        # its 3 s: then nothing is woken).
        events = s.request_stream("tools/call", {"name": "sample",
                                                 "arguments": {"prompt": "followed"}},
                                  include_empty=True)
        got = []
        for ev in events:
            got.append(ev)
            if ev.json and ev.json.get("method") == "sampling/createMessage":
                break
        s.last_response.close()
        request, stream_id = got[-1].json, stream_of(got[0])
        resumed = []
        other = joined(s, host2)
        follower = threading.Thread(target=follow, args=(other, got[-1].id, resumed), daemon=True)
        follower.start()
        try:
            wait_for(lambda: followed(pg, stream_id), what="the follower's registration")
            assert notifications_until_marker(listener, "m2") == []
            r = s.respond(request["id"], {"role": "assistant", "model": "test",
                                          "content": {"type": "text", "text": "hi"}})
            assert r.status_code == 202, r.text
            follower.join(30)
            assert not follower.is_alive(), "the followed stream did not end"
        finally:
            other.close()
        assert resumed and resumed[-1].json["result"]["content"][0]["text"] == "sampled: hi"
        woken = notifications_until_marker(listener, "m3")
        assert woken and set(woken) == {str(stream_id)}, woken
    finally:
        listener.close()


def test_follower_registration_waits_for_a_writer_that_missed_it(mcp, stack, pg):
    """The gap-free order of notify-only-followed-streams: a writer that read the stream's
    follower flag before a follower registered (it will not notify) holds the row's FOR KEY SHARE
    lock until its commit; the registration waits for that commit, so the follower's first read
    sees the writer's rows."""
    host1, host2 = stack["MCP_URLS"].split()[:2]
    s = mcp(host1)
    s.initialize()
    got = start_and_drop(s, slow(4, 300), keep=0)
    stream_id = stream_of(got[0])
    marker = '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"in flight"}}'

    writer = psycopg2.connect(stack["MCP_PG"])
    try:
        with writer.cursor() as cur:   # what mcp_store_events_append does, not yet committed
            cur.execute("SELECT followed FROM mcp.streams WHERE id = %s FOR KEY SHARE",
                        (stream_id,))
            assert cur.fetchone() == (False,)
            cur.execute("INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind,"
                        " message_text) VALUES (%s, %s, 1000, 'out', 'message', %s)",
                        (s.session_id, stream_id, marker))
        resumed = []
        other = joined(s, host2)
        t = threading.Thread(target=follow, args=(other, got[0].id, resumed), daemon=True)
        t.start()

        def registration_waits():
            with pg.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                            " AND query LIKE '%%INSERT INTO mcp.followers%%'")
                return cur.fetchone()[0] == 1

        wait_for(registration_waits, what="the follower's registration waiting for the writer")
        writer.commit()
        t.join(30)
        assert not t.is_alive()
        other.close()
    finally:
        writer.close()
    # (The cursor then stands at 1000: the relay's later rows, with lower seq, are not for it.)
    assert any(e.id == f"{stream_id}-1000" for e in resumed), [e.id for e in resumed]
