"""``lookup``: a **stream–table join** (stream enrichment): every row of the source stream with
columns of changelog tables. Stateless: each micro-batch reads the tables' Delta snapshots (the
versions pinned by the asset's version) and left-joins the batch with them.

With ``as_of`` the table is an SCD2 history (:mod:`kappa.streaming.kinds.changelog`, ``mode:
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
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from kappa.config import Settings
from kappa.delta.registry import Version
from kappa.spec import AssetSpec, TransformModel
from kappa.spec.base import NAME, PLAIN, StrictModel, check_name
from kappa.streaming.kinds.base import Kind
from kappa.streaming.writers import Commit, MicroBatchWriter


class LookupTable(StrictModel):
    """One table of a stream–table join (``transform.lookup``): a changelog asset looked up by
    ``keys`` (stream column = table column of the same name), adding ``columns`` (table column ->
    output column; a list keeps the names).

    Without ``as_of`` the table is a current-state table (``changelog.mode: current``) and a row
    joins the table's state when its micro-batch runs: a replay may join other values than the first
    run did. With ``as_of`` (the stream's event-time column) the table is a history
    (``changelog.mode: history``, SCD2) and a row joins the version valid at its event time,
    ``valid_from <= as_of < valid_to`` (``valid_to`` null: still current), so a replay joins the
    same values whatever changed since: DDIA ch. 11, "Time-dependence of joins"."""

    asset: Annotated[str, PLAIN]
    keys: Annotated[list[str], NAME] = Field(min_length=1)
    as_of: Annotated[str | None, NAME] = None
    columns: Annotated[dict[str, str], NAME] = Field(min_length=1)

    @field_validator("columns", mode="before")
    @classmethod
    def _names(cls, v: object) -> object:
        return {c: c for c in v} if isinstance(v, list) else v

    @field_validator("columns")
    @classmethod
    def _snake_out(cls, v: dict[str, str]) -> dict[str, str]:
        for out in v.values():
            check_name(out)
        return v


class LookupTransform(TransformModel):
    """A stream–table join (DDIA ch. 11, "Stream-table join (stream enrichment)"): every row of the
    source stream with columns looked up in changelog tables, in order. A left join: a row whose
    key has no table row (at its event time, for ``as_of``) keeps nulls. Stateless, so no watermark:
    each micro-batch reads the tables' versions pinned by the asset's version
    (:class:`LookupWriter`). Output: every source column, then each table's
    ``columns`` (output names)."""

    kind = "lookup"

    tables: list[LookupTable] = Field(min_length=1)

    def check(self, spec: AssetSpec) -> None:
        """Output names once each; appended, never merged."""
        outs = [o for t in self.tables for o in t.columns.values()]
        if len(set(outs)) != len(outs):
            raise ValueError(f"transform.lookup.tables: output column names repeat: {outs}")
        if spec.sink.mode == "merge":
            raise ValueError("sink.mode: a lookup appends each row once; remove sink.mode")

    def check_catalog(self, spec: AssetSpec, assets: dict[str, AssetSpec]) -> None:
        """Each table keeps a source table's history (with ``as_of``) or current state (without)
        and has the named columns; over an upstream whose columns are declared, the keys and
        ``as_of`` are among them (``as_of`` a timestamp) and no output column repeats one."""
        up = assets[spec.source.asset] if spec.source.asset else None
        stream = up.transform.model.row_columns() if up is not None else None
        for i, t in enumerate(self.tables):
            where = f"transform.lookup.tables.{i}"
            table = assets[t.asset]
            want = "history" if t.as_of else "current"
            if table.transform.model.table_state() != want:
                raise ValueError(f"{where}.asset: {t.asset!r} must be a changelog asset with mode {want!r}"
                                 + (" (as_of looks up the version valid at the event time: an SCD2 history)" if t.as_of
                                    else " (without as_of a row joins the current state)") + f" ({table.where})")
            for c in [*t.keys, *t.columns]:
                if c not in (table.transform.model.row_columns() or {}):
                    raise ValueError(f"{where}: column {c!r} is not in {t.asset}'s schema ({table.where})")
            if up is None or stream is None:
                continue
            for c in [*t.keys, *([t.as_of] if t.as_of else [])]:
                if c not in stream:
                    raise ValueError(f"{where}: column {c!r} is not in {up.name}'s schema ({up.where})")
            if t.as_of and stream[t.as_of].type != "timestamp":
                raise ValueError(f"{where}.as_of: {t.as_of!r} must be a timestamp column of {up.name}")
            clash = [o for o in t.columns.values() if o in stream]
            if clash:
                raise ValueError(f"{where}.columns: output column(s) {clash} are already columns of {up.name}; "
                                 "rename them (table column: output column)")

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """``event_id``: one output row per input row."""
        return ["event_id"]

    def upstream(self, spec: AssetSpec) -> list[str]:
        """The tables' assets."""
        return [t.asset for t in self.tables]


class LookupWriter(MicroBatchWriter):
    """foreachBatch body of a ``lookup`` asset (see the module docstring)."""

    def __init__(self, spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings):
        super().__init__(spec, version, settings)
        self.tables = [(t, version.upstream_table(t.asset)) for t in LookupTransform.of(spec).tables]

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


def start(spark: SparkSession, spec: AssetSpec, version: Version, settings: Settings,
          source: DataFrame) -> DataStreamWriter:
    """The ``lookup`` query: the source stream into :class:`LookupWriter`."""
    return source.writeStream.foreachBatch(LookupWriter(spark, spec, version, settings))


KIND = Kind(model=LookupTransform, start=start)
