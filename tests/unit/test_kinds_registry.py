"""The kinds registry: every registered kind is one module holding its model and ``KIND``, and no
module but a kind's own names a kind (by its name, its fields or its module's classes)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import kappa.streaming.kinds as kinds_package
from kappa.spec import load_catalog, transform_kinds
from kappa.streaming.kinds import kind_of, kinds

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "platform" / "kappa"
KINDS_DIR = PACKAGE / "streaming" / "kinds"


def _kind_modules() -> dict[str, Path]:
    """kind name -> the module declaring it (every registered kind's)."""
    out = {}
    for name, model in transform_kinds().items():
        path = Path(__import__(model.__module__, fromlist=["_"]).__file__)
        out[name] = path
    return out


def _classes(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)}


def kind_mentions(source: str, kind_names: set[str], own: str | None, classes: dict[str, set[str]]) -> list[str]:
    """Where ``source`` (a module's text) names a kind other than ``own`` (the kind whose module it
    is, or None): ``.transform.<kind>``; ``.kind`` compared with, or a table indexed by, a kind's
    name; two or more kind names in one literal (a table of kinds); an import of a kind's module;
    a class of a kind's module. One ``line: what`` entry each."""
    modules = {f"kappa.streaming.kinds.{k}" for k in kind_names}
    foreign = {c: k for k, cs in classes.items() if k != own for c in cs}
    found: list[str] = []

    def is_kind_attr(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "kind" and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "transform"

    def kind_strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and node.value in kind_names:
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [v for e in node.elts for v in kind_strings(e)]
        if isinstance(node, ast.Dict):
            return [v for k in node.keys if k is not None for v in kind_strings(k)]
        return []

    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "transform" \
                and node.attr in kind_names and node.attr != own:
            found.append(f"{line}: .transform.{node.attr}")
        elif isinstance(node, ast.Compare) and any(is_kind_attr(n) for n in [node.left, *node.comparators]):
            found.append(f"{line}: transform.kind compared")
        elif isinstance(node, ast.Subscript) and is_kind_attr(node.slice):
            found.append(f"{line}: a table indexed by transform.kind")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and len(set(kind_strings(node)) - {own}) >= 2:
            found.append(f"{line}: kind names {sorted(set(kind_strings(node)))}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            named = (targets & modules) - {f"kappa.streaming.kinds.{own}"}
            if named:
                found.append(f"{line}: imports {sorted(named)}")
        elif isinstance(node, ast.Import):
            named = ({a.name for a in node.names} & modules) - {f"kappa.streaming.kinds.{own}"}
            if named:
                found.append(f"{line}: imports {sorted(named)}")
        elif isinstance(node, (ast.Name, ast.alias)) and (getattr(node, "id", None) or getattr(node, "name", None)) in foreign:
            name = getattr(node, "id", None) or getattr(node, "name")
            found.append(f"{line}: {name} (of the {foreign[name]} kind)")
    return found


def test_every_kind_is_one_module_with_its_model_and_kind():
    registered = kinds()
    assert sorted(registered) == sorted(transform_kinds())
    for name, kind in registered.items():
        assert kind.name == name and kind.model is transform_kinds()[name]
        assert kind.model.__module__ == kind.start.__module__, name  # the query lives with the model


def test_the_built_in_kinds_are_the_modules_of_the_package():
    modules = {m.name for m in pkgutil.iter_modules(kinds_package.__path__)} - {"base"}
    assert {n for n, path in _kind_modules().items() if path.parent == KINDS_DIR} == modules


def test_no_module_but_a_kind_s_own_names_a_kind():
    names = set(transform_kinds())
    own_module = {path: name for name, path in _kind_modules().items()}
    classes = {name: _classes(path) for name, path in _kind_modules().items()}
    found = []
    for path in PACKAGE.rglob("*.py"):
        for hit in kind_mentions(path.read_text(), names, own_module.get(path), classes):
            found.append(f"{path.relative_to(ROOT)}:{hit}")
    assert not found, "modules naming a kind outside the kind's own module:\n" + "\n".join(found)


def test_the_kind_mention_finder_finds_what_it_claims():
    """The check above would see each way of naming a kind: it is not a pattern that matches nothing."""
    names, classes = {"parse", "window"}, {"parse": {"ParseWriter"}, "window": set()}
    for source in ('if spec.transform.kind == "parse": pass', "x = LATE[spec.transform.kind]",
                   "w = spec.transform.window", 'T = ("parse", "window")',
                   "from kappa.streaming.kinds.parse import silver_frame", "from kappa.streaming.kinds import parse",
                   "import kappa.streaming.kinds.window", "w = ParseWriter(spark)"):
        assert kind_mentions(source, names, None, classes), source
    assert not kind_mentions('metadata["transform"] = spec.transform.kind', names, None, classes)
    assert not kind_mentions("w = spec.transform.window", names, "window", classes)  # its own module
    assert not kind_mentions('rules = ("parse", "relation")', names, None, classes)  # one name is not a table


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
    assert sorted({spec.transform.kind for spec in catalog}) == sorted(_kind_modules())


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
