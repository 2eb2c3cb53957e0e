"""The cut's fixed point (kappa.lifecycle.cut.solve) on synthetic commit histories: readers of one
upstream agree on one upstream micro-batch, a snapshot keeps the non-batch commits after its batch,
incomplete reads are not eligible, and no common read refuses naming both assets."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kappa.delta.registry import Version
from kappa.lifecycle.cut import CutError, CutTable, solve
from kappa.streaming.provenance import BatchCommit


def version(asset: str, upstream: dict[str, int] | None = None) -> Version:
    return Version(asset=asset, version=1, table_path=f"/w/{asset}/v1", checkpoint_path=f"/c/{asset}/v1",
                   txn_app_id=f"kappa-{asset}", fingerprint="f", upstream=upstream or {},
                   created_at=datetime.now(timezone.utc))


def silver(table_versions: list[int], latest: int | None = None) -> CutTable:
    commits = [BatchCommit(v, b, [{"kafka": {"t": {"0": 100 * (b + 1)}}}]) for b, v in enumerate(table_versions)]
    return CutTable(version("s"), latest if latest is not None else table_versions[-1], commits)


def gold(name: str, reads: list[tuple[int, int, bool]]) -> CutTable:
    """``reads``: (own Delta version, silver Delta version read through, complete) per batch."""
    commits = [BatchCommit(v, b, [{"delta": {"asset": "s", "version": 1, "table_version": through, "complete": c}}])
               for b, (v, through, c) in enumerate(reads)]
    return CutTable(version(name, {"s": 1}), reads[-1][0], commits, ["s"])


def test_two_readers_agree_on_the_newest_silver_batch_both_read():
    tables = {"s": silver([1, 2, 3, 4]), "g1": gold("g1", [(1, 2, True), (2, 4, True)]),
              "g2": gold("g2", [(1, 2, True), (2, 3, True)])}
    choice, unconstrained = solve(tables)
    assert not unconstrained
    assert choice == {"s": 1, "g1": 0, "g2": 0}  # silver batch 1 (Delta version 2), both golds' first batch
    assert tables["s"].snapshot(choice["s"]) == 2 and tables["g1"].snapshot(choice["g1"]) == 1


def test_one_reader_pins_silver_at_what_it_read_not_at_silvers_latest():
    tables = {"s": silver([1, 2, 3, 4, 5]), "g": gold("g", [(1, 2, True), (2, 3, True)])}
    choice, _ = solve(tables)
    assert choice == {"s": 2, "g": 1} and tables["s"].snapshot(2) == 3 and tables["g"].snapshot(1) == 2


def test_a_snapshot_keeps_the_non_batch_commits_after_its_batch():
    # silver: batches at 1, 2, an OPTIMIZE at 3, a batch at 4; gold read through the OPTIMIZE
    tables = {"s": silver([1, 2, 4]), "g": gold("g", [(1, 3, True)])}
    choice, _ = solve(tables)
    assert choice["s"] == 1 and tables["s"].snapshot(1) == 3


def test_an_incomplete_read_is_not_eligible():
    tables = {"s": silver([1, 2, 3]), "g": gold("g", [(1, 2, True), (2, 3, False)])}
    choice, _ = solve(tables)
    assert choice == {"s": 1, "g": 0}


def test_readers_that_never_read_the_same_silver_batch_refuse_naming_both():
    tables = {"s": silver([1, 2, 3, 4]), "g1": gold("g1", [(1, 2, True), (2, 4, True)]),
              "g2": gold("g2", [(1, 3, True)])}
    with pytest.raises(CutError, match=r"g2/v1 has no micro-batch .* that read s/v1 batch 1 .* its latest read s/v1 batch 2"):
        solve(tables)


def test_a_reader_whose_reads_are_not_recorded_is_left_unconstrained():
    unrecorded = CutTable(version("g", {"s": 1}), 3, [BatchCommit(3, 0, None)], ["s"])
    tables = {"s": silver([1, 2, 3]), "g": unrecorded}
    choice, unconstrained = solve(tables)
    assert unconstrained == {"g"} and choice == {"s": 2, "g": 0}


def test_an_unpromoted_name_is_one_line_naming_its_versions_and_the_promote_to_run():
    from kappa.analytics.sql import user_message
    from kappa.delta.registry import not_promoted_message

    a, b = version("origin_load"), version("origin_load")
    b.version, b.state = 2, "caught-up"
    message = not_promoted_message("origin_load", [a, b])
    assert message == ("origin_load has no promoted version (versions: v1 (created), v2 (caught-up)); "
                       "promote one with `kappa promote origin_load 2`")
    assert user_message(f"[USER_RAISED_EXCEPTION] {message} SQLSTATE: P0001") == message
    assert user_message("[TABLE_OR_VIEW_NOT_FOUND] x") == "[TABLE_OR_VIEW_NOT_FOUND] x"


def test_vacuum_leaves_a_table_alone_while_its_pinned_snapshot_may_name_files_older_than_the_retention(tmp_path):
    """kappa maintain's guard (a real delta-rs table): the pin at the latest version, or one whose
    next commit is younger than the retention, lets VACUUM run; an older one does not."""
    import time

    import pyarrow as pa
    from deltalake import write_deltalake

    from kappa.lifecycle.maintain import _pin_older_than

    path = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(path, pa.table({"x": [i]}), mode="overwrite")  # versions 0, 1, 2
    assert _pin_older_than(path, 2, None) is None and _pin_older_than(path, None, 1.0) is None
    assert _pin_older_than(path, 0, None) is None  # the commit after it is seconds old: 7 days to go
    time.sleep(0.05)
    assert "pinned snapshot (Delta version 0)" in _pin_older_than(path, 0, 0.00001)  # 36 ms of retention
