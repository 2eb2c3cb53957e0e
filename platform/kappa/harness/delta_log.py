"""Readers of a Delta table's log and data for harness runs and tests (no Spark): the commit
history from the ``_delta_log`` folder, columns through delta-rs.

When a row became visible is answered here once, for the bench and the tests:
:func:`first_visible` from the log's ``add`` actions, :func:`first_visible_cdf` from Delta's change
data feed as a second method. A commit whose files change no data (OPTIMIZE, as ``kappa maintain``
runs it, or Delta's auto-compaction, off in Kappa's sessions) re-adds rows visible long before; neither method
lets such a commit make a row visible again, and :func:`wait_for_commit` does not take one for a
micro-batch.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import unquote

if TYPE_CHECKING:
    from kappa.config import Settings

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


def commit_actions(table: str | Path, version: int) -> list[dict]:
    """The actions of commit ``version``: one JSON object per line of its commit file, each with
    one key (``add``, ``remove``, ``txn``, ``commitInfo``…; Delta protocol, "Actions")."""
    text = (Path(table) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def data_files(actions: list[dict]) -> list[str]:
    """The files (paths relative to the table) a commit adds with ``dataChange: true``: the files
    whose rows it makes visible. An ``add`` with ``dataChange: false`` holds rows that were already
    in the table (Delta protocol, "Add File and Remove File": when false, the records must already
    be present in the table or in files the same commit removes), as OPTIMIZE and auto-compaction
    write them."""
    return [unquote(a["add"]["path"]) for a in actions if "add" in a and a["add"].get("dataChange", True)]


def rearranges_only(actions: list[dict]) -> bool:
    """True for a commit that adds or removes files and changes no data (every ``add`` and
    ``remove`` has ``dataChange: false``): OPTIMIZE, auto-compaction. A micro-batch's commit has
    data-changing files, or none at all (a MERGE that inserted nothing still commits its ``txn``)."""
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    return bool(files) and not any(f.get("dataChange", True) for f in files)


def wait_for_commit(table: str | Path, after: int, timeout_s: float, alive: Callable[[], bool] | None = None,
                    poll_s: float = 0.1) -> tuple[int, float] | None:
    """Wait for a commit newer than ``after`` that is not only a rearrangement of files
    (:func:`rearranges_only`: an auto-compaction following an earlier batch is not the pipeline
    committing); return the first such ``(version, commit time)``, or None on timeout (or as soon
    as ``alive()`` turns false)."""
    deadline = time.monotonic() + timeout_s
    checked = after
    while time.monotonic() < deadline:
        for v in range(checked + 1, latest_commit(table) + 1):  # the first new commit, not the newest one
            if not rearranges_only(commit_actions(table, v)):
                return v, commit_time(table, v)
            checked = v
        if alive is not None and not alive():
            return None
        time.sleep(poll_s)
    return None


def first_visible(table: str | Path, column: str, after: int, through: int | None = None) -> dict:
    """When each row added by commits ``after + 1 … through`` (default: the latest) became visible:
    ``{value of column: (version, commit time in epoch seconds)}`` for the FIRST of those commits
    whose :func:`data_files` hold a row with that value.

    First seen wins, and only data-changing adds count: a compaction's ``dataChange: false`` add,
    or a MERGE rewriting a file with rows it leaves as they were, holds rows that were visible
    before; taking the last commit that names a row measured the compaction instead of the row
    (issue 19). A row in the table at ``after`` that a compaction rewrites later is not in the
    result; one that a MERGE, UPDATE or DELETE rewrites (``dataChange: true``) is, at that commit:
    ask about rows written after ``after`` (the bench: event ids sent after it read ``after``).
    ``column`` must be a data column (not a partition column: its value is not in the file).
    Commit time: :func:`commit_time`."""
    import pyarrow.parquet as pq

    through = latest_commit(table) if through is None else through
    seen: dict = {}
    for version in range(after + 1, through + 1):
        files = data_files(commit_actions(table, version))
        if not files:
            continue
        at = commit_time(table, version)
        for path in files:
            for value in pq.read_table(Path(table) / path, columns=[column]).column(column).to_pylist():
                seen.setdefault(value, (version, at))
    return seen


def first_visible_cdf(table: str | Path, column: str, after: int, through: int | None = None) -> dict:
    """:func:`first_visible` by a second method: Delta's change data feed read with delta-rs
    (``load_cdf``), the smallest ``_commit_version`` of an ``insert`` or ``update_postimage`` row
    per value and that commit's ``_commit_timestamp`` (epoch seconds, millisecond precision). That
    timestamp is not :func:`commit_time`: delta-rs reports the ``timestamp`` of the commit's
    ``commitInfo``, which a Spark writer takes before it writes the commit file (21 to 203 ms
    before the file's mtime on a table of ``tests/integration/test_latency_visibility.py`` here),
    so the latencies of the two methods differ by about that much. The feed has no change rows for
    the files of an OPTIMIZE (``tests/unit/test_delta_visibility.py``: the rows it rewrote do not
    reappear), and this method never reads the ``add`` actions itself. Needs
    ``delta.enableChangeDataFeed`` on the table for every commit from ``after + 1``."""
    import pyarrow as pa
    from deltalake import DeltaTable

    through = latest_commit(table) if through is None else through
    if through <= after:
        return {}
    feed = pa.table(DeltaTable(str(table)).load_cdf(
        starting_version=after + 1, ending_version=through,
        columns=[column, "_change_type", "_commit_version", "_commit_timestamp"]).read_all())
    seen: dict = {}
    rows = zip(*(feed.column(c).to_pylist() for c in (column, "_change_type", "_commit_version", "_commit_timestamp")))
    for value, kind, version, stamp in sorted(rows, key=lambda r: r[2]):
        if kind in ("insert", "update_postimage"):
            # delta-rs gives a timestamp without a zone; it is UTC (Delta's commit timestamps are
            # epoch milliseconds), not this machine's local time.
            seen.setdefault(value, (version, stamp.replace(tzinfo=stamp.tzinfo or timezone.utc).timestamp()))
    return seen


def change_data_feed_enabled(table: str | Path) -> bool:
    """Whether the table's current metadata has ``delta.enableChangeDataFeed`` true."""
    from deltalake import DeltaTable

    return DeltaTable(str(table)).metadata().configuration.get("delta.enableChangeDataFeed", "").lower() == "true"


def read_delta(path: str, columns: list[str]):
    """``columns`` of the Delta table at ``path`` (its latest version) as a pyarrow Table
    (:func:`kappa.delta.tables.dataset`)."""
    from kappa.delta.tables import dataset

    return dataset(path).to_table(columns=columns)


def txn_commits(table: str | Path, settings: Settings | None = None) -> Counter[tuple[str, int]]:
    """(txnAppId, txnVersion) -> how many commits of the Delta table carry it, read from the ``txn``
    actions of the JSON commit files in ``_delta_log`` itself (a Delta reader's snapshot keeps only
    the newest version per app id, so it could not show a micro-batch committed twice). ``table``
    is a folder or an object-store URI (``s3a://…``, reached with ``settings``' endpoint)."""
    from kappa.core import storage

    log = storage.join(table, "_delta_log")
    counts: Counter = Counter()
    for name in sorted(n for n in storage.list_names(log, settings) if _COMMIT.match(n)):
        for line in storage.read_text(storage.join(log, name), settings).splitlines():
            action = json.loads(line) if line.strip() else {}
            if "txn" in action:
                counts[(action["txn"]["appId"], action["txn"]["version"])] += 1
    return counts


def duplicate_commits(table: str | Path) -> int:
    """Commits beyond the first per (txnAppId, txnVersion): micro-batches appended twice."""
    return sum(n - 1 for n in txn_commits(table).values())
