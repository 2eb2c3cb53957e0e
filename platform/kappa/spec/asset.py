"""One streaming asset's declaration (:class:`AssetSpec`): source, transform, watermark, trigger,
sink, checks and resources, validated as a whole when loaded.

The transform (:class:`Transform`) is exactly one kind's, validated by the kind's model, a
:class:`TransformModel` subclass declared in the kind's own module
(``kappa/streaming/kinds/<kind>.py``), which also holds its query. A kind's model registers itself
when its module is imported; the built-in kinds are the modules of the package
:data:`KINDS_PACKAGE`, imported the first time a declaration is validated
(:func:`transform_kinds`). That import by name is the one place the declaration layer reaches above
itself, as Spark finds its data sources through Java's ``ServiceLoader``: this module says what a
kind must answer (:class:`TransformModel`), each kind answers it in its own module."""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

from kappa.spec.base import EXPRESSION, MEMORY_RE, NAME, PLAIN, StrictModel, check_interval, check_name
from kappa.spec.transforms import FieldSpec, Source, Watermark

#: The package whose modules are the built-in kinds, imported by :func:`transform_kinds`.
KINDS_PACKAGE = "kappa.streaming.kinds"

_MODELS: dict[str, type["TransformModel"]] = {}
_LOADED: list[bool] = []


class TransformModel(StrictModel):
    """The model of one transform kind, ``transform: {<kind>: <fields>}``, and what the declaration
    layer asks of it. A subclass that sets ``kind`` (its key under ``transform:``) is registered
    when its module is imported; its fields declare their policy role (``Annotated[str, NAME]``,
    :class:`kappa.spec.base.Role`).

    Facts, overridden where a kind differs from the default: ``reads_kafka`` (its source is a
    topic, else an upstream asset; default False), ``row_expectations`` (its writer evaluates the
    asset's ``row_expectations``; default False), ``value_field`` (the YAML value is this one
    field's value, not a mapping: ``sql: SELECT …``; default None), and the methods below, each of
    the asset ``spec`` that holds the model, and ``archives`` (its table keeps each record of its
    one topic as it is: it can be that topic's archive; default False)."""

    kind: ClassVar[str]
    reads_kafka: ClassVar[bool] = False
    row_expectations: ClassVar[bool] = False
    value_field: ClassVar[str | None] = None
    archives: ClassVar[bool] = False

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        name = cls.__dict__.get("kind")
        if name is None:
            return
        known = _MODELS.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"transform kind {name!r} is declared twice: {known.__module__}.{known.__qualname__} "
                            f"and {cls.__module__}.{cls.__qualname__}")
        _MODELS[name] = cls

    @classmethod
    def of(cls, spec: AssetSpec) -> Self:
        """``spec``'s transform model, which must be of this kind (an ``AssertionError`` otherwise:
        a kind's code is only handed its own assets)."""
        model = spec.transform.model
        assert isinstance(model, cls), f"{spec.name} is a {spec.transform.kind!r} asset, not {cls.kind!r}"
        return model

    def check(self, spec: AssetSpec) -> None:
        """The kind's rules across the declaration's fields (watermark, sink, source), checked when
        the declaration is loaded; raises ``ValueError`` with a one-line reason (reported as a
        ``SpecError`` naming the file). Default: none."""

    def check_text(self, spec: AssetSpec) -> None:
        """The kind's rules on a declaration read from text (a file of ``assets/`` or one recorded
        in the warehouse; ``spec.path`` None for the latter), beyond :meth:`check`: what only a
        loaded declaration has, such as a file beside it. Raises ``ValueError`` starting with the
        field (``transform.python: …``). Default: none."""

    def check_catalog(self, spec: AssetSpec, assets: dict[str, AssetSpec]) -> None:
        """The kind's rules across assets (``assets``: the whole catalog, by name; every upstream
        is in it), checked once the catalog is loaded. Raises ``ValueError`` with a one-line reason
        starting with the field (reported as a ``SpecError`` naming the declaration). Default: none."""

    def row_columns(self) -> dict[str, FieldSpec] | None:
        """The columns the declaration fixes on every row it writes (name -> :class:`FieldSpec`; its
        table may add bookkeeping columns), for checks of the assets reading it. Default None: known
        only once the query runs."""
        return None

    def table_state(self) -> Literal["current", "history"] | None:
        """What its table holds per key of a source table: the ``current`` state (a row per key) or
        the ``history`` (every version, SCD2: ``valid_from``, ``valid_to``, ``is_current``). Default
        None: not such a table."""
        return None

    def record_key(self) -> list[str] | None:
        """The columns a record key of its topic holds (a JSON object of them, as Debezium writes
        keys). Default None: the kind reads no record keys."""
        return None

    def record_event_time(self) -> str | None:
        """The top-level field of a record value of its topic that holds the event time. Default
        None: the kind does not say."""
        return None

    def sink_mode(self, spec: AssetSpec) -> Literal["append", "merge"]:
        """How the table is written when ``sink.mode`` is not declared: ``append`` (each row once)
        or ``merge`` (rows replaced by :meth:`merge_keys`). Default ``append``."""
        return "append"

    def output_mode(self, spec: AssetSpec) -> Literal["append", "update"]:
        """Spark's output mode of a frame kind's query. Default ``append``: a row is emitted once,
        when final."""
        return "append"

    def merge_keys(self, spec: AssetSpec) -> list[str]:
        """The output's key when ``sink.keys`` is not declared (a merge sink's MERGE key; the shadow
        diff's key). Default ``[]``: none."""
        return []

    def upstream(self, spec: AssetSpec) -> list[str]:
        """Assets the transform reads besides ``source.asset``. Default ``[]``."""
        return []

    def logic_text(self, spec: AssetSpec) -> str:
        """Text outside the YAML that is part of the asset's logic, hashed into its fingerprint
        (a python transform's module). Default ``""``."""
        return ""


def transform_kinds() -> dict[str, type[TransformModel]]:
    """Every registered kind, name -> model, in registration order: the built-in ones (the modules
    of :data:`KINDS_PACKAGE`, imported on the first call) and any other imported module's."""
    if not _LOADED:
        _LOADED.append(True)
        importlib.import_module(KINDS_PACKAGE)
    return dict(_MODELS)


@functools.cache
def _holder(model: type[TransformModel]) -> type[StrictModel]:
    """A one-field model ``{<kind>: model}``, so a field's error is located at
    ``transform.<kind>.<field>`` as in the YAML."""
    return create_model(f"Transform_{model.kind}", __base__=StrictModel, **{model.kind: (model, ...)})


class Transform(StrictModel):
    """An asset's ``transform:``: exactly one registered kind's key (:func:`transform_kinds`), its
    value validated by the kind's model. ``kind`` is the key (``"parse"``), ``model`` the kind's
    :class:`TransformModel`. None, two or an unknown key is refused (a ``ValidationError``; a
    ``SpecError`` naming the file from :func:`~kappa.spec.load_asset`). Dumped as in the YAML,
    ``{<kind>: <fields>}``. The kind's query builder is found from the model's module
    (:func:`kappa.streaming.kinds.kind_of`)."""

    kind: Annotated[str, PLAIN]
    model: SerializeAsAny[TransformModel]

    @model_validator(mode="wrap")
    @classmethod
    def _one_kind(cls, value: Any, handler):
        if isinstance(value, Transform) or (isinstance(value, dict) and isinstance(value.get("model"), TransformModel)):
            return handler(value)
        kinds = transform_kinds()
        unknown = [k for k in value if k not in kinds] if isinstance(value, dict) else []
        if unknown:  # as a model with a field per kind would say it
            raise ValidationError.from_exception_data(cls.__name__, [
                {"type": "extra_forbidden", "loc": (k,), "input": value[k]} for k in unknown])
        given = [k for k, v in value.items() if v is not None] if isinstance(value, dict) else []
        if len(given) != 1:
            raise ValueError(f"declare exactly one of {', '.join(kinds)} (got {given or 'none'})")
        (name,) = given
        model_cls, inner = kinds[name], value[name]
        if model_cls.value_field is not None and not isinstance(inner, dict):
            inner = {model_cls.value_field: inner}
        model = getattr(_holder(model_cls).model_validate({name: inner}), name)
        return handler({"kind": name, "model": model})

    @model_serializer(mode="wrap")
    def _as_declared(self, handler) -> dict:
        inner = handler(self)["model"]
        field = type(self.model).value_field
        return {self.kind: inner[field] if field is not None else inner}


class Trigger(StrictModel):
    """Trigger of a long-running (``--continuous``) query; ``--until-caught-up`` uses available-now."""

    processing_time: Annotated[str, PLAIN] = "10 seconds"

    _v = field_validator("processing_time")(classmethod(lambda cls, v: check_interval(v)))


class Sink(StrictModel):
    """``append`` (each micro-batch appended once, :class:`kappa.streaming.writers.AppendWriter`) or
    ``merge`` (an upsert on ``keys``, :class:`kappa.streaming.writers.UpsertWriter`); ``partition_by``:
    the table's partition columns."""

    mode: Literal["append", "merge"] | None = None
    keys: Annotated[list[str], NAME] = Field(default_factory=list)
    partition_by: Annotated[list[str], NAME] = Field(default_factory=list)


class Resources(StrictModel):
    """Driver or executor size. ``memory`` is a JVM heap size string (``2g``, ``512m``); ``cores``
    are whole CPUs requested from Kubernetes; ``core_limit`` a Kubernetes CPU quantity."""

    cores: int = Field(1, ge=1)
    core_limit: Annotated[str | None, PLAIN] = None
    memory: Annotated[str, PLAIN] = "2g"
    memory_overhead: Annotated[str | None, PLAIN] = None

    @field_validator("memory", "memory_overhead")
    @classmethod
    def _jvm_size(cls, v: str | None) -> str | None:
        if v is not None and not MEMORY_RE.match(v):
            raise ValueError(f"{v!r} is not a JVM size like '512m' or '2g'")
        return v


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

    name: Annotated[str, PLAIN]
    expr: Annotated[str, EXPRESSION]
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

    name: Annotated[str, PLAIN]
    layer: Literal["bronze", "silver", "gold"]
    description: Annotated[str, PLAIN] = ""
    group: Annotated[str | None, PLAIN] = None
    owner: Annotated[str | None, PLAIN] = None
    source: Source
    transform: Transform
    watermark: Watermark | None = None
    trigger: Trigger = Trigger()
    sink: Sink = Sink()
    #: The asset's data-quality suite: Great Expectations expectations, each a one-key mapping
    #: ``expect_<snake_case>: {kwargs}`` (GX's expectation class name in snake case), e.g.
    #: ``- expect_column_values_to_be_unique: {column: event_id}``. All are blocking gate checks.
    #: Its SQL arguments are found by :mod:`kappa.streaming.policy` itself (GX builds them), so the
    #: field is ``plain`` to the walk over the models.
    expectations: Annotated[list[dict[str, dict]], PLAIN] = Field(default_factory=list)
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
        model, kind = self.transform.model, self.transform.kind
        if self.row_expectations:
            names = [r.name for r in self.row_expectations]
            if len(set(names)) != len(names):
                raise ValueError(f"row_expectations: names must be unique, got {names}")
            if not model.row_expectations:
                able = [k for k, m in transform_kinds().items() if m.row_expectations]
                raise ValueError(f"row_expectations: a '{kind}' asset's writer does not evaluate them "
                                 f"(kinds that do: {', '.join(able)})")
        if model.reads_kafka and self.source.kafka is None:
            raise ValueError(f"a '{kind}' transform reads Kafka: set source.kafka")
        if not model.reads_kafka and self.source.asset is None:
            raise ValueError(f"a '{kind}' transform reads an upstream asset: set source.asset")
        model.check(self)
        return self

    @property
    def sink_mode(self) -> str:
        """``append`` or ``merge``: ``sink.mode`` when declared, else the kind's
        (:meth:`~kappa.spec.asset.TransformModel.sink_mode`). For a frame kind it picks the
        sink (:func:`kappa.streaming.writers.frame_sink`); other kinds write through their own
        writers."""
        return self.sink.mode or self.transform.model.sink_mode(self)

    @property
    def output_mode(self) -> str:
        """Spark's output mode of a frame kind's query (``update`` or ``append``), the kind's
        (:meth:`~kappa.spec.asset.TransformModel.output_mode`)."""
        return self.transform.model.output_mode(self)

    @property
    def merge_keys(self) -> list[str]:
        """The output's key (the MERGE key of a merge sink; the shadow diff's key): ``sink.keys``
        when declared, else the kind's (:meth:`~kappa.spec.asset.TransformModel.merge_keys`)."""
        return list(self.sink.keys) or self.transform.model.merge_keys(self)

    @property
    def upstream(self) -> list[str]:
        """Upstream assets: ``source.asset``, then those the transform reads besides
        (:meth:`~kappa.spec.asset.TransformModel.upstream`: a join's right side, a lookup's or
        a materialized view's tables), each once."""
        ups = [self.source.asset] if self.source.asset else []
        return list(dict.fromkeys([*ups, *self.transform.model.upstream(self)]))

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
        """A hash of the logic (the YAML content plus the kind's
        :meth:`~kappa.spec.asset.TransformModel.logic_text`, a python transform's module): a version
        records it, so a changed declaration can be told from an unchanged one."""
        # Checks, thresholds, the trigger interval and documentation are not logic: changing them
        # must not force a replay.
        doc = self.model_dump(mode="json", by_alias=True, exclude={
            "description", "owner", "group", "expectations", "max_quarantine_rate", "shadow_diff_blocking", "trigger",
            "resources", "freshness",
        })
        blob = json.dumps(doc, sort_keys=True) + self.transform.model.logic_text(self)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


