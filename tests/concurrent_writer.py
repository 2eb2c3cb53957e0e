"""One writer of tests/integration/test_concurrent_writers.py, run as its own process:

    python -m tests.concurrent_writer ENGINE MODE WRITER TABLE SYNC_DIR COMMITS ROWS PERIOD

ENGINE is ``spark`` (a Spark application of its own: Kappa's
:func:`kappa.streaming.session.spark_session`, ``local[1]``), ``delta-rs`` (``write_deltalake``
with :func:`kappa.core.storage.delta_rs_options`) or ``log-store`` (the put-if-absent step of a
Spark Delta commit alone, :func:`log_store_committer`: no data job before it, so writers that start
a commit at the same moment reach the store within milliseconds of each other). MODE ``safe`` is Kappa's configuration as
shipped; ``unsafe`` swaps in the setting it replaced: Delta's ``S3SingleDriverLogStore`` over S3A's
unconditional creates for Spark,
or delta-rs without conditional puts (``conditional_put=disabled`` with
``AWS_S3_ALLOW_UNSAFE_RENAME=true``, which delta-rs 1.6 answers by refusing every commit). The
object store comes from the environment (``KAPPA_S3_ENDPOINT``, ``AWS_*``).

The writer gets ready (Spark: session up and the table read once), touches ``SYNC_DIR/WRITER.ready``
and waits for ``SYNC_DIR/go`` (an epoch in seconds, written by the test once every writer is
ready), then appends COMMITS commits of ROWS rows each, commit ``k`` starting at ``go + k *
PERIOD`` so that the writers commit at the same moments (the race a lost commit needs). Each row is
``(writer, commit, id)`` with ``id`` = ``WRITER-k-j``, unique across writers. It prints one JSON
line: ``{"writer", "engine", "committed": [k, …], "failed": {k: error}, "seconds"}``; a commit
counts as appended only when the write call returned.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

#: The setting Kappa replaced (see kappa.streaming.session): Delta's one-driver-per-table log store,
#: and S3A's creates unconditional (its default). With S3A's conditional create on, that log store's
#: ``create(overwrite=false)`` is a conditional PutObject too and cannot lose a commit either.
UNSAFE_SPARK = {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore",
                "spark.hadoop.fs.s3a.create.conditional.enabled": "false"}
#: delta-rs with put-if-absent turned off (0.x copied commits into place unconditionally; 1.x refuses).
UNSAFE_DELTA_RS = {"conditional_put": "disabled", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
#: Bounds: how long a writer waits to start, and for the whole run.
WAIT_GO_S, RUN_S = 240.0, 240.0


def rows(writer: str, k: int, n: int) -> list[dict]:
    return [{"writer": writer, "commit": k, "id": f"{writer}-{k}-{j}"} for j in range(n)]


def spark_appender(table: str, mode: str):
    import kappa.streaming.session as session
    from kappa.config import load_settings

    if mode == "unsafe":  # the same session with the log store Kappa replaced
        shipped = session.spark_conf
        session.spark_conf = lambda settings, **kw: {**shipped(settings, **kw), **UNSAFE_SPARK}
    spark = session.spark_session(load_settings(spark_master="local[1]", spark_driver_memory="512m",
                                                shuffle_partitions=1))
    spark.sparkContext.setLogLevel("ERROR")
    spark.read.format("delta").load(table).count()  # warm: classes loaded, snapshot read once
    schema = "writer string, commit int, id string"

    def append(batch: list[dict]) -> None:
        df = spark.createDataFrame([(r["writer"], r["commit"], r["id"]) for r in batch], schema)
        df.coalesce(1).write.format("delta").mode("append").save(table)
    return append


def log_store_committer(table: str, mode: str):
    """The step of a Delta commit that decides whether it is lost: the log store's
    ``write(<table>/_delta_log/<version>.json, actions, overwrite=false)``, called on the log store
    class Kappa's session configures for ``s3a://`` (``unsafe``: the one it replaced, over S3A's
    unconditional creates), with the session's Hadoop configuration. Commit ``k`` is version ``k``."""
    import kappa.streaming.session as session
    from kappa.config import load_settings

    conf = session.spark_conf(load_settings(spark_master="local[1]", spark_driver_memory="512m"))
    if mode == "unsafe":
        conf.update(UNSAFE_SPARK)
    spark = session.spark_session(load_settings(spark_master="local[1]", spark_driver_memory="512m", shuffle_partitions=1))
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark._jvm
    hadoop = spark._jsc.hadoopConfiguration()
    for key, value in conf.items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key[len("spark.hadoop."):], value)
    name = "io.delta.storage.S3SingleDriverLogStore" if mode == "unsafe" else session.LOG_STORE_CLASS
    log_store = functools.reduce(getattr, name.split("."), jvm)(hadoop)
    first = jvm.org.apache.hadoop.fs.Path(f"{table}/_delta_log/{0:020d}.json")
    first.getFileSystem(hadoop).exists(first)  # warm: the S3A client is up before the first commit

    def commit(batch: list[dict]) -> None:
        lines = jvm.java.util.ArrayList()
        for r in batch:
            lines.add(json.dumps(r))
        path = jvm.org.apache.hadoop.fs.Path(f"{table}/_delta_log/{batch[0]['commit'] + 1:020d}.json")
        log_store.write(path, lines.iterator(), False, hadoop)
    return commit


def delta_rs_appender(table: str, mode: str):
    import pyarrow as pa
    from deltalake import write_deltalake

    from kappa.config import load_settings
    from kappa.core.storage import delta_rs_options, delta_rs_uri

    options = dict(delta_rs_options(table, load_settings()) or {})
    if mode == "unsafe":
        options.update(UNSAFE_DELTA_RS)
    schema = pa.schema([("writer", pa.string()), ("commit", pa.int32()), ("id", pa.string())])

    def append(batch: list[dict]) -> None:
        write_deltalake(delta_rs_uri(table), pa.Table.from_pylist(batch, schema=schema), mode="append",
                        storage_options=options)
    return append


def main(engine: str, mode: str, writer: str, table: str, sync_dir: str, commits: str, n_rows: str,
         period: str) -> None:
    sync = Path(sync_dir)
    append = {"spark": spark_appender, "delta-rs": delta_rs_appender, "log-store": log_store_committer}[engine](table, mode)
    (sync / f"{writer}.ready").touch()
    deadline = time.time() + WAIT_GO_S
    while not (sync / "go").exists():
        if time.time() > deadline:
            raise SystemExit(f"{writer}: no go after {WAIT_GO_S:.0f} s")
        time.sleep(0.05)
    go = float((sync / "go").read_text())
    committed, failed = [], {}
    started = time.time()
    for k in range(int(commits)):
        time.sleep(max(0.0, go + k * float(period) - time.time()))
        if time.time() - started > RUN_S:
            failed[k] = "run time exceeded"
            continue
        try:
            append(rows(writer, k, int(n_rows)))
            committed.append(k)
        except Exception as exc:  # a refused commit is a result to report, not a crash
            failed[k] = f"{type(exc).__name__}: {str(exc)[:300]}"
    print(json.dumps({"writer": writer, "engine": engine, "committed": committed, "failed": failed,
                      "seconds": round(time.time() - started, 1)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
