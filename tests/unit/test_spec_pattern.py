"""The ``pattern`` (CEP) transform kind: validated at load, naming the file and the field."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from kappa.spec import SpecError, load_asset, load_catalog

REPO = Path(__file__).resolve().parents[2]

PATTERN = {
    "name": "p", "layer": "gold", "source": {"asset": "flights"},
    "watermark": {"column": "event_time", "delay": "2 hours"},
    "transform": {"pattern": {
        "key": "tailnum", "order_by": ["carrier", "flight"], "where": "dep_time IS NOT NULL",
        "steps": [{"name": "delayed", "when": "dep_delay > 60", "count": 3}],
        "within": "24 hours", "collect": {"dep_delays": "dep_delay"}}},
}


def _write(folder: Path, doc: dict) -> Path:
    path = folder / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_repo_pattern_asset_loads():
    spec = load_catalog(REPO / "assets")["delay_streaks"]
    p = spec.transform.model
    assert spec.transform.kind == "pattern" and spec.sink_mode == "append"
    assert spec.merge_keys == ["tailnum", "first_event_time"]
    assert [(s.name, s.count) for s in p.steps] == [("delayed", 3)] and p.contiguity == "strict"


@pytest.mark.parametrize(
    "change, field, message",
    [
        (lambda d: d.pop("watermark"), "(top level)", "a pattern transform needs a watermark"),
        (lambda d: d["watermark"].update(column="time_hour"), "(top level)", "watermark.column must equal"),
        (lambda d: d["transform"]["pattern"].update(within="a day"), "transform.pattern.within", "not an interval"),
        (lambda d: d["transform"]["pattern"].pop("within"), "transform.pattern.within", "Field required"),
        (lambda d: d["transform"]["pattern"].update(steps=[]), "transform.pattern.steps", "at least 1"),
        (lambda d: d["transform"]["pattern"]["steps"][0].update(count=0), "transform.pattern.steps.0.count",
         "greater than or equal to 1"),
        (lambda d: d["transform"]["pattern"]["steps"].append({"name": "delayed", "when": "true"}),
         "transform.pattern", "step names must be unique"),
        (lambda d: d["transform"]["pattern"].update(contiguity="loose"), "transform.pattern.contiguity",
         "Input should be 'strict' or 'relaxed'"),
        (lambda d: d["transform"]["pattern"].update(collect={"event_ids": "event_id"}), "transform.pattern",
         "collides with"),
        (lambda d: d.update(sink={"mode": "merge"}), "(top level)", "use 'append'"),
    ],
)
def test_invalid_patterns_fail_at_load(tmp_path, change, field, message):
    doc = yaml.safe_load(yaml.safe_dump(PATTERN))
    change(doc)
    path = _write(tmp_path, doc)
    with pytest.raises(SpecError) as err:
        load_asset(path)
    assert f"{path}: {field}: " in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("where, column", [("key", "tail"), ("order_by", "gate"), ("collect.delays", "delay")])
def test_a_pattern_naming_a_column_the_upstream_lacks_fails_at_catalog_load(tmp_path, where, column):
    root = tmp_path / "assets"
    shutil.copytree(REPO / "assets", root)
    doc = yaml.safe_load(yaml.safe_dump(PATTERN))
    p = doc["transform"]["pattern"]
    if where == "key":
        p["key"] = column
    elif where == "order_by":
        p["order_by"] = ["carrier", column]
    else:
        p["collect"] = {"delays": column}
    path = _write(root / "flights", doc)
    with pytest.raises(SpecError, match=re.escape(f"{path}: transform.pattern.{where}: column {column!r} is not in flights")):
        load_catalog(root)


def test_the_readme_second_pattern_example_loads(tmp_path):
    """The README's second example (a long delay followed by a cancellation) is a valid asset."""
    readme = (REPO / "README.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "name: delay_then_cancel" in b]
    assert len(blocks) == 1
    root = tmp_path / "assets"
    shutil.copytree(REPO / "assets", root)
    (root / "flights" / "delay_then_cancel.yaml").write_text(blocks[0])
    spec = load_catalog(root)["delay_then_cancel"]
    p = spec.transform.model
    assert [s.count for s in p.steps] == [1, 1] and p.contiguity == "relaxed" and p.within == "12 hours"
