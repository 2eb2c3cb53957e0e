"""Joins with tables maintained from changelogs (DDIA ch. 11, "Stream joins"):

* ``lookup`` — a **stream–table join** (stream enrichment): every row of the source stream with
  columns of changelog tables. Stateless: each micro-batch reads the tables' Delta snapshots (the
  versions pinned by the asset's version) and left-joins the batch with them.

  With ``as_of`` the table is an SCD2 history (:mod:`kappa.streaming.changelog`, ``mode:
  history``) and a row joins the version valid at its event time, ``valid_from <= t < valid_to``
  (``valid_to`` null: current). The versions are half-open and do not overlap, so a row joins at
  most one. The result depends on the event, not on when it is processed: a replay after the table
  changed gives the same rows (the seed's "time-dependence of joins"). One race remains, as in any
  stream–table join: an event whose time is *after* a change that has not yet reached the history
  joins the version before it.

  Without ``as_of`` the row joins the current-state table as it is when the micro-batch runs (a
  replay may join newer values).

  Input: the source asset's rows. Output: those columns, then each table's ``columns`` (renamed);
  nulls where no table row matches. Written by appending each micro-batch with the version's
  transaction id (``txnAppId`` = writer id, ``txnVersion`` = batch id), so a re-run batch is skipped.

* ``materialized_view`` — a **table–table join** (materialized view maintenance): ``sql`` over
  current-state tables, registered as temporary views named after their assets. The query's input
  is the union of the tables' Delta change data feeds (Delta docs, "Change data feed": each
  insert, update pre/post image and delete of a MERGE), each read a whole Delta version at a time
  (no file limit per micro-batch; Delta admits a commit with change data files whole anyway); a
  micro-batch with any change recomputes ``sql`` over each table **as of the Delta version its
  feed has read through** in this batch (the batch's write-ahead log entry, the same reading its
  provenance records: :func:`kappa.streaming.provenance.read_through`), and MERGEs the result into
  the view's table on ``key``: changed rows are updated, new keys inserted, keys the result no
  longer has deleted, unchanged rows left alone (no new files for them). So each view commit is
  exactly ``sql`` over the tables at the versions its provenance names, complete, and the cut
  (:mod:`kappa.lifecycle.cut`) can pin the view with those versions of the tables; once the
  changelogs settle, the view equals ``sql`` over the tables. The MERGE carries the version's
  transaction id.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappa.config import Settings
from kappa.delta.registry import Registry, Version
from kappa.spec import AssetSpec, SpecError
from kappa.streaming.writers import Commit, MicroBatchWriter, ensure_table


class LookupWriter(MicroBatchWriter):
    """foreachBatch body of a ``lookup`` asset (see the module docstring)."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        assert spec.transform.lookup is not None
        registry = Registry(settings)
        self.tables = [(t, registry.upstream_of(version, t.asset).table_path) for t in spec.transform.lookup.tables]

    def enrich(self, batch: DataFrame) -> DataFrame:
        """``batch`` left-joined with every table (one row out per row in)."""
        spark = batch.sparkSession
        out = batch
        for i, (t, path) in enumerate(self.tables):
            table = spark.read.format("delta").load(path)
            keys = [F.col(k).alias(f"_lk{i}_{k}") for k in t.keys]
            window = [F.col("valid_from").alias(f"_lk{i}_from"), F.col("valid_to").alias(f"_lk{i}_to")] if t.as_of else []
            right = table.select(*keys, *window, *[F.col(c).alias(o) for c, o in t.columns.items()])
            cond = [out[k] == F.col(f"_lk{i}_{k}") for k in t.keys]
            if t.as_of:
                at = out[t.as_of]
                cond += [F.col(f"_lk{i}_from") <= at, F.col(f"_lk{i}_to").isNull() | (at < F.col(f"_lk{i}_to"))]
            helper = [f"_lk{i}_{k}" for k in t.keys] + ([f"_lk{i}_from", f"_lk{i}_to"] if t.as_of else [])
            out = out.join(F.broadcast(right), cond, "left").drop(*helper)
        return out

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        return [self.append_commit(self.enrich(batch), batch_id)]


#: ``maxFilesPerTrigger`` of a view's change data feeds: no limit in practice (Delta's own cap when
#: only ``maxBytesPerTrigger`` is set, Int.MaxValue - 8), so a micro-batch never stops inside a
#: Delta version of a table (Delta's default, 1000 files, may stop inside a version without change
#: data files), and always ends on a version boundary the view can read the table at.
WHOLE_VERSIONS = 2**31 - 9


def view_changes(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings) -> DataFrame:
    """The input stream of a materialized view: the change data feeds of its tables (pinned
    versions) from their first Delta version, reduced to the table's name and the change's Delta
    version (``_table``, ``_commit_version``): what changed is re-read from the tables themselves."""
    mv = spec.transform.materialized_view
    assert mv is not None
    registry = Registry(settings)
    feeds = [spark.readStream.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
             .option("maxFilesPerTrigger", WHOLE_VERSIONS)
             .load(registry.upstream_of(version, name).table_path)
             .select(F.lit(name).alias("_table"), F.col("_commit_version")) for name in mv.tables]
    return reduce(DataFrame.unionByName, feeds)


class ViewWriter(MicroBatchWriter):
    """foreachBatch body of a ``materialized_view`` asset (see the module docstring)."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        mv = spec.transform.materialized_view
        assert mv is not None
        self.mv = mv
        registry = Registry(settings)
        self.paths = {name: registry.upstream_of(version, name).table_path for name in mv.tables}
        schema = self.result(spark.newSession()).schema  # a new session: the views stay there
        missing = [k for k in mv.key if k not in schema.names]
        if missing:
            raise SpecError(f"{spec.where}: transform.materialized_view.key: {missing} not among the columns "
                            f"of its sql ({schema.names})")
        ensure_table(spark, version.table_path, schema)

    #: The tables are read as change data feeds: their provenance is positioned against the
    #: versions' change data files (:func:`kappa.streaming.provenance.read_through`).
    change_feed = True

    def result(self, spark: SparkSession, versions: dict[str, int] | None = None) -> DataFrame:
        """``sql`` over the tables (each a temporary view named after its asset, in ``spark``: the
        micro-batch's own session, so the names do not leak), each as of its Delta version in
        ``versions`` (table asset -> Delta version), its latest snapshot when not there."""
        for name, path in self.paths.items():
            reader = spark.read.format("delta")
            if (versions or {}).get(name) is not None:
                reader = reader.option("versionAsOf", versions[name])
            reader.load(path).createOrReplaceTempView(name)
        return spark.sql(self.mv.sql)

    def read_versions(self, batch_id: int) -> dict[str, int]:
        """table asset -> the Delta version micro-batch ``batch_id`` evaluates it at: the last
        version its feed has read completely (:meth:`provenance_sources`; one before a version it
        stopped inside, which the feeds' unlimited admission does not do), never below 0."""
        out = {}
        for src in self.provenance_sources(batch_id):
            d = src.get("delta")
            if d and d.get("asset") in self.paths and d.get("table_version") is not None:
                out[d["asset"]] = max(0, d["table_version"] - (0 if d["complete"] else 1))
        return out

    def commits(self, batch: DataFrame, batch_id: int) -> list[Commit]:
        from delta.tables import DeltaTable

        if not batch.limit(1).count():
            return []
        spark = batch.sparkSession
        versions = self.read_versions(batch_id)

        def merge() -> None:
            result = self.result(spark, versions)  # the tables as of what the batch's feeds read
            keys = self.mv.key
            values = [c for c in result.columns if c not in keys]
            on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
            changed = " OR ".join(f"NOT (t.`{c}` <=> s.`{c}`)" for c in values) or "false"
            (DeltaTable.forPath(spark, self.version.table_path).alias("t")
             .merge(result.alias("s"), on)
             .whenMatchedUpdateAll(condition=changed)
             .whenNotMatchedInsertAll()
             .whenNotMatchedBySourceDelete()
             .execute())

        return [self.dml_commit(merge, batch_id, spark)]
