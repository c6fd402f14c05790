#!/usr/bin/python3
"""bench/bench.py — the measurements of bench/run (run that instead: it installs what this needs).

    bench/bench.py --work DIR --pg-insert BIN --node NODE [--quick]

Starts its own stacks with tests/stack (and server-everything + supergateway on Node 22), runs
every measurement of the benchmark issue, writes bench/results.md, bench/results.json and
bench/results.png, and stops everything it started. Exits non-zero when something failed.
"""
import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import platform
import re
import select
import selectors
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback

import psycopg2

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
LUA = os.path.join(BENCH, "mcp.lua")
PROTO = "2025-11-25"
MODERN_PROTO = "2026-07-28"   # stateless: through the era bridge to the 2025-era test backend
JSON_PROTO = "2025-06-18"
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


# ---- small helpers ----------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_env(path):
    env = {}
    for line in open(path):
        m = re.match(r"^([A-Z0-9_]+)='(.*)'$", line.rstrip("\n"))
        if m:
            env[m.group(1)] = m.group(2).replace("'\\''", "'")
    return env


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def tcp_active_opens():
    """The kernel's count of TCP connections opened by connect() so far (all processes)."""
    lines = [l.split() for l in open("/proc/net/snmp") if l.startswith("Tcp:")]
    return int(lines[1][lines[0].index("ActiveOpens")])


def pidfile(path):
    try:
        return int(open(path).read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def children(pid):
    try:
        out = run(["ps", "-o", "pid=", "--ppid", str(pid)]).stdout
    except subprocess.CalledProcessError:
        return []
    return [int(x) for x in out.split()]


def proc_comm(pid):
    try:
        return open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return ""


def proc_status(pid):
    """VmRSS (kB), threads, open fds, PSS (kB) of one process."""
    st = {"rss_kb": 0, "threads": 0, "fds": 0, "pss_kb": 0}
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                st["rss_kb"] = int(line.split()[1])
            elif line.startswith("Threads:"):
                st["threads"] = int(line.split()[1])
        st["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("Pss:"):
                st["pss_kb"] = int(line.split()[1])
    except OSError:
        pass
    return st


# The attribution run with the child's group commit off (mod_mcp_dbd: MCPDatabaseGroupCommit; on,
# one committer per child, by default since issue 25's seventh pass).
GROUP_VARIANT = "group commit off (each statement its own transaction)"
GROUP_MARK = "# ---- bench: group commit"


def tree_mem(pid):
    """RSS and PSS (kB) summed over a process and all its descendants, and how many."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += children(p)
    sts = [proc_status(p) for p in pids]
    return sum(st["rss_kb"] for st in sts), sum(st["pss_kb"] for st in sts), len(pids)


def stdio_se_conf(node, se_js):
    """server-everything over stdio behind mod_mcp at /mcp-se-stdio: one process per session,
    run by the supervisor, as supergateway runs it (measurements 2 and 9, bench/stdio.py)."""
    return f"""<MCPStdioServer everything>
    Command {node} {se_js} stdio
    SetEnv NODE_ENV production
</MCPStdioServer>
<Location /mcp-se-stdio>
    SetHandler mcp
    MCPBackend stdio:everything
</Location>
"""


FED_MEMBERS = ("a", "b", "c")   # measurement 10's members: a unprefixed, b_ and c_
FED_TOOL = "c_echo"             # ... the call: the last member's echo (prefixed: renamed both ways)


def federated_conf():
    """A federated endpoint at /mcp-fed3: three <MCPMember>s, each the stack's C test backend
    (the one behind /mcp), the first unprefixed and the others under "b_" and "c_"; and
    /mcp-fed1, the first of them alone (what federation costs apart from the members' number).
    Measurement 10, bench/federation.py. Inside <IfDirective <MCPMember>: a --tree module
    without federation starts, and measurement 10 says it was skipped."""
    members = ["".join(f"""    <MCPMember {m}>
        Backend ${{MCP_BACKEND_URL}}
        Prefix {"none" if i == 0 else m + "_"}
    </MCPMember>
""" for i, m in enumerate(FED_MEMBERS[:n])) for n in (len(FED_MEMBERS), 1)]
    return f"""<IfDirective <MCPMember>
<Location /mcp-fed3>
    SetHandler mcp
{members[0]}</Location>
<Location /mcp-fed1>
    SetHandler mcp
{members[1]}</Location>
</IfDirective>
"""


def httpd_conf(children, threads):
    """The httpd settings of a benchmark stack (Included after tests/stack's own): production-like
    logging, unlimited keep-alive, `children` event MPM children of `threads` threads started up
    front and never recycled, a database pool for 32 concurrent clients whose idle connections
    outlive a pause between points (tests/stack's DBDExptime 60 closes them all at a child's first
    call after a quiet minute: README, "mod_dbd's pool after a quiet spell"), no per-address
    limits."""
    return f"""LogLevel warn
MaxKeepAliveRequests 0
KeepAliveTimeout 30
StartServers {children}
ServerLimit {children}
ThreadLimit {threads}
ThreadsPerChild {threads}
MaxRequestWorkers {children * threads}
MinSpareThreads 1
MaxSpareThreads {children * threads}
MaxConnectionsPerChild 0
DBDMin 0
DBDKeep 32
DBDMax 32
DBDExptime 3600
# Every client is 127.0.0.1: no per-address limits (older modules, --tree, lack the directives).
# Measurement 8 makes all its calls in one session (h2load sends the same headers every time).
<IfDirective MCPMaxStreamsPerPrincipal>
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
    MCPMaxStreamsPerSession 0
</IfDirective>
"""


# ---- private stacks of a checkout (percall, bridge_burst, db_pool) ----------------------------

def stack_up(tree, d, conf, httpd=1):
    """A private stack in d from checkout tree's tests/stack (event MPM, conf Included, the
    checkout's own module): its stack.env. Exits with tests/stack's complaint when it fails."""
    p = subprocess.run([os.path.join(tree, "tests", "stack"), "up", "--dir", d,
                        "--httpd", str(httpd), "--mpm", "event", "--conf", conf,
                        "--module", os.path.join(tree, "mod_mcp/.libs/mod_mcp.so")],
                       text=True, capture_output=True)
    if p.returncode != 0:
        raise SystemExit(f"tests/stack up ({tree}) failed:\n{p.stderr[-3000:]}")
    return read_env(os.path.join(d, "stack.env"))


def stack_down(tree, d):
    subprocess.run([os.path.join(tree, "tests", "stack"), "down", "--dir", d],
                   capture_output=True)


def superuser(env):
    """An autocommit connection to a stack's database as PostgreSQL's superuser."""
    conn = psycopg2.connect(env["MCP_PG"].replace("user=mcp", "user=postgres"))
    conn.autocommit = True
    return conn


# ---- CPU accounting: who used the two cores during a run --------------------------------------

class CpuMeter:
    """Splits the CPU time used during a run by component: each process is attributed to the
    first registered root among its ancestors (the httpd parents, the postmaster, the backends,
    the load generator); kernel threads and everything else are reported apart."""

    UNROOTED = ("other", "kernel")

    def __init__(self):
        self.roots = {}   # pid -> label

    def add(self, pid, label):
        if pid:
            self.roots[int(pid)] = label

    def snapshot(self):
        procs = {}
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                s = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            rest = s[s.rindex(")") + 2:].split()
            # pid -> (ppid, utime+stime, cutime+cstime of the children it reaped, start time):
            # the start time tells a reused pid apart
            procs[int(p)] = (int(rest[1]), int(rest[11]) + int(rest[12]),
                             int(rest[13]) + int(rest[14]), int(rest[19]))
        by = {}
        for pid, (ppid, ticks, reaped, start) in procs.items():
            label, cur, depth = None, pid, 0
            while cur and depth < 64:
                if cur in self.roots:
                    label = self.roots[cur]
                    break
                if cur == 2 or procs.get(cur, (0,))[0] == 2:
                    label = "kernel"
                    break
                cur = procs.get(cur, (0,))[0]
                depth += 1
            parent = procs.get(ppid)
            by[(pid, start)] = (label or "other", ticks, reaped,
                                (ppid, parent[3]) if parent else None)
        return by, time.monotonic()

    @staticmethod
    def delta(a, b):
        """Cores used on average per component between two snapshots (1.0 = one core busy all
        the time). A process that started in between counts from zero. One that ended in
        between is counted through its parent, which reaped it: the growth of the parent's
        children's time, less what the ended ones had used before the first snapshot (the
        postmaster's backends of a client that came and went; an httpd child that retired).
        Only inside the registered roots: bench/run registers its own process as the client,
        so the load generators it runs and reaps (wrk, h2load, curl, pg_insert) count as the
        client; an unregistered script's reaped children count nowhere."""
        (pa, ta), (pb, tb) = a, b
        el = max(tb - ta, 1e-6)
        before_ended = {}   # a surviving parent -> what its ended children had used before a
        for key, (label, ticks, reaped, parent) in pa.items():
            if key not in pb and parent in pb and label not in CpuMeter.UNROOTED:
                before_ended[parent] = before_ended.get(parent, 0) + ticks + reaped
        out = {}
        for key, (label, ticks, reaped, _) in pb.items():
            _, ticks0, reaped0, _ = pa.get(key, (label, 0, 0, None))
            used = max(ticks - ticks0, 0)
            if label not in CpuMeter.UNROOTED:
                used += max(reaped - reaped0 - before_ended.get(key, 0), 0)
            out[label] = out.get(label, 0.0) + used / CLK / el
        return out


class NotifyCounter:
    """Counts the notifications on channel mcp_events (one LISTEN connection, drained by a
    thread): how many notifying transactions the gateway commits per call."""

    def __init__(self, dsn):
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True
        self.conn.cursor().execute("LISTEN mcp_events")
        self.count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            r, _, _ = select.select([self.conn], [], [], 0.2)
            if r:
                self.conn.poll()
                self.count += len(self.conn.notifies)
                self.conn.notifies.clear()

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.conn.close()


# ---- MCP over HTTP ----------------------------------------------------------------------------

HDRS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def split_url(url):
    m = re.match(r"^https?://([^:/]+):(\d+)(/.*)$", url)
    if not m:
        raise BenchError(f"bad URL {url}")
    return m.group(1), int(m.group(2)), m.group(3)


def mcp_session(url, proto=PROTO):
    """initialize + notifications/initialized; returns the session id."""
    host, port, path = split_url(url)
    c = http.client.HTTPConnection(host, port, timeout=30)
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": proto, "capabilities": {},
                       "clientInfo": {"name": "mod_mcp-bench", "version": "1"}}}
    c.request("POST", path, json.dumps(body), HDRS)
    r = c.getresponse()
    text = r.read()
    sid = r.getheader("Mcp-Session-Id")
    if r.status != 200 or not sid:
        raise BenchError(f"initialize at {url}: HTTP {r.status} {text[:200]!r}")
    c.request("POST", path, '{"jsonrpc":"2.0","method":"notifications/initialized"}',
              dict(HDRS, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": proto}))
    r = c.getresponse()
    r.read()
    if r.status not in (200, 202):
        raise BenchError(f"notifications/initialized at {url}: HTTP {r.status}")
    c.close()
    return sid


def mcp_sessions(url, n, path, workers=8, proto=PROTO):
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        sids = list(ex.map(lambda _: mcp_session(url, proto), range(n)))
    with open(path, "w") as f:
        f.write("\n".join(sids) + "\n")
    return sids


def mcp_call(url, sid, tool, args, rid=1):
    host, port, path = split_url(url)
    c = http.client.HTTPConnection(host, port, timeout=30)
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}
    c.request("POST", path, json.dumps(body),
              dict(HDRS, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": PROTO}))
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    if r.status != 200 or '"result"' not in text:
        raise BenchError(f"tools/call {tool} at {url}: HTTP {r.status} {text[:300]!r}")
    return text


# ---- the bench -------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.a = args
        self.stack_cmd = os.path.join(args.tree, "tests", "stack")
        self.work = args.work
        self.quick = args.quick
        self.dur = 2 if self.quick else 5                 # seconds per load point (whole)
        self.reps = 1 if self.quick else 3
        self.concs = [1, 8, 32]
        self.m7_calls = 5000 if self.quick else 100000
        self.replay_sizes = [1000, 10000] if self.quick else [10000, 100000]
        self.streams = 100 if self.quick else 1000
        self.slow_count = 60 if self.quick else 200
        self.pg_dur = 1.5 if self.quick else 4.0
        self.cpu = CpuMeter()
        self.cpu.add(os.getpid(), "client")
        self.stacks = []            # stack dirs to stop
        self.procs = []             # Popen objects we started (own process groups)
        self.results = {"mode": "quick" if self.quick else "full", "runs": {}}
        self.failures = []
        self.t_start = time.time()

    # ---- processes --------------------------------------------------------------------------

    def stack_up(self, name, httpd, conf, extra=()):
        d = os.path.join(self.work, name)
        log(f"starting stack {name}: tests/stack up --httpd {httpd} --mpm event --conf {conf}")
        self.stacks.append(d)
        p = subprocess.run([self.stack_cmd, "up", "--dir", d, "--httpd", str(httpd), "--mpm", "event",
                            "--module", self.a.module, "--conf", conf, *extra],
                           text=True, capture_output=True)
        if p.returncode != 0:
            raise BenchError(f"tests/stack up {name} failed:\n{p.stderr[-3000:]}")
        env = read_env(os.path.join(d, "stack.env"))
        for i, pf in enumerate(env["MCP_HTTPD_PIDFILES"].split()):
            self.cpu.add(pidfile(pf), "httpd")
        self.cpu.add(pidfile(env["MCP_PG_PIDFILE"]), "postgres")
        if env.get("MCP_BACKEND_PIDFILE"):
            self.cpu.add(pidfile(env["MCP_BACKEND_PIDFILE"]), "backend")
        return d, env

    def stack_down(self, d):
        if d in self.stacks:
            self.stacks.remove(d)
        p = subprocess.run([self.stack_cmd, "down", "--dir", d], text=True, capture_output=True)
        if p.returncode != 0:
            log(f"tests/stack down {d} failed: {p.stderr[-500:]}")
            return False
        return True

    def spawn(self, name, cmd, env=None):
        logf = open(os.path.join(self.work, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True)
        with open(os.path.join(self.work, f"{name}.pid"), "w") as f:
            f.write(f"{p.pid}\n")
        self.procs.append(p)
        return p

    def stop_procs(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)   # its own group: it and its children
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        self.procs = []

    def cleanup(self):
        if getattr(self, "notifies", None):
            self.notifies.close()
            self.notifies = None
        self.stop_procs()
        ok = True
        for d in list(self.stacks):
            ok = self.stack_down(d) and ok
        return ok

    @staticmethod
    def wait_http(url, timeout=30):
        host, port, _ = split_url(url)
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                socket.create_connection((host, port), 0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise BenchError(f"nothing listens at {url} after {timeout} s")

    # ---- load ------------------------------------------------------------------------------

    def wrk(self, url, sessions_file, conc, dur, tool="echo", args='{"text":"hello"}', label=None,
            proto=PROTO):
        threads = 1 if conc == 1 else 2
        # wrk takes whole seconds only
        cmd = ["wrk", "-t", str(threads), "-c", str(conc), "-d", f"{max(1, round(dur))}s",
               "--timeout", "10s",
               "-s", LUA, url, "--", sessions_file, proto, tool, args, str(threads)]
        before, opens0 = self.cpu.snapshot(), tcp_active_opens()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate()
        after, opens1 = self.cpu.snapshot(), tcp_active_opens()
        m = re.search(r"^BENCH (\{.*\})$", out, re.M)
        if p.returncode != 0 or not m:
            raise BenchError(f"wrk failed ({' '.join(cmd)}):\n{out}\n{err}")
        r = json.loads(m.group(1))
        r["rps"] = r["good"] / (r["duration_us"] / 1e6)
        # wrk opens its connections once; everything else here keeps its connections: what is
        # left is connections opened per call (a gateway that does not reuse its backend's)
        r["tcp_opens_per_call"] = max(opens1 - opens0 - conc, 0) / r["good"]
        r["errors"] = r["bad"] + r["connect_err"] + r["read_err"] + r["write_err"] + r["timeout_err"]
        r["cpu"] = CpuMeter.delta(before, after)
        if r["good"] == 0:
            raise BenchError(f"no good answer from {url} ({label}): {r}")
        if r["errors"]:
            log(f"  note: {label or url} c={conc}: {r['errors']} errors ({r.get('first_bad')})")
        return r

    def record(self, section, key, value):
        self.results["runs"].setdefault(section, {}).setdefault(key, []).append(value)

    def runs(self, section, key):
        return self.results["runs"].get(section, {}).get(key, [])

    # ---- set-up ----------------------------------------------------------------------------

    def setup_main(self):
        node = self.a.node
        nm = os.path.join(BENCH, "node_modules")
        se_js = os.path.join(nm, "@modelcontextprotocol", "server-everything", "dist", "index.js")
        sg_js = os.path.join(nm, "supergateway", "dist", "index.js")
        loop = "file://" + os.path.join(BENCH, "loopback.mjs")
        self.se_port, self.sg_port = free_port(), free_port()
        env = dict(os.environ, PORT=str(self.se_port), NODE_ENV="production")
        se = self.spawn("server-everything", [node, "--import", loop, se_js, "streamableHttp"], env)
        self.cpu.add(se.pid, "server-everything")
        stdio_cmd = f"{shlex.quote(node)} {shlex.quote(se_js)} stdio"
        sg = self.spawn("supergateway", [node, "--import", loop, sg_js, "--stdio", stdio_cmd,
                                         "--outputTransport", "streamableHttp", "--stateful",
                                         "--port", str(self.sg_port), "--logLevel", "none"],
                        dict(os.environ, NODE_ENV="production"))
        self.cpu.add(sg.pid, "supergateway")
        self.se_pid, self.sg_pid = se.pid, sg.pid
        self.se_url = f"http://127.0.0.1:{self.se_port}/mcp"
        self.sg_url = f"http://127.0.0.1:{self.sg_port}/mcp"
        self.wait_http(self.se_url)
        self.wait_http(self.sg_url)

        conf = os.path.join(self.work, "main.conf")
        with open(conf, "w") as f:
            f.write(f"""# bench/run: extra configuration of the main stack (Included after tests/stack's own).
# Production-like logging (tests/stack logs mcp:trace2), unlimited keep-alive (as wrk and the
# backend do), MPM and database pool sized for 32 concurrent clients and the followers of
# measurement 5; one child of many threads, as the README advises (a child's group commit batches
# only its own calls in flight), never recycled (measurement 7 watches it).
{httpd_conf(1, 128)}# server-everything (Node 22, Streamable HTTP) behind mod_mcp, for measurement 2
<Location /mcp-se>
    SetHandler mcp
    MCPBackend {self.se_url}
</Location>
# the same gateway with every answer relayed on its request's thread (no event loop), for
# measurement 1's same-run comparison
<Location /mcp-threaded>
    SetHandler mcp
    MCPBackend ${{MCP_BACKEND_URL}}
    MCPAsyncStreams Off
</Location>
# the same gateway with the stream limits at their defaults (httpd_conf turns them off for the
# rest: every client here is 127.0.0.1), for measurement 1's price of the admission's slots
<Location /mcp-limits>
    SetHandler mcp
    MCPBackend ${{MCP_BACKEND_URL}}
    MCPMaxStreamsPerSession 16
    MCPMaxStreamsPerPrincipal 64
</Location>
# the same server-everything over stdio, one process per session run by mod_mcp's supervisor
# (as supergateway runs it), for measurements 2 and 9
{stdio_se_conf(node, se_js)}# three members, each the C test backend, behind one endpoint: measurement 10
{federated_conf()}""")
        d, env = self.stack_up("main", 2, conf)
        self.main_dir, self.env = d, env
        self.urls = env["MCP_URLS"].split()
        self.gw = self.urls[0]
        self.gw2 = self.urls[1]
        self.gw_se = self.gw.replace("/mcp", "/mcp-se")
        self.gw_thr = self.gw.replace("/mcp", "/mcp-threaded")
        self.gw_lim = self.gw.replace("/mcp", "/mcp-limits")
        self.gw_ses = self.gw.replace("/mcp", "/mcp-se-stdio")
        self.backend = env["MCP_BACKEND_URL"]
        # The trivial fixed-response handler: a static JSON file served by httpd's core.
        with open(os.path.join(d, "httpd-1", "htdocs", "trivial.json"), "w") as f:
            f.write('{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}]}}\n')
        self.trivial = self.gw.replace("/mcp", "/trivial.json")
        self.pg = superuser(env)
        self.httpd1_parent = pidfile(env["MCP_HTTPD_PIDFILE_1"])
        self.notifies = NotifyCounter(env["MCP_PG"])

        log("creating sessions")
        sf = lambda n: os.path.join(self.work, f"{n}.sessions")
        self.sess = {}
        mcp_sessions(self.backend, 32, sf("backend"))
        mcp_sessions(self.gw, 32, sf("gw"))
        # the JSON answer shape: a 2025-06-18 session gets application/json for a request
        mcp_sessions(self.gw, 32, sf("gwjson"), proto=JSON_PROTO)
        # 2026-07-28 clients: no session (bench/mcp.lua sends none); the era bridge takes their
        # calls to the 2025-era test backend through its pooled session
        with open(sf("gw2026"), "w") as f:
            f.write("stateless\n")
        mcp_sessions(self.gw_thr, 32, sf("gwthr"))
        mcp_sessions(self.gw_lim, 32, sf("gwlim"))
        # every call of every connection in one session (an agent's parallel tool calls), c = 8
        mcp_sessions(self.gw, 1, sf("gw1"))
        mcp_sessions(self.gw2, 32, sf("gw2"))
        mcp_sessions(self.se_url, 8, sf("se"))
        mcp_sessions(self.gw_se, 8, sf("gwse"))
        mcp_sessions(self.gw_ses, 8, sf("gwses"), workers=2)
        # the stdio supervisor and the server-everything processes it runs: their own CPU share
        # (descendants of httpd's parent otherwise count as httpd)
        self.supervisor_pid = next((c for c in children(self.httpd1_parent)
                                    if proc_comm(c).startswith("mcp-stdio")), None)
        if not self.supervisor_pid:
            raise BenchError("no mcp-stdio-supervisor under httpd's parent")
        self.cpu.add(self.supervisor_pid, "stdio supervisor+SE")
        mcp_sessions(self.sg_url, 8, sf("sg"), workers=2)
        self.sf = sf
        # one real call through each path before anything is measured
        for url, name, tool, args in ((self.backend, "backend", "echo", {"text": "hello"}),
                                      (self.gw, "gw", "echo", {"text": "hello"}),
                                      (self.se_url, "se", "echo", {"message": "hello"}),
                                      (self.gw_se, "gwse", "echo", {"message": "hello"}),
                                      (self.gw_ses, "gwses", "echo", {"message": "hello"}),
                                      (self.sg_url, "sg", "echo", {"message": "hello"})):
            sid = open(sf(name)).readline().strip()
            mcp_call(url, sid, tool, args)

    def sql(self, q, *params):
        with self.pg.cursor() as c:
            c.execute(q, params)
            return c.fetchall() if c.description else None

    def notify_triggers(self, on):
        """Enables or disables the schema's NOTIFY trigger (streams_notify: a followed stream's
        status change; the writers' own pg_notify calls for followed streams stay)."""
        for rel, trg in self.sql("SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c"
                                 " ON c.oid = t.tgrelid WHERE t.tgname = 'streams_notify'"):
            self.sql(f"ALTER TABLE mcp.{rel} {'ENABLE' if on else 'DISABLE'} TRIGGER {trg}")

    def group_commit(self, on):
        """MCPDatabaseGroupCommit off on the main stack (or back to the default, on): the
        configuration file is rewritten and the instances restarted gracefully."""
        conf = os.path.join(self.work, "main.conf")
        with open(conf) as f:
            text = f.read().split(GROUP_MARK)[0]
        if not on:
            text += (f"{GROUP_MARK}\n<IfDirective MCPDatabaseGroupCommit>\n"
                     "    MCPDatabaseGroupCommit off\n</IfDirective>\n")
        with open(conf, "w") as f:
            f.write(text)
        run([self.stack_cmd, "graceful", "--dir", self.main_dir])
        time.sleep(2)   # the old children finish, the new ones start
        for name, url in (("gw", self.gw), ("gw2", self.gw2)):
            mcp_call(url, open(self.sf(name)).readline().strip(), "echo", {"text": "hello"})

    def wal_lsn(self):
        """Bytes of WAL written so far (its insert position)."""
        return int(self.sql("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")[0][0])

    def seq_value(self, name):
        return self.sql(f"SELECT last_value FROM {name}")[0][0]

    def next_multixact(self):
        """The next MultiXact id - 1: its growth counts the MultiXacts made meanwhile (the row
        locks that concurrent transactions share, e.g. on one session's row)."""
        return int(self.sql("SELECT mxid_age('1'::xid)")[0][0])

    def next_xid(self):
        """The next transaction id to be assigned: its growth counts the write transactions
        committed meanwhile (exactly, unlike the statistics counters, which lag)."""
        return int(self.sql("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")[0][0])

    # ---- measurement 1 and 3 (gateway side) ---------------------------------------------------

    def m1(self):
        log("measurement 1: tools/call echo — backend alone, through mod_mcp, trivial handler")
        targets = [("backend", self.backend, self.sf("backend")),
                   ("mod_mcp", self.gw, self.sf("gw")),
                   ("trivial", self.trivial, self.sf("gw")),
                   ("mod_mcp-json", self.gw, self.sf("gwjson")),
                   ("mod_mcp-threaded", self.gw_thr, self.sf("gwthr")),
                   ("mod_mcp-limits", self.gw_lim, self.sf("gwlim")),
                   ("mod_mcp-1session", self.gw, self.sf("gw1")),
                   ("mod_mcp-2026", self.gw, self.sf("gw2026"))]
        proto = lambda name: {"mod_mcp-json": JSON_PROTO,
                              "mod_mcp-2026": MODERN_PROTO}.get(name, PROTO)
        # calls of one session: the point of issue 25 (c = 8 only)
        only = {"mod_mcp-1session": (8,)}
        for name, url, sfile in targets:   # warm-up
            self.wrk(url, sfile, 8, 1, label=name, proto=proto(name))
        for rep in range(self.reps):
            for c in self.concs:
                k = rep % len(targets)
                order = targets[k:] + targets[:k]
                for name, url, sfile in order:
                    if c not in only.get(name, (c,)):
                        continue
                    gw = name.startswith("mod_mcp")
                    if gw:
                        ev0, st0, tx0 = (self.seq_value("mcp.events_id_seq"),
                                         self.seq_value("mcp.streams_id_seq"), self.next_xid())
                        mx0 = self.next_multixact()
                        nt0, wal0 = self.notifies.count, self.wal_lsn()
                    r = self.wrk(url, sfile, c, self.dur, label=name, proto=proto(name))
                    if gw:
                        time.sleep(0.3)   # the last notifications on their way to the counter
                        secs = r["duration_us"] / 1e6
                        r["events_per_s"] = (self.seq_value("mcp.events_id_seq") - ev0) / secs
                        r["streams_per_s"] = (self.seq_value("mcp.streams_id_seq") - st0) / secs
                        r["commits_per_s"] = (self.next_xid() - tx0) / secs
                        r["notifies_per_s"] = (self.notifies.count - nt0) / secs
                        r["wal_bytes_per_s"] = (self.wal_lsn() - wal0) / secs
                        r["multixacts_per_s"] = (self.next_multixact() - mx0) / secs
                    r["rss_kb"] = {
                        "httpd": sum(proc_status(p)["rss_kb"] for p in
                                     [self.httpd1_parent] + children(self.httpd1_parent)),
                        "backend": proc_status(pidfile(self.env.get("MCP_BACKEND_PIDFILE", "")))
                        ["rss_kb"]}
                    self.record("m1", f"{name}/{c}", r)
                    log(f"  rep {rep + 1} c={c:<2} {name:8s} {r['rps']:9.0f} req/s  "
                        f"p50 {r['p50_us'] / 1000:7.2f} ms  p99 {r['p99_us'] / 1000:7.2f} ms")
        self.results["table_stats"] = [
            dict(zip(("table", "updates", "hot_updates", "inserts"), row)) for row in self.sql(
                "SELECT relname, n_tup_upd, n_tup_hot_upd, n_tup_ins FROM pg_stat_user_tables"
                " WHERE schemaname = 'mcp' ORDER BY relname")]

    # ---- profile: where the CPU goes during mod_mcp calls (perf, when installed) --------------

    PG_FUNCS = [
        ("parse (pg_parse_query)", "pg_parse_query"),
        ("analyze + rewrite", "pg_analyze_and_rewrite_varparams"),
        ("plan (pg_plan_queries)", "pg_plan_queries"),
        ("execute (standard_ExecutorRun)", "standard_ExecutorRun"),
        ("statement triggers incl. NOTIFY trigger (AfterTriggerEndQuery)", "AfterTriggerEndQuery"),
        ("commit (CommitTransactionCommand)", "CommitTransactionCommand"),
        ("… WAL flush (XLogFlush)", "XLogFlush"),
        ("… queueing NOTIFY at commit (PreCommit_Notify)", "PreCommit_Notify"),
        ("LISTEN sessions forwarding notifications (ProcessNotifyInterrupt)",
         "ProcessNotifyInterrupt"),
        ("reading from the client socket (secure_read)", "secure_read"),
    ]

    def profile(self):
        if not shutil.which("perf"):
            log("profile: perf is not installed (apt-get install linux-perf); skipped")
            return
        data = os.path.join(self.work, "perf.data")
        secs = max(2, self.dur - 1)
        log(f"profile: perf record -a -g for {secs} s during mod_mcp calls at concurrency 8")
        p = subprocess.Popen(["wrk", "-t", "2", "-c", "8", "-d", f"{secs + 2}s", "--timeout", "10s",
                              "-s", LUA, self.gw, "--", self.sf("gw"), PROTO, "echo",
                              '{"text":"hello"}', "2"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        rec = subprocess.run(["perf", "record", "-a", "-g", "-F", "499", "-o", data, "--",
                              "sleep", str(secs)], capture_output=True, text=True)
        p.communicate()
        if rec.returncode != 0:
            log(f"profile: perf record failed: {rec.stderr[-300:]}")
            return

        def report(*args):
            out = subprocess.run(["perf", "report", "-i", data, "--stdio", "-g", "none", *args],
                                 capture_output=True, text=True).stdout
            rows = []
            for line in out.splitlines():
                if line.startswith("#") or not line.strip():
                    continue
                rows.append(line.strip())
            return rows

        prof = {"seconds": secs, "by_process": [], "pg": [], "httpd": []}
        for line in report("--no-children", "--sort", "comm"):
            m = re.match(r"([\d.]+)%\s+(.+)$", line)
            if m and float(m.group(1)) >= 0.5:
                prof["by_process"].append((m.group(2), float(m.group(1))))
        pg_rows = report("--children", "--comm", "postgres", "--sort", "sym")
        for label, fn in self.PG_FUNCS:
            for line in pg_rows:
                m = re.match(r"([\d.]+)%\s+([\d.]+)%\s+\[[.k]\]\s+(\S+)", line)
                if m and m.group(3) == fn:
                    prof["pg"].append((label, float(m.group(1))))
                    break
        # (perf's --comm filter lets other processes' kernel samples through: filter here)
        for line in report("--no-children", "--sort", "comm,dso"):
            m = re.match(r"([\d.]+)%\s+(\S+)\s+(.+)$", line)
            if m and m.group(2) == "apache2" and float(m.group(1)) >= 0.2:
                prof["httpd"].append((m.group(3).replace(" (deleted)", "").strip(),
                                      float(m.group(1))))
        self.results["profile"] = prof
        os.unlink(data)

    # ---- attribution: what limits mod_mcp's throughput -----------------------------------------

    def sample_waits(self, stop, counts):
        conn = superuser(self.env)
        cur = conn.cursor()
        while not stop.is_set():
            cur.execute("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU (no wait)')"
                        "  FROM pg_stat_activity WHERE datname = 'mcp' AND state = 'active'"
                        "   AND pid <> pg_backend_pid() AND query NOT LIKE 'LISTEN%'")
            for (w,) in cur.fetchall():
                counts[w] = counts.get(w, 0) + 1
            stop.wait(0.02)
        conn.close()

    def attribution(self):
        log("attribution: mod_mcp c=32 as shipped / NOTIFY triggers off / synchronous_commit off"
            " / group commit off")
        c = 32
        variants = ["as shipped", "NOTIFY triggers disabled", "synchronous_commit off",
                    GROUP_VARIANT]
        k = len(variants)
        for rep in range(self.reps):
            for v in variants[rep % k:] + variants[:rep % k]:
                try:
                    if v == GROUP_VARIANT:
                        self.group_commit(False)
                    elif v == "NOTIFY triggers disabled":
                        self.notify_triggers(False)
                    elif v == "synchronous_commit off":
                        self.sql("ALTER SYSTEM SET synchronous_commit = off")
                        self.sql("SELECT pg_reload_conf()")
                        time.sleep(0.2)
                    stop, counts = threading.Event(), {}
                    t = threading.Thread(target=self.sample_waits, args=(stop, counts))
                    t.start()
                    tx0 = self.next_xid()
                    try:
                        r = self.wrk(self.gw, self.sf("gw"), c, self.dur, label=v)
                    finally:
                        stop.set()
                        t.join()
                    r["xacts_per_call"] = (self.next_xid() - tx0) / max(
                        r["rps"] * r["duration_us"] / 1e6, 1)
                    r["waits"] = counts
                    self.record("attr", v, r)
                    log(f"  rep {rep + 1} {v:26s} {r['rps']:7.0f} req/s  p50 "
                        f"{r['p50_us'] / 1000:6.2f} ms")
                finally:
                    if v == GROUP_VARIANT:
                        self.group_commit(True)
                    self.notify_triggers(True)
                    self.sql("ALTER SYSTEM RESET synchronous_commit")
                    self.sql("SELECT pg_reload_conf()")

    # ---- measurement 8: HTTP/1.1, TLS and HTTP/2 ------------------------------------------------

    def h2load(self, url, sid, conns, streams, dur, label):
        """h2load (nghttp2-client): conns connections with at most `streams` requests in flight
        on each (-m); h2c with prior knowledge for http://, ALPN h2 for https://. The body is one
        tools/call of echo in a pre-created session; latencies come from h2load's per-request log."""
        body = os.path.join(self.work, "h2load-body.json")
        with open(body, "w") as f:
            f.write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
                    '"arguments":{"text":"hello"}}}')
        logf = os.path.join(self.work, "h2load-requests.log")
        if os.path.exists(logf):
            os.unlink(logf)   # h2load appends to it
        threads = 1 if conns == 1 else 2
        cmd = ["h2load", "-c", str(conns), "-m", str(streams), "-t", str(threads),
               "-D", str(max(1, round(dur))), "-d", body, "--log-file", logf,
               "-H", "Content-Type: application/json",
               "-H", "Accept: application/json, text/event-stream",
               "-H", f"Mcp-Session-Id: {sid}", "-H", f"MCP-Protocol-Version: {PROTO}", url]
        before = self.cpu.snapshot()
        p = subprocess.run(cmd, capture_output=True, text=True)
        after = self.cpu.snapshot()
        fin = re.search(r"^finished in ([\d.]+)(m?s),", p.stdout, re.M)
        req = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                        r"(\d+) failed, (\d+) errored, (\d+) timeout", p.stdout, re.M)
        codes = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", p.stdout, re.M)
        proto = re.search(r"^Application protocol: (\S+)", p.stdout, re.M)
        if p.returncode != 0 or not (fin and req and codes):
            raise BenchError(f"h2load failed ({' '.join(cmd)}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        want = "h2" if url.startswith("https:") else "h2c"
        if not proto or proto.group(1) != want:
            raise BenchError(f"h2load did not speak {want} to {url}: {proto and proto.group(1)}")
        lat = sorted(int(line.split("\t")[2]) for line in open(logf) if line.count("\t") == 2
                     and line.split("\t")[1].startswith("2"))
        secs = float(fin.group(1)) / (1000 if fin.group(2) == "ms" else 1)
        good = int(codes.group(1))
        bad = sum(int(x) for x in codes.groups()[1:]) + sum(int(x) for x in req.groups()[4:])
        if not lat or good == 0:
            raise BenchError(f"no good answer from {url} ({label}): {p.stdout[-1000:]}")
        r = {"rps": good / secs, "good": good, "errors": bad, "duration_us": secs * 1e6,
             "p50_us": lat[len(lat) // 2], "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
             "cpu": CpuMeter.delta(before, after)}
        if bad:
            log(f"  note: {label} c={conns}x{streams}: {bad} errors")
        return r

    def curl_call(self, url, opts, sid):
        """One tools/call through curl with the given protocol options; checks the result."""
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": "hello"}}})
        p = subprocess.run(["curl", "-sS", *opts, "-w", "\n%{http_version}", "-H", f"Accept: {HDRS['Accept']}",
                            "-H", "Content-Type: application/json", "-H", f"Mcp-Session-Id: {sid}",
                            "-H", f"MCP-Protocol-Version: {PROTO}", "--data-binary", body, url],
                           capture_output=True, text=True, timeout=30)
        text, _, version = p.stdout.rpartition("\n")
        if p.returncode != 0 or '"result"' not in text:
            raise BenchError(f"tools/call via curl {' '.join(opts)} at {url}: {p.stderr or text[:300]}")
        return version

    def m8(self):
        """tools/call echo through mod_mcp over HTTP/1.1, HTTP/1.1 + TLS, h2c and h2 + TLS, on one
        stack started with --tls --http2 (the main stack stays as older trees can start it)."""
        log("measurement 8: HTTP/1.1 vs TLS vs HTTP/2 (h2c, h2 over TLS), tools/call echo")
        help_text = subprocess.run([self.stack_cmd, "up", "--help"], capture_output=True, text=True)
        if "--tls" not in help_text.stdout + help_text.stderr:
            log("  skipped: this tree's tests/stack has no --tls/--http2")
            self.results["m8_skipped"] = "the benchmarked tree's tests/stack has no --tls/--http2"
            return
        if not shutil.which("h2load"):
            raise BenchError("h2load is missing (Debian package nghttp2-client)")
        conf = os.path.join(self.work, "main.conf")
        d, env = self.stack_up("protocols", 1, conf, extra=("--tls", "--http2"))
        try:
            plain, tls, ca = env["MCP_HTTP_URL"], env["MCP_HTTPS_URL"], env["MCP_CA"]
            # Every point uses one session: h2load sends the same headers on every request, and
            # calls of one session contend for its row, so wrk must not rotate sessions here.
            sfile = os.path.join(self.work, "protocols.sessions")
            sids = mcp_sessions(plain, 1, sfile)
            # One checked call per way in, and what curl says it spoke.
            spoke = {name: self.curl_call(url, opts, sids[0]) for name, url, opts in (
                ("HTTP/1.1", plain, ["--http1.1"]), ("HTTP/1.1+TLS", tls, ["--http1.1", "--cacert", ca]),
                ("h2c", plain, ["--http2-prior-knowledge"]), ("h2+TLS", tls, ["--http2", "--cacert", ca]))}
            if spoke != {"HTTP/1.1": "1.1", "HTTP/1.1+TLS": "1.1", "h2c": "2", "h2+TLS": "2"}:
                raise BenchError(f"protocols spoken: {spoke}")
            # wrk: c connections, one call at a time on each; h2load -m 1: the same over HTTP/2;
            # and HTTP/2's own shape, one connection carrying c calls at once.
            points = [
                ("HTTP/1.1", lambda c: self.wrk(plain, sfile, c, self.dur, label="HTTP/1.1")),
                ("HTTP/1.1+TLS", lambda c: self.wrk(tls, sfile, c, self.dur, label="HTTP/1.1+TLS")),
                ("h2c", lambda c: self.h2load(plain, sids[0], c, 1, self.dur, "h2c")),
                ("h2+TLS", lambda c: self.h2load(tls, sids[0], c, 1, self.dur, "h2+TLS")),
                ("h2+TLS 1 conn", lambda c: self.h2load(tls, sids[0], 1, c, self.dur, "h2+TLS 1 conn")),
            ]
            concs = [8] if self.quick else [8, 32]
            if not self.quick:
                for _, fn in points:   # warm-up
                    fn(8)
            for rep in range(self.reps):
                for c in concs:
                    for name, fn in points[rep % len(points):] + points[:rep % len(points)]:
                        r = fn(c)
                        self.record("m8", f"{name}/{c}", r)
                        log(f"  rep {rep + 1} c={c:<2} {name:14s} {r['rps']:8.0f} req/s  "
                            f"p50 {r['p50_us'] / 1000:7.2f} ms  p99 {r['p99_us'] / 1000:7.2f} ms")
            self.results["m8_concs"] = concs
        finally:
            self.stack_down(d)

    # ---- measurement 2 ------------------------------------------------------------------------

    def m2(self):
        log("measurement 2: supergateway vs mod_mcp, both in front of server-everything")
        targets = [("supergateway", self.sg_url, self.sf("sg")),
                   ("mod_mcp→SE", self.gw_se, self.sf("gwse")),
                   ("mod_mcp→stdio SE", self.gw_ses, self.sf("gwses")),
                   ("SE alone", self.se_url, self.sf("se"))]
        args = '{"message":"hello"}'
        for name, url, sfile in targets:
            self.wrk(url, sfile, 8, 1, args=args, label=name)
        for rep in range(self.reps):
            for c in self.concs:
                for name, url, sfile in targets[rep % 4:] + targets[:rep % 4]:
                    r = self.wrk(url, sfile, c, self.dur, args=args, label=name)
                    self.record("m2", f"{name}/{c}", r)
                    log(f"  rep {rep + 1} c={c:<2} {name:16s} {r['rps']:8.0f} req/s  "
                        f"p50 {r['p50_us'] / 1000:7.2f} ms  p99 {r['p99_us'] / 1000:7.2f} ms")

    # ---- measurement 3: the PostgreSQL ceiling for the same INSERT ------------------------------

    def m3(self):
        log("measurement 3: raw INSERT ceiling (bench/pg_insert.c, libpq, bound parameters)")
        sid = "bench-pg-insert-session-0001"
        self.sql("INSERT INTO mcp.sessions (id, backend_url, protocol_version) VALUES (%s, %s, %s)"
                 " ON CONFLICT DO NOTHING", sid, "bench", PROTO)
        # Every row is its own transaction: unnamed (PQexecParams, as apr_dbd sends it) and
        # prepared once per connection (as mod_mcp sends its statements) at each concurrency.
        # Prepared at concurrency 1 is the floor report.py sets beside a call's two
        # transactions: the smallest durable write there is, alone.
        points = [(mode, c) for c in self.concs for mode in ("exec", "prepared")]
        for rep in range(self.reps):
            for mode, c in points:
                first = self.sql("INSERT INTO mcp.streams (session_id, kind, status) SELECT %s,"
                                 " 'request', 'complete' FROM generate_series(1, %s) RETURNING id",
                                 sid, c)
                first = min(x[0] for x in first)
                r, cpu = self.pg_insert(sid, first, c, mode)
                r["cpu"] = cpu
                key = f"{mode}/{c}"
                self.record("m3", key, r)
                log(f"  rep {rep + 1} {key:22s} {r['rate']:8.0f} inserts/s  p50 "
                    f"{r['p50_us'] / 1000:6.2f} ms")

    def pg_insert(self, sid, first, conc, mode):
        """One bench/pg_insert run: its result, and the CPU used while it inserted (its
        connections made before the first snapshot and closed after the second, so that their
        backends' start-up and exit are not in it)."""
        p = subprocess.Popen([self.a.pg_insert, self.env["MCP_PG"], sid, str(first), str(conc),
                              str(self.pg_dur), mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        def say(word):
            try:
                p.stdin.write(word + "\n")
                p.stdin.flush()
            except BrokenPipeError:
                pass   # it ended: its exit status and output say why

        lines, m, before, after = [], None, None, None
        for line in p.stdout:
            lines.append(line)
            if line.startswith("CONNECTED") and before is None:
                before = self.cpu.snapshot()
                say("go")
            elif (m := re.match(r"^BENCH (\{.*\})$", line)):
                after = self.cpu.snapshot()
                say("done")
        try:
            p.stdin.close()
        except BrokenPipeError:
            pass
        err = p.stderr.read()
        if p.wait() != 0 or not m or before is None:
            raise BenchError(f"pg_insert failed: {''.join(lines)}{err}")
        return json.loads(m.group(1)), CpuMeter.delta(before, after)

    # ---- measurement 4: replay ----------------------------------------------------------------

    def m4(self):
        log("measurement 4: replay of stored events (GET with Last-Event-ID)")
        sid = mcp_session(self.gw)
        msg = ('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":'
               '"bench-1","progress":%s,"total":100000,"message":"step %s of 100000"}}')
        streams = {}
        for n in self.replay_sizes:
            sid_row = self.sql(
                "INSERT INTO mcp.streams (session_id, kind, request_id_text, request_id, method,"
                " status, completed_at) VALUES (%s, 'request', '1', '1', 'tools/call', 'complete',"
                " now())"
                " RETURNING id", sid)[0][0]
            t0 = time.time()
            self.sql(
                "INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind,"
                "                        message_text, message)"
                " SELECT session_id, stream_id, seq, direction, kind, t, t::jsonb FROM ("
                " SELECT %s AS session_id, %s AS stream_id, 0::bigint AS seq, 'in' AS direction,"
                "        'message' AS kind, '{\"jsonrpc\":\"2.0\",\"id\":1,"
                "\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}' AS t"
                " UNION ALL SELECT %s, %s, 1, 'out', 'priming', NULL"
                " UNION ALL SELECT %s, %s, g + 1, 'out', 'message',"
                "   format(%s, g, g) FROM generate_series(1, %s) g) v",
                sid, sid_row, sid, sid_row, sid, sid_row, msg, n)
            self.sql("ANALYZE mcp.events")
            log(f"  stored {n} events in stream {sid_row} ({time.time() - t0:.1f} s)")
            streams[n] = sid_row
        host, port, path = split_url(self.gw)
        for rep in range(self.reps):
            for n in self.replay_sizes:
                sid_row = streams[n]
                out = os.path.join(self.work, f"replay-{n}.sse")
                before = self.cpu.snapshot()
                p = subprocess.run(
                    ["curl", "-sS", "-N", "--max-time", "300", "-o", out, "-w",
                     "%{http_code} %{time_starttransfer} %{time_total} %{size_download}",
                     "-H", "Accept: text/event-stream", "-H", f"Mcp-Session-Id: {sid}",
                     "-H", f"MCP-Protocol-Version: {PROTO}", "-H", f"Last-Event-ID: {sid_row}-1",
                     self.gw], text=True, capture_output=True)
                after = self.cpu.snapshot()
                code, ttfb, total, size = p.stdout.split()
                with open(out, "rb") as f:
                    data = f.read()
                events = data.count(b"\nid: ") + (1 if data.startswith(b"id: ") else 0)
                if code != "200" or events != n:
                    raise BenchError(f"replay of {n}: HTTP {code}, {events} events received "
                                     f"({p.stderr[-300:]})")
                os.unlink(out)
                r = {"n": n, "seconds": float(total), "ttfb": float(ttfb), "bytes": int(size),
                     "events_per_s": n / float(total),
                     "cpu": CpuMeter.delta(before, after)}
                # the database's own time for the same rows: one query that reads them in order
                # and renders each message as text, as the replay does, without sending them
                t0 = time.monotonic()
                got = self.sql("SELECT count(*), sum(length(m)) FROM (SELECT seq, message_text AS m"
                               " FROM mcp.events WHERE stream_id = %s AND seq > 1"
                               " AND direction = 'out' ORDER BY seq) s", sid_row)[0][0]
                r["db_read_seconds"] = time.monotonic() - t0
                if got != n:
                    raise BenchError(f"replay reference read {got} rows, expected {n}")
                self.record("m4", str(n), r)
                log(f"  rep {rep + 1} replay {n:>6} events: {r['seconds']:.3f} s "
                    f"({r['events_per_s']:,.0f} events/s, {int(size) / 1e6:.1f} MB); "
                    f"DB read {r['db_read_seconds']:.3f} s")

    # ---- measurement 9: memory, mod_mcp vs supergateway, per session count --------------------

    def m9(self):
        """Both gateways in front of server-everything with N live sessions, each having made one
        call: the memory of mod_mcp's httpd instance (parent and children) against supergateway's
        (its process and the stdio server-everything it runs for each session)."""
        log("measurement 9: memory at 16 and 64 sessions, mod_mcp vs supergateway")
        args = {"message": "hello"}
        # measurement 2 made 8 sessions through each (bench.sf("sg"), bench.sf("gwse"))
        have = {"sg": 8, "gw": 8, "gws": 8}
        for n in (16, 64):
            for name, url in (("gw", self.gw_se), ("sg", self.sg_url), ("gws", self.gw_ses)):
                new = n - have[name]
                path = os.path.join(self.work, f"m9-{name}-{n}.sessions")
                sids = mcp_sessions(url, new, path, workers=2)
                for sid in sids:
                    mcp_call(url, sid, "echo", args)
                have[name] = n
            time.sleep(1)   # let the new processes settle (Node's heap after start-up)
            sg_pid, se_pid = self.sg_pid, self.se_pid
            h_rss, h_pss, h_n = tree_mem(self.httpd1_parent)
            # the stdio supervisor and its processes are httpd's descendants: apart
            s_rss, s_pss, s_n = tree_mem(self.supervisor_pid)
            h_rss, h_pss, h_n = h_rss - s_rss, h_pss - s_pss, h_n - s_n
            g_rss, g_pss, g_n = tree_mem(sg_pid)
            sg_own = proc_status(sg_pid)
            se_rss, se_pss, _ = tree_mem(se_pid)
            r = {"sessions": n, "httpd_rss_kb": h_rss, "httpd_pss_kb": h_pss, "httpd_procs": h_n,
                 "sg_rss_kb": g_rss, "sg_pss_kb": g_pss, "sg_procs": g_n,
                 "sg_own_rss_kb": sg_own["rss_kb"], "se_http_rss_kb": se_rss,
                 "se_http_pss_kb": se_pss, "stdio_rss_kb": s_rss, "stdio_pss_kb": s_pss,
                 "stdio_procs": s_n}
            self.results.setdefault("m9", {})[str(n)] = r
            log(f"  {n} sessions: httpd {h_rss / 1024:.1f} MiB RSS ({h_n} processes), "
                f"supergateway {g_rss / 1024:.1f} MiB RSS ({g_n} processes), "
                f"ratio {h_rss / max(g_rss, 1):.3f}; mod_mcp's stdio supervisor "
                f"{s_rss / 1024:.1f} MiB RSS ({s_n} processes)")

    # ---- measurement 10: a federated endpoint (3 members) vs the single-backend one ------------

    def m10(self):
        """tools/call echo and tools/list through /mcp-fed3 (three members, each the C test
        backend) beside /mcp (that backend alone behind mod_mcp) and the backend itself, and
        tools/list through /mcp-fed1 (one member): calls/s and latency, interleaved. Needs
        self.gw, self.backend, self.sf and the sessions sf("gw") and sf("backend") (setup_main;
        bench/federation.py)."""
        log("measurement 10: federation, tools/call and tools/list through 3 members vs 1")
        fed, fed1 = self.gw.replace("/mcp", "/mcp-fed3"), self.gw.replace("/mcp", "/mcp-fed1")
        try:
            mcp_sessions(fed, 32, self.sf("fed3"))
            mcp_sessions(fed1, 32, self.sf("fed1"))
        except BenchError as e:
            self.results["m10_skipped"] = f"no federated endpoint ({str(e)[:200]})"
            log(f"  skipped: {self.results['m10_skipped']}")
            return
        echo = '{"text":"hello"}'
        sid = open(self.sf("fed3")).readline().strip()
        mcp_call(fed, sid, FED_TOOL, {"text": "hello"})
        calls = [("single", self.gw, "gw", "echo"), ("federated", fed, "fed3", FED_TOOL)]
        lists = [("backend", self.backend, "backend"), ("single", self.gw, "gw"),
                 ("federated1", fed1, "fed1"), ("federated", fed, "fed3")]
        concs = [1, 8]
        for name, url, sf, tool in calls:   # warm-up: every child, its connections and caches
            self.wrk(url, self.sf(sf), 8, 1, tool=tool, args=echo, label=f"call {name}")
        for name, url, sf in lists:
            self.wrk(url, self.sf(sf), 8, 1, tool="tools/list", label=f"list {name}")
        for rep in range(self.reps):
            for c in concs:
                for name, url, sf, tool in calls[rep % 2:] + calls[:rep % 2]:
                    r = self.wrk(url, self.sf(sf), c, self.dur, tool=tool, args=echo,
                                 label=f"call {name}")
                    self.record("m10", f"call {name}/{c}", r)
                    log(f"  rep {rep + 1} c={c} tools/call {name:9s} {r['rps']:7.0f} calls/s  "
                        f"p50 {r['p50_us'] / 1000:6.2f} ms  p99 {r['p99_us'] / 1000:6.2f} ms")
            for name, url, sf in lists[rep % 4:] + lists[:rep % 4]:
                r = self.wrk(url, self.sf(sf), 1, self.dur, tool="tools/list",
                             label=f"list {name}")
                self.record("m10", f"list {name}/1", r)
                log(f"  rep {rep + 1} c=1 tools/list {name:10s} {r['rps']:6.0f} lists/s  "
                    f"p50 {r['p50_us'] / 1000:6.2f} ms  p99 {r['p99_us'] / 1000:6.2f} ms")
        self.results["m10_concs"] = concs
        self.results["m10_members"] = len(FED_MEMBERS)
        self.results["m10_tool"] = FED_TOOL

    # ---- measurement 5: cross-process delivery -------------------------------------------------

    def m5_once(self, loaded):
        sid = mcp_session(self.gw)
        count, interval = self.slow_count, 10
        h1, p1, path = split_url(self.gw)
        h2, p2, _ = split_url(self.gw2)
        first_id = {}
        got_id = threading.Event()
        errors = []

        def owner():
            try:
                c = http.client.HTTPConnection(h1, p1, timeout=60)
                body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                        "params": {"name": "slow", "arguments": {"count": count,
                                                                 "interval_ms": interval},
                                   "_meta": {"progressToken": "bench"}}}
                c.request("POST", path, json.dumps(body),
                          dict(HDRS, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": PROTO}))
                r = c.getresponse()
                while True:
                    line = r.readline()
                    if not line:
                        break
                    if line.startswith(b"id: ") and not got_id.is_set():
                        first_id["id"] = line[4:].strip().decode()
                        got_id.set()
                c.close()
            except Exception as e:   # noqa: BLE001 - reported below
                errors.append(f"owner: {e}")
                got_id.set()

        received = {}
        connected = {}

        def follower():
            try:
                c = http.client.HTTPConnection(h2, p2, timeout=60)
                c.request("GET", path, headers={
                    "Accept": "text/event-stream", "Mcp-Session-Id": sid,
                    "MCP-Protocol-Version": PROTO, "Last-Event-ID": first_id["id"]})
                r = c.getresponse()
                connected["t"] = time.time()
                if r.status != 200:
                    errors.append(f"follower: HTTP {r.status} {r.read()[:200]!r}")
                    return
                while True:
                    line = r.readline()
                    if not line:
                        break
                    if line.startswith(b"id: "):
                        received[int(line[4:].strip().decode().split("-")[1])] = time.time()
                c.close()
            except Exception as e:   # noqa: BLE001
                errors.append(f"follower: {e}")

        load = []
        if loaded:
            d = count * interval / 1000.0 + 3
            for url, sf in ((self.gw, self.sf("gw")), (self.gw2, self.sf("gw2"))):
                lp = subprocess.Popen(["wrk", "-t", "1", "-c", "16", "-d", f"{d:.0f}s", "--timeout",
                                       "10s", "-s", LUA, url, "--", sf, PROTO, "echo",
                                       '{"text":"hello"}', "1"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                self.cpu.add(lp.pid, "client")
                load.append(lp)
            time.sleep(1.0)
        to = threading.Thread(target=owner)
        to.start()
        got_id.wait(30)
        if "id" not in first_id:
            raise BenchError(f"measurement 5: no priming event from the owner: {errors}")
        stream_id = int(first_id["id"].split("-")[0])
        tf = threading.Thread(target=follower)
        tf.start()
        to.join(120)
        tf.join(120)
        load_rps = 0.0
        for lp in load:
            out, _ = lp.communicate()
            m = re.search(r"^BENCH (\{.*\})$", out, re.M)
            if m:
                j = json.loads(m.group(1))
                load_rps += j["good"] / (j["duration_us"] / 1e6)
        if errors:
            raise BenchError(f"measurement 5: {errors}")
        rows = self.sql("SELECT seq, extract(epoch FROM created_at)::float8 FROM mcp.events"
                        " WHERE stream_id = %s AND direction = 'out' AND kind = 'message'",
                        stream_id)
        created = dict(rows)
        t_conn = connected["t"]
        delays = sorted((received[s] - created[s]) * 1000.0 for s in received
                        if s in created and created[s] > t_conn + 0.005)
        if len(delays) < count // 4:
            raise BenchError(f"measurement 5: only {len(delays)} live events of {count} "
                             f"(received {len(received)})")
        pct = lambda q: delays[min(int(len(delays) * q), len(delays) - 1)]
        return {"n": len(delays), "received": len(received), "p50_ms": pct(0.5),
                "p99_ms": pct(0.99), "max_ms": delays[-1], "load_rps": load_rps}

    def m5(self):
        log("measurement 5: cross-process delivery (insert on httpd-1, resumed on httpd-2)")
        for rep in range(self.reps):
            for loaded in ((False, True) if rep % 2 == 0 else (True, False)):
                r = self.m5_once(loaded)
                key = "heavy" if loaded else "light"
                self.record("m5", key, r)
                log(f"  rep {rep + 1} {key:5s} load: {r['n']} live events, p50 {r['p50_ms']:.2f} "
                    f"ms, p99 {r['p99_ms']:.2f} ms (background {r['load_rps']:.0f} calls/s)")

    # ---- measurement 7: memory over time ------------------------------------------------------

    def httpd_snapshot(self, parent):
        pids = [parent] + children(parent)
        procs = {p: proc_status(p) for p in pids}
        return {"pids": sorted(procs), "rss_kb": sum(s["rss_kb"] for s in procs.values()),
                "pss_kb": sum(s["pss_kb"] for s in procs.values()),
                "fds": sum(s["fds"] for s in procs.values()),
                "threads": sum(s["threads"] for s in procs.values()),
                "per_pid": procs}

    def m7(self, rate_hint):
        total = self.m7_calls
        log(f"measurement 7: httpd RSS and fds before/after {total:,} calls (concurrency 8)")
        parent = self.httpd1_parent
        snaps = [dict(self.httpd_snapshot(parent), calls=0)]
        st0 = self.seq_value("mcp.streams_id_seq")
        done_calls = 0
        step = total // 4
        bad = 0
        while done_calls < total:
            target = min(done_calls + step, total)
            while done_calls < target:
                secs = max(1.0, (target - done_calls) / max(rate_hint, 50.0))
                r = self.wrk(self.gw, self.sf("gw"), 8, secs, label="m7")
                done_calls += r["good"]
                bad += r["errors"]
                rate_hint = r["rps"]
            served = self.seq_value("mcp.streams_id_seq") - st0
            snaps.append(dict(self.httpd_snapshot(parent), calls=done_calls, served=served))
            log(f"  after {done_calls:,} calls: RSS {snaps[-1]['rss_kb'] / 1024:.1f} MiB, "
                f"fds {snaps[-1]['fds']}, threads {snaps[-1]['threads']}")
        self.results["m7"] = {"snapshots": snaps, "errors": bad}

    # ---- measurement 6: 1,000 idle standalone streams ------------------------------------------

    def m6(self):
        n = self.streams
        log(f"measurement 6: {n} idle standalone GET streams on one instance")
        conf = os.path.join(self.work, "streams.conf")
        children_n, tpc = 5, 250
        with open(conf, "w") as f:
            f.write(f"""# bench/run: one instance sized for {n} idle standalone streams. Each stream holds a
# worker thread (and a backend connection) while it relays, so MaxRequestWorkers must exceed
# the number of streams; all children are started up front and never stopped, so that the
# baseline already counts their threads.
LogLevel warn
MaxKeepAliveRequests 0
ThreadLimit {tpc}
ThreadsPerChild {tpc}
ServerLimit {children_n}
StartServers {children_n}
MaxRequestWorkers {children_n * tpc}
MinSpareThreads 1
MaxSpareThreads {children_n * tpc}
MaxConnectionsPerChild 0
# Every client is 127.0.0.1: no per-address limits (older modules, --tree, lack the directives).
<IfDirective MCPMaxStreamsPerPrincipal>
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
</IfDirective>
""")
        d, env = self.stack_up("streams", 1, conf)
        url = env["MCP_URL"]
        host, port, path = split_url(url)
        parent = pidfile(env["MCP_HTTPD_PIDFILE_1"])
        pg = superuser(env)
        backend_pid = pidfile(env["MCP_BACKEND_PIDFILE"])

        def db_conns():
            with pg.cursor() as c:
                c.execute("SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN%%'),"
                          " count(*) FILTER (WHERE state = 'active' AND query NOT LIKE 'LISTEN%%')"
                          " FROM pg_stat_activity WHERE datname = 'mcp' AND pid <> pg_backend_pid()")
                return dict(zip(("total", "listen", "active"), c.fetchone()))

        t0 = time.time()
        sids = mcp_sessions(url, n, os.path.join(self.work, "streams.sessions"))
        log(f"  {n} sessions in {time.time() - t0:.1f} s")
        # warm every child a little (pools, first connections) before the baseline
        mcp_call(url, sids[0], "echo", {"text": "warm"})
        time.sleep(2)
        reps = []
        for rep in range(self.reps):
            base = self.httpd_snapshot(parent)
            base_db = db_conns()
            sel = selectors.DefaultSelector()
            socks = []
            t0 = time.time()
            for sid in sids:
                s = socket.create_connection((host, port), 10)
                s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                           f"Accept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n"
                           f"MCP-Protocol-Version: {PROTO}\r\n\r\n").encode())
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ, bytearray())
                socks.append(s)
            ok, bad = set(), {}
            while len(ok) + len(bad) < n and time.time() - t0 < 120:
                for key, _ in sel.select(1):
                    try:
                        data = key.fileobj.recv(65536)
                    except BlockingIOError:
                        continue
                    buf = key.data
                    buf.extend(data)
                    if key.fileobj in ok:
                        buf.clear()
                        continue
                    if not data:
                        bad[key.fileobj] = bytes(buf[:200])
                        sel.unregister(key.fileobj)
                    elif b"\r\n\r\n" in buf:
                        if buf.startswith(b"HTTP/1.1 200"):
                            ok.add(key.fileobj)
                            buf.clear()
                        else:
                            bad[key.fileobj] = bytes(buf[:300])
                            sel.unregister(key.fileobj)
            opened = time.time() - t0
            if len(ok) < n:
                raise BenchError(f"measurement 6: only {len(ok)} of {n} streams opened "
                                 f"({len(bad)} refused: {list(bad.values())[:2]})")
            # settle, then hold idle while measuring what the idle streams cost
            time.sleep(3)
            cpu0 = self.cpu.snapshot()
            hold = 10 if not self.quick else 3
            end = time.time() + hold
            while time.time() < end:
                for key, _ in sel.select(0.5):
                    try:
                        key.fileobj.recv(65536)   # keep-alive comments, if any
                    except BlockingIOError:
                        pass
            cpu1 = self.cpu.snapshot()
            held = self.httpd_snapshot(parent)
            held_db = db_conns()
            held_backend = proc_status(backend_pid)
            with pg.cursor() as c:
                c.execute("SELECT count(*) FROM mcp.streams WHERE kind = 'standalone'"
                          " AND status = 'open'")
                open_rows = c.fetchone()[0]
            for s in socks:
                s.close()
            sel.close()
            t_closed = time.time()
            # wait until the gateway has noticed and closed them all
            deadline = time.time() + 60
            while time.time() < deadline:
                with pg.cursor() as c:
                    c.execute("SELECT count(*) FROM mcp.streams WHERE kind = 'standalone'"
                              " AND status = 'open'")
                    if c.fetchone()[0] == 0:
                        break
                time.sleep(0.5)
            closed_after = time.time() - t_closed
            time.sleep(2)
            after = self.httpd_snapshot(parent)
            cpu = CpuMeter.delta(cpu0, cpu1)
            r = {"n": n, "open_seconds": opened, "base_rss_kb": base["rss_kb"],
                 "held_rss_kb": held["rss_kb"], "after_rss_kb": after["rss_kb"],
                 "base_pss_kb": base["pss_kb"], "held_pss_kb": held["pss_kb"],
                 "rss_per_stream_kb": (held["rss_kb"] - base["rss_kb"]) / n,
                 "pss_per_stream_kb": (held["pss_kb"] - base["pss_kb"]) / n,
                 "httpd_fds": held["fds"], "httpd_threads": held["threads"],
                 "httpd_procs": len(held["pids"]),
                 "db_base": base_db, "db_held": held_db, "open_rows": open_rows,
                 "backend_rss_kb": held_backend["rss_kb"],
                 "idle_cpu": cpu, "closed_seconds": closed_after}
            reps.append(r)
            log(f"  rep {rep + 1}: opened {n} in {opened:.1f} s; httpd RSS {base['rss_kb'] / 1024:.0f}"
                f" → {held['rss_kb'] / 1024:.0f} MiB ({r['rss_per_stream_kb']:.0f} KiB/stream); "
                f"DB connections {held_db['total']} (LISTEN {held_db['listen']})")
        pg.close()
        self.results["m6"] = reps
        self.stack_down(d)

    # ---- facts ----------------------------------------------------------------------------------

    def facts(self):
        def sh(cmd):
            try:
                return subprocess.run(cmd, shell=True, text=True, capture_output=True,
                                      timeout=30).stdout.strip()
            except subprocess.TimeoutExpired:
                return ""

        def dpkg(p):
            return sh(f"dpkg-query -W -f='${{Version}}' {p} 2>/dev/null")

        cpu_model = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-").strip()
        mem = sh("free -h | awk '/^Mem:/ {print $2}'")
        nm = os.path.join(BENCH, "node_modules")
        pkgver = lambda p: json.load(open(os.path.join(nm, p, "package.json")))["version"]
        src = self.a.module_source or self.a.module
        top = sh(f"git -C {shlex.quote(os.path.dirname(src))} rev-parse --show-toplevel 2>/dev/null")
        commit = sh(f"git -C {shlex.quote(top)} log -1 --format='%H (%cd)' --date=iso") if top else ""
        dirty = sh(f"git -C {shlex.quote(top)} status --porcelain --untracked-files=no -- mod_mcp sql"
                   ) if top else ""
        sha = sh(f"sha256sum {shlex.quote(self.a.module)} | cut -c1-16")
        built = datetime.datetime.fromtimestamp(os.path.getmtime(src)).strftime(
            "%Y-%m-%d %H:%M:%S") if os.path.exists(src) else "?"
        f = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "nproc": sh("nproc"),
            "cpu": cpu_model,
            "memory": mem,
            "kernel": platform.release(),
            "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
            "loadavg": sh("cut -d' ' -f1-3 /proc/loadavg"),
            "httpd": sh("/usr/sbin/apache2 -v | head -1 | sed 's/Server version: //'")
                     + f" (Debian {dpkg('apache2')})",
            "postgresql": self.sql("SHOW server_version")[0][0] if hasattr(self, "pg") else "",
            "libpq": dpkg("libpq5"),
            "libcurl": dpkg("libcurl4"),
            "json-c": dpkg("libjson-c5"),
            "apr / apr-util": f"{dpkg('libapr1')} / {dpkg('libaprutil1')}",
            "libmicrohttpd (test backend)": dpkg("libmicrohttpd12"),
            "node": sh(f"{shlex.quote(self.a.node)} --version"),
            "wrk": sh("wrk -v 2>&1 | head -1 | awk '{print $2}'") + f" (Debian {dpkg('wrk')})",
            "supergateway": pkgver("supergateway"),
            "server-everything": pkgver("@modelcontextprotocol/server-everything"),
            "gcc": sh("gcc -dumpfullversion"),
            "gnuplot": sh("gnuplot --version"),
            "mod_mcp commit": (commit or "?") + (" + uncommitted changes in mod_mcp/ or sql/"
                                                 if dirty else ""),
            "mod_mcp.so": f"{src}, built {built}, sha256 {sha}… (a copy of it is what every "
                          f"stack of the run loads)",
        }
        if hasattr(self, "pg"):
            settings = self.sql("SELECT name, setting FROM pg_settings WHERE name IN"
                                " ('fsync', 'synchronous_commit', 'wal_sync_method',"
                                " 'shared_buffers', 'max_connections')")
            f["pg_settings"] = ", ".join(f"{k}={v}" for k, v in sorted(settings))
        # how fast this disk makes a WAL flush durable
        tf = os.path.join(self.work, "fsync.test")
        out = sh(f"timeout 5 /usr/lib/postgresql/15/bin/pg_test_fsync -s 1 -f {tf} 2>&1 | "
                 "grep -m1 -E '^ +fdatasync' ")
        m = re.search(r"([\d.]+) ops/sec\s+(\d+) usecs/op", out)
        f["fdatasync"] = f"{float(m.group(1)):,.0f}/s ({m.group(2)} µs each, pg_test_fsync)" if m \
            else "n/a"
        try:
            os.unlink(tf)
        except OSError:
            pass
        self.results["facts"] = f

    # ---- the whole run ------------------------------------------------------------------------

    def main(self):
        self.setup_main()
        self.facts()
        self.m1()
        self.profile()
        rate8 = med([r["rps"] for r in self.runs("m1", "mod_mcp/8")])
        self.attribution()
        self.m2()
        self.m3()
        self.m4()
        self.m5()
        self.m7(rate8)
        self.m8()
        self.results["other_cpu_note"] = None
        try:
            self.m6()
        except BenchError as e:
            # Recorded (the report shows it) and the run goes on; the run fails at its end.
            log(f"FAILED: {e}")
            self.results["m6_failed"] = str(e)[:600]
        self.m9()
        self.m10()
        self.results["elapsed_s"] = time.time() - self.t_start
        from report import write_report   # noqa: E402 - the report lives in bench/report.py
        write_report(self.results, BENCH, self.work, self.quick)
        # Wrong or missing answers from mod_mcp (or from the references it is compared with in
        # measurement 1) fail the run, after the report that shows them is written.
        errs = {k: sum(r["errors"] for r in rs) for k, rs in self.results["runs"]["m1"].items()}
        errs.update({k: sum(r["errors"] for r in rs)
                     for k, rs in self.results["runs"]["m2"].items() if k.startswith("mod_mcp")})
        errs["m7"] = self.results["m7"]["errors"]
        errs.update({f"m8 {k}": sum(r["errors"] for r in rs)
                     for k, rs in self.results["runs"].get("m8", {}).items()})
        errs.update({f"m10 {k}": sum(r["errors"] for r in rs)
                     for k, rs in self.results["runs"].get("m10", {}).items()})
        bad = {k: v for k, v in errs.items() if v}
        if self.results.get("m6_failed"):
            bad["m6"] = self.results["m6_failed"][:200]
        if bad:
            raise BenchError(f"requests failed (see bench/results.md): {bad}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--pg-insert", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--tree", default=REPO, help="the checkout whose tests/stack, schema and "
                    "test backend are used")
    ap.add_argument("--module", required=True, help="the mod_mcp.so to load (a private copy)")
    ap.add_argument("--module-source", default="", help="where that copy came from")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    b = Bench(a)
    rc = 0

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        b.main()
    except (BenchError, KeyboardInterrupt, Exception) as e:   # noqa: BLE001
        log(f"FAILED: {e}")
        if not isinstance(e, (BenchError, KeyboardInterrupt)):
            traceback.print_exc()
        rc = 1
    finally:
        log("stopping everything the benchmark started")
        if not b.cleanup():
            rc = rc or 1
    if rc == 0:
        log(f"done in {time.time() - b.t_start:.0f} s: bench/results.md, bench/results.png")
    return rc


if __name__ == "__main__":
    sys.dont_write_bytecode = True   # no __pycache__ in bench/ for the imported report.py
    sys.path.insert(0, BENCH)
    sys.exit(main())
