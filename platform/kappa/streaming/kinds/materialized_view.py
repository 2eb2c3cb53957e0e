"""``materialized_view``: a **table–table join** (materialized view maintenance): ``sql`` over
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
from typing import Annotated, Literal

from pydantic import Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, SpecError, TransformModel
from kappa.spec.base import NAME, PLAIN, query
from kappa.streaming.kinds.base import Kind
from kappa.streaming.writers import Commit, MicroBatchWriter, ensure_table


class MaterializedViewTransform(TransformModel):
    """A table–table join (DDIA ch. 11, "Table-table join (materialized view maintenance)"): ``sql``
    over current-state changelog assets named in ``tables`` (each readable in the SQL by its asset
    name), kept equal to the query's result as any of them changes. Each micro-batch of the tables'
    Delta change data feed recomputes the query over their current state and MERGEs the result on
    ``key`` (update changed rows, insert new ones, delete keys the result lost)
    (:class:`ViewWriter`). Meant for dimension-sized tables: a change costs one
    evaluation of ``sql`` over them. Output: the query's columns."""

    kind = "materialized_view"

    tables: Annotated[list[str], PLAIN] = Field(min_length=1)
    key: Annotated[list[str], NAME] = Field(min_length=1)
    #: Reads each of ``tables`` as a view of that name (:meth:`ViewWriter.result`).
    sql: Annotated[str, query(lambda model: tuple(model.tables))] = Field(min_length=1)

    def check(self, spec: AssetSpec) -> None:
        """``source.asset`` is one of ``tables``; no watermark."""
        if spec.source.asset not in self.tables:
            raise ValueError("source.asset must be one of transform.materialized_view.tables")
        if spec.watermark is not None:
            raise ValueError("watermark: a materialized view follows its tables' current state, not event time")

    def check_catalog(self, spec: AssetSpec, assets: dict[str, AssetSpec]) -> None:
        """Each table keeps a source table's current state."""
        for name in self.tables:
            if assets[name].transform.model.table_state() != "current":
                raise ValueError(f"transform.materialized_view.tables: {name!r} is not a current-state "
                                 f"changelog asset (transform.changelog.mode: current) ({assets[name].where})")

    def sink_mode(self, spec: AssetSpec) -> Literal["append", "merge"]:
        """``merge``: the view's rows replaced by key."""
        return "merge"

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """``key``."""
        return list(self.key)

    def upstream(self, spec: AssetSpec) -> list[str]:
        """The tables."""
        return list(self.tables)


#: ``maxFilesPerTrigger`` of a view's change data feeds: no limit in practice (Delta's own cap when
#: only ``maxBytesPerTrigger`` is set, Int.MaxValue - 8), so a micro-batch never stops inside a
#: Delta version of a table (Delta's default, 1000 files, may stop inside a version without change
#: data files), and always ends on a version boundary the view can read the table at.
WHOLE_VERSIONS = 2**31 - 9


def view_changes(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings) -> DataFrame:
    """The input stream of a materialized view: the change data feeds of its tables (pinned
    versions) from their first Delta version, reduced to the table's name and the change's Delta
    version (``_table``, ``_commit_version``): what changed is re-read from the tables themselves."""
    mv = MaterializedViewTransform.of(spec)
    feeds = [spark.readStream.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
             .option("maxFilesPerTrigger", WHOLE_VERSIONS)
             .load(version.upstream_table(name))
             .select(F.lit(name).alias("_table"), F.col("_commit_version")) for name in mv.tables]
    return reduce(DataFrame.unionByName, feeds)


class ViewWriter(MicroBatchWriter):
    """foreachBatch body of a ``materialized_view`` asset (see the module docstring)."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        mv = MaterializedViewTransform.of(spec)
        self.mv = mv
        self.paths = {name: version.upstream_table(name) for name in mv.tables}
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


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``materialized_view`` query: the tables' change feeds (not ``source``) into :class:`ViewWriter`."""
    return view_changes(spark, spec, version, settings).writeStream.foreachBatch(
        ViewWriter(spark, spec, version, settings))


KIND = Kind(model=MaterializedViewTransform, start=start)
