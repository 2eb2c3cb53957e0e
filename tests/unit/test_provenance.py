"""Reading a micro-batch's write-ahead log entry (kappa.streaming.checkpoint.batch_sources) and
merging a coverage's Kafka offsets (kappa.streaming.provenance.Coverage)."""

from __future__ import annotations

import json
from pathlib import Path

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
    # a change data feed read of a version with 3 change data files: admitted whole, ends at index 2
    assert read_through(4, 2, change_files=3) == (4, True)
    assert read_through(4, 1, change_files=3) == (4, False)  # not its last file: not a whole version
    assert read_through(4, 0, change_files=0) == (4, False)  # no change data files: index 0 is partway
    assert read_through(4, -1, starting=True) == (4, False)  # the initial snapshot not read yet


def test_an_append_writer_starts_after_the_last_batch_its_table_holds_for_it_or_for_deltas_sink(tmp_path):
    """The re-run rule of every writer (here an AppendWriter's) reads, once per query start, the last
    batch id the table's ``txn`` actions hold for its writer id and for the checkpoint's query id
    (the app id of Delta's streaming sink, which wrote the append kinds before): a real delta-rs
    table, three writers."""
    from datetime import datetime, timezone

    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    from kappa.config import load_settings
    from kappa.delta.registry import Version
    from kappa.spec import load_catalog
    from kappa.streaming.checkpoint import query_id
    from kappa.streaming.writers import AppendWriter

    repo = Path(__file__).resolve().parents[2]
    table, checkpoint = tmp_path / "t", tmp_path / "c"
    checkpoint.mkdir()
    assert query_id(checkpoint) is None  # not started yet
    (checkpoint / "metadata").write_text(json.dumps({"id": "4d57e834"}) + "\n")
    assert query_id(checkpoint) == "4d57e834"
    version = Version(asset="flights_bronze", version=1, table_path=str(table), checkpoint_path=str(checkpoint),
                      txn_app_id="kappa-flights_bronze-v1", fingerprint="f", upstream={},
                      created_at=datetime.now(timezone.utc))
    writer = AppendWriter(None, load_catalog(repo / "assets")["flights_bronze"], version, load_settings())
    rows = pa.table({"x": [1]})
    for app, batch in (("kappa-other-v1", 9), ("kappa-flights_bronze-v1", 2)):
        write_deltalake(table, rows, mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction(app, batch)]))
    assert writer.last_committed() == 2  # its own writer id; another writer's 9 is not its
    write_deltalake(table, rows, mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("4d57e834", 5)]))
    assert writer.last_committed() == 5  # Delta's streaming sink of the same checkpoint
    assert writer.rerun(5) and not writer.rerun(6)  # read at the query's first batch ...
    write_deltalake(table, rows, mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("kappa-flights_bronze-v1", 7)]))
    assert writer.last_committed() == 7 and not writer.rerun(6)  # ... and not again
