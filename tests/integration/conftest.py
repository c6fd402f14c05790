"""Fixtures for the mod_mcp integration tests.

stack   (session) the running test stack as a dict of stack.env values (MCP_URL, MCP_URLS,
        MCP_AUTH_URL, MCP_PG, MCP_STACK_DIR, ...; see tests/stack). When the environment
        variable MCP_STACK_ENV names an existing stack.env, that stack is used as it is and
        left running; otherwise `tests/stack up --httpd 2 [--conf gateway.conf]
        $MCP_TEST_STACK_ARGS` (gateway.conf beside this file, when there is one) starts a fresh one in a new
        /tmp/mcp-stack.XXXXXX directory and `tests/stack down` stops it at the end (its logs
        stay there; its database files too when MCP_KEEP_STACK is set).
pg      a psycopg2 connection (autocommit) to MCP_PG, closed after the test.
mcp     factory: mcp(url=None, auth=None, **kw) -> McpSession (not yet initialized); every
        session made is closed after the test.

Run with Debian's interpreter: /usr/bin/python3 -m pytest -v tests/integration
"""

from __future__ import annotations

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

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"
# The MPM of the stack the tests start (MCP_TEST_MPM: event, worker or prefork).
MPM = os.environ.get("MCP_TEST_MPM", "event")
# Extra `tests/stack up` arguments (shell words), e.g. the sanitizer build's module:
# MCP_TEST_STACK_ARGS="--module build-asan/mod_mcp/.libs/mod_mcp.so --backend-bin ...".
STACK_ARGS = shlex.split(os.environ.get("MCP_TEST_STACK_ARGS", ""))
# Extra httpd directives for the tests' stack (Include'd at the end of each httpd.conf).
GATEWAY_CONF = Path(__file__).resolve().parent / "gateway.conf"


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


def _show(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@pytest.fixture(scope="session")
def stack():
    given = os.environ.get("MCP_STACK_ENV")
    if given:
        if os.path.isfile(given):
            yield load_stack_env(given)
            return
        warnings.warn(f"MCP_STACK_ENV={given} does not exist; starting a fresh stack")

    d = Path(tempfile.mkdtemp(prefix="mcp-stack.", dir="/tmp"))
    d.chmod(0o755)
    up_log = d / "stack-up.log"
    extra_conf = ["--conf", str(GATEWAY_CONF)] if GATEWAY_CONF.is_file() else []
    # Output to a file, not a pipe: nothing started in the background can then hold up
    # this call by keeping a pipe open.
    with open(up_log, "wb") as out:
        rc = subprocess.run([str(STACK), "up", "--httpd", "2", "--mpm", MPM, "--dir", str(d)] + extra_conf + STACK_ARGS,
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            timeout=300).returncode
    if rc != 0:
        pytest.fail(f"tests/stack up failed (exit {rc}):\n{_show(up_log)}", pytrace=False)
    try:
        yield load_stack_env(d / "stack.env")
    finally:
        down_log = d / "stack-down.log"
        with open(down_log, "wb") as out:
            rc = subprocess.run([str(STACK), "down", "--dir", str(d)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                timeout=300).returncode
        if rc != 0:
            raise RuntimeError(f"tests/stack down failed (exit {rc}):\n{_show(down_log)}")
        # The logs stay in d for a look afterwards; the database files (~40 MB) go unless
        # MCP_KEEP_STACK is set.
        if not os.environ.get("MCP_KEEP_STACK"):
            shutil.rmtree(d / "pg" / "data", ignore_errors=True)


@pytest.fixture
def pg(stack):
    conn = psycopg2.connect(stack["MCP_PG"])
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def mcp(stack):
    made: list[McpSession] = []

    def make(url: str | None = None, auth=None, **kw) -> McpSession:
        s = McpSession(url or stack["MCP_URL"], auth=auth, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
