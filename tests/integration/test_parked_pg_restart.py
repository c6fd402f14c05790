"""PostgreSQL restarts while streams are parked (issue 20 x the database's outages): many more
parked streams than the httpd has worker threads, PostgreSQL stopped (pg_ctl -m fast) and
started again under them, with notifications sent while it is away and after it is back.

What must hold: every parked stream gets every notification, once and in order (event ids
strictly increasing per stream), each as mcp.events has it (stored before written); the parked
streams take no threads while the database is away (the loop's workers wait at the gate, not
the MPM's); a parked slow answer in flight ends with its result or a stored error, never hangs,
and a resume with Last-Event-ID gets exactly what its client missed; the error log gets a
bounded number of lines per child for the outage, not one per stream.

The stack is this module's own, as test_async_streams': one httpd, 2 children x 25 threads
(MaxRequestWorkers 50), AsyncRequestWorkerFactor high, per-principal limits off on /mcp-many.
tests/stack stop-pg and start-pg are restart-pg's two halves, so that a test can act (and
wait for what it awaits) while the database is away.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import database, own_stack, run_dir
from many_streams import Crowd, Stream
from test_async_streams import httpd_threads, status
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"
STREAMS = int(os.environ.get("MCP_TEST_PARKED_PG_STREAMS", "200"))
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
    MCPMaxFollowersPerStream 0
</Location>
<Location /mcp-keepalive>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
    MCPMaxSessions 0
    MCPKeepAliveInterval 1
</Location>
<Location /mcp-many-status>
    SetHandler server-status
</Location>
"""

WARN_OR_WORSE = re.compile(r"\[[a-z_0-9]+:(warn|error|crit|alert|emerg)\]")


@pytest.fixture(scope="module")
def env():
    d = run_dir("mcp-parked-pg-")
    conf = d / "parked-pg.conf"
    conf.write_text(CONF)
    with own_stack(d, "--httpd", "1", "--workers", str(WORKERS), "--children", "2",
                   "--conf", str(conf)) as e:
        yield e


def base(env):
    return env["MCP_HTTP_URL"].rsplit("/", 1)[0]


def parked(env) -> int:
    return int(status(env).get("MCPParkedStreams", "-1"))


def stack(env, command):
    subprocess.run([str(STACK), command, "--dir", env["MCP_STACK_DIR"]], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


def error_log(env) -> Path:
    return Path(env["MCP_STACK_DIR"]) / "httpd-1" / "error_log"


def log_since(env, offset: int) -> list[str]:
    with open(error_log(env), "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def children(env) -> list[int]:
    parent = Path(env["MCP_HTTPD_PIDFILES"].split()[0]).read_text().strip()
    # httpd's own children (-x apache2): not the stdio supervisor the parent also runs
    out = subprocess.run(["pgrep", "-x", "apache2", "-P", parent], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def listening_again(env, offset: int, pids: list[int]) -> bool:
    """Every child's LISTEN connection is back (its info line since offset)."""
    text = "\n".join(log_since(env, offset))
    return all(re.search(rf"\[pid {pid}:tid \d+\][^\n]*(reconnected to PostgreSQL|connected to "
                         rf"PostgreSQL; listening)", text) for pid in pids)


class ThreadWatch:
    """The httpd's thread count, sampled every 20 ms in a thread of its own while it runs."""

    def __init__(self, env):
        self.env = env
        self.most = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            self.most = max(self.most, httpd_threads(self.env))
            self.stop.wait(0.02)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def in_thread(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def stored_events(env, stream_ids) -> dict[str, str]:
    """event id -> message_text of every outbound event of these streams."""
    with database(env) as pg, pg.cursor() as cur:
        cur.execute("SELECT stream_id, seq, message_text FROM mcp.events WHERE stream_id = "
                    "ANY(%s) AND direction = 'out' AND message_text IS NOT NULL",
                    (list(stream_ids),))
        return {f"{sid}-{seq}": text for sid, seq, text in cur.fetchall()}


def seqs_of(ids):
    return [int(i.split("-")[1]) for i in ids]


def check_against_the_table(env, streams):
    """Every event a client saw is in mcp.events as it saw it; ids strictly increasing per
    stream (no event twice, none out of order)."""
    stream_ids = {int(s.ids[0].split("-")[0]) for s in streams if s.ids}
    table = stored_events(env, stream_ids)
    for s in streams:
        assert len({i.split("-")[0] for i in s.ids}) == 1, s.ids
        seqs = seqs_of(s.ids)
        assert all(a < b for a, b in zip(seqs, seqs[1:])), (s.sid, s.ids)
        # The ids of events with data, in order, and their texts as stored.
        with_data = [i for i in s.ids if i in table]
        assert [table[i] for i in with_data] == [e[1] for e in s.events], s.ids
    return table


def test_restart_under_parked_standalone_streams(env, capsys):
    """STREAMS parked standalone streams on 50 workers; PostgreSQL stopped, a broadcast sent
    while it is away, PostgreSQL started: the broadcast reaches every stream (stored once it is
    back); after every child listens again, a second broadcast and a notify reach them too.
    Threads stay flat throughout; the error log gets a bounded number of lines per child."""
    n = STREAMS
    broadcast = env["MCP_BACKEND_URL"].rsplit("/", 1)[0] + "/broadcast"
    threads_before = httpd_threads(env)
    pids = children(env)

    def changed(k):
        return lambda s: sum("list_changed" in e[1] for e in s.events) >= k

    async def scenario():
        async with Crowd(base(env) + "/mcp-many") as crowd:
            streams = await crowd.connect(n)
            bad = [s.status for s in streams if s.status != 200]
            assert not bad, f"{len(bad)} of {n} streams not opened: {bad[:3]}"
            for s in streams:
                await s.wait_for(lambda s: s.ids, timeout=30)
            await in_thread(lambda: wait_for(lambda: parked(env) >= n, timeout=60,
                                             what=f"{n} parked streams"))
            offset = error_log(env).stat().st_size
            with ThreadWatch(env) as watch:
                t0 = time.monotonic()
                await in_thread(stack, env, "stop-pg")
                # While it is away: the backend's notification on every GET stream; each
                # parked stream's half waits (at the gate, on a loop worker) to store it.
                r = await in_thread(lambda: requests.post(broadcast, timeout=10))
                assert r.status_code == 200 and r.json()["streams"] >= n, r.text
                # Every child's gate has seen it gone (a ping failed), its halves waiting.
                await in_thread(lambda: wait_for(
                    lambda: all(re.search(rf"\[pid {pid}:tid \d+\][^\n]*the database is "
                                          rf"unreachable", "\n".join(log_since(env, offset)))
                                for pid in pids),
                    timeout=30, what="every child's gate to close"))
                assert not any(changed(1)(s) for s in streams), "written before it was stored"
                await in_thread(stack, env, "start-pg")
                down = time.monotonic() - t0
                for s in streams:
                    await s.wait_for(changed(1), timeout=60)
                await in_thread(lambda: wait_for(lambda: listening_again(env, offset, pids),
                                                 timeout=60, what="every child to LISTEN again"))
                outage_log = log_since(env, offset)
                # Back: a broadcast, and a notify on a few sessions (stored by a request of
                # either child, woken in the parked stream's child).
                r = await in_thread(lambda: requests.post(broadcast, timeout=10))
                assert r.status_code == 200 and r.json()["streams"] >= n, r.text
                for s in streams:
                    await s.wait_for(changed(2), timeout=60)
                for s in streams[:10]:
                    code, _, body = await crowd.call(s.sid, "notify", {"text": f"for {s.sid}"})
                    assert code == 200 and b"sent" in body, body
                for s in streams[:10]:
                    await s.wait_for(lambda s: any(f"for {s.sid}" in e[1] for e in s.events),
                                     timeout=30)
            assert not any(s.ended for s in streams), "a parked stream ended"
            assert parked(env) >= n
            return streams, watch.most, down, outage_log
    streams, most_threads, down, outage_log = run(scenario())
    check_against_the_table(env, streams)
    for s in streams:
        assert sum("list_changed" in e[1] for e in s.events) == 2, (s.sid, s.events)
    warn = [l for l in outage_log if WARN_OR_WORSE.search(l)]
    parked_lines = [l for l in outage_log if "(parked)" in l]
    with capsys.disabled():
        print(f"\n{n} parked streams: PostgreSQL down {down:.2f} s; httpd threads "
              f"{threads_before} before, {most_threads} at most; {len(outage_log)} log lines "
              f"({len(warn)} warn+, {len(parked_lines)} of parked streams) until every child "
              f"listened again")
    assert most_threads - threads_before < 20, (threads_before, most_threads)
    # Per child: the gate's line when the outage is confirmed, the listener's lost connection
    # and a failed attempt or two, PostgreSQL's goodbye on pooled connections in use.
    assert len(warn) <= 6 * len(pids), "\n".join(warn[:40])
    # Not a line per stream (nor per stream per tick), at any level.
    assert len(parked_lines) < n // 4, "\n".join(parked_lines[:40])
    wait_for(lambda: parked(env) == 0, timeout=60, what="parked streams back to 0")


def gates_closed(env, offset: int, pids: list[int]) -> bool:
    """Every child's gate has seen the database gone (a ping failed) since offset."""
    text = "\n".join(log_since(env, offset))
    return all(re.search(rf"\[pid {pid}:tid \d+\][^\n]*the database is unreachable", text)
               for pid in pids)


async def kept_alive(streams, n_children: int, timeout: float = 15):
    """Two more keep-alives on every stream but those whose half is storing (it waits for
    the database on its worker, its stream with it): at most HALF_WORKERS (2) per child."""
    seen = {id(s): s.comments for s in streams}
    deadline = time.monotonic() + timeout
    while True:
        late = [s for s in streams if s.comments < seen[id(s)] + 2]
        if len(late) <= 2 * n_children:
            return
        assert time.monotonic() < deadline, f"{len(late)} of {len(streams)} streams got no " \
                                            f"keep-alives while the database was away"
        await asyncio.sleep(0.1)


def test_parked_streams_are_served_while_the_database_is_away(env):
    """The loop's workers do not all wait out the outage: while PostgreSQL is down and every
    parked stream's half has something to store (a broadcast), the parked streams still get
    their keep-alives (MCPKeepAliveInterval 1; all but the few whose half waits to store), also after some clients hung up; once PostgreSQL is
    back, the hung-up streams are given back and the broadcast reaches every stream that
    stayed, once."""
    n = 40
    broadcast = env["MCP_BACKEND_URL"].rsplit("/", 1)[0] + "/broadcast"
    pids = children(env)

    async def scenario():
        async with Crowd(base(env) + "/mcp-keepalive") as crowd:
            streams = await crowd.connect(n)
            assert all(s.status == 200 for s in streams)
            for s in streams:
                await s.wait_for(lambda s: s.ids, timeout=30)
            await in_thread(lambda: wait_for(lambda: parked(env) >= n, timeout=60,
                                             what=f"{n} parked streams"))
            offset = error_log(env).stat().st_size
            await in_thread(stack, env, "stop-pg")
            try:
                r = await in_thread(lambda: requests.post(broadcast, timeout=10))
                assert r.status_code == 200 and r.json()["streams"] >= n, r.text
                await in_thread(lambda: wait_for(lambda: gates_closed(env, offset, pids),
                                                 timeout=30, what="every child's gate to close"))
                await kept_alive(streams, len(pids))
                # Hang-ups meanwhile: each ends its client's side at once (the stream's row
                # is closed once the database is back), and takes no worker from the others.
                gone, streams = streams[:5], streams[5:]
                for s in gone:
                    s.close()
                await kept_alive(streams, len(pids))
                assert not any("list_changed" in e[1] for s in streams for e in s.events)
                # What the outage logged, at any level but trace: a few lines per child (the
                # gate's, the listener's, the lease keeper's), none per stream or per tick;
                # the hang-ups' own lines aside (one each).
                outage_log = [l for l in log_since(env, offset)
                              if not re.search(r":trace\d\]|went away", l)]
                assert len(outage_log) <= 12 * len(pids), "\n".join(outage_log)
            finally:
                await in_thread(stack, env, "start-pg")
            await in_thread(lambda: wait_for(lambda: parked(env) <= n - len(gone), timeout=30,
                                             what="the hang-ups' streams given back"))
            for s in streams:
                await s.wait_for(lambda s: any("list_changed" in e[1] for e in s.events),
                                 timeout=60)
            assert not any(s.ended for s in streams)
            return streams
    streams = run(scenario())
    check_against_the_table(env, streams)
    for s in streams:
        assert sum("list_changed" in e[1] for e in s.events) == 1, (s.sid, s.events)
    wait_for(lambda: parked(env) == 0, timeout=60, what="parked streams back to 0")


class Call(Stream):
    """A tools/call whose SSE answer is read as a Stream's (POST, Connection: close)."""

    async def post(self, body: dict, timeout: float):
        c = self.crowd
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(c.host, c.port, ssl=c.ssl), timeout)
        c.track(self)
        data = json.dumps(body).encode()
        self.writer.write((f"POST {c.path} HTTP/1.1\r\nHost: {c.host}:{c.port}\r\n"
                           f"Content-Type: application/json\r\nAccept: application/json, "
                           f"text/event-stream\r\nContent-Length: {len(data)}\r\n"
                           f"Mcp-Session-Id: {self.sid}\r\nMCP-Protocol-Version: {c.protocol}\r\n"
                           f"Connection: close\r\n\r\n").encode() + data)
        await self.read_head(timeout)


def answer_of(s) -> dict | None:
    for _, text in s.events:
        msg = json.loads(text)
        if msg.get("id") == 2 and ("result" in msg or "error" in msg):
            return msg
    return None


def test_restart_under_parked_slow_answers(env, capsys):
    """Slow calls (2025-11-25) whose answers are parked (they take longer than 2 s), more than
    the workers, in flight while PostgreSQL restarts. A third of the clients stay: each gets
    its result or a stored error and its response ends (no hang), and a resume from the last
    event it saw before the restart gets exactly what it saw after it. A third go before the
    restart and follow at once with Last-Event-ID (parked followers, in either child: woken
    through LISTEN, which reconnects): each gets exactly what it missed, to the answer. A third
    go before the restart and resume after it: the same."""
    n = WORKERS + 10
    steps, interval = 16, 500          # 8 s of progress: parked at 2 s, restarted at ~3 s

    async def scenario():
        async with Crowd(base(env) + "/mcp-many", parallel=n) as crowd:
            sids = await asyncio.gather(*[crowd.session() for _ in range(n)])
            calls = [Call(crowd, sid) for sid in sids]
            crowd.streams.extend(calls)
            await asyncio.gather(*[c.post({
                "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                    "name": "slow", "arguments": {"count": steps, "interval_ms": interval},
                    "_meta": {"progressToken": f"p{i}"}}}, timeout=30)
                for i, c in enumerate(calls)])
            assert all(c.status == 200 for c in calls), [c.status for c in calls]
            staying, following, leaving = calls[0::3], calls[1::3], calls[2::3]
            for c in calls:
                await c.wait_for(lambda c: len(c.events) >= 2, timeout=30)
            await in_thread(lambda: wait_for(lambda: parked(env) >= n * 3 // 4, timeout=60,
                                             what="the slow answers parked"))
            for c in following + leaving:
                c.close()
            left_at = {c.sid: c.ids[-1] for c in following + leaving}
            resumed = {}
            for c in following:
                r = Stream(crowd, c.sid)
                await r.open(30, last_event_id=left_at[c.sid])
                resumed[c.sid] = r
            assert all(r.status == 200 for r in resumed.values())
            before = {c.sid: len(c.ids) for c in staying}
            t0 = time.monotonic()
            await in_thread(stack, env, "restart-pg")
            restart = time.monotonic() - t0
            for c in staying:
                await c.wait_for(lambda c: c.ended, timeout=90)
            # Resumes after the restart, of both kinds.
            for c in leaving:
                r = Stream(crowd, c.sid)
                await r.open(30, last_event_id=left_at[c.sid])
                resumed[c.sid] = r
            for c in staying:
                r = Stream(crowd, c.sid)
                await r.open(30, last_event_id=c.ids[before[c.sid] - 1])
                resumed[c.sid + "/again"] = r
            for r in resumed.values():
                assert r.status == 200, r.status
                await r.wait_for(lambda r: r.ended, timeout=90)
            return staying, following + leaving, left_at, before, resumed, restart
    staying, gone, left_at, before, resumed, restart = run(scenario())
    results = errors = 0
    for c in staying:
        msg = answer_of(c)
        assert msg, (c.sid, c.events[-3:])
        if "result" in msg:
            results += 1
            assert msg["result"]["content"][0]["text"] == f"slow done: {steps} steps"
        else:
            errors += 1
    table = check_against_the_table(env, staying + gone + list(resumed.values()))
    stream_seqs = {}
    for event_id in table:
        stream, seq = event_id.split("-")
        stream_seqs.setdefault(stream, []).append(int(seq))
    for c in staying:
        # What the client saw is the whole stream, its answer last.
        stream = c.ids[0].split("-")[0]
        assert [s for s in seqs_of(c.ids) if f"{stream}-{s}" in table] \
            == sorted(stream_seqs[stream]), c.ids
        assert answer_of(c) == json.loads(c.events[-1][1])
        r = resumed[c.sid + "/again"]
        assert r.ids == c.ids[before[c.sid]:], (c.ids, before[c.sid], r.ids)
    for c in gone:
        r = resumed[c.sid]
        stream, last = left_at[c.sid].split("-")
        missed = sorted(s for s in stream_seqs[stream] if s > int(last))
        assert seqs_of(r.ids) == missed, (left_at[c.sid], r.ids, missed)
        assert [e[1] for e in r.events] == [table[f"{stream}-{s}"] for s in missed]
        assert answer_of(r), (c.sid, r.events[-3:])
    with capsys.disabled():
        print(f"\n{n} parked slow answers across restart-pg ({restart:.2f} s): {results} of "
              f"{len(staying)} staying clients got their result, {errors} a stored error; "
              f"{len(gone)} resumed")
    wait_for(lambda: parked(env) == 0, timeout=60, what="parked streams back to 0")


def test_httpd_stops_promptly_while_the_database_is_away():
    """httpd stopped while PostgreSQL is down and parked streams' halves wait to store: each
    child exits within a couple of seconds (its loop's workers give up at the gate), instead of
    waiting out the stores' patience until the parent kills it (AH00045/AH00046, or a crash
    when it tore the child's pools down under them)."""
    d = run_dir("mcp-parked-pg-stop-")
    conf = d / "parked-pg.conf"
    conf.write_text(CONF)
    n = 40
    with own_stack(d, "--httpd", "1", "--workers", str(WORKERS), "--children", "2",
                   "--conf", str(conf)) as e:
        pids = children(e)
        parent = int(Path(e["MCP_HTTPD_PIDFILES"].split()[0]).read_text())
        broadcast = e["MCP_BACKEND_URL"].rsplit("/", 1)[0] + "/broadcast"

        async def scenario():
            async with Crowd(base(e) + "/mcp-many") as crowd:
                streams = await crowd.connect(n)
                assert all(s.status == 200 for s in streams)
                await in_thread(lambda: wait_for(lambda: parked(e) >= n, timeout=60,
                                                 what=f"{n} parked streams"))
                offset = error_log(e).stat().st_size
                await in_thread(stack, e, "stop-pg")
                r = await in_thread(lambda: requests.post(broadcast, timeout=10))
                assert r.status_code == 200 and r.json()["streams"] >= n, r.text
                await in_thread(lambda: wait_for(lambda: gates_closed(e, offset, pids),
                                                 timeout=30, what="every child's gate to close"))
                t0 = time.monotonic()
                # (tests/stack's environment: under ASan a bare apache2 cannot load the module)
                await in_thread(stack, e, "stop-httpd")
                await in_thread(lambda: wait_for(lambda: not Path(f"/proc/{parent}").exists(),
                                                 timeout=30, what="httpd to exit"))
                return time.monotonic() - t0, offset
        took, offset = run(scenario())
        lines = log_since(e, offset)
        bad = [l for l in lines if re.search(r"AH0004[56]|exit signal|Assertion", l)]
        assert not bad, "\n".join(bad)
        assert took < 8, took
