"""krafty's Spark integration: a PySpark Python data source named ``krafty``.

    from pipeline import session
    spark = session()                      # local SparkSession with the source registered
    df = (spark.read.format("krafty")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").load())

Needs the ``spark`` extra (pyspark, pyarrow) and a Java 17 runtime on PATH or JAVA_HOME.
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _prepare_env() -> None:
    # Python workers must run the same interpreter (and see this package) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT, *paths])


def _check_java() -> None:
    """Spark needs a Java 17+ runtime with the full module set: JAVA_HOME or ``java`` on PATH."""
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return
    if shutil.which("java") is None:
        raise RuntimeError(
            "krafty's Spark pipeline needs a Java 17 runtime: install one "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and put it on PATH or set JAVA_HOME"
        )


def register(spark) -> None:
    """Register the ``krafty`` format on an existing SparkSession."""
    from .source import KraftyDataSource

    spark.dataSource.register(KraftyDataSource)


def session(app_name: str = "krafty", master: str | None = None, conf: dict | None = None):
    """Build (or get) a SparkSession with ``krafty`` registered.

    Run as a plain Python program it works out of the box on a laptop: ``master`` (default
    ``local[2]``, or ``spark://host:port``) with the driver on 127.0.0.1. Run by ``spark-submit``
    (``--master spark://...``) it takes the master and addresses spark-submit was given."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ and master is None  # launched by spark-submit
    _prepare_env()
    _check_java()
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app_name)
    if not submitted:
        b = (
            b.master(master or "local[2]")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
        )
    b = (
        b.config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    )
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    register(spark)
    return spark


def kafka_metrics(progress) -> list[dict]:
    """Spark's Kafka source metrics (``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
    ``avgOffsetsBehindLatest``) of each krafty source in a streaming query's progress
    (``query.lastProgress``, a dict, or the query itself): the backlog between the offsets the last
    micro-batch read up to (``endOffset``) and the latest ones the source saw (``latestOffset``).

    Spark's Kafka source reports them in ``sources[i].metrics``; PySpark 4.3 offers Python sources
    no way to fill that field (its Python stream has no ReportsSourceMetrics), so they are derived
    here from the same two offsets Spark derives them from. One dict per source, {} for a source
    that has not run a batch yet."""
    import json

    from .options import offsets_behind_latest, offsets_from_json

    if hasattr(progress, "lastProgress"):
        progress = progress.lastProgress
    if not progress:
        return []
    out = []
    for src in progress.get("sources", []):
        def offsets(field, src=src):
            v = src.get(field)
            if isinstance(v, str):
                try:
                    v = json.loads(v)
                except ValueError:
                    return None
            return offsets_from_json(v) if isinstance(v, dict) else None

        end, latest = offsets("endOffset"), offsets("latestOffset")
        out.append(offsets_behind_latest(end, latest) if end is not None and latest else {})
    return out


__all__ = ["session", "register", "kafka_metrics"]
