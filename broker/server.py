"""Kafka listeners and connections.

Connections use raw non-blocking sockets on the event loop (works with uvloop and the
default loop alike) so that fetch responses can be written with ``os.sendfile`` straight
from the log segments. Requests on one connection are handled strictly in order, one at a
time, as Kafka does (responses must come back in request order). A frame larger than
``socket.request.max.bytes`` or a malformed header closes only that connection."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable

from broker.protocol.codec import FramingError, RequestHeader, parse_request_header

log = logging.getLogger("krafty.network")
_I32 = struct.Struct(">i")
_RECV_CHUNK = 256 * 1024


@dataclasses.dataclass(slots=True)
class FileRegion:
    """A byte range of an open file, sent with sendfile."""

    fd: int
    offset: int
    size: int
    owner: object = None  # keeps the segment file (and so the fd) open until sent


# A response is a list of chunks: bytes-like or FileRegion; the server frames it.
Chunks = list


@dataclasses.dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    listener: str
    client_host: str
    connection_id: int
    # Kafka principal of the connection (broker/security): User:ANONYMOUS on PLAINTEXT and on
    # SSL without a client certificate, User:<TLS subject DN> with one, User:<name> after SASL
    principal: str = "User:ANONYMOUS"
    security_protocol: str = "PLAINTEXT"


Handler = Callable[[RequestContext, memoryview], Awaitable["Chunks | None"]]


class Connection:
    def __init__(self, server: KafkaServer, sock: socket.socket, addr, cid: int):
        self.server = server
        self.sock = sock
        self.addr = addr
        self.cid = cid
        self.loop = asyncio.get_running_loop()
        self._buf = bytearray(_RECV_CHUNK)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self.tls = None  # broker.security.ssl.TlsIO on SSL / SASL_SSL listeners
        self.sasl = None  # broker.security.sasl.SaslSession on SASL listeners
        self.principal = "User:ANONYMOUS"

    def _recv_into(self, view) -> Awaitable[int]:
        return self.tls.recv_into(view) if self.tls is not None else self.loop.sock_recv_into(self.sock, view)

    async def _recv_more(self) -> None:
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buf):
            n = self._end - self._start
            self._buf[:n] = self._buf[self._start:self._end]
            self._start, self._end = 0, n
        n = await self._recv_into(self._view[self._end:])
        if n == 0:
            raise ConnectionResetError("peer closed")
        self._end += n

    async def read_frame(self) -> bytearray:
        while self._end - self._start < 4:
            await self._recv_more()
        (size,) = _I32.unpack_from(self._buf, self._start)
        if size < 0 or size > self.server.max_request_size:
            raise FramingError(f"request of {size} bytes exceeds socket.request.max.bytes "
                               f"({self.server.max_request_size})" if size > 0 else "negative request size")
        self._start += 4
        have = self._end - self._start
        if size <= have:
            frame = self._buf[self._start:self._start + size]
            self._start += size
            return frame
        frame = bytearray(size)
        frame[:have] = self._view[self._start:self._end]
        self._start = self._end = 0
        view = memoryview(frame)
        got = have
        while got < size:
            n = await self._recv_into(view[got:])
            if n == 0:
                raise ConnectionResetError("peer closed mid-request")
            got += n
        return frame

    async def run(self) -> None:
        try:
            sec = self.server.security
            if sec is not None:
                await self._secure(sec)
            protocol = sec.protocol if sec is not None else "PLAINTEXT"
            while True:
                frame = await self.read_frame()
                self.in_request, self.active_at = True, self.loop.time()  # for connections.max.idle.ms
                if self.sasl is not None:
                    if self.sasl.raw_tokens:  # after SaslHandshake v0: bare SASL tokens
                        reply, close = self.sasl.raw_token(bytes(frame))
                        if reply is not None:
                            await self.send([reply])
                        if close:
                            await self._close_after_final_reply()
                            break
                        continue
                    header = parse_request_header(frame)
                    reply, close = self.sasl.intercept(header, memoryview(frame)[header.size:])
                    if reply is not None:
                        await self.send(reply)
                        if close:
                            await self._close_after_final_reply()
                            break
                        continue
                    self.principal = self.sasl.principal
                else:
                    header = parse_request_header(frame)
                ctx = RequestContext(header, self.server.listener_name, self.addr[0], self.cid, self.principal,
                                     protocol)
                chunks = await self.server.handler(ctx, memoryview(frame)[header.size:])
                if chunks is not None:
                    await self.send(chunks)
                self.in_request, self.active_at = False, self.loop.time()
        except FramingError as e:
            log.info("closing connection %d from %s: %s", self.cid, self.addr, e)
        except (ConnectionError, OSError) as e:
            log.debug("connection %d from %s closed: %s", self.cid, self.addr, e)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection %d from %s after an unexpected error", self.cid, self.addr)
        finally:
            self.sock.close()

    async def _close_after_final_reply(self) -> None:
        """After a failed authentication: waits connection.failed.authentication.delay.ms (as
        Kafka does; clients such as kafka-python treat an EOF that follows the reply at once as
        a lost connection), then half-closes and drains before closing, since closing with
        unread client bytes would send a RST, which can make the client drop the reply."""
        try:
            await asyncio.sleep(self.server.security.failed_auth_delay_ms / 1000)
            self.sock.shutdown(socket.SHUT_WR)
            buf = bytearray(4096)
            deadline = self.loop.time() + 1.0
            while (left := deadline - self.loop.time()) > 0:
                if await asyncio.wait_for(self.loop.sock_recv_into(self.sock, buf), left) == 0:
                    break
        except (OSError, TimeoutError):
            pass

    async def _secure(self, sec) -> None:
        """TLS handshake (SSL, SASL_SSL) and SASL state (SASL_*) of a new connection."""
        if sec.ssl_context is not None:
            from broker.security.ssl import TlsIO

            self.tls = TlsIO(self.sock, sec.ssl_context, server_side=True)
            await self.tls.handshake(timeout=30.0)
            dn = self.tls.peer_dn()
            if dn:
                self.principal = f"User:{dn}"
        if sec.sasl:
            from broker.security.sasl import SaslSession

            self.sasl = SaslSession(sec, self.server.scram_lookup, client=f"{self.addr[0]}:{self.addr[1]}")

    async def send(self, chunks: Chunks) -> None:
        total = sum(c.size if isinstance(c, FileRegion) else len(c) for c in chunks)
        if self.tls is not None:
            await self._send_tls(total, chunks)
            return
        pending: list = [_I32.pack(total)]
        for c in chunks:
            if isinstance(c, FileRegion):
                if pending:
                    await self.loop.sock_sendall(self.sock, b"".join(pending))
                    pending = []
                await self._sendfile(c)
            else:
                pending.append(c)
        if pending:
            await self.loop.sock_sendall(self.sock, b"".join(pending) if len(pending) > 1 else pending[0])

    async def _send_tls(self, total: int, chunks: Chunks) -> None:
        pending: list = [_I32.pack(total)]
        for c in chunks:
            if isinstance(c, FileRegion):
                if pending:
                    await self.tls.sendall(b"".join(pending))
                    pending = []
                await self.tls.sendfile(c.fd, c.offset, c.size)
            else:
                pending.append(c)
        if pending:
            await self.tls.sendall(b"".join(pending))

    async def _sendfile(self, region: FileRegion) -> None:
        out = self.sock.fileno()
        offset, left = region.offset, region.size
        while left > 0:
            try:
                n = os.sendfile(out, region.fd, offset, left)
            except BlockingIOError:
                await self._writable()
                continue
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            if n == 0:
                raise ConnectionError("log segment ended before the promised fetch size")
            offset += n
            left -= n

    def _writable(self) -> asyncio.Future:
        fut = self.loop.create_future()
        fd = self.sock.fileno()

        def ready() -> None:
            self.loop.remove_writer(fd)
            if not fut.done():
                fut.set_result(None)
        self.loop.add_writer(fd, ready)
        return fut


class KafkaServer:
    """One listener: accepts connections and runs them until closed."""

    def __init__(self, listener_name: str, host: str, port: int, handler: Handler, *, max_request_size: int,
                 security=None, scram_lookup=None, limits=None):
        self.listener_name = listener_name
        self.limits = limits  # broker.security.limits.ConnectionLimits (max.connections, ...), shared by listeners
        self.security = security  # broker.security.sasl.ListenerSecurity, None = PLAINTEXT
        self.scram_lookup = scram_lookup  # (user, mechanism) -> ScramCredential | None
        self.host = host
        self.port = port
        self.handler = handler
        self.max_request_size = max_request_size
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._conns: set[asyncio.Task] = set()
        self._next_id = 0

    def bind(self) -> None:
        """Takes the listener's address without accepting connections yet (they are refused
        until ``start()``), so that a port in use stops start-up at once."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.host or "0.0.0.0", self.port))
        except OSError as e:
            s.close()
            raise OSError(e.errno, f"cannot bind listener {self.listener_name} to {self.host}:{self.port}: "
                                   f"{e.strerror}") from None
        self._sock = s
        self.port = s.getsockname()[1]

    async def start(self) -> None:
        if self._sock is None:
            self.bind()
        s = self._sock
        s.listen(1024)
        s.setblocking(False)
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop())
        log.info("listening for %s on %s:%d", self.listener_name, self.host, self.port)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        limits = self.limits
        while True:
            try:
                if limits is not None:
                    await limits.wait_for_slot(self.listener_name)
                conn, addr = await loop.sock_accept(self._sock)
            except OSError as e:
                log.warning("accept failed: %s", e)
                await asyncio.sleep(0.05)
                continue
            if limits is not None and not limits.admit(addr[0]):
                conn.close()
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._next_id += 1
            c = Connection(self, conn, addr, self._next_id)
            c.in_request, c.active_at = False, loop.time()
            t = loop.create_task(c.run())
            self._conns.add(t)
            t.add_done_callback(self._conns.discard)
            if limits is not None:
                limits.opened(c)
                t.add_done_callback(lambda _t, c=c, ip=addr[0]: limits.closed(c, ip))

    async def close(self) -> None:
        if self._accept_task:
            self._accept_task.cancel()
        if self._sock:
            self._sock.close()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
