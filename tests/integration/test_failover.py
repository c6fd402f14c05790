"""PostgreSQL fails over under load (issue 24): a primary and a synchronous standby
(`tests/stack up --replica`), two httpd instances whose DBDParams name both servers with
target_session_attrs=read-write; `tests/stack failover` kills the primary's postmaster (kill -9)
and promotes the standby while calls and streams run on both instances.

What must hold:
* every request gets an answer: a result, or 503 with Retry-After during the switch — never a
  500, a reset connection, or a wait past MCPDatabaseTimeout (and the lease-bound patience of a
  stream's own stores);
* every event id any client received is on the new primary (synchronous replication, and every
  event stored before it is written): 0 missing, with the very text the client got;
* streams cut during the switch resume with Last-Event-ID on the other instance and get exactly
  what they missed, to their answer;
* sessions made before the switch go on after it, and cross-process live delivery works again
  (a follower on the other instance, woken through its re-made LISTEN connection);
* the error log has a bounded number of lines per child for the whole switch.

Also: a standby promoted late (the gate must not take its pings for the database's return),
and the synchronous standby dying (the primary's commits wait: 503, then served again).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import psycopg2
import pytest

from conftest import own_stack, run_dir
from mcp_client import McpSession, parse_sse_bytes
from test_bridge import final, tool as bridge_tool
from test_database_faults import WARN_OR_WORSE, log_sizes, new_lines
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"
DATABASE_TIMEOUT = 4.0
CALLERS = 6            # threads calling echo in a loop, each on its own session
BRIDGED_CALLERS = 2    # threads calling echo in a loop as 2026-07-28 clients (the era bridge)
STREAMS = 4            # slow calls in flight across the switch (half of them cut and resumed)
SLOW = {"count": 24, "interval_ms": 250}

CONF = """
MCPDatabaseTimeout 4s
"""


@pytest.fixture(scope="module")
def env():
    d = run_dir("mcp-failover-")
    conf = d / "failover.conf"
    conf.write_text(CONF)
    with own_stack(d, "--httpd", "2", "--replica", "--conf", str(conf)) as e:
        yield e


def stack(env, command):
    subprocess.run([str(STACK), command, "--dir", env["MCP_STACK_DIR"]], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


# Every client session a test opened: closed before its stack goes down (a connection still
# open when httpd stops is reported under ASan as a lost allocator of the event MPM's).
OPEN: list = []   # McpSession, SlowCall, Standalone: anything with close()


def client(url) -> McpSession:
    s = McpSession(url, timeout=60)
    OPEN.append(s)
    return s


def session(url) -> McpSession:
    s = client(url)
    s.initialize()
    return s


def close_clients():
    while OPEN:
        OPEN.pop().close()


@pytest.fixture(autouse=True)
def clients_closed():
    yield
    close_clients()


def echo_body(i: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": f"failover {i}"}}}).encode()


class Callers:
    """Threads calling echo in a loop, each on its own session, alternating instances; every
    outcome is recorded: (status, Retry-After, event ids and texts received, response text,
    seconds taken, when it ended)."""

    def __init__(self, urls):
        self._start([session(urls[i % len(urls)]) for i in range(CALLERS)])

    def _start(self, targets):
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.outcomes = []
        self.threads = [threading.Thread(target=self._run, args=(k, t), daemon=True)
                        for k, t in enumerate(targets)]

    def call(self, k, s, i):
        """The k-th thread's i-th call on s: (status, Retry-After, events, response text)."""
        r = s.post_raw(echo_body(i), timeout=60)
        events = [(e.id, e.data) for e in parse_sse_bytes(r.content) if e.id] \
            if r.headers.get("Content-Type", "").startswith("text/event-stream") else []
        return r.status_code, r.headers.get("Retry-After"), events, r.text

    def _run(self, k, target):
        i = 0
        while not self.stop.is_set():
            i += 1
            t0 = time.monotonic()
            try:
                outcome = self.call(k, target, i) + (time.monotonic() - t0, time.monotonic())
            except Exception as e:   # noqa: BLE001 - what went wrong is the finding
                outcome = (None, None, [], repr(e), time.monotonic() - t0, time.monotonic())
            with self.lock:
                self.outcomes.append(outcome)
            if outcome[0] == 503:
                time.sleep(0.2)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(90)


class BridgedCallers(Callers):
    """2026-07-28 clients (stateless, no session) calling echo in a loop through the era bridge
    (the C test backend serves the 2025 era only), alternating instances: each call opens a
    backend stream on its instance's pooled backend session. An outcome's events are
    [(request id, the text echoed)]."""

    def __init__(self, urls):
        self._start([urls[k % len(urls)] for k in range(BRIDGED_CALLERS)])

    def call(self, k, url, i):
        rid = f"fo-bridged-{k}-{i}"
        r = bridge_tool(url, rid, "echo", {"text": rid}, caps={})
        r_text = r.text
        if r.status_code != 200:
            return r.status_code, r.headers.get("Retry-After"), [], r_text
        result = final(r).get("result") or {}
        got = (result.get("content") or [{}])[0].get("text")
        return r.status_code, None, [(rid, got)], r_text


class SlowCall:
    """A slow call whose SSE answer is read on a thread; cut() closes its connection."""

    def __init__(self, url, token):
        self.s = session(url)
        self.events = []            # (id, data) with ids, in order
        self.done = threading.Event()
        self.error = None
        self.response = self.s.post_raw(json.dumps({
            "jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {
                "name": "slow", "arguments": SLOW, "_meta": {"progressToken": token}}}),
            stream=True, timeout=60)
        assert self.response.status_code == 200, self.response.text
        OPEN.append(self)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        from mcp_client import iter_sse
        try:
            for e in iter_sse(self.response):
                if e.id:
                    self.events.append((e.id, e.data))
        except Exception as e:   # noqa: BLE001 - a cut is expected for some
            self.error = e
        finally:
            self.done.set()

    def cut(self):
        self.response.close()
        self.done.wait(10)

    def close(self):
        self.response.close()

    def answered(self, events=None) -> bool:
        for _id, data in events if events is not None else self.events:
            if data and '"result"' in data and '"id":99' in data:
                return True
        return False


class Standalone:
    """A session's standalone GET stream (parked on the event MPM), read on a thread."""

    def __init__(self, url):
        from mcp_client import iter_sse
        self.s = session(url)
        self.events = []            # (id, data) with data
        self.response = self.s.get_raw(headers=self.s.headers(
            {"Accept": "text/event-stream", "Content-Type": None}), stream=True, timeout=120)
        assert self.response.status_code == 200, self.response.text
        OPEN.append(self)
        self.sse = iter_sse(self.response)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for e in self.sse:
                if e.data:
                    self.events.append((e.id, e.data))
        except Exception:   # noqa: BLE001 - the stream ends when the test closes it
            pass

    def close(self):
        self.response.close()

    def notified(self, text: str) -> bool:
        return any(text in d for _i, d in self.events)


def seq(event_id: str) -> tuple[int, int]:
    stream, s = event_id.split("-")
    return int(stream), int(s)


def test_failover_under_load_loses_nothing(env, capsys):
    urls = env["MCP_URLS"].split()
    assert len(urls) == 2 and env.get("MCP_PG_REPLICA"), "the stack was started without --replica"
    sizes = log_sizes(env)
    with Callers(urls) as callers, BridgedCallers(urls) as bridged:
        wait_for(lambda: len(callers.outcomes) >= 20, timeout=30, what="calls before the failover")
        wait_for(lambda: len(bridged.outcomes) >= 4, timeout=30,
                 what="bridged calls before the failover")
        # A standalone stream on each instance, waiting (parked) across the switch.
        standalone = [Standalone(u) for u in urls]
        slow = [SlowCall(urls[i % 2], f"f{i}") for i in range(STREAMS)]
        for c in slow:
            wait_for(lambda: len(c.events) >= 3, timeout=30, what="a slow call's first events")
        before = len(callers.outcomes)
        # Half the streams lose their client as the primary dies.
        cut = slow[: STREAMS // 2]
        staying = slow[STREAMS // 2:]
        t0 = time.monotonic()
        killer = threading.Thread(target=stack, args=(env, "failover"))
        killer.start()
        for c in cut:
            c.cut()
        killer.join(120)
        promoted = time.monotonic()
        wait_for(lambda: any(o[0] == 200 and o[5] > promoted for o in callers.outcomes),
                 timeout=30, what="a call answered after the promotion")
        wait_for(lambda: len(callers.outcomes) >= before + 40, timeout=60,
                 what="calls after the failover")
        # Bridged calls go on after the switch on both instances (thread k calls instance
        # k % 2; the pooled backend sessions' rows were replicated before any call used them).
        for k in range(BRIDGED_CALLERS):
            wait_for(lambda: any(o[0] == 200 and o[5] > promoted
                                 and o[2][0][0].startswith(f"fo-bridged-{k}-")
                                 for o in bridged.outcomes), timeout=30,
                     what=f"a bridged call answered after the promotion on {urls[k % 2]}")
    # Every request got an answer: a result, or 503 with Retry-After; nothing hung.
    everyone = callers.outcomes + bridged.outcomes
    bad = [o for o in everyone if not (o[0] == 200 or (o[0] == 503 and o[1]))]
    assert not bad, [(o[0], o[3][:300]) for o in bad[:5]]
    assert all(o[4] < DATABASE_TIMEOUT + 4 for o in everyone), max(o[4] for o in everyone)
    answered = [o for o in callers.outcomes if o[0] == 200]
    # Each bridged call that was answered got its own echo.
    bridged_answered = [o[2][0] for o in bridged.outcomes if o[0] == 200]
    assert all(rid == got for rid, got in bridged_answered), \
        [a for a in bridged_answered if a[0] != a[1]][:5]
    for o in answered:
        assert any('"result"' in d for _i, d in o[2]), o[3][:300]
    unavailable = [o for o in callers.outcomes if o[0] == 503]
    after = [o for o in answered if o[5] > promoted]
    first_ok = min((o[5] - promoted for o in after), default=None)

    # The staying streams end with their answer, every event once, in order: their owners'
    # leases were renewed on the new primary (a lost lease would have ended them with an error).
    for c in staying:
        assert c.done.wait(60), "a slow call that was not cut never ended"
        ids = [seq(i) for i, _d in c.events]
        assert [s for _st, s in ids] == list(range(ids[0][1], ids[0][1] + len(ids))), ids
        assert c.answered(), c.events[-3:]

    # The cut streams resume on the other instance and get exactly what they missed.
    resumed = {}
    for k, c in enumerate(cut):
        other = client(urls[(slow.index(c) + 1) % 2])
        other.session_id, other.initialized = c.s.session_id, True
        other.protocol_version = c.s.protocol_version
        last = c.events[-1][0]
        got = [(e.id, e.data) for e in other.get_stream(last_event_id=last, timeout=60) if e.id]
        resumed[last] = got
        ids = [seq(i) for i, _d in got]
        assert ids and ids[0] == (seq(last)[0], seq(last)[1] + 1), (last, ids[:3])
        assert [s for _st, s in ids] == list(range(ids[0][1], ids[0][1] + len(ids))), ids
        assert c.answered(got), got[-2:]

    # The standalone streams that waited across the switch get what the backend sends now.
    for k, st in enumerate(standalone):
        text = f"after the failover {k}"
        assert "sent" in json.dumps(st.s.call("tools/call", {"name": "notify",
                                                              "arguments": {"text": text}}))
        wait_for(lambda: st.notified(text), timeout=30, what="a notification on a standalone stream")

    # Every event any client received is on the new primary, with the text the client got.
    received = {}
    for o in answered:
        received.update(dict(o[2]))
    for c in slow:
        received.update(dict(c.events))
    for got in resumed.values():
        received.update(dict(got))
    for st in standalone:
        received.update({i: d for i, d in st.events if i})
    pairs = [seq(i) for i in received]
    conn = psycopg2.connect(env["MCP_PG_REPLICA"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_is_in_recovery()")
            assert cur.fetchone()[0] is False
            cur.execute("SELECT stream_id, seq, message_text FROM mcp.events "
                        "WHERE (stream_id, seq) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))",
                        ([p[0] for p in pairs], [p[1] for p in pairs]))
            table = {f"{r[0]}-{r[1]}": r[2] for r in cur.fetchall()}
            cur.execute("SELECT status, count(*) FROM mcp.streams WHERE id = ANY(%s) GROUP BY 1",
                        ([seq(c.events[0][0])[0] for c in slow],))
            statuses = dict(cur.fetchall())
            # Every answered bridged call: the client's stream and its backend stream complete,
            # the echo the client got stored as the client stream's answer.
            cur.execute("SELECT c.request_id_text, c.status, b.status, a.message_text"
                        "  FROM mcp.streams c"
                        "  LEFT JOIN mcp.streams b ON b.id = c.bridged_to"
                        "  LEFT JOIN mcp.events a ON a.stream_id = c.id AND a.direction = 'out'"
                        "                        AND a.kind = 'message'"
                        " WHERE c.session_id IS NULL AND c.request_id_text = ANY(%s)",
                        ([json.dumps(rid) for rid, _got in bridged_answered],))
            bridged_rows = {json.loads(r[0]): r[1:] for r in cur.fetchall()}
    finally:
        conn.close()
    assert statuses == {"complete": len(slow)}, statuses
    wrong = [(rid, bridged_rows.get(rid)) for rid, _got in bridged_answered
             if bridged_rows.get(rid, (None,))[:2] != ("complete", "complete")
             or rid not in json.loads(bridged_rows[rid][2])["result"]["content"][0]["text"]]
    assert not wrong, f"{len(wrong)} of {len(bridged_answered)} answered bridged calls: {wrong[:5]}"
    missing = [i for i in received if i not in table]
    assert not missing, f"{len(missing)} of {len(received)} received events are not on the new primary: {missing[:5]}"
    differ = [i for i, d in received.items() if d and table[i] is not None and json.loads(table[i]) != json.loads(d)]
    assert not differ, differ[:5]

    # Cross-process live delivery again: a slow call on instance 1, followed live on instance 2.
    live = SlowCall(urls[0], "live")
    wait_for(lambda: len(live.events) >= 2, timeout=30, what="the live call's first events")
    follower = client(urls[1])
    follower.session_id, follower.initialized = live.s.session_id, True
    follower.protocol_version = live.s.protocol_version
    t1 = time.monotonic()
    followed = [(e.id, e.data) for e in follower.get_stream(last_event_id=live.events[1][0],
                                                            timeout=60) if e.id]
    assert live.done.wait(60)
    assert [i for i, _d in followed] == [i for i, _d in live.events[2:]], (followed[:3], live.events[:4])
    assert live.answered(followed)

    # A bounded number of log lines per child for the whole switch.
    per_child, lines = warn_lines_per_child(sizes)
    with capsys.disabled():
        print(f"\nfailover under load: {len(callers.outcomes)} calls ({before} before), "
              f"{len(unavailable)} answered 503, {len(bridged.outcomes)} bridged calls "
              f"({len(bridged_answered)} answered), first success {first_ok:.2f} s after the "
              f"promotion (failover took {promoted - t0:.2f} s); {len(received)} events "
              f"received, 0 missing; {len(cut)} streams resumed on the other instance; "
              f"live follow took {time.monotonic() - t1:.2f} s; warn+ lines per child "
              f"{sorted(per_child.values(), reverse=True)[:6]}")
    assert all(n <= 30 for n in per_child.values()), "\n".join(lines[:60])
    # Every connection to the new primary is new: each prepared what it ran before running it
    # (none ran a statement first to be told it was not prepared there).
    pg2_log = (Path(env["MCP_STACK_DIR"]) / "pg2" / "log").read_text(errors="replace")
    unprepared = [l for l in pg2_log.splitlines() if re.search(r'ERROR:.*prepared statement "mcp_', l)]
    assert unprepared == [], "\n".join(unprepared[:10])


def warn_lines_per_child(sizes) -> tuple[dict[str, int], list[str]]:
    lines = [l for l in new_lines(sizes) if WARN_OR_WORSE.search(l)]
    per_child: dict[str, int] = {}
    for l in lines:
        m = re.search(r"\[pid (\d+)", l)
        per_child[m.group(1) if m else "?"] = per_child.get(m.group(1) if m else "?", 0) + 1
    return per_child, lines


def test_a_late_promotion_costs_a_bounded_log():
    """The standby is promoted 3 s after the primary died (a failover manager's time to decide).
    Meanwhile the standby answers pings but refuses read-write sessions: the outage gate must
    not take a ping for the database's return (it did: every 100 ms it let mod_dbd try again,
    and each try logged two error lines, ~30 a child in 3 s). Calls meanwhile get a result or
    503 with Retry-After, and work again after the promotion."""
    d = run_dir("mcp-failover-late-")
    conf = d / "failover.conf"
    conf.write_text(CONF)
    with own_stack(d, "--httpd", "1", "--replica", "--conf", str(conf)) as e:
        sizes = log_sizes(e)
        with Callers(e["MCP_URLS"].split()) as callers:
            wait_for(lambda: len(callers.outcomes) >= 10, timeout=30, what="calls before")
            subprocess.run([str(STACK), "failover", "--dir", e["MCP_STACK_DIR"],
                            "--promote-after", "3"], check=True, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=120)
            promoted = time.monotonic()
            wait_for(lambda: any(o[0] == 200 and o[5] > promoted + 0.5
                                 for o in callers.outcomes), timeout=30,
                     what="a call answered after the promotion")
        close_clients()
        bad = [o for o in callers.outcomes if not (o[0] == 200 or (o[0] == 503 and o[1]))]
        assert not bad, [(o[0], o[3][:300]) for o in bad[:5]]
        per_child, lines = warn_lines_per_child(sizes)
        assert all(n <= 10 for n in per_child.values()), "\n".join(lines[:60])


def test_a_dead_standby_gives_503_and_recovers():
    """The synchronous standby dies (kill -9): the primary's commits wait for it, so a request
    gets 503 with Retry-After after MCPDatabaseTimeout (its statement given up with its
    connection), never a hang; once the standby is back, the same session is served at once."""
    d = run_dir("mcp-failover-standby-")
    conf = d / "failover.conf"
    conf.write_text(CONF)
    with own_stack(d, "--httpd", "1", "--replica", "--conf", str(conf)) as e:
        s = session(e["MCP_URL"])
        assert s.call("tools/call", {"name": "echo", "arguments": {"text": "before"}})
        data = e["MCP_PG_REPLICA_DATA"]
        postmaster = int(Path(data, "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-f", data], check=False)
        wait_for(lambda: not Path(f"/proc/{postmaster}").exists(), timeout=10,
                 what="the standby's postmaster to die")
        results = []
        for i in range(2):
            t0 = time.monotonic()
            r = s.post_raw(echo_body(100 + i), timeout=60)
            results.append((r.status_code, r.headers.get("Retry-After"), r.text,
                            time.monotonic() - t0))
        for status, retry_after, text, took in results:
            assert status == 503, text
            assert retry_after and int(retry_after) >= 1
            assert '"code":-32003' in text
            assert took < DATABASE_TIMEOUT + 3, took
        subprocess.run(["runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/pg_ctl",
                        "-D", data, "-l", e["MCP_PG_REPLICA_LOG"], "-w", "-t", "30", "start"],
                       check=True, cwd="/tmp", stdin=subprocess.DEVNULL, capture_output=True)
        wait_for(lambda: s.post_raw(echo_body(200), timeout=60).status_code == 200, timeout=30,
                 what="a call once the standby is back")
        assert s.call("tools/call", {"name": "echo", "arguments": {"text": "after"}})
        close_clients()
