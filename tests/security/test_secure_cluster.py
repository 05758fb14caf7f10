"""A 3-controller, 3-broker cluster with the controller quorum on mutual TLS (gRPC) and
replication over a SASL_SSL inter-broker listener. One broker is given a wrong inter-broker
password: it must stay out of the ISR while the other two replicate, which shows the
replica fetchers really authenticate on that listener."""

from __future__ import annotations

import socket
import ssl
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, Cluster, wait_until
from tests.integration.krafty_node import free_port
from tests.security.certs import make_ca
from tests.security.conftest import jaas_plain

_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS


def grpc_tls_answers(port: int, ca, cert=None, key=None) -> bool:
    """Whether the controller's gRPC listener speaks HTTP/2 to a TLS client (with or without
    a client certificate): True when it answers the connection preface."""
    ctx = ssl.create_default_context(cafile=str(ca.ca_cert))
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    if cert:
        ctx.load_cert_chain(str(cert), str(key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(_H2_PREFACE)
                head = s.recv(9)
                return len(head) == 9 and head[3] == 4  # the server's SETTINGS frame
    except (ssl.SSLError, ConnectionError, OSError):
        return False


def test_replication_over_sasl_ssl_and_controllers_over_mutual_tls(tmp_path):
    ca = make_ca(tmp_path / "ca")
    keystore = ca.keystore_pem("node", "krafty-node", server=True)  # unencrypted: gRPC needs a plain key
    (tmp_path / "cluster").mkdir()
    c = Cluster(str(tmp_path / "cluster"), overrides=FAST)
    tls = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
           "ssl.truststore.location": str(ca.ca_cert)}
    good_jaas = jaas_plain({"broker": "inter-broker-pw"}, login=("broker", "inter-broker-pw"))
    bad_jaas = jaas_plain({"broker": "inter-broker-pw"}, login=("broker", "WRONG"))
    for name, props in c.configs.items():
        props.update(tls)
        props["listener.name.controller.ssl.client.auth"] = "required"
        if name.startswith("controller"):
            props["listener.security.protocol.map"] = "CONTROLLER:SSL"
            continue
        props["listeners"] += f",INTERNAL://127.0.0.1:{free_port()}"
        props.update({
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": bad_jaas if name == "broker-6" else good_jaas,
        })
    c.start()
    try:
        a = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(a.list_topics(timeout=5).brokers) == 3, 120, "3 brokers registered over TLS gRPC")
        # the controller quorum's gRPC port: TLS with a certificate from the CA, nothing else
        ctrl_port = int(c.configs["controller-1"]["listeners"].rsplit(":", 1)[1])
        client_cert, client_key = ca.issue("grpc-client", "grpc-client")
        assert grpc_tls_answers(ctrl_port, ca, client_cert, client_key)
        assert not grpc_tls_answers(ctrl_port, ca)  # no client certificate
        rogue = make_ca(tmp_path / "rogue-ca")
        assert not grpc_tls_answers(ctrl_port, ca, *rogue.issue("rogue", "rogue"))  # a certificate of another CA
        a.create_topics([NewTopic("secure", num_partitions=1, replica_assignment=[[4, 5, 6]],
                                  config={"min.insync.replicas": "2"})])["secure"].result(60)

        def isr():
            t = a.list_topics("secure", timeout=5).topics["secure"]
            return sorted(t.partitions[0].isrs)
        wait_until(lambda: isr() == [4, 5], 60, "ISR {4,5}: broker 6 cannot authenticate to the leader")
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
        errs = []
        for i in range(200):
            p.produce("secure", value=b"v%d" % i, partition=0, on_delivery=lambda e, m: e and errs.append(e))
        assert p.flush(60) == 0 and not errs
        # the follower with the right password has every record (it fetched them over SASL_SSL)
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "g", "client.rack": "none",
                         "enable.auto.commit": False})
        cons.assign([TopicPartition("secure", 0, 0)])
        got, deadline = [], time.time() + 30
        while len(got) < 200 and time.time() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        cons.close()
        assert got == [b"v%d" % i for i in range(200)]
        time.sleep(2)
        assert isr() == [4, 5]
        log6 = c.log_text("broker-6")
        assert "authentication as broker failed" in log6, log6[-2000:]
        leader_log = c.log_text("broker-4")
        assert "SASL PLAIN authentication from" in leader_log  # the leader refused broker 6
    finally:
        c.shutdown()
