"""The database going away: a PostgreSQL restart under load costs no request and writes a
bounded number of log lines; a stopped (SIGSTOP) PostgreSQL makes requests fail with 503 and
Retry-After within MCPDatabaseTimeout (gateway.conf sets 4 s) instead of wedging the workers,
and everything recovers after SIGCONT with nothing lost; a server that refuses writes (a
failover's demoted primary) is an outage too."""

import os
import re
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import psycopg2
import pytest

from mcp_client import McpSession
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

# gateway.conf: MCPDatabaseTimeout 4s
DATABASE_TIMEOUT = 4.0

WARN_OR_WORSE = re.compile(r"\[[a-z_0-9]+:(warn|error|crit|alert|emerg)\]")


def run_stack(stack, *args):
    subprocess.run([str(REPO / "tests" / "stack"), *args, "--dir", stack["MCP_STACK_DIR"]],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)


def error_logs(stack):
    return sorted(Path(stack["MCP_STACK_DIR"]).glob("httpd-*/error_log"))


def log_sizes(stack):
    return {p: p.stat().st_size for p in error_logs(stack)}


def new_lines(sizes):
    lines = []
    for p, size in sizes.items():
        with open(p, "rb") as f:
            f.seek(size)
            lines += f.read().decode(errors="replace").splitlines()
    return lines


def children(stack):
    """httpd processes of the stack that serve requests (children of each parent)."""
    pids = []
    for pidfile in Path(stack["MCP_STACK_DIR"]).glob("httpd-*/httpd.pid"):
        parent = pidfile.read_text().strip()
        # httpd's own children (-x apache2): not the stdio supervisor the parent also runs
        out = subprocess.run(["pgrep", "-x", "apache2", "-P", parent], capture_output=True,
                             text=True).stdout
        pids += out.split()
    return pids


class Load:
    """Threads calling tools/call echo in a loop, each on its own session, round-robin over
    the stack's httpd instances; every outcome is recorded."""

    def __init__(self, stack, threads=4):
        self.urls = stack["MCP_URLS"].split()
        self.sessions = []
        for i in range(threads):
            s = McpSession(self.urls[i % len(self.urls)], timeout=60)
            s.initialize()
            self.sessions.append(s)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failures = []
        self.threads = [threading.Thread(target=self._run, args=(s,), daemon=True)
                        for s in self.sessions]

    def _run(self, s):
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                resp = s.request("tools/call", {"name": "echo", "arguments": {"text": f"n{n}"}})
                good = resp.get("result", {}).get("content", [{}])[0].get("text") == f"n{n}"
                outcome = None if good else f"wrong answer {resp}"
            except Exception as e:   # noqa: BLE001 - every failure counts
                outcome = repr(e)[:300]
            with self.lock:
                if outcome is None:
                    self.ok += 1
                else:
                    self.failures.append(outcome)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def calls(self):
        with self.lock:
            return self.ok + len(self.failures)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(90)
        for s in self.sessions:
            s.close()


def prepared_statement_errors(stack):
    """PostgreSQL's log lines about the module's prepared statements (mcp_<hash>): a statement
    run before it was prepared on its connection (26000), or prepared twice (42P05)."""
    log = Path(stack["MCP_STACK_DIR"]) / "pg" / "log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return [l for l in text.splitlines() if re.search(r'ERROR:.*prepared statement "mcp_', l)]


PG_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC ")


def pg_log_time(line):
    m = PG_LOG_TIME.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() if m else None


def outage_seconds(stack, offset):
    """How long PostgreSQL refused work in its log after offset: from the fast shutdown's
    request to the restarted server's first "ready to accept connections" (None: not found)."""
    with open(stack["MCP_PG_LOG"], "rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    down = next((pg_log_time(l) for l in lines if "received fast shutdown request" in l), None)
    up = next((pg_log_time(l) for l in lines if "ready to accept connections" in l), None)
    return up - down if down is not None and up is not None else None


# A restart costs no request when the outage leaves a waiting statement time to see the
# database back (the gate's next ping, 0.1 s), reconnect and prepare again: 1.5 s of slack.
RESTART_SLACK = 1.5


def checkpoint(stack):
    conn = psycopg2.connect(stack["MCP_PG_ADMIN"])
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CHECKPOINT")
    finally:
        conn.close()


def test_postgres_restart_under_load_costs_no_request(stack, capsys):
    """A restart shorter than MCPDatabaseTimeout costs no request. How long PostgreSQL was away
    is read from its own log; a restart that took longer (a loaded machine: the sanitizer pass
    of a 2-core CI runner had two) must cost only precise 503s and is tried again, up to three
    times. A CHECKPOINT first, as an operator would, keeps the shutdown's own checkpoint short."""
    load = Load(stack, threads=4).start()
    tried = []
    try:
        wait_for(lambda: load.calls() >= 100, timeout=60, what="calls before the restart")
        sizes = log_sizes(stack)
        for _ in range(3):
            checkpoint(stack)
            pg_log_at = Path(stack["MCP_PG_LOG"]).stat().st_size
            with load.lock:
                before, failed_before = load.ok + len(load.failures), len(load.failures)
            t0 = time.monotonic()
            run_stack(stack, "restart-pg")
            restart = time.monotonic() - t0
            wait_for(lambda: load.calls() >= before + 300, timeout=60,
                     what="calls after the restart")
            outage = outage_seconds(stack, pg_log_at)
            assert outage is not None, "no fast shutdown and start in PostgreSQL's log"
            with load.lock:
                failures = load.failures[failed_before:]
            tried.append((restart, outage, len(failures)))
            if outage < DATABASE_TIMEOUT - RESTART_SLACK:
                break
            # Too slow to ride out: each failure is the precise answer, nothing else.
            for f in failures:
                assert "HTTP 503" in f and '"code":-32003' in f, f
    finally:
        load.finish()
    lines = [l for l in new_lines(sizes) if WARN_OR_WORSE.search(l)]
    n_children = len(children(stack))
    summary = ", ".join(f"restart {r:.2f} s (PostgreSQL away {o:.2f} s): {n} failed"
                        for r, o, n in tried)
    with capsys.disabled():
        print(f"\nrestart-pg under load: {load.calls()} calls; {summary}; "
              f"{len(lines)} warn+ log lines ({n_children} children)")
    if tried[-1][1] >= DATABASE_TIMEOUT - RESTART_SLACK:
        pytest.skip(f"PostgreSQL never restarted within {DATABASE_TIMEOUT - RESTART_SLACK} s "
                    f"on this machine ({summary}): the claim needs a quicker restart")
    assert failures == [], summary
    # One line when the outage is confirmed and one when it ends, per child and restart, plus
    # mod_dbd's own line for each connection that was being reset when the database went (at
    # most one per worker that was busy then; seen: none).
    assert len(lines) <= len(tried) * (2 * n_children + 4), "\n".join(lines[:40])
    # Every connection of every child was new at the stack's start and again after the
    # restart (reset by mod_dbd): each prepared what it ran before running it.
    errors = prepared_statement_errors(stack)
    assert errors == [], "\n".join(errors[:10])


def postgres_pids(stack):
    pg_dir = Path(stack["MCP_STACK_DIR"]) / "pg" / "data"
    postmaster = (pg_dir / "postmaster.pid").read_text().split()[0]
    out = subprocess.run(["pgrep", "-P", postmaster], capture_output=True, text=True).stdout
    return [int(postmaster)] + [int(p) for p in out.split()]


def test_stopped_postgres_gives_503_within_the_bound_and_recovers(stack, mcp, pg, capsys):
    host1, host2 = stack["MCP_URLS"].split()[:2]
    sessions = [mcp(u) for u in (host1, host2, host1, host2)]
    for s in sessions:
        s.initialize()
    # A stream in progress across the stop: it must end complete with every event.
    streamer = mcp(host1)
    streamer.initialize()
    events = streamer.request_stream("tools/call", {"name": "slow", "arguments":
                                                    {"count": 30, "interval_ms": 200}})
    got = [next(events)]

    pids = postgres_pids(stack)
    results = [None] * len(sessions)

    def call(i, s):
        t0 = time.monotonic()
        try:
            r = s.post_raw(b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
                           b'"params":{"name":"echo","arguments":{"text":"x"}}}', timeout=60)
            results[i] = (r.status_code, r.headers.get("Retry-After"), r.text,
                          time.monotonic() - t0)
        except Exception as e:   # noqa: BLE001
            results[i] = (None, None, repr(e), time.monotonic() - t0)

    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=call, args=(i, s)) for i, s in enumerate(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    with capsys.disabled():
        print("\nSIGSTOP: 503 after " + ", ".join(f"{r[3]:.2f}" for r in results) + " s")
    for status, retry_after, text, took in results:
        assert status == 503, text
        assert retry_after and int(retry_after) >= 1
        assert '"code":-32003' in text
        # MCPDatabaseTimeout, plus the ping that may be under way and scheduling slack.
        assert took < DATABASE_TIMEOUT + 3, took

    # Everything recovers: new calls work on both hosts, and the stream in progress ends
    # complete with every event (its storing waits out an outage for half a lease, 15 s).
    t0 = time.monotonic()
    for s in sessions:
        wait_for(lambda: s.call("tools/call", {"name": "echo", "arguments": {"text": "y"}}),
                 timeout=30, what="a call after SIGCONT")
    with capsys.disabled():
        print(f"SIGCONT: calls work again after {time.monotonic() - t0:.2f} s")
    got += list(events)
    assert "result" in got[-1].json, got[-1].data
    seqs = [int(e.id.split("-")[1]) for e in got]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs   # nothing lost
    assert len([e for e in got if e.data and "method" in e.json]) == 30
    stream_id = int(got[0].id.split("-")[0])
    with pg.cursor() as cur:
        cur.execute("SELECT status FROM mcp.streams WHERE id = %s", (stream_id,))
        assert cur.fetchone()[0] == "complete"


def test_a_burst_above_dbdmax_costs_no_request(stack, capsys):
    """More threads of one child need a database connection at once than mod_dbd's pool holds
    (tests/stack: DBDMax 10, 25 threads per child): those that find the pool empty wait in
    ap_dbd_open for a connection given back. Connections given back meanwhile must reach mod_dbd
    (a child used to keep them queued behind the waiting thread: every request of that child
    then got 503 and the child never exited). 60 standalone GET streams opened at once on one
    instance: every one is opened."""
    import selectors
    import socket

    url = stack["MCP_URLS"].split()[0].rsplit("/", 1)[0] + "/mcp-burst"
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    sessions = []
    for _ in range(60):
        s = McpSession(url, timeout=60)
        s.initialize()
        sessions.append(s)
    sel = selectors.DefaultSelector()
    socks = []
    try:
        for s in sessions:
            c = socket.create_connection((host, int(port)), 10)
            c.sendall((f"GET /mcp-burst HTTP/1.1\r\nHost: {host}:{port}\r\n"
                       f"Accept: text/event-stream\r\nMcp-Session-Id: {s.session_id}\r\n"
                       f"MCP-Protocol-Version: {s.protocol_version}\r\n\r\n").encode())
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ, bytearray())
            socks.append(c)
        heads = {}

        def all_answered():
            for key, _ in sel.select(0.2):
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                if key.fileobj in heads:
                    continue
                key.data.extend(data)
                if b"\r\n\r\n" in key.data or not data:
                    heads[key.fileobj] = bytes(key.data.split(b"\r\n", 1)[0])
            return len(heads) == len(socks)

        wait_for(all_answered, timeout=90, what="an answer to every GET of the burst")
        statuses = sorted(set(heads.values()))
        with capsys.disabled():
            print(f"\nburst of {len(socks)} standalone GETs: {statuses}")
        assert statuses == [b"HTTP/1.1 200 OK"], statuses
    finally:
        for c in socks:
            c.close()
        # Ending the sessions ends their streams at once: they count against the address's
        # MCPMaxStreamsPerPrincipal everywhere, and the relays notice the closed sockets late.
        for s in sessions:
            s.delete()
            s.close()


def set_read_only(stack, on: bool):
    """Makes the whole server refuse writes (default_transaction_read_only, reloaded into every
    session, the gateway's pooled ones too), as a failover's demoted primary does (SQLSTATE
    25006), or lifts it; returns once a new session sees the setting."""
    admin = psycopg2.connect(stack["MCP_PG_ADMIN"])
    try:
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("SET default_transaction_read_only = off")
            if on:
                cur.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                cur.execute("ALTER SYSTEM RESET default_transaction_read_only")
            cur.execute("SELECT pg_reload_conf()")
    finally:
        admin.close()

    def seen():
        c = psycopg2.connect(stack["MCP_PG"])
        try:
            with c.cursor() as cur:
                cur.execute("SHOW default_transaction_read_only")
                return cur.fetchone()[0] == ("on" if on else "off")
        finally:
            c.close()
    wait_for(seen, timeout=10, what=f"default_transaction_read_only {on}")


def test_a_read_only_database_gives_503_and_recovers(stack, mcp, pg, capsys):
    """A server that refuses writes (25006, what a demoted primary answers after a failover) is
    an outage, not the request's fault: 503 with Retry-After within MCPDatabaseTimeout, never a
    500; the connection that got it is given up (with a multi-host DBDParams the next one finds
    the new primary), and calls work again once writes are taken, on the same sessions."""
    host1, host2 = stack["MCP_URLS"].split()[:2]
    sessions = [mcp(u) for u in (host1, host2)]
    for s in sessions:
        s.initialize()
        assert s.call("tools/call", {"name": "echo", "arguments": {"text": "before"}})
    sizes = log_sizes(stack)
    body = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"ro"}}}'
    results = []
    set_read_only(stack, True)
    try:
        for s in sessions:
            t0 = time.monotonic()
            r = s.post_raw(body, timeout=60)
            results.append((r.status_code, r.headers.get("Retry-After"), r.text,
                            time.monotonic() - t0))
    finally:
        set_read_only(stack, False)
    with capsys.disabled():
        print("\nread-only: " + ", ".join(f"{r[0]} after {r[3]:.2f} s" for r in results))
    for status, retry_after, text, took in results:
        assert status == 503, text
        assert retry_after and int(retry_after) >= 1
        assert '"code":-32003' in text
        assert took < DATABASE_TIMEOUT + 3, took
    # One line per refused request (its 503), not one per try.
    assert len([l for l in new_lines(sizes) if WARN_OR_WORSE.search(l)]) < 20, new_lines(sizes)
    for s in sessions:
        wait_for(lambda: s.call("tools/call", {"name": "echo", "arguments": {"text": "after"}}),
                 timeout=30, what="a call once writes are taken again")
    # Nothing of the refused calls was stored (their inbound rows were refused with them).
    with pg.cursor() as cur:
        cur.execute("SELECT count(*) FROM mcp.events WHERE message_text LIKE %s",
                    ('%"text":"ro"%',))
        assert cur.fetchone()[0] == 0
