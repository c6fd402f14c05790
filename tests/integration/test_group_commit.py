"""Group commit inside a child (MCPDatabaseGroupCommit, mcp_store.h): concurrent requests'
answers are stored in one transaction by one committer per child, and each request waits for its
own commit. These tests run a stack of their own with group commit named (the suite's stack has
the default, one committer per child, too), drive many concurrent calls through one httpd
instance (so through the same children) and break the database under a group: every caller must
get its own right answer, and nothing a client received may be missing from the store."""

import contextlib
import json
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg2
import pytest

from conftest import MPM, STACK, database, own_stack, plain_endpoints, run_dir
from mcp_client import McpSession
from test_bridge import V as V26, call as bridge_call, final, tool as bridge_tool
from waiting import wait_for

# A prefork child has one thread: nothing to group (and mod_http2, which some of these tests
# use, refuses prefork). scripts/test's prefork pass leaves this module out.
pytestmark = pytest.mark.skipif(MPM == "prefork",
                                reason="a prefork child has one thread: nothing to group")

THREADS = 12


def in_threads(n, run, on_start=None):
    """run(i) for i in 0..n-1, in n threads let go at once (then on_start(), if given); fails
    when one has not returned within 180 s."""
    go = threading.Barrier(n + 1)

    def start(i):
        go.wait()
        run(i)

    threads = [threading.Thread(target=start, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    go.wait()
    if on_start:
        on_start()
    for t in threads:
        t.join(180)
    assert all(not t.is_alive() for t in threads), "a caller never got an answer"


def hammer(url, calls_per_thread, text_of, on_start=None, one_session=False,
           with_sessions=False, h2_ca=None):
    """THREADS clients calling echo concurrently, each in a session of its own or all in one
    (one_session: an agent's parallel calls; with h2_ca, over one HTTP/2 connection, TLS
    verified with that CA, its streams multiplexed); returns [(text sent, response or
    exception)], and with_sessions the session each call was made in as a third."""
    sessions = []
    wire = {"transport": "h2", "ca": h2_ca} if h2_ca else {}
    for _ in range(THREADS):
        s = McpSession(url, timeout=60, **wire)
        if one_session and sessions:
            s.session_id, s.protocol_version = sessions[0].session_id, sessions[0].protocol_version
            s.initialized = True
            if h2_ca:
                s.http.close()
                s.http = sessions[0].http
        else:
            s.initialize()
        sessions.append(s)
    out, lock = [], threading.Lock()

    def run(i):
        s = sessions[i]
        for n in range(calls_per_thread):
            text = text_of(i, n)
            try:
                r = s.request("tools/call", {"name": "echo", "arguments": {"text": text}})
            except Exception as e:   # noqa: BLE001 - every outcome is checked
                r = e
            with lock:
                out.append((text, r, s.session_id))

    in_threads(THREADS, run, on_start)
    for s in sessions:
        s.close()
    return out if with_sessions else [(text, r) for text, r, _ in out]


def result_text(r):
    if isinstance(r, dict) and "result" in r:
        return r["result"]["content"][0]["text"]
    return None


def wait_for_echo(url, text, timeout, what):
    """Waits until a new session's echo of text answers text (the gateway serves again)."""
    s = McpSession(url, timeout=30)
    s.initialize()
    wait_for(lambda: result_text(s.request("tools/call", {"name": "echo",
                                                          "arguments": {"text": text}}))
             == text, timeout=timeout, what=what)
    s.close()


def stored_answers(pg, tag):
    """Outbound messages stored for this test's calls: {echoed text: [message texts]}."""
    with pg.cursor() as c:
        c.execute("SELECT i.message_text, o.message_text FROM mcp.events i"
                  "  JOIN mcp.events o ON o.stream_id = i.stream_id AND o.direction = 'out'"
                  "   AND o.kind = 'message'"
                  " WHERE i.direction = 'in' AND i.seq = 0 AND i.message_text LIKE %s",
                  (f"%{tag}%",))
        rows = c.fetchall()
    out = {}
    for inbound, outbound in rows:
        text = json.loads(inbound)["params"]["arguments"]["text"]
        out.setdefault(text, []).append(outbound)
    return out


def stored_and_grouped(pg, tag, out, capsys):
    """stored_answers and groups_seen of this test's calls (out, hammer's), the counts
    printed."""
    stored = stored_answers(pg, tag)
    streams, transactions = groups_seen(pg, tag)
    with capsys.disabled():
        print(f"\n{len(out)} calls, {streams} streams ended in {transactions} transactions")
    return stored, streams, transactions


def groups_seen(pg, tag):
    """How many streams of this test ended, and in how many transactions (a group's streams
    share their completed_at: now() is the transaction's start)."""
    with pg.cursor() as c:
        c.execute("SELECT count(*), count(DISTINCT s.completed_at) FROM mcp.streams s"
                  "  JOIN mcp.events i ON i.stream_id = s.id AND i.seq = 0"
                  " WHERE i.message_text LIKE %s AND s.status <> 'open'", (f"%{tag}%",))
        return c.fetchone()


@contextlib.contextmanager
def group_stack(name, conf_text, *up_args):
    """conftest's own_stack with one httpd and conf_text Included (tests/stack up ... up_args):
    its endpoints yielded; stopped (a sanitizer's report fails the test), its data removed."""
    top = run_dir(f"mcp-stack-{name}.")
    conf = top / f"{name}.conf"
    conf.write_text(conf_text)
    with own_stack(top, "--httpd", "1", *up_args, "--conf", str(conf)) as env:
        yield plain_endpoints(env)


@pytest.fixture(scope="module")
def stack():
    """A stack of one httpd with MCPDatabaseGroupCommit 1, /mcp-limits (3 streams per session)
    and /mcp-principal-limits (3 per principal: here, per address), TLS and HTTP/2 too; this
    module's own; conftest's pg fixture connects to it."""
    with group_stack("group", "MCPDatabaseGroupCommit 1\n"
                              "<Location /mcp-limits>\n"
                              "    SetHandler mcp\n"
                              "    MCPBackend ${MCP_BACKEND_URL}\n"
                              "    MCPMaxStreamsPerSession 3\n"
                              "</Location>\n"
                              "<Location /mcp-principal-limits>\n"
                              "    SetHandler mcp\n"
                              "    MCPBackend ${MCP_BACKEND_URL}\n"
                              "    MCPMaxStreamsPerPrincipal 3\n"
                              "</Location>\n", "--tls", "--http2") as env:
        yield env


@pytest.fixture
def admin(stack):
    conn = psycopg2.connect(stack["MCP_PG_ADMIN"].replace("dbname=postgres", "dbname=mcp"))
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


def test_a_refused_answer_in_a_group_fails_alone(stack, pg, admin, capsys):
    """PostgreSQL refuses one request's answer for good (a trigger raises SQLSTATE 22023 for
    outbound messages holding POISON): that request gets its own JSON-RPC error (stored in place
    of the answer), while the requests committed in the same groups get their results, stored."""
    url = stack["MCP_URLS"].split()[0]
    with admin.cursor() as c:
        c.execute("""
            CREATE OR REPLACE FUNCTION mcp.test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.direction = 'out' AND NEW.message_text LIKE '%POISON%' THEN
                    RAISE EXCEPTION 'poisoned answer' USING ERRCODE = '22023';
                END IF;
                RETURN NEW;
            END $$""")
        c.execute("CREATE TRIGGER test_poison BEFORE INSERT ON mcp.events"
                  " FOR EACH ROW EXECUTE FUNCTION mcp.test_poison()")
    try:
        out = hammer(url, 20, lambda i, n: f"grp1-{i}-{n}" + ("-POISON" if n % 5 == 2 else ""))
    finally:
        with admin.cursor() as c:
            c.execute("DROP TRIGGER test_poison ON mcp.events")
            c.execute("DROP FUNCTION mcp.test_poison()")
    stored, streams, transactions = stored_and_grouped(pg, "grp1-", out, capsys)
    assert len(out) == THREADS * 20
    for text, r in out:
        assert isinstance(r, dict), (text, r)
        if "POISON" in text:
            # Its own error, stored; never a result, and nothing poisoned stored.
            assert "error" in r and r["error"]["code"] == -32002, (text, r)
            assert "could not be stored" in r["error"]["message"], r
            assert len(stored[text]) == 1 and "POISON" not in stored[text][0], stored.get(text)
            assert '"code":-32002' in stored[text][0]
        else:
            assert result_text(r) == text, (text, r)
            assert len(stored[text]) == 1 and text in stored[text][0], stored.get(text)


def test_connections_killed_under_groups_lose_no_acknowledged_answer(stack, pg, admin, capsys):
    """The gateway's database connections are terminated again and again while groups are
    committed: a caller either gets its result, which is then stored exactly once, or an error;
    never a result that is not stored."""
    url = stack["MCP_URLS"].split()[0]
    stop = threading.Event()
    kills = [0]

    def killer():
        while not stop.is_set():
            with admin.cursor() as c:
                c.execute("SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid"
                          "  FROM pg_stat_activity"
                          " WHERE usename = 'mcp' AND datname = 'mcp' AND state = 'active'"
                          "   AND query LIKE '%%INSERT INTO mcp.events%%' LIMIT 1) a")
                kills[0] += c.fetchone()[0]
            stop.wait(0.05)

    k = threading.Thread(target=killer, daemon=True)
    try:
        out = hammer(url, 20, lambda i, n: f"grp2-{i}-{n}", on_start=k.start)
    finally:
        stop.set()
        k.join(10)
    stored = stored_answers(pg, "grp2-")
    ok = [text for text, r in out if result_text(r) == text]
    failed = [(text, r) for text, r in out if result_text(r) != text]
    with capsys.disabled():
        print(f"\n{len(out)} calls: {len(ok)} answered, {len(failed)} failed, "
              f"{kills[0]} connections terminated; failures: "
              f"{sorted(set(repr(r)[:80] for _, r in failed))[:3]}")
    assert len(out) == THREADS * 20
    for text in ok:
        assert len(stored.get(text, [])) == 1 and text in stored[text][0], (text, stored.get(text))
    for text, r in failed:
        # A failure is an error the client can see, never a wrong answer.
        assert not isinstance(r, dict) or "error" in r, (text, r)
    # The gateway still works afterwards.
    wait_for_echo(url, "after", timeout=30, what="a call after the kills")


def logged_since(log, start):
    with open(log, "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", "replace")


@pytest.fixture
def statements_logged(stack, admin):
    """PostgreSQL logs every statement meanwhile (a SELECT whose CTEs write is not 'mod');
    yields a function that returns the log written since."""
    log = Path(stack["MCP_STACK_DIR"]) / "pg" / "log"
    start = log.stat().st_size
    with admin.cursor() as c:
        c.execute("ALTER SYSTEM SET log_statement = 'all'")
        c.execute("SELECT pg_reload_conf()")
    try:
        yield lambda: logged_since(log, start)
    finally:
        with admin.cursor() as c:
            c.execute("ALTER SYSTEM RESET log_statement")
            c.execute("SELECT pg_reload_conf()")


# The answers and ends of several streams, merged (mcp_store_event.c's FINISH_MANY): the
# answers of 2025 calls and a bridged call's pair alike.
MERGED_FINISH = "AS x(session_id, stream_id, first, principal, messages, status)"


def test_concurrent_answers_are_stored_by_one_statement(stack, pg, statements_logged, capsys):
    """The answers and ends of concurrent calls that meet in a group go to PostgreSQL as one
    statement (mcp_store__mergeable_t: one executor start and one round trip for all of them),
    and each is stored exactly as alone: its text, its own stream's seq and session. A third of
    the answers hold \\u0001 (their jsonb copies go through mcp.audit_jsonb: the other text of the
    statement, merged apart)."""
    out = hammer(stack["MCP_URLS"].split()[0], 10,
                 lambda i, n: f"grp3-{i}-{n} \u00e9" + ("\x01" if n % 3 == 0 else ""))
    logged = statements_logged()
    merged = [line for line in logged.splitlines() if MERGED_FINISH in line]
    streams, transactions = groups_seen(pg, "grp3-")
    with capsys.disabled():
        print(f"\n{len(out)} calls: {streams} streams ended in {transactions} "
              f"transactions, {len(merged)} merged statements")
    assert merged, "no answers stored by one statement"
    assert len(out) == THREADS * 10
    stored = stored_answers(pg, "grp3-")
    for text, r in out:
        assert result_text(r) == text, (text, r)
        assert len(stored[text]) == 1 and json.loads(stored[text][0])["result"]["content"][0][
            "text"] == text
    with pg.cursor() as c:
        c.execute("SELECT count(*), count(DISTINCT o.seq), min(o.seq),"
                  "       count(*) FILTER (WHERE o.session_id IS DISTINCT FROM s.session_id"
                  "                           OR o.principal IS DISTINCT FROM i.principal)"
                  "  FROM mcp.events i JOIN mcp.streams s ON s.id = i.stream_id"
                  "  JOIN mcp.events o ON o.stream_id = s.id AND o.direction = 'out'"
                  "   AND o.kind = 'message'"
                  " WHERE i.seq = 0 AND i.message_text LIKE %s", ("%grp3-%",))
        rows, seqs, first, wrong = c.fetchone()
    # Every answer where a call alone puts it (after the request and the priming event), and
    # in its own stream's session, by its principal.
    assert rows == THREADS * 10 and seqs == 1 and first >= 1 and wrong == 0, (rows, seqs, first,
                                                                                 wrong)


MERGED_OPENING = "AS x(session_id, principal, backend_url, idle, holder,"


@pytest.mark.parametrize("shape", ["sessions", "one-session", "one-session-h2"])
def test_concurrent_openings_are_stored_by_one_statement(stack, pg, statements_logged, capsys,
                                                         shape):
    """The openings of concurrent calls' streams (the request at seq 0 and the priming event,
    record-then-dispatch) that meet in a group go to PostgreSQL as one statement, over many
    sessions, in one session, and in one session over one HTTP/2 connection (TLS; its calls
    multiplexed, relayed by mod_http2's workers, never parked), and each stream is stored
    exactly as alone: in the session it was asked in, with its request's id, method and text
    at seq 0, its priming event at seq 1 and its answer after them. A third of the requests
    hold \\u0001 (their jsonb copies go through mcp.audit_jsonb: the other text of the statement,
    merged apart)."""
    tag = f"grp4-{shape}-"
    h2 = shape.endswith("-h2")
    url = stack["MCP_HTTPS_URLS" if h2 else "MCP_URLS"].split()[0]
    out = hammer(url, 10, lambda i, n: f"{tag}{i}-{n}" + ("\x01" if n % 3 == 0 else ""),
                 one_session=shape != "sessions", with_sessions=True,
                 h2_ca=stack["MCP_CA"] if h2 else None)
    merged = [line for line in statements_logged().splitlines() if MERGED_OPENING in line]
    with capsys.disabled():
        print(f"\n{len(out)} calls, {len(merged)} merged openings")
    assert merged, "no streams opened by one statement"
    assert len(out) == THREADS * 10
    asked = {}
    for text, r, session in out:
        assert result_text(r) == text, (text, r)
        asked[text] = session
    with pg.cursor() as c:
        c.execute("SELECT s.session_id, s.request_id_text, s.method, s.status, i.message_text,"
                  "       i.session_id, array_agg(e.seq || ':' || e.direction || ':' || e.kind"
                  "                               ORDER BY e.seq)"
                  "  FROM mcp.streams s JOIN mcp.events i ON i.stream_id = s.id AND i.seq = 0"
                  "  JOIN mcp.events e ON e.stream_id = s.id"
                  " WHERE i.message_text LIKE %s"
                  " GROUP BY s.id, i.message_text, i.session_id", (f"%{tag}%",))
        rows = c.fetchall()
    assert len(rows) == THREADS * 10
    for session, request_id, method, status, inbound, row_session, events in rows:
        request = json.loads(inbound)
        text = request["params"]["arguments"]["text"]
        assert session == asked[text] == row_session, (text, session, asked[text])
        assert json.loads(request_id) == request["id"] and method == "tools/call"
        assert status == "complete", (text, status)
        assert events == ["0:in:message", "1:out:priming", "2:out:message"], (text, events)


def test_merged_openings_of_one_session_never_overshoot_its_limit(stack, pg, statements_logged,
                                                                   capsys):
    """12 slow calls at once in one session limited to 3 streams (/mcp-limits), in rounds
    until some were opened by one statement: every round admits exactly 3, the others are
    refused with 429 naming the limit: the admissions merged into one statement count each
    other's slots."""
    from test_limits import assert_refused, open_streams, slow_params

    url = stack["MCP_URLS"].split()[0].rsplit("/", 1)[0] + "/mcp-limits"
    owner = McpSession(url, timeout=60)
    owner.initialize()
    merged, rounds = [], 0
    try:
        while not merged and rounds < 8:
            rounds += 1
            clients = []
            for _ in range(12):
                c = McpSession(url, timeout=60)
                c.session_id, c.protocol_version = owner.session_id, owner.protocol_version
                clients.append(c)
            go = threading.Barrier(12)

            def attempt(c):
                go.wait()
                return c.post_raw(json.dumps({"jsonrpc": "2.0", "id": rounds, "method": "tools/call",
                                              "params": slow_params(count=30)}), stream=True)

            with ThreadPoolExecutor(12) as pool:
                responses = list(pool.map(attempt, clients))
            try:
                codes = sorted(r.status_code for r in responses)
                assert codes == [200] * 3 + [429] * 9, (rounds, codes)
                for r in responses:
                    if r.status_code == 429:
                        assert_refused(r, "MCPMaxStreamsPerSession")
                assert open_streams(pg, "session_id", owner.session_id) == 3
            finally:
                for r in responses:
                    r.close()
                owner.notify("notifications/cancelled", {"requestId": rounds})
                for c in clients:
                    c.close()
            wait_for(lambda: open_streams(pg, "session_id", owner.session_id) == 0,
                     what="the round's streams to end")
            merged = [line for line in statements_logged().splitlines()
                      if MERGED_OPENING in line]
    finally:
        owner.close()
    with capsys.disabled():
        print(f"\n{rounds} rounds, {len(merged)} merged openings")
    assert merged, "no openings merged in 8 rounds"


MERGED_STATELESS = "AS x(holder, max_holder, request_id, method, owner, lease,"
# A bridged call's two openings, merged (mcp_store_bridge.c's OPEN_STATELESS_CALLS).
MERGED_BRIDGED = "AS x(backend_url, caps_key, principal, tool, ttl, holder,"


def modern_call(url, rid, name, arguments, **kw):
    """A 2026-07-28 (stateless) tools/call of a client without capabilities; the response."""
    return bridge_tool(url, rid, name, arguments, caps={}, **kw)


def stateless_hammer(url, tag):
    """THREADS clients making 10 2026-07-28 echo calls each at once (text TAG-i-n), each of
    which must get its own answer; returns [(text sent, last message)]."""
    out, lock = [], threading.Lock()

    def run(i):
        for n in range(10):
            text = f"{tag}-{i}-{n}"
            try:
                r = final(modern_call(url, text, "echo", {"text": text}))
            except Exception as e:   # noqa: BLE001 - every outcome is checked
                r = e
            with lock:
                out.append((text, r))

    in_threads(THREADS, run)
    assert len(out) == THREADS * 10
    for text, r in out:
        assert result_text(r) == text, (text, r)
    return out


def test_concurrent_bridged_calls_are_opened_by_one_statement(stack, pg, statements_logged,
                                                              capsys):
    """2026-07-28 clients' calls (stateless: a stream of no session, here through the era bridge
    to the 2025 test backend) that meet in a group are opened by one statement, each with its
    backend stream on the pooled session, and each client stream is stored exactly as alone: no
    session, its protocol version, request id, method, and the request at seq 0 before its
    answer."""
    out = stateless_hammer(stack["MCP_URLS"].split()[0], "grp5")
    merged = [line for line in statements_logged().splitlines() if MERGED_BRIDGED in line]
    with capsys.disabled():
        print(f"\n{len(out)} calls, {len(merged)} merged bridged openings")
    assert merged, "no bridged calls opened by one statement"
    with pg.cursor() as c:
        c.execute("SELECT s.request_id_text, s.method, s.status, s.protocol_version,"
                  "       i.message_text, array_agg(e.seq || ':' || e.direction || ':' || e.kind"
                  "                                 ORDER BY e.seq),"
                  "       b.request_id_text = s.id::text, b.created_at = s.created_at"
                  "  FROM mcp.streams s JOIN mcp.events i ON i.stream_id = s.id AND i.seq = 0"
                  "  JOIN mcp.events e ON e.stream_id = s.id"
                  "  JOIN mcp.streams b ON b.id = s.bridged_to"
                  " WHERE s.session_id IS NULL AND i.message_text LIKE %s"
                  " GROUP BY s.id, b.id, i.message_text", ("%grp5-%",))
        rows = c.fetchall()
    assert len(rows) == THREADS * 10
    for request_id, method, status, version, inbound, events, own_id, _ in rows:
        request = json.loads(inbound)
        assert json.loads(request_id) == request["id"] == request["params"]["arguments"]["text"]
        assert (method, status, version) == ("tools/call", "complete", V26), (request_id, method,
                                                                             status, version)
        assert events == ["0:in:message", "1:out:message"], (request_id, events)
        assert own_id, (request_id, "the backend's request id is not the client stream's")
    # (The first calls may have met no pooled session: theirs was opened after one was made.)
    assert sum(1 for *_, together in rows if together) >= len(rows) // 2, rows


def test_concurrent_stateless_openings_are_stored_by_one_statement(stack, pg, statements_logged,
                                                                   capsys):
    """2026-07-28 requests that the bridge answers without a call upstream (server/discover:
    a stateless stream each, opened alone, not with a backend stream) that meet in a group are
    opened by one statement, and each stream is stored exactly as alone."""
    url = stack["MCP_URLS"].split()[0]
    out, lock = [], threading.Lock()

    def run(i):
        for n in range(10):
            rid = f"grp8-{i}-{n}"
            r = bridge_call(url, rid, "server/discover", caps={})
            with lock:
                out.append((rid, r.status_code, r.text))

    in_threads(THREADS, run)
    assert all(code == 200 and rid in text for rid, code, text in out), out[:3]
    merged = [line for line in statements_logged().splitlines() if MERGED_STATELESS in line]
    with capsys.disabled():
        print(f"\n{len(out)} discovers, {len(merged)} merged stateless openings")
    assert merged, "no stateless streams opened by one statement"
    with pg.cursor() as c:
        c.execute("SELECT s.request_id_text, s.method, s.status, s.protocol_version,"
                  "       s.bridged_to, i.message_text,"
                  "       array_agg(e.seq || ':' || e.direction || ':' || e.kind ORDER BY e.seq)"
                  "  FROM mcp.streams s JOIN mcp.events i ON i.stream_id = s.id AND i.seq = 0"
                  "  JOIN mcp.events e ON e.stream_id = s.id"
                  " WHERE s.session_id IS NULL AND i.message_text LIKE %s"
                  " GROUP BY s.id, i.message_text", ("%grp8-%",))
        rows = c.fetchall()
    assert len(rows) == THREADS * 10
    for request_id, method, status, version, bridged_to, inbound, events in rows:
        assert json.loads(request_id) == json.loads(inbound)["id"]
        assert (method, status, version, bridged_to) == ("server/discover", "complete", V26,
                                                         None), (request_id, method, status)
        assert events == ["0:in:message", "1:out:message"], (request_id, events)


def test_concurrent_bridged_openings_share_transactions(stack, pg, capsys):
    """The era bridge's openings of concurrent 2026-07-28 calls (each call's backend stream on
    the pool's one session: its request at seq 0 and its priming row) run in the child's group,
    several in one transaction (their streams share created_at, the transaction's start), with
    the pooled session's row taken FOR KEY SHARE only; each is stored as alone: linked from its
    client stream, on a pooled session, the request, the priming row and the answer in order."""
    stateless_hammer(stack["MCP_URLS"].split()[0], "grp7")
    with pg.cursor() as c:
        c.execute("SELECT count(*), count(DISTINCT b.created_at), count(DISTINCT b.session_id),"
                  "       count(*) FILTER (WHERE b.status <> 'complete'),"
                  "       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM mcp.bridge_sessions p"
                  "                                           WHERE p.session_id = b.session_id))"
                  "  FROM mcp.streams c JOIN mcp.streams b ON b.id = c.bridged_to"
                  "  JOIN mcp.events i ON i.stream_id = c.id AND i.seq = 0"
                  " WHERE c.session_id IS NULL AND i.message_text LIKE %s", ("%grp7-%",))
        calls, transactions, sessions, unfinished, unpooled = c.fetchone()
        c.execute("SELECT b.id, array_agg(e.seq || ':' || e.direction || ':' || e.kind"
                  "                       ORDER BY e.seq)"
                  "  FROM mcp.streams c JOIN mcp.streams b ON b.id = c.bridged_to"
                  "  JOIN mcp.events i ON i.stream_id = c.id AND i.seq = 0"
                  "  JOIN mcp.events e ON e.stream_id = b.id"
                  " WHERE c.session_id IS NULL AND i.message_text LIKE %s GROUP BY b.id",
                  ("%grp7-%",))
        shapes = {tuple(events) for _, events in c.fetchall()}
    with capsys.disabled():
        print(f"\n{calls} bridged calls opened in {transactions} transactions")
    # (the first calls at once may each have pooled a session of their own)
    assert calls == THREADS * 10 and sessions >= 1 and unfinished == 0 and unpooled == 0, (
        calls, sessions, unfinished, unpooled)
    assert transactions < calls, "no two bridged openings in one transaction"
    assert shapes == {("0:in:message", "1:out:priming", "2:out:message")}, shapes


def test_concurrent_bridged_calls_end_in_shared_transactions(stack, pg, statements_logged,
                                                             capsys):
    """The ends of concurrent 2026-07-28 calls through the era bridge (each call's two streams,
    its backend stream's answer and its client stream's) run in the child's group, several in
    one transaction (completed_at is the transaction's start) and in one statement, not each in
    a transaction and a WAL flush of its own; each pair still ends together, both streams
    complete with the answer stored on each."""
    out = stateless_hammer(stack["MCP_URLS"].split()[0], "grp9")
    lines = statements_logged().splitlines()
    # The ends' statement with more than one pair's streams ($2: the streams' ids).
    merged = [d for s, d in zip(lines, lines[1:])
              if MERGED_FINISH in s
              and (m := re.search(r"\$2 = '\{([0-9,]+)\}'", d)) and m.group(1).count(",") >= 3]
    with pg.cursor() as c:
        c.execute("SELECT count(*), count(DISTINCT b.completed_at),"
                  "       count(*) FILTER (WHERE c.completed_at IS DISTINCT FROM b.completed_at"
                  "                           OR c.status <> 'complete' OR b.status <> 'complete'),"
                  "       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM mcp.events a"
                  "                                           WHERE a.stream_id = c.id"
                  "                                             AND a.kind = 'message'"
                  "                                             AND a.direction = 'out')"
                  "                            OR NOT EXISTS (SELECT 1 FROM mcp.events a"
                  "                                           WHERE a.stream_id = b.id"
                  "                                             AND a.kind = 'message'"
                  "                                             AND a.direction = 'out'))"
                  "  FROM mcp.streams c JOIN mcp.streams b ON b.id = c.bridged_to"
                  "  JOIN mcp.events i ON i.stream_id = c.id AND i.seq = 0"
                  " WHERE c.session_id IS NULL AND i.message_text LIKE %s", ("%grp9-%",))
        calls, transactions, apart, unanswered = c.fetchone()
    with capsys.disabled():
        print(f"\n{calls} bridged calls ended in {transactions} transactions,"
              f" {len(merged)} statements ending several")
    assert calls == len(out) == THREADS * 10 and apart == 0 and unanswered == 0, (
        calls, apart, unanswered)
    assert transactions < calls, "no two bridged calls' ends in one transaction"
    assert merged, "no two bridged calls' ends in one statement"


def test_merged_bridged_openings_never_overshoot_the_principals_limit(stack, pg,
                                                                      statements_logged, capsys):
    """12 slow 2026-07-28 calls at once from one principal limited to 3 streams
    (/mcp-principal-limits; unauthenticated, the principal is the address), in rounds until some
    were opened by one statement: every round admits exactly 3, the others are refused with 429
    naming the limit."""
    from test_limits import assert_refused

    url = stack["MCP_URLS"].split()[0].rsplit("/", 1)[0] + "/mcp-principal-limits"
    holder = "addr:127.0.0.1"

    def open_streams():
        with pg.cursor() as c:
            c.execute("SELECT count(*) FROM mcp.streams WHERE holder = %s AND status = 'open'"
                      "   AND session_id IS NULL", (holder,))
            return c.fetchone()[0]

    wait_for(lambda: open_streams() == 0, what="no stateless stream of the address open")
    merged, rounds = [], 0
    while not merged and rounds < 8:
        rounds += 1
        go = threading.Barrier(12)

        def attempt(k):
            go.wait()
            return modern_call(url, f"grp6-{rounds}-{k}", "slow",
                               {"count": 30, "interval_ms": 100}, stream=True,
                               progressToken=f"grp6-{rounds}-{k}")

        with ThreadPoolExecutor(12) as pool:
            responses = list(pool.map(attempt, range(12)))
        try:
            codes = sorted(r.status_code for r in responses)
            assert codes == [200] * 3 + [429] * 9, (rounds, codes)
            for r in responses:
                if r.status_code == 429:
                    assert_refused(r, "MCPMaxStreamsPerPrincipal")
            assert open_streams() == 3
        finally:
            for r in responses:   # a 2026-07-28 client's disconnect cancels its call
                r.close()
        wait_for(lambda: open_streams() == 0, timeout=60, what="the round's streams to end")
        merged = [line for line in statements_logged().splitlines()
                  if MERGED_BRIDGED in line]
    with capsys.disabled():
        print(f"\n{rounds} rounds, {len(merged)} merged bridged openings")
    assert merged, "no bridged openings merged in 8 rounds"


RUNS_CHECKED = 40


# Plans are PostgreSQL's: nothing for the sanitizers to see, and their slower calls make
# bigger groups, so fewer runs of the merged statements.
@pytest.mark.not_asan
def test_statements_run_again_and_again_keep_their_generic_plans(stack, capsys):
    """Every statement the gateway runs again and again keeps a generic plan: PostgreSQL plans it
    for each connection's first five runs and then runs the plan it kept. A statement planned at
    every run pays its planning each time: the merged opening of bridged calls (1.1 ms of
    planning, more than its execution) was planned again at half of its runs, because plans made
    for the few rows of one run looked cheaper than the generic one (mcp_store_bridge.c,
    OPEN_STATELESS_CALLS). pg_stat_statements, loaded here (this stack's PostgreSQL restarted),
    counts each statement's runs and plans while 2025 sessions and 2026-07-28 clients call at
    once, after a warm-up of the same: no statement run RUNS_CHECKED times or more may be
    planned at half of its runs or more, and the merged statements must be among those checked.
    (Last in this module: the others run without the restart.)"""
    url = stack["MCP_URLS"].split()[0]
    admin_dsn = stack["MCP_PG_ADMIN"].replace("dbname=postgres", "dbname=mcp")
    conn = psycopg2.connect(admin_dsn)
    conn.autocommit = True
    with conn.cursor() as c:
        c.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    conn.close()
    subprocess.run([str(STACK), "restart-pg", "--dir", stack["MCP_STACK_DIR"]], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    db = psycopg2.connect(admin_dsn)
    db.autocommit = True
    try:
        with db.cursor() as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            c.execute("ALTER SYSTEM SET pg_stat_statements.track_planning = on")
            c.execute("SELECT pg_reload_conf()")
        wait_for_echo(url, "up", timeout=60, what="a call after PostgreSQL's restart")
        # The warm-up as long as the counted part: each connection has run each statement
        # more than five times before the count starts.
        for phase, rounds in (("warm", 4), ("counted", 4)):
            with db.cursor() as c:
                c.execute("SELECT pg_stat_statements_reset()")
            out = hammer(url, 10 * rounds, lambda i, n: f"plans-{phase}-{i}-{n}")
            assert all(result_text(r) == text for text, r in out), out
            for k in range(rounds):
                stateless_hammer(url, f"plans-{phase}-{k}")
        with db.cursor() as c:
            c.execute("SELECT s.calls, s.plans, s.query FROM pg_stat_statements s"
                      "  JOIN pg_roles r ON r.oid = s.userid"
                      " WHERE r.rolname = 'mcp' AND s.calls >= %s ORDER BY s.calls DESC",
                      (RUNS_CHECKED,))
            rows = c.fetchall()
    finally:
        db.close()
    with capsys.disabled():
        for calls, plans, query in rows:
            print(f"\n{calls:5d} runs {plans:5d} plans  {' '.join(query.split())[:90]}", end="")
        print()
    checked = [q for _, _, q in rows]
    for merged in (MERGED_FINISH, MERGED_OPENING, MERGED_BRIDGED):
        assert any(merged in q for q in checked), \
            f"no statement with {merged!r} ran {RUNS_CHECKED} times"
    # A connection plans a statement at most six times (five runs, then the generic plan);
    # one planned again at each run is planned at nearly every run.
    replanned = [(calls, plans, " ".join(q.split())[:120]) for calls, plans, q in rows
                 if plans * 2 > calls]
    assert not replanned, replanned


@pytest.fixture(scope="module")
def two_committers():
    """A stack of one httpd whose children commit with two committers each
    (MCPDatabaseGroupCommit 2): its endpoints and a connection to its database."""
    with group_stack("group2", "MCPDatabaseGroupCommit 2\n") as env, database(env) as db:
        yield env, db


def test_two_committers_answer_every_caller_and_share_transactions(two_committers, capsys):
    """With two committers per child, a caller whose statement queued while both were busy is
    woken by the one that carried it (each thread has its own waker) and one of those queued is
    woken to send the next batch: every caller gets its own answer, stored once, and the calls'
    streams end in fewer transactions than there are calls."""
    env, db = two_committers
    out = hammer(env["MCP_URLS"].split()[0], 20, lambda i, n: f"two-{i}-{n}")
    stored, streams, transactions = stored_and_grouped(db, "two-", out, capsys)
    assert len(out) == THREADS * 20
    for text, r in out:
        assert result_text(r) == text, (text, r)
        assert len(stored[text]) == 1 and text in stored[text][0], stored.get(text)
    assert streams == THREADS * 20
    assert transactions < streams
