"""Per-file test times from the JUnit files `make test` leaves in .kappa/test-artifacts/ (README, Tests).

``python -m tests.times [JUNIT [BEFORE]]`` prints, slowest first, each test file's time in seconds
(the sum of its tests' setup, call and teardown, as pytest's JUnit writer reports them), its number of
tests and, given BEFORE (by default the previous run's ``junit-previous.xml`` when it exists), the
time before and the difference. A session fixture's set-up counts in the first test that asks for it,
so a file's time moves when the tests before it change."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[1] / ".kappa" / "test-artifacts"


def worker_lines(since: float) -> list[str]:
    """One line per xdist worker whose timeline (``timeline-gw<n>.tsv``, tests/conftest.py) was
    written after ``since`` (seconds since the epoch, the session's start): its tests, the seconds
    spent in them, and when its last one finished, counted from ``since``."""
    lines = []
    for path in sorted(ARTIFACTS.glob("timeline-gw*.tsv")):
        rows = [line.split("\t") for line in path.read_text().splitlines() if line]
        if not rows or path.stat().st_mtime < since:
            continue
        busy = sum(float(end) - float(start) for start, end, _ in rows)
        last = max(float(end) for _, end, _ in rows) - since
        lines.append(f"{path.stem.removeprefix('timeline-')}: {len(rows)} tests, {busy:.0f} s in them, "
                     f"its last done at {last:.0f} s")
    return lines


def file_times(junit: Path) -> dict[str, tuple[float, int]]:
    """{test file path (``tests/unit/test_x.py``): (seconds, tests)} from one JUnit XML file."""
    times: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "")
        # classname is the dotted module, then any class: keep the part that names a test_ module
        parts = module.split(".")
        ends = [i for i, p in enumerate(parts) if p.startswith("test_")]
        path = "/".join(parts[: ends[0] + 1] if ends else parts) + ".py"
        times[path][0] += float(case.get("time") or 0)
        times[path][1] += 1
    return {k: (v[0], v[1]) for k, v in times.items()}


def main(argv: list[str]) -> None:
    junit = Path(argv[0]) if argv else ARTIFACTS / "junit.xml"
    before_path = Path(argv[1]) if len(argv) > 1 else ARTIFACTS / "junit-previous.xml"
    now = file_times(junit)
    before = file_times(before_path) if before_path.exists() else {}
    header = f"{'seconds':>9} {'tests':>5}" + (f" {'before':>9} {'change':>8}" if before else "") + "  file"
    print(header)
    for path, (secs, n) in sorted(now.items(), key=lambda kv: -kv[1][0]):
        line = f"{secs:9.1f} {n:5d}"
        if before:
            old = before.get(path)
            line += f" {old[0]:9.1f} {secs - old[0]:+8.1f}" if old else f" {'-':>9} {'':>8}"
        print(f"{line}  {path}")
    total = sum(s for s, _ in now.values())
    print(f"{total:9.1f} {sum(n for _, n in now.values()):5d}"
          + (f" {sum(s for s, _ in before.values()):9.1f}" if before else "") + "  total")


if __name__ == "__main__":
    main(sys.argv[1:])
