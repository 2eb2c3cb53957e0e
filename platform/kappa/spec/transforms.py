"""The transform models of an asset declaration (``transform:``): one model per kind, exactly one
set per asset (:class:`Transform`). Field semantics and their Spark sources are documented on each
model."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from kappa.spec.base import FieldType, StrictModel, check_interval, check_name, interval_seconds, schema_shorthand

class FieldSpec(StrictModel):
    """One declared column of a ``schema:`` mapping (parse and changelog transforms): its type (one
    of :data:`~kappa.spec.base.FieldType`, mapped to Spark's by
    :data:`kappa.streaming.parse.SPARK_TYPES`), whether a record lacking it is bad input
    (``required``: quarantined, not a null), and a description shown in Dagster's column schema.
    ``year: int`` is shorthand for ``year: {type: int}``."""

    type: FieldType
    required: bool = False
    description: str | None = None


class KafkaSource(StrictModel):
    """Read one or more topics from the earliest retained offset (every version replays the log)."""

    topics: list[str] = Field(min_length=1)
    #: Upper bound of records per micro-batch (Spark's ``maxOffsetsPerTrigger``); None = no bound.
    max_offsets_per_trigger: int | None = Field(None, gt=0)


class Source(StrictModel):
    """Where an asset reads from, exactly one of: ``kafka`` (topics of the log, from the earliest
    retained offset) or ``asset`` (the Delta table of the upstream asset's version this version
    pins, read as a stream). Declaring both or neither is refused (pydantic's
    ``ValidationError``, which :func:`~kappa.spec.load_asset` reports as a ``SpecError`` naming the
    file and field)."""

    kafka: KafkaSource | None = None
    asset: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "Source":
        if (self.kafka is None) == (self.asset is None):
            raise ValueError("declare exactly one of 'kafka' or 'asset'")
        return self


class ParseTransform(StrictModel):
    """Silver from a topic of JSON events: each record value parsed with ``schema`` (column ->
    :class:`FieldSpec`), one row per ``event_id``. ``event_id`` and ``event_time`` must be declared,
    the latter as a ``timestamp``. A bad record (empty, over ``max_value_bytes`` bytes, not UTF-8,
    not a JSON object, a required field of the wrong type or missing, an event time more than
    ``max_future`` ahead) goes to the quarantine table with its reason (:mod:`kappa.streaming.parse`);
    undeclared fields and optional fields of the wrong type are rescued (schema drift).
    Output: the declared columns, typed (:func:`kappa.streaming.parse.row_schema`)."""

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
        return check_interval(v)

    _shorthand = field_validator("schema_", mode="before")(staticmethod(schema_shorthand))

    @property
    def fields(self) -> dict[str, FieldSpec]:
        """The declared columns, column name -> :class:`FieldSpec`, in declaration order (a copy of
        ``schema``, whose Python name is ``schema_``: pydantic's ``BaseModel`` owns ``schema``)."""
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


class Watermark(StrictModel):
    """``withWatermark(column, delay)``: rows older than max(event time) - delay may be dropped."""

    column: str
    delay: str

    _v = field_validator("delay")(classmethod(lambda cls, v: check_interval(v)))


class WindowTransform(StrictModel):
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
        return None if v is None else check_interval(v)

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


class JoinTimeRange(StrictModel):
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
        return check_interval(v)


class JoinRight(StrictModel):
    """The right side of a stream–stream join: an upstream asset, its watermark, the columns it adds."""

    asset: str
    watermark: Watermark | None = None
    columns: list[str] = Field(min_length=1)


class JoinTransform(StrictModel):
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


class SlidingTransform(StrictModel):
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
        return check_interval(v)

    @property
    def out_columns(self) -> list[str]:
        """The output table's columns, in order: ``columns`` (default ``event_id``, the group-by
        columns, ``time_column``) then the count column ``output``."""
        cols = self.columns or ["event_id", *self.group_by, self.time_column]
        return [*cols, self.output]


#: Transform kinds, one key each in an asset's ``transform:``.
TRANSFORM_KINDS = ("raw", "parse", "window", "join", "sliding", "pattern", "sql", "python", "changelog", "lookup",
                   "materialized_view")


class ChangelogTransform(StrictModel):
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

    _shorthand = field_validator("schema_", mode="before")(staticmethod(schema_shorthand))

    @property
    def fields(self) -> dict[str, FieldSpec]:
        """The declared row columns, column name -> :class:`FieldSpec`, in declaration order (a copy
        of ``schema``; the key columns are among them)."""
        return dict(self.schema_)

    @model_validator(mode="after")
    def _key_declared(self) -> "ChangelogTransform":
        for k in self.key:
            if k not in self.schema_:
                raise ValueError(f"key column {k!r} is not in schema")
        return self


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
            check_name(out)
        return v


class LookupTransform(StrictModel):
    """A stream–table join (DDIA ch. 11, "Stream-table join (stream enrichment)"): every row of the
    source stream with columns looked up in changelog tables, in order. A left join: a row whose
    key has no table row (at its event time, for ``as_of``) keeps nulls. Stateless, so no watermark:
    each micro-batch reads the tables' versions pinned by the asset's version
    (:mod:`kappa.streaming.table_joins`). Output: every source column, then each table's
    ``columns`` (output names)."""

    tables: list[LookupTable] = Field(min_length=1)


class MaterializedViewTransform(StrictModel):
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


class PatternStep(StrictModel):
    """One step of a pattern: ``count`` consecutive events (in the pattern's contiguity) that each
    satisfy the SQL predicate ``when`` over the input's columns."""

    name: str
    when: str = Field(min_length=1)
    count: int = Field(1, ge=1, le=100)

    _n = field_validator("name")(check_name)


#: Columns every pattern's output has, besides its ``collect`` arrays.
PATTERN_COLUMNS = ("first_event_time", "last_event_time", "event_ids")


class PatternTransform(StrictModel):
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

    _w = field_validator("within")(classmethod(lambda cls, v: check_interval(v)))

    @model_validator(mode="after")
    def _shape(self) -> "PatternTransform":
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"step names must be unique, got {names}")
        taken = {self.key, *PATTERN_COLUMNS}
        for out in self.collect:
            check_name(out)
            if out in taken:
                raise ValueError(f"collect: output column {out!r} collides with {sorted(taken)}")
        return self

    @property
    def input_columns(self) -> list[str]:
        """Every input column the pattern names (a step's SQL predicate aside)."""
        cols = [self.key, self.time_column, *self.order_by, self.event_id, *self.collect.values()]
        return list(dict.fromkeys(cols))


class Transform(StrictModel):
    """An asset's ``transform:``: exactly one of the :data:`TRANSFORM_KINDS` keys. ``raw`` is an
    empty mapping (``raw: {}``), ``sql`` a ``SELECT … FROM input`` over the source stream, ``python``
    a ``module.py:function`` beside the asset's YAML; the others are the models above. None or two
    of them is refused (a ``ValidationError``; a ``SpecError`` naming the file from
    :func:`~kappa.spec.load_asset`). The kind's query builder is found by :attr:`kind`
    (:func:`kappa.streaming.kinds.kind_of`)."""

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
        """The one kind declared: the :data:`TRANSFORM_KINDS` key that is set (e.g. ``"parse"``)."""
        return next(k for k in TRANSFORM_KINDS if getattr(self, k) is not None)


