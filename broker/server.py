"""Kafka listeners and connections.

Connections use raw non-blocking sockets on the event loop (works with uvloop and the
default loop alike) so that fetch responses can be written with ``os.sendfile`` straight
from the log segments. Requests on one connection are handled strictly in order, one at a
time, as Kafka does (responses must come back in request order). A frame larger than
``socket.request.max.bytes`` (``sasl.server.max.receive.size`` before SASL authentication)
or a malformed header closes only that connection.

Memory: a connection holds no buffer while idle; a frame's buffer grows as its bytes arrive,
and its announced size is reserved in the broker's request memory pool
(``queued.max.request.bytes``, broker/memory_pool.py) until the request has been handled,
which stops the reading of sockets when the pool is full. A request parked in a long poll
watches its socket, and is cancelled when the client goes away."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable

from broker.protocol.codec import FramingError, RequestHeader, parse_request_header
from common.clock import SYSTEM, Clock
from common.net import REAL, Net

log = logging.getLogger("krafty.network")
_I32 = struct.Struct(">i")
# A connection holds no buffer between requests. A frame starts with one read of up to
# _READ_AHEAD bytes (its size prefix, and all of a small request or of several pipelined
# ones); the rest of a longer frame is read in pieces of at most _MAX_READ bytes, each sized
# to what arrived. Both stay below glibc's first mmap threshold (128 KiB), so that their memory
# is recycled from the heap: fresh pages would cost a page fault per 4 KiB read (~1 ms per MB
# on a VM, measured).
_READ_AHEAD = 64 * 1024
_MAX_READ = 127 * 1024
_YIELD_AFTER = 0.005  # s a connection handles requests without letting the loop run (Connection.run)
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8  # tcpi_state values (linux/tcp_states.h)
# accept() errors that pass: out of descriptors, memory or buffers, or a connection gone before
# it was accepted (accept(2) also reports pending network errors of the new socket)
_ACCEPT_RETRY = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED,
                           errno.EPROTO, errno.EPERM, errno.EINTR, errno.EAGAIN, errno.ENETDOWN, errno.ENOPROTOOPT,
                           errno.EHOSTDOWN, errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH,
                           errno.ETIMEDOUT})


def _peer_finished(sock: socket.socket) -> bool:
    """Whether the client has sent its FIN (or a reset), from the kernel's TCP state."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in (_TCP_CLOSE, _TCP_CLOSE_WAIT)
    except (OSError, AttributeError):
        return False


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
    connection: Connection | None = None
    # for the request metrics (broker/metrics.py): seconds parked in a purgatory (RemoteTimeMs),
    # the quota throttle given, whether a Fetch came from a follower replica
    parked: float = 0.0
    throttle_ms: int = 0
    from_follower: bool = False

    def park(self, aw: Awaitable) -> Awaitable:
        """``aw`` (a long-poll wait), cancelled with the request if the client closes the
        connection meanwhile (see Connection.park)."""
        return aw if self.connection is None else self.connection.park(aw, self)


Handler = Callable[[RequestContext, memoryview], Awaitable["Chunks | None"]]


class Connection:
    def __init__(self, server: KafkaServer, sock: socket.socket, addr, cid: int):
        self.server = server
        self.sock = sock
        self.addr = addr
        self.cid = cid
        self.loop = asyncio.get_running_loop()
        # bytes received and not yet handed out as frames (pipelined requests, the part of a
        # frame that has arrived); empty, and so holding nothing, while the connection is idle
        self._chunks: list[bytes] = []
        self._have = 0  # bytes in _chunks
        self._want = 0  # bytes the reading task waits for (0: it does not wait)
        self._cap = _READ_AHEAD  # reading pauses with this many bytes buffered
        self._waiter: asyncio.Future | None = None
        self._reading = False  # the socket is watched by _on_readable
        self._eof = False  # the client closed its side (or the socket failed: _read_error)
        self._read_error: OSError | None = None
        self.reserved = 0  # bytes of the broker's request memory pool held by the request in hand
        self.tls = None  # broker.security.ssl.TlsIO on SSL / SASL_SSL listeners
        self.sasl = None  # broker.security.sasl.SaslSession on SASL listeners
        self.principal = "User:ANONYMOUS"
        self.in_request, self.active_at = False, self.loop.time()  # for connections.max.idle.ms
        self.task: asyncio.Task | None = None
        self.peer_gone = False  # the client closed the connection while a request was parked
        self._parked = False
        self._watch_timer: asyncio.TimerHandle | None = None

    # --- reading ----------------------------------------------------------------------------
    # The socket stays registered with the loop for reading as long as the connection lives
    # (not once per request: a registration per read cost an epoll_ctl pair, a poll handle and
    # a future each time, ~15 us a request here). ``_on_readable`` reads what came into
    # ``_chunks``, up to ``_cap`` bytes (the read-ahead, or the frame in hand), then pauses
    # until the task has taken them; it wakes the task once what it waits for is there. A
    # client that closes is seen at once, also while its request is parked.
    def _start_reading(self) -> None:
        if not self._reading and not self._eof:
            self._reading = True
            try:
                self.loop.add_reader(self.sock.fileno(), self._on_readable)
            except (OSError, ValueError) as e:  # closed meanwhile
                self._reading = False
                self._read_failed(e)

    def _pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            try:
                self.loop.remove_reader(self.sock.fileno())
            except (OSError, ValueError):
                pass

    def _read_failed(self, e: OSError | None) -> None:
        self._eof = True
        self._read_error = e
        self._pause_reading()
        if self._parked:
            self._peer_closed()
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    def _on_readable(self) -> None:
        if self.tls is not None:
            self._on_readable_tls()
            return
        sock, chunks = self.sock, self._chunks
        while True:
            n = self._want - self._have
            n = _READ_AHEAD if n < _READ_AHEAD else _MAX_READ if n > _MAX_READ else n
            try:
                data = sock.recv(n)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                self._read_failed(e)
                return
            if not data:
                self._read_failed(None)
                return
            chunks.append(data)
            self._have += len(data)
            if self._have >= self._cap:
                self._pause_reading()
                break
            if len(data) < n:  # the socket had no more (so no EAGAIN read to find out)
                break
        self.active_at = self.loop.time()
        if self._have >= self._want:
            self._wake()

    def _on_readable_tls(self, read: bool = True) -> None:
        try:
            got = self.tls.feed(self.sock, self._chunks, read)
        except (OSError, ssl.SSLError) as e:
            self._read_failed(e)
            return
        if got is None:  # the end of the stream
            self._read_failed(None)
            return
        self._have += got
        if self._have >= self._cap:
            self._pause_reading()
        self.active_at = self.loop.time()
        if self._have >= self._want:
            self._wake()

    async def _fill(self, n: int) -> None:
        """Waits until ``n`` bytes are buffered; ConnectionResetError if the client closes first."""
        while self._have < n:
            if self._eof:
                if self._read_error is not None:
                    raise self._read_error
                raise ConnectionResetError("peer closed" if not self._have else "peer closed mid-request")
            self._want = n
            if self._cap < n:
                self._cap = n
            if self.tls is not None and self.tls.buffered():
                before = self._have
                self._on_readable_tls(read=False)
                if self._have > before or self._eof:
                    continue
            self._start_reading()
            self._waiter = self.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
                self._want = 0

    def _take(self, n: int) -> bytes | bytearray:
        """The next ``n`` buffered bytes (as bytes if they are in the first chunk)."""
        chunks = self._chunks
        first = chunks[0]
        if len(first) >= n:
            if len(first) == n:
                chunks.pop(0)
                out = first
            else:
                out = first[:n]
                chunks[0] = first[n:]
        else:
            out = bytearray()
            while len(out) < n:
                c = chunks[0]
                need = n - len(out)
                if len(c) <= need:
                    out += c
                    chunks.pop(0)
                else:
                    out += memoryview(c)[:need]
                    chunks[0] = c[need:]
        self._have -= n
        return out

    def frame_limit(self) -> int:
        """Largest frame accepted now: Kafka reads the frames of a SASL connection before (and
        during) its first authentication with sasl.server.max.receive.size
        (SaslServerAuthenticator), every other frame with socket.request.max.bytes."""
        if self.sasl is not None and not self.sasl.authenticated:
            return self.sasl.sec.max_receive_size
        return self.server.max_request_size

    async def read_frame(self) -> bytearray:
        """The next request frame, with its size reserved in the broker's memory pool
        (``self.reserved``, given back once the request has been handled): when the pool has
        no room, no more than the read-ahead is read off the socket until it has."""
        if self._have < 4:
            await self._fill(4)
        first = self._chunks[0]
        (size,) = _I32.unpack_from(first if len(first) >= 4 else self._peek(4), 0)
        limit = self.server.max_request_size if self.sasl is None else self.frame_limit()
        if size < 0 or size > limit:
            what = ("sasl.server.max.receive.size before authentication"
                    if limit != self.server.max_request_size else "socket.request.max.bytes")
            raise FramingError(f"request of {size} bytes exceeds {what} ({limit})" if size > 0 else
                               "negative request size")
        pool = self.server.memory_pool
        if pool is not None:
            reserved = pool.try_reserve(size)
            # waiting for room is a parked wait too: a client that goes away meanwhile leaves the queue
            self.reserved = reserved if reserved is not None else await self.park(pool.reserve(size))
        if self._have < 4 + size:
            await self._fill(4 + size)  # the frame has room in the pool: read all of it
        self._cap = _READ_AHEAD
        if len(self._chunks[0]) >= 4 + size:  # the usual case: one read brought the whole frame
            c = self._chunks[0]
            frame = bytearray(memoryview(c)[4:4 + size])
            if len(c) == 4 + size:
                self._chunks.pop(0)
            else:
                self._chunks[0] = c[4 + size:]
            self._have -= 4 + size
        else:
            self._take(4)
            frame = self._take(size)
            if not isinstance(frame, bytearray):
                frame = bytearray(frame)
        if not self._reading and self._have < self._cap:
            self._start_reading()  # reading paused at the cap: go on
        return frame

    def _peek(self, n: int) -> bytes:
        out = b""
        for c in self._chunks:
            out += c[:n - len(out)]
            if len(out) >= n:
                break
        return out

    async def run(self) -> None:
        self.task = asyncio.current_task()
        try:
            sec = self.server.security
            if sec is not None:
                await self._secure(sec)
            protocol = sec.protocol if sec is not None else "PLAINTEXT"
            # one request at a time; the frame is only referenced while it is being handled.
            # Requests already received are read and handled without a trip through the loop:
            # once that has gone on for _YIELD_AFTER s the connection lets the loop run (other
            # connections, accepts, timers) before its next request, so a client pipelining
            # slow requests cannot hold the loop until its queue is empty.
            loop, turn = self.loop, self.loop.time()
            while await self._serve(await self.read_frame(), protocol):
                if loop.time() - turn > _YIELD_AFTER:
                    await asyncio.sleep(0)
                    turn = loop.time()
        except FramingError as e:
            log.info("closing connection %d from %s: %s", self.cid, self.addr, e)
        except (ConnectionError, OSError) as e:
            log.debug("connection %d from %s closed: %s", self.cid, self.addr, e)
        except asyncio.CancelledError:
            if not self.peer_gone:
                raise
            log.debug("connection %d from %s closed by the client while its request was parked", self.cid, self.addr)
        except Exception:
            log.exception("closing connection %d from %s after an unexpected error", self.cid, self.addr)
        finally:
            self._stop_watch()
            self._pause_reading()
            self._release()
            self._chunks.clear()
            self._have = 0
            self.sock.close()

    def _release(self) -> None:
        if self.reserved:
            self.server.memory_pool.release(self.reserved)
            self.reserved = 0

    async def _serve(self, frame: bytearray, protocol: str) -> bool:
        """Handles one request; False when the connection must close."""
        metrics, clock = self.server.metrics, self.server.clock
        start = clock.monotonic() if metrics is not None else 0.0
        try:
            self.in_request, self.active_at = True, self.loop.time()
            if self.sasl is not None:
                if self.sasl.raw_tokens:  # after SaslHandshake v0: bare SASL tokens
                    reply, close = self.sasl.raw_token(bytes(frame))
                    if reply is not None:
                        await self.send([reply])
                    if close:
                        await self._close_after_final_reply()
                        return False
                    return True
                header = parse_request_header(frame)
                reply, close = self.sasl.intercept(header, memoryview(frame)[header.size:])
                if reply is not None:
                    await self.send(reply)
                    if close:
                        await self._close_after_final_reply()
                        return False
                    return True
                self.principal = self.sasl.principal
            else:
                header = parse_request_header(frame)
            ctx = RequestContext(header, self.server.listener_name, self.addr[0], self.cid, self.principal,
                                 protocol, self)
            dispatched = clock.monotonic() if metrics is not None else 0.0
            chunks = await self.server.handler(ctx, memoryview(frame)[header.size:])
            if metrics is None:
                if chunks is not None:
                    await self.send(chunks)
                return True
            handled = clock.monotonic()
            if chunks is not None:
                await self.send(chunks)
            metrics.record_request(ctx, start, dispatched, handled, clock.monotonic())
            return True
        finally:
            self.in_request, self.active_at = False, self.loop.time()
            self._release()

    # --- a parked request -------------------------------------------------------------------
    async def park(self, aw: Awaitable, ctx: RequestContext | None = None):
        """Awaits ``aw``, a wait in which the request has no work in progress (a long-poll
        Fetch, an acks=all Produce waiting for its replicas): if the client closes the
        connection meanwhile, the request is cancelled and the connection closes (the socket's
        reader sees it; a client gone during a long poll would otherwise keep its socket, fd
        and request until the wait ends). When reading is paused because the client's next
        requests filled the read-ahead, the TCP state is looked at every second instead.
        With metrics on, the wait is counted in the purgatory's size and the request's
        RemoteTimeMs."""
        if ctx is not None and self.server.metrics is not None:
            return await self._park_timed(aw, ctx)
        if self.peer_gone or self._parked:
            return await aw
        self._parked = True
        if self._eof:
            self._peer_closed()
        elif not self._reading:
            self._watch_timer = self.loop.call_later(1.0, self._check_tcp_state)
        try:
            return await aw
        finally:
            self._stop_watch()

    async def _park_timed(self, aw: Awaitable, ctx: RequestContext):
        parked, key, clock = self.server.parked, ctx.header.api_key, self.server.clock
        parked[key] = parked.get(key, 0) + 1
        t0 = clock.monotonic()
        try:
            return await self.park(aw)
        finally:
            ctx.parked += clock.monotonic() - t0
            parked[key] -= 1

    def _stop_watch(self) -> None:
        self._parked = False
        if self._watch_timer is not None:
            self._watch_timer.cancel()
            self._watch_timer = None

    def _check_tcp_state(self) -> None:
        self._watch_timer = None
        if not self._parked:
            return
        if _peer_finished(self.sock):
            self._peer_closed()
        else:
            self._watch_timer = self.loop.call_later(1.0, self._check_tcp_state)

    def _peer_closed(self) -> None:
        self._stop_watch()
        self.peer_gone = True
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def shutdown(self) -> None:
        """Closes the connection from the broker's side (connections.max.idle.ms,
        max.connections): its reader sees EOF, and a request parked meanwhile is cancelled."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._parked:
            self._peer_closed()

    async def _close_after_final_reply(self) -> None:
        """After a failed authentication: waits connection.failed.authentication.delay.ms (as
        Kafka does; clients such as kafka-python treat an EOF that follows the reply at once as
        a lost connection), then half-closes and drains before closing, since closing with
        unread client bytes would send a RST, which can make the client drop the reply."""
        try:
            await asyncio.sleep(self.server.security.failed_auth_delay_ms / 1000)
            self.sock.shutdown(socket.SHUT_WR)
            deadline = self.loop.time() + 1.0
            while (left := deadline - self.loop.time()) > 0:
                self._chunks.clear()
                self._have = 0
                await asyncio.wait_for(self._fill(1), left)
        except (OSError, TimeoutError):
            pass

    async def _secure(self, sec) -> None:
        """TLS handshake (SSL, SASL_SSL) and SASL state (SASL_*) of a new connection."""
        if sec.ssl_context is not None:
            from broker.security.ssl import TlsIO

            self.tls = TlsIO(self.sock, sec.ssl_context, server_side=True)
            self.sock = self.tls.sock  # (the TLS socket over the same fd)
            await self.tls.handshake(timeout=30.0)
            dn = self.tls.peer_dn()
            if dn:
                self.principal = f"User:{dn}"
        if sec.sasl:
            from broker.security.sasl import SaslSession

            self.sasl = SaslSession(sec, self.server.scram_lookup, client=f"{self.addr[0]}:{self.addr[1]}",
                                    secrets=self.server.clock)
            self.sasl.on_auth = self.server.count_authentication

    async def send(self, chunks: Chunks) -> None:
        """Writes a response: its size, then its chunks, file regions with sendfile. Bytes go
        out with one send() of them joined when the socket takes them (the usual case), not a
        coroutine of the loop's per write."""
        total = sum(c.size if isinstance(c, FileRegion) else len(c) for c in chunks)
        if self.tls is not None:
            await self._send_tls(total, chunks)
            return
        pending: list = [_I32.pack(total)]
        for c in chunks:
            if isinstance(c, FileRegion):
                if pending:
                    await self._sendall(b"".join(pending))
                    pending = []
                await self._sendfile(c)
            else:
                pending.append(c)
        if pending:
            await self._sendall(b"".join(pending) if len(pending) > 1 else pending[0])

    async def _sendall(self, data) -> None:
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        if n < len(data):
            await self.loop.sock_sendall(self.sock, memoryview(data)[n:])

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
        if not isinstance(self.sock, socket.socket):  # sim/'s network: no kernel to sendfile through
            await self.loop.sock_sendall(self.sock, os.pread(region.fd, region.size, region.offset))
            return
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
                 security=None, scram_lookup=None, limits=None, memory_pool=None, clock: Clock = SYSTEM,
                 net: Net = REAL):
        self.listener_name = listener_name
        self.clock = clock
        self.net = net  # where the listening socket comes from (the OS, or sim/'s network)
        self.metrics = None  # broker.metrics.BrokerMetrics when metrics are served (krafty.metrics.port)
        self.parked: dict[int, int] = {}  # api key -> requests parked now (the purgatories' sizes)
        self.auth_ok = self.auth_failed = 0  # SASL authentications (socket-server-metrics)
        self.memory_pool = memory_pool  # broker.memory_pool.RequestMemoryPool (queued.max.request.bytes), shared
        self.limits = limits  # broker.security.limits.ConnectionLimits (max.connections, ...), shared by listeners
        self.security = security  # broker.security.sasl.ListenerSecurity, None = PLAINTEXT
        self.scram_lookup = scram_lookup  # (user, mechanism) -> ScramCredential | None
        self.host = host
        self.port = port
        self.handler = handler
        self.max_request_size = max_request_size
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._closing = False
        self._conns: set[asyncio.Task] = set()
        self._next_id = 0

    def bind(self) -> None:
        """Takes the listener's address without accepting connections yet (they are refused
        until ``start()``), so that a port in use stops start-up at once."""
        try:
            s = self.net.listen_socket(self.host, self.port)
        except OSError as e:
            raise OSError(e.errno, f"cannot bind listener {self.listener_name} to {self.host}:{self.port}: "
                                   f"{e.strerror}") from None
        self._sock = s
        self.port = s.getsockname()[1]

    def count_authentication(self, ok: bool) -> None:
        if ok:
            self.auth_ok += 1
        else:
            self.auth_failed += 1

    async def start(self) -> None:
        if self._sock is None:
            self.bind()
        s = self._sock
        s.listen(1024)
        s.setblocking(False)
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop())
        log.info("listening for %s on %s:%d", self.listener_name, self.host, self.port)

    async def _accept_loop(self) -> None:
        """Accepts until closed. A connection whose set-up fails is closed alone; an accept
        that fails for want of a resource (fds, memory, buffers) is retried after a pause, as
        Kafka's Acceptor does. Anything else means this listener cannot go on: the task ends
        with the error, ``failure()`` reports it and the node exits non-zero (krafty/node.py),
        rather than leaving a process that no longer accepts connections."""
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        limits = self.limits
        while True:
            try:
                if limits is not None:
                    await limits.wait_for_slot(self.listener_name)
                sock, addr = await loop.sock_accept(self._sock)
            except (MemoryError, OSError) as e:
                if isinstance(e, OSError) and e.errno not in _ACCEPT_RETRY:
                    raise
                log.warning("listener %s: accept failed (%s); retrying", self.listener_name, e)
                await asyncio.sleep(0.05)
                continue
            try:
                self._open(loop, sock, addr)
            except OSError as e:  # e.g. the client reset the connection before set-up: its loss only
                log.info("listener %s: closed the connection from %s during set-up: %s", self.listener_name, addr, e)
            except Exception:
                log.exception("listener %s: closed the connection from %s: its set-up failed", self.listener_name,
                              addr)

    def _open(self, loop, sock: socket.socket, addr) -> None:
        """Sets up and runs one accepted connection; on failure it is closed (and uncounted)."""
        limits = self.limits
        if limits is not None and not limits.admit(addr[0]):
            sock.close()
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # as Kafka's Acceptor: dead peers go eventually
            self._next_id += 1
            c = Connection(self, sock, addr, self._next_id)
            t = loop.create_task(c.run())
        except BaseException:
            sock.close()
            if limits is not None:
                limits.closed(None, addr[0])
            raise
        self._conns.add(t)
        t.add_done_callback(self._conns.discard)
        if limits is not None:
            limits.opened(c)
            t.add_done_callback(lambda _t, c=c, ip=addr[0]: limits.closed(c, ip))

    def failure(self) -> BaseException | None:
        """The error that stopped this listener accepting connections, if one did (the node
        cannot go on without it)."""
        t = self._accept_task
        if t is None or not t.done() or t.cancelled() or self._closing:
            return None
        e = t.exception()
        err = RuntimeError(f"listener {self.listener_name} on {self.host}:{self.port} stopped accepting connections: "
                           f"{e!r}")
        err.__cause__ = e
        return err

    async def close(self) -> None:
        self._closing = True
        if self._accept_task:
            self._accept_task.cancel()
        if self._sock:
            self._sock.close()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
