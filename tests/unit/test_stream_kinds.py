"""Stream-processing transform kinds: their declarations are checked at load against Spark's rules,
and the sliding window's per-group step is exact on hand-made sequences."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from kappa.spec import SpecError, load_asset, load_catalog

REPO = Path(__file__).resolve().parents[2]


def _doc(name: str) -> dict:
    return yaml.safe_load((REPO / "assets" / "flights" / f"{name}.yaml").read_text())


def _load(tmp_path: Path, doc: dict):
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_asset(path)


def test_the_repo_declares_the_stream_assets_with_their_modes():
    catalog = load_catalog(REPO / "assets")
    fw, d3, ps, ol = (catalog[n] for n in ("flights_weather", "departures_3h", "plane_sessions", "origin_load"))
    assert fw.upstream == ["flights", "weather"] and fw.output_mode == "append" and fw.merge_keys == ["event_id"]
    assert catalog.downstream("weather") == ["flights_weather"]
    assert (d3.sink_mode, d3.output_mode, d3.merge_keys) == ("merge", "update", ["origin", "window_start"])
    assert (ps.sink_mode, ps.output_mode, ps.merge_keys) == ("append", "append", ["tailnum", "session_start"])
    assert (ol.sink_mode, ol.output_mode) == ("append", "append")
    assert ol.transform.model.out_columns == ["event_id", "origin", "event_time", "departures_last_60min"]


@pytest.mark.parametrize(
    "asset, change, message",
    [
        ("flights_weather", lambda d: d.pop("watermark"), "watermark: the left side has no watermark"),
        ("flights_weather", lambda d: d["transform"]["join"]["right"].pop("watermark"),
         "transform.join.right.watermark: the right side has no watermark. Spark's rule for outer stream-stream joins"),
        ("flights_weather", lambda d: d["transform"]["join"].pop("time_range"), "no event-time range condition"),
        ("flights_weather", lambda d: d["transform"]["join"]["time_range"].update(lower="an hour"),
         "transform.join.time_range.lower"),
        ("flights_weather", lambda d: d["transform"]["join"]["right"].update(asset="flights"), "two different upstream"),
        ("flights_weather", lambda d: d["transform"]["join"].update(on=["origin"]), "transform.join.on"),
        ("plane_sessions", lambda d: d.update(sink={"mode": "merge"}), "Spark forbids output mode 'update' for session"),
        ("origin_load", lambda d: d.pop("watermark"), "a sliding window emits a row once the watermark"),
        ("origin_load", lambda d: d["transform"]["sliding"].pop("size"), "transform.sliding.size"),
    ],
)
def test_bad_stream_declarations_fail_at_load_naming_file_and_field(tmp_path, asset, change, message):
    doc = copy.deepcopy(_doc(asset))
    change(doc)
    with pytest.raises(SpecError) as err:
        _load(tmp_path, doc)
    assert f"{asset}.yaml" in str(err.value) and message in str(err.value)


def test_an_inner_join_needs_no_watermark_but_has_no_matched_column(tmp_path):
    doc = copy.deepcopy(_doc("flights_weather"))
    doc["transform"]["join"]["type"] = "inner"
    doc["transform"]["join"].pop("matched_column")
    assert _load(tmp_path, doc).transform.model.type == "inner"
    doc["transform"]["join"]["matched_column"] = "m"
    with pytest.raises(SpecError, match="only a left_outer join"):
        _load(tmp_path, doc)


def test_sliding_step_counts_equal_times_and_waits_for_the_watermark():
    pytest.importorskip("pyspark")
    from kappa.streaming.kinds.sliding import sliding_counts

    m = 60_000
    pending = np.array([0, 10 * m, 10 * m, 70 * m, 71 * m], dtype=np.int64)
    # watermark at 70 min: rows at or before it are final (Spark drops later rows at or behind it)
    emit, counts, hist = sliding_counts(pending, np.empty(0, np.int64), 70 * m, 60 * m)
    assert emit.tolist() == [True, True, True, True, False]
    assert counts.tolist() == [1, 3, 3, 3]  # 70's window is [10, 70]: both bounds included
    assert hist.tolist() == [10 * m, 10 * m, 70 * m]  # only times a later row can still count
    emit, counts, hist = sliding_counts(np.array([72 * m, 71 * m]), hist, 72 * m, 60 * m)
    assert emit.all() and counts.tolist() == [3, 2]
    assert hist.tolist() == [70 * m, 71 * m, 72 * m]
    # nothing pending and the watermark past every kept time + size: the group's state empties
    emit, counts, hist = sliding_counts(np.empty(0, np.int64), hist, 133 * m, 60 * m)
    assert not emit.any() and hist.tolist() == []
