#!/usr/bin/python3
"""bench/db_pool.py — what a quiet spell longer than mod_dbd's DBDExptime costs the next calls.

After each quiet spell (--idle seconds without a call), c connections (keep-alive, 32 sessions
of the 2025 era) each make 10 sequential tools/call (echo) through mod_mcp to the C test
backend, let go at once. Per pool setting (--pool, one stack each, 2 children of 64 threads,
the rounds interleaved): the first call's p50 and max, the later calls', the database's client
connections before and after the burst, and the connections PostgreSQL established during it
(pg_stat_database.sessions). Run as root from the repository:

    bench/db_pool.py [--pool "DBDKeep 32;DBDExptime 2"] [--pool "DBDKeep 32;DBDExptime 3600"]
                     [--conc 8,32] [--rounds 8] [--idle 5]

APR's connection pool checks an idle connection's age when it is taken: one idle longer than
DBDExptime is closed, whatever DBDKeep says, and the next is tried. So the first call after such
a spell closes every idle connection of its child, one by one, and then connects anew, while
every other call of the child waits.
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from report import cell  # noqa: E402

TREE = bench.REPO
CALLS = 10


class Stack:
    def __init__(self, work, idx, extra, conc):
        self.name = extra.replace("\n", "; ")
        self.dir = os.path.join(work, f"s{idx}")
        conf = os.path.join(work, f"c{idx}.conf")
        with open(conf, "w") as f:
            f.write(bench.httpd_conf(2, 64) + extra + "\n")
        self.env = bench.stack_up(TREE, self.dir, conf)
        self.url = self.env["MCP_URLS"].split()[0]
        self.pg = bench.superuser(self.env)
        self.sids = bench.mcp_sessions(self.url, 32, os.path.join(work, f"sids{idx}"))
        self.res = {c: [] for c in conc}

    def q(self, sql):
        with self.pg.cursor() as c:
            c.execute(sql)
            return c.fetchone()[0]

    def conns(self):
        return self.q("SELECT count(*) FROM pg_stat_activity WHERE datname = 'mcp' AND "
                      "backend_type = 'client backend' AND pid <> pg_backend_pid()")

    def established(self):
        return self.q("SELECT sessions FROM pg_stat_database WHERE datname = 'mcp'")

    def burst(self, conc):
        host, port, path = bench.split_url(self.url)
        lat = [None] * conc
        go = threading.Barrier(conc + 1)

        def one(i):
            c = http.client.HTTPConnection(host, port, timeout=30)
            c.connect()
            sid = self.sids[i % len(self.sids)]
            ts = []
            go.wait()
            for k in range(CALLS):
                body = {"jsonrpc": "2.0", "id": k, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": "x"}}}
                t0 = time.perf_counter()
                c.request("POST", path, json.dumps(body),
                          dict(bench.HDRS, **{"Mcp-Session-Id": sid,
                                              "MCP-Protocol-Version": bench.PROTO}))
                r = c.getresponse()
                text = r.read()
                ts.append((time.perf_counter() - t0) * 1000)
                assert r.status == 200 and b'"result"' in text, text[:200]
            lat[i] = ts
            c.close()

        before_conns, before_est = self.conns(), self.established()
        th = [threading.Thread(target=one, args=(i,)) for i in range(conc)]
        for t in th:
            t.start()
        go.wait()
        for t in th:
            t.join()
        first = [x[0] for x in lat]
        rest = [y for x in lat for y in x[1:]]
        self.res[conc].append({"first_p50": statistics.median(first), "first_max": max(first),
                               "rest_p50": statistics.median(rest), "rest_max": max(rest),
                               "idle_before": before_conns, "after": self.conns(),
                               "new": self.established() - before_est})

    def down(self):
        self.pg.close()
        bench.stack_down(TREE, self.dir)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", action="append",
                    help="mod_dbd settings of one stack, ';' between directives "
                         "(default: DBDExptime 2 and 3600, both DBDKeep 32)")
    ap.add_argument("--conc", default="8,32", help="connections of a burst (list)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of quiet before a burst")
    a = ap.parse_args()
    pools = a.pool or ["DBDKeep 32;DBDExptime 2", "DBDKeep 32;DBDExptime 3600"]
    conc = [int(x) for x in a.conc.split(",")]
    work = tempfile.mkdtemp(prefix="db-pool.")
    os.chmod(work, 0o755)   # the stacks run PostgreSQL and httpd as other users
    stacks = []
    try:
        for i, extra in enumerate(pools):
            stacks.append(Stack(work, i, extra.replace(";", "\n"), conc))
        for s in stacks:   # every pool grown to what the bursts use
            for c in conc:
                s.burst(c)
                s.res[c].clear()
        for r in range(a.rounds):
            for c in conc:
                time.sleep(a.idle)   # the quiet spell is what is measured, not a wait for an event
                for s in (stacks if r % 2 == 0 else stacks[::-1]):
                    s.burst(c)
        for c in conc:
            print(f"c = {c}, {CALLS} calls per connection after {a.idle:.0f} s without a call, "
                  f"{a.rounds} rounds, medians [min-max]")
            print("| pool | first call p50 ms | first call max ms | later calls p50 ms | "
                  "later max ms | connections before | after | new per burst |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            for s in stacks:
                def of(k, digits=1):
                    return cell([x[k] for x in s.res[c]], digits)
                print(f"| {s.name} | {of('first_p50')} | {of('first_max')} | {of('rest_p50')} | "
                      f"{of('rest_max')} | {of('idle_before', 0)} | {of('after', 0)} | "
                      f"{of('new', 0)} |")
    finally:
        for s in stacks:
            s.down()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
