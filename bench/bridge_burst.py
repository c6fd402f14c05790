#!/usr/bin/python3
"""bench/bridge_burst.py — what N concurrent first calls of an era-bridge pool key cost: the
calls of an agent that opens with parallel tool calls, or any load once the key's pooled
session expired (--lost: once the backend forgot it, so that every call in flight gets a 404).

Per round, a key of its own (clientCapabilities naming the round), N 2026-07-28 tools/call
(echo) let go at once, each on a connection of its own, to the 2025-only C test backend
through the era bridge. Per round: the burst's wall time, its calls' p50 and max, and the
pooled sessions started for the key (rows of mcp.bridge_sessions: each was an initialize and a
notifications/initialized upstream). Each --tree (a built checkout) gets a stack of its own;
the trees' rounds are interleaved. Run as root from the repository:

    bench/bridge_burst.py --tree A --tree B [--calls 16] [--rounds 10] [--children 2]
                          [--lost | --stdio]

--stdio: the stack's stdio server instead (/mcp-stdio: the test backend run by the stdio
supervisor, where each session started is a process started).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from report import cell  # noqa: E402

V = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


def caps_of(tag):
    return {"experimental": {tag: {}}}


def call(url, rid, caps):
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": rid},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": V,
                                 "io.modelcontextprotocol/clientCapabilities": caps}}}
    t0 = time.perf_counter()
    r = requests.post(url, data=json.dumps(body), timeout=60, headers={
        "Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": V,
        "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    took = time.perf_counter() - t0
    ok = r.status_code == 200 and rid in r.text and '"resultType":"complete"' in r.text
    return took, ok


class Stack:
    def __init__(self, tree, work, idx, children, stdio):
        self.tree = os.path.abspath(tree)
        self.dir = os.path.join(work, f"s{idx}")
        conf = os.path.join(work, f"burst-{idx}.conf")
        with open(conf, "w") as f:
            f.write(bench.httpd_conf(children, 64))
        self.env = bench.stack_up(self.tree, self.dir, conf)
        self.url = self.env["MCP_STDIO_URL" if stdio else "MCP_URLS"].split()[0]
        self.pg = bench.superuser(self.env)
        self.rounds = []

    def started(self, caps):
        key = json.dumps(caps, sort_keys=True, separators=(",", ":"))
        with self.pg.cursor() as c:
            c.execute("SELECT count(*) FROM mcp.bridge_sessions WHERE capabilities_key = %s",
                      (key,))
            return c.fetchone()[0]

    def lose(self, caps):
        """The key's session started, then forgotten by the backend (DELETE upstream)."""
        took, ok = call(self.url, "before", caps)
        assert ok, "the call that starts the key's session failed"
        key = json.dumps(caps, sort_keys=True, separators=(",", ":"))
        with self.pg.cursor() as c:
            c.execute("SELECT s.backend_session_id FROM mcp.bridge_sessions b JOIN mcp.sessions s"
                      " ON s.id = b.session_id WHERE b.capabilities_key = %s", (key,))
            sid = c.fetchone()[0]
        r = requests.delete(self.env["MCP_BACKEND_URL"], timeout=10, headers={
            "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
        assert r.status_code in (200, 204), r.text
        return 1

    def burst(self, n, tag, lost):
        caps = caps_of(tag)
        before = self.lose(caps) if lost else 0
        results = [None] * n
        go = threading.Barrier(n + 1)

        def one(i):
            go.wait()
            results[i] = call(self.url, f"{tag}-{i}", caps)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        go.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        took = sorted(r[0] for r in results)
        self.rounds.append({"wall": wall * 1000, "p50": statistics.median(took) * 1000,
                            "max": took[-1] * 1000,
                            "failed": sum(1 for r in results if not r[1]),
                            "started": self.started(caps) - before})

    def down(self):
        self.pg.close()
        bench.stack_down(self.tree, self.dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", help="a built checkout (default: this one)")
    ap.add_argument("--calls", type=int, default=16, help="calls per burst")
    ap.add_argument("--rounds", type=int, default=10, help="bursts per tree")
    ap.add_argument("--children", type=int, default=2, help="httpd children of 64 threads")
    ap.add_argument("--lost", action="store_true",
                    help="the key's session exists and the backend forgot it (404s)")
    ap.add_argument("--stdio", action="store_true",
                    help="the stdio server at /mcp-stdio (a process per session started)")
    a = ap.parse_args()
    if a.lost and a.stdio:
        ap.error("--lost forgets a session of the HTTP backend; not with --stdio")
    trees = a.tree or [bench.REPO]
    work = tempfile.mkdtemp(prefix="bridge-burst.")
    os.chmod(work, 0o755)   # the stacks run PostgreSQL and httpd as other users
    stacks = []
    try:
        for i, t in enumerate(trees):
            stacks.append(Stack(t, work, i, a.children, a.stdio))
        for s in stacks:   # each stack's connections and caches warm, on a key of its own
            s.burst(a.calls, f"warm-{os.getpid()}", False)
            s.rounds.clear()
        for r in range(a.rounds):
            order = stacks if r % 2 == 0 else stacks[::-1]
            for s in order:
                s.burst(a.calls, f"r{r}-{os.getpid()}", a.lost)
        what = "found its session lost (404)" if a.lost else "found the pool empty"
        where = "the stdio server" if a.stdio else "the HTTP backend"
        print(f"{a.calls} concurrent first calls of a key that {what}, {where}; "
              f"{a.children} children; "
              f"{a.rounds} rounds per tree, medians [min-max]")
        print("| tree | burst ms | call p50 ms | call max ms | sessions started | failed |")
        print("|---|---:|---:|---:|---:|---:|")
        for s in stacks:
            def of(k, digits=1):
                return cell([x[k] for x in s.rounds], digits)
            print(f"| {s.tree} | {of('wall')} | {of('p50')} | {of('max')} | "
                  f"{of('started', 0)} | {sum(x['failed'] for x in s.rounds)} |")
    finally:
        for s in stacks:
            s.down()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
