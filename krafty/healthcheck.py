"""``krafty healthcheck``: is a node ready to serve? Meant for container health checks.

    krafty healthcheck broker HOST:PORT
    krafty healthcheck controller HOST:PORT --node-id N
    krafty healthcheck ready [URL]        (default http://127.0.0.1:9404/ready)

A broker is healthy when its listener answers ApiVersions without error. A controller is
healthy when the quorum it belongs to has a leader and that leader counts the node among
its voters and has heard from it recently (or the node is the leader itself). ``ready`` asks
the node's own metrics endpoint (krafty.metrics.port): a broker registered, unfenced and
accepting clients, a controller in the quorum. Exit code 0 when healthy, 1 otherwise, with one
line on stderr saying why.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys

from common.clock import SYSTEM

_API_VERSIONS = 18


def _split_hostport(s: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{s!r} is not of the form HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def check_broker(addr: str, timeout_s: float = 5.0) -> str:
    """Sends ApiVersions v0 and checks the answer; returns a one-line summary, raises on failure.

    Request v0: size int32 | api_key int16 | api_version int16 | correlation_id int32 |
    client_id string (int16 length). Response v0: size int32 | correlation_id int32 |
    error_code int16 | [api_key int16, min_version int16, max_version int16] (int32 count)."""
    host, port = _split_hostport(addr)
    client_id = b"krafty-healthcheck"
    correlation = SYSTEM.rng.getrandbits(31)
    body = struct.pack(">hhih", _API_VERSIONS, 0, correlation, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        if not 10 <= size <= 1 << 20:
            raise ConnectionError(f"implausible ApiVersions response size {size}")
        resp = _recv_exact(s, size)
    corr, error, count = struct.unpack(">ihi", resp[:10])
    if corr != correlation:
        raise ConnectionError(f"correlation id {corr} does not match the request's {correlation}")
    if error != 0:
        raise ConnectionError(f"ApiVersions answered with error code {error}")
    keys = {struct.unpack(">h", resp[10 + 6 * i:12 + 6 * i])[0] for i in range(count)}
    for needed in (0, 1, 3):  # Produce, Fetch, Metadata
        if needed not in keys:
            raise ConnectionError(f"the broker does not list API key {needed}")
    return f"broker at {host}:{port} answers ApiVersions ({count} APIs)"


def check_controller(addr: str, node_id: int, max_lag_ms: int = 10_000, timeout_s: float = 5.0) -> str:
    """Asks the quorum (through ``addr``) whether ``node_id`` is a voter in good standing."""
    from raft.cli import describe_quorum

    resp = describe_quorum(addr, timeout_s)
    if resp.leader_id < 0:
        raise ConnectionError("the quorum has no leader")
    voters = {v.replica_id: v for v in resp.voters}
    if node_id not in voters:
        raise ConnectionError(f"node {node_id} is not a voter of the quorum (voters: {sorted(voters)})")
    if resp.leader_id == node_id:
        return f"node {node_id} is the quorum leader (epoch {resp.leader_epoch})"
    me = voters[node_id]
    lag_ms = SYSTEM.wall_ms() - me.last_fetch_timestamp if me.last_fetch_timestamp >= 0 else None
    if lag_ms is None or lag_ms > max_lag_ms:
        seen = "never" if lag_ms is None else f"{lag_ms} ms ago"
        raise ConnectionError(f"leader {resp.leader_id} last heard from node {node_id} {seen}")
    return (f"node {node_id} follows leader {resp.leader_id} (epoch {resp.leader_epoch}), "
            f"log end offset {me.log_end_offset}, high watermark {resp.high_watermark}")


def check_ready(url: str, timeout_s: float = 5.0) -> str:
    """GET the node's /ready: 200 is ready; otherwise the reason it gives."""
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        raise ConnectionError(f"{url} answered {e.code}: {e.read().decode(errors='replace').strip()}") from None
    except urllib.error.URLError as e:
        raise ConnectionError(f"{url}: {e.reason}") from None
    try:
        return f"{url}: {json.loads(body)}"
    except ValueError:
        return f"{url}: {body[:200]!r}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="krafty healthcheck", description="Exit 0 when a node is ready to serve.")
    sub = ap.add_subparsers(dest="role", required=True)
    b = sub.add_parser("broker", help="the broker answers ApiVersions")
    b.add_argument("address", metavar="HOST:PORT")
    c = sub.add_parser("controller", help="the controller is a voter the quorum leader hears from")
    c.add_argument("address", metavar="HOST:PORT", help="the controller's own listener")
    c.add_argument("--node-id", type=int, required=True)
    c.add_argument("--max-lag-ms", type=int, default=10_000,
                   help="unhealthy when the leader has not heard from the node for this long")
    r = sub.add_parser("ready", help="the node's metrics endpoint says it is ready (GET /ready answers 200)")
    r.add_argument("url", nargs="?", default="http://127.0.0.1:9404/ready")
    for p in (b, c, r):
        p.add_argument("--timeout", type=float, default=5.0, help="seconds")
    args = ap.parse_args(argv)
    try:
        if args.role == "broker":
            msg = check_broker(args.address, args.timeout)
        elif args.role == "ready":
            msg = check_ready(args.url, args.timeout)
        else:
            msg = check_controller(args.address, args.node_id, args.max_lag_ms, args.timeout)
    except (OSError, ValueError, struct.error) as e:
        print(f"unhealthy: {e}", file=sys.stderr)
        return 1
    print(f"healthy: {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
