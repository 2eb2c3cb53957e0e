"""delay_streaks: complex event processing (a pattern per tailnum) on real Kafka, Spark and Delta,
checked against a plain-Python computation of the same rule (tests/integration/helpers.py).

One bounded slice, three proofs in sequence (each phase builds on the one before, so they share
one setup):

1. **Stop mid-stream, restart from the checkpoint.** The log arrives in two parts, cut at an event
   time chosen so that two streaks of the slice (N13975 and N18557 on 2013-01-02) have their
   first two delayed departures behind the first part's final watermark and their third after
   the cut: once the first part is processed, those partial matches live only in the state
   store. The second part arrives while silver and the pattern run with a 1-second trigger; both
   are stopped mid-stream and restarted from their checkpoints (pending events, partial matches,
   event-time timers). v1 must equal the rule computed in plain Python.
2. **Replay.** v1 passes its gate and is promoted; the replay into v2 (one uninterrupted run over
   the same log) equals v1 row for row and ends with as many state rows.
3. **Late rows.** A departure behind the watermark of an aircraft already released past it cannot
   be matched in order: it lands in the late-events table and ``late_rows`` counts it. Three
   departures behind the watermark of an aircraft never seen before are no loss: they are matched
   in order, as a replay would match them.
4. **Forget.** ``kappa forget`` of that first aircraft removes its match from every version and its
   late row from the late-events table; the replay it promotes equals v2 without the aircraft.

A second test kills ``kappa run`` (``KAPPA_FAULT``) right after the pattern committed the matches of
a micro-batch, before Spark's commit log: the re-run batch is skipped by Delta, nothing twice."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

from kappa.delta.registry import Registry, late_events_path
from kappa.lifecycle.forget import forget
from kappa.harness.delta_log import duplicate_commits
from kappa.ingest.nycflights13 import load_events, publish
from kappa.lifecycle.promotion import promote, replay
from kappa.quality.gate import late_events_of, late_rows
from kappa.runners import run_until_caught_up
from kappa.runners.versions import resolve_versions
from kappa.spec import load_catalog
from kappa.streaming.query import start_query
from kappa.streaming.writers import committed_txn_version

from .helpers import assert_streaks_equal, expected_delay_streaks, ingest, renamed, table
from .test_fault_points import _kappa_run

pytestmark = pytest.mark.integration

SLICE = 10_000  # the first 10,000 flights (to 2013-01-13): 5 matches
ASSETS = ["flights", "delay_streaks"]
CUT = pd.Timestamp("2013-01-02T18:00Z")  # event time at which the slice's log is cut in two
SPANNING = {"N13975", "N18557"}  # their streaks are two events in before the cut, one after


def _emitted(expected: pd.DataFrame, latest: pd.Timestamp) -> pd.DataFrame:
    """The matches a stream has written once it has read the whole log: those whose last departure
    is at or before the final watermark (latest event time - the asset's 2-hour delay); the others
    wait in state for later events."""
    return expected[expected.last_event_time <= latest - pd.Timedelta(hours=2)]


def _split(events, cut_ms: int):
    """The flights events before ``cut_ms`` (event time) and from it on, each in log order."""
    (flights,) = [e for e in events if e.topic.startswith("flights")]
    before = flights.timestamps_ms < cut_ms

    def take(mask):
        return dataclasses.replace(
            flights, keys=[k for k, m in zip(flights.keys, mask) if m],
            values=[v for v, m in zip(flights.values, mask) if m], timestamps_ms=flights.timestamps_ms[mask],
            event_ids=[e for e, m in zip(flights.event_ids, mask) if m])

    return [take(before)], [take(~before)]


def _edits(name: str, doc: dict) -> None:
    """A 1-second trigger (several micro-batches while data arrives), and a silver that keeps
    events up to 30 days behind, so rows behind the pattern's 2-hour watermark reach it (with the
    shipped YAML silver sets them aside first; the slice itself has none)."""
    doc["trigger"] = {"processing_time": "1 second"}
    if name == "flights":
        doc["watermark"]["delay"] = "30 days"


def _departure(template: bytes, event_id: str, tailnum: str, at: pd.Timestamp) -> tuple[bytes, bytes, int]:
    """A departure 90 minutes late (key, JSON value, timestamp in ms) made from a real record."""
    value = {**json.loads(template), "event_id": event_id, "tailnum": tailnum, "flight": 9999,
             "dep_delay": 90.0, "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return tailnum.encode(), json.dumps(value).encode(), at.value // 10**6


def test_delay_streaks_survive_a_stop_mid_stream_replay_into_v2_equal_and_name_late_rows(make_env, spark):
    settings, suffix = make_env(edit=_edits)
    expected, latest = expected_delay_streaks(SLICE)
    events = renamed(load_events(limit=SLICE, disorder_minutes=5), suffix)
    first, second = _split(events, int(CUT.value // 10**6))
    took = {}
    t0 = time.monotonic()

    # 1. Part one, processed to its end: the spanning streaks are half-matched in the state store.
    publish(settings, first)
    results = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark)}
    wm1 = pd.Timestamp(results["delay_streaks"].watermark).tz_convert("UTC")
    spanning = expected[expected.tailnum.isin(SPANNING)]
    assert len(spanning) == 2
    for r in spanning.itertuples():  # what makes this a mid-match restart (the data, checked)
        assert r.first_event_time <= wm1 and r.last_event_time >= CUT, r
    state_rows = results["delay_streaks"].state_rows
    assert state_rows > 0  # pending events and partial matches
    assert_streaks_equal(table(settings, "delay_streaks"), expected[expected.last_event_time <= wm1])
    took["part one"], t0 = time.monotonic() - t0, time.monotonic()

    # Part two arrives while both run continuously; both stop mid-stream, once the pattern has
    # read some of it (a micro-batch with input rows).
    catalog = load_catalog(settings.assets_dir)
    versions = resolve_versions(catalog, ASSETS, Registry(settings))
    silver = start_query(spark, catalog["flights"], versions["flights"], settings, "continuous")
    cep = start_query(spark, catalog["delay_streaks"], versions["delay_streaks"], settings, "continuous")
    producer = threading.Thread(target=publish, args=(settings, second), kwargs={"rate": 2_000})
    producer.start()
    try:
        deadline = time.monotonic() + 300
        while not any(p["numInputRows"] for p in cep.query.recentProgress):
            assert time.monotonic() < deadline, "the pattern query read nothing new"
            assert silver.query.isActive and cep.query.isActive, silver.query.exception() or cep.query.exception()
            time.sleep(0.2)
    finally:
        silver.query.stop()
        cep.query.stop()
        producer.join()
    stopped_at = (cep.query.lastProgress or {}).get("eventTime", {}).get("watermark")
    partial = len(table(settings, "delay_streaks"))
    took["mid-stream"], t0 = time.monotonic() - t0, time.monotonic()

    # Restarted from the checkpoints: the matches of the rule, none twice.
    results = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark, versions=versions)}
    v1 = table(settings, "delay_streaks")
    assert len(v1) >= 5
    assert_streaks_equal(v1, _emitted(expected, latest))
    assert set(SPANNING) <= set(v1.tailnum)
    assert results["delay_streaks"].dropped_by_watermark == 0 and results["delay_streaks"].late_events == 0
    took["restart"], t0 = time.monotonic() - t0, time.monotonic()

    # 2. An uninterrupted run of the pattern over the same log: the replay into v2, gated, equals
    # v1 row for row, and ends with as many state rows (the same pending events and partial matches).
    for asset in ASSETS:
        promote(settings, asset, 1, spark=spark)  # runs the gate: GX suite, late_rows, shadow_diff
    report = replay(settings, "delay_streaks", promote=True, spark=spark)
    assert report.versions == {"delay_streaks": 2} and report.passed
    checks = {c.name: c for c in report.gates["delay_streaks"].checks}
    assert checks["late_rows"].passed and checks["late_rows"].observed == 0
    assert checks["expect_compound_columns_to_be_unique__tailnum_first_event_time"].passed
    assert_streaks_equal(table(settings, "delay_streaks", 2), v1)  # row for row, arrays in order
    caught = Registry(settings).version("delay_streaks", 2).last("caught_up")
    assert caught["state_rows"] == results["delay_streaks"].state_rows
    took["gates and replay"], t0 = time.monotonic() - t0, time.monotonic()

    # 3. Rows behind v2's watermark: one of an aircraft released past it (N13975, which has a
    # match too), three of a new one.
    wm = pd.Timestamp(caught["watermark"]).tz_convert("UTC")
    flights = table(settings, "flights")
    t = pd.to_datetime(flights.event_time, utc=True)
    ref = flights[(t < wm - pd.Timedelta(minutes=30)) & flights.dep_time.notna() & (flights.tailnum == "N13975")
                  ].sort_values("event_time").iloc[-1]  # its tailnum was released past it
    ref_time = pd.Timestamp(ref.event_time).tz_convert("UTC")
    (log,) = [e for e in events if e.topic.startswith("flights")]
    template = log.values[log.event_ids.index(ref.event_id)]
    rows = [_departure(template, "late-1", ref.tailnum, ref_time - pd.Timedelta(minutes=1)),
            *[_departure(template, f"fresh-{h}", "NLATE1", wm - pd.Timedelta(hours=h)) for h in (5, 4, 3)]]
    publish(settings, [dataclasses.replace(
        log, keys=[k for k, _, _ in rows], values=[v for _, v, _ in rows],
        timestamps_ms=np.array([ts for _, _, ts in rows], dtype="int64"), event_ids=[])])
    results = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark)}
    assert results["flights"].rows == len(flights) + 4 and results["flights"].late_events == 0  # all reach silver
    result = results["delay_streaks"]
    assert result.version == 2 and result.dropped_by_watermark == 0 and result.late_events == 1
    named = DeltaTable(str(late_events_path(settings))).to_pandas()
    assert len(named) == 1
    row = named.iloc[0]
    assert (row.asset, row.version, row.event_id) == ("delay_streaks", 2, "late-1")
    assert pd.Timestamp(row.event_time).tz_convert("UTC") == ref_time - pd.Timedelta(minutes=1)
    assert pd.Timestamp(row.watermark).tz_convert("UTC") >= ref_time  # where its key was released to
    after = table(settings, "delay_streaks", 2)
    added = after[after.tailnum == "NLATE1"]
    assert len(after) == len(v1) + 1 and list(added.event_ids.iloc[0]) == ["fresh-5", "fresh-4", "fresh-3"]
    assert_streaks_equal(after[after.tailnum != "NLATE1"], v1)  # late-1 changed no match
    check = late_rows(Registry(settings).version("delay_streaks", 2),
                      late_events_of(spark, settings, "delay_streaks", 2))
    assert (check.passed, check.observed, check.details["late_events"]) == (False, 1, 1)
    took["late rows"], t0 = time.monotonic() - t0, time.monotonic()

    # 4. Forgetting N13975 (the flights topic's record key is the tailnum): its match leaves every
    # version, its late row the late-events table, and the replay into v3 equals v2 without it.
    ids = set(flights.event_id[flights.tailnum == "N13975"]) | {"late-1"}
    assert "N13975" in set(after.tailnum)
    forget(settings, f"flights_{suffix}", "N13975", "test: a data subject request", spark=spark)
    reg = Registry(settings)
    assert reg.promoted("delay_streaks").version == 3
    for v in (1, 2, 3):
        rows = table(settings, "delay_streaks", v)
        assert "N13975" not in set(rows.tailnum), v
        assert not ids & {i for e in rows.event_ids for i in e}, v
    assert_streaks_equal(table(settings, "delay_streaks", 3), after[after.tailnum != "N13975"])
    assert DeltaTable(str(late_events_path(settings))).to_pandas().empty
    took["forget"] = time.monotonic() - t0

    print(f"\npart one: watermark {wm1}, {state_rows} state rows; stopped mid-stream at watermark "
          f"{stopped_at} with {partial} matches written; {len(v1)} after the restart "
          f"({caught['state_rows']} state rows, as the replay's); late-1 named at watermark {row.watermark}; "
          "seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in took.items()))


FAULT_SLICE = 3_000  # flights (to 2013-01-05): 2 matches written by the end


def test_a_kill_after_the_pattern_committed_its_matches_writes_nothing_twice(make_env, spark):
    """``KAPPA_FAULT`` kills ``kappa run`` (SIGKILL of its process group) right after
    ``delay_streaks`` committed micro-batch 1 (the first whose watermark releases events, so it
    writes matches), before Spark wrote that batch's commit log. The next run re-runs batch 1 from
    the checkpoint (over the same offsets, from the state of batch 0), Delta skips its append (same
    ``txnAppId``/``txnVersion``), and the table ends exact with one commit per batch."""
    settings, suffix = make_env()
    ingest(settings, suffix, limit=FAULT_SLICE)
    done, killed_s = _kappa_run(settings, "delay_streaks:after_table_commit:1", assets=tuple(ASSETS))
    assert done.returncode in (137, -9), f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "KAPPA_FAULT: delay_streaks batch 1 at after_table_commit" in done.stderr
    v = Registry(settings).latest("delay_streaks")
    assert committed_txn_version(v.table_path, v.txn_app_id, None) == 1
    assert not (Path(v.checkpoint_path) / "commits" / "1").exists()
    written = len(table(settings, "delay_streaks"))
    assert written > 0  # batch 1 did write matches before the kill

    # The restart: on the session's Spark (a new driver would only add its start-up time), with the
    # killed run's settings (silver's anti-join off, as in every fault-point run).
    started = time.monotonic()
    run_until_caught_up(settings.model_copy(update={"dedup_anti_join": False}), ASSETS, spark=spark)
    restart_s = time.monotonic() - started
    assert (Path(v.checkpoint_path) / "commits" / "1").exists()
    assert duplicate_commits(v.table_path) == 0
    expected, latest = expected_delay_streaks(FAULT_SLICE)
    assert_streaks_equal(table(settings, "delay_streaks"), _emitted(expected, latest))
    print(f"\nkilled after {written} matches committed ({killed_s:.0f} s); restart {restart_s:.0f} s")
