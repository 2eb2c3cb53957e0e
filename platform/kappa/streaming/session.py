"""The SparkSession every local query and ``kappa sql`` uses.

Extra jars (Kafka source, Delta) come from the Maven-resolved ``build/jars/spark`` through
``spark.jars``; nothing is resolved by Ivy at run time. Delta is enabled with its SQL extension and
catalog (Delta docs, "Quickstart: Set up Apache Spark with Delta Lake").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kappa.config import Settings
from kappa.jvm import java_executable, spark_jars

_LOG4J = Path(__file__).resolve().parents[1] / "resources" / "log4j2.properties"


def spark_conf(settings: Settings) -> dict[str, str]:
    """The Spark configuration Kappa sets, as ``spark.*`` key -> value."""
    return {
        "spark.master": settings.spark_master,
        "spark.app.name": "kappa",
        "spark.jars": ",".join(str(j) for j in spark_jars(settings)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # Each micro-batch writes small files; Delta's auto-compaction keeps file counts bounded.
        "spark.databricks.delta.autoCompact.enabled": "true",
        "spark.databricks.delta.optimizeWrite.enabled": "false",
        # Delta rebuilds a table's snapshot (its log replayed into the list of live files) with
        # this many tasks; the default, 50, costs seconds per micro-batch on a few cores and small
        # logs, which is most of a small batch's time. Checkpoints keep the log short.
        "spark.databricks.delta.snapshotPartitions": str(settings.delta_snapshot_partitions),
        # Stop queries cleanly on JVM shutdown and don't keep a Hive metastore around.
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str((settings.home or Path(".kappa")) / "spark-warehouse"),
        # A larger thread stack: Spark matches long exception messages with java.util.regex when a
        # query is stopped mid-batch, which overflows the default 1 MB stack of its stream thread.
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_LOG4J} -Xss8m",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }


def spark_session(settings: Settings):
    """Get or create the process's SparkSession with Kappa's configuration.

    Raises :class:`kappa.jvm.JvmError` when Java or the Maven-resolved jars are missing.
    """
    from pyspark.sql import SparkSession

    java_executable()
    # Python workers must be this interpreter (the project venv), not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Everything is on this machine; don't let Spark pick a routable interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
