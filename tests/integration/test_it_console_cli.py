"""``krafty console-producer``, ``console-consumer`` and ``get-offsets`` as a Kafka user types
kafka-console-producer.sh, kafka-console-consumer.sh and kafka-get-offsets.sh, against a real
node, with a real client (confluent-kafka) on the other side of each."""

from __future__ import annotations

import pytest
from cli_inproc import krafty
from clients import Confluent, Rec
from conftest import create_topic

pytestmark = pytest.mark.krafty_only


def run(verb: str, *args: str, stdin: str | None = None, check: int | None = 0):
    return krafty(verb, *args, stdin=stdin, check=check)


def test_console_producer_keys_headers_and_compression_read_by_a_real_client(broker, topic):
    create_topic(broker, topic, 1)
    run("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--property", "parse.key=true",
        "--property", "key.separator=:", "--property", "parse.headers=true", "--property", "headers.delimiter=|",
        "--property", "headers.separator=;", "--property", "headers.key.separator==", "--property",
        "null.marker=NULL", "--compression-codec", "zstd",
        stdin="h1=a;h2=b|k1:v1\nNULL|NULL:v2\nh3=c|k3:NULL\n")
    got = Confluent().consumer(broker.bootstrap, topic).read(3)
    assert [(r.key, r.value, r.headers) for r in got] == [
        (b"k1", b"v1", [("h1", b"a"), ("h2", b"b")]), (None, b"v2", []), (b"k3", None, [("h3", b"c")])]


def test_console_producer_keys_pick_partitions_as_kafkas_partitioner(broker, topic):
    create_topic(broker, topic, 4)
    lines = "".join(f"key-{i}\tvalue-{i}\n" for i in range(20))
    run("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--property",
        "parse.key=true", "--producer-property", "acks=1", stdin=lines)
    ref = topic + "-ref"
    create_topic(broker, ref, 4)
    Confluent().produce(broker.bootstrap, ref, [Rec(f"key-{i}".encode(), b"x") for i in range(20)], partition=-1,
                        partitioner="murmur2_random")
    for p in range(4):  # librdkafka's murmur2_random partitioner is Kafka's default for keyed records
        assert Confluent().watermarks(broker.bootstrap, topic, p) == Confluent().watermarks(broker.bootstrap, ref, p)


def test_console_producer_stops_at_a_line_without_key_separator(broker, topic):
    create_topic(broker, topic, 1)
    p = run("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--property",
            "parse.key=true", stdin="a\t1\nno-separator\nb\t2\n", check=1)
    assert p.stderr.strip() == "Error: No key separator found on line number 2: 'no-separator'"
    assert Confluent().watermarks(broker.bootstrap, topic, 0) == (0, 1)  # the line before it was sent


def test_console_consumer_prints_kafkas_formatter_columns(broker, topic):
    create_topic(broker, topic, 1)
    Confluent().produce(broker.bootstrap, topic, [Rec(b"k1", b"v1", headers=[("h", b"x")]), Rec(None, b"v2")],
                        partition=0)
    p = run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning",
            "--max-messages", "2", "--property", "print.key=true", "--property", "print.partition=true",
            "--property", "print.offset=true", "--property", "print.headers=true", "--property",
            "print.timestamp=true", "--property", "key.separator= | ")
    lines = p.stdout.splitlines()
    assert [line.split(" | ", 1)[1] for line in lines] == [
        "Partition:0 | Offset:0 | h:x | k1 | v1", "Partition:0 | Offset:1 | NO_HEADERS | null | v2"]
    assert all(line.startswith("CreateTime:") for line in lines)
    assert p.stderr.strip().endswith("Processed a total of 2 messages")
    p = run("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--partition", "0",
            "--offset", "1", "--timeout-ms", "1500")
    assert p.stdout == "v2\n"
    assert "TimeoutException" in p.stderr and "Processed a total of 1 messages" in p.stderr


def test_console_consumer_read_committed_leaves_out_aborted_records(broker, topic):
    from confluent_kafka import Producer

    create_topic(broker, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    p.init_transactions(30)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        p.begin_transaction()
        p.produce(topic, value, partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    args = ["--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning", "--timeout-ms", "1500"]
    assert run("console-consumer", *args, "--isolation-level", "read_committed").stdout == "committed\n"
    assert run("console-consumer", *args).stdout == "aborted\ncommitted\n"


def test_get_offsets(broker, topic):
    create_topic(broker, topic, 3)
    now = 1_700_000_000_000
    Confluent().produce(broker.bootstrap, topic, [Rec(None, b"x", timestamp=now + d) for d in (0, 30, 20, 10)],
                        partition=1)
    out = run("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic).stdout
    assert out.splitlines() == [f"{topic}:0:0", f"{topic}:1:4", f"{topic}:2:0"]
    out = run("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic-partitions", f"{topic}:1-",
              "--time", "-2").stdout
    assert out.splitlines() == [f"{topic}:1:0", f"{topic}:2:0"]
    out = run("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--partitions", "1",
              "--time", "max-timestamp").stdout
    assert out.splitlines() == [f"{topic}:1:1"]  # the record with the highest timestamp
    out = run("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--time", str(now + 15)).stdout
    assert out.splitlines() == [f"{topic}:1:1"]  # the first record at or after the time; none in 0 and 2
    p = run("get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", "no-such-" + topic, check=1)
    assert p.stderr.strip() == "Error: Could not match any topic-partitions with the specified filters"
    p = run("get-offsets", "--bootstrap-server", broker.bootstrap, "--time", "yesterday", check=2)
    assert "Malformed time argument yesterday" in p.stderr


@pytest.mark.parametrize("args, needle", [
    (["--topic", "t", "--include", "x"], "Exactly one of --include/--topic is required."),
    (["--include", "x", "--partition", "0"], "The topic is required when partition is specified."),
    (["--topic", "t", "--offset", "3"], "The partition is required when offset is specified."),
    (["--topic", "t", "--partition", "0", "--offset", "1", "--from-beginning"], "cannot be specified together"),
    (["--topic", "t", "--partition", "0", "--offset", "-4"], "is incorrect"),
    (["--topic", "t", "--partition", "0", "--group", "g"], "group and partition cannot be specified together"),
])
def test_console_consumer_bad_command_lines(args, needle):
    p = run("console-consumer", "--bootstrap-server", "127.0.0.1:1", *args, check=2)
    assert needle in p.stderr, p.stderr


def test_console_producer_reports_a_refused_record_and_goes_on(broker, topic):
    create_topic(broker, topic, 1, {"max.message.bytes": "300"})
    p = run("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--sync",
            stdin="small-1\n" + "x" * 1000 + "\nsmall-2\n", check=1)
    errors = p.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(
        f"ERROR Error when sending message to topic {topic} with key: null, value: 1000 bytes with error: "
        "MESSAGE_TOO_LARGE"), p.stderr
    # the idempotent producer takes a new producer id after the lost batch (else: a sequence gap)
    got = Confluent().consumer(broker.bootstrap, topic).read(2)
    assert [r.value for r in got] == [b"small-1", b"small-2"]
