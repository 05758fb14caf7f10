"""IncrementalAlterConfigs on topics (controller/topics.py alter_topic_configs)."""

from __future__ import annotations

from controller_testkit import apply, cluster, with_topic

from controller.topics import alter_topic_configs

APPEND, SUBTRACT = 2, 3


def _policy_after(configs: dict[str, str], op: int, value: str) -> str | None:
    image = with_topic(cluster(), "t", {0: (1, 2, 3)}, configs)
    image = apply(image, alter_topic_configs(image, "t", [("cleanup.policy", op, value)]))
    return dict(image.topic_config("t")).get("cleanup.policy")


def test_append_to_a_key_the_topic_does_not_set_starts_from_its_default():
    """Kafka's prepareIncrementalConfigs: APPEND compact to an unset cleanup.policy gives
    delete,compact (krafty gave compact, and DeleteRecords on the topic then failed)."""
    assert _policy_after({}, APPEND, "compact") == "delete,compact"
    assert _policy_after({"cleanup.policy": "compact"}, APPEND, "delete") == "compact,delete"


def test_subtract_from_the_default_and_from_a_set_value():
    assert _policy_after({}, SUBTRACT, "delete") is None  # nothing left: back to the default
    assert _policy_after({"cleanup.policy": "delete,compact"}, SUBTRACT, "delete") == "compact"
