"""stdio servers through the gateway (docs/stdio.md, issue 23): tests/stack's <MCPStdioServer
test> (the test backend with --stdio, one process per session, under the mcp-stdio-supervisor
that each httpd parent starts) at /mcp-stdio, on a stack of this module's own with two httpd
instances. Sessions, calls and progress through the supervisor; a session served by the other
instance (its id names where its process runs); DELETE ends the process; a graceful restart
keeps the supervisor, the process and the session; a supervisor killed with -9 takes its
processes with it, the parent starts another, the old session's next request gets 404 and a new
one works; stop-httpd leaves no supervisor and no stdio process. Processes are read from /proc.
Skipped when no supervisor program is built (tests/stack writes no MCP_STDIO_URL)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, STACK, STACK_ARGS, database, httpd_pids, own_stack, run_dir
import requests

from mcp_client import McpError, McpSession, parse_sse_bytes
from waiting import wait_for

APACHE = "/usr/sbin/apache2"
CONF = Path(__file__).resolve().parent / "gateway-stdio.conf"   # the fault server "crash"
V2026 = "2026-07-28"


def real_supervisor() -> Path | None:
    """The supervisor program tests/stack would choose (beside the --module, or the tree's)."""
    module = Path(STACK_ARGS[STACK_ARGS.index("--module") + 1]) if "--module" in STACK_ARGS \
        else REPO / "mod_mcp" / ".libs" / "mod_mcp.so"
    for c in (module.parent.parent / "mcp-stdio-supervisor",
              REPO / "mod_mcp" / "mcp-stdio-supervisor"):
        if os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture(scope="module")
def env():
    d = run_dir("mcp-stdio-")
    # A copy that test_graceful_restart_sends_the_new_configuration adds a server to.
    conf = d / "gateway-stdio.conf"
    conf.write_text(CONF.read_text())
    real = real_supervisor()
    if not real:
        pytest.skip("no mcp-stdio-supervisor is built: tests/stack runs no stdio server")
    # The supervisor, started through a wrapper that is slow once when told so (a file): the
    # moment between a dead supervisor's replacement being started and its saying its port.
    slow = d / "slow-start"
    wrapper = d / "supervisor"
    wrapper.write_text(f"#!/bin/sh\nif [ -e '{slow}' ]; then rm -f '{slow}'; sleep 2; fi\n"
                       f"exec '{real}' \"$@\"\n")
    wrapper.chmod(0o755)
    with own_stack(d, "--httpd", "2", "--conf", str(conf), "--supervisor-bin", str(wrapper)) as e:
        e["CONF"] = str(conf)
        e["SLOW_START"] = str(slow)
        if not e.get("MCP_STDIO_URLS"):
            pytest.skip("no mcp-stdio-supervisor is built: tests/stack runs no stdio server")
        yield e


def url(env, instance=0) -> str:
    return env["MCP_STDIO_URLS"].split()[instance]


def session(env, instance=0) -> McpSession:
    s = McpSession(url(env, instance))
    s.initialize()
    return s


# ---- processes, from /proc ----------------------------------------------------------------

def ppid_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def children(parent: int) -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and ppid_of(int(p.name)) == parent}


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def httpd_parent(env, instance=0) -> int:
    return int(Path(env["MCP_HTTPD_PIDFILES"].split()[instance]).read_text())


def supervisor(env, instance=0) -> int | None:
    """The httpd parent's child that is not httpd: its stdio supervisor."""
    for p in children(httpd_parent(env, instance)):
        try:
            if os.readlink(f"/proc/{p}/exe") != APACHE and alive(p):
                return p
        except OSError:
            pass
    return None


def processes(env, instance=0) -> set[int]:
    """The stdio server processes of an instance's supervisor."""
    sup = supervisor(env, instance)
    return {p for p in children(sup) if alive(p)} if sup else set()


def new_process(env, before: set[int], instance=0) -> int:
    """The one process that appeared since before (a session's)."""
    def one():
        new = processes(env, instance) - before
        return new.pop() if len(new) == 1 else None
    return wait_for(one, 10, "the session's stdio process")


def session_dies(s: McpSession) -> McpError:
    with pytest.raises(McpError) as e:
        s.call("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    return e.value


# ---- the tests --------------------------------------------------------------------------------

def test_a_session_is_a_process(env):
    before = processes(env)
    s = session(env)
    try:
        pid = new_process(env, before)
        assert "@http://127.0.0.1:" not in s.session_id   # the gateway's own id, not the backend's
        assert s.initialize_result["serverInfo"]["name"], s.initialize_result
        tools = {t["name"] for t in s.call("tools/list")["tools"]}
        assert {"echo", "slow"} <= tools, tools
        r = s.call("tools/call", {"name": "echo", "arguments": {"text": "through stdio"}})
        assert r["content"][0]["text"] == "through stdio", r
        r = s.call("tools/call", {"name": "slow", "arguments": {"count": 3, "interval_ms": 10},
                                  "_meta": {"progressToken": "p1"}})
        assert "slow done" in r["content"][0]["text"], r
        progress = [m for m in s.side_messages if m.get("method") == "notifications/progress"]
        assert [m["params"]["progress"] for m in progress] == [1, 2, 3], s.side_messages
        assert all(m["params"]["progressToken"] == "p1" for m in progress)
        # One process for the session: every call went to it.
        assert alive(pid) and processes(env) - before == {pid}
    finally:
        s.delete()
        s.close()


def test_the_other_instance_serves_the_session(env):
    before = processes(env, 0)
    s = session(env, 0)
    other = McpSession(url(env, 1))
    try:
        pid = new_process(env, before, 0)
        other.session_id, other.protocol_version = s.session_id, s.protocol_version
        other.initialized = True
        r = other.call("tools/call", {"name": "echo", "arguments": {"text": "elsewhere"}})
        assert r["content"][0]["text"] == "elsewhere", r
        info = other.call("tools/call", {"name": "session_info", "arguments": {}})
        assert '"requests"' in info["content"][0]["text"], info
        # Still the process on instance 0's supervisor; instance 1 started none.
        assert alive(pid) and pid not in processes(env, 1)
    finally:
        s.delete()
        s.close()
        other.close()


def test_delete_ends_the_process(env):
    before = processes(env)
    s = session(env)
    pid = new_process(env, before)
    r = s.delete()
    s.close()
    assert r.status_code in (200, 204), r.text
    wait_for(lambda: not alive(pid), 15, f"stdio process {pid} to end after DELETE")


def test_a_crashed_process_ends_its_session(env):
    """The process exits on reading the session's first request: the request gets the
    supervisor's error; the supervisor then answers 404 for the session, which ends the
    gateway's session too."""
    s = McpSession(url(env).replace("/mcp-stdio", "/mcp-stdio-crash"))
    try:
        s.initialize()
        resp = s.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        assert "error" in resp and "exited" in resp["error"]["message"], resp
        # The supervisor's 404 for the ended session ends the gateway's: on this request's
        # stream (a 2025-11-25 session's began with its priming event), then with 404.
        resp = s.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        assert resp["error"]["code"] == -32001, resp
        assert session_dies(s).response.status_code == 404
    finally:
        s.close()


def test_the_principal_reaches_the_supervisor(env):
    """MaxProcessesPerUser 1 (gateway-stdio.conf's "limited", behind Basic auth): alice's second
    session is refused with the supervisor's 429 and its Retry-After; bob's is not."""
    limited = url(env).replace("/mcp-stdio", "/mcp-stdio-limited")
    first = McpSession(limited, auth=("alice", "alice-pw"))
    second = McpSession(limited, auth=("alice", "alice-pw"))
    bob = McpSession(limited, auth=("bob", "bob-pw"))
    try:
        first.initialize()
        with pytest.raises(McpError) as e:
            second.initialize()
        r = e.value.response
        assert r.status_code == 429, r.text
        assert r.headers.get("Retry-After", "").isdigit(), r.headers
        assert r.json()["error"]["code"] == -32004, r.text
        assert "alice" in r.json()["error"]["message"], r.text
        bob.initialize()
        assert first.delete().status_code == 200
        # Once alice's process has ended, she may start another.
        def again():
            try:
                second.initialize()
                return True
            except McpError as err:
                assert err.response.status_code == 429, err
                return False
        wait_for(again, 15, "alice's process to end and a new session to be admitted")
    finally:
        for s in (second, bob):
            if s.session_id:
                s.delete()
        for s in (first, second, bob):
            s.close()


def test_a_supervisor_that_does_not_accept_ends_the_session(env):
    """The session's backend id names a supervisor whose connections time out (a socket that
    accepts nothing, its queue full): the connect timeout (MCPBackendConnectTimeout 1 at
    /mcp-stdio-quick) counts as unreachable: 404 naming that URL, the session ended. The stored
    id is what routes the request."""
    quick = url(env).replace("/mcp-stdio", "/mcp-stdio-quick")
    s = McpSession(quick, protocol_version="2025-06-18")
    srv = socket.socket()
    held = socket.socket()
    try:
        s.initialize()
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        port = srv.getsockname()[1]
        held.connect(("127.0.0.1", port))   # fills the accept queue: later SYNs are dropped
        dead = f"http://127.0.0.1:{port}/stdio/test"
        with database(env) as db, db.cursor() as cur:
            cur.execute("UPDATE mcp.sessions SET backend_session_id = "
                        "split_part(backend_session_id, '@', 1) || '@' || %s WHERE id = %s",
                        (dead, s.session_id))
            assert cur.rowcount == 1
        err = session_dies(s)
        assert err.response.status_code == 404, err
        message = err.response.json()["error"]["message"]
        assert f"supervisor at {dead} cannot be reached" in message, message
        assert "timeout" in message.lower() or "timed out" in message.lower(), message
        assert session_dies(s).response.status_code == 404
    finally:
        s.close()
        held.close()
        srv.close()


def stateless_echo(env, text, instance=0):
    """A 2026-07-28 client's tools/call through the era bridge (a pooled backend session: a
    stdio process)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": V2026,
                                 "io.modelcontextprotocol/clientCapabilities": {},
                                 "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}}
    r = requests.post(url(env, instance), data=json.dumps(body), timeout=30,
                      headers={"Content-Type": "application/json",
                               "Accept": "application/json, text/event-stream",
                               "MCP-Protocol-Version": V2026, "Mcp-Method": "tools/call",
                               "Mcp-Name": "echo"})
    assert r.status_code == 200, r.text
    msgs = [e.json for e in parse_sse_bytes(r.content) if e.json] \
        if r.headers.get("Content-Type", "").startswith("text/event-stream") else [r.json()]
    return msgs[-1]


def test_a_2026_client_through_the_era_bridge(env):
    final = stateless_echo(env, "stateless")
    assert final["result"]["content"][0]["text"] == "stateless", final
    assert processes(env), "the bridge's pooled session is a stdio process"


def reconnected(s: McpSession) -> McpSession:
    """The same session on a new connection: after a graceful restart an old child may still
    hold the kept-alive one, and it ends a stream it takes with a retry hint (the client would
    resume; these tests want the new generation's answer)."""
    t = McpSession(s.url, protocol_version=s.protocol_version)
    t.session_id, t.initialized = s.session_id, True
    s.close()
    return t


def graceful(env):
    """A graceful restart of instance 0, done: the parent has read the new configuration and
    every child of before has exited. Until an old child has read its pipe of death it may
    still accept a connection and answer it with the old configuration (a 404 for a server the
    new one adds, seen under CI's load)."""
    log = Path(env["MCP_HTTPD_ERROR_LOGS"].split()[0])
    done = log.read_text(errors="replace").count("resuming normal operations")
    old = set(httpd_pids(env)[1:])
    subprocess.run([str(STACK), "graceful", "--dir", env["MCP_STACK_DIR"]], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    wait_for(lambda: log.read_text(errors="replace").count("resuming normal operations") > done,
             30, "the graceful restart")
    wait_for(lambda: not old & set(httpd_pids(env)[1:]), 30, "the old children to exit")


def test_graceful_restart_keeps_the_session_and_its_process(env):
    sup = supervisor(env)
    before = processes(env)
    s = session(env)
    try:
        pid = new_process(env, before)
        graceful(env)
        assert supervisor(env) == sup, "a graceful restart must keep the supervisor"
        assert alive(pid)
        s = reconnected(s)
        r = s.call("tools/call", {"name": "echo", "arguments": {"text": "after graceful"}})
        assert r["content"][0]["text"] == "after graceful", r
        assert alive(pid) and processes(env) - before == {pid}
    finally:
        s.delete()
        s.close()


def test_graceful_restart_sends_the_new_configuration(env):
    """A server added to the configuration is served after a graceful restart, by the same
    supervisor; the sessions of before go on."""
    sup = supervisor(env)
    s = session(env)
    later = url(env).replace("/mcp-stdio", "/mcp-stdio-later")
    try:
        with pytest.raises(McpError) as e:
            McpSession(later).initialize()
        assert e.value.response.status_code in (404, 500), e.value
        with open(env["CONF"], "a") as f:
            f.write("""
<MCPStdioServer later>
    Command ${MCP_TEST_BACKEND_BIN} --stdio
</MCPStdioServer>
<Location /mcp-stdio-later>
    SetHandler mcp
    MCPBackend stdio:later
</Location>
""")
        graceful(env)
        assert supervisor(env) == sup
        t = McpSession(later)
        t.initialize()
        r = t.call("tools/call", {"name": "echo", "arguments": {"text": "new server"}})
        assert r["content"][0]["text"] == "new server", r
        t.delete()
        t.close()
        s = reconnected(s)
        r = s.call("tools/call", {"name": "echo", "arguments": {"text": "old session"}})
        assert r["content"][0]["text"] == "old session", r
    finally:
        s.delete()
        s.close()


def test_a_killed_supervisor_is_replaced_and_its_sessions_end(env):
    """A 2025-06-18 session's request is answered 404 (nothing was sent to it yet); a 2025-11-25
    session's stream began with its priming event, so its request gets the same error on the
    stream; either way the session is over and its next request is 404 at once."""
    stateless_echo(env, "before")   # the bridge's pooled session exists
    sup = supervisor(env)
    before = processes(env)
    older = McpSession(url(env), protocol_version="2025-06-18")
    older.initialize()
    newer = session(env)
    getter = session(env)
    try:
        wait_for(lambda: len(processes(env) - before) == 3, 10, "the sessions' stdio processes")
        pids = processes(env) - before
        # Its replacement takes 2 s to say its port: a new backend session asked for meanwhile
        # waits for it instead of knocking at the dead one's port.
        Path(env["SLOW_START"]).touch()
        os.kill(sup, signal.SIGKILL)
        wait_for(lambda: not any(alive(p) for p in pids), 15,
                 "the stdio processes to die with their supervisor")
        wait_for(lambda: (p := supervisor(env)) and p != sup, 15,
                 "the httpd parent to start a new supervisor")
        # The era bridge's pooled session went too: it is initialized anew, the call retried.
        final = stateless_echo(env, "after the supervisor")
        assert final["result"]["content"][0]["text"] == "after the supervisor", final
        err = session_dies(older)
        assert err.response.status_code == 404, err
        body = err.response.json()
        assert body["error"]["code"] == -32001, body
        message = body["error"]["message"]
        # Either nothing listens at the old supervisor's address any more (named), or a new
        # supervisor listens there and knows no such session.
        assert "supervisor at http://127.0.0.1:" in message or "not found" in message.lower(), body
        resp = newer.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        assert resp.get("error", {}).get("code") == -32001, resp
        # A standalone stream's GET: 404 too, naming the supervisor.
        r = getter.get_raw({"Accept": "text/event-stream", "Mcp-Session-Id": getter.session_id,
                            "MCP-Protocol-Version": getter.protocol_version})
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == -32001, r.text
        # The gateway's sessions ended with their processes: 404 at once from now on.
        for s in (older, newer, getter):
            assert session_dies(s).response.status_code == 404
        # A new session works, on the new supervisor.
        t = session(env)
        try:
            r = t.call("tools/call", {"name": "echo", "arguments": {"text": "anew"}})
            assert r["content"][0]["text"] == "anew", r
            assert processes(env), "the new session's process runs under the new supervisor"
        finally:
            t.delete()
            t.close()
    finally:
        older.close()
        newer.close()
        getter.close()


def test_stop_httpd_leaves_no_supervisor_and_no_process(env):
    """Last: it stops the stack's httpd instances."""
    sessions = [session(env, i) for i in (0, 1)]
    left = set()
    for i in (0, 1):
        wait_for(lambda: processes(env, i), 10, f"instance {i}'s session process")
        left |= {supervisor(env, i)} | processes(env, i)
    # The clients' connections go (the sessions and their processes stay): an event MPM child
    # stopped with an idle keep-alive connection leaks its worker thread's allocator (200 bytes,
    # httpd's own, seen with HTTP backends too), which the sanitizer run would report.
    for s in sessions:
        s.close()
    subprocess.run([str(STACK), "stop-httpd", "--dir", env["MCP_STACK_DIR"]], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    wait_for(lambda: not any(alive(p) for p in left), 30,
             f"supervisors and stdio processes {sorted(left)} to end with httpd")
