"""A call's statements find their streams by key, however many streams are open and however old
PostgreSQL's statistics of mcp.streams are. A table of a million streams that gets 10,000 open
ones (connected clients in the morning) has changed by 1 %: autovacuum does not analyze it again,
and its statistics still say that almost no stream is open. A statement that named the open
streams beside a key ("id = ANY(...) AND status = 'open'") was then planned as a read of a whole
partial index of the open streams (priced at a few rows), keeping its own: every call read every
open stream. Here a stack of its own gets OPEN open streams after its statistics were taken with
none open (autovacuum off for the table), and auto_explain writes the plan of each of the
gateway's statements with its row counts to PostgreSQL's log: no plan of a call's statements may
read the open streams to keep a few, whether its answer is stored alone or merged with others'
(the group).

The same for the session rows a call names by key (its opening's check and touch of its
session): mcp.sessions' partial indexes (WHERE terminated_at IS NULL) hold the live sessions, and
statistics taken when most sessions had ended priced reading one of them whole below the look-up
by key. The stack's sessions table holds ENDED ended sessions when it is analyzed, then gets OPEN
live ones."""

import json
import re
import subprocess
import threading

import psycopg2
import pytest

from conftest import STACK, database, httpd_pids, own_stack, run_dir
from mcp_client import McpSession
from waiting import wait_for

OPEN = 2000
ENDED = 2000
THREADS = 12
CALLS = 8


@pytest.fixture(scope="module")
def stale():
    d = run_dir("mcp-stale-statistics.")
    with own_stack(d) as env:
        # A few calls first: statistics of a table that has rows, none of them open (an empty
        # one is planned with guesses of its own).
        first = McpSession(env["MCP_URLS"].split()[0], timeout=60)
        first.initialize()
        for n in range(CALLS):
            first.request("tools/call", {"name": "echo", "arguments": {"text": f"before {n}"}})
        admin = env["MCP_PG_ADMIN"].replace("dbname=postgres", "dbname=mcp")
        conn = psycopg2.connect(admin)
        conn.autocommit = True
        with conn.cursor() as cur:
            # Statistics from a time with no stream open and almost every session ended, kept:
            # autovacuum would analyze these small tables again after the inserts below (big
            # ones it would not).
            cur.execute("""INSERT INTO mcp.sessions (id, backend_url, protocol_version, holder,
                                                     terminated_at, terminated_by)
                           SELECT 'stale-statistics-ended-' || g, 'http://127.0.0.1:1/mcp',
                                  '2025-11-25', 'addr:192.0.2.1', now(), 'client'
                             FROM generate_series(1, %s) g""", (ENDED,))
            for table in ("mcp.streams", "mcp.sessions"):
                cur.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
                cur.execute(f"ANALYZE {table}")
            # The open streams of clients of one other address, 192.0.2.1 (not this test's,
            # whose sessions the per-principal limit counts).
            cur.execute("""INSERT INTO mcp.sessions (id, backend_url, protocol_version, holder)
                           SELECT 'stale-statistics-session-' || g, 'http://127.0.0.1:1/mcp',
                                  '2025-11-25', 'addr:192.0.2.1'
                             FROM generate_series(1, %s) g""", (OPEN,))
            cur.execute("""INSERT INTO mcp.streams (id, session_id, kind, holder, lease_until)
                           SELECT mcp.stream_id_new(), 'stale-statistics-session-' || g,
                                  'standalone', 'addr:192.0.2.1', now() + interval '1 hour'
                             FROM generate_series(1, %s) g""", (OPEN,))
            # Every statement's plan, with its row counts, in PostgreSQL's log; loaded by the
            # connections the children open after a graceful restart.
            cur.execute("LOAD 'auto_explain'")
            for name, value in (("session_preload_libraries", "auto_explain"),
                                ("auto_explain.log_min_duration", "0"),
                                ("auto_explain.log_analyze", "on"),
                                ("auto_explain.log_timing", "off"),
                                ("auto_explain.log_format", "json")):
                cur.execute(f"ALTER SYSTEM SET {name} = %s", (value,))
            cur.execute("SELECT pg_reload_conf()")
        conn.close()
        old = set(httpd_pids(env)[1:])
        subprocess.run([str(STACK), "graceful", "--dir", env["MCP_STACK_DIR"]], check=True,
                       timeout=60, capture_output=True)
        wait_for(lambda: not old & set(httpd_pids(env)[1:]), timeout=30,
                 what="the children that connected before auto_explain to exit")
        yield env


def plans(log_text):
    """(query text, plan) of each auto_explain entry in a PostgreSQL log."""
    out, decoder = [], json.JSONDecoder()
    for m in re.finditer(r"duration: [0-9.]+ ms\s+plan:\s*", log_text):
        try:
            entry, _ = decoder.raw_decode(log_text, m.end())
        except ValueError:
            continue
        out.append((entry.get("Query Text", ""), entry.get("Plan", {})))
    return out


def nodes(plan):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def read_widely(statements, relation):
    """The plan nodes of statements [(query, plan)] that read over 100 rows of relation (kept
    or filtered out): (query's start, node type, index, rows read)."""
    out = []
    for q, p in statements:
        for n in nodes(p):
            read = (n.get("Actual Rows", 0) * n.get("Actual Loops", 1)
                    + n.get("Rows Removed by Filter", 0))
            if n.get("Relation Name") == relation and read > 100:
                out.append((re.sub(r"\s+", " ", q)[:160], n["Node Type"], n.get("Index Name"),
                            read))
    return out


def test_a_calls_statements_read_their_own_rows_not_every_open_stream_or_live_session(stale):
    url = stale["MCP_URLS"].split()[0]
    log = stale["MCP_PG_LOG"]
    with open(log, "rb") as f:
        f.seek(0, 2)
        start = f.tell()
    # One client's calls (each answer stored alone), then THREADS clients at once (their answers
    # stored together by the child's group, in the merged statement).
    alone = McpSession(url, timeout=60)
    alone.initialize()
    for n in range(CALLS):
        r = alone.request("tools/call", {"name": "echo", "arguments": {"text": f"alone {n}"}})
        assert r["result"]["content"][0]["text"].endswith(f"alone {n}"), r
    sessions = [McpSession(url, timeout=60) for _ in range(THREADS)]
    for s in sessions:
        s.initialize()
    failures, go = [], threading.Barrier(THREADS)

    def run(i):
        go.wait()
        for n in range(CALLS):
            try:
                r = sessions[i].request("tools/call",
                                        {"name": "echo", "arguments": {"text": f"{i}.{n}"}})
                assert r["result"]["content"][0]["text"].endswith(f"{i}.{n}"), r
            except Exception as e:   # noqa: BLE001 - reported below
                failures.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not failures, failures[:3]
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    # A call's statements: its opening, and its finish (alone or merged). Not the sweep's, which
    # reads the open streams to find the expired ones among them (every MCPSweepInterval).
    seen = [(q, p) for q, p in plans(text) if "lease_until < now()" not in q
            and ("INSERT INTO mcp.streams" in q
                 or ("completed_at = now()" in q and "INSERT INTO mcp.events" in q))]
    finishes = [q for q, _ in seen if "completed_at = now()" in q]
    openings = [(q, p) for q, p in seen if "INSERT INTO mcp.streams" in q]
    assert any("unnest(" not in q for q, _ in openings), "no single opening was planned"
    assert any("unnest(" in q for q, _ in openings), "no merged opening was planned"
    assert any("unnest(" not in q for q in finishes), "no single finish was planned"
    assert any("unnest(" in q for q in finishes), "no merged finish was planned (no group formed)"
    wide = read_widely(seen, "streams")
    assert not wide, f"{len(wide)} plans read the open streams to keep a few: {wide[:3]}"
    # The session rows the openings name by key (their check, touch or share of the session).
    wide = read_widely(openings, "sessions")
    assert not wide, f"{len(wide)} plans read the live sessions to keep a few: {wide[:3]}"
    with database(stale) as db, db.cursor() as cur:
        cur.execute("SELECT count(*) FROM mcp.streams WHERE status = 'open' AND kind = 'standalone'")
        assert cur.fetchone()[0] == OPEN   # the streams it looked past are left as they were
        cur.execute("SELECT count(*) FROM mcp.sessions"
                    " WHERE id LIKE 'stale-statistics-session-%' AND terminated_at IS NULL")
        assert cur.fetchone()[0] == OPEN   # and the sessions
