"""Where shells open gRPC channels and servers: the machine's network (``REAL``), or sim/'s.

The quorum RPCs (raft/transport.py) and the controller channel (broker/controller_channel.py)
reach other nodes through gRPC; they take a ``Net`` when built, as they take a ``Clock``, so
that the simulator runs the same code over its own network (sim/net.py: the generated stubs
and servicers unchanged, messages serialized, delayed, lost and cut in virtual time). The
Kafka listeners and connections go through the event loop (asyncio streams, ``loop.sock_*``),
which the simulator's loop provides itself.
"""

from __future__ import annotations

import socket
from typing import Protocol

import grpc


class Net(Protocol):
    def grpc_channel(self, target: str, credentials: grpc.ChannelCredentials | None = None,
                     options: list | tuple = (), interceptors: list | tuple = ()) -> grpc.aio.Channel:
        ...

    def grpc_server(self, options: list | tuple = (), interceptors: list | tuple = ()) -> grpc.aio.Server:
        ...

    def listen_socket(self, host: str, port: int) -> socket.socket:
        """A socket bound to ``host:port`` (0: any free port), not yet listening."""
        ...


class RealNet:
    def grpc_channel(self, target: str, credentials: grpc.ChannelCredentials | None = None,
                     options: list | tuple = (), interceptors: list | tuple = ()) -> grpc.aio.Channel:
        icpt = list(interceptors) or None
        if credentials is not None:
            return grpc.aio.secure_channel(target, credentials, options=list(options), interceptors=icpt)
        return grpc.aio.insecure_channel(target, options=list(options), interceptors=icpt)

    def grpc_server(self, options: list | tuple = (), interceptors: list | tuple = ()) -> grpc.aio.Server:
        return grpc.aio.server(options=list(options), interceptors=list(interceptors) or None)

    def listen_socket(self, host: str, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or "0.0.0.0", port))
        except OSError:
            s.close()
            raise
        return s


REAL: Net = RealNet()
