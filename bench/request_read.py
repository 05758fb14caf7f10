"""Cost of reading requests off a socket (broker/server.py): a KafkaServer whose handler answers
every request with 10 bytes, and a client process that pipelines N frames of SIZE bytes and
reads the answers. Reports MB/s, requests/s, and the server's CPU time and page faults per
request (the steadier figures on a loaded machine).

    .venv/bin/python bench/request_read.py 1048576 1000     # 1 MiB requests (Produce-sized)
    .venv/bin/python bench/request_read.py 200 200000       # small pipelined requests
    .venv/bin/python bench/request_read.py 200 200000 --metrics   # with the request metrics on

Run it with PYTHONPATH pointing at another checkout to compare (the script works against a
KafkaServer with or without a memory pool)."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing as mp
import resource
import socket
import struct
import sys
import threading
import time

import uvloop

from broker.server import KafkaServer


async def handler(ctx, body):
    return [b"0123456789"]


def client(port: int, size: int, n: int, q) -> None:
    hdr = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    frame = struct.pack(">i", size) + hdr + b"\x00" * (size - len(hdr))
    per = max(1, 65536 // len(frame))
    s = socket.create_connection(("127.0.0.1", port))
    done = []

    def reader() -> None:
        need, got, buf = n * 14, 0, bytearray(1 << 20)
        while got < need:
            k = s.recv_into(buf)
            if not k:
                break
            got += k
        done.append(time.perf_counter())

    t = threading.Thread(target=reader)
    t.start()
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        k = min(per, n - sent)
        s.sendall(frame * k)
        sent += k
    t.join()
    q.put(done[0] - t0)
    s.close()


async def main(size: int, n: int) -> None:
    kw = {}
    if "memory_pool" in inspect.signature(KafkaServer.__init__).parameters:
        from broker.memory_pool import RequestMemoryPool
        kw["memory_pool"] = RequestMemoryPool(256 * 1024 * 1024)
    srv = KafkaServer("PLAINTEXT", "127.0.0.1", 0, handler, max_request_size=100 << 20, **kw)
    if "--metrics" in sys.argv:
        from broker.metrics import BrokerMetrics
        srv.metrics = BrokerMetrics(1)
    await srv.start()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    f0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
    proc = ctx.Process(target=client, args=(srv.port, size, n, q))
    proc.start()
    while proc.is_alive():
        await asyncio.sleep(0.005)
    cpu, faults = time.process_time() - c0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    dt = q.get()
    print(f"{size} B x {n}: {n * size / dt / 1e6:.0f} MB/s, {n / dt:.0f} req/s, "
          f"server CPU {cpu / n * 1e6:.1f} us/req, {faults / n:.1f} page faults/req")
    await srv.close()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), int(sys.argv[2])))
