"""meta.properties and the start-up checks of a node's directories (krafty/storage.py, Kafka's
MetaPropertiesEnsemble and Formatter)."""

from __future__ import annotations

import io
import os

import pytest

from common.config import Config
from krafty import storage
from metadata import records as r

CID = "a3JhZnR5LXRlc3Qtbm9kZQ"
OTHER = "VooDHOqVQDmEcPv6VrzhYw"


def cfg(tmp_path, node_id=1, **extra) -> Config:
    props = {"node.id": str(node_id), "process.roles": "broker,controller",
             "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
             "controller.quorum.voters": f"{node_id}@127.0.0.1:9093",
             "log.dirs": f"{tmp_path}/a,{tmp_path}/b", "metadata.log.dir": f"{tmp_path}/meta"}
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return Config(props)


def test_random_uuid_is_a_valid_cluster_id():
    ids = {storage.random_uuid() for _ in range(50)}
    assert len(ids) == 50 and all(storage.check_cluster_id(i) == i for i in ids)
    for bad in ("", "abc", "not-a-uuid-at-all-xxxxxx", CID + "A"):
        with pytest.raises(storage.StorageError, match="valid UUID"):
            storage.check_cluster_id(bad)


def test_random_uuid_never_starts_with_a_dash():
    # as Kafka's Uuid.randomUuid: `--controller-directory-id -Abc...` would be taken for an option
    # (test_replace_a_controller_without_downtime failed so once: the id of controller 1 began with "-")
    import uuid

    class Clock:
        def __init__(self):
            self.ids = iter([uuid.UUID(bytes=b"\xf8" + bytes(range(1, 16))), uuid.UUID(bytes=b"\x10" + bytes(range(1, 16)))])

        def uuid4(self):
            return next(self.ids)

    assert storage.base64.urlsafe_b64encode(b"\xf8" + bytes(range(1, 16))).startswith(b"-")
    assert storage.random_uuid(Clock()) == storage.base64.urlsafe_b64encode(
        b"\x10" + bytes(range(1, 16))).decode().rstrip("=")


def test_format_writes_meta_properties_and_bootstrap(tmp_path):
    c = cfg(tmp_path)
    out = io.StringIO()
    storage.format_directories(c, CID, out=out)
    dirs = [f"{tmp_path}/a", f"{tmp_path}/b", f"{tmp_path}/meta"]
    metas = [storage.read_meta(d) for d in dirs]
    assert all(m["version"] == "1" and m["cluster.id"] == CID and m["node.id"] == "1" for m in metas)
    assert len({m["directory.id"] for m in metas}) == 3
    assert f"Formatting metadata directory {tmp_path}/meta with metadata.version 4.0-IV3." in out.getvalue()
    assert f"Formatting data directory {tmp_path}/a with metadata.version 4.0-IV3." in out.getvalue()
    assert storage.read_bootstrap(f"{tmp_path}/meta") == [r.FeatureLevelRecord("metadata.version", 25),
                                                          r.FeatureLevelRecord("share.version", 1),
                                                          r.FeatureLevelRecord("transaction.version", 2)]
    with pytest.raises(storage.StorageError, match="already formatted. Use --ignore-formatted"):
        storage.format_directories(c, CID, out=out)
    out = io.StringIO()
    storage.format_directories(c, CID, ignore_formatted=True, out=out)
    assert out.getvalue() == "All of the log directories are already formatted.\n"
    with pytest.raises(storage.StorageError, match="Invalid cluster.id"):
        storage.format_directories(c, OTHER, ignore_formatted=True, out=out)
    assert storage.check_directories(c) == CID


def test_unformatted_directories_refuse_to_start_unless_cluster_id_is_configured(tmp_path):
    with pytest.raises(storage.StorageError, match="No `meta.properties` found .*krafty storage format"):
        storage.check_directories(cfg(tmp_path))
    assert not os.path.exists(f"{tmp_path}/meta/meta.properties")
    assert storage.check_directories(cfg(tmp_path, cluster_id=CID)) == CID  # the launchers' way: formatted now
    assert storage.read_meta(f"{tmp_path}/b")["cluster.id"] == CID
    assert storage.check_directories(cfg(tmp_path)) == CID  # and from then on without the key


def test_another_cluster_or_node_is_refused(tmp_path):
    storage.format_directories(cfg(tmp_path), CID, out=io.StringIO())
    with pytest.raises(storage.StorageError, match=f"Expected {OTHER}, but read {CID}"):
        storage.check_directories(cfg(tmp_path, cluster_id=OTHER))
    with pytest.raises(storage.StorageError, match="Stored node id 1 doesn't match previous node id 2"):
        storage.check_directories(cfg(tmp_path, node_id=2))


def test_an_empty_log_dir_is_formatted_from_the_others_and_old_files_get_a_directory_id(tmp_path):
    storage.format_directories(cfg(tmp_path), CID, out=io.StringIO())
    os.remove(f"{tmp_path}/b/meta.properties")  # a new, empty log dir added to log.dirs
    storage.write_meta(f"{tmp_path}/a", {"version": "1", "cluster.id": CID, "node.id": "1"})  # older krafty
    assert storage.check_directories(cfg(tmp_path)) == CID
    metas = [storage.read_meta(f"{tmp_path}/{d}") for d in ("a", "b", "meta")]
    assert all(m["cluster.id"] == CID for m in metas) and len({m["directory.id"] for m in metas}) == 3


def test_info_reports_problems(tmp_path):
    out = io.StringIO()
    assert storage.info(cfg(tmp_path), out=out) == 1
    assert "Found problems:" in out.getvalue() and f"{tmp_path}/a does not exist" in out.getvalue()
    storage.format_directories(cfg(tmp_path), CID, out=io.StringIO())
    out = io.StringIO()
    assert storage.info(cfg(tmp_path), out=out) == 0
    assert out.getvalue().startswith("Found log directories:\n")
    assert f"cluster.id={CID}" in out.getvalue() and "node.id=1" in out.getvalue()


def server_properties(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nprocess.roles=broker,controller\nlisteners=PLAINTEXT://127.0.0.1:9092,"
                     f"CONTROLLER://127.0.0.1:9093\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                     f"log.dirs={tmp_path}/a\nmetadata.log.dir={tmp_path}/meta\n")
    return props


@pytest.mark.parametrize("args, expected", [
    # release 4.0: transaction.version 2, as Kafka's; share groups on (krafty's latest release)
    ([], {"metadata.version": 25, "transaction.version": 2, "share.version": 1}),
    (["--feature", "share.version=0"], {"metadata.version": 25, "transaction.version": 2}),
    (["--release-version", "3.9"], {"metadata.version": 21}),  # before 4.0-IV2: transaction.version 0
    (["--release-version", "4.0-IV1"], {"metadata.version": 23}),
    (["--release-version", "4.0-IV2"], {"metadata.version": 24, "transaction.version": 2}),
    (["--feature", "transaction.version=1"], {"metadata.version": 25, "transaction.version": 1, "share.version": 1}),
    (["--feature", "transaction.version=0"], {"metadata.version": 25, "share.version": 1}),
    (["--release-version", "3.9", "--feature", "transaction.version=2"], {"metadata.version": 21,
                                                                         "transaction.version": 2}),
])
def test_format_finalizes_the_release_default_feature_levels(tmp_path, args, expected):
    props = server_properties(tmp_path)
    assert storage.main(["format", "--config", str(props), "--cluster-id", CID, *args]) == 0
    got = {rec.name: rec.feature_level for rec in storage.read_bootstrap(f"{tmp_path}/meta")}
    assert got == expected


@pytest.mark.parametrize("feature, message", [
    ("transaction.version=3", "supports levels 0-2, not 3"),
    ("group.version=1", "unknown feature 'group.version'"),
    ("metadata.version=25", "use --release-version"),
    ("transaction.version", "is not NAME=LEVEL"),
])
def test_format_refuses_a_bad_feature_level(tmp_path, capsys, feature, message):
    props = server_properties(tmp_path)
    assert storage.main(["format", "--config", str(props), "--cluster-id", CID, "--feature", feature]) == 1
    assert message in capsys.readouterr().err
    assert not os.path.exists(f"{tmp_path}/meta/meta.properties")
