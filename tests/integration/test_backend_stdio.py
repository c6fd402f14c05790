"""The C test backend's --stdio mode, alone: no stack (no PostgreSQL, no httpd).

`tests/backend/mcp-test-backend --stdio` serves one MCP session on stdin/stdout (newline-delimited
JSON-RPC, the MCP stdio transport); issue 23's supervisor runs it. These tests start the built
binary with pipes and check what the supervisor will rely on: the session's calls, progress,
concurrency (a ping answered while `slow` runs), a server->client request answered on stdin,
batches by protocol version, EOF -> exit 0 at once, and each --stdio-* fault. Every read has a
deadline (reader threads and queues), and every process started is reaped: the autouse fixture
fails a test that leaves a child behind, zombie or not.

The binary: MCP_BACKEND_BIN, else the --backend-bin of MCP_TEST_STACK_ARGS (so scripts/test's
sanitizer pass runs these tests on build-asan/tests/backend/mcp-test-backend), else the tree's.
An ASan-built one runs with tests/stack's sanitizer options, reporting to stderr: a report there
fails the test, and a leak found at exit makes the exit status after EOF non-zero.
Run: /usr/bin/python3 -m pytest -q tests/integration/test_backend_stdio.py
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def _binary() -> Path:
    if os.environ.get("MCP_BACKEND_BIN"):
        return Path(os.environ["MCP_BACKEND_BIN"]).resolve()
    args = shlex.split(os.environ.get("MCP_TEST_STACK_ARGS", ""))
    if "--backend-bin" in args[:-1]:
        return Path(args[args.index("--backend-bin") + 1]).resolve()
    return REPO / "tests" / "backend" / "mcp-test-backend"


BINARY = _binary()
# For an ASan build: tests/stack's options (intercept_tls_get_addr=0: LLVM 14's runtime can crash
# in its leak check over libgnutls's TLS block, which libmicrohttpd brings), reports on stderr.
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:fast_unwind_on_malloc=0:disable_coredump=1:"
                    "intercept_tls_get_addr=0",
    "LSAN_OPTIONS": f"suppressions={REPO / 'tests' / 'lsan.supp'}:print_suppressions=0",
    "UBSAN_OPTIONS": "print_stacktrace=1",
}
TIMEOUT = 5.0  # any single message; the suite itself takes a few seconds
PROTOCOL = "2025-11-25"


def children() -> list[str]:
    """This process's mcp-test-backend children, zombies included, as 'pid state' strings."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        if int(ppid) == os.getpid() and comm.startswith("mcp-test-backen"):
            found.append(f"{entry} {state}")
    return found


class Backend:
    """One `mcp-test-backend --stdio` with its three pipes. Threads read stdout (lines into a
    queue) and stderr (lines counted, the non-flood ones kept), so no read here blocks without a
    deadline and a chatty stderr never stalls the server."""

    def __init__(self, *args: str):
        if not BINARY.is_file():
            pytest.fail(f"{BINARY} is missing: run scripts/build", pytrace=False)
        self.proc = subprocess.Popen([str(BINARY), "--stdio", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **SANITIZER_ENV})
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr_lines: list[str] = []
        self.stderr_count = 0
        self.next_id = 0
        self.pending: list[dict] = []  # messages read while waiting for another
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_stdout(self):
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.put(line)
        self.lines.put(None)  # EOF

    def _read_stderr(self):
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr_count += 1
            text = line.decode(errors="replace").rstrip("\n")
            if "stderr flood line" not in text:
                self.stderr_lines.append(text)

    # ---- the wire ----
    def send(self, msg) -> None:
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def raw_line(self, timeout: float = TIMEOUT) -> bytes | None:
        """The next stdout line as it came (None at EOF)."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line on stdout within {timeout} s; "
                                 f"stderr: {self.stderr_lines[-10:]}") from None

    def recv(self, timeout: float = TIMEOUT) -> dict:
        if self.pending:
            return self.pending.pop(0)
        line = self.raw_line(timeout)
        assert line is not None, f"stdout ended; stderr: {self.stderr_lines[-10:]}"
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        return json.loads(line)

    def request(self, method: str, params: dict | None = None) -> int:
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.next_id

    def until(self, rid, timeout: float = TIMEOUT) -> tuple[dict, list[dict]]:
        """The response to rid, and the other messages read before it, in order."""
        others = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            if msg.get("id") == rid and "method" not in msg:
                return msg, others
            others.append(msg)

    def call(self, method: str, params: dict | None = None) -> dict:
        resp, others = self.until(self.request(method, params))
        self.pending.extend(others)
        return resp

    def tool(self, name: str, **arguments) -> dict:
        return self.call("tools/call", {"name": name, "arguments": arguments})

    def initialize(self, version: str = PROTOCOL, capabilities: dict | None = None) -> dict:
        resp = self.call("initialize", {"protocolVersion": version,
                                        "capabilities": capabilities or {},
                                        "clientInfo": {"name": "test_backend_stdio",
                                                       "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return resp

    # ---- the end ----
    def eof(self, within: float = 1.0) -> float:
        """Closes stdin; the process must exit 0 within `within` s. Returns how long it took."""
        start = time.monotonic()
        self.proc.stdin.close()
        try:
            rc = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {within} s after EOF on stdin") from None
        took = time.monotonic() - start
        assert rc == 0, f"exit status {rc} after EOF; stderr: {self.stderr_lines[-10:]}"
        return took

    def reap(self) -> list[str]:
        """Kills the process if it still runs, waits for it and its reader threads; returns
        the sanitizer reports seen on its stderr (never raises for them)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=TIMEOUT)
        for t in self._threads:
            t.join(timeout=TIMEOUT)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:  # stdin with unflushed data to a dead process
                pass
        if any("Sanitizer" in line or "runtime error:" in line for line in self.stderr_lines):
            return self.stderr_lines
        return []


@pytest.fixture
def backend():
    """backend(*args) -> a started Backend; all of them are reaped at the end, and the test
    fails if any mcp-test-backend child (a zombie included) is left."""
    started: list[Backend] = []

    def start(*args: str) -> Backend:
        b = Backend(*args)
        started.append(b)
        return b

    yield start
    reports = [line for b in started for line in b.reap()]
    assert children() == [], "mcp-test-backend processes left behind"
    assert reports == [], "sanitizer reports:\n" + "\n".join(reports)


def text_of(resp: dict) -> str:
    assert "result" in resp, resp
    return resp["result"]["content"][0]["text"]


# ---- the session -----------------------------------------------------------------------------

def test_initialize_tools_echo_and_eof(backend):
    b = backend()
    init = b.initialize()
    assert init["result"]["protocolVersion"] == PROTOCOL
    assert init["result"]["serverInfo"]["name"] == "mcp-test-backend"
    names = {t["name"] for t in b.call("tools/list")["result"]["tools"]}
    assert {"echo", "slow", "sample", "notify"} <= names
    assert text_of(b.tool("echo", text="over stdio\nwith a newline")) == "over stdio\nwith a newline"
    assert b.call("ping")["result"] == {}
    # Prompts, resources and completion: the same tables as over HTTP.
    assert b.call("prompts/list")["result"]["prompts"]
    uri = b.call("resources/list")["result"]["resources"][0]["uri"]
    assert b.call("resources/read", {"uri": uri})["result"]["contents"][0]["uri"] == uri
    assert "completion" in b.call("completion/complete", {
        "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
        "argument": {"name": "arg1", "value": ""}})["result"]
    # The same errors as over HTTP, each on its line.
    assert b.call("no/such/method")["error"]["code"] == -32601
    assert b.tool("no_such_tool")["error"]["code"] == -32602
    assert b.call("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                 "clientInfo": {"name": "again", "version": "1"}})["error"]["code"] == -32600
    b.proc.stdin.write(b"{not json\n")
    b.proc.stdin.flush()
    err = b.recv()
    assert err["id"] is None and err["error"]["code"] == -32700
    assert b.pending == []
    b.eof()
    # A log line per message received, on stderr.
    wait_for(lambda: "mcp-test-backend: EOF on stdin, exiting" in b.stderr_lines, TIMEOUT,
             "the EOF log line")
    for line in ("mcp-test-backend: initialize", "mcp-test-backend: notifications/initialized",
                 "mcp-test-backend: tools/list", "mcp-test-backend: tools/call",
                 "mcp-test-backend: ping"):
        assert line in b.stderr_lines


def test_line_over_4_mib_refused_and_skipped(backend):
    b = backend()
    b.initialize()
    b.proc.stdin.write(b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"'
                       + b"x" * (4 * 1024 * 1024) + b'"}}\n')
    b.proc.stdin.flush()
    err = b.recv()
    assert err["id"] is None and err["error"]["code"] == -32000
    assert b.call("ping")["result"] == {}  # the next line is read as usual
    b.eof()


def test_slow_progress_while_ping_answered(backend):
    b = backend()
    b.initialize()
    slow = b.request("tools/call", {"name": "slow", "arguments": {"count": 3, "interval_ms": 150},
                                    "_meta": {"progressToken": "tok"}})
    first = b.recv()
    assert first["method"] == "notifications/progress"
    assert first["params"] == {"progressToken": "tok", "progress": 1, "total": 3,
                               "message": "step 1 of 3"}
    # While slow runs (its result is 300 ms away), a ping is answered.
    ping = b.request("ping")
    resp, before = b.until(ping)
    assert resp["result"] == {}
    assert all(m.get("id") != slow for m in before), "the ping waited for slow"
    result, rest = b.until(slow)
    progress = [m["params"]["progress"] for m in before + rest
                if m.get("method") == "notifications/progress"]
    assert progress == [2, 3]
    assert text_of(result) == "slow done: 3 steps"
    b.eof()


def test_slow_without_token_logs_and_cancel(backend):
    b = backend()
    b.initialize()
    slow = b.request("tools/call", {"name": "slow", "arguments": {"count": 100,
                                                                  "interval_ms": 50}})
    first = b.recv()
    assert first["method"] == "notifications/message" and first["params"]["logger"] == "slow"
    b.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": slow, "reason": "test"}})
    info = json.loads(text_of(b.tool("session_info")))
    assert info["cancelled"] == [slow]
    b.eof()
    # No result for the cancelled call, ever: only its notifications up to the cancel.
    rest = b.pending + [json.loads(line) for line in iter(b.raw_line, None)]
    assert all(m.get("method") == "notifications/message" for m in rest), rest


def test_sample_answered_on_stdin(backend):
    b = backend()
    b.initialize(capabilities={"sampling": {}})
    call = b.request("tools/call", {"name": "sample", "arguments": {"prompt": "capital of France?"}})
    ask = b.recv()
    assert ask["method"] == "sampling/createMessage"
    assert ask["params"]["messages"][0]["content"]["text"] == "capital of France?"
    b.send({"jsonrpc": "2.0", "id": ask["id"],
            "result": {"role": "assistant", "content": {"type": "text", "text": "Paris"},
                       "model": "test-model", "stopReason": "endTurn"}})
    resp, others = b.until(call)
    assert others == []
    assert text_of(resp) == "sampled: Paris"
    b.eof()


def test_elicitation_and_list_changed(backend):
    b = backend()
    b.initialize(capabilities={"elicitation": {}})
    call = b.request("tools/call", {"name": "test_elicitation", "arguments": {"message": "who?"}})
    ask = b.recv()
    assert ask["method"] == "elicitation/create"
    b.send({"jsonrpc": "2.0", "id": ask["id"],
            "result": {"action": "accept", "content": {"username": "u", "email": "e@x"}}})
    resp, _ = b.until(call)
    assert "action=accept" in text_of(resp)
    # What goes on the standalone GET stream over HTTP comes on stdout.
    assert text_of(b.tool("notify", text="hello")) == "sent"
    resp = b.tool("test_trigger_tool_change")
    assert "sent on 1 open stream" in text_of(resp)
    methods = []
    while len(methods) < 2:
        methods.append(b.recv()["method"])
    assert sorted(methods) == ["notifications/message", "notifications/tools/list_changed"]
    b.eof()


def test_dialog_round_of_three_requests(backend):
    """A 2026-07-28 fixture: three server->client requests at once, answered in any order."""
    b = backend()
    b.initialize(capabilities={"sampling": {}, "elicitation": {}, "roots": {}})
    call = b.request("tools/call", {"name": "test_input_required_result_multiple_inputs",
                                    "arguments": {}})
    asks = {m["id"]: m["method"] for m in (b.recv(), b.recv(), b.recv())}
    assert asks == {"user_name": "elicitation/create", "greeting": "sampling/createMessage",
                    "client_roots": "roots/list"}
    b.send({"jsonrpc": "2.0", "id": "client_roots",
            "result": {"roots": [{"uri": "file:///r", "name": "R"}]}})
    b.send({"jsonrpc": "2.0", "id": "greeting",
            "result": {"role": "assistant", "content": {"type": "text", "text": "hi"},
                       "model": "m"}})
    b.send({"jsonrpc": "2.0", "id": "user_name",
            "result": {"action": "accept", "content": {"name": "Ada"}}})
    resp, others = b.until(call)
    assert others == []
    assert text_of(resp) == "name: Ada; greeting: hi; 1 root(s): file:///r (R)"
    b.eof()


def test_batches_by_protocol_version(backend):
    old = backend()
    old.initialize("2025-03-26")
    old.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"},
              {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
              {"jsonrpc": "2.0", "id": "b", "method": "tools/call",
               "params": {"name": "echo", "arguments": {"text": "x"}}},
              {"jsonrpc": "2.0", "id": "c", "method": "tools/call",
               "params": {"name": "slow", "arguments": {}}}])
    answers = old.recv()
    assert [a["id"] for a in answers] == ["a", "b", "c"]
    assert answers[1]["result"]["content"][0]["text"] == "x"
    assert answers[2]["error"]["code"] == -32600  # streamed tools: not in a batch
    old.eof()

    new = backend()
    new.initialize(PROTOCOL)
    new.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"}])
    refused = new.recv()
    assert refused["id"] is None and refused["error"]["code"] == -32600
    assert "2025-11-25" in refused["error"]["message"]
    new.eof()


def test_eof_during_calls_exits_at_once(backend):
    b = backend()
    b.initialize(capabilities={"sampling": {}})
    b.request("tools/call", {"name": "slow", "arguments": {"count": 10, "interval_ms": 10000},
                             "_meta": {"progressToken": 1}})
    assert b.recv()["method"] == "notifications/progress"
    b.request("tools/call", {"name": "sample", "arguments": {"prompt": "never answered"}})
    assert b.recv()["method"] == "sampling/createMessage"
    assert b.eof(within=1.0) < 1.0
    assert b.raw_line() is None  # abandoned: no result after EOF


# ---- the faults ------------------------------------------------------------------------------

def test_crash_after(backend):
    b = backend("--stdio-crash-after", "3")
    b.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                             "clientInfo": {"name": "t", "version": "1"}})
    assert b.recv()["id"] == 1
    b.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    b.request("ping")  # the third message: never answered
    assert b.proc.wait(timeout=TIMEOUT) == 3
    assert b.raw_line() is None
    wait_for(lambda: any("crash" in line for line in b.stderr_lines), TIMEOUT, "the crash line")


def test_exit_at_start(backend):
    b = backend("--stdio-exit-at-start")
    assert b.proc.wait(timeout=TIMEOUT) == 1
    assert b.raw_line() is None


def test_garbage_before_each_answer(backend):
    b = backend("--stdio-garbage")

    def answer(rid):
        garbage = b.raw_line()
        with pytest.raises(ValueError):
            json.loads(garbage)
        assert json.loads(b.raw_line())["id"] == rid

    b.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                             "clientInfo": {"name": "t", "version": "1"}})
    answer(1)
    b.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    answer(2)
    b.request("tools/call", {"name": "slow", "arguments": {"count": 1, "interval_ms": 0}})
    # A notification is not an answer: no garbage before it; then the result's.
    assert json.loads(b.raw_line())["method"] == "notifications/message"
    answer(3)
    b.eof()


def test_huge_line(backend):
    size = 16 * 1024 * 1024
    b = backend("--stdio-huge-line", str(size))
    b.initialize()
    b.request("tools/call", {"name": "echo", "arguments": {"text": "small"}})
    line = b.raw_line(timeout=2 * TIMEOUT)
    assert len(line) == size + 1 and line.endswith(b"\n")
    msg = json.loads(line)
    assert msg["id"] == 2 and len(msg["result"]["content"][0]["text"]) > size - 100
    assert text_of(b.tool("echo", text="small")) == "small"  # the first tools/call only
    b.eof()


def test_no_read(backend):
    b = backend("--stdio-no-read")
    wait_for(lambda: any("never reading stdin" in line for line in b.stderr_lines), TIMEOUT,
             "the no-read line")
    # Nobody reads: the pipe fills up (64 KiB on Linux) and a write would block.
    fd = b.proc.stdin.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    ping = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}) + "\n").encode()
    written = 0
    with pytest.raises(BlockingIOError):
        while written < 16 * 1024 * 1024:
            written += os.write(fd, ping)
    assert written < 16 * 1024 * 1024
    assert b.lines.empty() and b.proc.poll() is None
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=TIMEOUT) == -signal.SIGTERM


def test_stderr_flood(backend):
    b = backend("--stdio-stderr-flood")
    b.initialize()
    wait_for(lambda: b.stderr_count > 10000, TIMEOUT, "10000 stderr lines")
    assert text_of(b.tool("echo", text="still serving")) == "still serving"
    b.eof()
    wait_for(lambda: "mcp-test-backend: tools/call" in b.stderr_lines, TIMEOUT,
             "the request's log line among the flood")


def test_options_of_the_other_transport_refused():
    for args in (["--stdio", "--port", "0"], ["--stdio-garbage"]):
        r = subprocess.run([str(BINARY), *args], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=TIMEOUT)
        assert r.returncode == 2, (args, r.stderr)


def test_quiet_and_input_all_at_once():
    """--quiet: no log lines; a whole session piped in at once, answered, then exit 0 at EOF."""
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "add", "arguments": {"a": 2, "b": 3}}}]
    r = subprocess.run([str(BINARY), "--stdio", "--quiet"],
                       input=b"".join(json.dumps(m).encode() + b"\n" for m in lines),
                       capture_output=True, timeout=TIMEOUT, env={**os.environ, **SANITIZER_ENV})
    assert r.returncode == 0 and r.stderr == b""
    answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert [a["id"] for a in answers] == [1, 2]
    assert answers[1]["result"]["structuredContent"] == {"sum": 5}
