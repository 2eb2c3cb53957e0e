"""The parts of a declaration that several transform kinds share: the source (:class:`Source`,
:class:`KafkaSource`), a declared column (:class:`FieldSpec`) and a watermark (:class:`Watermark`).
Each kind's own model is declared in the kind's module (``kappa/streaming/kinds/<kind>.py``), a
:class:`kappa.spec.asset.TransformModel`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from kappa.spec.base import NAME, PLAIN, FieldType, StrictModel, check_interval

class FieldSpec(StrictModel):
    """One declared column of a ``schema:`` mapping (parse and changelog transforms): its type (one
    of :data:`~kappa.spec.base.FieldType`, mapped to Spark's by
    :data:`kappa.streaming.records.SPARK_TYPES`), whether a record lacking it is bad input
    (``required``: quarantined, not a null), and a description shown in Dagster's column schema.
    ``year: int`` is shorthand for ``year: {type: int}``."""

    type: FieldType
    required: bool = False
    description: Annotated[str | None, PLAIN] = None


class KafkaSource(StrictModel):
    """Read one or more topics from the earliest retained offset (every version replays the log)."""

    topics: Annotated[list[str], PLAIN] = Field(min_length=1)
    #: Upper bound of records per micro-batch (Spark's ``maxOffsetsPerTrigger``); None = no bound.
    max_offsets_per_trigger: int | None = Field(None, gt=0)


class Source(StrictModel):
    """Where an asset reads from, exactly one of: ``kafka`` (topics of the log, from the earliest
    retained offset) or ``asset`` (the Delta table of the upstream asset's version this version
    pins, read as a stream). Declaring both or neither is refused (pydantic's
    ``ValidationError``, which :func:`~kappa.spec.load_asset` reports as a ``SpecError`` naming the
    file and field)."""

    kafka: KafkaSource | None = None
    asset: Annotated[str | None, PLAIN] = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "Source":
        if (self.kafka is None) == (self.asset is None):
            raise ValueError("declare exactly one of 'kafka' or 'asset'")
        return self


class Watermark(StrictModel):
    """``withWatermark(column, delay)``: rows older than max(event time) - delay may be dropped."""

    column: Annotated[str, NAME]
    delay: Annotated[str, PLAIN]

    _v = field_validator("delay")(classmethod(lambda cls, v: check_interval(v)))
