#!/usr/bin/python3
"""bench/console.py — the operator's console (SetHandler mcp-console) over a big store: page
time and the PostgreSQL buffers each page reads (issue 26's bench point; numbers, no
assertions).

    bench/console.py [--events N] [--requests R] [--keep] [--load-only]

Starts its own stack (tests/stack up --httpd 1, with MCPSweepInterval 1h so that no sweep
statement runs while pages are measured), then fills its PostgreSQL directly with SQL
(INSERT ... SELECT generate_series, as mcp, foreign-key triggers off: session_replication_role
replica) with N rows in mcp.events (default 10,000,000), as mod_mcp would have stored them:
80,000 sessions (for 10 M; N / 125) started over the last 7 days, each its initialize exchange
(three rows of no stream) and 0-60 tools/call request streams (four rows each: the request at
seq 0, the priming row, a progress notification, the response), 20 tools of different latency
and error rates (some responses are JSON-RPC errors, some results have isError), most sessions
ended, those active in the last 20 minutes live. Stream ids carry their start time and their
rows lie in the day partition of that start (mcp.partition_create); event ids follow time. One
session, the one measured, is live and has exactly 10,000 events (2,499 calls over 30 hours,
one inbound notification). Then VACUUM (ANALYZE), and the row counts and database size.

Pages: the overview (HTML and JSON), the 10,000-event session's transcript (its first page,
and the page after its 5,000th event), the sessions list (no filter, and q= a principal that
has ~150 sessions), the page of one stream, the tools page for 1h and 24h.

  * page time: R requests (default 20) of each page after 2 warm-ups, one keep-alive
    requests.Session, body read; median, p95 and max in ms, and the body's size. Goal: a
    median <= 200 ms. auto_explain is off during these.
  * buffers: then auto_explain is turned on (session_preload_libraries, log_min_duration 0,
    log_analyze, log_buffers, JSON plans; httpd restarted gracefully so that its pooled
    connections are new ones that load it), each page is loaded 12 times (mod_mcp prepares its
    statements: PostgreSQL plans the first 5 executions on a connection for their parameters,
    then may keep a generic plan, as in the timing pass) and once more, and the plans
    PostgreSQL logged for that last request (MCP_PG_LOG) are read: shared hit and shared read
    blocks (8 KiB) of each statement's top plan node (which counts its children, subplans and
    the functions it calls), summed over the statements of the request. Shared read is what
    came from outside PostgreSQL's shared_buffers (the stack's default, 128 MB): the OS cache
    or the disk; this pass runs after the timing pass, so it is a warm figure. Planning is not
    counted. A SQL function that PostgreSQL runs while a statement's executor starts (e.g.
    mcp.stream_id_at in an index condition) is logged as a plan of its own: its blocks are
    counted, but it is not counted as a statement. PG ms: the statements' execution time under
    EXPLAIN ANALYZE (slower than without), JIT ms: the part of it spent compiling them (JIT
    runs when a plan's estimated cost passes jit_above_cost, 100,000 by default).
    The plans of every page are written to WORK/plans.json (WORK: the run's new directory,
    /tmp/mcp-console-*, printed), and the slowest statement of each page below the table.

--keep leaves the stack running (its directory is printed; stop it with tests/stack down
--dir); otherwise its database is removed after the stack stops (~14 GB with its WAL).
Takes about 6 minutes for 10 M events on 2 cores, 3 of them the load.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg2
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from conftest import load_stack_env  # noqa: E402

STACK = REPO / "tests" / "stack"
GOAL_MS = 200
BUFFER_WARMUPS = 12
DAYS = 7
BENCH_CALLS = 2499          # + 3 initialize rows + 1 notification = 10,000 events
BENCH_EVENTS = 3 + 1 + 4 * BENCH_CALLS
BENCH_PRINCIPAL = "ops042"
Q_PRINCIPAL = "user042"
CONF = """# bench/console.py: no sweep round while pages are measured (the first one runs at start)
MCPSweepInterval 3600
"""
# (name, base latency in ms, JSON-RPC errors per mille, isError results per mille)
TOOLS = [("search_docs", 40, 2, 10), ("read_file", 4, 1, 30), ("write_file", 8, 2, 25),
         ("list_dir", 3, 0, 5), ("run_query", 120, 5, 60), ("fetch_url", 300, 20, 80),
         ("send_email", 200, 3, 15), ("create_issue", 150, 2, 20), ("get_weather", 90, 10, 5),
         ("translate", 250, 1, 10), ("summarize", 1200, 4, 12), ("calc", 2, 0, 40),
         ("git_log", 30, 1, 5), ("git_diff", 45, 1, 8), ("deploy", 4000, 15, 120),
         ("lint", 600, 0, 150), ("format_code", 80, 0, 20), ("image_resize", 500, 8, 30),
         ("geocode", 70, 6, 10), ("echo", 1, 0, 0)]
CLIENTS = ["claude-desktop", "cursor", "vscode-copilot", "mcp-inspector", "zed", "goose"]


def log(*a):
    print("console:", *a, file=sys.stderr, flush=True)


def tool_table() -> str:
    """The tools as a VALUES list: (t, name, base ms, error permille, isError permille)."""
    return ", ".join(f"({i}, '{n}', {ms}, {e}, {te})" for i, (n, ms, e, te) in enumerate(TOOLS))


def stage(cur, ordinary: int, calls: int, backend: str, t_end: str) -> None:
    """The sessions and calls to load, in two unlogged tables of public (dropped at the end)."""
    cur.execute("DROP TABLE IF EXISTS public.cb_sessions, public.cb_calls, public.cb_tools")
    cur.execute(f"CREATE UNLOGGED TABLE public.cb_tools (t int PRIMARY KEY, name text, base_ms int,"
                f" err int, tool_err int); INSERT INTO public.cb_tools VALUES {tool_table()}")
    # Session i (1..ordinary) starts (i - 1) * span / ordinary after t0 and gets a share of the
    # calls proportional to a weight 1..60 (its calls: first_call .. first_call + n - 1); the
    # measured session is number 0: 2,499 calls from 30 hours before t_end to 10 minutes before.
    # gap: the time between its calls (5-120 s; less for a session that began lately, so that
    # everything happened before t_end).
    cur.execute("""
        CREATE UNLOGGED TABLE public.cb_sessions AS
        WITH p AS (SELECT %(t_end)s::timestamptz AS t_end),
        w AS (SELECT i, 1 + (hashint4(i) & 2147483647) %% 60 AS w
                FROM generate_series(1, %(ordinary)s) i),
        c AS (SELECT i, w, sum(w) OVER (ORDER BY i) AS cw, sum(w) OVER () AS tw FROM w),
        s AS (
            SELECT i AS no,
                   (floor(%(calls)s::numeric * cw / tw)
                    - floor(%(calls)s::numeric * (cw - w) / tw))::int AS n,
                   floor(%(calls)s::numeric * (cw - w) / tw)::bigint AS first_call,
                   p.t_end - make_interval(days => %(days)s)
                       + (i - 1) * ((make_interval(days => %(days)s) - interval '2 minutes')
                                    / %(ordinary)s)
                       AS start_at,
                   make_interval(secs => 5 + (hashint4(i * 7 + 1) & 2147483647) %% 116) AS gap0
              FROM c, p
            UNION ALL
            SELECT 0, %(bench_calls)s, %(calls)s::bigint, p.t_end - interval '30 hours',
                   (interval '30 hours' - interval '10 minutes') / (%(bench_calls)s + 1)
              FROM p)
        SELECT s.no, s.n, s.first_call, s.start_at,
               least(s.gap0, (p.t_end - interval '10 seconds' - s.start_at) / (s.n + 1)) AS gap,
               left(translate(encode(sha256(convert_to('console-bench-' || s.no, 'UTF8')),
                                     'base64'), '+/=', '-_'), 32) AS id,
               CASE WHEN s.no = 0 THEN %(bench_principal)s
                    WHEN (hashint4(s.no * 3 + 2) & 2147483647) %% 10 = 0 THEN NULL
                    ELSE 'user' || lpad(((hashint4(s.no * 5 + 3) & 2147483647) %% 500)::text,
                                        3, '0') END AS principal,
               (%(clients)s::text[])[1 + (hashint4(s.no * 11 + 4) & 2147483647) %% %(nclients)s]
                   AS client,
               p.t_end
          FROM s, p
    """, {"t_end": t_end, "ordinary": ordinary, "calls": calls - BENCH_CALLS, "days": DAYS,
          "bench_calls": BENCH_CALLS, "bench_principal": BENCH_PRINCIPAL,
          "clients": CLIENTS, "nclients": len(CLIENTS)})
    cur.execute("ALTER TABLE public.cb_sessions ADD PRIMARY KEY (no)")
    # Every call: its tool (skewed to the first ones), outcome (0 ok, 1 isError, 2 JSON-RPC
    # error) and duration; then its stream id: the start second * 1,000,000 + a counter.
    cur.execute("""
        CREATE UNLOGGED TABLE public.cb_calls AS
        WITH c AS (
            SELECT s.no, s.id AS session_id, s.principal, s.first_call + k AS c, k,
                   s.start_at + (k + 1) * s.gap
                       + make_interval(secs => ((hashint8(s.first_call + k) & 2147483647) %% 1000)
                                               / 1000.0 * least(1, extract(epoch FROM s.gap) / 4))
                       AS start_at
              FROM public.cb_sessions s, generate_series(0, s.n - 1) k),
        t AS (
            SELECT c.*, floor(20 * power(((hashint8(c.c * 3 + 1) & 2147483647) %% 1000000)
                                         / 1000000.0, 2))::int AS t,
                   (hashint8(c.c * 5 + 2) & 2147483647) %% 1000 AS r,
                   ((hashint8(c.c * 7 + 3) & 2147483647) %% 1000) / 500.0 AS jitter
              FROM c)
        SELECT t.no, t.session_id, t.principal, t.c, t.k, t.start_at, t.t, tl.name AS tool,
               CASE WHEN t.r < tl.err THEN 2 WHEN t.r < tl.err + tl.tool_err THEN 1 ELSE 0 END
                   AS outcome,
               make_interval(secs => tl.base_ms * (0.3 + t.jitter) / 1000.0) AS dur,
               floor(extract(epoch FROM t.start_at))::bigint * 1000000
                 + row_number() OVER (PARTITION BY floor(extract(epoch FROM t.start_at))
                                      ORDER BY t.c) - 1 AS stream_id
          FROM t JOIN public.cb_tools tl USING (t)
    """, {})
    cur.execute("CREATE INDEX ON public.cb_calls (stream_id)")
    cur.execute("ANALYZE public.cb_sessions, public.cb_calls")


SESSIONS_SQL = """
    INSERT INTO mcp.sessions (id, backend_url, backend_session_id, protocol_version, principal,
                              client_info, client_capabilities, server_info, created_at,
                              last_seen_at, terminated_at, terminated_by, idle_timeout_secs,
                              holder)
    SELECT s.id, %(backend)s, md5('backend-' || s.no), '2025-11-25', s.principal,
           jsonb_build_object('name', s.client, 'version', '1.' || s.no %% 7 || '.0'), '{}',
           '{"name": "mcp-test-backend", "version": "0.1.0"}', s.start_at, l.last,
           CASE WHEN l.live THEN NULL
                WHEN l.expired THEN l.last + interval '3600 s'
                ELSE l.last + interval '0.4 s' END,
           CASE WHEN l.live THEN NULL WHEN l.expired THEN 'expired' ELSE 'client' END,
           3600, coalesce('user:' || s.principal, 'addr:127.0.0.1')
      FROM public.cb_sessions s
      LEFT JOIN (SELECT no, max(start_at + dur) AS last FROM public.cb_calls GROUP BY no) c
             USING (no)
      CROSS JOIN LATERAL (SELECT coalesce(c.last, s.start_at) AS last) m
      CROSS JOIN LATERAL (
          SELECT m.last, s.no = 0 OR m.last >= s.t_end - interval '20 minutes' AS live,
                 s.no %% 7 = 3 AND m.last + interval '3600 s' < s.t_end AS expired) l
"""

STREAMS_SQL = """
    INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method, status,
                             owner, lease_until, created_at, completed_at, followed, holder)
    SELECT c.stream_id, c.session_id, 'request', (c.k + 2)::text, to_jsonb(c.k + 2),
           'tools/call', 'complete', 'vm:' || (20000 + c.no %% 13), c.start_at + interval '30 s',
           c.start_at, c.start_at + c.dur, false, coalesce('user:' || c.principal, 'addr:127.0.0.1')
      FROM public.cb_calls c
"""

# The rows of one day: the streams that started on it (four rows each) and the initialize
# exchanges of the sessions that began on it (three rows of no stream, in mcp.events_default),
# with ids base + their rank in time.
EVENTS_SQL = """
    INSERT INTO mcp.events (id, session_id, stream_id, seq, direction, kind, message_text,
                            message, principal, created_at)
    SELECT %(base)s + row_number() OVER (ORDER BY x.created_at, x.stream_id NULLS FIRST, x.seq),
           x.session_id, x.stream_id, x.seq, x.direction, x.kind, x.message_text,
           x.message_text::jsonb, x.principal, x.created_at
      FROM (
        SELECT c.session_id, c.stream_id, q.seq, q.direction, q.kind, q.message_text,
               c.principal, q.created_at
          FROM public.cb_calls c
          CROSS JOIN LATERAL (VALUES
            (0, 'in', 'message', c.start_at, format(
                '{"jsonrpc": "2.0", "id": %%s, "method": "tools/call", "params": {"name": "%%s", '
                '"arguments": {"query": "q-%%s", "limit": %%s}, "_meta": {"progressToken": "p%%s"}}}',
                c.k + 2, c.tool, c.c, 1 + c.c %% 50, c.k + 2)),
            (1, 'out', 'priming', c.start_at, NULL),
            (2, 'out', 'message', c.start_at + c.dur / 2, format(
                '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":'
                '"p%%s","progress":1,"total":2,"message":"step 1 of 2"}}', c.k + 2)),
            (3, 'out', 'message', c.start_at + c.dur, CASE c.outcome
                WHEN 2 THEN format('{"jsonrpc":"2.0","id":%%s,"error":{"code":-32603,'
                                   '"message":"Internal error: %%s failed upstream (%%s)"}}',
                                   c.k + 2, c.tool, c.c)
                ELSE format('{"jsonrpc":"2.0","id":%%s,"result":{"content":[{"type":"text",'
                            '"text":"%%s %%s: %%s%%s"}]%%s}}', c.k + 2, c.tool,
                            CASE c.outcome WHEN 1 THEN 'failed' ELSE 'done' END, c.c,
                            repeat(' lorem ipsum', (c.c %% 23)::int),
                            CASE c.outcome WHEN 1 THEN ',"isError":true' ELSE '' END) END)
          ) AS q(seq, direction, kind, created_at, message_text)
         WHERE c.stream_id >= %(lo)s AND c.stream_id < %(hi)s
        UNION ALL
        SELECT s.id, NULL::bigint, NULL::int, q.direction, 'message', q.message_text,
               s.principal, q.created_at
          FROM public.cb_sessions s
          CROSS JOIN LATERAL (VALUES
            ('in', s.start_at, format(
                '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
                '"2025-11-25", "capabilities": {}, "clientInfo": {"name": "%%s", "version": "1.%%s.0"}}}',
                s.client, s.no %% 7)),
            ('out', s.start_at + interval '3 ms',
             '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":'
             '{"tools":{"listChanged":true},"logging":{}},"serverInfo":{"name":"mcp-test-backend",'
             '"version":"0.1.0"}}}'),
            ('in', s.start_at + interval '5 ms', '{"jsonrpc": "2.0", "method": "notifications/initialized"}')
          ) AS q(direction, created_at, message_text)
         WHERE s.start_at >= %(day)s::date::timestamp AT TIME ZONE 'UTC'
           AND s.start_at < (%(day)s::date + 1)::timestamp AT TIME ZONE 'UTC'
        UNION ALL
        SELECT s.id, NULL, NULL, 'in', 'message',
               '{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}', s.principal,
               s.start_at + interval '15 hours 0.5 s'
          FROM public.cb_sessions s
         WHERE s.no = 0
           AND s.start_at + interval '15 hours 0.5 s' >= %(day)s::date::timestamp AT TIME ZONE 'UTC'
           AND s.start_at + interval '15 hours 0.5 s' < (%(day)s::date + 1)::timestamp AT TIME ZONE 'UTC'
      ) x
"""

# The rows of each day (its streams' and the rows of no stream whose session began on it, the
# measured session's notification too): the id ranges, so that days load in parallel.
DAY_COUNTS_SQL = """
    SELECT day, sum(n)::bigint FROM (
        SELECT (to_timestamp(stream_id / 1000000) AT TIME ZONE 'UTC')::date AS day, 4 * count(*) AS n
          FROM public.cb_calls GROUP BY 1
        UNION ALL
        SELECT (start_at AT TIME ZONE 'UTC')::date, 3 * count(*) FROM public.cb_sessions GROUP BY 1
        UNION ALL
        SELECT ((start_at + interval '15 hours 0.5 s') AT TIME ZONE 'UTC')::date, 1
          FROM public.cb_sessions WHERE no = 0) d
     GROUP BY day ORDER BY day
"""


def connect_loader(env):
    """A connection to database mcp as postgres acting as mcp (what it creates is mcp's), with
    the foreign-key triggers off (every row it inserts points at rows inserted before)."""
    conn = psycopg2.connect(env["MCP_PG_ADMIN"], dbname="mcp")
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET session_replication_role = replica")
    cur.execute("SET ROLE mcp")
    cur.execute("SET synchronous_commit = off")
    cur.execute("SET work_mem = '512MB'")
    cur.execute("SET maintenance_work_mem = '512MB'")
    return conn, cur


def load(env, events: int) -> dict:
    ordinary = max(4, round(events / 125 / 4) * 4)
    calls = (events - 3 * (ordinary + 1) - 1) // 4          # the measured session's included
    total = 3 * (ordinary + 1) + 1 + 4 * calls
    admin = psycopg2.connect(env["MCP_PG_ADMIN"])
    admin.autocommit = True
    acur = admin.cursor()
    # A bulk load: no checkpoint every 1 GB of WAL while it runs (restored after it).
    acur.execute("ALTER SYSTEM SET max_wal_size = '20GB'")
    acur.execute("ALTER SYSTEM SET checkpoint_timeout = '30min'")
    acur.execute("SELECT pg_reload_conf()")
    conn, cur = connect_loader(env)
    cur.execute("SELECT date_trunc('second', now() - interval '1 minute')")
    t_end = cur.fetchone()[0]
    t0 = time.monotonic()
    log(f"staging {ordinary + 1:,} sessions, {calls:,} calls ({total:,} events)")
    stage(cur, ordinary, calls, env["MCP_BACKEND_URL"], t_end.isoformat())
    cur.execute(DAY_COUNTS_SQL)
    days = cur.fetchall()
    t_stage = time.monotonic() - t0
    for day, _ in days:
        cur.execute("SELECT mcp.partition_create(%s)", (day,))
    log(f"staged in {t_stage:.1f} s; sessions and streams")
    cur.execute(SESSIONS_SQL, {"backend": env["MCP_BACKEND_URL"]})
    cur.execute(STREAMS_SQL, {})
    t_streams = time.monotonic() - t0
    log(f"sessions and streams at {t_streams:.1f} s; events of {len(days)} days, 2 at a time")
    todo: queue.Queue = queue.Queue()
    base = 0
    for day, n in days:
        todo.put((day, base))
        base += n
    errors = []

    def worker():
        c, k = connect_loader(env)
        try:
            while True:
                try:
                    day, b = todo.get_nowait()
                except queue.Empty:
                    return
                t = time.monotonic()
                k.execute("SELECT mcp.stream_id_at(%s::date::timestamp AT TIME ZONE 'UTC'), "
                          "mcp.stream_id_at((%s::date + 1)::timestamp AT TIME ZONE 'UTC')",
                          (day, day))
                lo, hi = k.fetchone()
                k.execute(EVENTS_SQL, {"base": b, "lo": lo, "hi": hi, "day": day})
                log(f"  {day}: {k.rowcount:,} events in {time.monotonic() - t:.1f} s")
        except Exception as e:  # noqa: BLE001 - reported after the join
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    cur.execute("SELECT setval('mcp.events_id_seq', %s)", (base,))
    t_events = time.monotonic() - t0
    cur.execute("DROP TABLE public.cb_sessions, public.cb_calls, public.cb_tools")
    conn.close()
    acur.execute("ALTER SYSTEM RESET max_wal_size")
    acur.execute("ALTER SYSTEM RESET checkpoint_timeout")
    acur.execute("SELECT pg_reload_conf()")
    log(f"loaded in {t_events:.1f} s; CHECKPOINT, VACUUM (ANALYZE)")
    t = time.monotonic()
    acur.execute("CHECKPOINT")
    vconn = psycopg2.connect(env["MCP_PG_ADMIN"], dbname="mcp")
    vconn.autocommit = True
    vconn.cursor().execute("VACUUM (ANALYZE)")
    vconn.close()
    t_vacuum = time.monotonic() - t
    admin.close()
    return {"stage_s": t_stage, "streams_s": t_streams - t_stage,
            "events_s": t_events - t_streams, "load_s": t_events, "vacuum_s": t_vacuum,
            "planned_events": total}


def facts(env) -> dict:
    conn = psycopg2.connect(env["MCP_PG"])
    conn.autocommit = True
    cur = conn.cursor()
    out = {}
    for k, q in [("events", "SELECT count(*) FROM mcp.events"),
                 ("streams", "SELECT count(*) FROM mcp.streams"),
                 ("sessions", "SELECT count(*) FROM mcp.sessions"),
                 ("live sessions", "SELECT count(*) FROM mcp.sessions WHERE terminated_at IS NULL"),
                 ("day partitions", "SELECT count(*) FROM mcp.event_partitions"),
                 ("database bytes", "SELECT pg_database_size(current_database())"),
                 ("events bytes", "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i "
                                  "JOIN pg_class c ON c.oid = i.inhrelid "
                                  "WHERE i.inhparent = 'mcp.events'::regclass"),
                 ("streams in the last hour",
                  "SELECT count(*) FROM mcp.streams WHERE created_at > now() - interval '1 hour'")]:
        cur.execute(q)
        out[k] = cur.fetchone()[0]
    # the measured session: number 0 (its principal is BENCH_PRINCIPAL's alone)
    cur.execute("SELECT id, left(md5(id), 16), left(md5(id), 8) FROM mcp.sessions "
                "WHERE principal = %s", (BENCH_PRINCIPAL,))
    sid, ref, tag = cur.fetchone()
    cur.execute("SELECT count(*) FROM mcp.events WHERE session_id = %s", (sid,))
    out["bench events"] = cur.fetchone()[0]
    cur.execute("SELECT id FROM mcp.events WHERE session_id = %s ORDER BY id OFFSET 4999 LIMIT 1",
                (sid,))
    out["middle"] = cur.fetchone()[0]
    cur.execute("SELECT id FROM mcp.streams WHERE session_id = %s ORDER BY id OFFSET 1250 LIMIT 1",
                (sid,))
    out["stream"] = cur.fetchone()[0]
    out["sid"], out["ref"], out["tag"] = sid, ref, tag
    t = time.monotonic()
    cur.execute("SELECT outcome, count(*) FROM mcp.tool_calls GROUP BY 1 ORDER BY 2 DESC")
    out["outcomes"] = cur.fetchall()
    out["outcomes_s"] = time.monotonic() - t
    conn.close()
    return out


def pages(url: str, f: dict) -> list[tuple[str, str]]:
    return [
        ("overview", f"{url}"),
        ("overview JSON", f"{url}?format=json"),
        ("transcript, first page", f"{url}?page=session&s={f['ref']}"),
        ("transcript, after event 5,000", f"{url}?page=session&s={f['ref']}&after={f['middle']}"),
        ("sessions", f"{url}?page=sessions"),
        (f"sessions q={Q_PRINCIPAL}", f"{url}?page=sessions&q={Q_PRINCIPAL}"),
        ("stream", f"{url}?page=stream&id={f['stream']}"),
        ("tools 1h", f"{url}?page=tools&window=1h"),
        ("tools 24h", f"{url}?page=tools&window=24h"),
    ]


def time_page(http: requests.Session, url: str, n: int) -> dict:
    for _ in range(2):
        r = http.get(url, timeout=120)
    ms = []
    for _ in range(n):
        t = time.perf_counter()
        r = http.get(url, timeout=120)
        _ = r.content
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    return {"status": r.status_code, "bytes": len(r.content), "median": statistics.median(ms),
            "p95": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], "max": ms[-1]}


ENTRY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \S+ \[(\d+)\] ", re.M)


def plans_in(text: str) -> list[dict]:
    """The auto_explain plans (JSON format) in a piece of the PostgreSQL log."""
    out = []
    starts = [m.start() for m in ENTRY.finditer(text)] + [len(text)]
    for a, b in zip(starts, starts[1:]):
        entry = text[a:b]
        m = re.match(r"[^\n]*?LOG:  duration: ([\d.]+) ms  plan:\n", entry)
        if not m:
            continue
        plan = json.loads(entry[m.end():])
        top = plan["Plan"]
        out.append({"ms": float(m.group(1)), "query": plan.get("Query Text", ""),
                    "hit": top.get("Shared Hit Blocks", 0),
                    "read": top.get("Shared Read Blocks", 0),
                    "plan": plan})
    return out


def auto_explain_on(env, d: Path) -> None:
    admin = psycopg2.connect(env["MCP_PG_ADMIN"])
    admin.autocommit = True
    cur = admin.cursor()
    try:
        cur.execute("LOAD 'auto_explain'")
    except psycopg2.Error as e:
        print("\n*** auto_explain cannot be loaded in the stack's PostgreSQL: "
              f"{str(e).strip()}\n*** no buffer figures: giving up\n", file=sys.stderr)
        sys.exit(3)
    for k, v in [("auto_explain.log_min_duration", "0"), ("auto_explain.log_analyze", "on"),
                 ("auto_explain.log_buffers", "on"), ("auto_explain.log_format", "json"),
                 ("session_preload_libraries", "auto_explain")]:
        cur.execute(f"ALTER SYSTEM SET {k} = '{v}'")
    cur.execute("SELECT pg_reload_conf(), now()")
    reloaded = cur.fetchone()[1]
    time.sleep(0.5)
    # httpd's pooled connections predate the setting: a graceful restart replaces its children
    # (and their pools); wait until every connection of user mcp is a new one.
    subprocess.run([str(STACK), "graceful", "--dir", str(d)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while True:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = 'mcp' "
                    "AND backend_start < %s", (reloaded,))
        old = cur.fetchone()[0]
        if old == 0:
            break
        if time.monotonic() > deadline:
            log(f"{old} connection(s) of mcp older than the setting are still open: ending them")
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE usename = 'mcp' AND backend_start < %s", (reloaded,))
            break
        time.sleep(0.5)
    c2 = psycopg2.connect(env["MCP_PG"])
    k2 = c2.cursor()
    k2.execute("SHOW auto_explain.log_analyze")
    ok = k2.fetchone()[0] == "on"
    c2.close()
    admin.close()
    if not ok:
        print("\n*** auto_explain is not in effect for new connections of mcp: giving up\n",
              file=sys.stderr)
        sys.exit(3)


def sql_function_bodies(env) -> set[str]:
    """The bodies of mcp's SQL functions, whitespace folded: PostgreSQL logs a call of one made
    while a statement's executor starts (mcp.stream_id_at in an index condition) as a plan of its
    own; it is part of the statement, not one more."""
    conn = psycopg2.connect(env["MCP_PG"])
    cur = conn.cursor()
    cur.execute("SELECT prosrc FROM pg_proc WHERE pronamespace = 'mcp'::regnamespace "
                "AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'sql')")
    bodies = {" ".join(r[0].split()) for r in cur.fetchall()}
    conn.close()
    return bodies


def buffers(http: requests.Session, url: str, pglog: Path, bodies: set[str]) -> dict:
    # Warm-ups on the same keep-alive connection (the same httpd child), as many as PostgreSQL
    # needs to settle each pooled connection's plan for the prepared statement (5 custom plans,
    # then maybe the generic one), as it is in the timing pass; and what the module does once on
    # a new pooled connection is not counted as the page's.
    for _ in range(BUFFER_WARMUPS):
        http.get(url, timeout=120)
    time.sleep(0.3)
    size = pglog.stat().st_size
    r = http.get(url, timeout=120)
    time.sleep(0.3)
    with open(pglog, "rb") as f:
        f.seek(size)
        plans = plans_in(f.read().decode(errors="replace"))
    for p in plans:
        p["nested"] = " ".join(p["query"].split()) in bodies
        p["jit_ms"] = p["plan"].get("JIT", {}).get("Timing", {}).get("Total", 0.0)
    return {"status": r.status_code, "plans": plans, "hit": sum(p["hit"] for p in plans),
            "read": sum(p["read"] for p in plans),
            "statements": sum(1 for p in plans if not p["nested"]),
            "ms": sum(p["ms"] for p in plans if not p["nested"]),
            "jit_ms": sum(p["jit_ms"] for p in plans)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="leave the stack running")
    ap.add_argument("--load-only", action="store_true", help="load and count, measure nothing")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mcp-console-", dir="/tmp"))
    work.chmod(0o755)
    conf = work / "console.conf"
    conf.write_text(CONF)
    conf.chmod(0o644)
    d = work / "stack"
    t_all = time.monotonic()
    log(f"stack in {d}")
    with open(work / "stack-up.log", "wb") as out:
        subprocess.run([str(STACK), "up", "--dir", str(d), "--httpd", "1", "--conf", str(conf)],
                       check=True, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        env = load_stack_env(d / "stack.env")
        url = env["MCP_CONSOLE_URL"]
        so = Path(env["MCP_MODULE"])
        head = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %cI"],
                              capture_output=True, text=True).stdout.strip()
        print(f"{so}: built {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(so.stat().st_mtime))}"
              f"; repository at {head}")
        ld = load(env, args.events)
        f = facts(env)
        print(f"Load: {f['events']:,} events ({ld['planned_events']:,} planned), "
              f"{f['streams']:,} streams, {f['sessions']:,} sessions ({f['live sessions']:,} live), "
              f"{f['day partitions']} day partitions, in {ld['load_s']:.0f} s (staging "
              f"{ld['stage_s']:.0f} s, sessions + streams {ld['streams_s']:.0f} s, events "
              f"{ld['events_s']:.0f} s), then CHECKPOINT + VACUUM (ANALYZE) {ld['vacuum_s']:.0f} s")
        print(f"Database size {f['database bytes'] / 2**30:.2f} GiB (mcp.events "
              f"{f['events bytes'] / 2**30:.2f} GiB); streams in the last hour "
              f"{f['streams in the last hour']:,}")
        print(f"Measured session: {f['bench events']:,} events, ref {f['ref']} (tag {f['tag']}); "
              f"the page after event {f['middle']}; stream {f['stream']}")
        print("mcp.tool_calls by outcome (" + f"{f['outcomes_s']:.1f} s): "
              + ", ".join(f"{o} {n:,}" for o, n in f["outcomes"]))
        print(flush=True)
        if args.load_only:
            return
        plist = pages(url, f)
        times = {}
        load_before = os.getloadavg()
        http = requests.Session()
        for name, u in plist:
            times[name] = time_page(http, u, args.requests)
            log(f"{name}: {times[name]}")
        http.close()
        load_after = os.getloadavg()
        auto_explain_on(env, d)
        bodies = sql_function_bodies(env)
        bufs = {}
        http = requests.Session()
        for name, u in plist:
            bufs[name] = buffers(http, u, Path(env["MCP_PG_LOG"]), bodies)
            log(f"{name}: {bufs[name]['statements']} statements, hit {bufs[name]['hit']}, "
                f"read {bufs[name]['read']}")
        http.close()
        (work / "plans.json").write_text(json.dumps(
            {k: v["plans"] for k, v in bufs.items()}, indent=1))
        print(f"{args.requests} requests per page after 2 warm-ups (keep-alive; load average "
              f"{load_before[0]:.2f} before, {load_after[0]:.2f} after); buffers: one request after "
              f"{BUFFER_WARMUPS} with auto_explain on (8 KiB blocks; PG ms: its statements' "
              f"execution under EXPLAIN ANALYZE, of which JIT ms compiling); goal: median <= "
              f"{GOAL_MS} ms")
        print()
        print("| page | median ms | goal | p95 ms | max ms | bytes | shared hit | shared read "
              "| statements | PG ms | JIT ms |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, _ in plist:
            t, b = times[name], bufs[name]
            goal = "met" if t["median"] <= GOAL_MS else "**missed**"
            status = "" if t["status"] == 200 else f" (HTTP {t['status']})"
            print(f"| {name}{status} | {t['median']:.1f} | {goal} | {t['p95']:.1f} | "
                  f"{t['max']:.1f} | {t['bytes']:,} | {b['hit']:,} | {b['read']:,} | "
                  f"{b['statements']} | {b['ms']:.1f} | {b['jit_ms']:.1f} |")
        print()
        print("The slowest statement of each page (auto_explain's duration, with ANALYZE):")
        for name, _ in plist:
            ps = bufs[name]["plans"]
            if not ps:
                continue
            p = max(ps, key=lambda p: p["ms"])
            q = " ".join(p["query"].split())
            jit = p["plan"].get("JIT")
            jit = (f" (JIT {p['jit_ms']:.0f} ms for {jit['Functions']} functions)" if jit else "")
            print(f"  {name}: {p['ms']:.1f} ms{jit}, hit {p['hit']:,} read {p['read']:,}: "
                  f"{q[:120]}")
        print(f"\nPlans: {work / 'plans.json'}; everything took "
              f"{(time.monotonic() - t_all) / 60:.1f} min")
    finally:
        if args.keep:
            log(f"stack left running: tests/stack down --dir {d}")
        else:
            subprocess.run([str(STACK), "down", "--dir", str(d)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            # the database (~14 GB with its WAL); the logs and plans.json stay
            shutil.rmtree(d / "pg" / "data", ignore_errors=True)


if __name__ == "__main__":
    main()
