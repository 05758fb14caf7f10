"""The simulated network: gRPC (quorum RPCs, controller channel) and TCP streams (Kafka
connections, client<->broker and broker<->broker), in virtual time on a ``SimLoop``.

Hosts are named by the simulated process that owns them (the ``NODE`` context variable of
sim/loop.py): a message goes from the process that sends it to the process that serves the
address. Faults, all drawn from the world's seed:

- ``delay``: every message (a gRPC request or reply, a chunk of stream bytes) takes a random
  time in ``delay_s``; a stream stays in order (TCP), separate calls and connections overtake
  one another (reordering across calls);
- ``loss``: a gRPC request or reply is lost with probability ``loss`` (the caller sees
  DEADLINE_EXCEEDED at its deadline, the server may have acted: as a lost reply on a real
  network); a stream is reset instead (TCP does not lose bytes silently);
- ``dup``: a gRPC call is executed twice with probability ``dup``: the server runs the request,
  its reply is lost with the connection, and the call is sent again (a retried RPC: grpc's
  retry policy, or a proxy's, re-sends a call that failed UNAVAILABLE with the request already
  on the server); the caller sees the second execution's reply. Both copies travel with their
  own delays, so the retry may even overtake the first. TCP streams (the Kafka connections)
  never deliver bytes twice: there a duplicate is a client's re-send on a new connection after
  a reset, which the clients do themselves (sim/client.py), so ``dup`` leaves streams alone;
- ``cut(a, b)``: a one-way cut (nothing from a reaches b); ``partition`` cuts both ways.
  Calls across a cut time out; streams across it are reset, and connecting fails;
- a killed process (``SimLoop.kill``) serves nothing: calls to it time out, its streams reset.

gRPC is simulated at grpc.aio's interface: ``SimChannel.unary_unary`` (what generated stubs
call) serializes the request, the server side finds the method registered by the generated
``add_*Servicer_to_server`` and runs the real servicer in the server process's context; so
raft/transport.py, controller/service.py and broker/controller_channel.py run unchanged.
Streams are simulated at the loop's socket interface: ``loop.sock_accept/sock_recv/
sock_recv_into/sock_sendall/add_reader`` on ``SimSocket`` for the broker's server, and
``loop.create_connection`` (asyncio streams) for its clients.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
from collections import deque

import grpc

from sim.loop import NODE, SimLoop

_TCP_ESTABLISHED, _TCP_CLOSE_WAIT = 1, 8


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code, self.details = code, details


def _rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class SimNet:
    def __init__(self, loop: SimLoop, rng, *, delay_s: tuple[float, float] = (0.0002, 0.002), loss: float = 0.0,
                 dup: float = 0.0):
        self.loop = loop
        self.rng = rng
        self.delay_s = delay_s
        self.loss = loss
        self.dup = dup
        self.duplicated = 0  # calls executed twice
        self.cuts: set[tuple[object, object]] = set()  # (from, to) process names
        self.grpc_servers: dict[str, SimGrpcServer] = {}  # "host:port" -> server
        self.listeners: dict[tuple[str, int], SimListener] = {}
        self.streams: dict[int, SimSocket] = {}  # open stream ends by fd (reset on cuts and kills)
        self.sent = self.lost = 0
        self._fd = 100_000
        loop.net = self

    # -- faults ------------------------------------------------------------------------
    def cut(self, a, b) -> None:
        self.cuts.add((a, b))
        self._reset_crossing()

    def partition(self, side_a, side_b) -> None:
        for a in side_a:
            for b in side_b:
                self.cuts.add((a, b))
                self.cuts.add((b, a))
        self._reset_crossing()

    def heal(self) -> None:
        self.cuts.clear()

    def reachable(self, a, b) -> bool:
        return (a, b) not in self.cuts and a not in self.loop.dead and b not in self.loop.dead

    def _reset_crossing(self) -> None:
        for s in list(self.streams.values()):
            if s.peer is not None and not self.reachable(s.owner, s.peer.owner):
                s.reset()

    def killed(self, owner) -> None:
        """``owner`` died: its streams reset (its peers' kernels see the RST its kernel sends)."""
        for s in list(self.streams.values()):
            if s.owner == owner:
                s.reset()
        for k, lst in list(self.listeners.items()):
            if lst.owner == owner:
                del self.listeners[k]
        for k, srv in list(self.grpc_servers.items()):
            if srv.owner == owner:
                del self.grpc_servers[k]

    def delay(self) -> float:
        lo, hi = self.delay_s
        return lo + (hi - lo) * self.rng.random()

    def next_fd(self) -> int:
        self._fd += 1
        return self._fd

    # -- the Net of one process (common/net.py) ---------------------------------------
    # the cluster-id interceptors (proto/cluster_id.py) are not run: a world is one cluster
    def grpc_channel(self, target: str, credentials=None, options=(), interceptors=()) -> SimChannel:
        return SimChannel(self, target)

    def grpc_server(self, options=(), interceptors=()) -> SimGrpcServer:
        return SimGrpcServer(self)

    def listen_socket(self, host: str, port: int) -> SimListener:
        key = (host or "0.0.0.0", port)
        if key in self.listeners:
            raise OSError(98, f"address {host}:{port} in use")
        lst = SimListener(self, key)
        self.listeners[key] = lst
        return lst

    # -- gRPC --------------------------------------------------------------------------
    def unary_call(self, target: str, method: str, data: bytes, timeout: float | None,
                   trailing: list | None = None) -> asyncio.Future:
        """A future of the serialized answer of ``method`` at ``target`` (or of the grpc error
        the caller sees); the trailing metadata the servicer set is appended to ``trailing``.
        The request and the reply travel as timers of the world (a message on the wire arrives
        whatever becomes of its sender); the caller's deadline is a timer of its own."""
        loop = self.loop
        src = NODE.get()
        now = loop.time()
        deadline = now + (timeout if timeout is not None else 3600.0)
        fut = loop.create_future()
        self.sent += 1

        def fail(code: grpc.StatusCode, details: str) -> None:
            if not fut.done():
                fut.set_exception(_rpc_error(code, details))

        def fail_at(when: float, code: grpc.StatusCode, details: str) -> None:
            loop.call_at(when, fail, code, details, context=_world_context)

        srv = self.grpc_servers.get(target)
        if srv is None and target.startswith("localhost:"):
            srv = self.grpc_servers.get("127.0.0.1:" + target.split(":", 1)[1])
        if srv is None or not srv.serving:
            fail_at(min(now + self.delay() * 2, deadline), grpc.StatusCode.UNAVAILABLE, f"nothing listens on {target}")
            return fut
        if not self.reachable(src, srv.owner) or self.rng.random() < self.loss:
            self.lost += 1
            fail_at(deadline, grpc.StatusCode.DEADLINE_EXCEEDED, "request lost")
            return fut
        call: list[asyncio.Task] = []

        def expire() -> None:  # the caller's deadline
            for t in call:
                if not t.done():
                    t.cancel()
            fail(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer in time")
        timer = loop.call_at(deadline, expire, context=_world_context)

        def arrive(replied: bool = True) -> None:  # the request reaches the server
            handler = srv.handlers.get(method)
            if handler is None or not srv.serving or srv.owner in loop.dead:
                if not replied:
                    return  # (the first copy of a retried call: its failure is lost too)
                code = grpc.StatusCode.UNIMPLEMENTED if handler is None else grpc.StatusCode.DEADLINE_EXCEEDED
                timer.cancel()
                fail_at(deadline, code, method)
                return
            ctx = _Context()  # (run even if the caller has given up meanwhile: the request was sent)
            task = loop.create_task(handler.unary_unary(handler.request_deserializer(data), ctx),
                                    context=srv.context.copy())
            call.append(task)
            if replied:
                task.add_done_callback(lambda t: answered(t, handler, ctx), context=_world_context)
            else:  # its answer, an error as well, goes nowhere
                task.add_done_callback(lambda t: t.cancelled() or t.exception(), context=_world_context)

        def answered(task: asyncio.Task, handler, ctx: _Context) -> None:
            if task.cancelled():
                return  # at the caller's deadline (expire)
            exc = task.exception()
            if isinstance(exc, _Abort):
                timer.cancel()
                fail(exc.code, exc.details)
                return
            if exc is not None:
                timer.cancel()
                fail(grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")
                return
            body = handler.response_serializer(task.result())
            if not self.reachable(srv.owner, src) or self.rng.random() < self.loss:
                self.lost += 1
                return  # the caller's deadline comes
            timer.cancel()
            at = loop.time() + self.delay()
            if at >= deadline:
                fail_at(deadline, grpc.StatusCode.DEADLINE_EXCEEDED, "no answer in time")
                return

            def deliver() -> None:
                if not fut.done():
                    if trailing is not None:
                        trailing.extend(ctx.trailing)
                    fut.set_result(body)
            loop.call_at(at, deliver, context=_world_context)
        if self.dup and self.rng.random() < self.dup:  # executed twice: the first reply lost, the call retried
            self.duplicated += 1
            loop.call_at(now + self.delay(), arrive, False, context=_world_context)
            loop.call_at(now + self.delay() * 2 + self.rng.random() * 0.05, arrive, context=_world_context)
        else:
            loop.call_at(now + self.delay(), arrive, context=_world_context)
        return fut


class _Context:
    """What servicers see of a gRPC call."""

    def __init__(self) -> None:
        self.trailing: tuple = ()

    def set_trailing_metadata(self, metadata) -> None:
        self.trailing = tuple(metadata)

    async def abort(self, code, details=""):
        raise _Abort(code, details)

    def peer(self) -> str:
        return "sim"

    def invocation_metadata(self):
        return ()

    def auth_context(self):
        return {}


class _UnaryCall:
    def __init__(self, net: SimNet, target: str, method: str, ser, deser):
        self.net, self.target, self.method, self.ser, self.deser = net, target, method, ser, deser

    def __call__(self, request, *, timeout=None, metadata=None, credentials=None, wait_for_ready=None,
                 compression=None) -> _SimCall:
        trailing: list = []
        return _SimCall(self._call(request, timeout, trailing), trailing)

    async def _call(self, request, timeout, trailing: list):
        data = self.ser(request) if self.ser is not None else request
        body = await self.net.unary_call(self.target, self.method, data, timeout, trailing)
        return self.deser(body) if self.deser is not None else body


class _SimCall:
    """An awaitable call, as grpc.aio's: its answer, then its trailing metadata."""

    def __init__(self, coro, trailing: list) -> None:
        self._coro, self._trailing = coro, trailing

    def __await__(self):
        return self._coro.__await__()

    async def trailing_metadata(self):
        return tuple(self._trailing)


class SimChannel:
    def __init__(self, net: SimNet, target: str):
        self.net, self.target = net, target

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return _UnaryCall(self.net, self.target, method, request_serializer, response_deserializer)

    async def close(self, grace=None) -> None:
        pass

    async def channel_ready(self) -> None:
        pass

    async def __aenter__(self) -> SimChannel:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class SimGrpcServer:
    def __init__(self, net: SimNet):
        self.net = net
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}
        self.addresses: list[str] = []
        self.serving = False
        self.owner = None
        self.context: contextvars.Context | None = None

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass  # the generated code registers the same methods with add_registered_method_handlers

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        for name, h in handlers.items():
            key = f"/{service}/{name}"
            if key in self.handlers:
                raise RuntimeError(f"gRPC method {key} registered twice")
            self.handlers[key] = h

    def add_insecure_port(self, address: str) -> int:
        host, _, port = address.rpartition(":")
        self.addresses.append(address)
        return int(port)

    def add_secure_port(self, address: str, credentials) -> int:
        return self.add_insecure_port(address)

    async def start(self) -> None:
        self.owner = NODE.get()
        self.context = contextvars.copy_context()
        for a in self.addresses:
            if a in self.net.grpc_servers and self.net.grpc_servers[a].owner not in self.net.loop.dead:
                raise OSError(98, f"address {a} in use")
            self.net.grpc_servers[a] = self
        self.serving = True

    async def stop(self, grace=None) -> None:
        self.serving = False
        for a in self.addresses:
            if self.net.grpc_servers.get(a) is self:
                del self.net.grpc_servers[a]

    async def wait_for_termination(self, timeout=None) -> bool:
        return True


# --------------------------------------------------------------------------- streams
class SimSocket:
    """One end of a simulated TCP connection, with the calls broker/server.py makes on a
    socket (non-blocking ``recv``, ``shutdown``, ``getsockopt(TCP_INFO)``...)."""

    simulated = True

    def __init__(self, net: SimNet, owner, addr):
        self.net = net
        self.owner = owner
        self.addr = addr  # the peer's address as this end sees it
        self.peer: SimSocket | None = None
        self.buf = bytearray()
        self.eof = False  # the peer shut down its writing side (FIN received)
        self.error: OSError | None = None  # reset
        self.closed = False
        self.wr_shut = False
        self._fd = net.next_fd()
        self._last_arrival = 0.0
        self._waiters: list[asyncio.Future] = []
        self.on_readable = None  # loop.add_reader's callback
        self.on_event = None  # SimTransport's delivery: called at once when bytes, EOF or an error arrive
        net.streams[self._fd] = self

    # -- the kernel's side ---------------------------------------------------------------
    def _arrive(self, data: bytes | None) -> None:
        if self.closed or self.error is not None:
            return
        if data is None:
            self.eof = True
        else:
            self.buf += data
        self._wake()

    def _wake(self) -> None:
        loop = self.net.loop
        if loop.is_closed():
            return
        if self._waiters:
            for w in self._waiters:
                if not w.done():
                    w.set_result(None)
            self._waiters.clear()
        if self.on_event is not None:
            self.on_event()
        if self.on_readable is not None:
            loop.call_soon(self.on_readable)

    def _transmit(self, data: bytes | None) -> None:
        peer = self.peer
        if peer is None:
            return
        if not self.net.reachable(self.owner, peer.owner):
            self.reset()
            return
        loop = self.net.loop
        at = max(loop.time() + self.net.delay(), self._last_arrival + 1e-6)  # in order, as TCP
        self._last_arrival = at
        loop.call_at(at, peer._arrive, data, context=_world_context)

    def reset(self) -> None:
        """A RST both ways (a cut link or a dead process)."""
        for s in (self, self.peer):
            if s is not None and s.error is None and not s.closed:
                s.error = ConnectionResetError(104, "connection reset (simulated)")
                s._wake()
        for s in (self, self.peer):
            if s is not None:
                self.net.streams.pop(s._fd, None)

    def readable(self) -> bool:
        return bool(self.buf) or self.eof or self.error is not None or self.closed

    async def wait_readable(self) -> None:
        while not self.readable():
            fut = self.net.loop.create_future()
            self._waiters.append(fut)
            await fut

    # -- the socket API --------------------------------------------------------------------
    def fileno(self) -> int:
        return -1 if self.closed else self._fd

    def setblocking(self, flag: bool) -> None:
        pass

    def setsockopt(self, *args) -> None:
        pass

    def getsockopt(self, level, opt, buflen=0):
        if level == socket.IPPROTO_TCP and opt == socket.TCP_INFO:
            return bytes([_TCP_CLOSE_WAIT if (self.eof or self.error) else _TCP_ESTABLISHED])
        return 0

    def getpeername(self):
        return self.addr

    def recv(self, n: int, flags: int = 0) -> bytes:
        if self.closed:
            raise OSError(9, "bad file descriptor")
        if self.buf:
            out = bytes(self.buf[:n])
            if not flags & socket.MSG_PEEK:
                del self.buf[:n]
            return out
        if self.error is not None:
            raise self.error
        if self.eof:
            return b""
        raise BlockingIOError()

    def recv_into(self, view, n: int = 0) -> int:
        data = self.recv(n or len(view))
        view[:len(data)] = data
        return len(data)

    def send(self, data) -> int:
        if self.closed:
            raise OSError(9, "bad file descriptor")
        if self.error is not None:
            raise self.error
        if self.wr_shut:
            raise BrokenPipeError(32, "broken pipe")
        self._transmit(bytes(data))
        return len(data)

    def shutdown(self, how: int) -> None:
        if self.closed or self.error is not None:
            raise OSError(107, "not connected")
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self.wr_shut:
            self.wr_shut = True
            self._transmit(None)
        if how in (socket.SHUT_RD, socket.SHUT_RDWR):
            self.eof = True
            self._wake()

    def close(self) -> None:
        if self.closed:
            return
        if not self.wr_shut and self.error is None:
            self._transmit(None)
            self.wr_shut = True
        self.closed = True
        self._wake()
        self.net.streams.pop(self._fd, None)


class SimListener:
    simulated = True

    def __init__(self, net: SimNet, addr: tuple[str, int]):
        self.net = net
        self.addr = addr
        self.owner = NODE.get()
        self.backlog: deque[SimSocket] = deque()
        self.accepting = False
        self._waiters: list[asyncio.Future] = []
        self.closed = False

    def getsockname(self):
        return self.addr

    def listen(self, n: int = 0) -> None:
        self.accepting = True

    def setblocking(self, flag: bool) -> None:
        pass

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self.closed = True
        if self.net.listeners.get(self.addr) is self:
            del self.net.listeners[self.addr]
        for s in self.backlog:
            s.reset()
        self.backlog.clear()

    async def accept(self):
        while not self.backlog:
            if self.closed:
                raise OSError(9, "listener closed")
            fut = self.net.loop.create_future()
            self._waiters.append(fut)
            await fut
        s = self.backlog.popleft()
        return s, s.addr


_world_context = contextvars.Context()  # arrivals are the kernel's work: no process owns them


async def connect(net: SimNet, host: str, port: int) -> SimSocket:
    """The client end of a new connection to ``host:port`` (refused or unreachable: OSError)."""
    src = NODE.get()
    await asyncio.sleep(net.delay())  # SYN
    lst = net.listeners.get((host, port)) or net.listeners.get(("0.0.0.0", port))
    if lst is None or not lst.accepting or lst.closed:
        raise ConnectionRefusedError(111, f"connection to {host}:{port} refused")
    if not net.reachable(src, lst.owner):
        await asyncio.sleep(1.0)
        raise TimeoutError(f"connection to {host}:{port} timed out")
    await asyncio.sleep(net.delay())  # SYN-ACK
    client = SimSocket(net, src, (host, port))
    server = SimSocket(net, lst.owner, (f"sim-{src}", client._fd))
    client.peer, server.peer = server, client
    lst.backlog.append(server)
    for w in lst._waiters:
        if not w.done():
            w.set_result(None)
    lst._waiters.clear()
    return client


class SimTransport(asyncio.Transport):
    """asyncio streams over a ``SimSocket`` (``loop.create_connection``). What arrives is handed
    to the protocol at once (as a selector callback of asyncio's would, one loop turn later);
    nothing is handed to a killed process's protocol."""

    def __init__(self, loop: SimLoop, sock: SimSocket, protocol: asyncio.Protocol):
        super().__init__()
        self._loop, self._sock, self._protocol = loop, sock, protocol
        self._closing = False
        self._paused = False
        self._eof = False
        sock.on_event = self._deliver
        if sock.readable():
            loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        s, p = self._sock, self._protocol
        if self._closing or (self._paused and s.error is None) or s.owner in self._loop.dead:
            return
        if s.buf:
            data = bytes(s.buf)
            s.buf.clear()
            p.data_received(data)
            if self._closing or (self._paused and s.error is None):
                return
        if s.error is not None or s.closed:
            self._closing = True
            p.connection_lost(s.error)
        elif s.eof and not self._eof:
            self._eof = True  # (half-closed: nothing more will come)
            if not p.eof_received():
                self._closing = True
                s.close()
                p.connection_lost(None)

    def write(self, data) -> None:
        if self._closing:
            return
        try:
            self._sock.send(data)
        except OSError:
            pass

    def writelines(self, chunks) -> None:
        self.write(b"".join(chunks))

    def write_eof(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self._sock.reset()
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        self._loop.call_soon(self._deliver)

    def is_reading(self) -> bool:
        return not self._paused

    def get_extra_info(self, name, default=None):
        return {"peername": self._sock.addr, "sockname": ("sim", self._sock._fd), "socket": None}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0
