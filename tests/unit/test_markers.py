"""Markers by infrastructure (tests/conftest.py): a test that starts a real part itself carries its
marker, so `make test-fast` (which leaves out every test marked broker, spark, objectstore, plane,
browser or postgres) starts none.

The check reads the test files' sources (no collection, no imports of the tests): every test
function, fixture or helper whose body calls a starter below must be marked for that part, by its
own decorator, its class's or module's ``pytestmark``, or a fixture it asks for directly that
:data:`tests.conftest.INFRA_FIXTURES` marks; a fixture that starts one must be in that table or in a
module whose ``pytestmark`` names the part; a helper counts for each test of its module that calls it.
What it cannot see: a part started by a `kappa` subprocess without a starter named here
(`kappa run`, `kappa bench`), which those files mark by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import INFRA_FIXTURES, INFRA_MARKERS

TESTS = Path(__file__).resolve().parents[1]

#: Calls in a test's source that start a part, by marker.
STARTERS = {
    "broker": [r"\bbroker\.start\(", r"""["']kafka["'],\s*["']start["']""", r"\bensure_running\("],
    "spark": [r"\bspark_session\(", r"\bSparkSession\.builder\b"],
    "objectstore": [r"\bobject_store\(", r"""["']objectstore["'],\s*["']start["']"""],
    "plane": [r"\bcluster\.start\(", r"""["']cluster["'],\s*["']start["']"""],
    "browser": [r"\bBrowser\("],
    "postgres": [r"\bpostgres\.start\(", r"""["']postgres["'],\s*["']start["']"""],
}

#: Tests that call a starter only to see it refuse, so start nothing.
REFUSED = {"tests/integration/test_cli.py::test_start_without_java_is_a_clear_error"}


def _marks(node: ast.AST) -> set[str]:
    """Marker names in a decorator list entry or a ``pytestmark`` value (``pytest.mark.X``, called
    or not, alone or in a list)."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark":
            found.add(sub.attr)
    return found


def _pytestmark(body: list[ast.stmt]) -> set[str]:
    marks = set()
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            marks |= _marks(stmt.value)
    return marks


def _is_fixture(fn: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def _started(fn: ast.FunctionDef, lines: list[str]) -> set[str]:
    """The parts ``fn``'s body (not its decorators) starts; ``lines``: its module's source lines."""
    body = "\n".join(lines[fn.body[0].lineno - 1:fn.end_lineno])
    return {marker for marker, patterns in STARTERS.items() if any(re.search(p, body) for p in patterns)}


def unmarked_starts(source: str, name: str) -> list[str]:
    """``"<name>::<function>: starts <part> unmarked"`` for each start in one test module's source
    that no marker covers (see the module docstring)."""
    tree = ast.parse(source)
    module_marks = _pytestmark(tree.body)
    functions: list[tuple[ast.FunctionDef, set[str]]] = []  # (function, its class's marks)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append((node, set()))
        elif isinstance(node, ast.ClassDef):
            class_marks = _pytestmark(node.body) | {m for d in node.decorator_list for m in _marks(d)}
            functions += [(n, class_marks) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def covered(fn: ast.FunctionDef, class_marks: set[str]) -> set[str]:
        own = {m for d in fn.decorator_list for m in _marks(d)}
        args = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        return own | class_marks | module_marks | {INFRA_FIXTURES[a] for a in args if a in INFRA_FIXTURES}

    tests = [(fn, cm) for fn, cm in functions if fn.name.startswith("test_")]
    calls = {test.name: {n.func.id for n in ast.walk(test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
             for test, _ in tests}
    lines = source.splitlines()
    problems = []
    for fn, class_marks in functions:
        parts = _started(fn, lines)
        if not parts:
            continue
        if _is_fixture(fn):
            missing = parts - module_marks - ({INFRA_FIXTURES[fn.name]} if fn.name in INFRA_FIXTURES else set())
            problems += [f"{name}::{fn.name}: fixture starts {p} unmarked" for p in sorted(missing)]
        elif fn.name.startswith("test_"):
            problems += [f"{name}::{fn.name}: starts {p} unmarked" for p in sorted(parts - covered(fn, class_marks))]
        else:  # a helper: each test of the module that calls it
            for test, cm in tests:
                if fn.name in calls[test.name]:
                    problems += [f"{name}::{test.name}: starts {p} (through {fn.name}) unmarked"
                                 for p in sorted(parts - covered(test, cm))]
    return problems


def test_every_test_that_starts_a_part_carries_its_marker():
    files = [f for f in sorted(TESTS.rglob("test_*.py")) + sorted(TESTS.rglob("conftest.py")) if f != Path(__file__)]
    assert len(files) > 80
    problems = [p for f in files for p in unmarked_starts(f.read_text(), str(f.relative_to(TESTS.parent)))
                if p.split(": ")[0] not in REFUSED]
    assert problems == []


def test_the_check_finds_an_unmarked_start_and_accepts_each_way_of_marking_it():
    unmarked = """
import pytest
from kappa.streaming.session import spark_session

def _session(s):
    return spark_session(s)

def test_direct(tmp_path):
    spark_session(tmp_path)

def test_through_a_helper(tmp_path):
    _session(tmp_path)

@pytest.fixture
def store(tmp_path):
    with object_store(tmp_path, "b") as s:
        yield s
"""
    assert sorted(unmarked_starts(unmarked, "t.py")) == [
        "t.py::store: fixture starts objectstore unmarked",
        "t.py::test_direct: starts spark unmarked",
        "t.py::test_through_a_helper: starts spark (through _session) unmarked",
    ]
    marked = unmarked.replace("def test_direct", "@pytest.mark.spark\ndef test_direct").replace(
        "def test_through_a_helper(tmp_path)", "def test_through_a_helper(tmp_path, spark)")
    marked += "\npytestmark = [pytest.mark.integration, pytest.mark.objectstore]\n"
    assert unmarked_starts(marked, "t.py") == []
    # a starter named only in a decorator (the CLI's --help cases) starts nothing
    assert unmarked_starts('@pytest.mark.parametrize("c", [["kafka", "start"]])\ndef test_help(c):\n    pass\n',
                           "t.py") == []


def test_the_fixture_table_names_real_fixtures_and_registered_markers():
    sources = "\n".join(p.read_text() for p in TESTS.rglob("conftest.py"))
    for fixture, marker in INFRA_FIXTURES.items():
        assert re.search(rf"^def {fixture}\(", sources, re.MULTILINE), fixture
        assert marker in INFRA_MARKERS
    pyproject = (TESTS.parent / "pyproject.toml").read_text()
    for marker in INFRA_MARKERS:
        assert f'"{marker}: ' in pyproject, marker


def test_cluster_tests_are_marked_and_left_out_of_make_test():
    """tests/cluster needs the built image (`make test-cluster`): every module there is marked
    ``cluster`` and `make test` / `make test-fast` deselect that marker."""
    modules = sorted((TESTS / "cluster").glob("test_*.py"))
    assert modules
    for module in modules:
        assert "cluster" in _pytestmark(ast.parse(module.read_text()).body), module.name
    makefile = (TESTS.parent / "Makefile").read_text()
    (selection,) = re.findall(r'^\t\$\(BIN\)/pytest -m "([^"]+)" -n ', makefile, re.M)
    fast = re.search(r"^FAST := (.+)$", makefile, re.M)[1]
    for expr in (selection, fast):
        assert re.fullmatch(r"not cluster|not \((\w+ or )*cluster( or \w+)*\)", expr), expr
    assert '"cluster: ' in (TESTS.parent / "pyproject.toml").read_text()
