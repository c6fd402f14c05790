"""Any valid JSON is stored and replayed byte-exact: \\u0000, lone surrogate escapes, duplicate
keys and key order survive the gateway, PostgreSQL and a Last-Event-ID replay, and the audit
views work on every row (their jsonb copies read \\u0000 and lone surrogates as U+FFFD)."""

import json

import pytest

from mcp_client import parse_sse_bytes


@pytest.fixture
def session(mcp):
    s = mcp()
    s.initialize()
    return s


def rows(pg, sql, *args):
    with pg.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def test_initialize_with_nul_in_client_info_is_stored_exactly(mcp, pg):
    s = mcp()
    # Before: 503 "the session store is unavailable" (jsonb refuses \u0000).
    result = s.initialize(client_info={"name": "me\u0000x", "version": "\ud800"},
                          capabilities={"experimental": {"k\u0000": {}}})
    assert result["serverInfo"]
    (client_info, _caps), = rows(pg, "SELECT client_info, client_capabilities FROM mcp.sessions"
                                    " WHERE id = %s", s.session_id)
    # jsonb cannot hold it: the copy says U+FFFD; the stored initialize event is exact.
    assert client_info == {"name": "me\ufffdx", "version": "\ufffd"}
    (text, message), = rows(pg, "SELECT message_text, message FROM mcp.events WHERE session_id = %s"
                                " AND direction = 'in' AND stream_id IS NULL ORDER BY id LIMIT 1",
                            s.session_id)
    assert message["params"]["clientInfo"]["name"] == "me\ufffdx"
    sent = json.loads(text)
    assert sent["params"]["clientInfo"]["name"] == "me\u0000x"
    assert '"me\\u0000x"' in text and '"\\ud800"' in text


def exact_call(session, body):
    r = session.post_raw(body.encode(), stream=True)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = parse_sse_bytes(r.content, include_empty=True)
    return events


def test_an_error_the_gateway_writes_carries_a_lone_surrogate_id_as_sent(session):
    # json-c reads "\ud800" alone as U+FFFD; an answer the gateway writes itself (here: a
    # session it does not know, 404) carries the id's own text, so the client can match it.
    body = '{"jsonrpc":"2.0","id":"e\\ud800-1","method":"tools/call","params":{"name":"echo"}}'
    r = session.post_raw(body.encode(), headers={"Mcp-Session-Id": "no-such-session"})
    assert r.status_code == 404, r.text
    assert '"id":"e\\ud800-1"' in r.text
    assert r.json()["id"] == "e\ud800-1"


def test_request_and_result_with_nul_round_trip_byte_exact(session, pg):
    # Key order reversed, a duplicate key, \u0000 and a lone surrogate in the arguments.
    body = ('{"params":{"arguments":{"text":"a\\u0000b\\ud800c","text":"a\\u0000b"},'
            '"name":"echo"},"method":"tools/call","id":"r\\u0000id","jsonrpc":"2.0"}')
    events = exact_call(session, body)
    priming, answers = events[0], [e for e in events[1:] if e.data]
    assert priming.data == "" and priming.id
    answer = answers[-1]
    assert "\\u0000" in answer.data
    assert json.loads(answer.data)["id"] == "r\u0000id"
    # (The test backend's json-c strings end at a NUL: it echoes "a". The id carries one.)
    assert json.loads(answer.data)["result"]["content"][0]["text"].startswith("a")
    stream_id = int(priming.id.split("-")[0])

    stored = rows(pg, "SELECT seq, direction, kind, message_text, message FROM mcp.events"
                      " WHERE stream_id = %s ORDER BY seq", stream_id)
    assert stored[0][1:4] == ("in", "message", body)        # byte for byte, duplicates and all
    assert stored[0][4]["params"]["arguments"]["text"] == "a\ufffdb"   # the jsonb copy
    assert stored[1][2] == "priming" and stored[1][3] is None
    assert stored[-1][3] == answer.data                      # what was sent is what is stored
    (rid_text, rid), = rows(pg, "SELECT request_id_text, request_id FROM mcp.streams WHERE id = %s",
                            stream_id)
    assert json.loads(rid_text) == "r\u0000id" and rid == "r\ufffdid"

    # The replay from the priming event is the same bytes as the live stream.
    replay = list(session.get_stream(last_event_id=priming.id))
    assert [(e.id, e.data) for e in replay] == [(e.id, e.data) for e in answers]

    # The audit views work on these rows.
    (tool, outcome, request_text, response_text), = rows(
        pg, 'SELECT tool, outcome, request_text, response_text FROM mcp.tool_calls'
            ' WHERE stream_id = %s', stream_id)
    assert (tool, outcome) == ("echo", "ok")
    assert request_text == body and response_text == answer.data
    transcript = rows(pg, "SELECT method, jsonrpc_id, message_text FROM mcp.session_transcript"
                          " WHERE stream_id = %s ORDER BY event_id", stream_id)
    assert transcript[0][0] == "tools/call"
    assert transcript[0][2] == body


def test_key_order_and_duplicates_of_an_ordinary_message_are_kept(session, pg):
    body = ('{"id":41,"jsonrpc":"2.0","params":{"name":"echo","arguments":{"z":1,"text":"x",'
            '"z":2}},"method":"tools/call"}')
    events = exact_call(session, body)
    stream_id = int(events[0].id.split("-")[0])
    (text, message), = rows(pg, "SELECT message_text, message FROM mcp.events"
                                " WHERE stream_id = %s AND seq = 0", stream_id)
    assert text == body
    assert message["params"]["arguments"] == {"z": 2, "text": "x"}   # jsonb: the last z wins


def test_notification_with_nul_is_accepted_and_stored(session, pg):
    body = '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\\u0000"}}'
    r = session.post_raw(body.encode())
    assert r.status_code == 202, r.text
    texts = [t for (t,) in rows(pg, "SELECT message_text FROM mcp.events WHERE session_id = %s"
                                    " AND stream_id IS NULL AND direction = 'in'",
                                session.session_id)]
    assert body in texts


@pytest.fixture
def refusing_db(pg):
    """PostgreSQL refuses, for good (SQLSTATE 23514), inbound messages holding 'refuse-in' and
    outbound ones holding 'refuse-out'."""
    with pg.cursor() as cur:
        cur.execute("""ALTER TABLE mcp.events ADD CONSTRAINT test_refuse CHECK (
                           message_text NOT LIKE '%%refuse-' || direction || '%%') NOT VALID""")
    yield
    with pg.cursor() as cur:
        cur.execute("ALTER TABLE mcp.events DROP CONSTRAINT test_refuse")


def test_a_refused_request_is_a_precise_error_at_once_not_an_outage(session, refusing_db):
    r = session.post_raw(b'{"jsonrpc":"2.0","id":9,"method":"tools/call",'
                         b'"params":{"name":"echo","arguments":{"text":"refuse-in"}}}')
    assert r.status_code == 500, r.text
    assert r.json()["id"] == 9
    err = r.json()["error"]
    assert err["code"] == -32603 and "SQLSTATE 23514" in err["message"]
    assert "unavailable" not in err["message"]
    assert "Retry-After" not in r.headers
    assert r.elapsed.total_seconds() < 5   # not retried for MCPDatabaseTimeout (10 s)
    # The session goes on.
    assert session.call("tools/call", {"name": "echo", "arguments": {"text": "ok"}})


def test_a_refused_response_becomes_a_stored_error_for_its_request(session, refusing_db, pg):
    events = session.request_stream("tools/call", {"name": "echo",
                                                   "arguments": {"text": "refuse-out"}})
    answers = [e for e in events if e.data]
    answer = answers[-1].json
    assert answer["id"] == session.last_request_id
    assert answer["error"]["code"] == -32002
    assert "could not be stored (SQLSTATE 23514)" in answer["error"]["message"]
    stream_id = int(answers[-1].id.split("-")[0])
    (status,), = rows(pg, "SELECT status FROM mcp.streams WHERE id = %s", stream_id)
    assert status in ("complete", "failed")
    stored = [t for (t,) in rows(pg, "SELECT message_text FROM mcp.events WHERE stream_id = %s"
                                     " AND direction = 'out' AND kind = 'message'", stream_id)]
    assert stored == [answers[-1].data]   # exactly one answer, the one the client got


def test_rows_of_a_stream_name_its_session_and_go_with_it(session, stack, pg):
    """Schema 14: mcp.events.session_id references mcp.sessions on mcp.events_default only (the
    rows of no stream); a stream's rows name their session through the stream, whose key is
    checked once. The session_id stored on them is the stream's, and deleting a session still
    deletes every row of it."""
    from conftest import events_of_another_session
    session.call("tools/call", {"name": "echo", "arguments": {"text": "hello"}})
    assert events_of_another_session(stack) == []
    keys = rows(pg, "SELECT c.relname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid"
                    " WHERE k.contype = 'f' AND k.confrelid = 'mcp.sessions'::regclass"
                    "   AND c.relname LIKE 'events%%'")
    assert keys == [("events_default",)]
    (streamed, unstreamed), = rows(pg, "SELECT count(*) FILTER (WHERE stream_id IS NOT NULL),"
                                       " count(*) FILTER (WHERE stream_id IS NULL)"
                                       " FROM mcp.events WHERE session_id = %s", session.session_id)
    assert streamed >= 2 and unstreamed >= 3     # the call; initialize (2), initialized
    # A session the gateway no longer uses (retention deletes such rows): every row goes.
    pg.cursor().execute("DELETE FROM mcp.sessions WHERE id = %s", (session.session_id,))
    assert rows(pg, "SELECT count(*) FROM mcp.events WHERE session_id = %s",
                session.session_id) == [(0,)]
    assert rows(pg, "SELECT count(*) FROM mcp.streams WHERE session_id = %s",
                session.session_id) == [(0,)]
