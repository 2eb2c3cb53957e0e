"""kappa.streaming.checkpoint.reopen_cut_off_batch on checkpoints laid out as Spark 4.1 writes them
(offsets/<N>: "v1", the batch metadata, one line per source; commits/<N>: "v1", the commit metadata;
a ".<N>.crc" beside each on a local filesystem). The restart it makes Spark run is tested in
tests/integration/test_streams.py."""

from __future__ import annotations

import json

from kappa.streaming.checkpoint import read_checkpoint, reopen_cut_off_batch


def _checkpoint(root, batches: list[tuple[int, int | None]]):
    """One batch per (planned watermark, committed next watermark or None: not committed)."""
    for d in ("offsets", "commits"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for n, (planned, raised) in enumerate(batches):
        (root / "offsets" / str(n)).write_text(
            f'v1\n{json.dumps({"batchWatermarkMs": planned, "batchTimestampMs": 0})}\n{{"reservoirVersion": {n + 1}, "index": -1}}\n')
        (root / "offsets" / f".{n}.crc").write_bytes(b"crc")
        if raised is not None:
            (root / "commits" / str(n)).write_text(f'v1\n{json.dumps({"nextBatchWatermarkMs": raised})}')
            (root / "commits" / f".{n}.crc").write_bytes(b"crc")
    return root


def test_a_committed_batch_that_raised_the_watermark_is_reopened(tmp_path):
    cp = _checkpoint(tmp_path / "cp", [(0, 0), (0, 5_000)])
    assert reopen_cut_off_batch(cp) == 1
    assert sorted(p.name for p in (cp / "commits").iterdir()) == [".0.crc", "0"]  # commit and checksum gone
    assert read_checkpoint(cp).batch_id == 0 and read_checkpoint(cp).planned_batch_id == 1
    assert reopen_cut_off_batch(cp) is None  # once: batch 1 is now planned, not committed


def test_nothing_is_reopened_when_the_no_data_batch_ran_or_nothing_is_due(tmp_path):
    ran = _checkpoint(tmp_path / "ran", [(0, 5_000), (5_000, 5_000)])  # batch 1 was the no-data batch
    running = _checkpoint(tmp_path / "running", [(0, 5_000), (5_000, None)])  # Spark re-runs batch 1 itself
    empty = _checkpoint(tmp_path / "empty", [])
    for cp in (ran, running, empty, tmp_path / "missing"):
        before = sorted(p.relative_to(cp) for p in cp.rglob("*")) if cp.exists() else None
        assert reopen_cut_off_batch(cp) is None, cp.name
        assert (sorted(p.relative_to(cp) for p in cp.rglob("*")) if cp.exists() else None) == before
