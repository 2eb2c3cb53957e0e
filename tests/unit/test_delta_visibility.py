"""When a row became visible, read from a real Delta table (delta-rs, no mocks): the first commit
that added it with dataChange true. An OPTIMIZE re-adds every row with dataChange false and must
change no row's answer (issue 19: the bench took the last commit naming a row, so a row's latency
became the time of the compaction that rewrote it); Delta's change data feed, a second method,
gives the same commits."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from kappa.harness.delta_log import (change_data_feed_enabled, commit_actions, commit_time, first_visible,
                                     first_visible_cdf, rearranges_only, wait_for_commit)


def _append(path, ids: list[str]) -> int:
    write_deltalake(str(path), pa.table({"event_id": ids, "n": list(range(len(ids)))}), mode="append",
                    configuration={"delta.enableChangeDataFeed": "true"})
    return DeltaTable(str(path)).version()


@pytest.fixture
def table(tmp_path):
    """v0: rows before the measured window; v1, v2: the measured appends (as the bench's window
    starts after the version it read first)."""
    path = tmp_path / "t"
    assert _append(path, ["old-0", "old-1"]) == 0
    assert _append(path, ["a-0", "a-1", "a-2"]) == 1
    assert _append(path, ["b-0", "b-1"]) == 2
    return path


def _optimize(path) -> int:
    metrics = DeltaTable(str(path)).optimize.compact()
    assert metrics["numFilesRemoved"] == 3 and metrics["numFilesAdded"] == 1
    return DeltaTable(str(path)).version()


def test_an_optimize_changes_no_rows_visibility(table):
    before = first_visible(table, "event_id", after=0)
    assert before == {**{f"a-{i}": (1, commit_time(table, 1)) for i in range(3)},
                      **{f"b-{i}": (2, commit_time(table, 2)) for i in range(2)}}

    v = _optimize(table)
    # The compaction re-added every row, the window's and the earlier ones, with dataChange false.
    actions = commit_actions(table, v)
    (added,) = [a["add"] for a in actions if "add" in a]
    assert added["dataChange"] is False and rearranges_only(actions)
    assert sorted(pq.read_table(table / added["path"]).column("event_id").to_pylist()) == \
        ["a-0", "a-1", "a-2", "b-0", "b-1", "old-0", "old-1"]

    assert first_visible(table, "event_id", after=0) == before  # nor do the earlier rows appear
    assert _append(table, ["c-0"]) == v + 1  # a row appended after the compaction: its own commit
    assert first_visible(table, "event_id", after=0) == {**before, "c-0": (v + 1, commit_time(table, v + 1))}


def test_the_change_data_feed_places_every_row_in_the_same_commit(table):
    _optimize(table)
    _append(table, ["c-0"])
    assert change_data_feed_enabled(table)
    log, feed = first_visible(table, "event_id", after=0), first_visible_cdf(table, "event_id", after=0)
    assert feed.keys() == log.keys() and len(log) == 6
    assert {k: v for k, (v, _) in feed.items()} == {k: v for k, (v, _) in log.items()}
    # Two clocks of one commit: the feed's millisecond timestamp and the commit file's mtime.
    assert max(abs(feed[k][1] - log[k][1]) for k in log) < 0.05


def test_a_compaction_is_not_taken_for_a_new_micro_batch(table):
    v = _optimize(table)
    assert wait_for_commit(table, after=2, timeout_s=0.3) is None
    _append(table, ["c-0"])
    assert wait_for_commit(table, after=2, timeout_s=5) == (v + 1, commit_time(table, v + 1))
