"""mcp-stdio-supervisor alone (docs/stdio.md): no httpd, no PostgreSQL.

Each test starts the supervisor with pipes, writes its configuration line, reads "ready <port>"
and speaks its HTTP API with a small raw-socket HTTP/1.1 client (keep-alive, Content-Length
bodies, chunked SSE read event by event with deadlines), with `mcp-test-backend --stdio` (and its
--stdio-* faults) as the stdio server. What happens to processes is read from /proc: the
supervisor's children (processes whose parent it is) and whether a pid still exists. Every wait
has a deadline (wait_for polls); nothing sleeps blindly.

The binaries: MCP_SUPERVISOR_BIN, else the --supervisor-bin of MCP_TEST_STACK_ARGS, else the one
beside its --module (so scripts/test's sanitizer pass runs build-asan's), else the tree's
mod_mcp/mcp-stdio-supervisor; run the file again with
MCP_SUPERVISOR_BIN=build-asan/mod_mcp/mcp-stdio-supervisor for the ASan+UBSan build: a sanitizer
report on its stderr fails the test, and LeakSanitizer's makes the exit status after EOF
non-zero. MCP_BACKEND_BIN, else --backend-bin, else the tree's tests/backend/mcp-test-backend.
Run: /usr/bin/python3 -m pytest -q tests/integration/test_stdio_supervisor.py
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def _stack_arg(name: str) -> str | None:
    """A value of MCP_TEST_STACK_ARGS (what scripts/test's sanitizer pass sets for tests/stack)."""
    args = shlex.split(os.environ.get("MCP_TEST_STACK_ARGS", ""))
    return args[args.index(name) + 1] if name in args[:-1] else None


def _supervisor() -> Path:
    if os.environ.get("MCP_SUPERVISOR_BIN"):
        return Path(os.environ["MCP_SUPERVISOR_BIN"]).resolve()
    if _stack_arg("--supervisor-bin") not in (None, "auto", "none"):
        return Path(_stack_arg("--supervisor-bin")).resolve()
    if _stack_arg("--module"):          # the one built beside the module, as tests/stack has it
        beside = Path(_stack_arg("--module")).resolve().parent.parent / "mcp-stdio-supervisor"
        if beside.is_file():
            return beside
    return REPO / "mod_mcp" / "mcp-stdio-supervisor"


SUPERVISOR = _supervisor()
BACKEND = Path(os.environ.get("MCP_BACKEND_BIN") or _stack_arg("--backend-bin")
               or REPO / "tests" / "backend" / "mcp-test-backend").resolve()
SANITIZER_ENV = {
    # A small quarantine: freed memory kept by ASan would look like memory the supervisor holds
    # (test_slow_stream_holds_the_process_back measures its RSS).
    "ASAN_OPTIONS": "detect_leaks=1:fast_unwind_on_malloc=0:disable_coredump=1:"
                    "quarantine_size_mb=8",
    "LSAN_OPTIONS": f"suppressions={REPO / 'tests' / 'lsan.supp'}:print_suppressions=0",
    "UBSAN_OPTIONS": "print_stacktrace=1",
}
# An ASan-built test backend gets test_backend_stdio.py's options in its environment (which the
# supervisor gives it whole): its reports come on its stderr, which the supervisor logs, and the
# fixture fails the test on any.
SERVER_ENV = {"LANG": "C"}
if BACKEND.is_file() and b"__asan_init" in BACKEND.read_bytes():
    SERVER_ENV.update({
        "ASAN_OPTIONS": "detect_leaks=1:fast_unwind_on_malloc=0:disable_coredump=1:"
                        "intercept_tls_get_addr=0",
        "LSAN_OPTIONS": SANITIZER_ENV["LSAN_OPTIONS"],
        "UBSAN_OPTIONS": "print_stacktrace=1"})
# Built with ASan (scripts/test's sanitizer pass, or MCP_SUPERVISOR_BIN naming build-asan's):
# the loops of many sessions run fewer there (each costs a sanitized supervisor and a sanitized
# process several times as much; what the sanitizers look at is the same for each).
SANITIZED = SUPERVISOR.is_file() and b"__asan_init" in SUPERVISOR.read_bytes()
KEY = "test-key-0123456789abcdef"
TIMEOUT = 10.0
PROTOCOL = "2025-11-25"


# ---- /proc ---------------------------------------------------------------------------------

def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of pid, None when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
    return state, int(ppid)


def alive(pid: int) -> bool:
    """A zombie is dead: it runs no more."""
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def children(ppid: int) -> list[int]:
    """Live processes whose parent is ppid."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[1] == ppid and st[0] != "Z":
                found.append(int(entry))
    return found


# ---- a raw HTTP/1.1 client -----------------------------------------------------------------

class Response:
    def __init__(self, conn: "Conn", status: int, headers: dict[str, str]):
        self.conn, self.status, self.headers = conn, status, headers
        self.body = b""
        self.chunked = headers.get("transfer-encoding") == "chunked"
        self.ended = not self.chunked
        self._sse = b""

    def json(self):
        return json.loads(self.body)

    def error(self) -> str:
        return self.json()["error"]["message"]

    def _chunk(self, timeout: float) -> bytes | None:
        line = self.conn.read_line(timeout)
        size = int(line.strip(), 16)
        data = self.conn.read_exact(size + 2, timeout)[:-2]
        if size == 0:
            self.conn.read_line(timeout) if data else None
            return None
        return data

    def event(self, timeout: float = TIMEOUT):
        """The next SSE event's data as JSON; None once the stream has ended."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n\n" in self._sse:
                block, self._sse = self._sse.split(b"\n\n", 1)
                data = [line[5:].lstrip(b" ") for line in block.split(b"\n")
                        if line.startswith(b"data:")]
                if data:
                    return json.loads(b"\n".join(data))
            if self.ended:
                return None
            chunk = self._chunk(max(0.01, deadline - time.monotonic()))
            if chunk is None:
                self.ended = True
            else:
                self._sse += chunk

    def events(self, timeout: float = TIMEOUT) -> list:
        """Every event until the stream ends."""
        out = []
        while (e := self.event(timeout)) is not None:
            out.append(e)
        return out


class Conn:
    """One keep-alive connection to the supervisor."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _fill(self, timeout: float):
        self.sock.settimeout(max(0.01, timeout))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise AssertionError(f"nothing from the supervisor within {timeout:.1f} s") from None
        if not data:
            raise EOFError("the supervisor closed the connection")
        self.buf += data

    def read_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self.buf:
            self._fill(deadline - time.monotonic())
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read_exact(self, n: int, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            self._fill(deadline - time.monotonic())
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def closed_by_peer(self, timeout: float = TIMEOUT) -> bool:
        try:
            self._fill(timeout)
        except EOFError:
            return True
        return False

    def request(self, method: str, path: str, body=None, headers: dict | None = None,
                key: str | None = KEY, timeout: float = TIMEOUT) -> Response:
        hdrs = {"Host": "127.0.0.1"}
        if key is not None:
            hdrs["MCP-Supervisor-Key"] = key
        data = b""
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
            hdrs["Content-Length"] = str(len(data))
        hdrs.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
        self.sock.sendall(head.encode() + b"\r\n" + data)
        status_line = self.read_line(timeout)
        status = int(status_line.split()[1])
        headers_in = {}
        while (line := self.read_line(timeout)):
            k, v = line.decode().split(":", 1)
            headers_in[k.strip().lower()] = v.strip()
        r = Response(self, status, headers_in)
        if "content-length" in headers_in:
            r.body = self.read_exact(int(headers_in["content-length"]), timeout)
        return r


# ---- the supervisor --------------------------------------------------------------------------

def server_conf(*args: str, **over) -> dict:
    conf = {"command": [str(BACKEND), "--stdio", *args], "env": dict(SERVER_ENV),
            "start_timeout": 10, "idle_timeout": 0, "stop_grace": 2, "max_line": 1048576,
            "max_sessions": 0, "max_sessions_per_principal": 0}
    conf.update(over)
    return conf


def config(servers: dict | None = None, **over) -> dict:
    conf = {"listen": "127.0.0.1:0", "advertise": "http://127.0.0.1:{port}", "secret": KEY,
            "log_level": "info", "max_sessions": 0,
            "servers": servers if servers is not None else {"t": server_conf()}}
    conf.update(over)
    return conf


class Supervisor:
    def __init__(self, conf: dict | None = None, preexec_fn=None):
        if not SUPERVISOR.is_file():
            pytest.fail(f"{SUPERVISOR} is missing: run scripts/build", pytrace=False)
        self.proc = subprocess.Popen([str(SUPERVISOR)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **SANITIZER_ENV},
                                     preexec_fn=preexec_fn)
        self.answers: queue.Queue[str | None] = queue.Queue()
        self.log: list[str] = []
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()
        self.conns: list[Conn] = []
        self.port = None
        if conf is not None:
            answer = self.configure(conf)
            assert answer.startswith("ready "), (answer, self.log[-5:])
            self.port = int(answer.split()[1])

    def _read_stdout(self):
        for line in iter(self.proc.stdout.readline, b""):
            self.answers.put(line.decode().rstrip("\n"))
        self.answers.put(None)

    def _read_stderr(self):
        for line in iter(self.proc.stderr.readline, b""):
            self.log.append(line.decode(errors="replace").rstrip("\n"))

    def configure(self, conf) -> str | None:
        line = conf if isinstance(conf, (bytes, str)) else json.dumps(conf)
        self.proc.stdin.write((line if isinstance(line, bytes) else line.encode()) + b"\n")
        self.proc.stdin.flush()
        try:
            return self.answers.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no answer to a configuration line; log: {self.log[-5:]}") \
                from None

    def conn(self) -> Conn:
        c = Conn(self.port)
        self.conns.append(c)
        return c

    def children(self) -> list[int]:
        return children(self.proc.pid)

    def logged(self, text: str) -> list[str]:
        return [line for line in self.log if text in line]

    # ---- MCP over the supervisor ----
    def initialize(self, server: str = "t", version: str = PROTOCOL, capabilities=None,
                   headers=None, conn: Conn | None = None) -> "Session":
        c = conn or self.conn()
        r = c.request("POST", f"/stdio/{server}", {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": capabilities or {},
                       "clientInfo": {"name": "test_stdio_supervisor", "version": "1"}}},
            headers=headers)
        assert r.status == 200, (r.status, r.body, self.log[-5:])
        assert r.headers["content-type"] == "application/json"
        assert r.json()["id"] == 0 and "result" in r.json()
        sid = r.headers["mcp-session-id"]
        s = Session(self, server, sid, c)
        assert s.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202
        return s

    def stop(self, within: float = TIMEOUT) -> int:
        """EOF on the control pipe; the exit status."""
        for c in self.conns:
            c.close()
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=within)
        for t in self._threads:
            t.join(timeout=TIMEOUT)
        return rc

    def sanitizer_reports(self) -> list[str]:
        return [line for line in self.log if "Sanitizer" in line or "runtime error:" in line]


class Session:
    def __init__(self, sup: Supervisor, server: str, sid: str, conn: Conn):
        self.sup, self.server, self.sid, self.conn = sup, server, sid, conn
        self.next_id = 0
        hexpart, url = sid.split("@", 1)
        assert len(hexpart) == 32 and all(ch in "0123456789abcdef" for ch in hexpart)
        assert url == f"http://127.0.0.1:{sup.port}/stdio/{server}"

    def post(self, body, conn: Conn | None = None, headers=None) -> Response:
        return (conn or self.conn).request("POST", f"/stdio/{self.server}", body,
                                           headers={"Mcp-Session-Id": self.sid, **(headers or {})})

    def request(self, method: str, params=None, conn: Conn | None = None,
                rid=None) -> tuple[object, Response]:
        if rid is None:
            self.next_id += 1
            rid = self.next_id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        return rid, self.post(msg, conn)

    def call(self, method: str, params=None) -> dict:
        rid, r = self.request(method, params)
        assert r.status == 200 and r.headers["content-type"] == "text/event-stream", \
            (r.status, r.body)
        events = r.events()
        assert events[-1]["id"] == rid, events
        return events[-1]

    def tool(self, name: str, **arguments) -> dict:
        return self.call("tools/call", {"name": name, "arguments": arguments})

    def get(self, conn: Conn | None = None) -> Response:
        return (conn or self.sup.conn()).request("GET", f"/stdio/{self.server}",
                                                 headers={"Mcp-Session-Id": self.sid})

    def delete(self) -> Response:
        return self.conn.request("DELETE", f"/stdio/{self.server}",
                                 headers={"Mcp-Session-Id": self.sid})


def text_of(resp: dict) -> str:
    assert "result" in resp, resp
    return resp["result"]["content"][0]["text"]


@pytest.fixture
def supervisor():
    """supervisor(conf) -> a started Supervisor; each is stopped (EOF) at the end, must exit 0,
    leave no process, and report nothing from a sanitizer."""
    started: list[Supervisor] = []

    def start(conf: dict | None = None, preexec_fn=None) -> Supervisor:
        s = Supervisor(config() if conf is None else conf, preexec_fn)
        started.append(s)
        return s

    yield start
    problems = []
    for s in started:
        kids = s.children()
        if s.proc.poll() is None:
            rc = s.stop(within=30)
            if rc != 0:
                problems.append(f"exit status {rc} after EOF")
        for pid in kids:
            if alive(pid):
                problems.append(f"process {pid} outlived the supervisor")
        problems += s.sanitizer_reports()
    assert not problems, "\n".join(problems)


# ---- the session ------------------------------------------------------------------------------

def test_initialize_and_echo(supervisor):
    sup = supervisor()
    wait_for(lambda: sup.logged("mcp-stdio: started: 1 stdio server(s)"), TIMEOUT, "the log line")
    s = sup.initialize()
    assert text_of(s.tool("echo", text="through the supervisor")) == "through the supervisor"
    # The same connection again (keep-alive), and a ping.
    assert s.call("ping")["result"] == {}
    # Log lines in httpd's format, the session's tag in them; stderr relayed at warn.
    line = wait_for(lambda: sup.logged("stderr: mcp-test-backend: tools/call"), TIMEOUT,
                    "the relayed stderr line")[0]
    assert line.startswith("[") and "] [mcp:warn] [pid " in line
    assert f"t/{s.sid[:8]}: stderr:" in line


def test_gateway_tag_in_log(supervisor):
    sup = supervisor()
    s = sup.initialize(headers={"MCP-Gateway-Session-Tag": "abcdef01",
                                "MCP-Supervisor-Principal": "alice"})
    s.tool("echo", text="x")
    wait_for(lambda: sup.logged("t/abcdef01: stderr: mcp-test-backend: tools/call"), TIMEOUT,
             "the line with the gateway's tag")


def test_slow_progress_on_its_post_stream(supervisor):
    sup = supervisor()
    s = sup.initialize()
    rid, r = s.request("tools/call", {"name": "slow", "arguments": {"count": 3, "interval_ms": 100},
                                      "_meta": {"progressToken": "tok-1"}})
    assert r.status == 200
    events = r.events()
    progress = [e["params"]["progress"] for e in events
                if e.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3]
    assert all(e["params"]["progressToken"] == "tok-1" for e in events if "method" in e)
    assert events[-1]["id"] == rid and text_of(events[-1]) == "slow done: 3 steps"
    # A ping while a slow call runs is answered on its own stream at once.
    rid, slow = s.request("tools/call", {"name": "slow",
                                         "arguments": {"count": 2, "interval_ms": 1500},
                                         "_meta": {"progressToken": 7}})
    assert slow.event()["params"]["progress"] == 1
    start = time.monotonic()
    _, ping = s.request("ping", conn=sup.conn())
    assert ping.events()[-1]["result"] == {}
    assert time.monotonic() - start < 1.0
    assert slow.events()[-1]["id"] == rid


def sampling_answer(ask: dict) -> dict:
    return {"jsonrpc": "2.0", "id": ask["id"],
            "result": {"role": "assistant", "content": {"type": "text", "text": "Paris"},
                       "model": "test-model", "stopReason": "endTurn"}}


def test_sampling_on_the_post_stream(supervisor):
    sup = supervisor()
    s = sup.initialize(capabilities={"sampling": {}})
    rid, call = s.request("tools/call", {"name": "sample", "arguments": {"prompt": "capital?"}})
    ask = call.event()
    assert ask["method"] == "sampling/createMessage"  # no GET stream: its own POST stream
    assert s.post(sampling_answer(ask), conn=sup.conn()).status == 202
    assert text_of(call.events()[-1]) == "sampled: Paris"


def test_sampling_on_the_get_stream(supervisor):
    sup = supervisor()
    s = sup.initialize(capabilities={"sampling": {}})
    get = s.get()
    assert get.status == 200 and get.headers["content-type"] == "text/event-stream"
    # A second GET while one is open: 409.
    again = s.get()
    assert again.status == 409 and "GET stream is open already" in again.error()
    rid, call = s.request("tools/call", {"name": "sample", "arguments": {"prompt": "capital?"}})
    ask = get.event()
    assert ask["method"] == "sampling/createMessage"
    assert s.post(sampling_answer(ask), conn=sup.conn()).status == 202
    events = call.events()
    assert [e.get("id") for e in events] == [rid]
    assert text_of(events[0]) == "sampled: Paris"
    # What belongs to no request goes to the GET stream: notify's message.
    assert text_of(s.tool("notify", text="hello")) == "sent"
    note = get.event()
    assert note["method"] == "notifications/message" and "hello" in json.dumps(note)


def test_queued_until_a_stream_opens(supervisor):
    sup = supervisor()
    s = sup.initialize()
    # notify's message belongs to no request: on the call's stream if it comes before the
    # result, else queued (no stream open) for the next stream that opens.
    rid, r = s.request("tools/call", {"name": "notify", "arguments": {"text": "queued?"}})
    events = r.events()
    assert events[-1]["id"] == rid
    if len(events) == 1:
        wait_for(lambda: sup.logged("stderr: mcp-test-backend: tools/call"), TIMEOUT, "the call")
        note = s.get().event()
    else:
        note = events[0]
    assert note["method"] == "notifications/message" and "queued?" in json.dumps(note)


def test_batch(supervisor):
    sup = supervisor()
    s = sup.initialize(version="2025-03-26")
    r = s.post([{"jsonrpc": "2.0", "id": "a", "method": "ping"},
                {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
                {"jsonrpc": "2.0", "id": "b", "method": "tools/call",
                 "params": {"name": "echo", "arguments": {"text": "x"}}}])
    assert r.status == 200
    events = r.events()
    assert sorted(e["id"] for e in events) == ["a", "b"]
    assert text_of([e for e in events if e["id"] == "b"][0]) == "x"
    # A batch of notifications only: 202.
    assert s.post([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]).status == 202
    # An empty batch: 400.
    r = s.post([])
    assert r.status == 400 and "non-empty batch" in r.error()


# ---- refusals ------------------------------------------------------------------------------

def test_refusals(supervisor):
    sup = supervisor()
    c = sup.conn()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    r = c.request("POST", "/stdio/t", init, key=None)
    assert r.status == 403 and r.error() == "the MCP-Supervisor-Key header is missing"
    assert r.headers.get("connection") == "close" and c.closed_by_peer()
    r = sup.conn().request("POST", "/stdio/t", init, key=KEY + "x")
    assert r.status == 403 and r.error() == "the MCP-Supervisor-Key is wrong"
    c = sup.conn()
    r = c.request("POST", "/stdio/nope", init)
    assert r.status == 404 and r.error() == "no stdio server named nope"
    r = c.request("POST", "/elsewhere", init)
    assert r.status == 404 and "/stdio/<server name>" in r.error()
    c = sup.conn()
    r = c.request("PUT", "/stdio/t", init)
    assert r.status == 405 and r.headers["allow"] == "GET, POST, DELETE"
    c = sup.conn()
    r = c.request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status == 400 and "initialize" in r.error()
    r = c.request("POST", "/stdio/t", b"{not json")
    assert r.status == 400 and r.json()["error"]["code"] == -32700
    r = c.request("GET", "/stdio/t")
    assert r.status == 400 and "Mcp-Session-Id" in r.error()
    # Unknown session: 404 with -32001, on a connection that stays open.
    unknown = "0123456789abcdef0123456789abcdef@http://127.0.0.1/stdio/t"
    for method in ("POST", "GET", "DELETE"):
        r = c.request(method, "/stdio/t", {"jsonrpc": "2.0", "id": 1, "method": "ping"}
                      if method == "POST" else None, headers={"Mcp-Session-Id": unknown})
        assert r.status == 404 and r.json()["error"]["code"] == -32001, (method, r.body)
    # Without Content-Length; chunked; too large; a bad head.
    c = sup.conn()
    c.sock.sendall(f"POST /stdio/t HTTP/1.1\r\nMCP-Supervisor-Key: {KEY}\r\n\r\n".encode())
    assert b" 411 " in c.read_line(TIMEOUT)
    c = sup.conn()
    c.sock.sendall(f"POST /stdio/t HTTP/1.1\r\nMCP-Supervisor-Key: {KEY}\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n".encode())
    assert b" 411 " in c.read_line(TIMEOUT)
    c = sup.conn()
    c.sock.sendall(f"POST /stdio/t HTTP/1.1\r\nMCP-Supervisor-Key: {KEY}\r\n"
                   f"Content-Length: {64 * 1024 * 1024 + 1}\r\n\r\n".encode())
    assert b" 413 " in c.read_line(TIMEOUT)
    c = sup.conn()
    c.sock.sendall(b"GET /stdio/t HTTP/1.1\r\nBad Header\r\n\r\n")
    r_line = c.read_line(TIMEOUT)
    assert b" 400 " in r_line


def test_duplicate_id_409(supervisor):
    sup = supervisor()
    s = sup.initialize()
    _, slow = s.request("tools/call", {"name": "slow", "arguments": {"count": 2,
                                                                     "interval_ms": 500}},
                        rid="same")
    assert slow.status == 200
    _, dup = s.request("ping", conn=sup.conn(), rid="same")
    assert dup.status == 409 and dup.error() == \
        'the request id "same" is already in flight in this session'
    assert slow.events()[-1]["id"] == "same"
    # Answered: the id may be used again.
    assert s.request("ping", rid="same")[1].events()[-1]["id"] == "same"


# ---- process lifetime ---------------------------------------------------------------------

def test_delete_ends_the_process(supervisor):
    sup = supervisor()
    s = sup.initialize()
    [pid] = sup.children()
    r = s.delete()
    assert r.status == 204
    wait_for(lambda: not alive(pid), TIMEOUT, "the process to end")
    assert sup.children() == []
    r = s.post({"jsonrpc": "2.0", "id": 9, "method": "ping"})
    assert r.status == 404 and r.error() == \
        "Session not found: the stdio server of this session was ended by DELETE"


def test_100_sessions_started_and_deleted(supervisor):
    n = 30 if SANITIZED else 100
    sup = supervisor()
    sessions = [sup.initialize(conn=sup.conn() if i % 10 == 0 else None) for i in range(n)]
    assert len(set(s.sid for s in sessions)) == n
    assert len(sup.children()) == n
    for s in sessions:
        assert s.delete().status == 204
        s.conn.close()
    wait_for(lambda: sup.children() == [], 30, "no child left")


def test_crash_mid_call(supervisor):
    # Messages: initialize, notifications/initialized, then the call: the third, it crashes.
    sup = supervisor(config({"t": server_conf("--stdio-crash-after", "3")}))
    s = sup.initialize()
    rid, r = s.request("tools/call", {"name": "echo", "arguments": {"text": "never"}})
    start = time.monotonic()
    events = r.events()
    assert time.monotonic() - start < 2.0
    assert len(events) == 1 and events[0]["id"] == rid
    err = events[0]["error"]
    assert err["code"] == -32603
    assert err["message"].startswith("the stdio server exited with status 3 before answering; "
                                     "its last stderr line: mcp-test-backend: --stdio-crash-after")
    r = s.post({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    assert r.status == 404 and r.error() == \
        "Session not found: the stdio server of this session exited with status 3"
    wait_for(lambda: sup.children() == [], TIMEOUT, "no child left")


def test_exit_at_start_502(supervisor):
    sup = supervisor(config({"t": server_conf("--stdio-exit-at-start")}))
    r = sup.conn().request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize", "params": {}})
    assert r.status == 502
    assert r.error() == ("the stdio server exited with status 1 before answering initialize; "
                         "its last stderr line: mcp-test-backend: --stdio-exit-at-start: "
                         "exiting with status 1")


def test_exec_failure_502(supervisor):
    sup = supervisor(config({"t": server_conf(command=["/nonexistent/mcp-server", "--x"])}))
    r = sup.conn().request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize", "params": {}})
    assert r.status == 502
    assert r.error() == ("the stdio server t could not be started: execve "
                         "/nonexistent/mcp-server: No such file or directory")
    assert sup.children() == []


def test_garbage_lines_ignored(supervisor):
    sup = supervisor(config({"t": server_conf("--stdio-garbage")}))
    s = sup.initialize()
    assert text_of(s.tool("echo", text="clean")) == "clean"
    warned = wait_for(lambda: sup.logged("a stdout line that is not JSON-RPC, ignored: "
                                         "\"this line is not JSON"), TIMEOUT, "the warning")
    assert warned and f"t/{s.sid[:8]}:" in warned[0]


def test_huge_line_ends_the_process(supervisor):
    sup = supervisor(config({"t": server_conf("--stdio-huge-line", str(16 * 1024 * 1024))}))
    s = sup.initialize()
    [pid] = sup.children()
    rid, r = s.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    events = r.events(timeout=30)
    assert len(events) == 1 and events[0]["id"] == rid
    assert events[0]["error"]["message"].startswith(
        "the stdio server was ended: it wrote a line over 1048576 bytes before answering")
    wait_for(lambda: not alive(pid), TIMEOUT, "the process to end")
    r = s.post({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    assert r.status == 404 and "it wrote a line over 1048576 bytes" in r.error()


def test_no_read_start_timeout_blocks_nothing(supervisor):
    sup = supervisor(config({"t": server_conf(), "deaf": server_conf("--stdio-no-read",
                                                                     start_timeout=2)}))
    c = sup.conn()
    start = time.monotonic()
    # The initialize of the deaf server waits; meanwhile another session is served.
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}).encode()
    c.sock.sendall(f"POST /stdio/deaf HTTP/1.1\r\nMCP-Supervisor-Key: {KEY}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    s = sup.initialize("t")
    assert text_of(s.tool("echo", text="meanwhile")) == "meanwhile"
    assert time.monotonic() - start < 1.5
    deaf_pid = [p for p in sup.children()]
    line = c.read_line(TIMEOUT)
    assert b" 504 " in line
    took = time.monotonic() - start
    assert 1.8 < took < 5, took
    while c.read_line(TIMEOUT):
        pass
    wait_for(lambda: len(sup.children()) == 1, TIMEOUT, "the deaf process to end")
    assert len(deaf_pid) == 2
    assert text_of(s.tool("echo", text="after")) == "after"


def test_stderr_flood_rate_limited(supervisor):
    sup = supervisor(config({"t": server_conf(), "flood": server_conf("--stdio-stderr-flood")}))
    start = time.monotonic()
    flood = sup.initialize("flood")
    s = sup.initialize("t")
    for i in range(5):
        assert text_of(s.tool("echo", text=f"n{i}")) == f"n{i}"
    assert text_of(flood.tool("echo", text="flooded")) == "flooded"
    wait_for(lambda: sup.logged("stderr lines not logged"), TIMEOUT, "the suppressed count")
    elapsed = time.monotonic() - start
    flood_lines = len(sup.logged("stderr flood line"))
    # A burst of 20 (the server's other stderr lines take some), then 5 a second.
    assert 10 <= flood_lines <= 20 + 5 * (elapsed + 1), (flood_lines, elapsed)
    assert flood.delete().status == 204


def test_idle_timeout(supervisor):
    sup = supervisor(config({"t": server_conf(idle_timeout=1)}))
    s = sup.initialize()
    [pid] = sup.children()
    # An open stream is not idle.
    _, r = s.request("tools/call", {"name": "slow", "arguments": {"count": 2,
                                                                  "interval_ms": 800}})
    assert r.events()[-1]["result"]
    assert alive(pid)
    wait_for(lambda: not alive(pid), TIMEOUT, "the idle process to end")
    r = s.post({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    assert r.status == 404 and r.error().endswith("was ended: idle for 1 s")


def test_eof_on_the_control_pipe(supervisor):
    sup = supervisor()
    sessions = [sup.initialize() for _ in range(3)]
    pids = sup.children()
    assert len(pids) == 3
    # A call in flight gets its error when the supervisor stops.
    rid, r = sessions[0].request("tools/call", {"name": "slow",
                                                "arguments": {"count": 5, "interval_ms": 2000}})
    assert r.event()["method"] == "notifications/message"
    sup.proc.stdin.close()
    end = r.event()
    assert end["id"] == rid and "the supervisor is stopping" in end["error"]["message"]
    assert sup.proc.wait(timeout=TIMEOUT) == 0
    assert not any(alive(p) for p in pids)
    wait_for(lambda: sup.logged("stopping (EOF on the control pipe)"), TIMEOUT, "the log line")


def test_sigterm_stops(supervisor):
    sup = supervisor()
    sup.initialize()
    pids = sup.children()
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.proc.wait(timeout=TIMEOUT) == 0
    assert not any(alive(p) for p in pids)


def test_kill_9_leaves_no_process(supervisor):
    sup = supervisor()
    for _ in range(3):
        sup.initialize()
    pids = sup.children()
    assert len(pids) == 3
    sup.proc.kill()
    sup.proc.wait(timeout=TIMEOUT)
    wait_for(lambda: not any(alive(p) for p in pids), TIMEOUT, "PDEATHSIG to end them")


def test_reload_adds_a_server_and_keeps_sessions(supervisor):
    sup = supervisor()
    s = sup.initialize()
    answer = sup.configure(config({"t": server_conf(), "u": server_conf()}, log_level="debug"))
    assert answer == f"ready {sup.port}"
    assert text_of(s.tool("echo", text="still")) == "still"
    u = sup.initialize("u")
    assert text_of(u.tool("echo", text="new")) == "new"
    # A configuration that is refused keeps the one before.
    answer = sup.configure({"listen": "127.0.0.1:0"})
    assert answer == "error advertise is missing"
    assert text_of(u.tool("echo", text="kept")) == "kept"
    answer = sup.configure(b"{not json")
    assert answer.startswith("error the configuration is not one JSON document")
    # A server removed: its running session goes on, a new one is refused.
    assert sup.configure(config({"u": server_conf()})) == f"ready {sup.port}"
    assert text_of(s.tool("echo", text="orphaned")) == "orphaned"
    r = sup.conn().request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize", "params": {}})
    assert r.status == 404


def test_first_configuration_refused():
    sup = Supervisor()
    assert sup.configure(config(secret="short")) == \
        "error secret must be at least 16 characters of visible ASCII"
    assert sup.proc.wait(timeout=TIMEOUT) == 1
    sup = Supervisor()
    answer = sup.configure(config({"t": server_conf(command=["relative"])}))
    assert answer == 'error servers.t.command[0] "relative" must be an absolute path'
    assert sup.proc.wait(timeout=TIMEOUT) == 1


def test_limits_429(supervisor):
    sup = supervisor(config({"t": server_conf(max_sessions_per_principal=1),
                             "one": server_conf(max_sessions=1)}, max_sessions=4))
    alice = {"MCP-Supervisor-Principal": "alice"}
    a1 = sup.initialize("t", headers=alice)
    r = sup.conn().request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize", "params": {}},
                           headers=alice)
    assert r.status == 429 and r.headers["retry-after"] == "1"
    assert r.error() == "the limit of 1 processes of stdio server t for principal alice is reached"
    sup.initialize("t", headers={"MCP-Supervisor-Principal": "bob"})
    sup.initialize("one")
    r = sup.conn().request("POST", "/stdio/one", {"jsonrpc": "2.0", "id": 1,
                                                  "method": "initialize", "params": {}})
    assert r.status == 429 and r.error() == "the limit of 1 processes of stdio server one is reached"
    sup.initialize("t")  # anonymous: not counted per principal; the 4th on the host
    r = sup.conn().request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize", "params": {}})
    assert r.status == 429 and r.error() == "the host's limit of 4 stdio server processes is reached"
    # An ended session frees its place at once.
    assert a1.delete().status == 204
    sup.initialize("t", headers=alice)


# ---- a server that stops reading, users, many sessions, keep-alive ---------------------------

# A stdio server in sh: answers initialize, then never reads stdin again and ignores nothing
# (sleep dies of SIGTERM); "ready" on stderr once it has answered.
DEAF_AFTER_INIT = ["/bin/sh", "-c",
                   "read line; echo '{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}'; "
                   "echo answered >&2; exec sleep 1000"]


def test_stdin_never_read_503(supervisor):
    sup = supervisor(config({"t": server_conf(),
                             "deaf": server_conf(command=DEAF_AFTER_INIT, stop_grace=1)}))
    c = sup.conn()
    r = c.request("POST", "/stdio/deaf", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                          "params": {}})
    assert r.status == 200
    deaf = Session(sup, "deaf", r.headers["mcp-session-id"], c)
    [pid] = sup.children()
    note = {"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "x" * (1024 * 1024)}}
    statuses = []
    for _ in range(20):
        statuses.append(deaf.post(note).status)
        if statuses[-1] != 202:
            break
    # The pipe takes 64 KiB, the queue 16 MiB: the 18th MiB is refused, and nothing waited.
    assert statuses[-1] == 503 and 16 <= len(statuses) <= 18, statuses
    r = deaf.post(note)
    assert r.status == 503 and r.headers["retry-after"] == "1"
    assert r.error().startswith("the stdio server is not reading its stdin: ")
    s = sup.initialize("t")
    assert text_of(s.tool("echo", text="unaffected")) == "unaffected"
    # Ending it: stdin closed (sleep does not care), SIGTERM after stop_grace/2.
    start = time.monotonic()
    assert deaf.delete().status == 204
    wait_for(lambda: not alive(pid), TIMEOUT, "the deaf process to end")
    assert 0.4 < time.monotonic() - start < 1.5


@pytest.mark.skipif(os.geteuid() != 0, reason="changing user needs root")
def test_user_and_group(supervisor):
    sup = supervisor(config({"t": server_conf(command=DEAF_AFTER_INIT, user="nobody",
                                              group="nogroup", directory="/tmp",
                                              limits={"nofile": 100, "as": 2 ** 33})}))
    r = sup.conn().request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 0,
                                                "method": "initialize", "params": {}})
    assert r.status == 200
    [pid] = sup.children()
    # Asleep, not only exec'd: the kernel names the process at its exec, and sleep's own start
    # (setlocale) holds a file of its own open for a moment after (CI, once: fd 3 listed).
    wait_for(lambda: Path(f"/proc/{pid}/comm").read_text() == "sleep\n"
             and "nanosleep" in Path(f"/proc/{pid}/wchan").read_text(), TIMEOUT,
             "the exec'd sleep to sleep")
    status = Path(f"/proc/{pid}/status").read_text()
    uid = [line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")][0]
    gid = [line.split()[1:] for line in status.splitlines() if line.startswith("Gid:")][0]
    groups = [line.split()[1:] for line in status.splitlines() if line.startswith("Groups:")][0]
    import grp
    import pwd
    assert set(uid) == {str(pwd.getpwnam("nobody").pw_uid)}
    assert set(gid) == {str(grp.getgrnam("nogroup").gr_gid)}
    assert groups == [str(grp.getgrnam("nogroup").gr_gid)]
    assert os.readlink(f"/proc/{pid}/cwd") == "/tmp"
    limits = Path(f"/proc/{pid}/limits").read_text()
    assert [line.split()[3:5] for line in limits.splitlines()
            if line.startswith("Max open files")] == [["100", "100"]]
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert sorted(e for e in env if e and not e.startswith(b"PWD=")) == \
        sorted(f"{k}={v}".encode() for k, v in SERVER_ENV.items())  # sh adds PWD
    assert sorted(os.listdir(f"/proc/{pid}/fd")) == ["0", "1", "2"]


# A stdio server that answers initialize and then only reads: a process costs little.
# (Its stdout stays open on fd 3: a stdout closed is a process gone.)
QUIET = ["/bin/sh", "-c", "read line; echo '{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}'; "
                          "exec 3>&1; exec cat >/dev/null"]


def test_many_idle_sessions(supervisor):
    n = int(os.environ.get("MCP_STDIO_MANY", "100" if SANITIZED else "1000"))
    sup = supervisor(config({"q": server_conf(command=QUIET), "t": server_conf()}))
    c = sup.conn()
    sids = []
    start = time.monotonic()
    for _ in range(n):
        r = c.request("POST", "/stdio/q", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                           "params": {}})
        assert r.status == 200
        sids.append(r.headers["mcp-session-id"])
    took = time.monotonic() - start
    assert len(sup.children()) == n
    # With all of them idle, a session is served as fast as ever.
    s = sup.initialize("t")
    start = time.monotonic()
    for i in range(20):
        assert text_of(s.tool("echo", text=str(i))) == str(i)
    assert time.monotonic() - start < 2.0
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    for sid in sids[::50]:
        assert c.request("POST", "/stdio/q", note, headers={"Mcp-Session-Id": sid}).status == 202
    for sid in sids:
        assert c.request("DELETE", "/stdio/q", headers={"Mcp-Session-Id": sid}).status == 204
    wait_for(lambda: len(sup.children()) == 1, 60, "the quiet processes to end")
    print(f"{n} sessions started in {took:.1f} s")


def test_keepalive_comment_on_an_open_stream(supervisor):
    sup = supervisor()
    s = sup.initialize()
    get = s.get()
    start = time.monotonic()
    # The comment is the only thing on the stream: read its raw chunk.
    line = get.conn.read_line(20)
    assert get.conn.read_exact(int(line, 16) + 2, 5) == b":\n\n\r\n"
    assert 14 < time.monotonic() - start < 17


def test_cancelled_request_ends_its_wait(supervisor):
    sup = supervisor()
    s = sup.initialize()
    rid, slow = s.request("tools/call", {"name": "slow",
                                         "arguments": {"count": 100, "interval_ms": 50}})
    assert slow.event()["method"] == "notifications/message"
    start = time.monotonic()
    r = s.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": rid, "reason": "test"}}, conn=sup.conn())
    assert r.status == 202
    # The server will not answer it: its stream ends at once, with no result.
    rest = slow.events()
    assert all("method" in e for e in rest)
    assert time.monotonic() - start < 1.0
    assert s.request("ping", rid=rid)[1].events()[-1]["id"] == rid  # the id is free again


# Answers initialize, then closes its stdout and lives on.
STDOUT_CLOSER = ["/bin/sh", "-c", "read line; echo '{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}'; "
                                  "exec >&-; exec sleep 1000"]


def test_stdout_closed(supervisor):
    sup = supervisor(config({"t": server_conf(command=STDOUT_CLOSER, stop_grace=1)}))
    c = sup.conn()
    r = c.request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                       "params": {}})
    assert r.status == 200
    s = Session(sup, "t", r.headers["mcp-session-id"], c)
    [pid] = sup.children()
    wait_for(lambda: not alive(pid), TIMEOUT, "the process to be ended")
    r = s.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status == 404 and r.error().endswith("of this session closed its stdout")


def test_session_id_within_256(supervisor):
    sup = Supervisor()
    long_url = "http://" + "h" * 137 + ".example:{port}"  # 158 bytes with a 5-digit port
    answer = sup.configure(config({"n" * 64: server_conf()}, advertise=long_url))
    assert answer.startswith("error servers.nnnn") and "over 256" in answer, answer
    assert sup.proc.wait(timeout=TIMEOUT) == 1
    sup = supervisor(config({"n" * 50: server_conf()}, advertise=long_url))
    s = sup.conn().request("POST", "/stdio/" + "n" * 50, {
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    assert s.status == 200 and len(s.headers["mcp-session-id"]) <= 256


def test_refused_body_is_read_before_the_close(supervisor):
    """A 403 before a large body is read: the client still gets it whole (no RST first)."""
    sup = supervisor()
    c = sup.conn()
    body = b"x" * (4 * 1024 * 1024)
    c.sock.sendall(f"POST /stdio/t HTTP/1.1\r\nMCP-Supervisor-Key: wrong-key-0123456789\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n".encode())
    c.sock.sendall(body)   # read and dropped by the supervisor, or this would block
    assert b" 403 " in c.read_line(TIMEOUT)
    while c.read_line(TIMEOUT):
        pass
    c.sock.shutdown(socket.SHUT_WR)
    assert c.closed_by_peer(TIMEOUT)


# Answers initialize; at the next line floods its stdout with notifications, 1 KiB each.
FLOODER = ["/bin/sh", "-c",
           "read line; echo '{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}'; read line; "
           "n='{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":"
           "\"info\",\"data\":\"" + "x" * 960 + "\"}}'; while :; do echo \"$n\"; done"]


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


def test_slow_stream_holds_the_process_back(supervisor):
    sup = supervisor(config({"f": server_conf(command=FLOODER, stop_grace=1)},
                            log_level="debug"))
    c = sup.conn()
    r = c.request("POST", "/stdio/f", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                       "params": {}})
    s = Session(sup, "f", r.headers["mcp-session-id"], c)
    get = s.get()                          # open, and not read for a while
    assert s.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202
    before = rss_kib(sup.proc.pid)
    wait_for(lambda: sup.logged("reading its stdout paused"), TIMEOUT, "the pause")
    # The supervisor stops reading the flood once the stream is 8 MiB behind: its memory stays
    # well under the 256 MiB at which it would drop the connection.
    deadline = time.monotonic() + 3
    peak = before
    while time.monotonic() < deadline:
        peak = max(peak, rss_kib(sup.proc.pid))
        time.sleep(0.1)
    assert peak - before < 64 * 1024, (before, peak)
    # Read: the stream goes on.
    for _ in range(20000):
        assert get.event()["method"] == "notifications/message"
    wait_for(lambda: sup.logged("reading its stdout resumed"), TIMEOUT, "the resume")
    assert s.delete().status == 204


def test_answer_after_its_client_left_goes_to_the_get_stream(supervisor):
    sup = supervisor()
    s = sup.initialize()
    c = sup.conn()
    rid, slow = s.request("tools/call", {"name": "slow",
                                         "arguments": {"count": 2, "interval_ms": 700}},
                          conn=c, rid="left")
    assert slow.event()["method"] == "notifications/message"
    c.close()                              # the client goes; the call goes on
    get = s.get()
    # Its id stays in flight until answered...
    dup = s.request("ping", rid="left")[1]
    assert dup.status == 409
    # ... and its answer, for nobody now, comes on the GET stream.
    while (e := get.event()).get("id") != "left":
        assert e["method"] == "notifications/message"
    assert text_of(e) == "slow done: 2 steps"
    assert s.request("ping", rid="left")[1].events()[-1]["id"] == "left"


def test_log_line_format(supervisor):
    import re
    sup = supervisor()
    s = sup.initialize()
    s.tool("echo", text="x")
    wait_for(lambda: sup.logged("stderr: mcp-test-backend: tools/call"), TIMEOUT, "the line")
    form = re.compile(r"^\[(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2}"
                      r"\.\d{6} \d{4}\] \[mcp:(emerg|alert|crit|error|warn|notice|info|debug)\] "
                      rf"\[pid {sup.proc.pid}\] mcp-stdio: ")
    assert sup.log and all(form.match(line) for line in sup.log), sup.log


def test_connection_close_after_a_stream(supervisor):
    """Connection: close (and Expect: 100-continue): the whole stream, then the close."""
    sup = supervisor()
    s = sup.initialize()
    c = sup.conn()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "slow", "arguments": {"count": 3, "interval_ms": 100},
                                  "_meta": {"progressToken": "p"}}}).encode()
    c.sock.sendall(f"POST /stdio/t HTTP/1.1\r\nMCP-Supervisor-Key: {KEY}\r\n"
                   f"Mcp-Session-Id: {s.sid}\r\nConnection: close\r\nExpect: 100-continue\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n".encode())
    assert c.read_line(TIMEOUT) == b"HTTP/1.1 100 Continue"
    assert c.read_line(TIMEOUT) == b""
    c.sock.sendall(body)
    assert c.read_line(TIMEOUT) == b"HTTP/1.1 200 OK"
    headers = {}
    while (line := c.read_line(TIMEOUT)):
        k, v = line.decode().split(":", 1)
        headers[k.lower()] = v.strip()
    assert headers["connection"] == "close" and headers["transfer-encoding"] == "chunked"
    r = Response(c, 200, headers)
    events = r.events()
    assert [e.get("method") for e in events] == ["notifications/progress"] * 3 + [None]
    c.sock.shutdown(socket.SHUT_WR)
    assert c.closed_by_peer(TIMEOUT)


def test_descriptor_limits(supervisor):
    """The supervisor raises its soft RLIMIT_NOFILE to the hard one; processes get the soft one
    back (a server that walks every descriptor number must not walk the supervisor's)."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft = min(1000, hard)

    def lower():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    sup = supervisor(config({"t": server_conf(command=DEAF_AFTER_INIT)}), preexec_fn=lower)

    def limits_of(pid):
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return [int(v) for v in line.split()[3:5]]

    assert limits_of(sup.proc.pid) == [hard, hard]
    r = sup.conn().request("POST", "/stdio/t", {"jsonrpc": "2.0", "id": 0,
                                                "method": "initialize", "params": {}})
    assert r.status == 200
    [pid] = sup.children()
    assert limits_of(pid) == [soft, hard]


def test_command_line():
    r = subprocess.run([str(SUPERVISOR), "--version"], capture_output=True, timeout=TIMEOUT,
                       env={**os.environ, **SANITIZER_ENV})
    assert r.returncode == 0 and r.stdout.startswith(b"mcp-stdio-supervisor ")
    r = subprocess.run([str(SUPERVISOR), "--help"], capture_output=True, timeout=TIMEOUT,
                       env={**os.environ, **SANITIZER_ENV})
    assert r.returncode == 0 and b"usage: mcp-stdio-supervisor" in r.stdout
    r = subprocess.run([str(SUPERVISOR), "--what"], capture_output=True, timeout=TIMEOUT,
                       env={**os.environ, **SANITIZER_ENV})
    assert r.returncode == 2 and b"usage:" in r.stderr
    # Stdin that is no pipe: said, exit 1.
    r = subprocess.run([str(SUPERVISOR)], stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=TIMEOUT, env={**os.environ, **SANITIZER_ENV})
    assert r.returncode == 1 and b"stdin must be the control pipe" in r.stderr
    # EOF before any configuration: nothing to serve, exit 1.
    r = subprocess.run([str(SUPERVISOR)], input=b"", capture_output=True,
                       timeout=TIMEOUT, env={**os.environ, **SANITIZER_ENV})
    assert r.returncode == 1 and r.stdout == b""
