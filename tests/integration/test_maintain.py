"""`kappa maintain` on a real table while its query keeps running: silver `flights` fed in several
micro-batches (several small files), then OPTIMIZE + checkpoint + VACUUM from outside the query.
The table has fewer files and the same rows and content, every row is still made visible by the same
data-changing `add` actions (the OPTIMIZE re-adds with `dataChange: false`), the registry's versions
are unchanged, the snapshot from before maintenance can still be read (VACUUM kept Delta's retention),
and the running query's next micro-batch commits after the OPTIMIZE (an append does not conflict
with it: Delta docs, "Concurrency control")."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time

import pandas as pd
import pytest

from kappa.config import load_settings
from kappa.delta.registry import Registry
from kappa.delta.tables import dataset, table_rows
from kappa.harness.delta_log import commit_actions, data_files, latest_commit, rearranges_only, wait_for_commit
from kappa.ingest.nycflights13 import load_events, publish
from kappa.lifecycle.maintain import MaintainError, maintain
from kappa.runners.versions import ensure_source_topics, resolve_versions
from kappa.spec import load_catalog
from kappa.streaming.query import start_query

from ..conftest import REPO
from ..kappa_cli import clean_env, run_kappa
from .helpers import renamed

pytestmark = pytest.mark.integration

SLICE = 100
SLICES = 4  # three before maintenance, one after


def _fast_trigger(name: str, doc: dict) -> None:
    if name == "flights":
        doc["trigger"] = {"processing_time": "1 second"}
        # A slice of 100 spans up to 2.6 h of event time over 3 partitions; a micro-batch that starts
        # while the producer is still writing one partition would send the rest of the slice to the
        # late-events table behind the 2-hour watermark (CI, stop 61: 286 of 300 rows). Lateness is
        # not what this test is about.
        doc["watermark"]["delay"] = "1 day"


def _rows(path: str) -> int:
    return table_rows(path, None)[0]


def _wait_rows(path: str, n: int, query, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _rows(path) < n:
        assert query.isActive, query.exception()
        assert time.monotonic() < deadline, f"{_rows(path)} of {n} rows after {timeout_s} s"
        time.sleep(0.3)


def _content(path: str) -> pd.DataFrame:
    return dataset(path).to_table().to_pandas().sort_values("event_id").reset_index(drop=True)


def _visible_adds(path: str) -> int:
    """The add actions with dataChange true over the whole log: the files that made rows visible."""
    return sum(len(data_files(commit_actions(path, v))) for v in range(latest_commit(path) + 1))


def test_maintain_compacts_a_running_tables_files_and_changes_nothing_it_holds(make_env, spark):
    settings, suffix = make_env(edit=_fast_trigger)
    flights = next(e for e in renamed(load_events(limit=SLICE * SLICES), suffix) if e.topic.startswith("flights"))
    catalog = load_catalog(settings.assets_dir)
    ensure_source_topics(settings, catalog, ["flights"])
    version = resolve_versions(catalog, ["flights"], Registry(settings))["flights"]  # what `kappa run` does
    path = version.table_path

    def send(i: int) -> None:
        part = slice(i * SLICE, (i + 1) * SLICE)
        publish(settings, [dataclasses.replace(flights, keys=flights.keys[part], values=flights.values[part],
                                               timestamps_ms=flights.timestamps_ms[part],
                                               event_ids=flights.event_ids[part])])

    running = start_query(spark, catalog["flights"], version, settings, "continuous")
    query = running.query
    Registry(settings).record("flights", version.version, "running")  # as the runner does: a 2nd registry commit
    try:
        for i in range(SLICES - 1):  # one micro-batch per slice: several small files
            send(i)
            _wait_rows(path, (i + 1) * SLICE, query)
        before = _content(path)
        visible_before = _visible_adds(path)
        # each micro-batch of at most 100 rows wrote one file (writers.files_for), not one per partition
        assert all(len(data_files(commit_actions(path, v))) <= 1 for v in range(latest_commit(path) + 1))
        versions_before = [(v.asset, v.version, v.state, v.table_path) for v in Registry(settings).versions("flights")]
        lines: list[str] = []
        started = time.monotonic()
        report = maintain(settings, ["flights"], spark=spark, say=lines.append)
        took = time.monotonic() - started
        assert query.isActive, query.exception()
        for t in report.tables:
            print(f"{t.table}: files {t.files_before} -> {t.files_after}, rows {t.rows_after}, Delta version "
                  f"{t.version_before} -> {t.version_after}, vacuumed {t.vacuumed}, {t.seconds} s "
                  f"{t.error or t.skipped or ''}")
        print(f"maintain took {took:.1f} s")
        assert not report.failed
        assert [t.table for t in report.tables] == ["flights/v1", "_kappa/quarantine", "_kappa/late_events",
                                                   "_kappa/rescued", "_kappa/registry", "_kappa/forgotten",
                                                   "_kappa/alerts"]
        mine = report.tables[0]
        assert lines[0].startswith("flights/v1: ")
        assert mine.files_before > 1 and mine.files_after == 1 and mine.compacted == mine.files_before
        assert mine.rows_before == mine.rows_after == len(before) == (SLICES - 1) * SLICE
        assert mine.version_after > mine.version_before
        assert rearranges_only(commit_actions(path, mine.version_before + 1))  # the OPTIMIZE: dataChange false
        pd.testing.assert_frame_equal(_content(path), before)
        assert _visible_adds(path) == visible_before
        # VACUUM used Delta's retention: the snapshot from before maintenance still reads whole.
        assert spark.read.format("delta").option("versionAsOf", mine.version_before).load(path).count() == len(before)
        assert mine.vacuumed == 0
        tables = {t.table: t for t in report.tables}
        registry = tables["_kappa/registry"]
        assert registry.engine == "delta-rs" and registry.files_after == 1 < registry.files_before
        for nothing in ("_kappa/forgotten", "_kappa/rescued", "_kappa/alerts"):  # nothing forgotten, drifted or alerted
            assert tables[nothing].skipped == "no table yet", nothing
        assert [(v.asset, v.version, v.state, v.table_path) for v in Registry(settings).versions("flights")] \
            == versions_before

        # The query's next micro-batch commits after the OPTIMIZE, with no write conflict.
        send(SLICES - 1)
        committed = wait_for_commit(path, after=mine.version_after, timeout_s=120, alive=lambda: query.isActive)
        assert committed is not None, query.exception()
        _wait_rows(path, SLICES * SLICE, query)
        assert query.isActive and query.exception() is None
        after = _content(path)
        assert after.event_id.is_unique and set(before.event_id) < set(after.event_id)
    finally:
        query.stop()


def test_maintain_refuses_a_retention_below_the_platform_floor(tmp_path):
    """Issue 40: `retention_hours: 0.0001` wiped time travel. Below the floor (168 h by default,
    Delta's 7 days; KAPPA_MIN_RETENTION_HOURS) is refused before anything runs."""
    settings = load_settings(project_dir=REPO, home=tmp_path)
    for hours in (0, 0.0001, 167.9, float("nan")):
        with pytest.raises(MaintainError, match="at least the platform floor of 168 hours.*only `kappa forget`"):
            maintain(settings, retention_hours=hours)
    lower = load_settings(project_dir=REPO, home=tmp_path, min_retention_hours=24)
    with pytest.raises(MaintainError, match="floor of 24 hours"):
        maintain(lower, retention_hours=1)


def _cli(*args: str, home) -> subprocess.CompletedProcess:
    """`kappa maintain` as a user runs it (``python -m kappa.cli``: this checkout's code)."""
    env = clean_env()
    env.update({"PYTHONPATH": str(REPO / "platform"), "KAPPA_PROJECT_DIR": str(REPO), "KAPPA_HOME": str(home),
                "COLUMNS": "200"})
    return run_kappa("maintain", *args, env=env, timeout=120)


def test_the_command_reports_every_table_and_refuses_zero_retention(tmp_path):
    """An empty warehouse: every table listed as not there yet (no Spark needed); 0.0001 hours
    refused (below the platform floor) in one line, no traceback; an undeclared asset named."""
    done = _cli("--format", "json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [t["table"] for t in report["tables"]] == ["_kappa/quarantine", "_kappa/late_events", "_kappa/rescued",
                                                      "_kappa/registry", "_kappa/forgotten", "_kappa/alerts"]
    assert {t["skipped"] for t in report["tables"]} == {"no table yet"}
    refused = _cli("--vacuum-retention", "0.0001", home=tmp_path)
    assert refused.returncode == 1 and "platform floor of 168 hours" in refused.stderr and "Traceback" not in refused.stderr
    unknown = _cli("no_such_asset", home=tmp_path)
    assert unknown.returncode == 1 and "no_such_asset" in unknown.stderr and "Traceback" not in unknown.stderr


def test_a_merge_an_optimize_conflicts_with_is_run_again_on_the_new_snapshot(spark, tmp_path):
    """A MERGE micro-batch (the upsert, changelog and materialized-view writers) meets an OPTIMIZE
    committed while it runs, as `kappa maintain` does to a running query: Delta refuses the MERGE
    (ConcurrentAppendException: the OPTIMIZE rewrote files it read) and run_dml runs it again,
    once, on the compacted snapshot. The OPTIMIZE is delta-rs's, started from inside the MERGE by a
    UDF over its source, so it commits after the MERGE read its snapshot and before it commits."""
    from deltalake import DeltaTable
    from delta.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException
    from delta.tables import DeltaTable as SparkTable
    from pyspark.sql import functions as F

    from kappa.streaming.writers import run_dml

    path, flag = str(tmp_path / "t"), str(tmp_path / "optimized")
    for i in range(3):  # three files
        spark.range(i * 10, i * 10 + 10).withColumn("v", F.lit(0)).write.format("delta").mode("append").save(path)

    @F.udf("long")
    def optimize_once(x):
        import os

        from deltalake import DeltaTable

        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL))  # one task of the first attempt
        except FileExistsError:
            return x
        DeltaTable(path).optimize.compact()
        return x

    attempts = []

    def merge() -> None:
        attempts.append(DeltaTable(path).version())
        try:
            (SparkTable.forPath(spark, path).alias("t")
             .merge(spark.range(5, 25).select(optimize_once("id").alias("id"), F.lit(1).alias("v")).alias("s"),
                    "t.id = s.id")
             .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
        except (ConcurrentAppendException, ConcurrentDeleteReadException):
            attempts.append("conflict")
            raise

    run_dml(merge, "t batch 0")
    history = DeltaTable(path).history()
    assert attempts == [2, "conflict", 3], "the first MERGE met the OPTIMIZE (version 3) and the second ran on it"
    assert [h["operation"] for h in sorted(history, key=lambda h: h["version"])][-2:] == ["OPTIMIZE", "MERGE"]
    rows = dict(DeltaTable(path).to_pandas()[["id", "v"]].itertuples(index=False))
    assert rows == {i: (1 if 5 <= i < 25 else 0) for i in range(30)}
