"""Back-pressure against the real broker and Spark: a backlog of N flights is read in micro-batches
of at most L records, whether L comes from the asset's declaration or from the platform default
``KAPPA_MAX_OFFSETS_PER_TRIGGER``, and ``flights_bronze`` still holds every event exactly once.
(Bronze, not silver: each of silver's micro-batches costs an anti-join and three Delta writes, and
six of them did not fit in 75 s on the shared 2-core machine; the bound is the source's, the same
for every kind.)

The declared bound runs with an available-now trigger: it shows that Spark 4.1's
``Trigger.AvailableNow`` honours ``maxOffsetsPerTrigger`` for the Kafka source (several batches, up
to the offsets taken at the start). The default bounds a continuous query (a catch-up after an
outage); an available-now run without a declaration reads its backlog in one pass."""

from __future__ import annotations

import json
import time

import pytest

from kappa.delta.registry import Registry
from kappa.ingest.nycflights13 import load_events, publish
from kappa.runners.local import progress_as_dict
from kappa.runners.versions import resolve_versions
from kappa.spec import load_catalog
from kappa.streaming.query import start_query

from .helpers import renamed, table

pytestmark = pytest.mark.integration

#: Backlog (flights) and bound (records per micro-batch).
N, L = 3_000, 500


def _fast_trigger(declared: int | None):
    """An edit of the assets copy: ``flights_bronze`` with a 1-second trigger (the default 10 s
    would make six bounded batches take a minute) and, if given, a declared bound."""

    def edit(name: str, doc: dict) -> None:
        if name == "flights_bronze":
            doc["trigger"] = {"processing_time": "1 second"}
            if declared is not None:
                doc["source"]["kafka"]["max_offsets_per_trigger"] = declared

    return edit


def _backlog(settings, suffix) -> set[str]:
    """Publish the first N flights (only the flights topic) before any query starts; their event ids."""
    (flights,) = [e for e in renamed(load_events(limit=N), suffix) if e.topic.startswith("flights_")]
    publish(settings, [flights])
    assert len(set(flights.event_ids)) == N
    return set(flights.event_ids)


def _run(spark, settings, mode: str, timeout_s: float = 150.0) -> list[dict]:
    """Run ``flights_bronze`` (a new v1) in ``mode`` until it read all N records; return the
    progress of its micro-batches that read something, one per batch id."""
    catalog = load_catalog(settings.assets_dir)
    version = resolve_versions(catalog, ["flights_bronze"], Registry(settings))["flights_bronze"]
    running = start_query(spark, catalog["flights_bronze"], version, settings, mode)
    q = running.query
    batches: dict[int, dict] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            for p in map(progress_as_dict, q.recentProgress):
                if p["numInputRows"] > 0:
                    batches[p["batchId"]] = p
            if sum(p["numInputRows"] for p in batches.values()) >= N or not q.isActive:
                break
            assert time.monotonic() < deadline, f"in {timeout_s} s: {_summary(batches.values())}"
            time.sleep(0.5)
        if mode == "available_now":
            q.awaitTermination(timeout_s)
            for p in map(progress_as_dict, q.recentProgress):
                if p["numInputRows"] > 0:
                    batches[p["batchId"]] = p
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    return [batches[b] for b in sorted(batches)]


def _summary(batches) -> list[tuple[int, int, int]]:
    """(batch id, records read, milliseconds) per micro-batch."""
    return [(p["batchId"], p["numInputRows"], p["durationMs"].get("triggerExecution", -1)) for p in batches]


def _assert_bounded_and_exact(settings, expected: set[str], batches: list[dict]) -> None:
    rows = [p["numInputRows"] for p in batches]
    print("micro-batches (id, records, ms):", _summary(batches))
    assert sum(rows) == N, rows
    assert len(rows) >= N // L, f"{rows}: {len(rows)} micro-batches, expected >= {N // L}"
    assert max(rows) <= L, rows
    _assert_exact(settings, expected)


def _assert_exact(settings, expected: set[str]) -> None:
    """The bronze table holds each published record once: N rows, one per (partition, offset),
    whose values carry exactly the published event ids."""
    bronze = table(settings, "flights_bronze")
    assert len(bronze) == N and not bronze.duplicated(["partition", "offset"]).any()
    assert {json.loads(v)["event_id"] for v in bronze["value"]} == expected


def test_a_declared_bound_splits_an_available_now_backlog_into_bounded_batches(make_env, spark):
    settings, suffix = make_env(edit=_fast_trigger(declared=L))
    expected = _backlog(settings, suffix)
    _assert_bounded_and_exact(settings, expected, _run(spark, settings, "available_now"))


def test_the_platform_default_bounds_a_continuous_catch_up(make_env, spark, monkeypatch):
    """No declaration: ``KAPPA_MAX_OFFSETS_PER_TRIGGER`` (read by ``make_env``'s load_settings)
    bounds the catch-up of a continuous query over a backlog published while it was not running."""
    monkeypatch.setenv("KAPPA_MAX_OFFSETS_PER_TRIGGER", str(L))
    settings, suffix = make_env(edit=_fast_trigger(declared=None))
    expected = _backlog(settings, suffix)
    _assert_bounded_and_exact(settings, expected, _run(spark, settings, "continuous"))


def test_without_a_declaration_an_available_now_run_reads_in_one_pass(make_env, spark, monkeypatch):
    """The default does not apply to available-now runs (replays keep one pass; see
    :meth:`kappa.config.Settings.kafka_batch_limit`)."""
    monkeypatch.setenv("KAPPA_MAX_OFFSETS_PER_TRIGGER", str(L))
    settings, suffix = make_env(edit=_fast_trigger(declared=None))
    expected = _backlog(settings, suffix)
    batches = _run(spark, settings, "available_now")
    assert [p["numInputRows"] for p in batches] == [N]
    _assert_exact(settings, expected)
