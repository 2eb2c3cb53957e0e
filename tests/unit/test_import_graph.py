"""The package's import graph has no cycle, between modules or between its folders, counting every
import: at the top of a module, inside functions and under ``TYPE_CHECKING``. A folder-level cycle
is an import running back up the layers (docs/ARCHITECTURE.md, "Layers")."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2] / "platform"
PACKAGE = ROOT / "kappa"


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
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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


def test_no_module_imports_itself_back():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert not cycles, f"import cycles between modules: {cycles}"


def test_no_folder_imports_back_up():
    graph = import_graph()
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
    assert graph.has_edge("kappa.streaming.kinds", "kappa.spec")  # under TYPE_CHECKING


@pytest.mark.parametrize("module", ["kappa.spec", "kappa.config", "kappa.errors", "kappa.core"])
def test_the_lowest_layers_import_nothing_above_them(module):
    above = {"kappa.streaming", "kappa.lifecycle", "kappa.runners", "kappa.dagster", "kappa.cli",
             "kappa.services", "kappa.harness", "kappa.analytics"}
    graph = import_graph()
    reached = {folder_of(t) for n in graph if folder_of(n) == module for t in nx.descendants(graph, n)}
    assert not reached & above, f"{module} reaches {sorted(reached & above)}"
