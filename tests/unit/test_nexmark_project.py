"""The Nexmark declarations are a project of their own (a sub-folder with its own topics.yaml is not
loaded by its parent), and the records Kappa publishes for the generator's events."""

from __future__ import annotations

from pathlib import Path

import yaml

from kappa.harness.bench.nexmark import QUERIES, chains
from kappa.harness.nexmark import record
from kappa.spec import load_catalog
from kappa.spec.catalog import nested_projects

REPO = Path(__file__).resolve().parents[2]

SILVER = {
    "name": "events", "layer": "silver", "source": {"kafka": {"topics": ["events"]}},
    "transform": {"parse": {"schema": {"event_id": "string", "event_time": "timestamp"}}},
}


def _project(root: Path, name: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "topics.yaml").write_text(yaml.safe_dump({"topics": {"events": {"partitions": 1}}}))
    (root / f"{name}.yaml").write_text(yaml.safe_dump({**SILVER, "name": name}))


def test_a_sub_folder_with_its_own_topics_file_is_not_loaded_by_the_parent(tmp_path):
    _project(tmp_path, "parent_events")
    _project(tmp_path / "other", "other_events")
    (tmp_path / "group").mkdir()
    (tmp_path / "group" / "grouped.yaml").write_text(yaml.safe_dump({**SILVER, "name": "grouped"}))
    assert nested_projects(tmp_path) == [tmp_path / "other"]
    assert sorted(load_catalog(tmp_path).assets) == ["grouped", "parent_events"]
    assert sorted(load_catalog(tmp_path / "other").assets) == ["other_events"]


def test_the_main_project_does_not_load_nexmark_and_nexmark_loads_alone():
    main = load_catalog(REPO / "assets")
    nexmark = load_catalog(REPO / "assets" / "nexmark")
    assert not set(main.assets) & set(nexmark.assets)
    assert not {t for t in main.topics if t.startswith("nexmark")}
    paths = chains(nexmark, QUERIES)
    assert paths["q0"] == ["bid", "q0"]
    assert paths["q5"][0] == "bid" and paths["q5"][-1] == "q5"


def test_a_published_record_is_the_event_unwrapped_with_its_number_and_iso_times():
    bid = {"auction": 1000, "bidder": 1001, "price": 1940, "date_time": 1795977130842, "extra": "x"}
    out = record("Bid", bid, 6)
    assert out == {"event_id": 6, "auction": 1000, "bidder": 1001, "price": 1940,
                   "date_time": "2026-11-29T18:32:10.842+00:00", "extra": "x"}
    auction = record("Auction", {"id": 1, "date_time": 0, "expires": 1500}, 0)
    assert auction["date_time"] == "1970-01-01T00:00:00.000+00:00"
    assert auction["expires"] == "1970-01-01T00:00:01.500+00:00"
