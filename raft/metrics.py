"""Kafka's ``raft-metrics`` of the metadata log, as the JMX exporter names them under Strimzi's
rules (``kafka_server_raftmetrics_current_leader``, ``..._commit_latency_avg``, ...).

The Raft core stays pure: the driver (raft/driver.py) feeds ``RaftStats`` with what only it
sees (when a proposal commits, when a leader change is announced, the core's role after each
step), and ``collect`` reads the core's state (epoch, vote, leader, high watermark, log end)
at scrape time."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common.metrics import WindowedStat


class RaftStats:
    """Events of one node's metadata log. Times in the driver's milliseconds."""

    __slots__ = ("commit_latency", "election_latency", "append_records", "fetch_records", "elections",
                 "_election_started", "_last_epoch", "_role")

    def __init__(self, now_ms: int = 0):
        t = now_ms / 1000
        self.commit_latency = WindowedStat(now=t)  # ms from propose to commit (on the leader)
        self.election_latency = WindowedStat(now=t)  # ms from becoming a candidate to knowing the leader
        self.append_records = WindowedStat(now=t)  # records appended as leader
        self.fetch_records = WindowedStat(now=t)  # records committed (applied) on this node
        self.elections = 0  # new epochs this node has seen
        self._election_started: int | None = None
        self._last_epoch = -1
        self._role = None

    def proposed(self, records: int, now_ms: int) -> None:
        self.append_records.record(records, now_ms / 1000)

    def committed(self, proposed_ms: int, records: int, now_ms: int) -> None:
        """A proposal of ``records`` records made at ``proposed_ms`` committed (proposed_ms < 0:
        records committed from another leader's log)."""
        if proposed_ms >= 0:
            self.commit_latency.record(now_ms - proposed_ms, now_ms / 1000)
        self.fetch_records.record(records, now_ms / 1000)

    def role(self, role, epoch: int, now_ms: int) -> None:
        """The core's role after a step: an election starts when it becomes a candidate (or
        prospective) and ends when it is leader or follower."""
        if role is self._role and epoch == self._last_epoch:
            return
        name = getattr(role, "name", str(role))
        if name in ("CANDIDATE", "PROSPECTIVE"):
            if self._election_started is None:
                self._election_started = now_ms
        elif name in ("LEADER", "FOLLOWER") and self._election_started is not None:
            self.election_latency.record(now_ms - self._election_started, now_ms / 1000)
            self._election_started = None
        if epoch > self._last_epoch:
            if self._last_epoch >= 0:
                self.elections += 1
            self._last_epoch = epoch
        self._role = role


def current_state(core, is_voter: bool) -> str:
    """Kafka's current-state names."""
    name = core.role.name
    if name == "FOLLOWER":
        return "follower" if is_voter else "observer"
    if name == "UNATTACHED":
        return "voted" if core.voted_for is not None and core.voted_for >= 0 else (
            "unattached" if is_voter else "observer")
    return name.lower()


def collect(log, out: list[Metric]) -> None:
    """``log``: raft.driver.RaftMetadataLog."""
    core = log.core
    if core is None:
        return
    now_ms = log.now_ms()
    now = now_ms / 1000
    st: RaftStats = log.stats
    p = "kafka_server_raftmetrics_"
    leader = log.leader().leader_id

    def g(name: str, doc: str, value: float) -> None:
        out.append(GaugeMetricFamily(p + name, doc, value=value))

    state = GaugeMetricFamily(p + "current_state", "1 for this node's role in the quorum", labels=["current_state"])
    state.add_metric([current_state(core, log.is_voter)], 1)
    out.append(state)
    g("current_leader", "Node id of the quorum leader, -1 if unknown", leader if leader is not None else -1)
    g("current_vote", "Node id voted for in the current epoch, -1 if none",
      core.voted_for if core.voted_for is not None else -1)
    g("current_epoch", "Current quorum epoch", core.epoch)
    g("high_watermark", "High watermark of the metadata log", core.hw)
    g("log_end_offset", "Log end offset of the metadata log", core.log_end)
    g("number_of_voters", "Voters of the quorum", len(log.voters))
    g("commit_latency_avg", "Average ms from a proposal to its commit (leader)", st.commit_latency.avg(now))
    g("commit_latency_max", "Largest ms from a proposal to its commit (leader)", st.commit_latency.max(now))
    g("election_latency_avg", "Average ms of the elections this node ran", st.election_latency.avg(now))
    g("election_latency_max", "Longest election this node ran, in ms", st.election_latency.max(now))
    g("append_records_rate", "Records appended per second as leader", st.append_records.rate(now))
    g("fetch_records_rate", "Records committed per second on this node", st.fetch_records.rate(now))
    out.append(CounterMetricFamily(p + "elections", "New quorum epochs seen by this node (krafty)",
                                   value=st.elections))
