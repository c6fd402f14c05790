"""Fixtures for the mod_mcp integration tests.

stack   (session) the running test stack as a dict of stack.env values (MCP_URL, MCP_URLS,
        MCP_AUTH_URL, MCP_PG, MCP_STACK_DIR, ...; see tests/stack). When the environment
        variable MCP_STACK_ENV names an existing stack.env, that stack is used as it is and
        left running; otherwise `tests/stack up --httpd 2 --tls --http2 [--conf gateway.conf]
        $MCP_TEST_STACK_ARGS` (gateway.conf beside this file, when there is one) starts a fresh one in a new
        /tmp/mcp-stack.XXXXXX directory and `tests/stack down` stops it at the end (its
        database files go; the directory, logs and all, as a run_dir's: see below).
        MCP_URL(S) and MCP_AUTH_URL(S) are the plain http:// endpoints here (MCP_HTTP_*),
        whatever the stack's options: most tests speak HTTP/1.1 to them; the TLS endpoints stay
        in MCP_HTTPS_URL(S), with MCP_CA.
wire    how the session factory `mcp` talks to the stack: plain HTTP/1.1 by default. A test
        module that defines `wire` as `any_wire` (below) runs each of its tests once per mode
        of WIRE_MODES: "http1" (HTTP/1.1, plain), "h2c" (HTTP/2 with prior knowledge on the
        plain port), "h2tls" (HTTP/2 over TLS, ALPN). MCP_TEST_MODES (comma-separated) limits
        the modes; those the stack cannot serve (no --http2, no --tls) are skipped.
pg      a psycopg2 connection (autocommit) to MCP_PG, closed after the test (database(env)
        gives the same for any stack's env).
mcp     factory: mcp(url=None, auth=None, **kw) -> McpSession (not yet initialized) speaking
        the wire's mode, by default to the wire's first endpoint; every session made is closed
        after the test.

For a test module that needs a stack of its own (another gateway .conf, another backend):
run_dir(prefix) a fresh directory under /tmp; node_backend(node, d, script, *args) a
tests/node script that prints "listening PORT" (yields the port); own_stack(d, *args) a stack
started with `tests/stack up --dir d/stack ARGS $MCP_TEST_STACK_ARGS` (so the sanitizer pass
runs it with its module too), stopped at the end, failing loudly when `down` does. Such a stack
started with --tls --http2 is reached over every wire too: parametrize a fixture over
wanted_modes() and take wire_client(mode, env) (or wire_of). fault_backend(stack_dir) runs
tests/backend/mcp-fault-backend on STACK_DIR/faults.sock, where the .confs' fault locations point.

What is left in /tmp: at the end of the session (of each pytest-xdist worker, once every stack
is down) a run_dir goes entirely when every test of the module that made it passed (setup and
teardown included), and so does the shared stack's directory when every test of the process
passed. Any other is kept for its logs and named in the summary ("stack directories kept").
MCP_KEEP_STACK=1 keeps them all, database files too.

Markers: not_asan  a test that scripts/test's ASan+UBSan pass leaves out (`-m "not not_asan"`):
its sanitizer value is nil or already had from the tests of its module that stay in that pass
(each use says why). The event MPM pass runs it, as does any run without that -m.

Run with Debian's interpreter: /usr/bin/python3 -m pytest -v tests/integration
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import psycopg2
import pytest

from mcp_client import McpSession
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"
# The MPM of the stack the tests start (MCP_TEST_MPM: event, worker or prefork).
MPM = os.environ.get("MCP_TEST_MPM", "event")
# Extra `tests/stack up` arguments (shell words), e.g. the sanitizer build's module:
# MCP_TEST_STACK_ARGS="--module build-asan/mod_mcp/.libs/mod_mcp.so --backend-bin ...".
STACK_ARGS = shlex.split(os.environ.get("MCP_TEST_STACK_ARGS", ""))
# Extra httpd directives for the tests' stack (Include'd at the end of each httpd.conf).
GATEWAY_CONF = Path(__file__).resolve().parent / "gateway.conf"
# How tests that take `any_wire` reach the gateway (see the module docstring).
WIRE_MODES = ("http1", "h2c", "h2tls")


def pytest_configure(config):
    config.addinivalue_line("markers", "not_asan: left out of scripts/test's ASan+UBSan pass "
                            "(its sanitizer value is nil or had from the module's other tests)")


# Whether the tests run against the sanitizer build (scripts/test's ASan+UBSan pass names
# build-asan's module in MCP_TEST_STACK_ARGS): loops of N sessions run fewer there.
ASAN = any("build-asan" in a for a in STACK_ARGS)


def load_stack_env(path: str | os.PathLike) -> dict[str, str]:
    """Parse a stack.env written by tests/stack (KEY='value' lines, shell quoting)."""
    env: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        words = shlex.split(value)
        env[key] = words[0] if words else ""
    return env


def httpd_pids(env: dict[str, str], instance: int = 0) -> list[int]:
    """The parent of one httpd instance of a stack, then its children (httpd's own: not the
    stdio supervisor the parent also runs)."""
    parent = int(Path(env["MCP_HTTPD_PIDFILES"].split()[instance]).read_text())
    pids = [parent]
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent \
                        and (p / "comm").read_text().strip() == "apache2":
                    pids.append(int(p.name))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def plain_endpoints(env: dict[str, str]) -> dict[str, str]:
    """The stack's values with MCP_URL(S) and MCP_AUTH_URL(S) naming the plain http:// endpoints
    (a --tls stack names its https:// ones there; they stay in MCP_HTTPS_*)."""
    env = dict(env)
    for key in ("MCP_URL", "MCP_URLS", "MCP_AUTH_URL", "MCP_AUTH_URLS"):
        plain = env.get(key.replace("MCP_", "MCP_HTTP_", 1))
        if plain:
            env[key] = plain
    return env


class Wire:
    """One way of reaching the stack: a mode of WIRE_MODES, its endpoints and its client."""

    def __init__(self, mode: str, stack: dict[str, str]):
        self.mode = mode
        tls = mode == "h2tls"
        self.transport = "http1" if mode == "http1" else "h2"
        self.urls = stack["MCP_HTTPS_URLS" if tls else "MCP_URLS"].split()
        self.ca = stack.get("MCP_CA") if tls else None

    def url(self, instance: int = 0, path: str = "/mcp") -> str:
        """The endpoint `path` (e.g. "/mcp-short") on httpd instance `instance`."""
        return self.urls[instance].rsplit("/", 1)[0] + path

    def session(self, url: str | None = None, **kw) -> McpSession:
        return McpSession(url or self.urls[0], transport=self.transport, ca=self.ca, **kw)

    def __repr__(self) -> str:
        return f"Wire({self.mode})"


def _wanted_modes() -> list[str]:
    given = os.environ.get("MCP_TEST_MODES")
    if not given:
        return list(WIRE_MODES)
    modes = [m.strip() for m in given.split(",") if m.strip()]
    bad = [m for m in modes if m not in WIRE_MODES]
    if bad:
        raise pytest.UsageError(f"MCP_TEST_MODES: unknown mode(s) {bad}; known: {WIRE_MODES}")
    return modes


def _show(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# The directories made for stacks in this process, each with the test module it belongs to
# (None: the shared `stack`, which every module may use); the modules with a failed or erred
# test; the module whose test is running (run_dir is called from its fixtures or its tests).
_RUN_DIRS: list[tuple[Path, str | None]] = []
_FAILED_MODULES: set[str] = set()
_running_module: str | None = None
# The directories kept, with why, for the summary (a pytest-xdist controller gathers its
# workers' here: they print no summary of their own).
_KEPT: list[str] = []


def _new_dir(prefix: str, module: str | None) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)   # readable by httpd's and PostgreSQL's users
    _RUN_DIRS.append((d, module))
    return d


def run_dir(prefix: str) -> Path:
    """A fresh directory under /tmp (readable by httpd's user) for a stack and its logs; removed
    at the session's end if every test of the calling module passed (see the docstring above)."""
    return _new_dir(prefix, _running_module)


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # Before the item's setup, where its module's fixtures call run_dir.
    global _running_module
    _running_module = _module_of(item.nodeid)


def pytest_runtest_logreport(report):
    # Setup and teardown too: a module fixture's stack that failed to start or to stop.
    if report.failed:
        _FAILED_MODULES.add(_module_of(report.nodeid))


# trylast: after pytest's own pytest_sessionfinish, which tears down what fixtures are still
# up (after an interruption, say), so no stack is running in a directory removed here.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # An interrupted session's modules may not have run all their tests: nothing is known good.
    completed = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    kept = []
    for d, module in _RUN_DIRS:
        if not d.exists():   # removed by its test already (test_config's)
            continue
        failed = sorted(_FAILED_MODULES) if module is None else \
            [module] if module in _FAILED_MODULES else []
        if os.environ.get("MCP_KEEP_STACK"):
            why = "MCP_KEEP_STACK"
        elif failed:
            why = "failed: " + ", ".join(failed)
        elif not completed:
            why = "session " + pytest.ExitCode(exitstatus).name
        else:
            shutil.rmtree(d, ignore_errors=True)
            continue
        kept.append(f"{d}  ({why})")
    _KEPT.extend(kept)
    if hasattr(session.config, "workeroutput"):   # a pytest-xdist worker: to its controller
        session.config.workeroutput["mcp_kept_dirs"] = kept


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    # pytest-xdist's controller: a worker's kept directories (none known if it crashed).
    _KEPT.extend(getattr(node, "workeroutput", {}).get("mcp_kept_dirs", []))


def pytest_terminal_summary(terminalreporter):
    if _KEPT:
        terminalreporter.write_sep("-", "stack directories kept (their logs)")
        for line in _KEPT:
            terminalreporter.write_line(line)


@contextlib.contextmanager
def node_backend(node: str, d: Path, script: str, *args: str):
    """tests/node/SCRIPT on an ephemeral port (`SCRIPT 0 ARGS`; it prints "listening PORT"),
    its output in d/backend.log. Yields the port; the process is stopped at the end."""
    node_dir = REPO / "tests" / "node"
    with open(d / "backend.log", "wb") as log:
        backend = subprocess.Popen([node, str(node_dir / script), "0", *args], cwd=node_dir,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        port = wait_for(lambda: next((l.split()[1] for l in _show(d / "backend.log").splitlines()
                                      if l.startswith("listening ")), None)
                        or (backend.poll() is not None and "exited"),
                        timeout=30, what=f"{script} to listen")
        assert port != "exited", _show(d / "backend.log")
        yield port
    finally:
        backend.terminate()
        try:
            backend.wait(10)
        except subprocess.TimeoutExpired:
            backend.kill()


EVENTS_OF_ANOTHER_SESSION = """
SELECT e.id, e.stream_id, e.session_id, s.session_id
  FROM mcp.events e JOIN mcp.streams s ON s.id = e.stream_id
 WHERE e.session_id IS DISTINCT FROM s.session_id
 LIMIT 5
"""


def events_of_another_session(env: dict[str, str]):
    """Rows of mcp.events whose session_id is not their stream's (at most 5), or None when the
    stack's database cannot be asked (stopped by its test, or never made). Since schema 14 only
    mcp.events_default's rows are checked against mcp.sessions per row; a stream's rows name
    their session through the stream, and every statement stores the stream's: the stacks'
    teardowns hold each run to that."""
    try:
        conn = psycopg2.connect(env["MCP_PG"], connect_timeout=5)
    except Exception:
        return None
    try:
        conn.autocommit = True
        with conn.cursor() as c:
            c.execute(EVENTS_OF_ANOTHER_SESSION)
            return c.fetchall()
    except psycopg2.Error:
        return None
    finally:
        conn.close()


def check_events_sessions(env: dict[str, str]) -> None:
    bad = events_of_another_session(env)
    if bad:
        raise RuntimeError("mcp.events rows whose session is not their stream's "
                           f"(id, stream, session, stream's session): {bad}")


@contextlib.contextmanager
def own_stack(d: Path, *args: str):
    """A stack of a test module's own in d/stack: `tests/stack up ARGS $MCP_TEST_STACK_ARGS`
    (with --mpm $MCP_TEST_MPM when that is set; its output in d/stack-up.log). Yields its
    stack.env values. `tests/stack down` at the end fails loudly (a sanitizer report of an ASan
    --module, say); the database files go unless MCP_KEEP_STACK is set."""
    stack_dir = d / "stack"
    # MCP_TEST_MPM, when given (scripts/test's prefork pass), for a module's own stack too.
    mpm = ["--mpm", MPM] if os.environ.get("MCP_TEST_MPM") and "--mpm" not in args else []
    try:
        with open(d / "stack-up.log", "wb") as out:
            rc = subprocess.run([str(STACK), "up", "--dir", str(stack_dir), *args, *mpm]
                                + STACK_ARGS,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                timeout=300).returncode
        assert rc == 0, _show(d / "stack-up.log")
        env = load_stack_env(stack_dir / "stack.env")
        yield env
        check_events_sessions(env)
    finally:
        down = subprocess.run([str(STACK), "down", "--dir", str(stack_dir)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=300)
        if not os.environ.get("MCP_KEEP_STACK"):
            shutil.rmtree(stack_dir / "pg" / "data", ignore_errors=True)
            shutil.rmtree(stack_dir / "pg2" / "data", ignore_errors=True)   # --replica
        if down.returncode != 0:
            raise RuntimeError(f"tests/stack down failed (exit {down.returncode}):\n"
                               f"{down.stdout}{down.stderr}")


@contextlib.contextmanager
def fault_backend(stack_dir: str | os.PathLike):
    """tests/backend/mcp-fault-backend on STACK_DIR/faults.sock (where the gateway .confs' fault
    locations point), its stderr in STACK_DIR/faults.log; stopped at the end."""
    binary = REPO / "tests" / "backend" / "mcp-fault-backend"
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: run scripts/build", pytrace=False)
    d = Path(stack_dir)
    with open(d / "faults.log", "ab") as log:
        proc = subprocess.Popen([str(binary), "--unix", str(d / "faults.sock")],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
    try:
        line = proc.stdout.readline()
        assert line.strip() == b"ready", f"mcp-fault-backend did not start: {line!r}"
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@contextlib.contextmanager
def wire_client(mode: str, stack: dict[str, str]):
    """An McpSession of the Wire of mode (wire_of) for a module's own stack, with .mode and
    .url_of(instance, path); its .http posts and gets like requests (HTTP/2: one connection per
    instance). Closed at the end."""
    w = wire_of(mode, stack)
    s = w.session()
    s.mode = mode
    s.url_of = w.url
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="session")
def stack():
    given = os.environ.get("MCP_STACK_ENV")
    if given:
        if os.path.isfile(given):
            yield plain_endpoints(load_stack_env(given))
            return
        warnings.warn(f"MCP_STACK_ENV={given} does not exist; starting a fresh stack")

    d = _new_dir("mcp-stack.", None)
    up_log = d / "stack-up.log"
    extra_conf = ["--conf", str(GATEWAY_CONF)] if GATEWAY_CONF.is_file() else []
    # Output to a file, not a pipe: nothing started in the background can then hold up
    # this call by keeping a pipe open.
    with open(up_log, "wb") as out:
        rc = subprocess.run([str(STACK), "up", "--httpd", "2", "--mpm", MPM, "--tls", "--http2",
                             "--dir", str(d)] + extra_conf + STACK_ARGS,
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            timeout=300).returncode
    if rc != 0:
        pytest.fail(f"tests/stack up failed (exit {rc}):\n{_show(up_log)}", pytrace=False)
    try:
        yield plain_endpoints(load_stack_env(d / "stack.env"))
        check_events_sessions(load_stack_env(d / "stack.env"))
    finally:
        down_log = d / "stack-down.log"
        with open(down_log, "wb") as out:
            rc = subprocess.run([str(STACK), "down", "--dir", str(d)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                timeout=300).returncode
        if rc != 0:
            raise RuntimeError(f"tests/stack down failed (exit {rc}):\n{_show(down_log)}")
        # The database files (~40 MB) go now unless MCP_KEEP_STACK is set; the logs stay until
        # the session's end, and after it if a test failed (pytest_sessionfinish).
        if not os.environ.get("MCP_KEEP_STACK"):
            shutil.rmtree(d / "pg" / "data", ignore_errors=True)


@contextlib.contextmanager
def database(env: dict[str, str]):
    """An autocommit psycopg2 connection to a stack's database (env["MCP_PG"]), closed at the
    end: the `pg` fixture of the main stack, and the `db` fixtures of modules with their own."""
    conn = psycopg2.connect(env["MCP_PG"])
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def pg(stack):
    with database(stack) as conn:
        yield conn


@pytest.fixture
def wire(stack) -> Wire:
    return Wire("http1", stack)


def wire_of(mode: str, stack: dict[str, str]) -> Wire:
    """The Wire of mode for stack (a stack.env's values through plain_endpoints); skips the test
    when the stack cannot serve that mode. A module with a stack of its own (own_stack, with
    --tls --http2) parametrizes its own wire fixture over wanted_modes() with it."""
    if mode != "http1" and not stack.get("MCP_HTTP2"):
        pytest.skip(f"{mode}: the stack was started without --http2")
    if mode == "h2tls" and not stack.get("MCP_HTTPS_URLS"):
        pytest.skip("h2tls: the stack was started without --tls")
    return Wire(mode, stack)


wanted_modes = _wanted_modes


@pytest.fixture(params=_wanted_modes())
def any_wire(request, stack) -> Wire:
    return wire_of(request.param, stack)


@pytest.fixture
def mcp(wire):
    made: list[McpSession] = []

    def make(url: str | None = None, auth=None, **kw) -> McpSession:
        s = wire.session(url, auth=auth, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
