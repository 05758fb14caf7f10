"""The krafty command line as a whole: every verb answers --help, --log-level works before any
verb, a verb whose modules come with an extra says which one in one line, and every network
verb says in one line (exit code 1) that no broker answers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from krafty import cli

NETWORK_VERBS = {
    "topics": ["--list"], "get-offsets": [], "console-consumer": ["--topic", "t"],
    "console-producer": ["--topic", "t"], "configs": ["--describe", "--entity-type", "topics", "--entity-name", "t"],
    "acls": ["--list"], "features": ["describe"], "metadata-quorum": ["describe", "--status"],
    "consumer-groups": ["--list"], "transactions": ["list"], "log-dirs": ["--describe"],
    "leader-election": ["--election-type", "preferred", "--all-topic-partitions"],
}


@pytest.mark.parametrize("verb", sorted(cli.VERBS))
def test_every_verb_answers_help(verb, capsys, monkeypatch):
    if verb == "chaos":
        pytest.importorskip("confluent_kafka")
    with pytest.raises(SystemExit) as e:
        cli.main([verb, "--help"])
    assert e.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_cluster_health_and_the_verb_list(capsys):
    with pytest.raises(SystemExit):
        cli.main(["cluster", "health", "--help"])
    assert "rpk cluster health" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(verb in out for verb in cli.VERBS) and "cluster" in out


def test_log_level_goes_before_any_verb(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--log-level", "DEBUG", "topics", "--help"])
    with pytest.raises(SystemExit):
        cli.main(["--log-level=warn", "dump-log", "--help"])
    assert cli.main(["--log-level", "LOUD", "topics", "--list"]) == 2
    assert "--log-level 'LOUD': expected one of" in capsys.readouterr().err


def test_a_verb_whose_extra_is_missing_says_which_extra(monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "chaos" or m.startswith("chaos.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # as in a plain `pip install krafty`
    assert cli.main(["chaos", "run", "--help"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["krafty chaos needs the 'chaos' extra (confluent_kafka is not installed): "
                   "pip install 'krafty[chaos]'"]
    for name in [m for m in sys.modules if m == "mirror" or m.startswith("mirror.")]:
        monkeypatch.delitem(sys.modules, name)
    assert cli.main(["mirror", "mm2.properties"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "krafty mirror needs the 'mirror' extra (confluent_kafka is not installed): pip install 'krafty[mirror]'"]


@pytest.mark.parametrize("verb", sorted(NETWORK_VERBS))
def test_no_broker_answering_is_one_line_and_exit_1(verb):
    from tests.integration.krafty_node import free_port

    p = subprocess.run([sys.executable, "-m", "krafty", verb, "--bootstrap-server", f"127.0.0.1:{free_port()}",
                        *NETWORK_VERBS[verb]], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "cannot connect to any --bootstrap-server" in p.stderr, p.stderr


def test_console_tools_say_which_client_properties_they_do_not_use(capsys):
    from tests.integration.krafty_node import free_port

    bs = f"127.0.0.1:{free_port()}"
    assert cli.main(["console-producer", "--bootstrap-server", bs, "--topic", "t", "--producer-property",
                     "buffer.memory=1", "--producer-property", "acks=1"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "WARN krafty console-producer does not use the property 'buffer.memory'"
    assert err[1].startswith("Error: cannot connect") and len(err) == 2
    assert cli.main(["console-consumer", "--bootstrap-server", bs, "--topic", "t", "--consumer-property",
                     "fetch.min.bytes=1"]) == 1
    assert "WARN krafty console-consumer does not use the property 'fetch.min.bytes'" in capsys.readouterr().err
    assert cli.main(["console-producer", "--bootstrap-server", bs, "--topic", "t", "--producer-property",
                     "linger.ms=soon"]) == 2
    assert "property linger.ms='soon' is not a number" in capsys.readouterr().err
