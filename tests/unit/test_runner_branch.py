"""One branch on ``settings.runner`` (issue 42, item 4): :func:`kappa.runners.runner_class`. What
differs by platform is asked of the runner's class."""

from __future__ import annotations

import ast
from pathlib import Path

from kappa.config import load_settings
from kappa.runners import runner_class
from kappa.runners.kubernetes.runner import KubernetesRunner
from kappa.runners.local import LocalRunner
from kappa.spec import load_catalog

from tests.conftest import REPO

PACKAGE = REPO / "platform" / "kappa"


def _runner_comparisons(path: Path) -> list[int]:
    """Lines of ``path`` that compare an attribute named ``runner`` (``settings.runner == …``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "runner" for s in sides):
                found.append(node.lineno)
    return found


def test_only_runner_class_compares_settings_runner():
    where = {str(p.relative_to(PACKAGE)): lines for p in sorted(PACKAGE.rglob("*.py"))
             if (lines := _runner_comparisons(p))}
    assert list(where) == ["runners/__init__.py"] and len(where["runners/__init__.py"]) == 1, where


def test_the_class_answers_what_differs(tmp_path):
    assert runner_class(load_settings(project_dir=REPO, home=tmp_path)) is LocalRunner
    assert runner_class(load_settings(project_dir=REPO, home=tmp_path, runner="kubernetes")) is KubernetesRunner
    catalog = load_catalog(REPO / "assets")
    flights, gold = catalog["flights"], catalog["departures_hourly"]  # reads Kafka / reads a table
    assert LocalRunner.refuses_source_topics(flights) is None
    assert KubernetesRunner.refuses_source_topics(gold) is None
    refused = KubernetesRunner.refuses_source_topics(flights)
    assert refused.startswith("flights not covered by the chart's KafkaUsers") and "KafkaUser (" in refused
    me = LocalRunner.identity()
    assert me["source"] == "local user (effective uid)" and isinstance(me["uid"], int) and me["user"]
