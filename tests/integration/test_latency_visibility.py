"""The bench's latency rule on a table Spark writes: small appends with Delta's auto-compaction on
(this test turns it on; Kappa's session has it off since `kappa maintain` compacts) and an OPTIMIZE. Each row's visibility
commit comes from the log (first data-changing add) and equals the commit Spark's own change data
feed reader and delta-rs's give it; no compaction moves a row."""

from __future__ import annotations

import pytest

from kappa.harness.delta_log import commit_actions, commit_time, first_visible, first_visible_cdf, latest_commit, \
    rearranges_only

pytestmark = pytest.mark.integration


def _commit_info(path: str, version: int) -> dict:
    return next(a["commitInfo"] for a in commit_actions(path, version) if "commitInfo" in a)


def _operation(path: str, version: int) -> str:
    return _commit_info(path, version)["operation"]


def test_spark_compactions_move_no_row_and_the_change_feeds_agree(spark, tmp_path):
    path = str(tmp_path / "live")
    spark.sql(f"CREATE TABLE delta.`{path}` (event_id STRING, n INT) USING delta "
              "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    written: dict[str, int] = {}  # event id -> the version of the append that wrote it
    # Auto-compaction after every second small file, so the appends below are followed by compactions
    # (Kappa's session has it off; Delta's default waits for 50 files).
    spark.conf.set("spark.databricks.delta.autoCompact.enabled", "true")
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "2")
    try:
        for batch in range(4):
            ids = [f"b{batch}-{i}" for i in range(5)]
            before = latest_commit(path)
            spark.createDataFrame([(e, i) for i, e in enumerate(ids)], "event_id STRING, n INT") \
                .repartition(2).write.format("delta").mode("append").save(path)
            (append,) = [v for v in range(before + 1, latest_commit(path) + 1) if _operation(path, v) == "WRITE"]
            written.update(dict.fromkeys(ids, append))
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")
        spark.conf.set("spark.databricks.delta.autoCompact.enabled", "false")
    spark.createDataFrame([("b4-0", 0), ("b4-1", 1)], "event_id STRING, n INT").repartition(2) \
        .write.format("delta").mode("append").save(path)
    written.update(dict.fromkeys(["b4-0", "b4-1"], latest_commit(path)))
    spark.sql(f"OPTIMIZE delta.`{path}`")  # rewrites b4's two small files
    last = latest_commit(path)
    compactions = [v for v in range(1, last + 1) if rearranges_only(commit_actions(path, v))]
    assert all(_operation(path, v) == "OPTIMIZE" for v in compactions)
    auto = [v for v in compactions if _commit_info(path, v)["operationParameters"].get("auto") in (True, "true")]
    assert len(auto) >= 3 and last in compactions and last not in auto, (compactions, auto)
    print(f"commits 0..{last}; compactions {compactions} (auto {auto}); appends {sorted(set(written.values()))}")

    first_batch = written["b0-0"]  # the window starts after it: its rows were visible before
    expected = {e: (v, commit_time(path, v)) for e, v in written.items() if v > first_batch}
    assert first_visible(path, "event_id", after=first_batch) == expected

    # Spark's own feed reader: one insert per row, at its append; nothing from the compactions.
    spark_feed = (spark.read.format("delta").option("readChangeFeed", "true")
                  .option("startingVersion", first_batch + 1).load(path)
                  .select("event_id", "_change_type", "_commit_version").collect())
    assert sorted(tuple(r) for r in spark_feed) == sorted((e, "insert", v) for e, (v, _) in expected.items())
    rs_feed = first_visible_cdf(path, "event_id", after=first_batch)
    assert {e: v for e, (v, _) in rs_feed.items()} == {e: v for e, (v, _) in expected.items()}
    # The feed's commit timestamp and the commit file's mtime: two clocks of one commit.
    skew = max(abs(rs_feed[e][1] - at) for e, (_, at) in expected.items())
    print(f"rows {len(expected)}; largest gap between the feed's timestamp and the commit mtime {skew * 1000:.1f} ms")
    assert skew < 1.0
