"""Responses are typed (DESIGN.md, "Typed messages"): a handler's dict that misspells a field or
forgets one is an error, never a zero-filled success."""

from __future__ import annotations

import pytest

from broker.protocol import codec
from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode


def test_a_misspelt_field_is_rejected():
    with pytest.raises(codec.MessageBuildError, match="eror_code"):
        codec.build_response(ApiKey.HEARTBEAT, 4, {"throttle_time": 0, "eror_code": 0})


def test_a_misspelt_nested_field_is_rejected():
    with pytest.raises(codec.MessageBuildError, match="partiton_index"):
        codec.build_response(ApiKey.OFFSET_COMMIT, 8, {"throttle_time": 0, "topics": [
            {"name": "t", "partitions": [{"partiton_index": 0, "error_code": 0}]}]})


def test_a_missing_field_is_rejected():
    with pytest.raises(codec.MessageBuildError, match="error_code is missing"):
        codec.build_response(ApiKey.HEARTBEAT, 4, {"throttle_time": 0})


def test_fields_of_other_versions_are_dropped_and_spec_defaults_kept():
    # record_errors and error_message exist from Produce v8 on; one handler serves every version
    r = codec.build_response(ApiKey.PRODUCE, 3, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}]})
    assert r.responses[0].partition_responses[0].base_offset == 5
    assert r.throttle_time.total_seconds() == 0  # the spec's default


def test_null_for_a_field_nullable_only_in_later_versions_is_its_empty_value():
    # JoinGroup's protocol_name is nullable from v7; Kafka writes "" before
    base = {"throttle_time": 0, "error_code": 25, "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "member_id": "", "members": [], "skip_assignment": False}
    assert codec.build_response(ApiKey.JOIN_GROUP, 5, base).protocol_name == ""
    assert codec.build_response(ApiKey.JOIN_GROUP, 7, base).protocol_name is None


def test_error_responses_stay_lenient():
    r = codec.error_response(ApiKey.OFFSET_COMMIT, 8, ErrorCode.UNKNOWN_SERVER_ERROR)
    assert r.topics == ()


async def test_a_handler_that_misspells_a_field_answers_unknown_server_error(node):
    async def buggy_heartbeat(ctx, body, ver):
        return {"throttle_time": 0, "eror_code": 0}  # the bug: error_code misspelt

    node.broker.apis.handlers[ApiKey.HEARTBEAT] = buggy_heartbeat
    c = KafkaConnection("127.0.0.1", node.port)
    try:
        r = await c.request(ApiKey.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                                  "group_instance_id": None})
    finally:
        c.close()
    assert int(r.error_code) == ErrorCode.UNKNOWN_SERVER_ERROR
