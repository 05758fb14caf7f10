"""The controller's metrics (Kafka's ``kafka.controller:type=KafkaController`` and
``ControllerEventManager`` MBeans, JMX-exporter names), read from the QuorumController and its
committed metadata image at scrape time.

The cluster-wide gauges (offline partitions, topic, partition and broker counts, preferred
replica imbalance) are reported by the active controller only and are 0 on the others, so that
``sum()`` over every node, as Strimzi's dashboards and alerts do, counts the cluster once."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from common.metrics import summary_samples


def collect(controller, out: list[Metric], now: float) -> None:
    image = controller.loader.image
    active = controller.is_active()
    k = "kafka_controller_kafkacontroller_"

    def g(name: str, doc: str, value: float) -> None:
        out.append(GaugeMetricFamily(k + name, doc, value=value))

    g("activecontrollercount", "1 on the active controller", int(active))
    topics = partitions = offline = imbalance = 0
    fenced = live = 0
    if active:
        for t in image.topics_by_name.values():
            topics += 1
            for p in t.partitions.values():
                partitions += 1
                if p.leader < 0:
                    offline += 1
                elif p.replicas and p.leader != p.replicas[0]:
                    imbalance += 1
        for b in image.brokers.values():
            if b.fenced:
                fenced += 1
            else:
                live += 1
    g("globaltopiccount", "Topics in the cluster (active controller)", topics)
    g("globalpartitioncount", "Partitions in the cluster (active controller)", partitions)
    g("offlinepartitionscount", "Partitions without a leader (active controller)", offline)
    g("preferredreplicaimbalancecount", "Partitions not led by their preferred replica (active controller)",
      imbalance)
    g("activebrokercount", "Registered, unfenced brokers (active controller)", live)
    g("fencedbrokercount", "Registered, fenced brokers (active controller)", fenced)
    g("metadataerrorcount", "Metadata records that failed to apply", 0)
    g("lastappliedrecordoffset", "Offset of the last metadata record applied to this controller's image",
      image.offset)
    log = controller.log
    core = getattr(log, "core", None)
    if core is not None:
        g("lastcommittedrecordoffset", "Offset of the last committed metadata record", core.hw - 1)
        out.append(GaugeMetricFamily("krafty_metadata_apply_lag_records",
                                     "Committed metadata records not yet applied to this node's image",
                                     value=max(0, core.hw - 1 - image.offset)))
    name = "kafka_controller_controllereventmanager_eventqueueprocessingtimems"
    m = Metric(name, "Time the controller spent computing and proposing an operation, in ms", "summary")
    for sample in summary_samples(name, [({}, controller.processing_times)], now):
        m.add_sample(*sample)
    out.append(m)
