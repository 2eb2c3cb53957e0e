"""The kinds registry is the one place that knows transform kinds (besides the declaration models,
which validate them): every kind declared in ``kappa.spec`` has one entry, and no other module
compares a kind's name or tests which transform field is set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kappa.spec import load_catalog
from kappa.spec.transforms import TRANSFORM_KINDS
from kappa.streaming.kinds import KINDS, kind_of

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "platform" / "kappa"
ALLOWED = (PACKAGE / "spec", PACKAGE / "streaming" / "kinds")
KIND_NAMES = "|".join(TRANSFORM_KINDS)
BRANCH = re.compile(
    rf"transform\.kind\s*(==|!=|\bin\b|\bnot in\b)"  # comparing the name
    rf"|transform\.({KIND_NAMES})\s+is\s+(not\s+)?None"  # testing which field is set
    rf"|transform\.kind\s*\]"  # indexing a table by the name
)


def test_every_declared_kind_has_one_registry_entry():
    assert sorted(KINDS) == sorted(TRANSFORM_KINDS)
    assert all(KINDS[name].name == name for name in KINDS)


def test_no_module_outside_the_registry_branches_on_a_kind():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if any(path.is_relative_to(a) for a in ALLOWED):
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if BRANCH.search(line) and not line.strip().startswith("assert "):  # a precondition, not a branch
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not found, "kind branches outside the kinds registry:\n" + "\n".join(found)


def test_the_branch_pattern_finds_what_it_claims():
    """The check above would see a branch: it is not a pattern that matches nothing."""
    assert BRANCH.search('if spec.transform.kind == "parse":')
    assert BRANCH.search("if spec.transform.kind in LATE_KINDS:")
    assert BRANCH.search("if spec.transform.changelog is not None:")
    assert not BRANCH.search('metadata["transform"] = spec.transform.kind')


@pytest.mark.parametrize("asset, facts", [
    ("flights", {"reads_kafka": True, "quarantines": True, "keeps_late_rows": True, "forget": "event_ids",
                 "gate_checks": ("quarantine_rate", "schema_drift"), "stateful": True}),  # deduplication state
    ("flights_bronze", {"reads_kafka": True, "stateful": False}),
    ("departures_hourly", {"stateful": True, "quarantines": False, "keeps_late_rows": True,
                           "gate_checks": ("late_rows",)}),
    ("flights_weather", {"stateful": True, "keeps_late_rows": True, "gate_checks": ("late_rows",)}),
    ("origin_load", {"stateful": True, "keeps_late_rows": True, "gate_checks": ("late_rows",)}),
    ("delay_streaks", {"stateful": True, "keeps_late_rows": True, "forget": None}),
    ("planes", {"reads_kafka": True, "quarantines": True, "forget": "key_columns", "stateful": False}),
    # sql and python: a frame over the upstream stream, appended; nothing kept, dropped or set aside.
    ("delayed_departures", {"reads_kafka": False, "stateful": False, "quarantines": False, "keeps_late_rows": False,
                            "gate_checks": (), "forget": None, "dropped_rows": None}),
    ("flight_status", {"reads_kafka": False, "stateful": False, "quarantines": False, "keeps_late_rows": False,
                       "gate_checks": (), "forget": None, "dropped_rows": None}),
])
def test_the_shipped_assets_kinds_say_what_the_platform_relies_on(asset, facts):
    catalog = load_catalog(ROOT / "assets")
    kind = kind_of(catalog[asset])
    got = {k: getattr(kind, k) for k in facts}
    got.update({k: v(catalog[asset]) for k, v in got.items() if k == "stateful"})  # per declaration
    assert got == facts


def test_every_kind_has_an_example_asset():
    """docs/ARCHITECTURE.md ("The kinds registry") says so; a new kind comes with one."""
    catalog = load_catalog(ROOT / "assets")
    assert sorted({spec.transform.kind for spec in catalog}) == sorted(TRANSFORM_KINDS)


def test_kinds_whose_late_rows_spark_drops_name_them_from_the_checkpoint():
    """Window, join and sliding kinds say how to find what their watermark dropped; silver and the
    pattern set their late rows aside themselves (Spark drops none of theirs)."""
    catalog = load_catalog(ROOT / "assets")
    for asset in ("departures_hourly", "departures_3h", "plane_sessions", "flights_weather", "origin_load"):
        assert kind_of(catalog[asset]).dropped_rows is not None, asset
    for asset in ("flights", "delay_streaks", "flights_bronze"):
        assert kind_of(catalog[asset]).dropped_rows is None, asset


def test_kind_functions_answer_for_their_own_declarations():
    catalog = load_catalog(ROOT / "assets")
    assert kind_of(catalog["flights"]).event_id(catalog["flights"]) == "event_id"
    assert set(kind_of(catalog["flights"]).declared_columns(catalog["flights"])) >= {"event_id", "event_time"}
    assert kind_of(catalog["planes_history"]).full_log(catalog["planes_history"]) is True
    assert kind_of(catalog["planes"]).full_log(catalog["planes"]) is False
