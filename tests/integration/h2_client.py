"""A small HTTP/2 client for the integration tests, on Debian's python3-h2 (the protocol library
that httpx and others build on), with the face of the part of requests that mcp_client uses.

    http = H2Session(ca="/path/ca.pem")      # https:// URLs: TLS with ALPN h2; http://: h2c
    r = http.post(url, data=b"...", headers={...}, stream=True, timeout=30)
    r.status_code, r.headers, r.http_version, r.stream_id
    for chunk in r.iter_content(chunk_size=None): ...   # each DATA frame as it arrives
    r.close()       # before the end of the stream: RST_STREAM (CANCEL) for this stream only
    http.close()

Why not httpx: Debian 12's httpx/httpcore (0.23/0.16) forget a stream that is closed early
without resetting it, so the server goes on sending on it and the data, never acknowledged, eats
the connection's flow-control window. A client that abandons a stream must say so; this one does.

One connection per origin (scheme, host, port), made on first use and again after the server
ended the old one (GOAWAY, close). Every stream of a session's requests is multiplexed on it:
a reader thread takes frames off the socket and hands each stream's events to its queue, so
several threads may hold streams of one connection at once. Data is acknowledged (flow control)
as the caller consumes it: a caller that stops reading a stream stops that stream, as with any
HTTP/2 client; it does not stop the others unless the connection's window is used up. h2c uses
prior knowledge (no Upgrade), as curl --http2-prior-knowledge does.
"""

from __future__ import annotations

import base64
import json
import queue
import select
import socket
import ssl
import threading
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
from requests.structures import CaseInsensitiveDict

_END = object()          # the stream ended (END_STREAM)


class H2Error(ConnectionError):
    """The stream or the connection failed (reset by the server, connection gone, timeout)."""


class _Stream:
    def __init__(self, stream_id: int):
        self.id = stream_id
        self.events: "queue.Queue[Any]" = queue.Queue()
        self.ended = False


class H2Connection:
    """One HTTP/2 connection (h2c or TLS), shared by threads."""

    def __init__(self, scheme: str, host: str, port: int, ca: Optional[str], timeout: float):
        self.authority = f"{host}:{port}"
        self.scheme = scheme
        sock = socket.create_connection((host, port), timeout=timeout)
        if scheme == "https":
            ctx = ssl.create_default_context(cafile=ca)
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname=host)
            if sock.selected_alpn_protocol() != "h2":
                sock.close()
                raise H2Error(f"{self.authority}: TLS did not negotiate h2 (ALPN: "
                              f"{sock.selected_alpn_protocol()!r})")
        # OpenSSL does not allow one thread to read a TLS connection while another writes to
        # it: every recv and send happens under self.lock; the reader thread waits for input
        # with select() outside the lock. The timeout only bounds a record that arrives in parts.
        sock.settimeout(10)
        self.sock = sock
        self.lock = threading.Lock()   # the h2 state machine and every use of the socket
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.streams: dict[int, _Stream] = {}
        self.dead: Optional[str] = None
        self.goaway = False
        with self.lock:
            self.h2.initiate_connection()
            self._flush()
        self.reader = threading.Thread(target=self._read_loop, daemon=True,
                                       name=f"h2-reader-{self.authority}")
        self.reader.start()

    # -- writing (lock held) --

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    # -- the reader thread --

    def _read_loop(self) -> None:
        reason = "the server closed the connection"
        pending = getattr(self.sock, "pending", lambda: 0)   # bytes OpenSSL has decrypted already
        unread = bytearray()   # the start of a frame whose rest has not come yet
        try:
            while True:
                with self.lock:
                    buffered = pending() > 0
                if not buffered and not select.select([self.sock], [], [], 1.0)[0]:
                    continue
                with self.lock:
                    try:
                        data = self.sock.recv(65536)
                    except (socket.timeout, ssl.SSLWantReadError):
                        continue
                    if not data:
                        break
                    # One frame at a time: a GOAWAY's events are seen (and h2's state machine
                    # reopened, _dispatch) before the DATA that came in the same read, which h2
                    # would refuse in its closed state.
                    unread += data
                    while len(unread) >= 9:
                        end = 9 + int.from_bytes(unread[:3], "big")
                        if len(unread) < end:
                            break
                        for ev in self.h2.receive_data(bytes(unread[:end])):
                            self._dispatch(ev)
                        del unread[:end]
                    self._flush()
        except (OSError, h2.exceptions.ProtocolError) as e:
            reason = f"connection error: {e!r}"
        self._die(reason)

    def _dispatch(self, ev: Any) -> None:
        sid = getattr(ev, "stream_id", None)
        if isinstance(ev, h2.events.ConnectionTerminated):
            # GOAWAY: streams up to last_stream_id go on (RFC 9113 6.8: a graceful restart of
            # httpd finishes them); no new ones on this connection. h2 4.1 closes its state
            # machine at GOAWAY and would refuse the DATA that still comes: reopen it.
            self.goaway = True
            if ev.error_code == h2.errors.ErrorCodes.NO_ERROR:
                self.h2.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
            for s in list(self.streams.values()):
                if ev.last_stream_id is not None and s.id > ev.last_stream_id:
                    s.events.put(H2Error(f"GOAWAY before stream {s.id} was processed"))
            return
        if sid is None or sid == 0:
            return
        st = self.streams.get(sid)
        if isinstance(ev, h2.events.DataReceived) and st is None:
            # Data for a stream we reset: give its window back to the connection.
            self.h2.acknowledge_received_data(ev.flow_controlled_length, sid)
            return
        if st is None:
            return
        if isinstance(ev, h2.events.ResponseReceived):
            st.events.put(("headers", ev.headers))
        elif isinstance(ev, h2.events.DataReceived):
            st.events.put(("data", ev.data, ev.flow_controlled_length))
        elif isinstance(ev, h2.events.StreamEnded):
            st.events.put(_END)
        elif isinstance(ev, h2.events.StreamReset):
            st.events.put(H2Error(f"stream {sid} reset by the server (error {ev.error_code!r})"))

    def _die(self, reason: str) -> None:
        with self.lock:
            self.dead = reason
            for s in self.streams.values():
                s.events.put(H2Error(reason))
        try:
            self.sock.close()
        except OSError:
            pass

    # -- the callers' side --

    def usable(self) -> bool:
        return self.dead is None and not self.goaway

    def open_stream(self, method: str, path: str, headers: dict, body: Optional[bytes]) -> _Stream:
        hdrs = [(":method", method), (":scheme", self.scheme), (":authority", self.authority),
                (":path", path)]
        hdrs += [(k.lower(), str(v)) for k, v in headers.items()]
        if body is not None:
            hdrs.append(("content-length", str(len(body))))
        with self.lock:
            if self.dead:
                raise H2Error(self.dead)
            sid = self.h2.get_next_available_stream_id()
            st = _Stream(sid)
            self.streams[sid] = st
            self.h2.send_headers(sid, hdrs, end_stream=not body)
            if body:
                step = self.h2.max_outbound_frame_size
                if len(body) > self.h2.local_flow_control_window(sid):
                    raise H2Error(f"request body of {len(body)} bytes exceeds the flow-control window")
                for i in range(0, len(body), step):
                    self.h2.send_data(sid, body[i:i + step], end_stream=i + step >= len(body))
            self._flush()
        return st

    def consumed(self, st: _Stream, n: int) -> None:
        with self.lock:
            if self.dead is None and st.id in self.streams and n:
                self.h2.acknowledge_received_data(n, st.id)
                self._flush()

    def finish(self, st: _Stream, reset: bool) -> None:
        """Forget a stream; reset it first (CANCEL) when it has not ended."""
        with self.lock:
            self.streams.pop(st.id, None)
            if reset and self.dead is None:
                try:
                    self.h2.reset_stream(st.id, h2.errors.ErrorCodes.CANCEL)
                    self._flush()
                except (h2.exceptions.ProtocolError, OSError):
                    pass

    def close(self) -> None:
        with self.lock:
            if self.dead is None:
                try:
                    self.h2.close_connection()
                    self._flush()
                except (h2.exceptions.ProtocolError, OSError):
                    pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.reader.join(5)


class H2Response:
    """What mcp_client needs of a requests.Response, over one HTTP/2 stream."""

    http_version = "HTTP/2"

    def __init__(self, conn: H2Connection, st: _Stream, timeout: float):
        self._conn, self._st, self._timeout = conn, st, timeout
        self._content: Optional[bytes] = None
        self._closed = False
        item = self._next()
        if item is _END or item[0] != "headers":
            raise H2Error(f"stream {st.id}: no response headers")
        hdrs = dict(item[1])
        self.status_code = int(hdrs.pop(":status"))
        self.headers = CaseInsensitiveDict(hdrs)
        self.stream_id = st.id

    def _next(self) -> Any:
        try:
            item = self._st.events.get(timeout=self._timeout)
        except queue.Empty:
            raise H2Error(f"stream {self._st.id}: nothing for {self._timeout} s") from None
        if isinstance(item, Exception):
            self._st.ended = True
            raise item
        if item is _END:
            self._st.ended = True
        return item

    def iter_content(self, chunk_size: Optional[int] = None) -> Iterator[bytes]:
        del chunk_size   # each DATA frame as it arrives
        if self._content is not None:
            yield self._content
            return
        try:
            while not self._st.ended:
                item = self._next()
                if item is _END:
                    break
                if item[0] == "data":
                    self._conn.consumed(self._st, item[2])
                    if item[1]:
                        yield item[1]
        finally:
            if self._st.ended:
                self.close()

    @property
    def content(self) -> bytes:
        if self._content is None:
            self._content = b"".join(self.iter_content())
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._conn.finish(self._st, reset=not self._st.ended)


class H2Session:
    """requests.Session's post/get/delete/close over HTTP/2 (h2c for http://, h2 for https://)."""

    def __init__(self, ca: Optional[str] = None, connect_timeout: float = 10.0):
        self.ca = ca
        self.connect_timeout = connect_timeout
        self._conns: dict[tuple, H2Connection] = {}
        self._lock = threading.Lock()

    def connection(self, url: str) -> H2Connection:
        u = urlsplit(url)
        key = (u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80))
        with self._lock:
            c = self._conns.get(key)
            if c is None or not c.usable():
                c = H2Connection(key[0], key[1], key[2], self.ca, self.connect_timeout)
                self._conns[key] = c
            return c

    def request(self, method: str, url: str, data: Any = None, headers: Optional[dict] = None,
                auth: Any = None, stream: bool = False, timeout: Optional[float] = None) -> H2Response:
        u = urlsplit(url)
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        h = dict(headers or {})
        if auth is not None:
            h["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        body = data.encode() if isinstance(data, str) else data
        conn = self.connection(url)
        st = conn.open_stream(method, path, h, body)
        try:
            r = H2Response(conn, st, timeout or 30.0)
        except BaseException:
            conn.finish(st, reset=True)
            raise
        if not stream:
            r.content  # noqa: B018 (reads the body to its end)
        return r

    def post(self, url: str, **kw) -> H2Response:
        return self.request("POST", url, **kw)

    def get(self, url: str, **kw) -> H2Response:
        return self.request("GET", url, **kw)

    def delete(self, url: str, **kw) -> H2Response:
        return self.request("DELETE", url, **kw)

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()
