"""Many MCP clients at once, each holding its standalone GET stream: raw asyncio sockets, one
connection per request (Connection: close) and one per stream, HTTP/1.1 over plain TCP or TLS.

    async with Crowd(url, ca=None) as crowd:
        await crowd.connect(1000)            # sessions + their GET streams, 32 at a time
        await crowd.call(sid, "notify", {"text": "hi"})
        await crowd.streams[0].wait_for(lambda events: ...)

A stream's reader keeps every event's data (JSON texts), the event ids, and whether the server
ended the response; nothing is parsed beyond the SSE framing the gateway writes.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from urllib.parse import urlparse

PROTOCOL = "2025-11-25"


class Stream:
    def __init__(self, crowd: "Crowd", sid: str):
        self.crowd = crowd
        self.sid = sid
        self.status = None        # HTTP status of the GET, or the exception that stopped it
        self.headers = {}
        self.ids = []             # event ids, in order
        self.events = []          # (time.monotonic(), data text) of events with data
        self.hints = 0            # blocks with only retry:
        self.comments = 0         # blocks with only comments (keep-alives)
        self.ended = False        # the server ended the response
        self.changed = asyncio.Event()
        self.reader = self.writer = self.task = None

    async def open(self, timeout: float, last_event_id: str | None = None):
        c = self.crowd
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(c.host, c.port, ssl=c.ssl), timeout)
        c.track(self)
        extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
        self.writer.write((f"GET {c.path} HTTP/1.1\r\nHost: {c.host}:{c.port}\r\n"
                           f"Accept: text/event-stream\r\nMcp-Session-Id: {self.sid}\r\n"
                           f"MCP-Protocol-Version: {c.protocol}\r\n{extra}\r\n").encode())
        await self.read_head(timeout)

    async def read_head(self, timeout: float):
        """The response's status and headers (the request sent); then its body is read on."""
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        self.status = int(line.split()[1])
        while True:
            h = await asyncio.wait_for(self.reader.readline(), timeout)
            if h in (b"\r\n", b""):
                break
            k, _, v = h.decode().partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self):
        chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        raw, text, last = b"", "", False
        try:
            while not last:
                data = await self.reader.read(65536)
                if not data:
                    break
                raw += data
                if chunked:
                    # De-chunk what is complete; the last chunk ends the response.
                    while not last:
                        nl = raw.find(b"\r\n")
                        if nl < 0:
                            break
                        size = int(raw[:nl].split(b";")[0], 16)
                        if len(raw) < nl + 2 + size + 2:
                            break
                        text += raw[nl + 2:nl + 2 + size].decode()
                        raw = raw[nl + 2 + size + 2:]
                        last = size == 0
                else:
                    text += raw.decode()
                    raw = b""
                while "\n\n" in text:
                    block, text = text.split("\n\n", 1)
                    self._block(block)
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.ended = True
            self.changed.set()

    def _block(self, block: str):
        data, only_retry, only_comments = None, True, True
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            only_comments = False
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "id":
                self.ids.append(value)
                only_retry = False
            elif field == "data":
                data = value if data is None else data + "\n" + value
                only_retry = False
            elif field != "retry":
                only_retry = False
        if data:
            self.events.append((time.monotonic(), data))
        if only_comments and block.strip():
            self.comments += 1
        elif only_retry and block.strip():
            self.hints += 1
        self.changed.set()

    async def wait_for(self, pred, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while not pred(self):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"stream of {self.sid}: condition not met in {timeout} s "
                                   f"({len(self.events)} events, ended={self.ended})")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass

    def close(self):
        if self.writer:
            try:
                self.writer.transport.abort()
            except Exception:
                pass
        if self.task:
            self.task.cancel()


class Crowd:
    def __init__(self, url: str, ca: str | None = None, parallel: int = 32,
                 protocol: str = PROTOCOL):
        u = urlparse(url)
        self.protocol = protocol   # the sessions' revision
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.ssl = ssl.create_default_context(cafile=ca) if u.scheme == "https" else None
        self.sem = asyncio.Semaphore(parallel)
        self.streams: list[Stream] = []
        # Every stream that opened a connection (resumes too): closed when the crowd ends, so
        # that no connection outlives its test (one left open when httpd stops is reported by
        # LeakSanitizer as a lost allocator of the event MPM's).
        self.opened: list[Stream] = []

    def track(self, stream: Stream):
        self.opened.append(stream)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        for s in self.streams + self.opened:
            s.close()
        await asyncio.sleep(0)

    async def post(self, body, sid: str | None = None, timeout: float = 30.0):
        """One POST on a connection of its own: (status, headers, body bytes)."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl), timeout)
        data = json.dumps(body).encode()
        head = (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json, text/event-stream"
                f"\r\nContent-Length: {len(data)}\r\nConnection: close\r\n"
                f"MCP-Protocol-Version: {self.protocol}\r\n")
        if sid:
            head += f"Mcp-Session-Id: {sid}\r\n"
        writer.write(head.encode() + b"\r\n" + data)
        try:
            resp = await asyncio.wait_for(reader.read(), timeout)
        finally:
            writer.close()
        top, _, rest = resp.partition(b"\r\n\r\n")
        lines = top.decode().split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(lines[0].split()[1]), headers, rest

    async def session(self) -> str:
        status, headers, _ = await self.post({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": self.protocol, "capabilities": {},
                       "clientInfo": {"name": "crowd", "version": "1"}}})
        assert status == 200, status
        sid = headers["mcp-session-id"]
        status, _, _ = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                                       sid)
        assert status == 202, status
        return sid

    async def call(self, sid: str, tool: str, arguments: dict, timeout: float = 30.0):
        return await self.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                "params": {"name": tool, "arguments": arguments}}, sid, timeout)

    async def connect(self, n: int, timeout: float = 30.0) -> list[Stream]:
        """n sessions, each with its standalone stream open (or its failure in .status)."""
        async def one():
            async with self.sem:
                s = Stream(self, await self.session())
                try:
                    await s.open(timeout)
                except Exception as e:  # reported, not raised: the caller counts
                    s.status = e
                return s
        new = await asyncio.gather(*[one() for _ in range(n)])
        self.streams.extend(new)
        return new
