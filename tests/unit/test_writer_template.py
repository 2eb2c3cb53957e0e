"""A micro-batch write is one template (issue 42, item 2): :class:`kappa.streaming.writers.MicroBatchWriter`
places every fault point of ``KAPPA_FAULT`` and owns the re-run rule; a kind's writer only lists its
commits. Read from the source (an AST scan of the package) and from the loaded classes; that each
writer reaches its points in order on real Spark and Delta is
``tests/integration/test_writer_template.py``."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import kappa
from kappa.faults import FAULT_POINTS

PACKAGE = Path(kappa.__file__).parent
#: What only the base defines: the template, its fault points and its re-run rule.
TEMPLATE = ("__call__", "_commit", "at", "rerun", "last_committed")


def _fault_point_calls() -> list[tuple[str, str, str]]:
    """(module path, enclosing class or "", point) of every call ``<x>.at("<a fault point>", ...)``
    or ``<x>.hit(<asset>, "<a fault point>", ...)`` in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] + [tree]:
            name = cls.name if isinstance(cls, ast.ClassDef) else ""
            body = cls.body if isinstance(cls, ast.ClassDef) else [n for n in tree.body if not isinstance(n, ast.ClassDef)]
            for node in [n for stmt in body for n in ast.walk(stmt)]:
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                args = node.args[:1] if node.func.attr == "at" else node.args[1:2] if node.func.attr == "hit" else []
                if args and isinstance(args[0], ast.Constant) and args[0].value in FAULT_POINTS:
                    found.append((str(path.relative_to(PACKAGE)), name, args[0].value))
    return found


def test_only_the_base_writer_places_fault_points():
    calls = _fault_point_calls()
    outside = [c for c in calls if c[:2] != ("streaming/writers.py", "MicroBatchWriter")]
    assert not outside, f"fault points placed outside MicroBatchWriter: {outside}"
    # The base places before_write and after_batch by name; the commit points through AFTER_COMMIT.
    assert {point for _, _, point in calls} == {"before_write", "after_batch"}


def test_every_commit_fault_point_follows_a_commit_to_its_table():
    from kappa.streaming.writers import AFTER_COMMIT, COMMIT_ORDER, SIDE_TABLES

    assert set(AFTER_COMMIT.values()) == set(FAULT_POINTS) - {"before_write", "after_batch"}
    assert COMMIT_ORDER[-1] is None  # the asset's table last: the re-run rule reads it
    assert set(COMMIT_ORDER) == set(SIDE_TABLES) | {None}


def test_no_writer_overrides_the_template():
    from kappa.streaming.writers import MicroBatchWriter

    for info in pkgutil.walk_packages(kappa.__path__, "kappa."):
        if info.name.startswith("kappa.streaming"):
            importlib.import_module(info.name)
    writers, todo = [], [MicroBatchWriter]
    while todo:
        for sub in todo.pop().__subclasses__():
            writers.append(sub)
            todo.append(sub)
    names = {w.__name__ for w in writers}
    assert {"UpsertWriter", "AppendWriter", "ParseWriter", "PatternWriter", "ChangelogWriter", "LookupWriter",
            "ViewWriter"} <= names, names
    for w in writers:
        overridden = [m for m in TEMPLATE if m in vars(w)]
        assert not overridden, f"{w.__qualname__} overrides the template's {overridden}"
        assert "commits" in vars(w), f"{w.__qualname__} lists no commits"
