"""The bounds guard in front of the native decoder."""

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, ApiKey
from broker.protocol.guard import check_bounds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Bodies that made kio's native reader abort the process (huge preallocated arrays).
CRASHERS = [
    (33, 2, "889fa3ab125e4e657b2c42f5e65a707a16e4"),
    (23, 4, "1ab6a736a2d4fc9244481f107bdaa3fd7b1658cc1169e526054b6dc46adf1e0b9a9dc20b"),
    (1, 14, "5c8b8ed8cdb981af94079e4e72ae212713e99424ade1d3377bd7cdd9c4555de34a28"),
]


@pytest.mark.parametrize("api,version,hexbody", CRASHERS)
def test_hostile_lengths_are_rejected_before_the_native_decoder(api, version, hexbody):
    code = ("from broker.protocol import codec\n"
            f"try:\n    codec.decode_request({api}, {version}, bytes.fromhex('{hexbody}'), 0)\n"
            "except codec.FramingError:\n    print('rejected')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip() == "rejected"


CASES = [(k, v) for k, (lo, hi) in sorted(SUPPORTED.items()) if k != ApiKey.PRODUCE for v in range(lo, hi + 1)]


@pytest.mark.parametrize("api,version", CASES, ids=[f"{ApiKey(k).name}-v{v}" for k, v in CASES])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_guard_accepts_every_well_formed_request(api, version, data):
    req = data.draw(st.from_type(codec.request_type(api, version)))
    check_bounds(type(req), codec.encode(req))


def test_nullable_struct_is_one_byte_when_null_and_is_walked_when_present():
    # DescribeTopicPartitions v0's cursor: int8 -1 for null, 1 then the struct
    from broker.protocol import codec
    for cursor in (None, {"topic_name": "a", "partition_index": 3}):
        req = codec.build(codec.request_type(75, 0), {"topics": [], "response_partition_limit": 10, "cursor": cursor})
        raw = codec.encode(req)
        assert codec.decode_request(75, 0, raw, 0).cursor == (None if cursor is None else req.cursor)
        with pytest.raises(codec.FramingError):
            codec.decode_request(75, 0, raw[:-2], 0)
