"""Leases that do not kill live streams: the owner of a stream may be blocked writing to a client
that stopped reading (its TCP window full) for much longer than MCPStreamLease, and the
per-process lease keeper still renews the lease, so no one else finishes the stream; when the
client reads again it gets every event and the response."""

import json
import socket
import time
from urllib.parse import urlsplit

import psycopg2

from mcp_client import parse_sse_bytes
from waiting import wait_for

# /mcp-lease in gateway.conf: MCPStreamLease 2; the sweep runs every second (MCPSweepInterval 1).
LEASE = 2.0


def base(stack):
    return stack["MCP_URL"].rsplit("/", 1)[0]


def dechunk(body: bytes) -> bytes:
    out, i = b"", 0
    while True:
        j = body.index(b"\r\n", i)
        size = int(body[i:j].split(b";")[0], 16)
        if size == 0:
            return out
        out += body[j + 2:j + 2 + size]
        i = j + 2 + size + 2


def stream_row(pg, stream_id):
    with pg.cursor() as cur:
        cur.execute("""SELECT status, lease_until > now(),
                              (SELECT count(*) FROM mcp.events WHERE stream_id = s.id)
                         FROM mcp.streams s WHERE id = %s""", (stream_id,))
        return cur.fetchone()


def test_a_client_that_stops_reading_longer_than_the_lease_keeps_its_stream(mcp, stack, pg):
    """MCPAsyncStreams Off on /mcp-lease: a stream held by its thread, whose owner blocks on its
    write to the client that does not read (back-pressure) while its lease stays ahead. (A
    parked stream never blocks on its client: test_async_streams' slow clients.)"""
    url = base(stack) + "/mcp-lease"
    s = mcp(url)
    s.initialize()
    count, token = 100, "t" * 60_000           # about 6 MB: more than the socket buffers hold
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "slow", "arguments": {"count": count, "interval_ms": 10},
                                  "_meta": {"progressToken": token}}}).encode()
    u = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # a tiny window
    sock.connect((u.hostname, u.port))
    head = (f"POST {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
            f"Mcp-Session-Id: {s.session_id}\r\nMCP-Protocol-Version: {s.protocol_version}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    sock.sendall(head + body)
    first = sock.recv(4096)
    assert first.startswith(b"HTTP/1.1 200"), first[:200]
    sse = first.split(b"\r\n\r\n", 1)[1]
    with pg.cursor() as cur:
        cur.execute("SELECT max(id) FROM mcp.streams WHERE session_id = %s", (s.session_id,))
        stream_id = cur.fetchone()[0]

    # The client reads nothing for three leases. The owner blocks on its write (the stream
    # stops growing: back-pressure), yet the lease stays ahead of now the whole time.
    stalled_until = time.monotonic() + 3 * LEASE
    while time.monotonic() < stalled_until:
        status, leased, _ = stream_row(pg, stream_id)
        assert status == "open" and leased, (status, leased)
        time.sleep(0.2)
    _, _, stored = stream_row(pg, stream_id)
    assert stored < count + 3, "the owner was never blocked by the client"

    # Reading again: every event and the response, nothing from a lease expiry.
    sock.settimeout(60)
    data = sse
    while not data.endswith(b"0\r\n\r\n"):
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    sock.close()
    events = [e for e in parse_sse_bytes(dechunk(data)) if e.data]
    assert len(events) == count + 1, len(events)
    assert events[-1].json["result"]["content"][0]["text"] == f"slow done: {count} steps"
    seqs = [int(e.id.split("-")[1]) for e in events]
    assert seqs == list(range(2, 2 + count + 1))
    wait_for(lambda: stream_row(pg, stream_id)[0] == "complete", what="the stream's end")


def test_a_lease_expiry_answers_only_requests_without_a_stored_response(mcp, pg):
    # A batch stream whose owner died after storing the response to one of its two requests
    # (written here as the dead owner would have left it). The sweep (every second) finishes
    # it with an error for the other request only: never two answers for one id.
    s = mcp()
    s.initialize()
    with pg.cursor() as cur:
        cur.execute("""INSERT INTO mcp.streams (session_id, kind, request_id_text, request_id,
                                                method, owner, lease_until)
                       VALUES (%s, 'request', '["a\\u0000", 2]', '["a\\ufffd", 2]', 'tools/call',
                               'gone:1', now() - interval '1 second') RETURNING id""",
                    (s.session_id,))
        stream_id = cur.fetchone()[0]
        answered = '{"jsonrpc":"2.0","id":"a\\u0000","result":{"content":[]}}'
        cur.execute("""INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind,
                                               message_text, message)
                       VALUES (%s, %s, 0, 'in', 'message', '[]', '[]'),
                              (%s, %s, 1, 'out', 'priming', NULL, NULL),
                              (%s, %s, 2, 'out', 'message', %s, mcp.audit_jsonb(%s))""",
                    (s.session_id, stream_id, s.session_id, stream_id, s.session_id, stream_id,
                     answered, answered))
    wait_for(lambda: stream_row(pg, stream_id)[0] == "failed", what="the sweep")
    with pg.cursor() as cur:
        cur.execute("""SELECT seq, message_text FROM mcp.events
                        WHERE stream_id = %s AND seq > 1 ORDER BY seq""", (stream_id,))
        rows = cur.fetchall()
    assert rows[0] == (2, answered)
    assert len(rows) == 2, rows
    error = json.loads(rows[1][1])
    assert error["id"] == 2 and error["error"]["code"] == -32002


def test_a_lease_renewal_rewrites_the_stream_row_in_place(mcp, stack, pg):
    """An open stream's lease is renewed every MCPStreamLease / 3 for as long as it lasts (a
    connected client's standalone stream: hours). Each renewal is a heap-only update: the new
    row version stays on its page with no new entry in the table's indexes (lease_until is in
    none, and each page keeps room), which is what keeps 10,000 idle clients from costing
    megabytes of WAL per second. Seen on the row itself (pageinspect): after renewals, its
    current version is a heap-only tuple."""
    s = mcp(base(stack) + "/mcp-lease")
    s.initialize()
    r = s.get_raw(headers=s.headers({"Accept": "text/event-stream"}), stream=True, timeout=30)
    try:
        assert r.status_code == 200, r.text
        with pg.cursor() as cur:
            def open_stream():
                cur.execute("SELECT id, lease_until FROM mcp.streams WHERE session_id = %s"
                            " AND kind = 'standalone' AND status = 'open'", (s.session_id,))
                return cur.fetchone()
            stream_id, first = wait_for(open_stream, timeout=10, what="the standalone stream's row")
            seen = {first}

            def renewed_three_times():
                cur.execute("SELECT lease_until FROM mcp.streams WHERE id = %s", (stream_id,))
                seen.add(cur.fetchone()[0])
                return len(seen) >= 4
            wait_for(renewed_three_times, timeout=10 * LEASE, interval=0.1,
                     what="three renewals of the stream's lease")
        admin = psycopg2.connect(stack["MCP_PG_ADMIN"], dbname="mcp")   # pageinspect: superuser
        admin.autocommit = True
        try:
            with admin.cursor() as cur:
                cur.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
                cur.execute("SELECT (ctid::text::point)[0]::int, (ctid::text::point)[1]::int"
                            "  FROM mcp.streams WHERE id = %s", (stream_id,))
                block, item = cur.fetchone()
                # t_infomask2's HEAP_ONLY_TUPLE (0x8000): made by a heap-only update
                cur.execute("SELECT t_infomask2 & 32768 <> 0"
                            "  FROM heap_page_items(get_raw_page('mcp.streams', %s)) WHERE lp = %s",
                            (block, item))
                assert cur.fetchone()[0] is True, "the renewed row is not a heap-only tuple"
                cur.execute("SELECT count(*) FROM pg_index i"
                            "  JOIN pg_class c ON c.oid = i.indexrelid"
                            " WHERE i.indrelid = 'mcp.streams'::regclass"
                            "   AND pg_get_indexdef(i.indexrelid) LIKE '%%lease_until%%'")
                assert cur.fetchone()[0] == 0
        finally:
            admin.close()
    finally:
        r.close()
