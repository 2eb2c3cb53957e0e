"""Pyflakes over the package and the tests: no undefined name, no unused import, no placeholder-less
f-string. An undefined name reaches a user only when its line runs: the Kubernetes runner's
``checkpoint_result`` named ``end_offsets=kafka`` after the local it read was refactored away, and only
the plane test, 40 minutes into CI, ran it (stop 58)."""

from __future__ import annotations

from pathlib import Path

from pyflakes.api import checkRecursive
from pyflakes.reporter import Reporter

ROOT = Path(__file__).resolve().parents[2]


class _Collect(Reporter):
    """Pyflakes' reporter, keeping each message as ``path:line: message`` instead of printing it."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def unexpectedError(self, filename, msg):  # noqa: N802 - pyflakes' interface
        self.found.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):  # noqa: N802
        self.found.append(f"{filename}:{lineno}: {msg}")

    def flake(self, message):
        self.found.append(str(message))


def test_pyflakes_finds_nothing_in_the_package_or_the_tests():
    reporter = _Collect()
    checkRecursive([str(ROOT / "platform" / "kappa"), str(ROOT / "tests")], reporter)
    assert reporter.found == []


def test_the_check_sees_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def result(cp):\n    return {'end_offsets': kafka}\n")
    reporter = _Collect()
    checkRecursive([str(bad)], reporter)
    assert len(reporter.found) == 1 and "undefined name 'kafka'" in reporter.found[0]
