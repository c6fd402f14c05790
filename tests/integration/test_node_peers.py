"""Real peers on both sides of the gateway: the official MCP TypeScript SDK as the client
(tests/node/client.mjs, tests/node/everything.mjs, run with the node 22 that scripts/node-deps
installs), and @modelcontextprotocol/server-everything as the backend.

* client.mjs against the main stack (the test backend behind the gateway): initialize, tools,
  progress, sampling, the standalone stream, a response stream cut mid-call that the SDK's own
  reconnection (GET + Last-Event-ID) completes, DELETE and 404 afterwards. Then the stored
  events of that session are checked in PostgreSQL.
* everything.mjs against a separate stack whose backend is server-everything (Streamable HTTP
  mode on a free loopback port), with the same kind of checks in that stack's PostgreSQL.

scripts/node-deps needs the npm registry the first time (npm ci); a failure there fails these
tests loudly rather than skipping them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import psycopg2
import pytest
import requests

from conftest import STACK_ARGS, load_stack_env
from mcp_client import McpSession, iter_sse
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "node"
NODE_DEPS = REPO / "scripts" / "node-deps"
STACK = REPO / "tests" / "stack"
EVERYTHING = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


# ---- helpers ---------------------------------------------------------------------------------


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def run_node_script(node22: str, script: str, url: str, timeout: float = 180,
                    ca: str | None = None, args=()) -> dict:
    """Run tests/node/SCRIPT URL [ARGS...] with node 22 (trusting the CA file ca, for https://
    URLs); return its JSON summary. Fails the test, showing the failed checks and node's stderr,
    when it exits non-zero or prints no summary."""
    env = dict(os.environ, NODE_EXTRA_CA_CERTS=ca) if ca else None
    proc = subprocess.run([node22, str(NODE_DIR / script), url, *args], cwd=NODE_DIR,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                          env=env)
    try:
        summary = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"{script} printed no JSON summary (exit {proc.returncode})\n"
                    f"stdout:\n{_tail(proc.stdout)}\nstderr:\n{_tail(proc.stderr)}", pytrace=False)
    if proc.returncode != 0 or not summary.get("ok"):
        failed = [c for c in summary.get("checks", []) if not c["ok"]]
        pytest.fail(f"{script} failed (exit {proc.returncode}, fatal: {summary.get('fatal')})\n"
                    f"failed checks:\n{json.dumps(failed, indent=1)[:6000]}\n"
                    f"stderr:\n{_tail(proc.stderr)}", pytrace=False)
    return summary


def stream_rows(pg, stream_id: int) -> list[tuple]:
    """(seq, direction, kind, message, created_at) of a stream, in seq order."""
    with pg.cursor() as cur:
        cur.execute("""SELECT seq, direction, kind, message, created_at FROM mcp.events
                        WHERE stream_id = %s ORDER BY seq""", (stream_id,))
        return cur.fetchall()


def stream_row(pg, stream_id: int) -> tuple:
    with pg.cursor() as cur:
        cur.execute("SELECT session_id, kind, method, status FROM mcp.streams WHERE id = %s", (stream_id,))
        return cur.fetchone()


def session_row(pg, session_id: str) -> dict:
    with pg.cursor() as cur:
        cur.execute("""SELECT backend_url, backend_session_id, protocol_version, client_info,
                              client_capabilities, server_info, terminated_by
                         FROM mcp.sessions WHERE id = %s""", (session_id,))
        row = cur.fetchone()
    assert row, f"no mcp.sessions row for {session_id}"
    keys = ("backend_url", "backend_session_id", "protocol_version", "client_info",
            "client_capabilities", "server_info", "terminated_by")
    return dict(zip(keys, row))


def inbound_without_stream(pg, session_id: str) -> list[dict]:
    """Messages the client posted that belong to no stream (notifications, responses)."""
    with pg.cursor() as cur:
        cur.execute("""SELECT message FROM mcp.events WHERE session_id = %s AND stream_id IS NULL
                          AND direction = 'in' ORDER BY id""", (session_id,))
        return [r[0] for r in cur.fetchall()]


def standalone_messages(pg, session_id: str) -> list[dict]:
    with pg.cursor() as cur:
        cur.execute("""SELECT e.message FROM mcp.events e JOIN mcp.streams s ON s.id = e.stream_id
                        WHERE s.session_id = %s AND s.kind = 'standalone' AND e.kind = 'message'
                        ORDER BY e.id""", (session_id,))
        return [r[0] for r in cur.fetchall()]


def check_progress_stream(pg, session_id: str, stream_id: int, tool: str, steps: int, result_text: str,
                          client_event_ids: list[str]) -> list[tuple]:
    """A tools/call stream: request (seq 0), priming (1), `steps` progress notifications in
    order, the result; complete; and every event id the client got names a stored event."""
    rows = stream_rows(pg, stream_id)
    assert stream_row(pg, stream_id) == (session_id, "request", "tools/call", "complete")
    assert [(r[0], r[1], r[2]) for r in rows[:2]] == [(0, "in", "message"), (1, "out", "priming")]
    assert rows[0][3]["params"]["name"] == tool
    progress = [r for r in rows if r[3] and r[3].get("method") == "notifications/progress"]
    assert [p[3]["params"]["progress"] for p in progress] == list(range(1, steps + 1))
    assert [p[0] for p in progress] == list(range(2, steps + 2))
    last = rows[-1]
    assert last[0] == steps + 2 and last[1] == "out"
    assert last[3]["id"] == rows[0][3]["id"]
    assert any(c.get("text") == result_text for c in last[3]["result"]["content"]), last[3]
    assert client_event_ids == [f"{stream_id}-{r[0]}" for r in rows[1:]], \
        "the client's event ids are not exactly the stored ones"
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def iso(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node22() -> str:
    """scripts/node-deps: npm ci in tests/node when needed; the path of node 22."""
    started = time.monotonic()
    proc = subprocess.run([str(NODE_DEPS)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"scripts/node-deps failed (exit {proc.returncode}); is the npm registry reachable?\n"
                    f"{proc.stderr}", pytrace=False)
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert path and os.access(path, os.X_OK), f"scripts/node-deps printed no node path: {proc.stdout!r}"
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    assert version.startswith("v22."), version
    print(f"node {version} at {path} (scripts/node-deps took {time.monotonic() - started:.1f} s)")
    return path


@pytest.fixture(scope="module")
def everything_stack(node22):
    """server-everything (Streamable HTTP, loopback, a free port) and a separate stack (two httpd
    instances) with it as the backend. Yields the stack's stack.env values plus EVERYTHING_URL/PID/LOG. Both are stopped
    afterwards, whatever happened; their directory (/tmp/mcp-everything.*) goes too, unless
    MCP_KEEP_STACK is set or stopping them failed."""
    d = Path(tempfile.mkdtemp(prefix="mcp-everything.", dir="/tmp"))
    d.chmod(0o755)   # the stack's PostgreSQL and httpd users must reach it
    se_log = d / "server-everything.log"
    proc = None
    stack_dir = d / "stack"
    stack_started = False
    try:
        # A free port is chosen, then bound by the server: another process may take it in
        # between, so a server that exits at once gets another port (three tries).
        for attempt in range(3):
            port = free_port()
            log = open(se_log, "ab")
            # loopback.mjs: app.listen(PORT) would bind every interface; this keeps it on 127.0.0.1.
            proc = subprocess.Popen([node22, "--import", str(NODE_DIR / "loopback.mjs"), str(EVERYTHING),
                                     "streamableHttp"],
                                    cwd=NODE_DIR, env={**os.environ, "PORT": str(port)},
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            log.close()

            def ready():
                if proc.poll() is not None:
                    return "exited"
                return port_open(port) and "up"

            state = wait_for(ready, 30, f"server-everything to listen on 127.0.0.1:{port}")
            if state == "up":
                break
            if attempt == 2 or "EADDRINUSE" not in _read(se_log) and "already in use" not in _read(se_log):
                pytest.fail(f"server-everything exited (code {proc.returncode}) during startup:\n"
                            f"{_tail(_read(se_log))}", pytrace=False)
        se_url = f"http://127.0.0.1:{port}/mcp"

        stack_dir.mkdir()
        up_log = d / "stack-up.log"
        with open(up_log, "wb") as out:
            stack_started = True
            # Two httpd instances: bridge-2026.mjs sends the input-required retry to the second.
            # $MCP_TEST_STACK_ARGS too: scripts/test's sanitizer pass runs this gateway under ASan.
            rc = subprocess.run([str(STACK), "up", "--dir", str(stack_dir), "--backend", se_url, "--httpd", "2",
                                 *STACK_ARGS],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                timeout=300).returncode
        if rc != 0:
            pytest.fail(f"tests/stack up --backend {se_url} failed (exit {rc}):\n{_read(up_log)}",
                        pytrace=False)
        env = load_stack_env(stack_dir / "stack.env")
        env.update(EVERYTHING_URL=se_url, EVERYTHING_PID=str(proc.pid), EVERYTHING_LOG=str(se_log))
        yield env
    finally:
        problems = []
        if stack_started:
            down_log = d / "stack-down.log"
            with open(down_log, "wb") as out:
                rc = subprocess.run([str(STACK), "down", "--dir", str(stack_dir)], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, timeout=300).returncode
            if rc != 0:
                problems.append(f"tests/stack down failed (exit {rc}):\n{_read(down_log)}")
            if not os.environ.get("MCP_KEEP_STACK"):
                shutil.rmtree(stack_dir / "pg" / "data", ignore_errors=True)
        if proc is not None and proc.poll() is None:
            proc.terminate()   # by its pid; node ends on SIGTERM
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if problems:
            raise RuntimeError("\n".join(problems) + f"\n(its logs stay in {d})")
        if not os.environ.get("MCP_KEEP_STACK"):
            shutil.rmtree(d, ignore_errors=True)


# ---- a) the SDK client, the test backend ------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_sdk_client_against_the_gateway(stack, pg, node22, scheme):
    # https: HTTP/1.1 over TLS (Node's fetch offers no h2), the CA given as NODE_EXTRA_CA_CERTS.
    if scheme == "https" and not stack.get("MCP_HTTPS_URL"):
        pytest.skip("the stack was started without --tls")
    url = stack["MCP_HTTPS_URL"] if scheme == "https" else stack["MCP_URL"]
    s = run_node_script(node22, "client.mjs", url, ca=stack.get("MCP_CA") if scheme == "https" else None)
    assert all(e["url"].startswith(f"{scheme}://") for e in s["http"]), s["http"][:3]
    sid = s["sessionId"]
    print(json.dumps({k: s[k] for k in ("sessionId", "streams", "slow", "resume", "terminate", "elapsedMs")},
                     indent=1)[:4000])

    # What the SDK client saw (client.mjs checked the details; the headline facts again here).
    assert s["protocolVersion"] == "2025-11-25"
    assert s["echo"] == "hello from the TypeScript SDK"
    assert s["add"] == {"text": "42", "structuredContent": {"sum": 42}}
    assert s["slow"]["progress"] == [1, 2, 3, 4, 5]
    assert s["sampling"]["result"] == "sampled: node-sampled: say hi to httpd"
    resume = s["resume"]
    assert resume["cut"]["ok"] and resume["progress"] == list(range(1, 9))
    assert resume["result"] == "slow done: 8 steps"
    assert [r["lastEventId"] for r in resume["resumedWith"]] == [resume["eventIds"][2]]
    assert s["terminate"]["deleteStatus"] == 200
    assert s["terminate"]["sdkAfterwards"]["code"] == 404
    assert s["terminate"]["rawAfterwards"]["post"]["status"] == 404

    # The session, as PostgreSQL has it.
    row = session_row(pg, sid)
    assert row["terminated_by"] == "client"
    assert row["protocol_version"] == "2025-11-25"
    assert row["client_info"] == {"name": "mod_mcp-node-client", "version": "1.0.0"}
    assert "sampling" in row["client_capabilities"]
    assert row["server_info"]["name"] == "mcp-test-backend"

    # Progress notifications stored in order, once each, with the result after them.
    check_progress_stream(pg, sid, s["streams"]["slow"], "slow", 5, "slow done: 5 steps", s["slow"]["eventIds"])

    # The cut call: everything stored, and the relay went on while nobody was connected.
    rows = check_progress_stream(pg, sid, s["streams"]["resume"], "slow", 8, "slow done: 8 steps",
                                 resume["eventIds"])
    cut_at = iso(resume["cut"]["at"])
    resumed_at = iso(next(e["at"] for e in s["http"] if e["method"] == "GET" and e.get("lastEventId")))
    while_away = [r[0] for r in rows if r[2] == "message" and cut_at < r[4] < resumed_at]
    assert while_away, ("no event was stored between the cut and the resumption", cut_at, resumed_at,
                        [(r[0], r[4].isoformat()) for r in rows])

    # Sampling: the server's request on the tool's stream, our answer stored as an inbound
    # message of no stream, and the tool's result after it.
    srows = stream_rows(pg, s["streams"]["sample"])
    assert stream_row(pg, s["streams"]["sample"])[3] == "complete"
    out = [r[3] for r in srows if r[1] == "out" and r[3]]
    assert [m.get("method") for m in out] == ["sampling/createMessage", None]
    request = out[0]
    assert request["id"] == s["sampling"]["responseId"]
    assert request["params"]["messages"][0]["content"]["text"] == "say hi to httpd"
    answers = [m for m in inbound_without_stream(pg, sid) if m.get("id") == request["id"]]
    assert len(answers) == 1, answers
    assert answers[0]["result"]["content"] == {"type": "text", "text": "node-sampled: say hi to httpd"}
    assert answers[0]["result"]["model"] == "mod_mcp-node-test-model"
    assert out[1]["result"]["content"][0]["text"] == "sampled: node-sampled: say hi to httpd"
    with pg.cursor() as cur:   # stored in the order it happened: request, answer, result
        cur.execute("""SELECT message->>'method', message ? 'result', stream_id IS NULL FROM mcp.events
                        WHERE session_id = %s AND (stream_id = %s AND seq >= 2
                              OR stream_id IS NULL AND message->>'id' = %s) ORDER BY id""",
                    (sid, s["streams"]["sample"], request["id"]))
        assert cur.fetchall() == [("sampling/createMessage", False, False), (None, True, True),
                                  (None, True, False)]

    # The notify message went out on the standalone stream, and is stored there.
    assert {"level": "info", "logger": "notify", "data": "node-ping"} in [
        m["params"] for m in standalone_messages(pg, sid) if m.get("method") == "notifications/message"]

    # notifications/initialized reached the store as an inbound message of no stream.
    assert any(m.get("method") == "notifications/initialized" for m in inbound_without_stream(pg, sid))


# ---- b) the SDK client, server-everything behind the gateway ------------------------------------------


def test_sdk_client_against_server_everything(everything_stack, node22):
    env = everything_stack
    s = run_node_script(node22, "everything.mjs", env["MCP_URL"])
    sid = s["sessionId"]
    print(json.dumps({k: s.get(k) for k in ("sessionId", "streams", "long", "resume", "standaloneGet",
                                            "terminate", "elapsedMs")}, indent=1, default=str)[:4000])
    assert s["serverInfo"]["name"] == "mcp-servers/everything"
    assert s["echo"] == "Echo: hello through httpd"
    assert s["getSum"] == "The sum of 1234 and 4321 is 5555."
    assert [p["progress"] for p in s["long"]["progress"]] == [1, 2, 3, 4]
    assert s["resume"]["cut"]["ok"] and s["resume"]["progress"] == [1, 2, 3, 4, 5, 6]
    assert s["terminate"] == {"deleteStatus": 200, "afterwards": 404}

    conn = psycopg2.connect(env["MCP_PG"])
    conn.autocommit = True
    try:
        row = session_row(conn, sid)
        assert row["backend_url"] == env["EVERYTHING_URL"]
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                            row["backend_session_id"] or ""), row["backend_session_id"]
        assert row["server_info"]["name"] == "mcp-servers/everything"
        assert row["terminated_by"] == "client"
        assert "sampling" in row["client_capabilities"]

        check_progress_stream(conn, sid, s["streams"]["long"], "trigger-long-running-operation", 4,
                              "Long running operation completed. Duration: 1.2 seconds, Steps: 4.",
                              s["long"]["eventIds"])
        rows = check_progress_stream(conn, sid, s["streams"]["resume"], "trigger-long-running-operation", 6,
                                     "Long running operation completed. Duration: 3 seconds, Steps: 6.",
                                     s["resume"]["eventIds"])
        cut_at = iso(s["resume"]["cut"]["at"])
        resumed_at = iso(next(e["at"] for e in s["http"] if e["method"] == "GET" and e.get("lastEventId")))
        assert any(cut_at < r[4] < resumed_at for r in rows if r[2] == "message"), \
            "no event was stored while the client was away"

        # Sampling: server-everything's request on the tool's stream, our answer inbound.
        out = [r[3] for r in stream_rows(conn, s["streams"]["sampling"]) if r[1] == "out" and r[3]]
        assert out[0]["method"] == "sampling/createMessage"
        assert out[0]["params"]["maxTokens"] == 42
        answers = [m for m in inbound_without_stream(conn, sid) if m.get("id") == out[0]["id"] and "result" in m]
        assert len(answers) == 1, answers
        assert answers[0]["result"]["content"]["text"] == "sampled by the node test client"
        assert "sampled by the node test client" in out[-1]["result"]["content"][0]["text"]

        # Simulated logging came over the standalone stream and is stored there.
        logged = [m for m in standalone_messages(conn, sid) if m.get("method") == "notifications/message"]
        assert logged, "no notifications/message stored on the standalone stream"
        assert logged[0]["params"] == s["logMessages"][0]
    finally:
        conn.close()


def test_sdk_2026_client_through_the_era_bridge(everything_stack, node22):
    """@modelcontextprotocol/client 2.4.0 pinned to 2026-07-28, server-everything (2025 era)
    behind the gateway (MCPEraBridge, the default): tools, progress, a sampling round, a
    disconnect-cancel (tests/node/bridge-2026.mjs); the sampling round's retry (the POST with
    the requestState) goes to the stack's second httpd instance."""
    env = everything_stack
    url1, url2 = env["MCP_URLS"].split()
    s = run_node_script(node22, "bridge-2026.mjs", url1, args=[url2])
    assert s["protocolVersion"] == "2026-07-28"
    assert s["sampled"] == ["Resource trigger-sampling-request context: hello bridge"]
    assert s["retries"] == [{"to": url2, "method": "tools/call", "status": 200}]
    # Each instance's request notes (httpd-K/mcp_log): the round's tools/call on instance 1,
    # its retry on instance 2.
    fields = ["status", "http_method", "method", "name", "id", "stream", "protocol", "session", "user"]

    def sampling_calls(k):
        path = Path(env["MCP_STACK_DIR"]) / f"httpd-{k}" / "mcp_log"
        rows = [dict(zip(fields, line.split("\t"))) for line in path.read_text().splitlines()]
        # stateless (2026-07-28) requests only: the module's other tests run sessions on instance 1
        return [r for r in rows if r["method"] == "tools/call" and r["name"] == "trigger-sampling-request"
                and r["session"] == "-"]

    first = wait_for(lambda: sampling_calls(1) or None, 10, "instance 1's log line of the sampling round")
    retry = wait_for(lambda: sampling_calls(2) or None, 10, "instance 2's log line of the retry")
    assert len(first) == 1 and len(retry) == 1, (first, retry)
    assert first[0]["status"] == retry[0]["status"] == "200", (first, retry)
    assert first[0]["protocol"] == retry[0]["protocol"] == "2026-07-28", (first, retry)
    # The stored rows of those two streams (the notes name them): the round's request on
    # instance 1 answered with an input-required result, its retry on instance 2 carrying that
    # result's requestState and answered with the tool's result.
    first_id, retry_id = int(first[0]["stream"]), int(retry[0]["stream"])
    conn = psycopg2.connect(env["MCP_PG"])
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            def stored(stream_id, direction):
                cur.execute("""SELECT m.message FROM mcp.events m JOIN mcp.streams st ON st.id = m.stream_id
                                WHERE st.id = %s AND st.session_id IS NULL AND st.method = 'tools/call'
                                  AND st.protocol_version = '2026-07-28' AND m.direction = %s
                                  AND (m.message ? 'result' OR m.message ? 'method')
                                ORDER BY m.seq""", (stream_id, direction))
                return [row[0] for row in cur.fetchall()]

            asked = stored(first_id, "in")
            assert [m["params"]["name"] for m in asked] == ["trigger-sampling-request"], asked
            assert "requestState" not in asked[0]["params"], asked
            answered = [m for m in stored(first_id, "out") if "result" in m]
            assert len(answered) == 1 and answered[0]["result"].get("resultType") == "input_required", answered
            state = answered[0]["result"]["requestState"]
            retried = stored(retry_id, "in")
            assert len(retried) == 1 and retried[0]["params"]["requestState"] == state, retried
            done = [m for m in stored(retry_id, "out") if "result" in m]
            assert len(done) == 1 and "bridged sampling answer" in json.dumps(done[0]["result"]), done
            # The aborted call: both streams cancelled, notifications/cancelled sent upstream
            # for the gateway's id of it.
            def cancelled():
                cur.execute("""SELECT c.id, b.session_id FROM mcp.streams c
                                 JOIN mcp.streams b ON b.id = c.bridged_to
                                WHERE c.session_id IS NULL AND c.status = 'cancelled'
                                  AND b.status = 'cancelled' AND c.method = 'tools/call'""")
                return cur.fetchone()
            cid, pooled = wait_for(cancelled, 10, "the aborted call's streams to be cancelled")
            cur.execute("""SELECT count(*) FROM mcp.events WHERE session_id = %s AND stream_id IS NULL
                             AND message->>'method' = 'notifications/cancelled'
                             AND (message->'params'->>'requestId')::bigint = %s""", (pooled, cid))
            assert cur.fetchone()[0] == 1
            # The sampling round: server-everything's request on the backend stream, our answer
            # posted upstream with its id.
            cur.execute("""SELECT message FROM mcp.events WHERE session_id = %s AND direction = 'out'
                             AND message->>'method' = 'sampling/createMessage'""", (pooled,))
            asked = cur.fetchone()[0]
            cur.execute("""SELECT message FROM mcp.events WHERE session_id = %s AND stream_id IS NULL
                             AND direction = 'in' AND message ? 'result'
                             AND message->'id' = %s::jsonb""",
                        (pooled, json.dumps(asked["id"])))
            assert cur.fetchone()[0]["result"]["content"]["text"] == "bridged sampling answer"
    finally:
        conn.close()


def test_standalone_stream_is_answered_before_the_backend_sends_anything(everything_stack):
    # server-everything answers a GET with SSE headers and then nothing until a message or its
    # 15 s keep-alive: the gateway must answer (status, headers, priming event) on the headers.
    s = McpSession(everything_stack["MCP_URL"])
    try:
        s.initialize()
        h = s.headers({"Accept": "text/event-stream", "Content-Type": None})
        try:
            r = requests.get(s.url, headers=h, stream=True, timeout=(5, 3))
        except requests.exceptions.ReadTimeout:
            pytest.fail("the gateway sent no answer (status, headers, priming event) to the standalone "
                        "GET within 3 s; server-everything itself answers at once", pytrace=False)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        priming = next(iter_sse(r, include_empty=True))
        assert priming.id and priming.id.endswith("-0") and priming.data == ""
        r.close()
    finally:
        s.delete()
        s.close()
