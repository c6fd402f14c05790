#!/usr/bin/python3
"""bench/percall.py — load-independent cost per call of mod_mcp, for before/after decisions on a
busy machine. Run as root from the repository (tests/stack runs PostgreSQL and httpd as their
users); wrk and psycopg2 must be installed (bench/run installs them).

    bench/percall.py [--tree DIR]... [--conc 1,8,32] [--secs 4] [--reps 2]
                     [--proto 2025-11-25|2025-06-18|2026-07-28] [--pg-set NAME=VALUE]...
                     [--conf-add N=DIRECTIVE]... [--pg-add N=NAME=VALUE]... [--sql-add N=FILE]...
                     [--children N] [--httpd N]
                     [--sessions 32|1] [--open-streams N] [--statements N] [--mirror] [--spread]
                     [--keep]

Each --tree (default: this repository) is a built checkout: its tests/stack starts a private
stack (one httpd, event MPM, with that tree's module, schema and test backend). The points are
run interleaved (tree A, tree B, tree A, ...) so that the machine's load hits all alike; the same
tree may be given twice with --conf-add N=DIRECTIVE adding a line to the N-th's (0-based) httpd
configuration, e.g. --tree . --tree . --conf-add 1="MCPDatabaseGroupCommit 1", or
--pg-add N=NAME=VALUE setting a PostgreSQL parameter (ALTER SYSTEM, reloaded) on the N-th's
stack only, e.g. --pg-add 1=commit_delay=100, or --sql-add N=FILE running FILE's SQL (as
superuser, in database mcp) on the N-th's stack before its first call. Per point
it prints calls/s and p50/p99 (noisy on a shared machine) and the figures that do not depend on
the load: PostgreSQL CPU per call (all postgres processes, from /proc; and its client backends
of user mcp alone, without the background processes), httpd CPU per call,
write transactions per call, NOTIFYs per call, WAL bytes per call, event rows per call.
The clients rotate over --sessions sessions (default 32); --sessions 1 makes every call of every
connection in one session (an agent making parallel tool calls: they contend for its row).
--open-streams N gives each stack N open standalone streams of N live sessions of another client
(connected clients' GETs) after an ANALYZE of mcp.streams with none open and of mcp.sessions with
N ended ones, autovacuum off for both: what a call costs beside many connected clients when the
statistics are from before they came.
--statements N loads pg_stat_statements into each stack (its PostgreSQL restarted before the
first call) and prints, per tree, the N statements with the most execution time over all of its
points: runs per call and execution µs per run and per call, then plans per run and planning
µs per plan (pg_stat_statements.track_planning: a prepared statement is planned again at each
run while PostgreSQL keeps choosing custom plans for it), the statement's text cut to its start.
The work directory (each stack's PostgreSQL data, ~1 GB after a run, and the logs) is removed
when the run succeeds, kept (and named) when it fails or with --keep.
--mirror starts two stacks per tree, in the order A B B A, and each tree's figures are the medians
over both: the stack started first has done ~10 % more calls/s at c = 1 than the second with the
same tree in both (2026-12-05), a bias that interleaving alone does not remove.
--spread prints each figure as the median [min–max] of its runs: a point whose runs spread
wider than the difference between trees decides nothing (2026-12-06: one tree's httpd CPU per
call at c = 8 came out 37 % above another's for the same httpd code, in one run).
MultiXacts/call counts the multixact ids PostgreSQL made (the shared row locks of concurrent
transactions on one row: mxid_age('1') is the next id - 1).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (helpers: CpuMeter, NotifyCounter, mcp_sessions, read_env, ...)
import report  # noqa: E402  (cell: median [min-max])
import psycopg2  # noqa: E402



class Target:
    def __init__(self, tree, work, proto, idx, pg_set=(), conf_add=(), children=1, sessions=32,
                 open_streams=0, statements=0, sql_add=(), httpd=1):
        self.tree = os.path.abspath(tree)
        self.name = self.tree + "".join(f" + {c}" for c in conf_add) \
            + "".join(f" + PostgreSQL {kv}" for kv in pg_set) \
            + "".join(f" + {os.path.basename(f)}" for f in sql_add)
        self.dir = os.path.join(work, f"t{idx}")
        conf = os.path.join(work, f"percall-{idx}.conf")
        with open(conf, "w") as f:
            f.write(bench.httpd_conf(children, 64) + "".join(c + "\n" for c in conf_add))
        self.env = bench.stack_up(self.tree, self.dir, conf, httpd)
        self.url = self.env["MCP_URLS"].split()[0]
        self.attach()
        for kv in pg_set:   # e.g. synchronous_commit=off, to attribute a cost
            name, value = kv.split("=", 1)
            with self.pg.cursor() as c:
                c.execute(f"ALTER SYSTEM SET {name} = %s", (value,))
                c.execute("SELECT pg_reload_conf()")
        for path in sql_add:   # e.g. a constraint dropped, to price it
            with open(path) as f, self.pg.cursor() as c:
                c.execute(f.read())
        self.calls = 0
        if statements:
            self.load_statements()
        self.notifies = bench.NotifyCounter(self.env["MCP_PG"])
        bench.PROTO = proto
        self.sessions = os.path.join(work, f"t{idx}.sessions")
        # The sessions negotiate proto (mcp_sessions' default is bound at import: 2025-11-25).
        if proto == "2026-07-28":   # stateless: no session (bench/mcp.lua sends none)
            with open(self.sessions, "w") as f:
                f.write("stateless\n")
        else:
            bench.mcp_sessions(self.url, sessions, self.sessions, proto=proto)
            sid = open(self.sessions).readline().strip()
            bench.mcp_call(self.url, sid, "echo", {"text": "hello"})
        if open_streams:
            self.open_streams(open_streams)

    def attach(self):
        """The stack's processes to meter (PostgreSQL's postmaster by its pid file: a new one
        after a restart) and a superuser connection to its database."""
        self.cpu = bench.CpuMeter()
        self.pg_pid = int(bench.pidfile(self.env["MCP_PG_PIDFILE"]))
        self.cpu.add(self.pg_pid, "postgres")
        for f in self.env["MCP_HTTPD_PIDFILES"].split():
            self.cpu.add(bench.pidfile(f), "httpd")
        self.cpu.add(bench.pidfile(self.env.get("MCP_BACKEND_PIDFILE", "")), "backend")
        self.pg = bench.superuser(self.env)

    def load_statements(self):
        """pg_stat_statements in this stack's PostgreSQL (a restart: the children reconnect)."""
        with self.pg.cursor() as c:
            c.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        self.pg.close()
        subprocess.run([os.path.join(self.tree, "tests", "stack"), "restart-pg", "--dir",
                        self.dir], check=True, capture_output=True, timeout=120)
        self.attach()
        with self.pg.cursor() as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            # Known only once the library is loaded; a reload applies it.
            c.execute("ALTER SYSTEM SET pg_stat_statements.track_planning = on")
            c.execute("SELECT pg_reload_conf()")

    def statements_reset(self):
        with self.pg.cursor() as c:
            c.execute("SELECT pg_stat_statements_reset()")

    def statements(self, n):
        """The n statements of user mcp with the most execution time since the reset:
        (runs per call, µs per run, µs per call, plans per run, planning µs per plan, text's
        start). A prepared statement is planned again at each run while PostgreSQL keeps
        choosing custom plans for it (plan_cache_mode auto): that time is not execution's."""
        with self.pg.cursor() as c:
            c.execute("SELECT s.calls, s.total_exec_time, s.plans, s.total_plan_time, s.query"
                      "  FROM pg_stat_statements s"
                      "  JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = 'mcp'"
                      " ORDER BY s.total_exec_time DESC LIMIT %s", (n,))
            rows = c.fetchall()
        calls = max(self.calls, 1)
        return [(runs / calls, ms * 1000 / max(runs, 1), ms * 1000 / calls,
                 plans / max(runs, 1), plan_ms * 1000 / max(plans, 1),
                 " ".join(q.split())[:110]) for runs, ms, plans, plan_ms, q in rows]

    def open_streams(self, n):
        """n open standalone streams of n sessions of another client (192.0.2.1), as connected
        clients' GETs leave them, after an ANALYZE of mcp.streams with none open and of
        mcp.sessions with n ended sessions of that client, and autovacuum off for both: the
        statistics of big tables that n clients changed by a percent, which autovacuum does not
        analyze again."""
        mcp = psycopg2.connect(self.env["MCP_PG_ADMIN"].replace("dbname=postgres", "dbname=mcp"))
        mcp.autocommit = True
        with mcp.cursor() as c:
            c.execute("INSERT INTO mcp.sessions (id, backend_url, protocol_version, holder,"
                      "                          terminated_at, terminated_by)"
                      " SELECT 'percall-ended-session-' || g, 'http://127.0.0.1:1/mcp',"
                      " '2025-11-25', 'addr:192.0.2.1', now(), 'client'"
                      " FROM generate_series(1, %s) g", (n,))
            for table in ("mcp.streams", "mcp.sessions"):
                c.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
                c.execute(f"ANALYZE {table}")
            c.execute("INSERT INTO mcp.sessions (id, backend_url, protocol_version, holder)"
                      " SELECT 'percall-open-stream-session-' || g, 'http://127.0.0.1:1/mcp',"
                      " '2025-11-25', 'addr:192.0.2.1' FROM generate_series(1, %s) g", (n,))
            c.execute("INSERT INTO mcp.streams (id, session_id, kind, holder, lease_until)"
                      " SELECT mcp.stream_id_new(), 'percall-open-stream-session-' || g,"
                      " 'standalone', 'addr:192.0.2.1', now() + interval '1 day'"
                      " FROM generate_series(1, %s) g", (n,))
        mcp.close()

    def backends_ticks(self):
        """CPU ticks of the postmaster's client backends of user mcp (the gateway's
        connections): PostgreSQL's work for the calls without its background processes, whose
        share per call grows as calls/s fall on a loaded machine."""
        out = {}
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                s = open(f"/proc/{p}/stat").read()
                rest = s[s.rindex(")") + 2:].split()
                if int(rest[1]) != self.pg_pid:
                    continue
                if not open(f"/proc/{p}/cmdline", "rb").read().startswith(b"postgres: mcp "):
                    continue
            except (OSError, ValueError):
                continue
            out[(p, rest[19])] = int(rest[11]) + int(rest[12])
        return out

    def sql(self, q):
        with self.pg.cursor() as c:
            c.execute(q)
            return c.fetchone()

    def counters(self):
        xid, lsn, ev, mx = self.sql(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
            " pg_current_wal_insert_lsn() - '0/0'::pg_lsn,"
            " (SELECT last_value FROM mcp.events_id_seq), mxid_age('1'::xid)")
        return int(xid), int(lsn), int(ev), self.notifies.count, int(mx)

    def point(self, conc, secs, proto):
        threads = 1 if conc == 1 else 2
        cmd = ["wrk", "-t", str(threads), "-c", str(conc), "-d", f"{secs}s", "--timeout", "10s",
               "-s", bench.LUA, self.url, "--", self.sessions, proto, "echo",
               '{"text":"hello"}', str(threads)]
        c0, cpu0, b0 = self.counters(), self.cpu.snapshot(), self.backends_ticks()
        p = subprocess.run(cmd, text=True, capture_output=True)
        cpu1, b1 = self.cpu.snapshot(), self.backends_ticks()
        time.sleep(0.3)   # the last notifications on their way to the counter
        c1 = self.counters()
        import json
        import re
        m = re.search(r"^BENCH (\{.*\})$", p.stdout, re.M)
        if p.returncode != 0 or not m:
            raise SystemExit(f"wrk failed: {p.stdout}\n{p.stderr}")
        r = json.loads(m.group(1))
        calls = max(r["good"], 1)
        self.calls += r["good"]
        el = cpu1[1] - cpu0[1]
        cores = bench.CpuMeter.delta(cpu0, cpu1)
        return {
            "calls/s": r["good"] / (r["duration_us"] / 1e6),
            "p50 ms": r["p50_us"] / 1000, "p99 ms": r["p99_us"] / 1000,
            "errors": r["bad"] + r["connect_err"] + r["read_err"] + r["timeout_err"],
            "PG CPU ms/call": cores.get("postgres", 0) * el * 1000 / calls,
            "PG backends CPU ms/call": sum(t - b0.get(k, 0) for k, t in b1.items())
                                       / bench.CLK * 1000 / calls,
            "httpd CPU ms/call": cores.get("httpd", 0) * el * 1000 / calls,
            "xacts/call": (c1[0] - c0[0]) / calls,
            "NOTIFYs/call": (c1[3] - c0[3]) / calls,
            "WAL B/call": (c1[1] - c0[1]) / calls,
            "events/call": (c1[2] - c0[2]) / calls,
            "MultiXacts/call": (c1[4] - c0[4]) / calls,
        }

    def down(self):
        self.notifies.close()
        self.pg.close()
        bench.stack_down(self.tree, self.dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append")
    ap.add_argument("--conc", default="1,8,32")
    ap.add_argument("--secs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--proto", default="2025-11-25")
    ap.add_argument("--pg-set", action="append", default=[],
                    help="NAME=VALUE: a PostgreSQL setting for every tree's stack")
    ap.add_argument("--children", type=int, default=1,
                    help="httpd children of 64 threads (bench/run's main stack has 2)")
    ap.add_argument("--httpd", type=int, default=1,
                    help="httpd instances in each stack (bench/run's main stack has 2); the load "
                         "goes to the first, the others idle beside it")
    ap.add_argument("--sessions", type=int, default=32,
                    help="sessions the clients rotate over (1: every call in one session)")
    ap.add_argument("--conf-add", action="append", default=[],
                    help="N=DIRECTIVE: a line added to the N-th tree's httpd configuration")
    ap.add_argument("--open-streams", type=int, default=0,
                    help="N open standalone streams of N other live sessions in each stack, "
                         "with mcp.streams' and mcp.sessions' statistics from before they "
                         "opened (N ended sessions then; autovacuum off for both)")
    ap.add_argument("--statements", type=int, default=0,
                    help="N: the N statements with the most execution time per tree "
                         "(pg_stat_statements, loaded into each stack)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (stacks, logs) even when the run succeeds")
    ap.add_argument("--spread", action="store_true",
                    help="each figure as the median [min-max] of its runs")
    ap.add_argument("--mirror", action="store_true",
                    help="two stacks per tree, started A B B A; each tree's figures are the "
                         "medians over both (the first stack started has done ~10 %% more "
                         "calls/s at c = 1 than the second, the same tree in both)")
    ap.add_argument("--pg-add", action="append", default=[],
                    help="N=NAME=VALUE: a PostgreSQL setting for the N-th tree's stack only (the "
                         "same tree given twice: a setting's price, interleaved)")
    ap.add_argument("--sql-add", action="append", default=[],
                    help="N=FILE: SQL run (as superuser, in database mcp) on the N-th tree's "
                         "stack once it is up, before the first call (a schema variant priced "
                         "against the same tree given twice)")
    a = ap.parse_args()
    trees = a.tree or [bench.REPO]
    work = tempfile.mkdtemp(prefix="mcp-percall.")
    os.chmod(work, 0o755)
    targets, done = [], False
    try:
        adds = {}
        for kv in a.conf_add:
            n, line = kv.split("=", 1)
            adds.setdefault(int(n), []).append(line)
        pg_adds = {}
        for kv in a.pg_add:
            n, setting = kv.split("=", 1)
            pg_adds.setdefault(int(n), []).append(setting)
        sql_adds = {}
        for kv in a.sql_add:
            n, path = kv.split("=", 1)
            sql_adds.setdefault(int(n), []).append(os.path.abspath(path))
        for n in sorted(set(adds) | set(pg_adds) | set(sql_adds)):
            if not 0 <= n < len(trees):
                ap.error(f"--conf-add/--pg-add/--sql-add {n}=...: there is no tree {n} (0-based; "
                         f"{len(trees)} tree(s) given)")
        # --mirror: a second stack for each tree, started in the mirrored order (A B, then B
        # A), so that where a stack stands in the start order weighs on every tree alike.
        slots = list(enumerate(trees))
        slots += slots[::-1] if a.mirror else []
        for idx, (i, t) in enumerate(slots):
            targets.append(Target(t, work, a.proto, idx, list(a.pg_set) + pg_adds.get(i, []),
                                  adds.get(i, ()), a.children, a.sessions, a.open_streams,
                                  a.statements, sql_adds.get(i, ()), a.httpd))
        for t in targets if a.statements else ():
            t.statements_reset()
        res = {}
        for rep in range(a.reps):
            for c in [int(x) for x in a.conc.split(",")]:
                order = targets[rep % len(targets):] + targets[:rep % len(targets)]
                for t in order:
                    res.setdefault((t.name, c), []).append(t.point(c, a.secs, a.proto))
        keys = list(next(iter(res.values()))[0].keys())
        print(f"protocol {a.proto}; {a.sessions} session(s); {a.open_streams} other open streams;"
              f" medians of {a.reps * (2 if a.mirror else 1)} interleaved runs of {a.secs} s"
              + (" (two stacks per tree, started A B B A)" if a.mirror else ""))
        digits = {k: 0 if k in ("calls/s", "WAL B/call") else 3 for k in keys}
        for (tree, c), rs in res.items():
            print(f"{tree} c={c}: " + ", ".join(
                f"{k} {report.cell([r[k] for r in rs], digits[k])}" if a.spread else
                f"{k} {bench.med([r[k] for r in rs]):.{digits[k]}f}"
                for k in keys))
        for t in targets if a.statements else ():
            print(f"{t.name} ({os.path.basename(t.dir)}): statements by execution time"
                  f" ({t.calls} calls; runs per call,"
                  " µs per run, µs per call; plans per run, planning µs per plan)")
            for per_call, us_run, us_call, plans, us_plan, q in t.statements(a.statements):
                print(f"  {per_call:6.3f} {us_run:8.1f} {us_call:8.1f}  {plans:5.2f} {us_plan:7.1f}"
                      f"  {q}")
        done = True
    finally:
        for t in targets:
            t.down()
        if done and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
