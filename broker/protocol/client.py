"""A minimal asyncio Kafka-protocol client connection, used broker-to-broker (replica
fetchers) and by krafty's own tools. One request at a time per connection."""

from __future__ import annotations

import asyncio
import struct

from broker.protocol import codec
from broker.protocol.apis import ApiKey, is_flexible
from common.clock import SYSTEM, Clock

_I32 = struct.Struct(">i")
# the stream's buffer limit: with asyncio's 64 KiB default a 1 MiB fetch response pauses and
# resumes the socket every 128 KiB (~0.3 ms more CPU per MiB read, measured on loopback); one
# response is read at a time, so the buffer never holds more than one response anyway
_READ_LIMIT = 16 * 1024 * 1024


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str = "krafty", security=None, clock: Clock = SYSTEM):
        self.host, self.port, self.client_id = host, port, client_id
        self.clock = clock
        self.security = security  # broker.security.sasl.ClientSecurity: TLS and/or SASL; None = PLAINTEXT
        self._session_end: float | None = None  # KIP-368: reconnect (and so re-authenticate) before this
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None
        self._cid = 0
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        # a peer that closed the connection while it was idle (the other broker's
        # connections.max.idle.ms, a restart) left an end of stream in the reader: the next
        # request goes on a new connection, as Kafka's NetworkClient, which sees the close,
        # instead of failing on the dead one
        return self._w is not None and not self._w.is_closing() and not self._r.at_eof()

    async def connect(self, timeout: float = 5.0) -> None:
        sec = self.security
        ctx = sec.ssl_context if sec is not None else None
        try:
            self._r, self._w = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=ctx, server_hostname=self.host if ctx else None,
                                        limit=_READ_LIMIT),
                timeout)
        except (OSError, TimeoutError) as e:  # refused, unreachable, a name that does not resolve (gaierror)
            raise ConnectionError(f"connection to {self.host}:{self.port} failed: {e!r}") from None
        self._session_end = None
        if sec is not None and sec.mechanism:
            from broker.security.sasl import client_authenticate

            try:
                lifetime_ms = await client_authenticate(self._roundtrip, sec, self.clock)
            except BaseException:
                self.close()
                raise
            if lifetime_ms > 0:
                self._session_end = self.clock.monotonic() + lifetime_ms * 0.85 / 1000

    async def request(self, api_key: int, version: int, data: dict, timeout: float = 30.0):
        """Sends a request built from ``data`` (see codec.build) and returns the decoded
        response (a kio object). Raises ConnectionError/TimeoutError on failure, after which
        the connection is closed."""
        async with self._lock:
            await self._open()
            return await self._roundtrip(api_key, version, data, timeout)

    async def _open(self) -> None:
        """Connected, and (KIP-368) reconnected once the authenticated session's lifetime is up."""
        if self._session_end is not None and self.clock.monotonic() > self._session_end:
            self.close()
        if not self.connected:
            self.close()  # (a peer's close left a half-dead connection: let it go)
            await self.connect()

    async def send_only(self, api_key: int, version: int, data: dict) -> None:
        """A request the broker does not answer (Produce with acks=0)."""
        async with self._lock:
            if not self.connected:
                self.close()
                await self.connect()
            try:
                self._w.write(self._frame(api_key, version, data))
                await self._w.drain()
            except OSError as e:
                self.close()
                raise ConnectionError(f"request to {self.host}:{self.port} failed: {e!r}") from None

    async def request_body(self, api_key: int, version: int, body: bytes, timeout: float = 30.0) -> memoryview:
        """As ``request`` for a body encoded by the caller (the fetchers' hand-written Fetch):
        the response's body, after its header, for the caller to parse."""
        async with self._lock:
            await self._open()
            raw, pos = await self._exchange(api_key, version, self._frame_body(api_key, version, body), timeout)
            return memoryview(raw)[pos:]

    def _frame(self, api_key: int, version: int, data: dict) -> bytes:
        return self._frame_body(api_key, version, codec.encode(codec.build_request(api_key, version, data)))

    def _frame_body(self, api_key: int, version: int, body: bytes) -> bytes:
        self._cid += 1
        cb = self.client_id.encode()
        header = struct.pack(">hhih", api_key, version, self._cid, len(cb)) + cb
        if is_flexible(api_key, version):
            header += b"\x00"
        return _I32.pack(len(header) + len(body)) + header + body

    async def _roundtrip(self, api_key: int, version: int, data: dict, timeout: float = 30.0):
        raw, pos = await self._exchange(api_key, version, self._frame(api_key, version, data), timeout)
        obj, _ = codec._reader(codec.response_type(api_key, version))(raw, pos)
        return obj

    async def _exchange(self, api_key: int, version: int, frame: bytes, timeout: float) -> tuple[bytes, int]:
        """Sends a framed request; its response and where the body starts (after the header)."""
        cid = self._cid
        try:
            self._w.write(frame)
            await self._w.drain()
            async with asyncio.timeout(timeout):  # (not wait_for: it made a task per read)
                size = _I32.unpack(await self._r.readexactly(4))[0]
                raw = await self._r.readexactly(size)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
            self.close()
            raise ConnectionError(f"request to {self.host}:{self.port} failed: {e!r}") from None
        (got,) = _I32.unpack_from(raw, 0)
        if got != cid:
            self.close()
            raise ConnectionError(f"correlation id {got} != {cid}")
        pos = 4
        if api_key != ApiKey.API_VERSIONS and is_flexible(api_key, version):
            n, pos = codec.read_uvarint(raw, pos)
            for _ in range(n):
                _, pos = codec.read_uvarint(raw, pos)
                size, pos = codec.read_uvarint(raw, pos)
                pos += size
        return raw, pos

    def close(self) -> None:
        if self._w is not None:
            self._w.close()
        self._r = self._w = None
