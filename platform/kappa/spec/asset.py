"""One streaming asset's declaration (:class:`AssetSpec`): source, transform, watermark, trigger,
sink, checks and resources, validated as a whole when loaded."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kappa.spec.base import MEMORY_RE, StrictModel, check_interval, check_name
from kappa.spec.transforms import Source, Transform, Watermark

class Trigger(StrictModel):
    """Trigger of a long-running (``--continuous``) query; ``--until-caught-up`` uses available-now."""

    processing_time: str = "10 seconds"

    _v = field_validator("processing_time")(classmethod(lambda cls, v: check_interval(v)))


class Sink(StrictModel):
    """``append`` (each micro-batch appended once, :class:`kappa.streaming.writers.AppendWriter`) or
    ``merge`` (an upsert on ``keys``, :class:`kappa.streaming.writers.UpsertWriter`); ``partition_by``:
    the table's partition columns."""

    mode: Literal["append", "merge"] | None = None
    keys: list[str] = Field(default_factory=list)
    partition_by: list[str] = Field(default_factory=list)


class Resources(StrictModel):
    """Driver or executor size. ``memory`` is a JVM heap size string (``2g``, ``512m``); ``cores``
    are whole CPUs requested from Kubernetes; ``core_limit`` a Kubernetes CPU quantity."""

    cores: int = Field(1, ge=1)
    core_limit: str | None = None
    memory: str = "2g"
    memory_overhead: str | None = None

    @field_validator("memory", "memory_overhead")
    @classmethod
    def _jvm_size(cls, v: str | None) -> str | None:
        if v is not None and not MEMORY_RE.match(v):
            raise ValueError(f"{v!r} is not a JVM size like '512m' or '2g'")
        return v


#: The kinds whose writer applies per-row expectations (:meth:`kappa.streaming.writers.MicroBatchWriter.expect_rows`).
ROW_EXPECTATION_KINDS = ("parse", "raw", "sql", "python", "window", "sliding", "join")


class RowExpectation(StrictModel):
    """One per-row expectation of an asset YAML's ``row_expectations``: a SQL boolean expression
    over the rows the asset writes, evaluated on every row inside the streaming query (a row whose
    expression is not true, false or NULL, violates it), counted per micro-batch::

        row_expectations:
          - name: known_distance
            expr: distance > 0
            on_violation: drop   # warn (keep, count) | drop (to quarantine) | fail (stop the query)
            max_rate: 0.01       # the gate blocks promotion above this share of rows (optional)
    """

    name: str
    expr: str
    on_violation: Literal["warn", "drop", "fail"] = "warn"
    max_rate: float | None = Field(None, ge=0, le=1)

    _name = field_validator("name")(check_name)


class Freshness(StrictModel):
    """The optional ``freshness`` block of an asset YAML: how far behind the log the asset may fall
    before an alert (:mod:`kappa.quality.freshness`); at least one bound::

        freshness:
          max_lag_records: 10000   # records behind the log end, through its upstreams
          max_lag_seconds: 300     # seconds of event time behind the log end
    """

    max_lag_records: int | None = Field(None, ge=0)
    max_lag_seconds: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_bound(self) -> "Freshness":
        if self.max_lag_records is None and self.max_lag_seconds is None:
            raise ValueError("freshness needs max_lag_records, max_lag_seconds or both")
        return self


class AssetResources(StrictModel):
    """The optional ``resources`` block of an asset YAML::

        resources:
          driver: {cores: 1, memory: 2g}
          executor: {cores: 2, memory: 4g}
          executor_instances: 2
    """

    driver: Resources | None = None
    executor: Resources | None = None
    executor_instances: int | None = Field(None, ge=1)


class AssetSpec(StrictModel):
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
    #: How far behind the log the asset may fall (:class:`Freshness`); None = no freshness check.
    freshness: Freshness | None = None
    #: Rules on each row the asset writes (:class:`RowExpectation`), evaluated in the query.
    row_expectations: list[RowExpectation] = Field(default_factory=list)

    # Where the spec came from (not part of the YAML): the file, or for a declaration recorded in
    # the warehouse (:mod:`kappa.delta.declarations`) its label ``declarations:<name>``; and the
    # exact YAML text it was parsed from, which every version records.
    path: Path | None = Field(None, exclude=True)
    origin: str | None = Field(None, exclude=True)
    text: str | None = Field(None, exclude=True)

    _name = field_validator("name")(check_name)

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
        if self.row_expectations:
            names = [r.name for r in self.row_expectations]
            if len(set(names)) != len(names):
                raise ValueError(f"row_expectations: names must be unique, got {names}")
            if kind not in ROW_EXPECTATION_KINDS:
                raise ValueError(f"row_expectations: a '{kind}' asset's writer does not evaluate them "
                                 f"(kinds that do: {', '.join(ROW_EXPECTATION_KINDS)})")
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
        """``append`` or ``merge``: ``sink.mode`` when declared, else by kind. ``merge`` for
        tumbling and hopping windows (an open window's row is updated by MERGE on
        :attr:`merge_keys`), parse, changelog and materialized views (rows replaced by key);
        ``append`` for session windows (emitted once closed) and every other kind. For a frame kind
        it picks the sink (:func:`kappa.streaming.writers.frame_sink`); the parse, changelog,
        lookup, pattern and materialized-view kinds write through their own writers."""
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
        if self.transform.raw is not None:
            return ["topic", "partition", "offset"]  # a Kafka record's coordinates
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
        """The Kafka topics the asset reads (``source.kafka.topics``, in declared order); ``[]``
        for an asset that reads an upstream asset's table."""
        return list(self.source.kafka.topics) if self.source.kafka else []

    @property
    def where(self) -> str:
        """Where the declaration came from, as error messages name it: the file
        (``assets/flights/flights.yaml``), ``declarations:<name>`` for one recorded in the
        warehouse, or ``<name>`` for a spec built in code."""
        if self.origin:
            return self.origin
        return str(self.path) if self.path is not None else self.name

    def fingerprint(self) -> str:
        """A hash of the logic (the YAML content plus a python/sql transform file's text): a version
        records it, so a changed declaration can be told from an unchanged one."""
        # Checks, thresholds, the trigger interval and documentation are not logic: changing them
        # must not force a replay.
        doc = self.model_dump(mode="json", by_alias=True, exclude={
            "description", "owner", "group", "expectations", "max_quarantine_rate", "shadow_diff_blocking", "trigger",
            "resources", "freshness",
        })
        blob = json.dumps(doc, sort_keys=True)
        if self.transform.python and self.path is not None:
            module = self.transform.python.split(":")[0]
            blob += (self.path.parent / module).read_text()
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


