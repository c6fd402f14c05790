#!/usr/bin/env python3
"""bench/store_scale.py — the store at scale: replay and the mcp.tool_calls view with N stored
events (default 10,000,000), and calls/s while the retention job drops a day partition.

    bench/store_scale.py --work DIR [--events N] [--days D] [--seconds S] [--keep-stack]

Starts its own stack (tests/stack up --dir DIR/scale), loads N events with COPY (4 per
tools/call stream: request, priming, a progress notification, the response; 100 streams per
session) spread over the D days before today (one partition each), then measures:

  * replay: GET with Last-Event-ID through the gateway for stored streams (latency), and the
    store's replay statement under EXPLAIN (ANALYZE, BUFFERS): buffers touched do not depend
    on the machine's load;
  * mcp.tool_calls: one stream's row, the last hour's rows, a whole day's count by tool
    (EXPLAIN ANALYZE BUFFERS, time and buffers);
  * calls/s of tools/call through the gateway (threads, each its own session) before, while
    and after CALL mcp.maintain drops the oldest day partition, and how long the drop took.

Prints one JSON document (and writes DIR/store_scale.json). Stops its stack at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg2

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))
from mcp_client import McpSession  # noqa: E402

EVENTS_PER_STREAM = 4
STREAMS_PER_SESSION = 100


def log(*a):
    print("store_scale:", *a, file=sys.stderr, flush=True)


def load_env(path: Path) -> dict:
    import shlex
    env = {}
    for line in path.read_text().splitlines():
        k, sep, v = line.partition("=")
        if sep and not k.startswith("#"):
            w = shlex.split(v)
            env[k.strip()] = w[0] if w else ""
    return env


class Rows(io.RawIOBase):
    """A file-like object that yields COPY text made by a generator, chunk by chunk."""

    def __init__(self, gen):
        self.gen, self.buf = gen, b""

    def readable(self):
        return True

    def readinto(self, b):
        while len(self.buf) < len(b):
            try:
                self.buf += next(self.gen)
            except StopIteration:
                break
        n = min(len(b), len(self.buf))
        b[:n] = self.buf[:n]
        self.buf = self.buf[n:]
        return n


def load(admin: str, backend: str, events: int, days: int) -> dict:
    streams = max(1, events // EVENTS_PER_STREAM)
    sessions = max(1, streams // STREAMS_PER_SESSION)
    conn = psycopg2.connect(admin.replace("dbname=postgres", "dbname=mcp"))
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC'))::bigint")
    today = cur.fetchone()[0]
    for d in range(days, 0, -1):
        cur.execute("SELECT mcp.partition_create(((now() AT TIME ZONE 'UTC')::date - %s))", (d,))
    # Bulk load as the owner of the tables: no per-row triggers (FK checks, the wake-up trigger).
    cur.execute("SET session_replication_role = replica")
    t0 = time.monotonic()
    sids = [secrets.token_urlsafe(24) for _ in range(sessions)]

    def session_rows():
        for i, sid in enumerate(sids):
            day = days - (i * days) // sessions
            at = today - day * 86400 + 3600
            yield (f"{sid}\t{backend}\t2025-11-25\t\\N\t"
                   f"{time.strftime('%Y-%m-%d %H:%M:%S+00', time.gmtime(at))}\t"
                   f"{time.strftime('%Y-%m-%d %H:%M:%S+00', time.gmtime(at + 7200))}\t"
                   f"{time.strftime('%Y-%m-%d %H:%M:%S+00', time.gmtime(at + 7200))}\tclient\n").encode()
    cur.copy_expert("COPY mcp.sessions (id, backend_url, protocol_version, principal, created_at, "
                    "last_seen_at, terminated_at, terminated_by) FROM STDIN", Rows(session_rows()))

    def stream_ids():
        # Stream k belongs to session k // 100 and to that session's day.
        for k in range(streams):
            i = k // STREAMS_PER_SESSION
            day = days - (i * days) // sessions
            sec = today - day * 86400 + 3600 + (k % 80000) // 2
            yield k, i, sec * 1000000 + k % 1000000, sec

    def ts(sec):
        return time.strftime('%Y-%m-%d %H:%M:%S+00', time.gmtime(sec))

    def stream_rows():
        for k, i, sid_, sec in stream_ids():
            yield (f"{sid_}\t{sids[i]}\trequest\t{k}\t{k}\ttools/call\tcomplete\t{ts(sec)}\t"
                   f"{ts(sec + 1)}\n").encode()
    cur.copy_expert("COPY mcp.streams (id, session_id, kind, request_id_text, request_id, method, "
                    "status, created_at, completed_at) FROM STDIN", Rows(stream_rows()))
    t_streams = time.monotonic() - t0

    tools = ["echo", "add", "search", "deploy"]

    def event_rows():
        for k, i, st, sec in stream_ids():
            tool = tools[k % len(tools)]
            req = ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s",'
                   '"arguments":{"text":"bench %d"}}}' % (k, tool, k))
            prog = ('{"jsonrpc":"2.0","method":"notifications/progress","params":'
                    '{"progressToken":%d,"progress":1,"total":2}}' % k)
            resp = ('{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":'
                    '"result of call %d"}]}}' % (k, k))
            s, a, b = sids[i], ts(sec), ts(sec + 1)
            yield (f"{s}\t{st}\t0\tin\tmessage\t{req}\t{req}\t{a}\n"
                   f"{s}\t{st}\t1\tout\tpriming\t\\N\t\\N\t{a}\n"
                   f"{s}\t{st}\t2\tout\tmessage\t{prog}\t{prog}\t{b}\n"
                   f"{s}\t{st}\t3\tout\tmessage\t{resp}\t{resp}\t{b}\n").encode()
    cur.copy_expert("COPY mcp.events (session_id, stream_id, seq, direction, kind, message_text, "
                    "message, created_at) FROM STDIN", Rows(event_rows()))
    t_load = time.monotonic() - t0
    cur.execute("SET session_replication_role = origin")
    cur.execute("ANALYZE mcp.sessions")
    cur.execute("ANALYZE mcp.streams")
    cur.execute("ANALYZE mcp.events")
    cur.execute("SELECT count(*) FROM mcp.events")
    n = cur.fetchone()[0]
    cur.execute("SELECT pg_size_pretty(sum(bytes)) FROM mcp.event_partitions")
    size = cur.fetchone()[0]
    conn.close()
    return {"events": n, "streams": streams, "sessions": sessions, "days": days,
            "load_s": round(t_load, 1), "load_streams_s": round(t_streams, 1),
            "events_per_s": round(n / t_load), "partitions_size": size}


def explain(cur, sql, args=()):
    cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, args)
    plan = cur.fetchone()[0][0]
    top = plan["Plan"]
    return {"ms": round(plan["Execution Time"], 3),
            "shared_hit": top.get("Shared Hit Blocks", 0), "shared_read": top.get("Shared Read Blocks", 0),
            "rows": top.get("Actual Rows")}


# The store's replay statement (mod_mcp/mcp_store.c, mcp_store_events_after_bounded).
REPLAY_SQL = (
    "SELECT seq, m, running >= %s::bigint FROM ("
    "  SELECT seq, m, sum(len) OVER (ORDER BY seq) AS running, len FROM ("
    "    SELECT seq, m, coalesce(octet_length(m), 0) AS len FROM ("
    "      SELECT seq, message_text AS m FROM mcp.events"
    "       WHERE stream_id = %s::bigint AND seq > %s::bigint AND direction = 'out'"
    "       ORDER BY seq LIMIT %s::int) r) l) t"
    " WHERE running - len < %s::bigint ORDER BY seq")


def measure_queries(env: dict, samples: int) -> dict:
    conn = psycopg2.connect(env["MCP_PG"])
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT id, session_id FROM mcp.streams TABLESAMPLE SYSTEM (1) "
                "WHERE kind = 'request' LIMIT %s", (samples,))
    picks = cur.fetchall()
    out = {}
    plans = [explain(cur, REPLAY_SQL, (1 << 20, sid, 1, 1000, 1 << 20)) for sid, _ in picks[:50]]
    out["replay_statement"] = {"n": len(plans),
                               "ms_median": sorted(p["ms"] for p in plans)[len(plans) // 2],
                               "buffers_median": sorted(p["shared_hit"] + p["shared_read"] for p in plans)[len(plans) // 2],
                               "rows": plans[0]["rows"]}
    sid0 = picks[0][0]
    out["tool_calls_one_stream"] = explain(cur, "SELECT * FROM mcp.tool_calls WHERE stream_id = %s", (sid0,))
    cur.execute("SELECT max(created_at) FROM mcp.streams")
    newest = cur.fetchone()[0]
    out["tool_calls_last_hour"] = explain(
        cur, "SELECT tool, outcome, duration FROM mcp.tool_calls WHERE started_at > %s - interval '1 hour'",
        (newest,))
    out["tool_calls_day_by_tool"] = explain(
        cur, "SELECT tool, count(*) FROM mcp.tool_calls WHERE started_at >= %s - interval '1 day' "
        "GROUP BY tool", (newest,))
    # Replays through the gateway: each stored stream's session is made live for it.
    lat = []
    for st, sess in picks[:samples]:
        cur.execute("UPDATE mcp.sessions SET last_seen_at = now(), terminated_at = NULL, "
                    "terminated_by = NULL WHERE id = %s", (sess,))
        s = McpSession(env["MCP_URL"])
        s.session_id, s.protocol_version, s.initialized = sess, "2025-11-25", True
        t = time.monotonic()
        got = [e.id for e in s.get_stream(last_event_id=f"{st}-1")]
        lat.append((time.monotonic() - t) * 1000)
        assert got == [f"{st}-2", f"{st}-3"], got
        # Ended again as loaded, so that retention may take its day.
        cur.execute("UPDATE mcp.sessions SET terminated_at = created_at + interval '2 hours', "
                    "terminated_by = 'client' WHERE id = %s", (sess,))
    lat.sort()
    out["replay_http"] = {"n": len(lat), "ms_p50": round(lat[len(lat) // 2], 2),
                          "ms_p90": round(lat[int(len(lat) * 0.9)], 2)}
    conn.close()
    return out


def measure_calls_with_drop(env: dict, seconds: float, threads: int, retention_days: int) -> dict:
    stop = threading.Event()
    stamps: list[float] = []
    lock = threading.Lock()
    errors = [0]

    def worker():
        s = McpSession(env["MCP_URL"])
        s.initialize()
        while not stop.is_set():
            try:
                s.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
                with lock:
                    stamps.append(time.monotonic())
            except Exception:
                errors[0] += 1
        s.delete()

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]   # an error here ends the run
    t0 = time.monotonic()
    for t in ts:
        t.start()
    time.sleep(seconds / 2)
    conn = psycopg2.connect(env["MCP_PG"])
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT name, pg_size_pretty(bytes) FROM mcp.event_partitions ORDER BY day LIMIT 1")
    oldest = cur.fetchone()
    d0 = time.monotonic()
    cur.execute("CALL mcp.maintain(make_interval(days => %s))", (retention_days,))
    created, dropped, deleted = cur.fetchone()
    d1 = time.monotonic()
    # "dropped NAME (N bytes) in T ms"; a partition it could not lock within its lock_timeout
    # says "NAME not dropped this time: ..." (the next run drops it): reported, not parsed.
    drop_ms = [float(m.group(1)) for m in
               (re.search(r"dropped \S+ \(\d+ bytes\) in ([0-9.]+) ms", n) for n in conn.notices) if m]
    drop_skipped = [n.strip() for n in conn.notices if "not dropped" in n]
    time.sleep(seconds / 2)
    stop.set()
    for t in ts:
        t.join()
    conn.close()
    end = time.monotonic()

    def rate(a, b):
        n = sum(1 for x in stamps if a <= x < b)
        return round(n / (b - a), 1) if b > a else None
    stamps.sort()
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]) if d0 - 1 <= a <= d1 + 1)
    return {"threads": threads, "seconds": round(end - t0, 1), "calls": len(stamps), "errors": errors[0],
            "calls_per_s_before": rate(t0 + 1, d0), "calls_per_s_during": rate(d0, max(d1, d0 + 0.5)),
            "calls_per_s_after": rate(d1, end - 0.2), "drop": {"partition": oldest[0], "size": oldest[1],
            "maintain_s": round(d1 - d0, 3), "drop_table_ms": drop_ms, "drop_skipped": drop_skipped, "dropped": dropped, "rows_deleted_after": deleted},
            "longest_gap_between_calls_ms_around_drop": round(gaps[-1] * 1000, 1) if gaps else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--keep-stack", action="store_true")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    d = work / "scale"
    with open(work / "scale-up.log", "wb") as f:
        subprocess.run([str(REPO / "tests" / "stack"), "up", "--httpd", "1", "--dir", str(d)],
                       check=True, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    env = load_env(d / "stack.env")
    try:
        log(f"loading {args.events:,} events over {args.days} days with COPY")
        res = {"load": load(env["MCP_PG_ADMIN"], env["MCP_BACKEND_URL"], args.events, args.days)}
        log("load:", res["load"])
        res["queries"] = measure_queries(env, args.samples)
        log("queries:", res["queries"])
        # The oldest day goes: its sessions ended `days` days ago.
        res["calls_with_drop"] = measure_calls_with_drop(env, args.seconds, args.threads, args.days - 1)
        log("calls:", res["calls_with_drop"])
        res["load_average"] = os.getloadavg()
        (work / "store_scale.json").write_text(json.dumps(res, indent=2))
        print(json.dumps(res, indent=2))
    finally:
        if not args.keep_stack:
            subprocess.run([str(REPO / "tests" / "stack"), "down", "--dir", str(d)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            shutil.rmtree(d / "pg" / "data", ignore_errors=True)


if __name__ == "__main__":
    main()
