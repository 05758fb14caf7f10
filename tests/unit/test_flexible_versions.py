"""The request/response header versions follow each API's first flexible version (KIP-482): the
table in broker/protocol/apis.py must agree with the message specs (kio's generated types) for every
version served. AlterReplicaLogDirs v2 was missing from it: kafka-python's request was read one
byte off (its header's tag buffer taken for the body) and the connection closed."""

from broker.protocol import codec
from broker.protocol.apis import SUPPORTED, is_flexible


def test_first_flexible_versions_match_the_message_specs():
    wrong = []
    for api, (lo, hi) in SUPPORTED.items():
        for v in range(lo, hi + 1):
            spec = bool(codec.request_type(api, v).__flexible__)
            if is_flexible(api, v) != spec:
                wrong.append((int(api), v, spec))
    assert not wrong, f"(api key, version, flexible in the spec): {wrong}"
