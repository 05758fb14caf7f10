"""Regenerate the protobuf / gRPC stubs: ``python -m proto.generate`` (needs grpcio-tools).

The generated modules import each other package-relatively (``from proto import x_pb2``).
"""

from __future__ import annotations

import pathlib
import re
import sys

from grpc_tools import protoc

HERE = pathlib.Path(__file__).resolve().parent
PROTOS = ["raft.proto", "testkv.proto"]  # the quorum's own; other .proto files here belong to other layers


def main() -> int:
    for proto in (HERE / p for p in PROTOS):
        rc = protoc.main(["protoc", f"-I{HERE}", f"--python_out={HERE}", f"--grpc_python_out={HERE}", str(proto)])
        if rc != 0:
            print(f"protoc failed on {proto.name}", file=sys.stderr)
            return rc
    for gen in (HERE / f"{p[:-6]}{suffix}" for p in PROTOS for suffix in ("_pb2.py", "_pb2_grpc.py")):
        text = gen.read_text()
        fixed = re.sub(r"^import (\w+_pb2) as ", r"from proto import \1 as ", text, flags=re.M)
        gen.write_text(fixed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
