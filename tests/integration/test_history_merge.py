"""An SCD2 history micro-batch reads and rewrites only its own keys' rows (issue 19: it used to
aggregate the whole table every batch), with the same result as over the whole table: a real
local Spark and a real Delta table, no broker."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql import types as T

from kappa.harness.bench.status import files_read
from kappa.harness.delta_log import commit_actions, latest_commit
from kappa.streaming.kinds.changelog import batch_keys, history_merge_source, merge_history

pytestmark = pytest.mark.integration

KEYS, FIELDS = ["tailnum"], ["tailnum", "seats"]
HISTORY = T.StructType([T.StructField("tailnum", T.StringType()), T.StructField("seats", T.IntegerType()),
                        T.StructField("valid_from", T.TimestampType()), T.StructField("valid_to", T.TimestampType()),
                        T.StructField("is_current", T.BooleanType()), T.StructField("_lsn", T.LongType()),
                        T.StructField("_end_lsn", T.LongType())])
CHANGES = T.StructType([T.StructField("offset", T.LongType()), T.StructField("_op", T.StringType()),
                        T.StructField("_lsn", T.LongType()), T.StructField("_changed_at", T.TimestampType()),
                        T.StructField("tailnum", T.StringType()), T.StructField("seats", T.IntegerType())])


def ts(s: int) -> datetime:
    return datetime.fromtimestamp(1_700_000_000 + s, tz=timezone.utc).replace(tzinfo=None)


def test_a_history_batch_reads_and_rewrites_only_its_keys(spark, tmp_path):
    path = str(tmp_path / "planes_history")
    # A has a closed and a current version, B one current version, in a file of its own
    spark.createDataFrame([("A", 10, ts(0), ts(10), False, 5, 10), ("A", 11, ts(10), None, True, 10, None)],
                          HISTORY).write.format("delta").save(path)
    spark.createDataFrame([("B", 20, ts(20), None, True, 20, None)], HISTORY).write.format("delta").mode("append").save(path)
    b_files = {a["add"]["path"] for a in commit_actions(path, 1) if "add" in a}
    good = spark.createDataFrame([
        (1, "u", 10, ts(10), "A", 11),  # re-delivered: at or below A's highest applied LSN
        (2, "u", 30, ts(30), "A", 12),
        (3, "d", 40, ts(40), "A", None),
        (4, "c", 50, ts(50), "C", 30),
        (5, "c", 50, ts(50), "C", 30),  # a second copy of one change
    ], CHANGES)

    only = batch_keys(good, KEYS)
    table = spark.read.format("delta").load(path)
    assert sorted(r.tailnum for r in table.where(only("")).collect()) == ["A", "A"]  # B is not read
    src = history_merge_source(good, table.where(only("")), KEYS, FIELDS)
    assert sorted(src.collect(), key=repr) == sorted(history_merge_source(good, table, KEYS, FIELDS).collect(), key=repr)
    assert sorted(((r._action, r.tailnum, r._lsn, r.is_current, r._end_lsn) for r in src.collect()), key=repr) == [
        ("close", "A", 30, False, None), ("close", "C", 50, False, None),
        ("insert", "A", 30, False, 40), ("insert", "C", 50, True, None)]

    sc = spark.sparkContext
    sc.setJobGroup("history-merge-test", "the merge")
    try:
        merge_history(path, good, KEYS, FIELDS)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    # the bench's files-read count, from Spark's SQL status store: the merge read A's file and the log
    files = files_read(spark, set(sc.statusTracker().getJobIdsForGroup("history-merge-test")))
    assert files is not None and files >= 1, files
    rows = sorted((r.tailnum, r._lsn, r.seats, r.valid_from, r.valid_to, r.is_current, r._end_lsn)
                  for r in spark.read.format("delta").load(path).collect())
    assert rows == [("A", 5, 10, ts(0), ts(10), False, 10), ("A", 10, 11, ts(10), ts(30), False, 30),
                    ("A", 30, 12, ts(30), ts(40), False, 40), ("B", 20, 20, ts(20), None, True, None),
                    ("C", 50, 30, ts(50), None, True, None)]
    merge = commit_actions(path, latest_commit(path))
    removed = {a["remove"]["path"] for a in merge if "remove" in a}
    assert removed and not removed & b_files  # A's file rewritten, B's untouched

    # the same batch again (a re-run after a failure) changes nothing
    merge_history(path, good, KEYS, FIELDS)
    again = sorted((r.tailnum, r._lsn, r.seats, r.valid_from, r.valid_to, r.is_current, r._end_lsn)
                   for r in spark.read.format("delta").load(path).collect())
    assert again == rows


def test_a_batch_of_more_keys_than_the_literal_bound_reads_the_whole_table(spark, monkeypatch):
    from kappa.streaming.kinds import changelog

    good = spark.createDataFrame([(i, "c", i, ts(i), f"N{i}", 1) for i in range(5)], CHANGES)
    assert batch_keys(good, KEYS) is not None
    monkeypatch.setattr(changelog, "MAX_KEY_LITERALS", 4)
    assert batch_keys(good, KEYS) is None
