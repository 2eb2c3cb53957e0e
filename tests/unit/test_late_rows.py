"""Naming a stateful operator's dropped rows, the parts without Spark: which batches dropped rows,
the watermark Spark dropped them by, which upstream files a micro-batch read (Delta's source
positions), and how the gate and ``kappa status`` weigh named against dropped rows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from kappa.config import load_settings
from kappa.delta.registry import Registry
from kappa.quality.gate import late_rows
from kappa.streaming.late import batch_files, dropped_by_batch, late_watermark_ms, summary, LateBatch


def _offsets(cp, batch: int, watermark_ms: int, sources: list[dict]) -> None:
    folder = cp / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": 0, "conf": {}}
    (folder / str(batch)).write_text("\n".join(["v1", json.dumps(meta), *map(json.dumps, sources)]) + "\n")


def test_batches_that_dropped_rows_come_from_their_progress_reports():
    progress = [{"batchId": 3, "stateOperators": [{"numRowsDroppedByWatermark": 2}, {"numRowsDroppedByWatermark": 1}]},
                {"batchId": 4, "stateOperators": [{"numRowsDroppedByWatermark": 0}]},
                {"batchId": 5, "stateOperators": []}]
    assert dropped_by_batch(progress) == {3: 3}


def test_late_rows_of_batch_n_are_dropped_by_the_watermark_of_batch_n_minus_1(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    for batch, wm in enumerate([0, 1000, 5000]):
        _offsets(tmp_path, batch, wm, [{}])
    cp = str(tmp_path)
    assert [late_watermark_ms(cp, b, settings) for b in (0, 1, 2)] == [0, 0, 1000]
    assert late_watermark_ms(cp, 9, settings) is None  # batch 8's entry is not there


def _position(version: int, index: int, snapshot: bool) -> dict:
    return {"sourceVersion": 1, "reservoirId": "x", "reservoirVersion": version, "index": index,
            "isStartingVersion": snapshot}


def test_a_batch_reads_snapshot_files_by_modification_time_then_whole_commits(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    path = str(tmp_path / "up")
    for i in range(3):  # versions 0, 1, 2: one file each, written in order
        write_deltalake(path, pa.table({"n": [i]}), mode="append")
        time.sleep(0.01)
    write_deltalake(path, pa.table({"n": [3, 4]}), mode="append")  # version 3, after the snapshot

    def names(files):
        return [f["path"] for f in files]

    snapshot = names(batch_files(path, _position(2, -1, True), _position(3, -1, False), settings))
    assert len(snapshot) == 3
    assert names(batch_files(path, _position(2, -1, True), _position(2, 0, True), settings)) == snapshot[:1]
    assert names(batch_files(path, _position(2, 0, True), _position(2, 2, True), settings)) == snapshot[1:]
    assert names(batch_files(path, _position(2, 2, True), _position(3, -1, False), settings)) == []
    assert len(batch_files(path, _position(3, -1, False), _position(4, -1, False), settings)) == 1  # commit 3
    assert len(batch_files(path, _position(2, 1, True), _position(4, -1, False), settings)) == 2  # rest + commit 3
    # A rate-limited batch that stopped inside a commit cannot be rebuilt exactly: it says so.
    why = batch_files(path, _position(3, -1, False), _position(3, 0, False), settings)
    assert isinstance(why, str) and "inside commit 3" in why


def test_a_commit_that_removes_data_is_skipped_as_the_source_skips_it(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    path = str(tmp_path / "up")
    write_deltalake(path, pa.table({"n": [1, 2]}), mode="append")
    write_deltalake(path, pa.table({"n": [3]}), mode="overwrite")  # version 1: removes and adds
    write_deltalake(path, pa.table({"n": [4]}), mode="append")  # version 2
    files = batch_files(path, _position(1, -1, False), _position(3, -1, False), settings)
    assert len(files) == 1  # version 2's file only (skipChangeCommits)


def test_the_gate_counts_named_rows_and_dropped_rows_not_named(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    reg = Registry(settings)
    reg.create_version("departures_3h", "fp", {"flights": 1})
    named_run = summary([LateBatch(batch_id=4, dropped=3, named=4, units_min=3, units_max=3, accounted=True)])
    reg.record("departures_3h", 1, "caught_up", dropped_by_watermark=3, **named_run)
    check = late_rows(reg.version("departures_3h", 1), named=4)
    assert (check.passed, check.observed, check.details["not_named"], check.details["dropped_named"]) == (False, 4, 0, 3)
    lost = summary([LateBatch(batch_id=7, dropped=2, why="the batch stopped inside commit 9")])
    reg.record("departures_3h", 1, "stopped", dropped_by_watermark=2, **lost)
    check = late_rows(reg.version("departures_3h", 1), named=4)
    assert (check.observed, check.details["not_named"]) == (6, 2)
    assert check.details["batches_not_named"][0]["why"] == "the batch stopped inside commit 9"


@pytest.mark.parametrize("dropped, accounted", [(0, 0), (5, 5)])
def test_a_run_without_or_with_every_drop_named_leaves_nothing_unnamed(tmp_path, dropped, accounted):
    settings = load_settings(home=tmp_path / "home")
    reg = Registry(settings)
    reg.create_version("origin_load", "fp", {"flights": 1})
    reg.record("origin_load", 1, "caught_up", dropped_by_watermark=dropped, dropped_named=accounted)
    check = late_rows(reg.version("origin_load", 1), named=accounted)
    assert check.details["not_named"] == 0 and check.observed == accounted


class Query:
    """A StreamingQuery as the Kubernetes driver's watch sees it: progress reports that grow at
    each look, terminated after ``looks`` looks (awaitTermination(timeout) -> bool)."""

    def __init__(self, reports: list[list[dict]]):
        self.reports, self.looks = reports, 0
        self.recentProgress: list[dict] = []

    def awaitTermination(self, timeout: float) -> bool:
        self.recentProgress = [r for batch in self.reports[:self.looks + 1] for r in batch]
        self.looks += 1
        return self.looks >= len(self.reports)


def test_the_kubernetes_driver_names_and_records_its_drops_so_the_gate_counts_them(tmp_path):
    """runners.entrypoint.watch (the driver's loop in its pod): the drops of each new batch are
    named (here not: its offsets are not in the checkpoint, and that is said) and recorded once as
    a ``dropped`` registry event; the gate's late_rows and kappa status count them. Before, the
    Kubernetes runner recorded dropped_by_watermark=0 and nothing else."""
    from kappa.runners.entrypoint import watch
    from kappa.spec import load_catalog
    from kappa.streaming.late import LateTally, late_counts

    settings = load_settings(home=tmp_path / "home")
    reg = Registry(settings)
    version = reg.create_version("departures_3h", "fp", {"flights": 1})
    spec = load_catalog(Path(__file__).resolve().parents[2] / "assets")["departures_3h"]
    drop = lambda b, n: {"batchId": b, "stateOperators": [{"numRowsDroppedByWatermark": n}]}  # noqa: E731
    query = Query([[drop(1, 0)], [drop(2, 3)], [drop(2, 3), drop(3, 0)], [drop(4, 2)]])

    watch(query, LateTally(None, settings, spec, version),
          lambda d: reg.record("departures_3h", 1, "dropped", **d), poll_s=0.0)

    events = [e["details"] for e in reg.version("departures_3h", 1).events if e["event"] == "dropped"]
    assert [(e["dropped_by_watermark"], e["dropped_named"]) for e in events] == [(3, 0), (2, 0)]  # once each
    assert [b["batch_id"] for e in events for b in e["late_not_named"]] == [2, 4]
    assert "offsets of batch 1 or 2 are purged" in events[0]["late_not_named"][0]["why"]
    check = late_rows(reg.version("departures_3h", 1))
    assert (check.evaluated, check.passed, check.observed, check.details["not_named"]) == (True, False, 5, 5)
    assert late_counts(settings, reg.version("departures_3h", 1)) == {"named": 0, "dropped": 5, "not_named": 5}
