"""Reading a micro-batch's write-ahead log entry (kappa.streaming.checkpoint.batch_sources) and
merging a coverage's Kafka offsets (kappa.streaming.provenance.Coverage)."""

from __future__ import annotations

import json

from kappa.streaming.checkpoint import batch_sources
from kappa.streaming.provenance import Coverage, read_through


def test_every_source_line_of_the_offsets_entry_in_order(tmp_path):
    (tmp_path / "offsets").mkdir()
    kafka = {"flights": {"0": 1200, "1": 1180}}
    delta = {"sourceVersion": 1, "reservoirId": "abc", "reservoirVersion": 7, "index": -1, "isStartingVersion": False}
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
    (tmp_path / "offsets" / "3").write_text("\n".join(["v1", json.dumps(meta), json.dumps(kafka), json.dumps(delta)]))
    assert batch_sources(tmp_path, 3) == [kafka, delta]
    assert batch_sources(tmp_path, 4) == []  # not planned yet, or purged


def test_coverage_merges_the_kafka_sources():
    cov = Coverage("flights_weather", 1, 9, sources=[
        {"kafka": {"flights": {"0": 5}}}, {"delta": {"asset": "weather", "version": 1, "table_version": 3, "index": -1}},
        {"kafka": {"flights": {"1": 7}, "weather": {"0": 2}}}])
    assert cov.offsets == {"flights": {"0": 5, "1": 7}, "weather": {"0": 2}}
    assert cov.to_json()["offsets"] == cov.offsets


def test_a_delta_end_position_at_the_start_of_a_version_read_the_one_before():
    assert read_through(2, -1) == (1, True)
    assert read_through(2, 5) == (2, False)  # stopped inside version 2 (rate-limited)
    assert read_through(None, -1) == (None, False)
