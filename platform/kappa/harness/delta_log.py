"""Readers of a Delta table's log and data for harness runs and tests (no Spark): the commit
history from the ``_delta_log`` folder, columns through delta-rs."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Callable

_COMMIT = re.compile(r"^(\d{20})\.json$")


def latest_commit(table: str | Path) -> int:
    """The newest committed version of a Delta table (-1 when it has none yet). Delta commits
    version N by atomically creating ``_delta_log/<N, 20 digits>.json`` (Delta protocol, "Delta
    Log Entries"), so the folder listing is the table's commit history."""
    log = Path(table) / "_delta_log"
    try:
        names = os.listdir(log)
    except FileNotFoundError:
        return -1
    versions = [int(m.group(1)) for n in names if (m := _COMMIT.match(n))]
    return max(versions, default=-1)


def commit_time(table: str | Path, version: int) -> float:
    """Wall-clock time (epoch seconds) at which ``version`` became visible: its commit file's mtime."""
    return (Path(table) / "_delta_log" / f"{version:020d}.json").stat().st_mtime


def wait_for_commit(table: str | Path, after: int, timeout_s: float, alive: Callable[[], bool] | None = None,
                    poll_s: float = 0.1) -> tuple[int, float] | None:
    """Wait for a commit newer than ``after``; return ``(version, commit time)`` or None on timeout
    (or as soon as ``alive()`` turns false)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = latest_commit(table)
        if v > after:
            first = after + 1  # the first new commit, not the newest one
            return first, commit_time(table, first)
        if alive is not None and not alive():
            return None
        time.sleep(poll_s)
    return None


def read_delta(path: str, columns: list[str]):
    """``columns`` of the Delta table at ``path`` (its latest version) as a pyarrow Table
    (:func:`kappa.delta.tables.dataset`)."""
    from kappa.delta.tables import dataset

    return dataset(path).to_table(columns=columns)


def txn_commits(table: str | Path) -> "Counter[tuple[str, int]]":
    """(txnAppId, txnVersion) -> how many commits of the Delta table carry it, read from the ``txn``
    actions of the JSON commit files in ``_delta_log`` itself (a Delta reader's snapshot keeps only
    the newest version per app id, so it could not show a micro-batch committed twice)."""
    import json
    from collections import Counter

    counts: Counter = Counter()
    for commit in sorted(Path(table, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "txn" in action:
                counts[(action["txn"]["appId"], action["txn"]["version"])] += 1
    return counts


def duplicate_commits(table: str | Path) -> int:
    """Commits beyond the first per (txnAppId, txnVersion): micro-batches appended twice."""
    return sum(n - 1 for n in txn_commits(table).values())
