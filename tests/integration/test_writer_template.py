"""Every kind's writer runs through one template (:class:`kappa.streaming.writers.MicroBatchWriter`,
issue 42 item 2), shown on real Spark, Kafka and Delta with a fault hook that records the points a
writer reaches instead of killing the driver. Each micro-batch reaches ``before_write``, one point
after each commit it made (quarantine, late events, its table), in that order, and ``after_batch``;
together the writers reach every point of :data:`kappa.faults.FAULT_POINTS`. A re-run of a batch
whose table commit exists (a restart: Spark re-runs the batch its commit log lacks) reaches only
``after_batch`` and adds no commit to any table.

Silver (``parse``) runs its real streaming query over the broker (its state store needs a stream):
the later flights, then the earliest ones, behind the watermark by then, with malformed records;
its restart re-runs the last batch. The other writers are called as ``foreachBatch`` calls them, on
one small micro-batch of their query's rows: the kinds' own frames over silver's table or over Kafka
records (raw, window, changelog from hand-made Debezium change events, lookup, materialized view);
the pattern's rows written out (its processor needs a stream). A new writer of the same version,
given the same batch, is the restart."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import pytest
from pyspark.sql import functions as F

from kappa.core.storage import local_path
from kappa.delta.registry import Registry, late_events_path, quarantine_path, rescued_path
from kappa.faults import FAULT_POINTS
from kappa.harness.delta_log import txn_commits
from kappa.ingest.events import Events
from kappa.ingest.nycflights13 import load_events, publish
from kappa.runners import run_until_caught_up
from kappa.runners.versions import resolve_versions
from kappa.spec import load_catalog
from kappa.streaming.kinds.changelog import ChangelogWriter
from kappa.streaming.records import KAFKA_COLUMNS
from kappa.streaming.kinds.pattern import PatternWriter
from kappa.streaming.kinds.lookup import LookupWriter
from kappa.streaming.kinds.materialized_view import ViewWriter
from kappa.streaming.kinds.window import window_frame
from kappa.streaming.writers import AppendWriter, UpsertWriter

from .test_fault_points import _plane_changes

pytestmark = pytest.mark.integration

ASSETS = ["flights", "flights_bronze", "departures_hourly", "delay_streaks", "planes", "planes_history", "airlines",
          "airlines_history", "fleet", "flights_enriched", "fleet_by_airline"]
DROP = {"flights_bronze": "`offset` % 7 <> 3", "departures_hourly": "origin <> 'EWR'"}  # rows a drop rule refuses


@dataclass
class Recorder:
    """A fault hook (:class:`kappa.faults.Fault`'s ``hit``) that records each point reached."""

    seen: list[tuple[str, str, int]] = field(default_factory=list)

    def hit(self, asset: str, point: str, batch_id: int) -> None:
        self.seen.append((asset, point, batch_id))


def _edit(name: str, doc: dict) -> None:
    if name in DROP:
        doc["row_expectations"] = [{"name": "kept", "expr": DROP[name], "on_violation": "drop"}]


def _kafka(spark, records: list[tuple[bytes | None, bytes | None]], topic: str):
    """Kafka records as a Kafka source reads them (:data:`KAFKA_COLUMNS`), offsets 0.. in partition 0."""
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return spark.createDataFrame([(k, v, topic, 0, i, at) for i, (k, v) in enumerate(records)],
                                 "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
                                 ).select(*KAFKA_COLUMNS)


def _debezium(rows: list[dict], key: str, lsn: int = 100) -> list[tuple[bytes, bytes]]:
    """Snapshot reads (``op`` ``r``) of ``rows`` as Debezium writes them, keyed by ``key``."""
    return [(json.dumps({key: r[key]}).encode(),
             json.dumps({"before": None, "after": r, "op": "r", "source": {"lsn": lsn + i, "ts_ms": 1_700_000_000_000}}
                        ).encode()) for i, r in enumerate(rows)]


def _tables(settings, versions: dict) -> list[str]:
    return [str(quarantine_path(settings)), str(late_events_path(settings)), str(rescued_path(settings)),
            *[v.table_path for v in versions.values()]]


def _commits(paths: list[str]) -> dict:
    return {p: txn_commits(p) for p in paths if local_path(p).joinpath("_delta_log").is_dir()}


def test_every_writer_reaches_its_fault_points_in_order_and_a_rerun_only_after_batch(make_env, spark):
    settings, suffix = make_env(_edit)
    catalog = load_catalog(settings.assets_dir)
    versions = resolve_versions(catalog, ASSETS, Registry(settings))
    reached: dict[str, list[str]] = {}

    def run(cls, asset: str, batch, *args) -> None:
        """One writer of ``asset`` on ``batch`` as micro-batch 0, then a new one (a restart) on the
        same batch: its points recorded, the re-run's checked."""
        spec, version = catalog[asset], versions[asset]
        writer = cls(spark, spec, version, settings, *args)
        writer.fault = hook = Recorder()
        writer(batch, 0)
        assert {(a, b) for a, _, b in hook.seen} == {(asset, 0)}
        reached[f"{cls.__name__} {asset}"] = [p for _, p, _ in hook.seen]
        before = _commits(_tables(settings, versions))
        again = cls(spark, spec, version, settings, *args)
        again.fault = hook = Recorder()
        again(batch, 0)
        assert [p for _, p, _ in hook.seen] == ["after_batch"], f"{asset}: a re-run reached {hook.seen}"
        assert _commits(_tables(settings, versions)) == before, f"{asset}: a re-run committed"

    # parse (silver), through its real query (its state store needs a stream): the middle flights,
    # then the earliest ones (behind the watermark by then: late) with malformed records and the
    # latest ones (new: the batch's table commit exists, so its re-run is skipped whole).
    flights = next(e for e in load_events(limit=650) if e.topic == "flights")
    records = list(zip(flights.keys, flights.values, flights.timestamps_ms.tolist(), flights.event_ids))
    bad = [(b"BAD", b'{"event_id": "bad-%d", "origin": ' % i, records[0][2], "") for i in range(3)]  # truncated JSON

    def publish_part(part: list) -> None:
        publish(settings, [Events(topic=f"flights_{suffix}", keys=[r[0] for r in part], values=[r[1] for r in part],
                                  timestamps_ms=np.array([r[2] for r in part], dtype=np.int64),
                                  event_ids=[r[3] for r in part])])

    hook = Recorder()
    hooked = settings.model_copy(update={"fault": hook})
    silver_version = {"flights": versions["flights"]}
    publish_part(records[200:600])
    run_until_caught_up(hooked, ["flights"], spark=spark, versions=silver_version)
    publish_part(records[:100] + bad + records[100:200] + records[600:])
    run_until_caught_up(hooked, ["flights"], spark=spark, versions=silver_version)
    batches: dict[int, list[str]] = {}
    for asset, point, batch_id in hook.seen:
        assert asset == "flights"
        batches.setdefault(batch_id, []).append(point)
    for batch_id, points in batches.items():  # each batch: its points once each, in order
        assert points[0] == "before_write" and points[-1] == "after_batch", (batch_id, points)
        assert points == sorted(set(points), key=FAULT_POINTS.index), (batch_id, points)
    assert batches[max(batches)] == list(FAULT_POINTS)  # the second part: a commit to each table
    reached["ParseWriter flights"] = sorted({p for points in batches.values() for p in points}, key=FAULT_POINTS.index)
    # A restart that re-runs the last batch (its commit log entry gone, as a kill before it leaves it).
    last = max(batches)
    commits = local_path(versions["flights"].checkpoint_path) / "commits"
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    before = _commits(_tables(settings, versions))
    hook.seen.clear()
    run_until_caught_up(hooked, ["flights"], spark=spark, versions=silver_version)
    assert hook.seen == [("flights", "after_batch", last)] and (commits / str(last)).exists()
    assert _commits(_tables(settings, versions)) == before
    silver = spark.read.format("delta").load(versions["flights"].table_path)
    late = spark.read.format("delta").load(str(late_events_path(settings))).where("asset = 'flights'")
    assert silver.count() + late.count() == len(records) and late.count() > 0
    kafka = _kafka(spark, [(r[0], r[1]) for r in records[:150] + bad + records[150:]], f"flights_{suffix}")

    # raw (bronze, AppendWriter) and window (gold, UpsertWriter): a drop rule quarantines some rows.
    run(AppendWriter, "flights_bronze", kafka)
    run(UpsertWriter, "departures_hourly", window_frame(silver, catalog["departures_hourly"]))
    quarantine = spark.read.format("delta").load(str(quarantine_path(settings)))
    for asset, rule in DROP.items():
        dropped = quarantine.where(F.col("asset") == asset).count()
        kept = spark.read.format("delta").load(versions[asset].table_path)
        assert dropped > 0 and kept.where(F.expr(f"NOT ({rule})")).count() == 0, asset

    # pattern: one match and one late row.
    streak = spark.createDataFrame(
        [("N1", datetime(2013, 1, 1, 6), datetime(2013, 1, 1, 9), ["a", "b", "c"], [61.0, 70.0, 80.0], False),
         ("N2", datetime(2013, 1, 1, 1), datetime(2013, 1, 1, 1), ["d"], [90.0], True)],
        "tailnum string, first_event_time timestamp, last_event_time timestamp, event_ids array<string>, "
        "dep_delays array<double>, _late boolean").withColumn("_watermark", F.lit(datetime(2013, 1, 1, 4)))
    run(PatternWriter, "delay_streaks", streak)

    # changelog, both modes (planes: malformed records among them), then a lookup and a view over them.
    changes, malformed = _plane_changes()
    planes = _kafka(spark, changes, "planes")
    run(ChangelogWriter, "planes", planes)
    run(ChangelogWriter, "planes_history", planes)
    carriers = sorted({json.loads(v)["carrier"] for v in flights.values})
    airlines = _kafka(spark, _debezium([{"carrier": c, "name": f"Airline {c}"} for c in carriers], "carrier"), "airlines")
    run(ChangelogWriter, "airlines", airlines)
    run(ChangelogWriter, "airlines_history", airlines)
    tails = sorted({json.loads(k)["tailnum"] for k, v in changes if v is not None})[:30]
    run(ChangelogWriter, "fleet", _kafka(spark, _debezium(
        [{"tailnum": t, "carrier": carriers[i % len(carriers)], "since": 15_000} for i, t in enumerate(tails)],
        "tailnum"), "fleet"))
    for asset in ("planes", "planes_history"):
        assert quarantine.where(F.col("asset") == asset).count() == len(malformed), asset
    run(LookupWriter, "flights_enriched", silver)
    enriched = spark.read.format("delta").load(versions["flights_enriched"].table_path)
    assert enriched.count() == silver.count() and enriched.where("airline_name IS NOT NULL").count() == silver.count()
    run(ViewWriter, "fleet_by_airline", spark.createDataFrame([("fleet", 1)], "_table string, _commit_version long"))
    view = spark.read.format("delta").load(versions["fleet_by_airline"].table_path)
    assert view.agg(F.sum("planes")).first()[0] == len(tails)

    print("fault points reached:", json.dumps(reached, indent=1))
    table, quarantined = ["before_write", "after_table_commit", "after_batch"], [
        "before_write", "after_quarantine_commit", "after_table_commit", "after_batch"]
    assert reached == {
        "ParseWriter flights": list(FAULT_POINTS),
        "AppendWriter flights_bronze": quarantined,
        "UpsertWriter departures_hourly": quarantined,
        "PatternWriter delay_streaks": ["before_write", "after_late_commit", "after_table_commit", "after_batch"],
        "ChangelogWriter planes": quarantined,
        "ChangelogWriter planes_history": quarantined,
        "ChangelogWriter airlines": table,
        "ChangelogWriter airlines_history": table,
        "ChangelogWriter fleet": table,
        "LookupWriter flights_enriched": table,
        "ViewWriter fleet_by_airline": table,
    }
    assert {p for points in reached.values() for p in points} == set(FAULT_POINTS)
