"""The package's import graph has no cycle, between modules or between its folders, counting every
import: at the top of a module, inside functions, under ``TYPE_CHECKING`` and by name
(``importlib.import_module`` of a literal or a module constant). A folder-level cycle is an import
running back up the layers (docs/ARCHITECTURE.md, "Layers").

One import by name runs up on purpose, and only it (:data:`PLUGIN_LOADS`): the declaration layer
loads the package of the built-in transform kinds the first time it validates a declaration, as
Spark finds its data sources through ``ServiceLoader``. A kind is one module holding its model,
frame and writer (issue 42), so the model sits above the layer that must validate it; the layer
says what a kind answers (``kappa.spec.asset.TransformModel``) and never names one."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2] / "platform"
PACKAGE = ROOT / "kappa"

#: The imports by name allowed to run up the layers: (importer, imported) -> why.
PLUGIN_LOADS = {
    ("kappa.spec.asset", "kappa.streaming.kinds"):
        "the declaration layer loads the built-in kinds, each a module holding its model, frame and writer",
}


def _named_imports(tree: ast.Module) -> list[str]:
    """Modules imported by name: ``import_module("kappa.x")`` or ``import_module(CONSTANT)`` where
    the module assigns ``CONSTANT = "kappa.x"``."""
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                == "import_module":
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append(arg.value)
            elif isinstance(arg, ast.Name) and arg.id in constants:
                out.append(constants[arg.id])
    return out


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph() -> nx.DiGraph:
    """module -> the kappa modules it imports (a name imported from a package is an edge to the
    submodule when one exists by that name)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for target in _named_imports(tree):
            if target in modules and target != name:
                graph.add_edge(name, target)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("kappa") and target != name and target != "kappa":
                    graph.add_edge(name, target)
    return graph


def folder_of(module: str) -> str:
    """``kappa.streaming.kinds.parse`` -> ``kappa.streaming`` (a module at the root is its own)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def layered_graph() -> nx.DiGraph:
    """:func:`import_graph` less the :data:`PLUGIN_LOADS`."""
    graph = import_graph()
    graph.remove_edges_from(PLUGIN_LOADS)
    return graph


def test_the_plugin_loads_are_real():
    graph = import_graph()
    assert all(graph.has_edge(a, b) for a, b in PLUGIN_LOADS), "a plugin load listed here no longer exists"


def test_no_module_imports_itself_back():
    cycles = [sorted(c) for c in nx.strongly_connected_components(layered_graph()) if len(c) > 1]
    assert not cycles, f"import cycles between modules: {cycles}"


def test_no_folder_imports_back_up():
    graph = layered_graph()
    folders = nx.DiGraph()
    for a, b in graph.edges:
        fa, fb = folder_of(a), folder_of(b)
        if fa != fb:
            folders.add_edge(fa, fb, via=f"{a} -> {b}")
    cycles = [sorted(c) for c in nx.strongly_connected_components(folders) if len(c) > 1]
    detail = {f"{a} -> {b}": d["via"] for a, b, d in folders.edges(data=True)
              if any(a in c and b in c for c in cycles)}
    assert not cycles, f"folders importing each other (an arrow back up the layers): {cycles}: {detail}"


def test_the_graph_reads_every_kind_of_import():
    """The measure counts what it claims: imports inside functions and under TYPE_CHECKING too."""
    graph = import_graph()
    assert graph.has_edge("kappa.streaming.query", "kappa.streaming.kinds")  # top level
    assert graph.has_edge("kappa.runners", "kappa.runners.local")  # inside pick_runner
    assert graph.has_edge("kappa.streaming.kinds.base", "kappa.spec")  # under TYPE_CHECKING
    assert graph.has_edge("kappa.spec.asset", "kappa.streaming.kinds")  # by name


@pytest.mark.parametrize("module", ["kappa.spec", "kappa.config", "kappa.errors", "kappa.core"])
def test_the_lowest_layers_import_nothing_above_them(module):
    above = {"kappa.streaming", "kappa.lifecycle", "kappa.runners", "kappa.dagster", "kappa.cli",
             "kappa.services", "kappa.harness", "kappa.analytics"}
    graph = layered_graph()
    reached = {folder_of(t) for n in graph if folder_of(n) == module for t in nx.descendants(graph, n)}
    assert not reached & above, f"{module} reaches {sorted(reached & above)}"
