"""Streams that wait hold no thread (issue 20): more idle standalone streams than the httpd has
worker threads, on one instance of the event MPM, over HTTP/1.1 and TLS; delivery to them, a
fresh client served meanwhile, followers (Last-Event-ID) parked, DELETE, a vanished client, a
graceful restart, MCPAsyncStreams Off; mod_status's count back to 0 every time.

The stack is this module's own: one httpd, 2 children x 25 threads (MaxRequestWorkers 50),
AsyncRequestWorkerFactor high enough that the event MPM keeps accepting (it counts suspended
connections against idle workers x the factor), per-principal limits off on /mcp-many.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from conftest import database, httpd_pids, own_stack, run_dir
from many_streams import Crowd
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"
# More than the workers, at a scale CI's 2 cores hold in seconds.
STREAMS = int(os.environ.get("MCP_TEST_ASYNC_STREAMS", "1000"))
WORKERS = 50

CONF = """
LoadModule status_module /usr/lib/apache2/modules/mod_status.so
AsyncRequestWorkerFactor 100
<Location /mcp-many>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
    MCPMaxSessions 0
</Location>
<Location /mcp-threaded>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPAsyncStreams Off
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
</Location>
<Location /mcp-many-status>
    SetHandler server-status
</Location>
"""


@pytest.fixture(scope="module")
def env():
    d = run_dir("mcp-async-")
    conf = d / "async.conf"
    conf.write_text(CONF)
    with own_stack(d, "--httpd", "1", "--tls", "--workers", str(WORKERS), "--children", "2",
                   "--conf", str(conf)) as e:
        yield e


def base(env, tls=False):
    return env["MCP_HTTPS_URL" if tls else "MCP_HTTP_URL"].rsplit("/", 1)[0]


def status(env) -> dict[str, str]:
    text = requests.get(base(env) + "/mcp-many-status?auto", timeout=10).text
    return dict(l.split(": ", 1) for l in text.splitlines() if ": " in l)


def parked(env) -> int:
    return int(status(env).get("MCPParkedStreams", "-1"))


def httpd_threads(env) -> int:
    n = 0
    for pid in httpd_pids(env):
        try:
            n += int(re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(),
                               re.M).group(1))
        except (OSError, AttributeError):
            pass
    return n


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def until(pred, timeout: float, what: str):
    """wait_for inside a scenario: the clients' own tasks go on meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await loop.run_in_executor(None, pred):
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def closed_backend_connections(env) -> int:
    """Connections to the backend that httpd closed within the last minute: its side's sockets
    in TIME_WAIT towards the backend's port (/proc/net/tcp; the side that closes first waits)."""
    port = f"{urlparse(env['MCP_BACKEND_URL']).port:04X}"
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        n += f[2].endswith(":" + port) and f[3] == "06"
    return n


@pytest.mark.parametrize("parked_streams", [0, 200])
def test_backend_connections_are_kept_between_bursts(env, parked_streams):
    """Bursts of 24 concurrent calls, each followed by a call alone: the next burst reuses the
    connections of the last one. libcurl's default kept four idle connections per transfer
    running when one was given back, so a burst's last calls, and the call alone, closed the
    connections the burst had opened, and each burst connected anew. With 200 parked
    standalone streams holding backend transfers (and connections) of their own, the idle ones
    are kept all the same: the bound is idle connections beyond the running transfers."""
    url = base(env) + "/mcp-many"

    async def scenario():
        async with Crowd(url) as crowd:
            streams = await crowd.connect(parked_streams)
            assert all(s.status == 200 for s in streams)
            callers = [await crowd.session() for _ in range(24)]

            async def burst(k):
                got = await asyncio.gather(*[crowd.call(sid, "echo", {"text": f"b{k}-{i}"})
                                             for i, sid in enumerate(callers)])
                assert all(code == 200 and f"b{k}-{i}".encode() in body
                           for i, (code, _h, body) in enumerate(got)), got[:2]
                code, _h, body = await crowd.call(callers[0], "echo", {"text": "alone"})
                assert code == 200 and b"alone" in body

            await burst(0)   # the connections are made
            before = closed_backend_connections(env)
            for k in range(1, 6):
                await burst(k)
            return closed_backend_connections(env) - before

    closed = run(scenario())
    assert closed <= 4, f"{closed} backend connections closed over 5 bursts of 25 calls"


@pytest.mark.parametrize("tls", [False, True], ids=["http1", "tls"])
def test_more_idle_streams_than_workers(env, tls):
    """STREAMS idle standalone streams on 50 workers: every one is answered and parked, a
    fresh client is served meanwhile, a notification reaches the stream it is for, threads do
    not grow with streams, and closing the clients brings the parked count back to 0."""
    url = base(env, tls) + "/mcp-many"
    threads_before = httpd_threads(env)

    async def scenario():
        async with Crowd(url, ca=env["MCP_CA"] or None) as crowd:
            streams = await crowd.connect(STREAMS)
            bad = [s.status for s in streams if s.status != 200]
            assert not bad, f"{len(bad)} of {STREAMS} streams not opened: {bad[:3]}"
            assert all(s.headers.get("content-type", "").startswith("text/event-stream")
                       for s in streams)
            # The priming event (2025-11-25) gives each client its cursor.
            for s in streams:
                await s.wait_for(lambda s: s.ids, timeout=20)
            wait_for(lambda: parked(env) >= STREAMS, timeout=30,
                     what=f"{STREAMS} parked streams in server-status")
            threads = httpd_threads(env)
            assert threads <= 256, threads
            assert threads - threads_before < 20, (threads_before, threads)
            # A fresh client: initialize and a call, as if nothing were open.
            sid = await crowd.session()
            code, _, body = await crowd.call(sid, "echo", {"text": "still served"}, timeout=10)
            assert code == 200 and b"still served" in body
            # Notifications reach the stream they are for, and only that one.
            for s in random.sample(streams, 10):
                before = len(s.events)
                code, _, body = await crowd.call(s.sid, "notify", {"text": f"for {s.sid}"})
                assert code == 200 and b"sent" in body, body
                await s.wait_for(lambda s: len(s.events) > before, timeout=10)
                assert f"for {s.sid}" in s.events[-1][1]
            others = [s for s in streams if not s.events]
            assert len(others) == STREAMS - 10
        # Leaving the crowd closed every client's socket.
    run(scenario())
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")
    with database(env) as pg, pg.cursor() as cur:
        wait_for(lambda: (cur.execute("SELECT count(*) FROM mcp.streams WHERE kind = "
                                      "'standalone' AND status = 'open'"),
                          cur.fetchone()[0] == 0)[1], timeout=30,
                 what="every standalone stream closed after its client went")


def test_backend_broadcast_reaches_every_parked_stream(env):
    """One backend notification per backend GET stream (the test backend's POST /broadcast):
    every parked stream gets its tools/list_changed, stored before written (its event id is in
    the table)."""
    n = min(STREAMS, 300)

    async def scenario():
        async with Crowd(base(env) + "/mcp-many") as crowd:
            streams = await crowd.connect(n)
            assert all(s.status == 200 for s in streams)
            wait_for(lambda: parked(env) >= n, timeout=30, what="parked streams")
            r = requests.post(env["MCP_BACKEND_URL"].rsplit("/", 1)[0] + "/broadcast",
                              timeout=10)
            assert r.status_code == 200 and r.json()["streams"] >= n
            for s in streams:
                await s.wait_for(lambda s: any("list_changed" in e[1] for e in s.events),
                                 timeout=30)
            return [s.ids[-1] for s in streams]
    last_ids = run(scenario())
    with database(env) as pg, pg.cursor() as cur:
        for event_id in random.sample(last_ids, 20):
            stream_id, seq = (int(x) for x in event_id.split("-"))
            cur.execute("SELECT message::text FROM mcp.events WHERE stream_id = %s "
                        "AND seq = %s", (stream_id, seq))
            row = cur.fetchone()
            assert row and "list_changed" in row[0], (event_id, row)
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")


@pytest.mark.parametrize("after_a_store", [False, True], ids=["idle", "right-after-a-store"])
def test_delete_ends_a_parked_stream(env, after_a_store):
    """DELETE ends the session's parked standalone stream, idle or right after it stored
    something (and wrote it from memory)."""
    async def scenario():
        async with Crowd(base(env) + "/mcp-many") as crowd:
            [s] = await crowd.connect(1)
            assert s.status == 200
            wait_for(lambda: parked(env) >= 1, timeout=10, what="the stream parked")
            if after_a_store:
                await crowd.call(s.sid, "notify", {"text": "just before the end"})
                await s.wait_for(lambda s: s.events, timeout=10)
            reader, writer = await asyncio.open_connection(crowd.host, crowd.port)
            writer.write((f"DELETE {crowd.path} HTTP/1.1\r\nHost: {crowd.host}:{crowd.port}\r\n"
                          f"Mcp-Session-Id: {s.sid}"
                          f"\r\nMCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n"
                          ).encode())
            assert b" 200 " in (await reader.read())[:20]
            writer.close()
            await s.wait_for(lambda s: s.ended, timeout=10)
    run(scenario())
    wait_for(lambda: parked(env) == 0, timeout=10, what="parked streams back to 0")


def test_follower_of_a_request_stream_is_parked(env):
    """GET with Last-Event-ID of an open request stream (a slow call whose client went): the
    follower catches up, parks, gets the live tail and the response, then its response ends."""
    async def scenario():
        crowd = Crowd(base(env) + "/mcp-many")
        sid = await crowd.session()
        reader, writer = await asyncio.open_connection(crowd.host, crowd.port)
        import json as _json
        body = _json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "slow", "arguments": {"count": 6, "interval_ms": 300},
            "_meta": {"progressToken": "p"}}}).encode()
        writer.write((f"POST {crowd.path} HTTP/1.1\r\nHost: {crowd.host}:{crowd.port}\r\n"
                      f"Content-Type: application/json"
                      f"\r\nAccept: application/json, text/event-stream\r\nContent-Length: "
                      f"{len(body)}\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: "
                      f"2025-11-25\r\n\r\n").encode() + body)
        head = b""
        while b"\nid: " not in head:
            more = await asyncio.wait_for(reader.read(4096), 10)
            assert more, head
            head += more
        first_id = re.search(rb"\nid: (\S+)", head).group(1).decode()
        writer.transport.abort()          # disconnect is not cancellation
        from many_streams import Stream
        s = Stream(crowd, sid)
        await s.open(10, last_event_id=first_id)
        assert s.status == 200
        wait_for(lambda: parked(env) >= 1, timeout=10, what="the follower parked")
        await s.wait_for(lambda s: s.ended, timeout=20)
        texts = [e[1] for e in s.events]
        assert any('"id":7' in t and "slow done" in t for t in texts), texts
        assert sum("notifications/progress" in t for t in texts) >= 1
        # No duplicates: ids strictly after the cursor, in order.
        seqs = [int(i.split("-")[1]) for i in s.ids]
        assert seqs == sorted(set(seqs)) and seqs[0] > int(first_id.split("-")[1])
    run(scenario())
    wait_for(lambda: parked(env) == 0, timeout=10, what="parked streams back to 0")


def test_async_streams_off_holds_the_thread(env):
    async def scenario():
        async with Crowd(base(env) + "/mcp-threaded") as crowd:
            [s] = await crowd.connect(1)
            assert s.status == 200
            await s.wait_for(lambda s: s.ids, timeout=10)
            code, _, body = await crowd.call(s.sid, "notify", {"text": "threaded"})
            await s.wait_for(lambda s: s.events, timeout=10)
            assert parked(env) == 0
    run(scenario())


def test_graceful_restart_ends_parked_streams_with_a_retry_hint(env):
    """A graceful restart: every parked stream ends with a retry: hint, the old children retire
    (their parked count is gone from server-status), the new ones serve."""
    n = min(STREAMS, 200)

    async def scenario():
        async with Crowd(base(env) + "/mcp-many") as crowd:
            streams = await crowd.connect(n)
            assert all(s.status == 200 for s in streams)
            wait_for(lambda: parked(env) >= n, timeout=30, what="parked streams")
            old = set(httpd_pids(env)[1:])
            subprocess.run([str(STACK), "graceful", "--dir", env["MCP_STACK_DIR"]], check=True,
                           timeout=60, capture_output=True)
            for s in streams:
                await s.wait_for(lambda s: s.ended, timeout=30)
            assert all(s.hints >= 1 for s in streams), sum(s.hints >= 1 for s in streams)
            wait_for(lambda: not (old & set(httpd_pids(env)[1:])), timeout=30,
                     what="the old children to exit")
            # The new children serve, and park again.
            [s] = await crowd.connect(1)
            assert s.status == 200
    run(scenario())
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")


def test_slow_clients_block_nobody(env):
    """More clients that never read than the loop has workers (4), each sent 6 MB: their
    events wait in the table (the loop waits for writability, it never blocks on them), and a
    notification to another stream still arrives at once."""
    import socket
    host, port = base(env).split("//")[1].split(":")
    slow = []

    async def scenario():
        async with Crowd(base(env) + "/mcp-many") as crowd:
            sids = [await crowd.session() for _ in range(6)]
            for sid in sids:
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect((host, int(port)))
                s.sendall((f"GET /mcp-many HTTP/1.1\r\nHost: {host}:{port}\r\n"
                           f"Accept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n"
                           f"MCP-Protocol-Version: 2025-11-25\r\n\r\n").encode())
                assert s.recv(12) == b"HTTP/1.1 200"
                slow.append(s)       # and never read again
            [fast] = await crowd.connect(1)
            wait_for(lambda: parked(env) >= 7, timeout=10, what="the streams parked")
            big = "x" * 60000
            # More than a socket's send buffer can take (tcp_wmem's maximum is 4 MB).
            for _ in range(100):
                await asyncio.gather(*[crowd.call(sid, "notify", {"text": big})
                                       for sid in sids])
            # 6 x 6 MB wait for their readers; the fast one is served at once.
            t0 = asyncio.get_running_loop().time()
            code, _, body = await crowd.call(fast.sid, "notify", {"text": "not stuck"})
            assert code == 200 and b"sent" in body
            await fast.wait_for(lambda s: any("not stuck" in e[1] for e in s.events),
                                timeout=10)
            assert asyncio.get_running_loop().time() - t0 < 5
            assert parked(env) >= 7
    try:
        run(scenario())
    finally:
        for s in slow:
            s.close()
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")


def test_more_slow_calls_in_flight_than_workers(env):
    """Four times as many slow calls (10 s each) as the httpd has workers, at once, in 2025-11-25
    sessions: each answer is parked once it has taken 2 s, so three quarters of
    them and more are in flight together (threaded, at most 50 could be), on threads that do
    not grow with the calls, and every one is answered."""
    n = 4 * WORKERS
    threads_before = httpd_threads(env)

    async def scenario():
        async with Crowd(base(env) + "/mcp-many", parallel=n) as crowd:
            sids = await asyncio.gather(*[crowd.session() for _ in range(n)])
            calls = asyncio.gather(*[crowd.call(sid, "slow", {"count": 1, "interval_ms": 10000},
                                                timeout=90) for sid in sids])
            await until(lambda: parked(env) >= n * 3 // 4, timeout=40,
                        what="the slow calls' answers parked")
            threads = httpd_threads(env)
            return await calls, threads
    answers, threads = run(scenario())
    assert all(code == 200 and b"slow done: 1 steps" in body for code, _, body in answers), \
        [a[0] for a in answers if a[0] != 200][:5]
    assert threads - threads_before < 20, (threads_before, threads)
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")


@pytest.mark.parametrize("protocol", ["2025-06-18", "2025-03-26"])
def test_older_sessions_slow_calls_are_parked_too(env, protocol):
    """An older session's answer is whatever the backend chooses (JSON or SSE): once it has
    taken 2 s it is parked all the same, its response SSE from then on, and answered; more of
    them in flight than the httpd has workers."""
    n = 2 * WORKERS

    async def scenario():
        async with Crowd(base(env) + "/mcp-many", parallel=n, protocol=protocol) as crowd:
            sids = await asyncio.gather(*[crowd.session() for _ in range(n)])
            calls = asyncio.gather(*[crowd.call(sid, "slow", {"count": 1, "interval_ms": 5000},
                                                timeout=90) for sid in sids])
            await until(lambda: parked(env) >= n * 3 // 4, timeout=40,
                        what="the older sessions' slow answers parked")
            return await calls
    answers = run(scenario())
    assert all(code == 200 and b"slow done: 1 steps" in body for code, _, body in answers), \
        [a[0] for a in answers if a[0] != 200][:5]
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")
