"""krafty's Kafka-style tools over a SASL_SSL listener, with --command-config as a Kafka user
writes it (security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location)."""

from __future__ import annotations

from tests.security.conftest import USERS, run_cli


def test_topics_console_tools_get_offsets_and_health_over_sasl_ssl(secure_node, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     f"ssl.truststore.location={secure_node.ca.ca_cert}\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     f'username="alice" password="{USERS["alice"]}";\n')
    conn = ["--bootstrap-server", secure_node.bootstrap("SASL_SSL"), "--command-config", str(props)]

    def ok(*args, stdin=None):
        import subprocess
        import sys

        from tests.security.conftest import REPO
        res = subprocess.run([sys.executable, "-m", "krafty", *args], cwd=REPO, capture_output=True, text=True,
                             input=stdin, timeout=90)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        return res.stdout

    assert ok("topics", *conn, "--create", "--topic", "secure-cli", "--partitions", "2").strip() == \
        "Created topic secure-cli."
    assert "secure-cli" in ok("topics", *conn, "--list").split()
    ok("console-producer", *conn, "--topic", "secure-cli", "--property", "parse.key=true", stdin="k\tv\n")
    assert ok("console-consumer", *conn, "--topic", "secure-cli", "--from-beginning", "--max-messages", "1",
              "--property", "print.key=true") == "k\tv\n"
    assert sum(int(x.rsplit(":", 1)[1]) for x in ok("get-offsets", *conn, "--topic", "secure-cli").split()) == 1
    assert "Healthy:" in ok("cluster", "health", *conn)

    # the wrong password: one line, exit code 1
    props.write_text(props.read_text().replace(USERS["alice"], "wrong"))
    res = run_cli("topics", *conn, "--list")
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
