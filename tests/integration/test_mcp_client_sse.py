"""Self-tests of mcp_client's SSE parser (no stack needed): the integration tests rely on it."""

import pytest

from mcp_client import SseParser, parse_sse_bytes

# Not in scripts/test's ASan+UBSan pass: nothing of mod_mcp's runs here (the client's parser only),
# so that pass would run exactly what the event MPM pass ran.
pytestmark = pytest.mark.not_asan


def test_fields_comments_and_multiline_data():
    evs = parse_sse_bytes(b": comment\nid: 7\nevent: x\ndata: a\ndata:b\ndata\nretry: 3000\n\n")
    assert len(evs) == 1
    e = evs[0]
    assert (e.id, e.event, e.data, e.retry) == ("7", "x", "a\nb\n", 3000)


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol):
    body = eol.join([b"id: 1", b"data: one", b"", b"data: two", b"", b""])
    evs = parse_sse_bytes(body)
    assert [(e.id, e.last_event_id, e.data) for e in evs] == [("1", "1", "one"), (None, "1", "two")]


def test_byte_at_a_time_with_split_crlf_and_utf8():
    body = "id: é1\r\ndata: ünï\r\n\r\n".encode()
    p = SseParser()
    evs = []
    for i in range(len(body)):
        evs += p.feed(body[i:i + 1])
    evs += p.close()
    assert [(e.id, e.data) for e in evs] == [("é1", "ünï")]


def test_priming_event_and_empty_blocks():
    # "data:" with an empty value is an event with empty data (an MCP priming event); a block
    # without data is no event unless include_empty is set.
    body = b"id: p\nretry: 500\ndata:\n\nid: q\n\n"
    evs = parse_sse_bytes(body)
    assert [(e.id, e.data, e.retry) for e in evs] == [("p", "", 500)]
    evs = parse_sse_bytes(body, include_empty=True)
    assert [(e.id, e.data) for e in evs] == [("p", ""), ("q", None)]


def test_incomplete_event_discarded_bom_and_bad_retry():
    evs = parse_sse_bytes(b"\xef\xbb\xbfdata: x\nretry: 1a\n\ndata: never dispatched")
    assert [(e.data, e.retry) for e in evs] == [("x", None)]


def test_json_property():
    (e,) = parse_sse_bytes(b'data: {"jsonrpc": "2.0",\ndata:  "id": 1}\n\n')
    assert e.json == {"jsonrpc": "2.0", "id": 1}
