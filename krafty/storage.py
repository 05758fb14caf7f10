"""Cluster identity on disk: ``meta.properties`` in every data directory, and the verbs of
``krafty storage`` (Kafka's ``kafka-storage.sh``: ``random-uuid``, ``format``, ``info``).

Every log dir and the metadata log dir of a node hold ``meta.properties`` (Kafka's version 1):

    version=1
    cluster.id=<the cluster's id, a base64url UUID>
    node.id=<this node's id>
    directory.id=<this directory's own id>

``krafty storage format`` writes it (and, in the metadata log dir, ``bootstrap.checkpoint``: the
records the first active controller writes, e.g. ``metadata.version``). A node starts only on
formatted directories of its own node id and cluster (``check_directories``); with the krafty
key ``cluster.id`` in its configuration it formats its unformatted directories itself on first
start, as Kafka's container image does with CLUSTER_ID (the launchers use that)."""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import os
import sys
import uuid
from collections.abc import Iterable

from common.clock import SYSTEM, Clock
from common.config import Config, ConfigError

META_PROPERTIES = "meta.properties"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


class StorageError(RuntimeError):
    """The directories do not allow the node to start (or a format to proceed); says why."""


def random_uuid(clock: Clock = SYSTEM) -> str:
    """A random id as Kafka prints its Uuids (base64url, no padding, 22 characters). As Kafka's
    Uuid.randomUuid, never one that starts with a dash: a command line would take it for an
    option (``--controller-directory-id -x...``)."""
    while True:
        u = clock.uuid4().bytes
        if u[:8] != bytes(8):  # Kafka reserves the ids with a zero high half (UNASSIGNED, LOST, ...)
            s = base64.urlsafe_b64encode(u).decode().rstrip("=")
            if not s.startswith("-"):
                return s


def check_cluster_id(cluster_id: str) -> str:
    """Kafka's rule: a cluster id is a base64url-encoded 16-byte UUID."""
    try:
        raw = base64.urlsafe_b64decode(cluster_id + "=" * (-len(cluster_id) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16 or not cluster_id or len(cluster_id) != 22:
        raise StorageError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: a cluster id is a "
                           "base64url-encoded 16-byte UUID of 22 characters (make one with `krafty storage "
                           "random-uuid`)")
    return cluster_id


def directories(cfg: Config) -> list[str]:
    """The node's data directories: its log dirs (a broker's) and the metadata log dir. A
    controller-only node uses only the metadata log dir (it locks no other, node.py)."""
    log_dirs = cfg["log.dirs"] if "broker" in cfg["process.roles"] else []
    return [os.path.abspath(d) for d in dict.fromkeys([*log_dirs, cfg["metadata.log.dir"]])]


def read_meta(directory: str) -> dict[str, str] | None:
    """The properties of ``directory``/meta.properties; None if the file does not exist."""
    path = os.path.join(directory, META_PROPERTIES)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e.strerror}") from None
    out = {}
    for line in text.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep and not k.startswith(("#", "!")):
            out[k.strip()] = v.strip()
    return out


def directory_ids(dirs: Iterable[str]) -> dict[str, uuid.UUID]:
    """Each formatted directory's ``directory.id`` (Kafka's base64 form) as a UUID, by absolute path."""
    out = {}
    for d in dirs:
        meta = read_meta(d) or {}
        s = meta.get("directory.id")
        if s:
            with contextlib.suppress(ValueError, binascii.Error):
                out[os.path.abspath(d)] = uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
    return out


def write_meta(directory: str, props: dict[str, str]) -> None:
    """Atomically (a temporary file, fsync, rename, fsync of the directory)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, META_PROPERTIES)
    body = "#\n#Written by krafty\n" + "".join(f"{k}={props[k]}\n" for k in
                                              ("version", "cluster.id", "node.id", "directory.id") if k in props)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _verify(directory: str, meta: dict[str, str], node_id: int, cluster_id: str | None) -> None:
    if meta.get("version") != "1":
        raise StorageError(f"{directory}/{META_PROPERTIES} has version {meta.get('version')!r}: krafty reads "
                           "version 1 (KRaft); was it written by a ZooKeeper-mode Kafka?")
    if meta.get("node.id") != str(node_id):
        raise StorageError(f"Stored node id {meta.get('node.id')} doesn't match previous node id {node_id} in "
                           f"{directory}/{META_PROPERTIES}. If you moved your data, make sure your configured node "
                           "id matches. If you intend to create a new node, you should remove all data in your "
                           "data directories.")
    if cluster_id is not None and meta.get("cluster.id") != cluster_id:
        raise StorageError(f"Invalid cluster.id in: {directory}/{META_PROPERTIES}. Expected {cluster_id}, but read "
                           f"{meta.get('cluster.id')}. This directory belongs to another cluster.")


def check_directories(cfg: Config, clock: Clock = SYSTEM) -> str:
    """At start-up: every directory is formatted for this node and one cluster (Kafka's
    MetaPropertiesEnsemble checks); returns the cluster id. Unformatted log dirs next to a
    formatted metadata dir are formatted from it (as Kafka does); with ``cluster.id`` in the
    configuration, a node whose directories are all unformatted formats them. A directory
    without a directory.id gets one (written by an older krafty)."""
    node_id = cfg["node.id"]
    dirs = directories(cfg)
    metas = {d: read_meta(d) for d in dirs}
    wanted = cfg["cluster.id"]
    if wanted is not None:
        check_cluster_id(wanted)
    cluster_id = wanted
    for d, meta in metas.items():
        if meta is not None:
            _verify(d, meta, node_id, cluster_id)
            cluster_id = meta.get("cluster.id")
    if cluster_id is None:
        meta_dir = dirs[-1] if cfg["metadata.log.dir"] else dirs[0]
        raise StorageError(f"No `{META_PROPERTIES}` found in {meta_dir} (have you run `krafty storage format` to "
                           "format the directory?). Run `krafty storage format --config FILE --cluster-id ID` "
                           "(an id from `krafty storage random-uuid`), or set `cluster.id` in the configuration to "
                           "have the node format its empty directories on first start.")
    metadata_dir = os.path.abspath(cfg["metadata.log.dir"])
    if metas.get(metadata_dir) is None and wanted is None:
        raise StorageError(f"No `{META_PROPERTIES}` found in the metadata log directory {metadata_dir} (have you run "
                           "`krafty storage format` to format the directory?)")
    seen: dict[str, str] = {}
    for d, meta in metas.items():
        if meta is None:
            meta = {"version": "1", "cluster.id": cluster_id, "node.id": str(node_id)}
            if d == metadata_dir:
                write_bootstrap(d, default_bootstrap_records())
        if not meta.get("directory.id") or meta["directory.id"] in seen:
            meta = {**meta, "directory.id": random_uuid(clock)}
        elif meta == metas[d]:
            seen[meta["directory.id"]] = d
            continue
        write_meta(d, meta)
        seen[meta["directory.id"]] = d
    return cluster_id


# --- the bootstrap checkpoint -------------------------------------------------------------
def _feature_levels(items: list[str]) -> dict[str, int]:
    """``--feature NAME=LEVEL`` of storage format, checked against the supported levels (Kafka's
    kafka-storage format --feature; metadata.version comes from --release-version)."""
    from metadata.features import KRAFT_VERSION, SUPPORTED_FEATURES

    out = {}
    for item in items:
        name, sep, level = (x.strip() for x in item.partition("="))
        if not sep or not level.isdigit():
            raise StorageError(f"--feature {item!r} is not NAME=LEVEL")
        if name in ("metadata.version", KRAFT_VERSION):
            raise StorageError(f"--feature cannot set {name} (use --release-version for metadata.version; "
                               "kraft.version follows --standalone/--initial-controllers)")
        if name not in SUPPORTED_FEATURES:
            raise StorageError(f"unknown feature {name!r} (known: {', '.join(sorted(SUPPORTED_FEATURES))})")
        lo, hi = SUPPORTED_FEATURES[name]
        if not lo <= int(level) <= hi:
            raise StorageError(f"feature {name} supports levels {lo}-{hi}, not {level}")
        out[name] = int(level)
    return out


def default_bootstrap_records() -> list:
    from metadata.features import bootstrap_feature_records

    return bootstrap_feature_records()


def write_bootstrap(directory: str, records: Iterable) -> None:
    """The records the first active controller of a new cluster writes (metadata.version...),
    one encoded metadata record per line (krafty's form of Kafka's bootstrap.checkpoint)."""
    from metadata import records as r

    path = os.path.join(directory, BOOTSTRAP_CHECKPOINT)
    os.makedirs(directory, exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        for rec in records:
            f.write(r.encode(rec) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_bootstrap(directory: str) -> list:
    """The bootstrap records of a metadata log dir; the defaults when there is no file (a
    directory formatted by an older krafty)."""
    from metadata import records as r

    try:
        with open(os.path.join(directory, BOOTSTRAP_CHECKPOINT), "rb") as f:
            return [r.decode(line) for line in f.read().splitlines() if line.strip()]
    except FileNotFoundError:
        return default_bootstrap_records()


# --- krafty storage ---------------------------------------------------------------------------
def parse_initial_controllers(text: str) -> list:
    """``--initial-controllers 1@host:port:DIRID,2@...`` (Kafka's) -> voters."""
    import re

    from raft.core import Voter

    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        m = re.fullmatch(r"(\d+)@(\[[^\]]+\]|[^:@]+):(\d+):([A-Za-z0-9_-]{22})", item)
        if not m:
            raise StorageError(f"--initial-controllers: {item!r} is not of the form id@host:port:directory-id "
                               "(a directory id from `krafty storage random-uuid`)")
        out.append(Voter(int(m.group(1)), m.group(4), m.group(2).strip("[]"), int(m.group(3))))
    if len({v.id for v in out}) != len(out):
        raise StorageError("--initial-controllers: a controller id is listed twice")
    return out


def _dynamic_quorum(cfg: Config, standalone: bool, initial_controllers: str | None) -> list | None:
    """The initial voters of a quorum formatted for KIP-853 (kraft.version 1), or None."""
    if not standalone and not initial_controllers:
        return None
    if standalone and initial_controllers:
        raise StorageError("--standalone and --initial-controllers cannot be used together")
    if cfg["controller.quorum.voters"]:
        raise StorageError("You cannot specify controller.quorum.voters and format the node with "
                           "--initial-controllers or --standalone. If you want to use dynamic quorum, please remove "
                           "controller.quorum.voters and specify controller.quorum.bootstrap.servers instead.")
    if "controller" not in cfg["process.roles"]:
        raise StorageError("--standalone and --initial-controllers are for controllers (process.roles)")
    if initial_controllers:
        return parse_initial_controllers(initial_controllers)
    from raft.core import Voter

    lst = next((cfg.listener(n) for n in cfg["controller.listener.names"] if cfg.listener(n) is not None), None)
    if lst is None:
        raise StorageError("--standalone: the node has no controller listener in 'listeners'")
    return [Voter(cfg["node.id"], "", lst.host or "localhost", lst.port)]


def format_directories(cfg: Config, cluster_id: str, *, ignore_formatted: bool = False, bootstrap=None,
                       out=sys.stdout, standalone: bool = False, initial_controllers: str | None = None) -> None:
    """``krafty storage format``: meta.properties in every unformatted directory (Kafka's
    Formatter); the bootstrap checkpoint in the metadata log dir, and for a dynamic quorum
    (--standalone / --initial-controllers) its initial voters."""
    check_cluster_id(cluster_id)
    voters = _dynamic_quorum(cfg, standalone, initial_controllers)
    node_id = cfg["node.id"]
    dirs = directories(cfg)
    metas = {d: read_meta(d) for d in dirs}
    formatted = [d for d, m in metas.items() if m is not None]
    for d in formatted:
        _verify(d, metas[d], node_id, cluster_id)
    if formatted and not ignore_formatted:
        raise StorageError(f"Log directory {formatted[0]} is already formatted. Use --ignore-formatted to ignore "
                           "this directory and format the others.")
    empty = [d for d in dirs if metas[d] is None]
    if not empty:
        print("All of the log directories are already formatted.", file=out)
        return
    records = list(bootstrap) if bootstrap is not None else default_bootstrap_records()
    mv = next((x.feature_level for x in records if getattr(x, "name", None) == "metadata.version"), None)
    from metadata.features import metadata_version_name

    metadata_dir = os.path.abspath(cfg["metadata.log.dir"])
    used = {m.get("directory.id") for m in metas.values() if m is not None}
    for d in empty:
        kind = "metadata directory" if d == metadata_dir else "data directory"
        mine = next((v for v in voters or () if v.id == node_id), None)
        if d == metadata_dir and voters is not None:
            kind = "dynamic metadata voter directory" if mine is not None else "dynamic metadata directory"
        print(f"Formatting {kind} {d} with metadata.version {metadata_version_name(mv)}.", file=out)
        dir_id = mine.directory_id if d == metadata_dir and mine is not None and mine.directory_id else random_uuid()
        while dir_id in used:
            dir_id = random_uuid()
        used.add(dir_id)
        if d == metadata_dir:
            write_bootstrap(d, records)
            if voters is not None:
                import dataclasses

                from raft.driver import write_bootstrap_voters

                write_bootstrap_voters(d, [dataclasses.replace(v, directory_id=dir_id) if v.id == node_id else v
                                           for v in voters])
        write_meta(d, {"version": "1", "cluster.id": cluster_id, "node.id": str(node_id), "directory.id": dir_id})


def info(cfg: Config, out=sys.stdout) -> int:
    """``krafty storage info``: Kafka's report of the directories; 1 when it finds problems."""
    problems, found, first = [], [], None
    for d in sorted(directories(cfg)):
        if not os.path.isdir(d):
            problems.append(f"{d} {'is not a directory' if os.path.exists(d) else 'does not exist'}")
            continue
        found.append(d)
        try:
            meta = read_meta(d)
        except StorageError as e:
            problems.append(str(e))
            continue
        if meta is None:
            problems.append(f"{d} is not formatted.")
        elif first is None:
            first = meta
        elif first.get("cluster.id") != meta.get("cluster.id"):
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.get("node.id") != meta.get("node.id"):
            problems.append("Mismatched node IDs between storage directories.")
    if found:
        print("Found log director" + ("y:" if len(found) == 1 else "ies:"), file=out)
        for d in found:
            print(f"  {d}", file=out)
        print("", file=out)
    if first is not None:
        print("Found metadata: {" + ", ".join(f"{k}={v}" for k, v in sorted(first.items())) + "}", file=out)
        print("", file=out)
    if problems:
        print("Found problem:" if len(problems) == 1 else "Found problems:", file=out)
        for p in problems:
            print(f"  {p}", file=out)
        print("", file=out)
        return 1
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="krafty storage", description="format and inspect a node's data directories "
                                "(kafka-storage.sh)")
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("random-uuid", help="print a new random cluster id")
    f = sub.add_parser("format", help="write meta.properties (and the bootstrap checkpoint) in the node's directories")
    f.add_argument("--config", "-c", required=True, help="the node's server.properties")
    f.add_argument("--cluster-id", "-t", required=True, help="the cluster id (krafty storage random-uuid)")
    f.add_argument("--ignore-formatted", "-g", action="store_true", help="skip directories already formatted")
    f.add_argument("--standalone", "-s", action="store_true", help="a dynamic quorum (KIP-853) of this one "
                   "controller; add the others with krafty metadata-quorum add-controller")
    f.add_argument("--initial-controllers", "-I", help="a dynamic quorum (KIP-853) of these controllers: "
                   "id@host:port:directory-id,...")
    f.add_argument("--release-version", "-r", help="the metadata.version the cluster starts at (e.g. 3.9 or "
                   "4.0-IV3; default: the latest, 4.0-IV3)")
    f.add_argument("--feature", "-f", action="append", default=[], metavar="NAME=LEVEL",
                   help="a feature level the cluster starts at instead of the release's default "
                        "(e.g. transaction.version=1)")
    f.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    i = sub.add_parser("info", help="show the directories' meta.properties and any problem")
    i.add_argument("--config", "-c", required=True, help="the node's server.properties")
    i.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    if args.verb == "random-uuid":
        print(random_uuid())
        return 0
    try:
        cfg = Config.from_file(args.config, args.override)
        if args.verb == "info":
            return info(cfg)
        bootstrap = None
        if args.release_version or args.feature:
            from metadata.features import (
                LATEST_METADATA_VERSION,
                MIN_METADATA_VERSION,
                bootstrap_feature_records,
                metadata_version_level,
                metadata_version_name,
            )

            level = metadata_version_level(args.release_version) if args.release_version else LATEST_METADATA_VERSION
            if level < MIN_METADATA_VERSION:
                raise StorageError(f"metadata.version {args.release_version} is too old to be supported (the oldest "
                                   f"is {metadata_version_name(MIN_METADATA_VERSION)})")
            bootstrap = bootstrap_feature_records(level, _feature_levels(args.feature))
        format_directories(cfg, args.cluster_id, ignore_formatted=args.ignore_formatted, bootstrap=bootstrap,
                           standalone=args.standalone, initial_controllers=args.initial_controllers)
        return 0
    except (ConfigError, StorageError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
