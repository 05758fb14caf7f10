"""The state half of the broker's metrics: read from the broker's own objects when Prometheus
scrapes (ReplicaManager, Partition, Log, LogFlushStats, purgatories, SocketServer, the group
coordinator and consumer lag). Names as the JMX exporter gives Kafka's MBeans (README "Metrics")."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UnknownMetricFamily

from broker.group import state as gs
from broker.metrics import PURGATORIES, summary

# KRaft BrokerState values (org.apache.kafka.metadata.BrokerState)
STARTING, RECOVERY, RUNNING, PENDING_CONTROLLED_SHUTDOWN, SHUTTING_DOWN = 1, 2, 3, 6, 7


def broker_state(b) -> int:
    if b._want_shutdown:
        return PENDING_CONTROLLED_SHUTDOWN
    if b.fenced:
        return RECOVERY if b.broker_epoch >= 0 else STARTING
    return RUNNING


def collect(b, m, out: list, now: float) -> None:
    out.append(GaugeMetricFamily("kafka_server_kafkaserver_brokerstate",
                                 "1 starting, 2 recovery (registered, fenced), 3 running, 6 pending controlled shutdown",
                                 value=broker_state(b)))
    if b.replicas is not None:
        _replicas(b, out)
    if b.logs is not None:
        _logs(b, out, now)
    _network(b, m, out)
    if b.apis is not None:
        _groups(b, out)
        _lag(b, out)


def _replicas(b, out: list) -> None:
    rm = b.replicas
    image = b.loader.image
    min_isr_of: dict[str, int] = {}
    under = under_min = at_min = 0
    rows = []  # (topic, partition, isr, replicas, min isr) of the partitions led here: the loop's part
    parts = list(rm.partitions.items())
    for (topic, pid), part in parts:
        st = part.state
        if not st.is_leader:
            continue
        mi = min_isr_of.get(topic)
        if mi is None:
            mi = min_isr_of[topic] = rm.min_insync_replicas(image, topic)
        n_isr, n_rep = len(st.isr), len(st.replicas)
        rows.append((topic, pid, n_isr, n_rep, mi))
        under += n_isr < n_rep
        under_min += n_isr < mi
        at_min += n_isr == mi
    leaders = len(rows)
    rmn = "kafka_server_replicamanager_"
    out += [
        GaugeMetricFamily(rmn + "partitioncount", "Partitions with a replica on this broker", value=len(parts)),
        GaugeMetricFamily(rmn + "leadercount", "Partitions this broker leads", value=leaders),
        GaugeMetricFamily(rmn + "underreplicatedpartitions",
                          "Partitions led here whose ISR is smaller than their replica set", value=under),
        GaugeMetricFamily(rmn + "underminisrpartitioncount",
                          "Partitions led here with fewer in-sync replicas than min.insync.replicas", value=under_min),
        GaugeMetricFamily(rmn + "atminisrpartitioncount",
                          "Partitions led here with exactly min.insync.replicas in-sync replicas", value=at_min),
        GaugeMetricFamily(rmn + "offlinereplicacount", "Replicas in offline log directories (KIP-858)",
                          value=len(rm.offline_partitions)),
        GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount", "Log dirs offline after an I/O error",
                          value=len(rm.logs.offline_log_dirs)),
        CounterMetricFamily(rmn + "isrshrinks", "ISR shrinks committed for partitions led here (IsrShrinksPerSec)",
                            value=rm.isr_shrinks),
        CounterMetricFamily(rmn + "isrexpands", "ISR expansions committed for partitions led here (IsrExpandsPerSec)",
                            value=rm.isr_expands),
        lambda: _partition_families(rows),
    ]
    # ReplicaFetcherManager MaxLag: the largest (leader's high watermark - our log end) of the partitions we follow
    fm = rm.fetchers
    lag = 0
    for tp, hw in list(fm.leader_hw.items()):
        part = rm.partitions.get(tp)
        if part is not None and tp in fm.following:
            lag = max(lag, hw - part.log.log_end_offset)
    out.append(GaugeMetricFamily("kafka_server_replicafetchermanager_maxlag",
                                 "Largest lag in records of a partition this broker follows", labels=["clientId"]))
    out[-1].add_metric(["Replica"], lag)
    # purgatories: requests parked waiting for replicas (Produce acks=all) or data (Fetch long polls)
    size = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                             "Requests waiting in a purgatory", labels=["delayedOperation"])
    for key, name in PURGATORIES.items():
        size.add_metric([name], sum(s.parked.get(key, 0) for s in b.servers))
    out.append(size)


def _partition_families(rows) -> list[Metric]:
    """kafka_cluster_partition_* of the partitions led here, from the rows _replicas read (built
    in the render thread: tens of thousands of samples would otherwise hold the event loop)."""
    labels = ["topic", "partition"]
    p_under = GaugeMetricFamily("kafka_cluster_partition_underreplicated",
                                "1 when the partition (led here) has fewer in-sync replicas than replicas", labels=labels)
    p_under_min = GaugeMetricFamily("kafka_cluster_partition_underminisr",
                                    "1 when the partition (led here) has fewer in-sync replicas than min.insync.replicas",
                                    labels=labels)
    p_at_min = GaugeMetricFamily("kafka_cluster_partition_atminisr",
                                 "1 when the partition (led here) has exactly min.insync.replicas in-sync replicas",
                                 labels=labels)
    p_isr = GaugeMetricFamily("kafka_cluster_partition_insyncreplicascount", "In-sync replicas (partitions led here)",
                              labels=labels)
    p_replicas = GaugeMetricFamily("kafka_cluster_partition_replicascount", "Replicas (partitions led here)",
                                   labels=labels)
    for topic, pid, n_isr, n_rep, mi in rows:
        lv = [topic, str(pid)]
        p_under.add_metric(lv, int(n_isr < n_rep))
        p_under_min.add_metric(lv, int(n_isr < mi))
        p_at_min.add_metric(lv, int(n_isr == mi))
        p_isr.add_metric(lv, n_isr)
        p_replicas.add_metric(lv, n_rep)
    return [p_under, p_under_min, p_at_min, p_isr, p_replicas]


def _logs(b, out: list, now: float) -> None:
    # the loop reads the numbers; the render thread makes the samples
    rows = [(lg.topic, lg.partition, sum(s.size for s in lg.segments), len(lg.segments), lg.log_start_offset,
             lg.segments[-1].next_offset) for lg in b.logs.all_logs()]
    out.append(lambda: _log_families(rows))
    out.append(summary("kafka_log_logflushstats_logflushrateandtimems",
                       "Time of log flushes (fsync) in ms (LogFlushRateAndTimeMs)", [({}, b.logs.flush_times)], now))


def _log_families(rows) -> list[Metric]:
    labels = ["topic", "partition"]
    size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's log on disk", labels=labels)
    segs = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition's log", labels=labels)
    start = GaugeMetricFamily("kafka_log_log_logstartoffset", "First offset of the partition's log", labels=labels)
    end = GaugeMetricFamily("kafka_log_log_logendoffset", "Next offset of the partition's log", labels=labels)
    for topic, partition, nbytes, nsegs, log_start, log_end in rows:
        lv = [topic, str(partition)]
        size.add_metric(lv, nbytes)
        segs.add_metric(lv, nsegs)
        start.add_metric(lv, log_start)
        end.add_metric(lv, log_end)
    return [size, segs, start, end]


def _network(b, m, out: list[Metric]) -> None:
    labels = ["listener", "networkProcessor"]
    conns = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count", "Open client connections",
                              labels=labels)
    ok = CounterMetricFamily("kafka_server_socket_server_metrics_successful_authentication",
                             "Successful SASL authentications", labels=labels)
    failed = CounterMetricFamily("kafka_server_socket_server_metrics_failed_authentication",
                                 "Failed SASL authentications", labels=labels)
    for s in b.servers:
        lv = [s.listener_name, "0"]
        conns.add_metric(lv, len(s._conns))
        ok.add_metric(lv, s.auth_ok)
        failed.add_metric(lv, s.auth_failed)
    out += [conns, ok, failed]
    pool = b.memory_pool
    if pool is not None and pool.limit is not None:
        out.append(GaugeMetricFamily("kafka_network_socketserver_memorypoolavailable",
                                     "Free bytes of the request memory pool (queued.max.request.bytes)",
                                     value=pool.available))
        out.append(GaugeMetricFamily("kafka_network_socketserver_memorypoolused",
                                     "Bytes of the request memory pool held by requests", value=pool.used))


def _groups(b, out: list[Metric]) -> None:
    gc = b.apis.group_coordinator
    shards = gc.loaded_shards()
    by_state = dict.fromkeys(gs.STATES, 0)
    groups = offsets = 0
    for sh in shards:
        groups += len(sh.groups)
        for g in sh.groups.values():
            by_state[g.state] = by_state.get(g.state, 0) + 1
        offsets += sum(len(o) for o in sh.offsets.values())
    gm = "kafka_coordinator_group_groupmetadatamanager_"
    out.append(GaugeMetricFamily(gm + "numgroups", "Groups this broker coordinates", value=groups))
    for state, n in by_state.items():
        out.append(GaugeMetricFamily(gm + "numgroups" + state.lower(), f"Groups in state {state}", value=n))
    out.append(GaugeMetricFamily(gm + "numoffsets", "Committed offsets held by this coordinator", value=offsets))
    stats = gc.group_config.stats
    gcm = "kafka_server_group_coordinator_metrics_"
    out.append(UnknownMetricFamily(gcm + "group_rebalance_count", "Rebalances started (groups entering "
                                   "PreparingRebalance) on this coordinator", value=stats.rebalances))
    out.append(UnknownMetricFamily(gcm + "group_completed_rebalance_count",
                                   "Rebalances completed (groups becoming Stable) on this coordinator",
                                   value=stats.completed_rebalances))


def _lag(b, out: list[Metric]) -> None:
    """kafka-exporter's consumer group series, for the groups this broker coordinates."""
    labels = ["consumergroup", "topic", "partition"]
    current = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset of the group",
                                labels=labels)
    lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus committed offset", labels=labels)
    lag_s = GaugeMetricFamily("kafka_consumergroup_lag_seconds",
                              "Seconds since the first record the group has not consumed was appended (estimated)",
                              labels=labels)
    members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group", labels=["consumergroup"])
    monitor = getattr(b, "lag_monitor", None)
    timelines = monitor.timelines if monitor is not None else {}
    now_ms = monitor.clock.wall_ms() if monitor is not None else 0
    for sh in b.apis.group_coordinator.loaded_shards():
        for gid, g in sh.groups.items():
            members.add_metric([gid], len(g.members))
        for gid, offs in sh.offsets.items():
            for (topic, pid), v in offs.items():
                lv = [gid, topic, str(pid)]
                current.add_metric(lv, v.offset)
                tl = timelines.get((topic, pid))
                hw = tl.latest if tl is not None else None
                if hw is not None:
                    lag.add_metric(lv, max(0, hw - v.offset))
                    lag_s.add_metric(lv, tl.lag_seconds(v.offset, now_ms))
    out += [current, lag, lag_s, members]
