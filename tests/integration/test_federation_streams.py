"""A federated session's standalone GET stream waits without a thread, as a single backend's does
(issue 22 on top of issue 20): one parked stream with a backend half per member (each member's
GET in a transfer slot of the stream's event-loop source), every half storing on the one stream.

The stack is this module's own, with few workers: one httpd, 2 children x 4 threads
(MaxRequestWorkers 8), AsyncRequestWorkerFactor high enough that the event MPM keeps accepting;
/mcp-fed-many federates two members (alpha unprefixed, beta under beta_), both the C test
backend, with the per-principal limits off. Proved here: many more federated GET streams than
workers are open at once and a fresh client is still served; a notification from either member
reaches the parked stream (stored before written); the client leaving ends every member's GET
(the backend sees it end: its notify says "queued", /broadcast counts no open GET); a graceful
restart ends the parked streams with a retry: hint and the client resumes with Last-Event-ID on
the new children, parked again, both members live on it. And 2026-07-28 clients'
subscriptions/listen on /mcp-fed-modern-many, each member's part (a pooled session's GET) a
transfer slot of one parked stream: many more than workers, the same way.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import pytest
import requests

from concurrent.futures import ThreadPoolExecutor

from conftest import database, httpd_pids, own_stack, run_dir
from mcp_client import iter_sse
from many_streams import Crowd, Stream
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"
WORKERS = 8
# Many times the workers (each holds two backend GETs: 2 x STREAMS on the backend).
STREAMS = 60

CONF = """
LoadModule status_module /usr/lib/apache2/modules/mod_status.so
AsyncRequestWorkerFactor 100
<Location /mcp-fed-many>
    SetHandler mcp
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
    MCPMaxSessions 0
    <MCPMember alpha>
        Backend ${MCP_BACKEND_URL}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${MCP_BACKEND_URL}
        Prefix beta_
    </MCPMember>
</Location>
<Location /mcp-fed-threaded>
    SetHandler mcp
    MCPAsyncStreams Off
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
    <MCPMember alpha>
        Backend ${MCP_BACKEND_URL}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${MCP_BACKEND_URL}
        Prefix beta_
    </MCPMember>
</Location>
# 2026-07-28 listens: alpha and beta both the C test backend (2025 era: through the era bridge),
# beta's Backend spelled apart (the backend ignores the query) so that each member has pooled
# sessions of its own.
<Location /mcp-fed-modern-many>
    SetHandler mcp
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
    MCPMaxSessions 0
    <MCPMember alpha>
        Backend ${MCP_BACKEND_URL}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${MCP_BACKEND_URL}?member=beta
        Prefix beta_
    </MCPMember>
</Location>
<Location /mcp-fed-status>
    SetHandler server-status
</Location>
"""


@pytest.fixture(scope="module")
def env():
    d = run_dir("mcp-fedstreams-")
    conf = d / "fedstreams.conf"
    conf.write_text(CONF)
    with own_stack(d, "--httpd", "1", "--workers", str(WORKERS), "--children", "2",
                   "--conf", str(conf)) as e:
        yield e


def base(env):
    return env["MCP_HTTP_URL"].rsplit("/", 1)[0]


def status(env) -> dict[str, str]:
    text = requests.get(base(env) + "/mcp-fed-status?auto", timeout=10).text
    return dict(l.split(": ", 1) for l in text.splitlines() if ": " in l)


def parked(env) -> int:
    return int(status(env).get("MCPParkedStreams", "-1"))


def backend_gets(env) -> int:
    """The test backend's open standalone GET streams (every session's): its POST /broadcast
    counts them (and sends each a tools/list_changed)."""
    r = requests.post(env["MCP_BACKEND_URL"].rsplit("/", 1)[0] + "/broadcast", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["streams"]


def httpd_threads(env) -> int:
    n = 0
    for pid in httpd_pids(env):
        try:
            n += int(re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(),
                               re.M).group(1))
        except (OSError, AttributeError):
            pass
    return n


def child_threads(env) -> int:
    """The most threads any one httpd child has."""
    most = 0
    for pid in httpd_pids(env)[1:]:
        try:
            most = max(most, int(re.search(r"^Threads:\s+(\d+)",
                                           Path(f"/proc/{pid}/status").read_text(),
                                           re.M).group(1)))
        except (OSError, AttributeError):
            pass
    return most


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def text_of(body: bytes) -> str:
    """The text of a tools/call answer (JSON, or the response event of an SSE answer)."""
    for chunk in [body] + [l[5:].strip() for l in body.split(b"\n") if l.startswith(b"data:")]:
        try:
            msg = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(msg, dict) and "result" in msg:
            return msg["result"]["content"][0]["text"]
    raise AssertionError(f"no result in {body[:300]!r}")


def messages(s: Stream) -> list[dict]:
    return [json.loads(t) for _, t in s.events]


def log_data(s: Stream) -> list[str]:
    return [m["params"]["data"] for m in messages(s)
            if m.get("method") == "notifications/message"]


async def notify_both(crowd: Crowd, s: Stream, tag: str) -> list[str]:
    """notify (alpha) and beta_notify (beta) on s's session; their answers' texts."""
    hows = []
    for tool in ("notify", "beta_notify"):
        code, _, body = await crowd.call(s.sid, tool, {"text": f"{tag} {tool} {s.sid}"})
        assert code == 200, body
        hows.append(text_of(body))
    return hows


def test_more_federated_streams_than_workers(env):
    """STREAMS federated GET streams on 8 workers: every one answered and parked, each with both
    members' GETs open at the backend; a fresh client is served meanwhile; a notification from
    alpha and one from beta reach the stream they are for, stored before written; threads do
    not grow with streams; closing the clients brings the parked count and the backend's open
    GETs back to 0 and closes every stream row."""
    url = base(env) + "/mcp-fed-many"
    threads_before = httpd_threads(env)

    async def scenario():
        async with Crowd(url, parallel=16) as crowd:
            streams = await crowd.connect(STREAMS)
            bad = [s.status for s in streams if s.status != 200]
            assert not bad, f"{len(bad)} of {STREAMS} streams not opened: {bad[:3]}"
            assert all(s.headers.get("content-type", "").startswith("text/event-stream")
                       for s in streams)
            for s in streams:
                await s.wait_for(lambda s: s.ids, timeout=20)   # the priming event
            wait_for(lambda: parked(env) >= STREAMS, timeout=30,
                     what=f"{STREAMS} parked federated streams")
            # Both members' GETs of every session are open, with no thread each.
            wait_for(lambda: backend_gets(env) >= 2 * STREAMS, timeout=30,
                     what="both members' GETs open at the backend")
            threads = httpd_threads(env)
            assert threads - threads_before < 10, (threads_before, threads)
            # A fresh client: initialize (both members) and a call to each member.
            sid = await crowd.session()
            for tool in ("echo", "beta_echo"):
                code, _, body = await crowd.call(sid, tool, {"text": "still served"},
                                                 timeout=10)
                assert code == 200 and text_of(body) == "still served", body
            # Notifications from either member reach the stream they are for (the backend's
            # notify says "sent": on the member's open GET).
            for s in streams[:6]:
                assert await notify_both(crowd, s, "hello") == ["sent", "sent"]
            for s in streams[:6]:
                await s.wait_for(lambda s: len([d for d in log_data(s) if "hello" in d]) == 2,
                                 timeout=10)
                assert sorted(d.split()[1] for d in log_data(s) if "hello" in d) == \
                    ["beta_notify", "notify"]
                assert all(s.sid in d for d in log_data(s) if "hello" in d)
            others = [s for s in streams[6:] if any("hello" in d for d in log_data(s))]
            assert not others
            return [s.ids[-1] for s in streams[:6]]
    last_ids = run(scenario())
    # Stored before written: the last event each client got is in the table.
    with database(env) as pg, pg.cursor() as cur:
        for event_id in last_ids:
            stream_id, seq = (int(x) for x in event_id.split("-"))
            cur.execute("SELECT message::text FROM mcp.events WHERE stream_id = %s AND seq = %s",
                        (stream_id, seq))
            row = cur.fetchone()
            assert row and "hello" in row[0], (event_id, row)
    # The clients went: every parked stream ends, and with it every member's GET.
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")
    wait_for(lambda: backend_gets(env) == 0, timeout=30, what="every member GET ended")
    with database(env) as pg, pg.cursor() as cur:
        wait_for(lambda: (cur.execute("SELECT count(*) FROM mcp.streams WHERE kind = "
                                      "'standalone' AND status = 'open'"),
                          cur.fetchone()[0] == 0)[1], timeout=30,
                 what="every standalone stream closed after its client went")


def test_client_leaving_ends_every_member_stream(env):
    """One parked federated stream: both members' GETs are open (notify says "sent"); the
    client closes its connection: the parked stream ends, and both members' GETs end at the
    backend (their notify says "queued": no GET is open for the session)."""
    async def scenario():
        async with Crowd(base(env) + "/mcp-fed-many") as crowd:
            [s] = await crowd.connect(1)
            assert s.status == 200
            wait_for(lambda: parked(env) == 1, timeout=10, what="the stream parked")
            assert await notify_both(crowd, s, "before") == ["sent", "sent"]
            await s.wait_for(lambda s: len(log_data(s)) == 2, timeout=10)
            s.close()
            await asyncio.sleep(0.1)   # (the socket is closed by the event loop)
            wait_for(lambda: parked(env) == 0, timeout=10, what="the parked stream to end")
            hows = None
            for _ in range(100):
                hows = await notify_both(crowd, s, "after")
                if hows == ["queued", "queued"]:
                    break
                await asyncio.sleep(0.1)
            assert hows == ["queued", "queued"], hows
            with database(env) as pg, pg.cursor() as cur:
                cur.execute("SELECT status FROM mcp.streams WHERE session_id = %s AND kind = "
                            "'standalone'", (s.sid,))
                assert [r[0] for r in cur.fetchall()] == ["closed"]
    run(scenario())


def test_delete_ends_a_parked_federated_stream(env):
    """DELETE of the session ends its parked federated stream (and every member's session)."""
    async def scenario():
        async with Crowd(base(env) + "/mcp-fed-many") as crowd:
            [s] = await crowd.connect(1)
            assert s.status == 200
            wait_for(lambda: parked(env) == 1, timeout=10, what="the stream parked")
            reader, writer = await asyncio.open_connection(crowd.host, crowd.port)
            writer.write((f"DELETE {crowd.path} HTTP/1.1\r\nHost: {crowd.host}:{crowd.port}\r\n"
                          f"Mcp-Session-Id: {s.sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
                          f"Connection: close\r\n\r\n").encode())
            assert b" 200 " in (await reader.read())[:20]
            writer.close()
            await s.wait_for(lambda s: s.ended, timeout=10)
    run(scenario())
    wait_for(lambda: parked(env) == 0, timeout=10, what="parked streams back to 0")
    wait_for(lambda: backend_gets(env) == 0, timeout=10, what="every member GET ended")


def test_graceful_restart_hands_the_stream_over(env):
    """A graceful restart: every parked federated stream ends with a retry: hint, the members'
    GETs end, the old children retire; each client resumes with Last-Event-ID on the new
    children, is parked again, and gets both members' notifications there."""
    n = 12

    async def scenario():
        async with Crowd(base(env) + "/mcp-fed-many") as crowd:
            streams = await crowd.connect(n)
            assert all(s.status == 200 for s in streams)
            for s in streams:
                await s.wait_for(lambda s: s.ids, timeout=20)
            wait_for(lambda: parked(env) >= n, timeout=30, what="parked streams")
            for s in streams[:3]:
                assert await notify_both(crowd, s, "before") == ["sent", "sent"]
                await s.wait_for(lambda s: len(log_data(s)) == 2, timeout=10)
            old = set(httpd_pids(env)[1:])
            subprocess.run([str(STACK), "graceful", "--dir", env["MCP_STACK_DIR"]], check=True,
                           timeout=60, capture_output=True)
            for s in streams:
                await s.wait_for(lambda s: s.ended, timeout=30)
            assert all(s.hints >= 1 for s in streams), sum(s.hints >= 1 for s in streams)
            wait_for(lambda: not (old & set(httpd_pids(env)[1:])), timeout=30,
                     what="the old children to exit")
            # The members' GETs ended with the streams (so that the members take new ones).
            wait_for(lambda: backend_gets(env) == 0, timeout=30, what="the members' GETs ended")
            resumed = []
            for s in streams:
                r = Stream(crowd, s.sid)
                await r.open(10, last_event_id=s.ids[-1])
                assert r.status == 200, r.status
                resumed.append(r)
            wait_for(lambda: parked(env) >= n, timeout=30, what="the resumed streams parked")
            wait_for(lambda: backend_gets(env) >= 2 * n, timeout=30,
                     what="both members' GETs open again")
            for s, r in zip(streams[:4], resumed[:4]):
                assert await notify_both(crowd, r, "after") == ["sent", "sent"]
                await r.wait_for(lambda r: len([d for d in log_data(r) if "after" in d]) == 2,
                                 timeout=10)
                # Nothing the client had is sent again: the resumed stream starts after it.
                assert not [d for d in log_data(r) if "before" in d]
                assert len(r.ids) == len(set(r.ids)), r.ids
            for r in resumed:
                r.close()
    run(scenario())
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked streams back to 0")
    wait_for(lambda: backend_gets(env) == 0, timeout=30, what="every member GET ended")


def test_async_streams_off_holds_the_thread(env):
    """MCPAsyncStreams Off: the federated stream is served by its thread (not parked), both
    members' notifications reach it all the same."""
    async def scenario():
        async with Crowd(base(env) + "/mcp-fed-threaded") as crowd:
            [s] = await crowd.connect(1)
            assert s.status == 200
            await s.wait_for(lambda s: s.ids, timeout=10)
            wait_for(lambda: backend_gets(env) >= 2, timeout=10, what="both members' GETs")
            assert parked(env) == 0
            assert await notify_both(crowd, s, "threaded") == ["sent", "sent"]
            await s.wait_for(lambda s: len(log_data(s)) == 2, timeout=10)
    run(scenario())
    wait_for(lambda: backend_gets(env) == 0, timeout=30, what="every member GET ended")


# ---- 2026-07-28 listens --------------------------------------------------------------------------

LISTENS = 40
V26 = "2026-07-28"


def modern(url, rid, method, params, caps, stream=False):
    body = {"jsonrpc": "2.0", "id": rid, "method": method,
            "params": dict(params, _meta={"io.modelcontextprotocol/protocolVersion": V26,
                                          "io.modelcontextprotocol/clientCapabilities": caps})}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": V26, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return requests.post(url, data=json.dumps(body), headers=headers, stream=stream, timeout=30)


def test_more_federated_listens_than_workers(env):
    """LISTENS subscriptions/listen of 2026-07-28 clients on 8 workers, each with capabilities
    of its own (so each member gives it a pooled session and a GET of its own): every one
    acknowledged and parked, both members' GETs open at the backend, threads not grown; a
    fresh call is served meanwhile; a resource change of beta's reaches the listen whose pooled
    session it happened on, in the client's names; closing the clients ends every listen, every
    member's GET, and leaves each stream closed."""
    url = base(env) + "/mcp-fed-modern-many"
    uri = "beta+test://watched-resource"
    # Per child: after the graceful restart above the MPM runs one child until load makes it
    # start the second (whose threads are not the listens').
    threads_before = child_threads(env)
    gets_before = backend_gets(env)

    def caps(i):
        return {"experimental": {"listen": {"n": i}}}

    def listen(i):
        r = modern(url, f"FL-{i}", "subscriptions/listen",
                   {"notifications": {"resourceSubscriptions": [uri]}}, caps(i), stream=True)
        assert r.status_code == 200, r.text
        events = (json.loads(ev.data) for ev in iter_sse(r) if ev.data)
        ack = next(events)
        assert ack["method"] == "notifications/subscriptions/acknowledged", ack
        return r, events

    # A few at a time: setting up a listen's pooled sessions takes a worker a while (several
    # exchanges per member), and with every worker busy the MPM would start another child.
    with ThreadPoolExecutor(4) as pool:
        listens = list(pool.map(listen, range(LISTENS)))
    try:
        wait_for(lambda: parked(env) >= LISTENS, timeout=30, what=f"{LISTENS} parked listens")
        wait_for(lambda: backend_gets(env) >= gets_before + 2 * LISTENS, timeout=30,
                 what="both members' GETs of every listen open at the backend")
        assert child_threads(env) - threads_before < 10
        r = modern(url, "FL-fresh", "tools/call", {"name": "echo", "arguments": {"text": "ok"}},
                   {})
        assert r.status_code == 200 and text_of(r.content) == "ok", r.text
        for i in (0, LISTENS // 2, LISTENS - 1):
            r = modern(url, f"FL-t{i}", "tools/call",
                       {"name": "beta_touch_resource",
                        "arguments": {"uri": "test://watched-resource"}}, caps(i))
            assert r.status_code == 200, r.text
            update = next(listens[i][1])
            assert update["method"] == "notifications/resources/updated", update
            assert update["params"]["uri"] == uri
            assert update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == f"FL-{i}"
    finally:
        for r, _ in listens:
            r.close()
    wait_for(lambda: parked(env) == 0, timeout=30, what="parked listens back to 0")
    wait_for(lambda: backend_gets(env) <= gets_before, timeout=30, what="every member GET ended")
    with database(env) as pg, pg.cursor() as cur:
        wait_for(lambda: (cur.execute("SELECT count(*) FROM mcp.streams WHERE session_id IS NULL "
                                      "AND method = 'subscriptions/listen' AND status = 'open'"),
                          cur.fetchone()[0] == 0)[1], timeout=30,
                 what="every listen's stream closed after its client went")
