"""What a transform kind declares (:class:`Kind`): everything the rest of the platform asks of it.

The runners, the gate, forget, promotion and Dagster never compare a kind's name; they read these
fields (Spark's ``DataSourceRegister`` lookup is the model: a name maps to an object that says what
it is and builds its part of the query).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from kappa.config import Settings
    from kappa.delta.registry import Version
    from kappa.spec import AssetSpec, FieldSpec, TransformModel

#: Builds the ``DataStreamWriter`` of one asset version from its source stream (Kafka records or
#: the upstream version's Delta table as a stream): the kind's frame and its sink, before the query
#: name, checkpoint and trigger, which :func:`kappa.streaming.query.start_query` adds for every kind.
StartWriter = Callable[["SparkSession", "AssetSpec", "Version", "Settings", "DataFrame"], "DataStreamWriter"]

#: How ``kappa forget`` finds a key's rows in a version of a table that reads the topic directly:
#: ``record_key`` (the record's ``topic`` and ``key`` columns: bronze), ``event_ids`` (the event ids
#: the key's records carry, in the column :attr:`Kind.event_id` names: silver), ``key_columns``
#: (the key's column values: a changelog's tables). Tables derived from those are matched by event
#: ids and key columns whatever their kind (:mod:`kappa.lifecycle.forget`).
ForgetRule = Literal["record_key", "event_ids", "key_columns"]

#: The kind-specific checks of the gate (:mod:`kappa.quality.gate`), besides the asset's
#: expectations and the shadow diff: ``quarantine_rate`` (bad records / records read),
#: ``schema_drift`` (fields the records carried that the declaration lacks) and ``late_rows``
#: (rows a stateful operator's watermark dropped).
GateCheck = Literal["quarantine_rate", "schema_drift", "late_rows"]

#: How Spark's ``numRowsDroppedByWatermark`` counts what a stateful operator drops, so a named set of
#: input rows can be compared with it: ``rows`` (each input row: a stream-stream join's sides, a
#: ``transformWithState`` processor), ``units`` (each distinct ``_unit``: a window aggregation drops
#: the rows of partial aggregation after the shuffle, one per group and window), ``units_in_partition``
#: (each distinct ``_unit`` per input partition: a session window's partial aggregation runs before
#: the shuffle, so Spark counts between the distinct units and the rows).
LateCount = Literal["rows", "units", "units_in_partition"]


@dataclass(frozen=True)
class LateFrame:
    """What a stateful operator's watermark drops from one micro-batch's input (:data:`DroppedRows`).

    ``rows``: one row per (input row, counting unit) the operator drops, with the input's ``_row``
    (row id), ``_event_id`` and ``_json`` (the row as JSON) carried through, plus ``event_time``
    (timestamp: the row's watermark column), ``reason`` (string: what was behind the watermark)
    and ``_unit`` (string: what Spark counts, see :data:`LateCount`); ``count``: how Spark counts."""

    rows: "DataFrame"
    count: LateCount


#: Given an asset, its micro-batch's input per upstream asset (a batch DataFrame of the upstream
#: table's columns plus ``_row``, ``_event_id``, ``_json``) and the watermark Spark drops late rows
#: by (epoch ms), the rows the kind's stateful operator drops (:class:`LateFrame`); applied by
#: :mod:`kappa.streaming.late`, which rebuilds the input from the checkpoint.
DroppedRows = Callable[["AssetSpec", "dict[str, DataFrame]", int], LateFrame]


#: Given a batch DataFrame of Kafka records (:data:`kappa.streaming.records.KAFKA_COLUMNS`) and an
#: asset, the records parsed as the asset's query parses them: the same columns plus ``r`` (a struct
#: of the declared columns), ``reason`` (string, null for a good record) and ``_rescued`` (schema
#: drift as JSON, null for none).
ParseRecords = Callable[["DataFrame", "AssetSpec"], "DataFrame"]


def _never(spec: "AssetSpec") -> bool:
    return False


def _none(spec: "AssetSpec") -> None:
    return None


def _always(spec: "AssetSpec") -> bool:
    return True


@dataclass(frozen=True)
class Kind:
    """One transform kind (``transform: {<name>: …}`` in an asset YAML).

    ``model``: the declaration's model, declared in the same module (:attr:`name` and
    :attr:`reads_kafka` are its). ``start`` builds the query (:data:`StartWriter`). ``stateful``: whether the declaration's query keeps state in the state
    store, bounded by a watermark, dropping (and counting) rows behind it: windows, joins, sliding
    and pattern always; ``parse`` when it declares a watermark (its deduplication state, keyed by
    event id). What the state holds is data: forget replays a stateful asset and deletes its old
    checkpoints (:mod:`kappa.lifecycle.forget`). ``quarantines``: bad records go to the quarantine table.
    ``keeps_late_rows``: rows behind the watermark are written to the late-events table (named,
    not only counted). ``gate_checks``: its checks of :data:`GateCheck`. ``forget``: how forget
    deletes a key's rows where the kind reads the topic (:data:`ForgetRule`; None: it never reads a
    topic). ``event_id``: the event-id column of its rows (None: none). ``full_log``: whether a
    replay needs every record ever written (a compacted topic is not enough: an SCD2 history).
    ``declared_columns``: the output columns the declaration fixes (name -> field), for catalogs
    and the Dagster UI (None: known only once the query runs). ``dropped_rows``: the rows Spark's
    watermark drops from a micro-batch's input (:data:`DroppedRows`), for kinds whose late rows
    Spark drops and Kappa names afterwards from the checkpoint (:mod:`kappa.streaming.late`);
    None: Spark drops none, or the kind names its late rows itself (``parse``, ``pattern``).
    ``parse_records``: how its query parses Kafka records (:data:`ParseRecords`), for a batch over
    some of them (``kappa declarations evolve``'s sample, the bench); None: it does not parse them.
    ``no_data_batches``: whether the
    query needs Spark's no-data micro-batches (``spark.sql.streaming.noDataMicroBatches.enabled``):
    a batch without input, run when the watermark has moved, so an operator that emits on the
    watermark (an append-mode window, an outer join's unmatched rows, an event-time timer) emits
    without waiting for more input. False where the watermark only evicts state: each such batch is
    a job and, for a foreachBatch writer, a call, for nothing (issue 19). Spark's default (True)
    unless a kind says otherwise."""

    model: "type[TransformModel]"
    start: StartWriter
    stateful: Callable[["AssetSpec"], bool] = _never
    quarantines: bool = False
    keeps_late_rows: bool = False
    gate_checks: tuple[GateCheck, ...] = ()
    forget: ForgetRule | None = None
    event_id: Callable[["AssetSpec"], str | None] = _none
    full_log: Callable[["AssetSpec"], bool] = _never
    declared_columns: Callable[["AssetSpec"], "dict[str, FieldSpec] | None"] = _none
    dropped_rows: DroppedRows | None = None
    parse_records: ParseRecords | None = None
    no_data_batches: Callable[["AssetSpec"], bool] = _always

    @property
    def name(self) -> str:
        """The kind's key under ``transform:`` (its model's ``kind``)."""
        return self.model.kind

    @property
    def reads_kafka(self) -> bool:
        """Whether its source is a topic (else an upstream asset): its model's ``reads_kafka``."""
        return self.model.reads_kafka
