"""A class-data-sharing archive of the local Spark driver's classes: every ``kappa`` process starts
its driver with fewer seconds of class loading.

A local Spark driver with Delta, Kafka and RocksDB loads ~16,700 classes from ~300 jars, parsing
and verifying each one, in every process Kappa starts (``kappa run``, a Dagster run, ``kappa sql``,
a gate). The JVM can instead map them, already parsed and verified, from an archive written once:
AppCDS's dynamic archive (JDK 13+, JEP 350; the JDK's "Class Data Sharing" guide:
``-XX:ArchiveClassesAtExit`` writes the classes a run loaded when its JVM exits,
``-XX:SharedArchiveFile`` maps them at start). On this machine's 2 cores (Java 17), a session that
writes, reads and merges a Delta table and runs one streaming query: 28-29 CPU-seconds without the
archive, 22-23 with it, and 4 s less wall time; the CDC changelog kill sweep, eight driver starts
(``pytest tests/integration/test_fault_points.py -k changelog``, back to back): 229.6 s without,
187.4 s with.

``make install`` writes :func:`kappa.core.jvm.class_archive_path` (``build/cds/spark-driver.jsa``,
~200 MB) with ``python -m kappa.streaming.class_archive``: a session started exactly as
:func:`kappa.streaming.session.spark_session` starts one, which runs the kinds of work Kappa's
drivers do (:func:`_workload`), then exits. Beside it, ``spark-driver.classpath`` records the
driver class path and the ``java`` it was written with. An archive is only valid for the JVM build
and class path it was written with (the JVM also checks each jar's size and modification time and
falls back to loading classes from the jars): :func:`kappa.core.jvm.class_archive_options` gives
the option only when the driver about to start has that class path and that ``java``, so a driver
with another class path (``kappa serve`` adds its guard's jars) starts as it would without one, with
nothing in its log.
A SparkApplication's driver on Kubernetes is started by spark-submit in the image and has none.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from kappa.config import Settings
from kappa.core.jvm import CLASS_ARCHIVE_RECORD, class_archive_path, class_archive_record

def _workload(spark, work: Path) -> None:
    """What Kappa's drivers do, so that their classes are in the archive: Delta append, read,
    MERGE, UPDATE, DELETE and history; JSON parsing; a Kafka source analysed (never started: no
    broker is needed); a streaming query with an event-time window and a watermark on the RocksDB
    state store over a Delta source (``availableNow``: it ends), writing each micro-batch to Delta
    with a transaction id."""
    from pyspark.sql import functions as F

    table = str(work / "t")
    frame = spark.range(2000).select(F.col("id"), (F.col("id") % 7).alias("k"),
                                     F.to_json(F.struct(F.col("id").alias("v"))).alias("j"))
    frame.write.format("delta").mode("append").save(table)
    read = spark.read.format("delta").load(table)
    read.select(F.from_json("j", "v LONG").alias("p")).groupBy("p.v").count().collect()
    read.join(read.select("k").distinct(), "k").count()
    spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT 1L AS id, 1L AS k, 'z' AS j) s ON t.k = s.k "
              "WHEN MATCHED THEN UPDATE SET j = 'x' WHEN NOT MATCHED THEN INSERT *")
    spark.sql(f"UPDATE delta.`{table}` SET j = 'y' WHERE k = 2")
    spark.sql(f"DELETE FROM delta.`{table}` WHERE k = 3")
    spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
     .option("subscribe", "t").load().selectExpr("CAST(value AS STRING)").schema)

    def write(batch, batch_id):
        (batch.write.format("delta").mode("append").option("txnAppId", "class-archive")
         .option("txnVersion", batch_id).save(str(work / "w")))

    stream = (spark.readStream.format("delta").load(table)
              .withColumn("event_time", F.timestamp_seconds("id"))
              .withWatermark("event_time", "10 seconds")
              .groupBy(F.window("event_time", "60 seconds")).count())
    query = (stream.writeStream.foreachBatch(write).outputMode("append")
             .option("checkpointLocation", str(work / "c")).trigger(availableNow=True).start())
    query.awaitTermination()


def write_archive(settings: Settings, path: Path) -> None:
    """Write the archive to ``path`` and its record beside it. Raises ``RuntimeError`` when the
    JVM exits without writing it."""
    from pyspark import SparkContext

    from kappa.streaming.session import spark_session

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    # an archive from before (jars re-resolved) must not be mapped by the driver that writes anew
    for old in (partial, path, path.parent / CLASS_ARCHIVE_RECORD):
        old.unlink(missing_ok=True)
    spark = spark_session(settings, java_options=f"-XX:ArchiveClassesAtExit={partial}")
    classpath = spark.sparkContext.getConf().get("spark.driver.extraClassPath")
    with tempfile.TemporaryDirectory(prefix="kappa-class-archive-") as work:
        _workload(spark, Path(work))
        spark.stop()
    proc = SparkContext._gateway.proc
    proc.stdin.close()  # the gateway exits on end of input (System.exit): the archive is written then
    proc.wait(timeout=300)
    if not partial.is_file():
        raise RuntimeError(f"the JVM exited ({proc.returncode}) without writing {partial}")
    partial.replace(path)
    record = class_archive_record(classpath)
    (path.parent / CLASS_ARCHIVE_RECORD).write_text(json.dumps(record))


def main() -> None:
    """``python -m kappa.streaming.class_archive [PATH]``; PATH defaults to
    :func:`kappa.core.jvm.class_archive_path`."""
    from kappa.config import load_settings

    with tempfile.TemporaryDirectory(prefix="kappa-class-archive-home-") as home:
        os.environ["KAPPA_HOME"] = home
        # one workload, then exit: the short-lived driver C1 is for (Settings.spark_driver_jit);
        # the archive holds classes, not compiled code, and serves tiered drivers alike
        settings = load_settings(spark_driver_jit="c1")
        path = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else class_archive_path(settings)
        write_archive(settings, path)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
