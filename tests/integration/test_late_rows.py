"""Late rows kept everywhere: the rows a window's, session's, stream-stream join's and sliding
window's watermark drops are named in the late-events table, exactly the rows Spark dropped.

One small slice (the first 600 flights and weather observations) runs through silver and the four
stateful assets until caught up. Then events arrive far behind the gold watermark (silver here keeps
events up to a year behind, so they reach gold): flights at several distances behind it, a
cancelled one, two of one aircraft at the same minute, one ahead of the watermark, and two weather
observations (the join's right side), one behind it. The second run drops some of them in each
operator. For each asset the test computes, in pandas and from the rule alone (Spark drops an input
row in micro-batch N by the watermark of batch N-1: a window ending at or before it, a session
``[t, t + gap)`` ending at or before it, a join or sliding-window row at or before it), which rows
must be dropped, and asserts that

* Spark's ``numRowsDroppedByWatermark`` equals that count in Spark's unit (a hopping window counts
  one partial aggregate per origin and window; a session one per aircraft and time, at most);
* the late-events table holds exactly those rows, by event id, with asset, version and a reason;
* the gate's ``late_rows`` check counts them as named (none dropped unnamed) and fails;
* ``kappa status --format json`` shows the named count of each asset.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

from typer.testing import CliRunner

from kappa.cli.app import app
from kappa.delta.registry import Registry, late_events_path
from kappa.ingest.nycflights13 import load_events, publish
from kappa.quality.gate import late_events_of, late_rows
from kappa.runners import run_until_caught_up

from .helpers import renamed

pytestmark = pytest.mark.integration

SLICE = 600
STATEFUL = ["departures_3h", "plane_sessions", "flights_weather", "origin_load"]
ASSETS = ["flights", "weather", *STATEFUL]


def _edits(name: str, doc: dict) -> None:
    """Silver keeps events up to a year behind, so rows behind the gold watermark reach gold (the
    slice's weather is EWR's first 600 hours, weeks ahead of its flights)."""
    if name in ("flights", "weather"):
        doc["watermark"]["delay"] = "365 days"


def _event(template: bytes, **fields) -> dict:
    return {**json.loads(template), **fields}


def _publish(settings, log, rows: list[dict], key: str) -> None:
    publish(settings, [dataclasses.replace(
        log, keys=[str(r[key]).encode() for r in rows], values=[json.dumps(r).encode() for r in rows],
        timestamps_ms=np.array([pd.Timestamp(r["event_time"]).value // 10**6 for r in rows], dtype="int64"),
        event_ids=[])])


def _iso(t: pd.Timestamp) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_rows_a_stateful_operator_drops_are_named_exactly(make_env, spark):
    settings, suffix = make_env(edit=_edits)
    events = renamed(load_events(limit=SLICE), suffix)
    t0 = time.monotonic()
    publish(settings, events)
    first = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark)}
    wm = {a: pd.Timestamp(first[a].watermark).tz_convert("UTC") for a in STATEFUL}
    assert all(first[a].dropped_by_watermark == 0 for a in STATEFUL)
    took_first = time.monotonic() - t0

    flights_log, weather_log = (next(e for e in events if e.topic.startswith(t)) for t in ("flights", "weather"))
    f0, w0 = flights_log.values[0], weather_log.values[0]
    w = wm["departures_3h"]  # every flights-only asset has the same watermark (same input, same delay)
    assert wm["plane_sessions"] == w and wm["origin_load"] == w
    behind = {"a": w - pd.Timedelta(hours=20), "a2": w - pd.Timedelta(hours=20),  # one aircraft, one minute
              "b": w - pd.Timedelta(hours=5, minutes=17), "c": w - pd.Timedelta(minutes=25),
              "d": w - pd.Timedelta(minutes=5), "x": w - pd.Timedelta(hours=14), "e": w + pd.Timedelta(minutes=40)}
    flights = []
    for i, (name, t) in enumerate(behind.items()):
        cancelled = name == "x"
        flights.append(_event(
            f0, event_id=f"late-{name}", event_time=_iso(t), time_hour=_iso(t.floor("h")), minute=t.minute,
            tailnum="NLATE1" if name in ("a", "a2") else f"NLATE{i + 2}", origin=["EWR", "JFK", "LGA"][i % 3],
            flight=9000 + i, dep_time=None if cancelled else 1234, dep_delay=None if cancelled else 7.0))
    _publish(settings, flights_log, flights, "tailnum")
    wj = wm["flights_weather"]  # the join's: the lower of its two sides' watermarks
    weather = [_event(w0, event_id=f"late-w{i}", event_time=_iso(t), time_hour=_iso(t), origin="EWR")
               for i, t in enumerate([wj.floor("h") - pd.Timedelta(hours=10), wj.ceil("h") + pd.Timedelta(hours=1)])]
    _publish(settings, weather_log, weather, "origin")
    t0 = time.monotonic()
    second = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark)}
    took_second = time.monotonic() - t0
    assert second["flights"].late_events == 0 and second["weather"].late_events == 0  # silver kept them all

    # What each operator must drop, from the rule alone.
    f = pd.DataFrame(flights).assign(t=lambda d: pd.to_datetime(d.event_time, utc=True))
    wx = pd.DataFrame(weather).assign(t=lambda d: pd.to_datetime(d.event_time, utc=True))
    departed = f[f.dep_time.notna()]
    late_windows = {(r.origin, r.t.floor("h") - pd.Timedelta(hours=k))  # hopping 3 h every 1 h
                    for r in f.itertuples() for k in (0, 1, 2)
                    if r.t.floor("h") - pd.Timedelta(hours=k) + pd.Timedelta(hours=3) <= w}
    expected = {
        "departures_3h": ({r.event_id for r in f.itertuples()
                           if any((r.origin, r.t.floor("h") - pd.Timedelta(hours=k)) in late_windows for k in (0, 1, 2))},
                          (len(late_windows), len(late_windows))),
        "plane_sessions": (set(departed[departed.t + pd.Timedelta(hours=12) <= w].event_id),
                           (departed[departed.t + pd.Timedelta(hours=12) <= w][["tailnum", "t"]].drop_duplicates().shape[0],
                            int((departed.t + pd.Timedelta(hours=12) <= w).sum()))),
        "origin_load": (set(f[f.t <= w].event_id), (int((f.t <= w).sum()),) * 2),
        "flights_weather": (set(f[f.t <= wj].event_id) | set(wx[wx.t <= wj].event_id),
                            (int((f.t <= wj).sum()) + int((wx.t <= wj).sum()),) * 2),
    }
    named = DeltaTable(str(late_events_path(settings))).to_pandas()
    figures = {}
    for asset in STATEFUL:
        ids, (lo, hi) = expected[asset]
        r = second[asset]
        figures[asset] = (r.dropped_by_watermark, len(ids), r.late_events)
        assert ids and lo <= r.dropped_by_watermark <= hi, (asset, r.dropped_by_watermark, lo, hi)
        assert r.dropped_named == r.dropped_by_watermark and r.late_not_named == [], (asset, r.late_not_named)
        mine = named[(named.asset == asset) & (named.version == 1)]
        assert sorted(mine.event_id) == sorted(ids), asset  # exactly the dropped rows, each once
        assert r.late_events == len(ids)
        assert mine.reason.str.contains("micro-batch").all() and mine.watermark.notna().all()
        assert all(json.loads(v)["event_id"] in ids for v in mine.value)  # the row itself, as JSON
        check = late_rows(Registry(settings).version(asset, 1), late_events_of(spark, settings, asset, 1))
        assert (check.passed, check.observed, check.details["not_named"]) == (False, len(ids), 0), asset
    env = {"KAPPA_HOME": str(settings.home), "KAPPA_ASSETS_DIR": str(settings.assets_dir),
           "KAPPA_KAFKA_PORT": str(settings.kafka_port), "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port)}
    status = CliRunner().invoke(app, ["status", *STATEFUL, "--format", "json"], env=env)
    assert status.exit_code == 0, status.output
    shown = {r["asset"]: r["late"] for r in json.loads(status.stdout)}
    assert shown == {a: {"named": len(expected[a][0]), "dropped": second[a].dropped_by_watermark, "not_named": 0}
                     for a in STATEFUL}
    # None of the rows ahead of the watermark is named.
    assert "late-e" not in set(named.event_id) and "late-w1" not in set(named.event_id)
    print(f"\nlate rows (dropped by Spark, named rows, late_events): {figures}; "
          f"first run {took_first:.0f} s, second {took_second:.0f} s")
