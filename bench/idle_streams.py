#!/usr/bin/python3
"""bench/idle_streams.py — idle standalone SSE streams through the gateway (issue 20).

    bench/idle_streams.py [--streams N] [--workers N] [--children N (4)] [--tls] [--async on|off]
                          [--open-timeout S] [--call-timeout S] [--samples K]
                          [--slow-calls N] [--keep DIR] [--httpd-env VAR=VALUE]...
    bench/idle_streams.py --url URL [--pid PID] [--streams N] ...   (no stack: any MCP endpoint,
                          e.g. the test backend itself; --pid: the process whose threads/RSS count)

Starts its own stack (tests/stack up --workers N [--children N] [--tls], per-principal limits
off), then opens N idle MCP sessions, each with its standalone GET stream (initialize,
notifications/initialized and the GET on one keep-alive connection per session, raw asyncio
sockets), keeps them open and reads them, and prints:

  * how many streams got their SSE headers within --open-timeout;
  * whether a fresh client's initialize + tools/call echo still answers (within --call-timeout),
    and its p50, against the p50 with no stream open;
  * httpd threads (sum of Threads in /proc/PID/status over the httpd processes) and the RSS
    added per idle stream;
  * delivery p99 of a `notify` to one random stream (tools/call sent -> event read on that
    stream), over --samples calls;
  * the time until every stream got a `notifications/tools/list_changed` sent by the test
    backend's POST /broadcast (one backend notification per backend GET stream);
  * with --slow-calls N: N concurrent `slow` calls (count 1, interval 10 s) through the gateway,
    how many were answered and the httpd threads while they were in flight;
  * with --idle-secs S (own stack only): what the open streams cost while nothing happens, over
    S seconds: PostgreSQL's WAL bytes/s and write transactions/s, the CPU (cores) of PostgreSQL
    and of httpd, and the WAL's largest record kinds (pg_waldump --stats): the price of keeping
    the streams' leases.

Numbers only, no assertions; anything that does not answer in time is reported as such (today a
stream holds an httpd worker thread, so beyond MaxRequestWorkers new clients hang). Stops the
stack it started (unless --keep DIR). Needs root (tests/stack).
"""
import argparse
import asyncio
import json
import os
import random
import re
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
# The newest revision with sessions: its answers are always SSE, so a slow one can be parked.
PROTO = "2025-11-25"
CONF = """# bench/idle_streams.py: every client is 127.0.0.1, so no per-principal limits
LogLevel warn
MaxKeepAliveRequests 0
KeepAliveTimeout 60
<IfDirective MCPMaxStreamsPerPrincipal>
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
</IfDirective>
MCPMaxSessions 0
"""


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def read_env(path):
    env = {}
    for line in open(path):
        m = re.match(r"^([A-Z0-9_]+)='(.*)'$", line.rstrip("\n"))
        if m:
            env[m.group(1)] = m.group(2).replace("'\\''", "'")
    return env


def split_url(url):
    m = re.match(r"^(https?)://([^:/]+):(\d+)(/.*)$", url)
    if not m:
        raise SystemExit(f"bad URL {url}")
    return m.group(1) == "https", m.group(2), int(m.group(3)), m.group(4)


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def ms(x):
    return None if x is None else round(x * 1000, 2)


# ---- processes ------------------------------------------------------------------------------

def proc_tree(pid):
    """pid and all its descendants."""
    out = [pid]
    try:
        kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], text=True,
                              capture_output=True).stdout.split()
    except OSError:
        kids = []
    for k in kids:
        out += proc_tree(int(k))
    return out


def tree_status(pids):
    """Threads and VmRSS (kB) summed over pids (each with its descendants)."""
    threads = rss = nproc = 0
    for root in pids:
        for pid in proc_tree(root):
            try:
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith("Threads:"):
                        threads += int(line.split()[1])
                    elif line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
                nproc += 1
            except OSError:
                pass
    return {"threads": threads, "rss_kb": rss, "processes": nproc}


async def idle_cost(a, httpd_pids, secs):
    """What the open streams cost over secs seconds of nothing else: WAL, write transactions,
    PostgreSQL's and httpd's CPU, and the WAL's record kinds."""
    # Only here: the --url mode needs no database driver (bench.py imports psycopg2).
    sys.path.insert(0, BENCH)
    import bench
    import psycopg2

    conn = psycopg2.connect(a.pg_dsn)
    conn.autocommit = True
    cpu = bench.CpuMeter()
    cpu.add(a.pg_pid, "postgres")
    for pid in httpd_pids:
        cpu.add(pid, "httpd")

    def point():
        with conn.cursor() as c:
            c.execute("SELECT pg_current_wal_insert_lsn(), pg_current_wal_insert_lsn() - '0/0'::pg_lsn,"
                      " pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
            lsn, wal_bytes, xid = c.fetchone()
        return {"lsn": lsn, "wal": int(wal_bytes), "xid": int(xid), "cpu": cpu.snapshot()}

    p0 = point()
    await asyncio.sleep(secs)
    p1 = point()
    conn.close()
    cores = bench.CpuMeter.delta(p0["cpu"], p1["cpu"])
    el = p1["cpu"][1] - p0["cpu"][1]
    out = {"seconds": round(el, 1),
           "wal_bytes_per_s": round((p1["wal"] - p0["wal"]) / el),
           "write_transactions_per_s": round((p1["xid"] - p0["xid"]) / el, 1),
           "postgres_cores": round(cores.get("postgres", 0.0), 4),
           "httpd_cores": round(cores.get("httpd", 0.0), 4)}
    waldump = os.path.join(a.pg_bin, "pg_waldump")
    if os.path.exists(waldump):
        r = subprocess.run([waldump, "--stats=record", "-p", os.path.join(a.pg_data, "pg_wal"),
                            "-s", p0["lsn"], "-e", p1["lsn"]], text=True, capture_output=True)
        kinds = []
        for line in r.stdout.splitlines():
            # "Heap/HOT_UPDATE  123 ( 45.60)  7890 ( 12.30)  4560 (  1.20)  12450 ( 13.50)":
            # records, their own bytes, full-page images' bytes, both
            f = re.findall(r"(\d+) \(\s*[\d.]+\)", line)
            if len(f) == 4 and "/" in line.split()[0]:
                kinds.append((line.split()[0], int(f[0]), int(f[3]), int(f[2])))
        kinds.sort(key=lambda k: -k[2])
        out["wal_kinds"] = [{"kind": k, "records": n, "bytes": b, "fpi_bytes": fpi}
                            for k, n, b, fpi in kinds[:8]]
    return out


def pidfile(path):
    try:
        return int(open(path).read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# ---- a lean HTTP/1.1 + SSE client ------------------------------------------------------------

class Conn:
    """One HTTP/1.1 keep-alive connection (plain or TLS)."""

    def __init__(self, host, port, tls_ctx):
        self.host, self.port, self.tls = host, port, tls_ctx
        self.r = self.w = None
        self.retries = 0

    async def open(self):
        self.r, self.w = await asyncio.open_connection(self.host, self.port, ssl=self.tls,
                                                       limit=1 << 20)

    def close(self):
        if self.w:
            try:
                self.w.close()
            except Exception:
                pass
            self.w = None

    def send(self, method, path, headers, body=b""):
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        self.w.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    async def head(self):
        """Status line and headers (lower-case names)."""
        raw = await self.r.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        return status, hdrs

    async def chunks(self, hdrs):
        """The body, piece by piece (chunked, Content-Length or until close)."""
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            while True:
                size = int((await self.r.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.r.readuntil(b"\r\n")
                    return
                data = await self.r.readexactly(size + 2)
                yield data[:-2]
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"])
            if n:
                yield await self.r.readexactly(n)
        else:
            while True:
                data = await self.r.read(65536)
                if not data:
                    return
                yield data

    async def request(self, method, path, headers, body=b""):
        status, hdrs = await self.exchange(method, path, headers, body)
        data = b"".join([c async for c in self.chunks(hdrs)])
        return status, hdrs, data

    async def exchange(self, method, path, headers, body=b""):
        """Sends a request and reads its head. A keep-alive connection the server closed before
        answering (httpd's event MPM closes idle keep-alive connections when it runs short of
        workers) is opened anew and the request sent once more, as HTTP clients do."""
        for attempt in (1, 2):
            try:
                self.send(method, path, headers, body)
                return await self.head()
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as e:
                if attempt == 2 or getattr(e, "partial", b""):
                    raise
                self.retries += 1
                self.close()
                await self.open()


def messages(hdrs, data):
    """The JSON-RPC messages of a POST's answer (JSON or SSE)."""
    text = data.decode("utf-8", "replace")
    if "text/event-stream" in hdrs.get("content-type", ""):
        out = []
        for ev in re.split(r"\r?\n\r?\n", text):
            d = "\n".join(l[5:].lstrip() for l in ev.splitlines() if l.startswith("data:"))
            if d.strip():
                out.append(json.loads(d))
        return out
    return [json.loads(text)] if text.strip() else []


HDRS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def init_body(rid=1):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize",
                       "params": {"protocolVersion": PROTO, "capabilities": {},
                                  "clientInfo": {"name": "idle-streams-bench", "version": "1"}}
                       }).encode()


async def initialize(c, path):
    st, h, data = await c.request("POST", path, HDRS, init_body())
    sid = h.get("mcp-session-id")
    if st != 200 or not sid:
        raise RuntimeError(f"initialize: HTTP {st} {data[:200]!r}")
    sh = dict(HDRS, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": PROTO})
    st, _, data = await c.request("POST", path, sh,
                                  b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    if st not in (200, 202):
        raise RuntimeError(f"notifications/initialized: HTTP {st} {data[:200]!r}")
    return sid, sh


async def call(c, path, sh, tool, args, rid=2):
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": tool, "arguments": args}}).encode()
    st, h, data = await c.request("POST", path, sh, body)
    for m in messages(h, data):
        if m.get("id") == rid:
            return m
    raise RuntimeError(f"tools/call {tool}: HTTP {st}, no answer {data[:200]!r}")


class Stream:
    """A session with its standalone GET stream, read as long as it is open."""

    def __init__(self, k, host, port, path, tls):
        self.k = k
        self.c = Conn(host, port, tls)
        self.path = path
        self.sid = self.sh = None
        self.headers_at = None
        self.status = None
        self.error = None
        self.events = []          # (time, message)
        self.waiters = []         # (predicate, future)
        self.task = None

    async def setup(self):
        await self.c.open()
        self.sid, self.sh = await initialize(self.c, self.path)
        self.status, hdrs = await self.c.exchange(
            "GET", self.path, {"Accept": "text/event-stream", "Mcp-Session-Id": self.sid,
                               "MCP-Protocol-Version": PROTO})
        if self.status != 200:
            raise RuntimeError(f"GET: HTTP {self.status}")
        self.headers_at = time.monotonic()
        self.task = asyncio.ensure_future(self.read(hdrs))

    async def read(self, hdrs):
        buf = ""
        try:
            async for chunk in self.c.chunks(hdrs):
                buf += chunk.decode("utf-8", "replace")
                while "\n\n" in buf:
                    ev, buf = buf.split("\n\n", 1)
                    d = "\n".join(l[5:].lstrip() for l in ev.splitlines() if l.startswith("data:"))
                    if not d.strip():
                        continue
                    now = time.monotonic()
                    try:
                        m = json.loads(d)
                    except ValueError:
                        continue
                    self.events.append((now, m))
                    for pred, fut in list(self.waiters):
                        if not fut.done() and pred(m):
                            fut.set_result(now)
                            self.waiters.remove((pred, fut))
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        self.error = self.error or "stream ended"

    def wait_for(self, pred):
        fut = asyncio.get_event_loop().create_future()
        self.waiters.append((pred, fut))
        return fut

    def close(self):
        if self.task:
            self.task.cancel()
        self.c.close()


async def fresh_client(host, port, path, tls, timeout):
    """A new client's initialize + notifications/initialized + tools/call echo: seconds, or None."""
    c = Conn(host, port, tls)
    t0 = time.monotonic()
    try:
        async def go():
            await c.open()
            _, sh = await initialize(c, path)
            m = await call(c, path, sh, "echo", {"text": "hello"})
            if "result" not in m:
                raise RuntimeError(f"echo: {m}")
        await asyncio.wait_for(go(), timeout)
        return time.monotonic() - t0
    except (asyncio.TimeoutError, OSError, RuntimeError, asyncio.IncompleteReadError) as e:
        log(f"  fresh client: {type(e).__name__} {e}")
        return None
    finally:
        c.close()


async def fresh_clients(host, port, path, tls, n, timeout):
    times, failed = [], 0
    for _ in range(n):
        t = await fresh_client(host, port, path, tls, timeout)
        if t is None:
            failed += 1
            if failed >= 3:
                break
        else:
            times.append(t)
    return {"answered": len(times), "tried": len(times) + failed,
            "p50_ms": ms(statistics.median(times)) if times else None}


# ---- the measurement ---------------------------------------------------------------------------

async def measure(a, url, httpd_pids, backend_url):
    tls_on, host, port, path = split_url(url)
    tls = None
    if tls_on:
        tls = ssl.create_default_context(cafile=a.ca)
    res = {"streams_requested": a.streams}

    log(f"fresh clients with no stream open ({a.samples})")
    res["fresh_none_open"] = await fresh_clients(host, port, path, tls, a.samples, a.call_timeout)
    before = tree_status(httpd_pids)
    res["httpd_before"] = before

    log(f"opening {a.streams} idle streams (deadline {a.open_timeout} s)")
    streams = [Stream(k, host, port, path, tls) for k in range(a.streams)]
    sem = asyncio.Semaphore(a.parallel)
    t0 = time.monotonic()
    deadline = t0 + a.open_timeout

    async def one(s):
        async with sem:
            left = deadline - time.monotonic()
            if left <= 0:
                s.error = "not tried before the deadline"
                return
            try:
                await asyncio.wait_for(s.setup(), left)
            except asyncio.TimeoutError:
                s.error = "timeout"
            except (OSError, RuntimeError, asyncio.IncompleteReadError, ValueError) as e:
                s.error = f"{type(e).__name__}: {e}"
            if not s.headers_at:
                s.close()   # a hanging connection must not take a worker later

    await asyncio.gather(*(one(s) for s in streams))
    ok = [s for s in streams if s.headers_at]
    res["streams_open"] = len(ok)
    res["open_seconds"] = round((max(s.headers_at for s in ok) - t0), 2) if ok else None
    errors = {}
    for s in streams:
        if not s.headers_at:
            errors[s.error] = errors.get(s.error, 0) + 1
    res["stream_failures"] = {k[:120]: v for k, v in sorted(errors.items(), key=lambda x: -x[1])[:5]}
    res["reconnects"] = sum(s.c.retries for s in streams)
    log(f"  {len(ok)} of {a.streams} streams open in {res['open_seconds']} s; failures {res['stream_failures']}")
    await asyncio.sleep(2)   # let the gateway settle (backend streams, threads)

    during = tree_status(httpd_pids)
    res["httpd_with_streams"] = during
    if ok:
        res["rss_per_stream_kib"] = round((during["rss_kb"] - before["rss_kb"]) / len(ok), 1)
        res["threads_per_stream"] = round((during["threads"] - before["threads"]) / len(ok), 2)

    log(f"fresh clients with {len(ok)} streams open")
    res["fresh_streams_open"] = await fresh_clients(host, port, path, tls, a.samples, a.call_timeout)
    p0, p1 = res["fresh_none_open"]["p50_ms"], res["fresh_streams_open"]["p50_ms"]
    res["fresh_p50_ratio"] = round(p1 / p0, 2) if p0 and p1 else None

    # notify to one random open stream, from a client of that session on a new connection.
    alive = [s for s in ok if not s.task.done()]
    lat, lost = [], 0
    if alive:
        log(f"notify to one random stream, {a.samples} times")
        for i in range(a.samples):
            s = random.choice(alive)
            text = f"bench-{i}-{random.random()}"
            fut = s.wait_for(lambda m, t=text: m.get("params", {}).get("data") == t)
            c = Conn(host, port, tls)
            t = time.monotonic()
            try:
                await asyncio.wait_for(c.open(), a.call_timeout)
                await asyncio.wait_for(call(c, path, s.sh, "notify", {"text": text}, rid=10 + i),
                                       a.call_timeout)
                lat.append(await asyncio.wait_for(fut, a.call_timeout) - t)
            except (asyncio.TimeoutError, OSError, RuntimeError, asyncio.IncompleteReadError) as e:
                log(f"  notify {i}: {type(e).__name__} {e}")
                lost += 1
                if lost >= 3:
                    break
            finally:
                c.close()
    res["notify"] = {"delivered": len(lat), "lost": lost, "p50_ms": ms(pct(lat, 50)),
                     "p99_ms": ms(pct(lat, 99)), "max_ms": ms(max(lat) if lat else None)}

    # one broadcast at the backend: every backend GET stream gets tools/list_changed.
    alive = [s for s in ok if not s.task.done()]
    if alive and backend_url:
        b_tls, bh, bp, _ = split_url(backend_url)
        futs = [s.wait_for(lambda m: m.get("method") == "notifications/tools/list_changed")
                for s in alive]
        c = Conn(bh, bp, None)
        t = time.monotonic()
        try:
            await c.open()
            st, _, data = await c.request("POST", "/broadcast", {})
            log(f"  backend /broadcast: HTTP {st} {data[:100]!r}")
            res["broadcast_backend_streams"] = json.loads(data).get("streams") if st == 200 else None
        except (OSError, ValueError, asyncio.IncompleteReadError) as e:
            log(f"  /broadcast failed: {e}")
        finally:
            c.close()
        done, _ = await asyncio.wait(futs, timeout=a.broadcast_timeout)
        got = [f.result() - t for f in done]
        for f in futs:
            f.cancel()
        res["broadcast"] = {"streams": len(alive), "received": len(got),
                            "all_within_ms": ms(max(got)) if len(got) == len(alive) else None,
                            "p50_ms": ms(pct(got, 50)), "p99_ms": ms(pct(got, 99)),
                            "timeout_s": a.broadcast_timeout}

    if a.idle_secs and getattr(a, "pg_dsn", None):
        # Every stream's lease is renewed a third of MCPStreamLease after it opened: past the
        # first window, the measure sees the steady state.
        log(f"idle cost over {a.idle_secs} s")
        res["idle"] = await idle_cost(a, httpd_pids, a.idle_secs)
        res["idle"]["streams"] = sum(1 for s in ok if not s.task.done())

    if a.slow_calls:
        log(f"{a.slow_calls} concurrent slow calls (10 s each)")
        res["slow"] = await slow_calls(a, host, port, path, tls, httpd_pids)

    res["streams_still_open"] = sum(1 for s in ok if not s.task.done())
    for s in streams:
        s.close()
    return res


async def slow_calls(a, host, port, path, tls, httpd_pids):
    sem = asyncio.Semaphore(a.parallel)
    answered = [0]
    t0 = time.monotonic()

    async def one(i):
        c = Conn(host, port, tls)
        try:
            async with sem:
                await asyncio.wait_for(c.open(), a.call_timeout)
                _, sh = await asyncio.wait_for(initialize(c, path), a.call_timeout)
            m = await asyncio.wait_for(call(c, path, sh, "slow", {"count": 1, "interval_ms": 10000}),
                                       30 + a.open_timeout)
            if "result" in m:
                answered[0] += 1
        except (asyncio.TimeoutError, OSError, RuntimeError, asyncio.IncompleteReadError):
            pass
        finally:
            c.close()

    tasks = [asyncio.ensure_future(one(i)) for i in range(a.slow_calls)]
    await asyncio.sleep(8)
    mid = tree_status(httpd_pids)
    await asyncio.gather(*tasks)
    return {"calls": a.slow_calls, "answered": answered[0],
            "seconds": round(time.monotonic() - t0, 1), "httpd_threads_in_flight": mid["threads"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=150)
    ap.add_argument("--workers", type=int, default=100, help="tests/stack up --workers")
    ap.add_argument("--children", type=int, default=4,
                    help="tests/stack up --children (default 4, all started up front, so that the "
                         "threads and RSS per stream are not those of children started meanwhile)")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--async", dest="async_streams", choices=("on", "off"), default="on",
                    help="MCPAsyncStreams (off: every stream holds its thread, the baseline)")
    ap.add_argument("--open-timeout", type=float, default=60.0,
                    help="seconds for all streams to get their headers")
    ap.add_argument("--call-timeout", type=float, default=10.0)
    ap.add_argument("--broadcast-timeout", type=float, default=30.0)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=100, help="stream set-ups in flight at once")
    ap.add_argument("--slow-calls", type=int, default=0)
    ap.add_argument("--idle-secs", type=float, default=0,
                    help="measure the open streams' cost over this many idle seconds (0: not)")
    ap.add_argument("--module", default=os.path.join(REPO, "mod_mcp", ".libs", "mod_mcp.so"))
    ap.add_argument("--keep", metavar="DIR", help="stack directory to use and leave running")
    ap.add_argument("--httpd-env", metavar="VAR=VALUE", action="append", default=[],
                    help="one more variable in httpd's environment (tests/stack up --httpd-env), "
                         "e.g. MALLOC_ARENA_MAX=2; repeatable")
    ap.add_argument("--url", help="no stack: measure this MCP endpoint")
    ap.add_argument("--pid", type=int, help="with --url: the process whose threads/RSS count")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    a.ca = None
    d = None
    if a.url:
        url, pids = a.url, [a.pid] if a.pid else []
        _, h, p, _ = split_url(url)
        backend_url = f"http://{h}:{p}/mcp"
        cfg = {"url": url}
    else:
        d = a.keep or tempfile.mkdtemp(prefix="idle-streams.", dir="/tmp")
        conf = os.path.join(d + ".conf")
        # The event MPM stops accepting past ThreadsPerChild + idle workers x this factor
        # connections per process, parked ones included.
        factor = max(2, 2 * -(-a.streams // max(1, a.workers)) + 2)
        with open(conf, "w") as f:
            f.write(CONF + f"AsyncRequestWorkerFactor {factor}\n"
                    + ("MCPAsyncStreams Off\n" if a.async_streams == "off" else ""))
        cmd = [os.path.join(REPO, "tests", "stack"), "up", "--dir", d, "--module", a.module,
               "--conf", conf, "--workers", str(a.workers)]
        if a.children:
            cmd += ["--children", str(a.children)]
        if a.tls:
            cmd.append("--tls")
        for e in a.httpd_env:
            cmd += ["--httpd-env", e]
        log(" ".join(cmd[1:]))
        p = subprocess.run(cmd, text=True, capture_output=True)
        if p.returncode:
            sys.exit(f"tests/stack up failed:\n{p.stderr[-3000:]}")
        env = read_env(os.path.join(d, "stack.env"))
        url = env["MCP_URL"]
        a.ca = env.get("MCP_CA") or None
        pids = [pidfile(f) for f in env["MCP_HTTPD_PIDFILES"].split()]
        backend_url = env["MCP_BACKEND_URL"]
        a.pg_dsn, a.pg_data = env["MCP_PG"], env["MCP_PG_DATA"]
        a.pg_pid = pidfile(env["MCP_PG_PIDFILE"])
        a.pg_bin = env.get("PG_BIN") or "/usr/lib/postgresql/15/bin"
        cfg = {"url": url, "workers": env.get("MCP_HTTPD_WORKERS"),
               "children": env.get("MCP_HTTPD_CHILDREN"),
               "threads_per_child": env.get("MCP_HTTPD_THREADS_PER_CHILD"), "tls": bool(a.tls),
               "async_streams": a.async_streams}
        if a.httpd_env:
            cfg["httpd_env"] = a.httpd_env
    try:
        res = asyncio.run(measure(a, url, pids, backend_url))
    finally:
        if d and not a.keep:
            p = subprocess.run([os.path.join(REPO, "tests", "stack"), "down", "--dir", d],
                               text=True, capture_output=True)
            if p.returncode:
                log(f"tests/stack down failed: {p.stderr[-500:]}")
            os.unlink(d + ".conf")
    res["config"] = cfg
    res["protocol"] = PROTO
    report(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


def report(r):
    c = r["config"]
    print(f"idle standalone streams: {c}")
    print(f"  streams with SSE headers:     {r['streams_open']} of {r['streams_requested']}"
          f" (last after {r['open_seconds']} s; {r['reconnects']} keep-alive connections closed by the"
          f" server and opened anew){'; failures ' + str(r['stream_failures']) if r['stream_failures'] else ''}")
    n, o = r["fresh_none_open"], r["fresh_streams_open"]
    print(f"  fresh initialize+echo p50:    {n['p50_ms']} ms with none open ({n['answered']}/{n['tried']} answered);"
          f" {o['p50_ms']} ms with the streams open ({o['answered']}/{o['tried']} answered)"
          f"{'; ratio ' + str(r['fresh_p50_ratio']) if r['fresh_p50_ratio'] else ''}")
    b, w = r["httpd_before"], r["httpd_with_streams"]
    print(f"  server threads:               {b['threads']} before, {w['threads']} with the streams"
          f" ({w['processes']} processes); {r.get('threads_per_stream')} per stream")
    print(f"  server RSS:                   {b['rss_kb']} kB before, {w['rss_kb']} kB with the streams;"
          f" {r.get('rss_per_stream_kib')} KiB per stream")
    nt = r["notify"]
    print(f"  notify to one stream:         p50 {nt['p50_ms']} ms, p99 {nt['p99_ms']} ms, max {nt['max_ms']} ms"
          f" ({nt['delivered']} delivered, {nt['lost']} lost)")
    if "broadcast" in r:
        bc = r["broadcast"]
        print(f"  broadcast list_changed:       {bc['received']} of {bc['streams']} streams got it"
              f" (backend sent on {r.get('broadcast_backend_streams')}); all within {bc['all_within_ms']} ms,"
              f" p50 {bc['p50_ms']} ms, p99 {bc['p99_ms']} ms")
    if "slow" in r:
        s = r["slow"]
        print(f"  slow calls (10 s):            {s['answered']} of {s['calls']} answered in {s['seconds']} s;"
              f" {s['httpd_threads_in_flight']} server threads in flight")
    if "idle" in r:
        i = r["idle"]
        n = max(i["streams"], 1)
        print(f"  idle, {i['seconds']} s, {i['streams']} streams: WAL {i['wal_bytes_per_s']} B/s"
              f" ({i['wal_bytes_per_s'] / n:.0f} B/s per stream), {i['write_transactions_per_s']}"
              f" write transactions/s, PostgreSQL {i['postgres_cores']} cores, httpd"
              f" {i['httpd_cores']} cores")
        for k in i.get("wal_kinds", []):
            print(f"      {k['kind']:<28} {k['records']:>8} records {k['bytes']:>10} bytes"
                  f" (full-page images {k['fpi_bytes']})")
    print(f"  streams still open at the end: {r['streams_still_open']}")


if __name__ == "__main__":
    main()
