"""Late rows of the stateful operators Spark drops them in (window, session, join, sliding), named.

Spark drops an input row that arrives behind a stateful operator's watermark and only counts it
(``numRowsDroppedByWatermark`` in the micro-batch's progress); it gives no hook to see the row. The
rows are not lost, though: the checkpoint's write-ahead log says exactly what each micro-batch read
and where the watermark stood, and the upstream Delta table still holds the rows. So, for a batch
whose progress reports drops, :func:`name_dropped_rows`

1. rebuilds the batch's input: batch N read the upstream table from batch N-1's end position to its
   own (``<checkpoint>/offsets/<N-1>`` and ``<N>``, Delta's ``DeltaSourceOffset``: ``reservoirVersion``,
   ``index``, ``isStartingVersion``). From an initial snapshot the source reads the snapshot's files
   sorted by (``modificationTime``, ``path``), ``index`` the last one read (Delta's
   ``DeltaSourceSnapshot.filteredFiles``); after it, whole commits' data-changing ``add`` files, a
   commit that removes data skipped (``skipChangeCommits``, which every Kappa upstream stream sets).
   The files are read as they are (Parquet, partition values from the log);
2. applies the kind's rule (:attr:`kappa.streaming.kinds.base.Kind.dropped_rows`) at the watermark
   Spark drops late rows by, which is the *previous* batch's: since Spark 3.5 (SPARK-40925) a
   stateful operator filters late input with ``eventTimeWatermarkForLateEvents``, which
   ``PropagateWatermarkSimulator.getInputWatermarkForLateEvents(batchId)`` takes from batch
   ``batchId - 1`` (``batchWatermarkMs`` of ``offsets/<N-1>``; 0 for batch 0), while state is
   evicted by the current batch's. Measured on Spark 4.1.3 for a window aggregation (tumbling and
   hopping), a session window, a stream-stream join and a ``transformWithState`` processor: the
   count of step 2 equals ``numRowsDroppedByWatermark`` (``tests/integration/test_late_rows.py``);
3. compares it with Spark's count in Spark's unit (a window aggregation counts partial aggregates:
   :data:`~kappa.streaming.kinds.base.LateCount`) and, when they agree, appends one row per dropped
   input row to the late-events table (``asset``, ``version``, ``event_id``, ``event_time``,
   ``watermark``, ``value`` = the row as JSON, ``reason``), once per (``txnAppId`` = the version's
   ``late`` writer id, ``txnVersion`` = the batch id), so naming a batch twice writes it once.

What is not named is said, never guessed: a batch whose input cannot be rebuilt exactly (it stopped
inside a Delta commit, the previous offsets entry was purged, deletion vectors or column mapping on
the upstream table) or whose count disagrees with Spark's is reported in :class:`LateBatch` with
``why``, and the gate's ``late_rows`` check counts its drops as not named. Progress reports come
from the local runner: a continuous run folds ``recentProgress`` in at every poll and names new
batches while the queries run; an available-now run names after the query ended, from the reports
Spark still holds (``spark.sql.streaming.numRecentProgressUpdates``, 100 batches: the same reports
its ``dropped_by_watermark`` counts). A driver that dies between a batch and its naming loses that
batch's progress report, so its drops are neither counted nor named (the same gap as Spark's count;
a later run could find such batches by rebuilding every batch, which costs a second read of the
input). On the kubernetes runner the driver does the same (:class:`LateTally` in
:mod:`kappa.runners.entrypoint`): every few seconds it names new batches with drops and records
them as a ``dropped`` registry event, which the gate and ``kappa status`` add up with the runs'.

Only Delta sources are rebuilt: every stateful kind reads upstream assets (``AssetSpec`` refuses a
Kafka source for them).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappa.config import Settings
from kappa.core.storage import join, read_text
from kappa.delta.registry import Version, late_events_path
from kappa.spec import AssetSpec
from kappa.delta.declarations import catalog as catalog_of
from kappa.streaming.kinds import kind_of

_log = logging.getLogger(__name__)

#: The side of :meth:`kappa.delta.registry.Version.writer_id` these rows are written under.
LATE_SIDE = "late"


@dataclass
class LateBatch:
    """One micro-batch's drops and what was named: ``dropped`` (Spark's ``numRowsDroppedByWatermark``,
    summed over the query's operators), ``named`` (input rows written to the late-events table),
    ``units_min``/``units_max`` (what Spark's count must be for those rows), ``accounted`` (Spark's
    count lies in that range: every dropped row is named) and ``why`` (None, or why nothing was
    named)."""

    batch_id: int
    dropped: int
    named: int = 0
    units_min: int = 0
    units_max: int = 0
    accounted: bool = False
    why: str | None = None


def dropped_by_batch(progress: list[dict]) -> dict[int, int]:
    """batch id -> rows the query's stateful operators dropped behind the watermark, from progress
    reports (``StreamingQueryProgress`` as JSON), for the batches that dropped any."""
    out: dict[int, int] = {}
    for p in progress:
        n = sum(int(op.get("numRowsDroppedByWatermark", 0) or 0) for op in p.get("stateOperators", []))
        if n > 0 and "batchId" in p:
            out[int(p["batchId"])] = n
    return out


def _offsets_entry(checkpoint: str, batch_id: int, settings: Settings) -> tuple[dict, list[dict]] | None:
    """(metadata, sources) of ``<checkpoint>/offsets/<batch_id>``; None when it is gone."""
    try:
        lines = [ln for ln in read_text(join(join(checkpoint, "offsets"), str(batch_id)), settings).splitlines()
                 if ln.strip()]
    except (OSError, FileNotFoundError):
        return None
    return json.loads(lines[1]), [json.loads(ln) for ln in lines[2:]]


def late_watermark_ms(checkpoint: str, batch_id: int, settings: Settings) -> int | None:
    """The watermark (epoch ms) Spark drops batch ``batch_id``'s late rows by: the previous batch's
    ``batchWatermarkMs`` (0 for batch 0; see the module docstring). None when that entry is gone."""
    if batch_id == 0:
        return 0
    entry = _offsets_entry(checkpoint, batch_id - 1, settings)
    return None if entry is None else int(entry[0].get("batchWatermarkMs", 0))


def _position(src: dict) -> tuple[int, int, bool]:
    return int(src["reservoirVersion"]), int(src.get("index", -1)), bool(src.get("isStartingVersion", False))


def _commit_adds(table_path: str, version: int, settings: Settings) -> list[dict] | str:
    """The data-changing ``add`` actions of one commit ([] when it removes data: Delta's
    ``skipChangeCommits`` skips such a commit whole), or why it cannot be read."""
    try:
        text = read_text(join(join(table_path, "_delta_log"), f"{version:020d}.json"), settings)
    except (OSError, FileNotFoundError):
        return f"the commit {version} of {table_path} is gone from its log"
    actions = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    if any("remove" in a and a["remove"].get("dataChange", True) for a in actions):
        return []
    return [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]


def _snapshot_files(table_path: str, version: int, settings: Settings) -> list[dict]:
    """The files of the table's snapshot at ``version`` in the order Delta's streaming source reads
    an initial snapshot: by (``modificationTime``, ``path``)."""
    import pyarrow as pa

    from kappa.delta.tables import open_table

    table = open_table(table_path, settings, version)
    rows = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    files = []
    for r in rows:
        parts = {k[len("partition."):]: v for k, v in r.items() if k.startswith("partition.")}
        dv = any(v is not None for k, v in r.items() if k.startswith("deletionVector"))
        files.append({"path": r["path"], "modificationTime": r["modification_time"], "partitionValues": parts,
                      "deletionVector": True if dv else None})
    return sorted(files, key=lambda f: (f["modificationTime"], f["path"]))


def batch_files(table_path: str, start: dict, end: dict, settings: Settings) -> list[dict] | str:
    """The ``add`` files one micro-batch read from a Delta table, from its start position (the end
    of the batch before) to its end position (Delta's source offsets), or why they cannot be known
    exactly (a batch that started or stopped inside a commit)."""
    s_v, s_i, s_snap = _position(start)
    e_v, e_i, e_snap = _position(end)
    files: list[dict] = []
    if s_snap:
        snapshot = _snapshot_files(table_path, s_v, settings)
        if e_snap and e_v != s_v:
            return f"positions {start} -> {end} are not in one snapshot"
        last = e_i if e_snap else len(snapshot) - 1
        files += snapshot[s_i + 1:last + 1]
        first_commit = s_v + 1
    elif s_i != -1:
        return f"the batch started inside commit {s_v} (after its file {s_i}): a rate-limited batch"
    else:
        first_commit = s_v
    if not e_snap:
        if e_i != -1:
            return f"the batch stopped inside commit {e_v} (after its file {e_i}): a rate-limited batch"
        for v in range(first_commit, e_v):
            adds = _commit_adds(table_path, v, settings)
            if isinstance(adds, str):
                return adds
            files += adds
    return files


def read_files(spark: SparkSession, table_path: str, files: list[dict]) -> DataFrame | str:
    """The rows of Delta data ``files`` (``add`` actions) of the table at ``table_path``, with the
    table's schema (partition columns from each file's ``partitionValues``), or why they cannot be
    read as they are (deletion vectors, column mapping)."""
    table = spark.read.format("delta").load(table_path)
    schema = table.schema
    if any(f.get("deletionVector") for f in files):
        return "a file has a deletion vector (its rows cannot be read from the Parquet file alone)"
    config = spark.sql(f"DESCRIBE DETAIL delta.`{table_path}`").first()
    parts = list(config["partitionColumns"] or [])
    if (config["properties"] or {}).get("delta.columnMapping.mode", "none") != "none":
        return "the table uses column mapping (its Parquet column names differ)"
    data_schema = type(schema)([f for f in schema.fields if f.name not in parts])
    empty = spark.createDataFrame([], schema)
    groups: dict[tuple, list[str]] = {}
    for f in files:
        path = unquote(f["path"])
        full = path if "://" in path or path.startswith("/") else f"{str(table_path).rstrip('/')}/{path}"
        key = tuple((p, (f.get("partitionValues") or {}).get(p)) for p in parts)
        groups.setdefault(key, []).append(full)
    out = empty
    for key, paths in groups.items():
        df = spark.read.schema(data_schema).parquet(*paths)
        for name, value in key:
            df = df.withColumn(name, F.lit(value).cast(schema[name].dataType))
        out = out.unionByName(df.select(*schema.fieldNames()))
    return out


def _inputs(spark: SparkSession, settings: Settings, spec: AssetSpec, version: Version,
            batch_id: int) -> tuple[dict[str, DataFrame], int] | str:
    """Batch ``batch_id``'s input per upstream asset (with ``_row``, ``_event_id``, ``_json``) and
    the late-events watermark, or why it cannot be rebuilt."""
    from kappa.streaming.provenance import upstream_table_ids

    if batch_id == 0:
        return "the first batch's start is not recorded"
    wm = late_watermark_ms(version.checkpoint_path, batch_id, settings)
    prev, this = (_offsets_entry(version.checkpoint_path, b, settings) for b in (batch_id - 1, batch_id))
    if wm is None or prev is None or this is None:
        return f"the offsets of batch {batch_id - 1} or {batch_id} are purged from the checkpoint"
    ids = upstream_table_ids(settings, version)
    catalog = catalog_of(settings)
    inputs: dict[str, DataFrame] = {}
    for before, after in zip(prev[1], this[1]):
        if "reservoirId" not in after:
            return "the query reads Kafka: only Delta sources are rebuilt"
        asset, n, path = ids.get(after["reservoirId"], (None, None, None))
        if asset is None:
            return f"the source table {after['reservoirId']} is no upstream version of {version.name}"
        files = batch_files(path, before, after, settings)
        if isinstance(files, str):
            return f"{asset} v{n}: {files}"
        df = read_files(spark, path, files)
        if isinstance(df, str):
            return f"{asset} v{n}: {df}"
        up = catalog[asset] if asset in catalog.assets else None
        id_col = kind_of(up).event_id(up) if up is not None else None
        id_col = id_col or ("event_id" if "event_id" in df.columns else None)
        cols = df.columns
        inputs[asset] = df.select(
            *cols,
            F.concat(F.lit(f"{asset}:"), F.monotonically_increasing_id().cast("string")).alias("_row"),
            (F.col(id_col).cast("string") if id_col else F.lit(None).cast("string")).alias("_event_id"),
            F.to_json(F.struct(*cols)).alias("_json"))
    return inputs, wm


def name_batch(spark: SparkSession, settings: Settings, spec: AssetSpec, version: Version,
               batch_id: int, dropped: int) -> LateBatch:
    """Name the rows batch ``batch_id`` of ``version`` dropped behind its watermark (``dropped``:
    Spark's count for it), see the module docstring. Raises nothing for a batch it cannot
    rebuild: the :class:`LateBatch` says why."""
    out = LateBatch(batch_id=batch_id, dropped=dropped)
    rule = kind_of(spec).dropped_rows
    if rule is None:
        out.why = f"the {kind_of(spec).name} kind names no dropped rows"
        return out
    try:
        return _name(spark, settings, spec, version, batch_id, out)
    except Exception as exc:  # naming must never stop a query: the drops are reported as not named
        _log.exception("%s batch %d: naming its late rows failed", version.name, batch_id)
        out.accounted, out.named = False, 0
        out.why = f"naming failed: {type(exc).__name__}: {str(exc)[:300]}"
        return out


def _name(spark: SparkSession, settings: Settings, spec: AssetSpec, version: Version, batch_id: int,
          out: LateBatch) -> LateBatch:
    rule = kind_of(spec).dropped_rows
    assert rule is not None
    dropped = out.dropped
    got = _inputs(spark, settings, spec, version, batch_id)
    if isinstance(got, str):
        out.why = got
        return out
    inputs, wm_ms = got
    frame = rule(spec, inputs, wm_ms)
    late = frame.rows.persist()
    try:
        counts = late.agg(F.countDistinct("_row").alias("rows"), F.countDistinct("_unit").alias("units")).first()
        rows, units = int(counts["rows"]), int(counts["units"])
        out.units_min = rows if frame.count == "rows" else units
        out.units_max = units if frame.count == "units" else rows
        out.accounted = out.units_min <= dropped <= out.units_max
        if not out.accounted:
            out.why = (f"Spark dropped {dropped} but the rebuilt batch has {out.units_min}..{out.units_max} "
                       f"({frame.count}) behind the watermark: not named")
            return out
        watermark = F.timestamp_millis(F.lit(wm_ms))
        named = late.groupBy("_row").agg(
            F.first("_event_id").alias("event_id"), F.min("event_time").alias("event_time"),
            F.first("_json").alias("_json"), F.concat_ws("; ", F.sort_array(F.collect_set("reason"))).alias("_why"))
        rows_out = named.select(
            F.lit(spec.name).alias("asset"), F.lit(version.version).cast("int").alias("version"),
            "event_id", "event_time", watermark.alias("watermark"),
            F.lit(None).cast("string").alias("topic"), F.lit(None).cast("int").alias("partition"),
            F.lit(None).cast("long").alias("offset"), F.lit(None).cast("timestamp").alias("kafka_timestamp"),
            F.lit(None).cast("binary").alias("key"), F.col("_json").cast("binary").alias("value"),
            F.current_timestamp().alias("arrived_at"),
            F.concat(F.lit(f"dropped by the {kind_of(spec).name} operator's watermark in micro-batch {batch_id}: "),
                     F.col("_why"), F.lit(" at or before "), watermark.cast("string")).alias("reason"))
        out.named = rows
        _append(spark, settings, spec, version, batch_id, rows_out, out)
    finally:
        late.unpersist()
    return out


def _append(spark: SparkSession, settings: Settings, spec: AssetSpec, version: Version, batch_id: int,
            rows: DataFrame, batch: LateBatch) -> None:
    from kappa.streaming.writers import ensure_late_events_table

    path = ensure_late_events_table(spark, settings)
    meta = json.dumps({"kappa": 1, "asset": spec.name, "version": version.version, "batch_id": batch_id,
                       "late": asdict(batch)}, separators=(",", ":"), sort_keys=True)
    # mergeSchema: a late-events table created before it had ``reason`` gets the column.
    (rows.write.format("delta").mode("append").option("mergeSchema", "true")
     .option("txnAppId", version.writer_id(LATE_SIDE)).option("txnVersion", batch_id)
     .option("userMetadata", meta).save(str(path)))


def name_dropped_rows(spark: SparkSession, settings: Settings, spec: AssetSpec, version: Version,
                      dropped: dict[int, int]) -> list[LateBatch]:
    """:func:`name_batch` for every batch of ``dropped`` (batch id -> Spark's count), in batch
    order (Delta's transaction ids only go up). [] for a kind without
    :attr:`~kappa.streaming.kinds.base.Kind.dropped_rows`."""
    if kind_of(spec).dropped_rows is None:
        return []
    out = []
    for batch_id in sorted(dropped):
        started = time.monotonic()
        result = name_batch(spark, settings, spec, version, batch_id, dropped[batch_id])
        if result.why:
            _log.warning("%s batch %d: %d rows dropped behind the watermark, not named: %s",
                         version.name, batch_id, result.dropped, result.why)
        else:
            _log.info("%s batch %d: %d rows dropped behind the watermark, %d input rows named in %.1f s",
                      version.name, batch_id, result.dropped, result.named, time.monotonic() - started)
        out.append(result)
    return out


class LateTally:
    """Spark's drops of one running query of ``spec``'s ``version`` and the batches named, folded in
    from its progress reports at every poll (``recentProgress`` keeps only the newest reports, so a
    caller folds them in often). The local runner's continuous runs and the Kubernetes driver
    (:mod:`kappa.runners.entrypoint`) both keep one per query.

    Example::

        tally = LateTally(spark, settings, spec, version)
        tally.fold([json.loads(p.json) for p in query.recentProgress])   # names new batches with drops
        registry.record(spec.name, version.version, "dropped", **tally.unreported())
    """

    def __init__(self, spark: SparkSession | None, settings: Settings, spec: AssetSpec, version: Version):
        self.spark, self.settings, self.spec, self.version = spark, settings, spec, version
        #: batch id -> rows its stateful operators dropped behind the watermark (0 included).
        self.dropped: dict[int, int] = {}
        #: The batches with drops that :func:`name_dropped_rows` handled (named, or not with why).
        self.named: list[LateBatch] = []
        self._reported: set[int] = set()

    def fold(self, progress: list[dict]) -> list[LateBatch]:
        """Fold in progress reports (``StreamingQueryProgress`` as JSON) and name every batch with
        drops not named yet; returns the batches named now."""
        for p in progress:
            if "batchId" in p:
                self.dropped[int(p["batchId"])] = sum(int(op.get("numRowsDroppedByWatermark", 0) or 0)
                                                      for op in p.get("stateOperators", []))
        done = {b.batch_id for b in self.named}
        new = {b: n for b, n in self.dropped.items() if n > 0 and b not in done}
        batches = name_dropped_rows(self.spark, self.settings, self.spec, self.version, new) if new else []
        self.named.extend(batches)
        return batches

    def totals(self) -> dict:
        """What a run records of all it saw (a ``stopped`` event): ``dropped_by_watermark``,
        ``batches`` (reports folded in) and :func:`summary` of the named batches."""
        return {"dropped_by_watermark": sum(self.dropped.values()), "batches": len(self.dropped),
                **summary(self.named)}

    def unreported(self) -> dict | None:
        """The same for the batches with drops not reported before (a ``dropped`` event of the
        Kubernetes driver, recorded while it runs), marking them reported; None when there is none."""
        new = {b: n for b, n in self.dropped.items() if n > 0 and b not in self._reported}
        if not new:
            return None
        self._reported |= set(new)
        return {"dropped_by_watermark": sum(new.values()), "batches": len(new),
                **summary([b for b in self.named if b.batch_id in new])}


def summary(batches: list[LateBatch]) -> dict:
    """What a run records of its named batches (``caught_up``/``stopped`` events): ``dropped_named``
    (Spark's drops in the batches whose rows were all named) and ``late_not_named`` (each other
    batch: id, drops, why)."""
    return {"dropped_named": sum(b.dropped for b in batches if b.accounted),
            "late_not_named": [{"batch_id": b.batch_id, "dropped": b.dropped, "why": b.why}
                               for b in batches if not b.accounted]}


def late_counts(settings: Settings, version: Version, names_itself: bool = False) -> dict:
    """A version's late rows without Spark: ``named`` (its rows in the late-events table, delta-rs),
    ``dropped`` (Spark's drops over its recorded runs and ``dropped`` events), ``not_named`` (drops of those runs that were
    not named: ``dropped`` - the recorded ``dropped_named``). ``names_itself``: a kind whose writer
    routes every row Spark's operator leaves out (``parse``: the copies its deduplication state
    drops go to the duplicate count or the late-events table; ``pattern``): nothing it drops is
    lost, so ``dropped`` and ``not_named`` are 0."""
    from kappa.delta.tables import count_of

    runs = [e["details"] for e in version.events if e["event"] in ("caught_up", "stopped", "dropped")]
    dropped = sum(int(d.get("dropped_by_watermark") or 0) for d in runs)
    named_drops = sum(int(d.get("dropped_named") or 0) for d in runs)
    try:
        named = count_of(str(late_events_path(settings)), version.asset, version.version, settings)
    except Exception:  # no late-events table yet
        named = 0
    if names_itself:
        return {"named": named, "dropped": 0, "not_named": 0}
    return {"named": named, "dropped": dropped, "not_named": max(0, dropped - named_drops)}
