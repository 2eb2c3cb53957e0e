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
    assert _pin_older_than(path, 2, None, None) is None and _pin_older_than(path, None, 1.0, None) is None
    assert _pin_older_than(path, 0, None, None) is None  # the commit after it is seconds old: 7 days to go
    time.sleep(0.05)
    assert "pinned snapshot (Delta version 0)" in _pin_older_than(path, 0, 0.00001, None)  # 36 ms of retention


# --- pins whose consistency was not evaluated are named, with why (never "consistent") -------------

def test_a_consistent_lineage_is_verified_with_no_reason():
    from kappa.lifecycle.cut import build_pins

    tables = {"s": silver([1, 2, 3]), "g": gold("g", [(1, 2, True), (2, 3, True)])}
    choice, unconstrained = solve(tables)
    pins = build_pins(tables, choice, unconstrained)
    assert all(p["verified"] and p["why_unverified"] is None for p in pins.values()), pins
    assert pins["g"]["cut"] == pins["s"]["offsets"] == {"t": {"0": 300}}


def test_a_reader_of_two_pins_that_read_one_topic_to_different_offsets_is_refused_naming_both():
    from kappa.lifecycle.cut import build_pins

    def reader_of(name: str, table_versions: list[int], step: int) -> CutTable:
        commits = [BatchCommit(v, b, [{"kafka": {"t": {"0": step * (b + 1)}}}]) for b, v in enumerate(table_versions)]
        return CutTable(version(name), table_versions[-1], commits)

    def join(through_a: int, through_b: int) -> CutTable:
        src = [{"delta": {"asset": a, "version": 1, "table_version": v, "complete": True}}
               for a, v in (("a", through_a), ("b", through_b))]
        return CutTable(version("j", {"a": 1, "b": 1}), 1, [BatchCommit(1, 0, src)], ["a", "b"])

    # a and b read topic t in batches of different sizes: their last batches end at 200 and 300
    tables = {"a": reader_of("a", [1, 2], 100), "b": reader_of("b", [1, 2, 3], 100), "j": join(2, 3)}
    choice, unconstrained = solve(tables)
    with pytest.raises(CutError, match=r"j/v1 reads topic t partition 0 through a/v1 batch 1 .*to offset 200.* "
                                       r"b/v1 batch 2 .*to offset 300"):
        build_pins(tables, choice, unconstrained)
    # the same point on both: one watermark, verified
    tables = {"a": reader_of("a", [1, 2], 150), "b": reader_of("b", [1, 2, 3], 100), "j": join(2, 3)}
    choice, unconstrained = solve(tables)
    pins = build_pins(tables, choice, unconstrained)
    assert pins["j"]["cut"] == {"t": {"0": 300}} and pins["j"]["verified"], pins["j"]


def test_a_streaming_sink_batch_whose_write_ahead_log_entry_is_purged_is_named_not_verified():
    """A raw table written by Delta's streaming sink (before the append kinds moved to
    AppendWriter) pinned at a batch older than the checkpoint's retained batches: nothing records
    its offsets, so the pin (and its reader's) says so."""
    from kappa.lifecycle.cut import build_pins, unverified

    bronze = CutTable(version("s"), 2, [BatchCommit(1, 0, None), BatchCommit(2, 1, None)])
    tables = {"s": bronze, "g": gold("g", [(1, 2, True)])}
    choice, unconstrained = solve(tables)
    pins = build_pins(tables, choice, unconstrained)
    assert not pins["s"]["verified"] and pins["s"]["cut"] == {}
    assert "s/v1: consistency not evaluated: batch 1 (Delta version 2) does not record what it read" \
        in pins["s"]["why_unverified"] and "minBatchesToRetain" in pins["s"]["why_unverified"]
    assert pins["g"]["why_unverified"] == "g/v1: consistency not evaluated: reads s, whose pin is not verified"
    assert set(unverified(pins)) == {"s", "g"}


def test_a_lookups_table_side_is_named_not_verified():
    """A lookup's batches record its stream side only: the table side is not constrained."""
    from kappa.lifecycle.cut import build_pins

    dims = silver([1, 2])
    lookup = CutTable(version("l", {"s": 1}), 4, [BatchCommit(3, 0, [{"kafka": {"f": {"0": 10}}}]),
                                                  BatchCommit(4, 1, [{"kafka": {"f": {"0": 20}}}])], ["s"])
    tables = {"s": dims, "l": lookup}
    choice, unconstrained = solve(tables)
    pins = build_pins(tables, choice, unconstrained)
    assert pins["s"]["verified"] and not pins["l"]["verified"] and pins["l"]["offsets"] == {"f": {"0": 20}}
    assert pins["l"]["why_unverified"].startswith("l/v1: consistency not evaluated: reads s as a lookup's table side")


def test_a_reader_of_an_upstream_without_a_table_and_one_without_a_batch_are_named():
    from kappa.lifecycle.cut import build_pins

    empty = CutTable(version("e"), 0, [])  # a table created, no micro-batch committed yet
    reader = CutTable(version("r", {"x": 1}), 1, [BatchCommit(1, 0, [{"kafka": {"t": {"0": 5}}}])])
    tables = {"e": empty, "r": reader}
    choice, unconstrained = solve(tables)
    pins = build_pins(tables, choice, unconstrained, no_table={"r": ["x"]})
    assert pins["e"]["why_unverified"] == ("e/v1: consistency not evaluated: no micro-batch commit among its "
                                           "last 500 commits")
    assert pins["r"]["why_unverified"] == "r/v1: consistency not evaluated: reads x, which has no table yet"


def test_unverified_names_a_pin_recorded_without_a_reason_and_skips_verified_and_unpinned():
    from kappa.lifecycle.cut import unverified

    pins = {"a": {"verified": True}, "b": {"verified": False}, "c": None,
            "d": {"verified": False, "why_unverified": "d/v2: consistency not evaluated: x"}}
    assert unverified(pins) == {"b": "b: consistency not evaluated (no reason recorded with the pin)",
                                "d": "d/v2: consistency not evaluated: x"}


def test_kappa_promote_and_versions_name_the_unverified_pins_of_the_commit(tmp_path, monkeypatch):
    """The CLI on a real registry (delta-rs): versions without tables are pinned to nothing, and
    `kappa promote`, `kappa versions --format json` and `kappa status`'s per-name fields say so."""
    import json

    from typer.testing import CliRunner

    from kappa.cli.app import app, pin_verification
    from kappa.config import load_settings
    from kappa.delta.registry import Registry
    from kappa.lifecycle.promotion import commit_pins

    monkeypatch.setenv("KAPPA_HOME", str(tmp_path / "home"))
    settings = load_settings()
    reg = Registry(settings)
    reg.create_version("flights", "f", {})
    reg.create_version("departures_hourly", "f", {"flights": 1})
    for asset in ("flights", "departures_hourly"):
        reg.record(asset, 1, "gate_passed", checks=[])
    reg.promote({"flights": 1}, reason="test")
    out = CliRunner().invoke(app, ["promote", "departures_hourly", "1"])
    assert out.exit_code == 0, out.output
    assert "departures_hourly -> v1" in out.output
    text = " ".join(out.output.split())  # the console wraps lines
    assert text.count("pin not verified") == 2
    assert "pin not verified departures_hourly/v1: consistency not evaluated: no table yet" in text
    assert "pin not verified flights/v1: consistency not evaluated: no table yet" in text
    pins = commit_pins(reg.refresh(), "departures_hourly")  # the CLI's promotion: another command's
    assert set(pins) == {"flights", "departures_hourly"} and not any(p["verified"] for p in pins.values())

    versions = CliRunner().invoke(app, ["versions", "departures_hourly", "--format", "json"])
    assert versions.exit_code == 0, versions.output
    row = json.loads(versions.output)[0]
    assert row["verified"] is False
    assert row["why_unverified"] == ("departures_hourly/v1: consistency not evaluated: no table yet, nothing to "
                                     "pin (its stable name reads the table as it comes)")
    assert pin_verification("flights", Registry(settings).promoted("flights").pin) == {
        "verified": False, "why_unverified": pins["flights"]["why_unverified"]}


# --- a table-table join over changelog tables (MERGE commits, read as change data feeds) -----------

def _log(table, n: int, actions: list[dict]) -> None:
    """Delta version ``n`` of ``table``'s log: ``actions`` (one JSON line each)."""
    import json

    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{n:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_change_feed_reader_of_merge_commits_is_pinned_at_its_newest_batch(tmp_path, monkeypatch):
    """A CDC lineage: changelog tables planes and fleet, each micro-batch one MERGE (an insert-only
    first load: add files only; then updates and deletes: ``cdc`` files), and a materialized view
    reading their change data feeds. Delta ends a batch that read a version with change data files
    at (v, k - 1), k its cdc files (no end placeholder follows them; Delta admits such a version
    whole): complete through v, so the cut pins the view at its newest batch with the changelog
    batches it read. The same position is partway into v for a plain Delta read, or when k - 1 is
    not the last index; read so, the lineage stays at its first batch, and the held-back lines say
    which reader holds each pin and why."""
    from kappa.config import load_settings
    from kappa.lifecycle.cut import build_pins
    from kappa.streaming.provenance import describe_sources

    monkeypatch.setenv("KAPPA_HOME", str(tmp_path / "home"))
    settings = load_settings()
    add = {"add": {"path": "part-0.parquet", "dataChange": True}}
    cdc = {"cdc": {"path": "_change_data/cdc-0.parquet", "dataChange": False}}
    # planes: 0 create, 1 first load, 2 MERGE writing two change data files, 3 MERGE writing one
    # fleet: 0 create, 1 first load, 2 MERGE writing one change data file
    for name, versions in (("planes", [[], [add], [add, cdc, cdc, {"remove": {"path": "p"}}], [add, cdc]]),
                           ("fleet", [[], [add], [add, cdc]])):
        for n, actions in enumerate(versions):
            _log(tmp_path / name, n, [{"commitInfo": {"operation": "MERGE"}}, *actions])
    ids = {"pid": ("planes", 1, str(tmp_path / "planes")), "fid": ("fleet", 1, str(tmp_path / "fleet"))}
    view = version("v", {"planes": 1, "fleet": 1})

    def wal(planes: tuple[int, int], fleet: tuple[int, int]) -> list[dict]:
        return [{"sourceVersion": 1, "reservoirId": rid, "reservoirVersion": v, "index": i, "isStartingVersion": False}
                for rid, (v, i) in (("pid", planes), ("fid", fleet))]

    # the view's batches: the first load (both at a version start), then planes' v2 and fleet's v2
    # (the last cdc file of each), then planes' v3 (fleet unchanged)
    entries = [wal((2, -1), (2, -1)), wal((2, 1), (2, 0)), wal((3, 0), (2, 0))]

    def lineage(change_feed: bool) -> dict[str, CutTable]:
        commits = [BatchCommit(b + 1, b, describe_sources(settings, view, e, ids, change_feed=change_feed))
                   for b, e in enumerate(entries)]
        changelog = {name: CutTable(version(name), len(vs), [BatchCommit(v, v - 1, [{"kafka": {name: {"0": 10 * v}}}])
                                                             for v in vs]) for name, vs in (("planes", [1, 2, 3]),
                                                                                            ("fleet", [1, 2]))}
        return {**changelog, "v": CutTable(view, 3, commits, ["planes", "fleet"])}

    tables = lineage(change_feed=True)
    assert tables["v"].commits[2].sources[0] == {"delta": {
        "asset": "planes", "version": 1, "table_version": 3, "complete": True,
        "position": {"reservoirVersion": 3, "index": 0, "change_data_feed": True}}}
    choice, unconstrained = solve(tables)
    assert not unconstrained and choice == {"planes": 2, "fleet": 1, "v": 2}  # every latest batch
    pins = build_pins(tables, choice, unconstrained)
    assert pins["v"]["reads"] == {"planes": 3, "fleet": 2} and all(p["verified"] for p in pins.values())
    assert not any(p["held_back"] for p in pins.values())
    assert pins["v"]["cut"] == {"planes": {"0": 30}, "fleet": {"0": 20}}

    # index 0 of planes' v2 (two change data files): inside the version, not complete
    assert describe_sources(settings, view, wal((2, 0), (2, 0)), ids, change_feed=True)[0]["delta"]["complete"] is False

    # read as a plain Delta source (or before this rule): every batch after the first is partway
    tables = lineage(change_feed=False)
    choice, unconstrained = solve(tables)
    assert choice == {"planes": 0, "fleet": 0, "v": 0}
    held = {a: p["held_back"] for a, p in build_pins(tables, choice, unconstrained).items()}
    assert held["v"] == ("v/v1 held at batch 0 (Delta version 1), not its latest batch 2 (Delta version 3): "
                         "its batch 2 read planes partway into Delta version 3 (Delta's end position "
                         '{"index": 0, "reservoirVersion": 3} is not a version boundary), so it is not a complete '
                         "read of any planes version")
    assert held["planes"] == ("planes/v1 held at batch 0 (Delta version 1), not its latest batch 2 (Delta version 3): "
                              "its reader v/v1 batch 0 (Delta version 1), where that reader is held (see its "
                              "held_back), read it through Delta version 1")
