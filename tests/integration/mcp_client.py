"""A small MCP Streamable HTTP client for the integration tests (requests, or h2_client for HTTP/2).

    s = McpSession(url)                       # auth=("alice", "alice-pw") for /mcp-auth
    s = McpSession(url, transport="h2", ca=stack["MCP_CA"])   # HTTP/2 (see TRANSPORTS)
    s.initialize()                            # stores Mcp-Session-Id, sends notifications/initialized
    resp = s.request("tools/list")            # the JSON-RPC response object (dict)
    for ev in s.request_stream("tools/call", {...}):   # SseEvent objects as they arrive
        print(ev.id, ev.json)
    s.delete()

Every request made through the session records the response (a requests.Response, or an
h2_client.H2Response with the same face) in `last_response` (status, headers, http_version) for
the test to inspect. Nothing here asserts protocol rules: that is the
tests' job. `post_raw` sends arbitrary bytes and headers for negative tests.
"""

from __future__ import annotations

import codecs
import itertools
import json
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Union

import requests
import requests.adapters
from urllib3.util.retry import Retry

ACCEPT_BOTH = "application/json, text/event-stream"
# How a session talks HTTP: "http1" (requests: HTTP/1.1, over TLS for https:// URLs), "h2"
# (h2_client: HTTP/2, h2c with prior knowledge for http:// URLs, ALPN h2 for https://).
TRANSPORTS = ("http1", "h2")
DEFAULT_PROTOCOL_VERSION = "2025-11-25"

# Request ids are unique across every session in the test process, which makes logs and the
# database easier to read.
_ids = itertools.count(1)


class McpError(Exception):
    """The server's answer was not what an MCP client can use (see .response when set)."""

    def __init__(self, message: str, response: Optional[requests.Response] = None):
        super().__init__(message)
        self.response = response


# ---- Server-Sent Events ------------------------------------------------------------------


@dataclass
class SseEvent:
    """One dispatched SSE event.

    id:            the id field of this event's own block (None when the block had none)
    last_event_id: the stream's last event id after this block (persists across events, as
                   a browser's EventSource would resend it in Last-Event-ID)
    event:         the event type ("message" when absent or empty)
    data:          the data lines joined with "\\n" (None only for blocks without any data
                   field, which are yielded only when include_empty=True)
    retry:         the retry field of this block in ms (None when absent or invalid)
    """

    id: Optional[str]
    last_event_id: Optional[str]
    event: str
    data: Optional[str]
    retry: Optional[int]

    @property
    def json(self) -> Any:
        """data parsed as JSON (None for an empty or missing data field)."""
        if not self.data:
            return None
        return json.loads(self.data)


class SseParser:
    """Incremental parser following the WHATWG "event stream interpretation" rules.

    Feed it bytes in chunks of any size with feed(); it returns the events completed so far.
    Lines end with CRLF, LF or CR (a CR at the end of a chunk waits for the next chunk to see
    whether an LF follows). Lines starting with ':' are comments. A leading UTF-8 BOM is
    dropped. An event is dispatched at a blank line; an event still incomplete at the end of
    the stream is discarded (call close()). Blocks without a data field are not events (per
    the spec) unless include_empty=True, which yields them with data=None so tests can see
    bare id/retry blocks.
    """

    def __init__(self, include_empty: bool = False):
        self.include_empty = include_empty
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._first = True
        self.last_event_id: Optional[str] = None
        self.retry: Optional[int] = None  # the reconnection time most recently announced
        self._reset_block()

    def _reset_block(self) -> None:
        self._data: list[str] = []
        self._has_data = False
        self._event = ""
        self._block_id: Optional[str] = None
        self._block_retry: Optional[int] = None
        self._block_nonempty = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        text = self._decoder.decode(chunk)
        if self._first and text:
            if text.startswith("\ufeff"):
                text = text[1:]
            self._first = False
        self._buf += text
        return self._drain(final=False)

    def close(self) -> list[SseEvent]:
        """End of stream: process a last unterminated line; drop an undispatched event."""
        self._buf += self._decoder.decode(b"", final=True)
        events = self._drain(final=True)
        self._reset_block()
        return events

    def _drain(self, final: bool) -> list[SseEvent]:
        events: list[SseEvent] = []
        buf = self._buf
        pos = 0
        n = len(buf)
        while pos < n:
            cr = buf.find("\r", pos)
            lf = buf.find("\n", pos)
            if cr < 0 and lf < 0:
                break
            if cr >= 0 and (lf < 0 or cr < lf):
                if cr + 1 == n and not final:
                    break  # maybe CRLF split across chunks: wait for more
                end, nxt = cr, cr + (2 if cr + 1 < n and buf[cr + 1] == "\n" else 1)
            else:
                end, nxt = lf, lf + 1
            ev = self._line(buf[pos:end])
            if ev is not None:
                events.append(ev)
            pos = nxt
        self._buf = buf[pos:]
        if final and self._buf:
            # an unterminated last line is processed, but cannot complete an event
            self._line(self._buf)
            self._buf = ""
        return events

    def _line(self, line: str) -> Optional[SseEvent]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
            self._has_data = True
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self.last_event_id = value
                self._block_id = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self.retry = int(value)
                self._block_retry = int(value)
        else:
            return None  # unknown field: ignored
        self._block_nonempty = True
        return None

    def _dispatch(self) -> Optional[SseEvent]:
        ev = None
        if self._has_data or (self.include_empty and self._block_nonempty):
            ev = SseEvent(
                id=self._block_id,
                last_event_id=self.last_event_id,
                event=self._event or "message",
                data="\n".join(self._data) if self._has_data else None,
                retry=self._block_retry,
            )
        self._reset_block()
        return ev


def iter_sse(response: requests.Response, include_empty: bool = False) -> Iterator[SseEvent]:
    """Yield the events of a streamed (stream=True) response as they arrive; closes it at the end.

    iter_content(chunk_size=None) hands over each HTTP/1.1 chunk as soon as it has arrived,
    which is how httpd sends a flushed SSE stream. A response without chunks (its body ends with
    the connection: Connection: close, as for a stream MCPStreamCloseAfter ends) would be read
    to its end first that way; it is read as its bytes arrive instead.
    """
    parser = SseParser(include_empty=include_empty)
    try:
        for chunk in _arriving(response):
            yield from parser.feed(chunk)
        yield from parser.close()
    finally:
        response.close()


def _arriving(response: requests.Response) -> Iterator[bytes]:
    """The body's bytes as they arrive."""
    fp = getattr(getattr(response, "raw", None), "_fp", None)   # None for an HTTP/2 response
    if "chunked" in response.headers.get("Transfer-Encoding", "").lower() \
            or not hasattr(fp, "read1"):
        yield from response.iter_content(chunk_size=None)
        return
    while True:
        chunk = fp.read1(65536)
        if not chunk:
            return
        yield chunk


def _merge_headers(base: dict, extra: Optional[dict]) -> dict:
    """base overridden by extra (case-insensitively); a None value in extra removes the header."""
    h = dict(base)
    for k, v in (extra or {}).items():
        for existing in [e for e in h if e.lower() == k.lower()]:
            del h[existing]
        if v is not None:
            h[k] = v
    return h


def _media_type(response: requests.Response) -> str:
    return response.headers.get("Content-Type", "").split(";")[0].strip().lower()


# ---- the session -------------------------------------------------------------------------


class McpSession:
    def __init__(
        self,
        url: str,
        auth: Any = None,
        protocol_version: str = DEFAULT_PROTOCOL_VERSION,
        timeout: float = 30.0,
        transport: str = "http1",
        ca: Optional[str] = None,
    ):
        self.url = url
        self.auth = auth
        self.protocol_version = protocol_version  # asked for; replaced by the negotiated one
        self.timeout = timeout
        self.transport = transport
        self.ca = ca or None   # the CA file that https:// URLs are verified with
        if transport == "h2":
            from h2_client import H2Session
            self.http: Any = H2Session(ca=self.ca)
        elif transport == "http1":
            self.http = requests.Session()
            # A GET or DELETE sent on a kept-alive connection that the server closed meanwhile
            # (it ends a connection whose stream it ended early) is sent again on a new one, as
            # browsers, curl and Node's fetch do for idempotent requests (RFC 9112, 9.3.1);
            # requests alone would fail it. Never a POST.
            retry = Retry(total=1, connect=1, read=1, status=0, redirect=0,
                          allowed_methods=frozenset({"GET", "DELETE"}), raise_on_status=False)
            for prefix in ("http://", "https://"):
                self.http.mount(prefix, requests.adapters.HTTPAdapter(max_retries=retry))
            if self.ca:
                # Only this CA: REQUESTS_CA_BUNDLE and the like in the environment would
                # override a session's verify (and proxies are no use on loopback).
                self.http.verify = self.ca
                self.http.trust_env = False
        else:
            raise ValueError(f"transport must be one of {TRANSPORTS}, not {transport!r}")
        self.session_id: Optional[str] = None
        self.initialized = False
        self.initialize_result: Optional[dict] = None
        self.last_response: Optional[requests.Response] = None
        # Messages other than the awaited response that arrived on request() streams
        # (progress and logging notifications, server-to-client requests), in order.
        self.side_messages: list[dict] = []
        self.last_request_id: Any = None

    # -- headers and ids --

    @staticmethod
    def next_id() -> int:
        return next(_ids)

    def headers(self, extra: Optional[dict] = None) -> dict:
        """The headers this session sends on a POST; entries of extra override them, and an
        entry whose value is None removes that header."""
        h = {"Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
        if self.session_id is not None:
            h["Mcp-Session-Id"] = self.session_id
        if self.initialized:
            h["MCP-Protocol-Version"] = self.protocol_version
        return _merge_headers(h, extra)

    def _post(self, message: Any, headers: Optional[dict] = None, stream: bool = False,
              timeout: Optional[float] = None) -> requests.Response:
        body = json.dumps(message).encode()
        r = self.http.post(self.url, data=body, headers=self.headers(headers), auth=self.auth,
                           stream=stream, timeout=timeout or self.timeout)
        self.last_response = r
        return r

    def _post_request(self, rid: Any, method: str, params: Optional[dict],
                      headers: Optional[dict], timeout: Optional[float]) -> requests.Response:
        """POSTs request rid (remembered as last_request_id), streamed; raises McpError unless
        the answer is 200."""
        self.last_request_id = rid
        msg: dict = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        r = self._post(msg, headers=headers, stream=True, timeout=timeout)
        if r.status_code != 200:
            text = r.text
            r.close()
            raise McpError(f"{method}: HTTP {r.status_code}: {text[:500]}", r)
        return r

    # -- lifecycle --

    def initialize(self, capabilities: Optional[dict] = None, client_info: Optional[dict] = None,
                   headers: Optional[dict] = None, send_initialized: bool = True) -> dict:
        """initialize + notifications/initialized. Returns the InitializeResult; raises McpError
        when the answer is not a successful response."""
        params = {
            "protocolVersion": self.protocol_version,
            "capabilities": capabilities if capabilities is not None else {},
            "clientInfo": client_info or {"name": "mod_mcp-tests", "version": "0"},
        }
        resp = self.request("initialize", params, headers=headers)
        if "result" not in resp:
            raise McpError(f"initialize failed: {resp}", self.last_response)
        self.session_id = self.last_response.headers.get("Mcp-Session-Id")
        self.initialize_result = resp["result"]
        self.protocol_version = resp["result"].get("protocolVersion", self.protocol_version)
        self.initialized = True
        if send_initialized:
            r = self.notify("notifications/initialized")
            if r.status_code != 202:
                raise McpError(f"notifications/initialized: HTTP {r.status_code}: {r.text[:500]}", r)
        return resp["result"]

    def delete(self, headers: Optional[dict] = None) -> requests.Response:
        """DELETE the session (the response is returned, not checked)."""
        h = self.headers(headers)
        h.pop("Content-Type", None)
        r = self.http.delete(self.url, headers=h, auth=self.auth, timeout=self.timeout)
        self.last_response = r
        return r

    def close(self) -> None:
        self.http.close()

    # -- messages --

    def request(self, method: str, params: Optional[dict] = None, headers: Optional[dict] = None,
                timeout: Optional[float] = None) -> dict:
        """Send a request; return the JSON-RPC response object for it (with "result" or "error").

        Works with both answers a server may choose: application/json, or an SSE stream whose
        other messages (notifications, server requests) are appended to side_messages.
        Raises McpError for an HTTP error status, another content type, or a stream that ends
        without the response.
        """
        rid = self.next_id()
        r = self._post_request(rid, method, params, headers, timeout)
        mt = _media_type(r)
        if mt == "application/json":
            body = r.json()
            r.close()
            return body
        if mt != "text/event-stream":
            r.close()
            raise McpError(f"{method}: unexpected Content-Type {r.headers.get('Content-Type')!r}", r)
        for ev in iter_sse(r):
            m = ev.json
            if m is None:
                continue  # priming event
            if isinstance(m, dict) and m.get("id") == rid and ("result" in m or "error" in m):
                r.close()
                return m
            self.side_messages.append(m)
        raise McpError(f"{method}: the SSE stream ended without the response", r)

    def call(self, method: str, params: Optional[dict] = None, **kw) -> Any:
        """request() that returns the result, or raises McpError for a JSON-RPC error."""
        resp = self.request(method, params, **kw)
        if "error" in resp:
            raise McpError(f"{method}: JSON-RPC error {resp['error']}", self.last_response)
        return resp["result"]

    def request_stream(self, method: str, params: Optional[dict] = None,
                       headers: Optional[dict] = None, timeout: Optional[float] = None,
                       include_empty: bool = False, request_id: Any = None) -> Iterator[SseEvent]:
        """Send a request and yield its answer's SSE events as they arrive.

        An application/json answer is yielded as one event (event "message", no id) so callers
        can treat both alike; check last_response's Content-Type when it matters. The request
        id is available as self.last_request_id. Raises McpError for an HTTP error status.
        """
        rid = self.next_id() if request_id is None else request_id
        r = self._post_request(rid, method, params, headers, timeout)
        if _media_type(r) == "text/event-stream":
            yield from iter_sse(r, include_empty=include_empty)
        else:
            text = r.text
            r.close()
            yield SseEvent(id=None, last_event_id=None, event="message", data=text, retry=None)

    def get_stream(self, last_event_id: Optional[str] = None, headers: Optional[dict] = None,
                   timeout: Optional[float] = None, include_empty: bool = False) -> Iterator[SseEvent]:
        """GET the endpoint (the standalone stream, or a resumption with Last-Event-ID) and yield
        its events as they arrive. Raises McpError when the answer is not 200 text/event-stream."""
        h = self.headers({"Accept": "text/event-stream", "Content-Type": None})
        if last_event_id is not None:
            h["Last-Event-ID"] = last_event_id
        h = _merge_headers(h, headers)
        r = self.http.get(self.url, headers=h, auth=self.auth, stream=True,
                          timeout=timeout or self.timeout)
        self.last_response = r
        if r.status_code != 200 or _media_type(r) != "text/event-stream":
            text = r.text
            r.close()
            raise McpError(f"GET: HTTP {r.status_code} {r.headers.get('Content-Type')!r}: {text[:500]}", r)
        yield from iter_sse(r, include_empty=include_empty)

    def get_raw(self, headers: Optional[dict] = None, stream: bool = False,
                timeout: Optional[float] = None, url: Optional[str] = None):
        """GET the endpoint (or url) with exactly these headers, through this session's transport
        (no session headers are added); the response is returned, not checked."""
        r = self.http.get(url or self.url, headers=headers or {}, auth=self.auth, stream=stream,
                          timeout=timeout or self.timeout)
        self.last_response = r
        return r

    def notify(self, method: str, params: Optional[dict] = None,
               headers: Optional[dict] = None) -> requests.Response:
        """Send a notification; returns the response (202 expected, not checked)."""
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        r = self._post(msg, headers=headers)
        return r

    def respond(self, request_id: Any, result: Any = None, error: Optional[dict] = None,
                headers: Optional[dict] = None) -> requests.Response:
        """Answer a server-to-client request (sampling, elicitation, ping)."""
        msg: dict = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result if result is not None else {}
        return self._post(msg, headers=headers)

    def post_raw(self, body: Union[bytes, str], headers: Optional[dict] = None, with_session: bool = True,
                 stream: bool = False, timeout: Optional[float] = None) -> requests.Response:
        """POST body exactly as given. Headers: this session's usual ones (Accept, Content-Type,
        and with_session: Mcp-Session-Id / MCP-Protocol-Version), overridden by headers; a
        header given as None is not sent. with_session=False leaves out the session headers."""
        if with_session:
            h = self.headers(headers)
        else:
            h = _merge_headers({"Accept": ACCEPT_BOTH, "Content-Type": "application/json"}, headers)
        r = self.http.post(self.url, data=body, headers=h, auth=self.auth, stream=stream,
                           timeout=timeout or self.timeout)
        self.last_response = r
        return r

    def __enter__(self) -> "McpSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_sse_bytes(data: bytes, include_empty: bool = False) -> list[SseEvent]:
    """Parse a whole SSE body at once (for tests of the parser and of recorded bodies)."""
    p = SseParser(include_empty=include_empty)
    return p.feed(data) + p.close()

