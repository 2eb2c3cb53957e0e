"""The shared Spark session is put back after each test module (tests/conftest.py reset_spark)."""

from __future__ import annotations

import pytest

from ..conftest import reset_spark

pytestmark = pytest.mark.integration


def test_reset_stops_queries_and_drops_cached_frames_and_temp_views(spark, tmp_path):
    frame = spark.range(10).cache()
    frame.count()
    frame.createOrReplaceTempView("left_behind")
    spark.range(3).createOrReplaceTempView("also_left_behind")
    query = (spark.readStream.format("rate").option("rowsPerSecond", 1).load().writeStream
             .format("noop").queryName("left_running").option("checkpointLocation", str(tmp_path / "cp")).start())
    assert spark.catalog.isCached("left_behind") and (frame.storageLevel.useMemory or frame.storageLevel.useDisk)

    done = reset_spark(spark)

    assert done["queries"] == ["left_running"] and not query.isActive and spark.streams.active == []
    assert sorted(done["views"]) == ["also_left_behind", "left_behind"]
    assert [t.name for t in spark.catalog.listTables() if t.isTemporary] == []
    assert not (frame.storageLevel.useMemory or frame.storageLevel.useDisk)  # clearCache() dropped it
