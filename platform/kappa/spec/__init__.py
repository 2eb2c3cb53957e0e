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
  (:mod:`kappa.streaming.kinds.pattern`, semantics in :mod:`kappa.streaming.cep`); one row per match.
* ``sql`` / ``python`` — a SQL ``SELECT … FROM input`` or a function ``transform(df) -> DataFrame``
  over the upstream stream.
* ``changelog`` — silver from a Debezium changelog topic: a current-state table or an SCD2 history.
* ``lookup`` — a stream–table join: each row of the stream with columns of changelog tables, as of
  its event time (from a history) or as they are (current state).
* ``materialized_view`` — a table–table join: SQL over current-state tables, kept up to date as
  they change.

Window vocabulary follows Spark's Structured Streaming guide ("Window Operations on Event Time")
and *Designing Data-Intensive Applications*, ch. 11 ("Types of windows").

The package is layered: :mod:`~kappa.spec.base` (the model base, :class:`SpecError`, interval and size
syntax), :mod:`~kappa.spec.transforms` (the parts kinds share), :mod:`~kappa.spec.asset`
(:class:`AssetSpec`), :mod:`~kappa.spec.catalog` (``topics.yaml``, the catalog and the loaders). The
names below are the package's public face; import them from ``kappa.spec``.
"""

from kappa.spec.asset import (
    AssetResources,
    AssetSpec,
    Freshness,
    Resources,
    RowExpectation,
    Sink,
    Transform,
    TransformModel,
    Trigger,
    transform_kinds,
)
from kappa.spec.base import SpecError, interval_seconds
from kappa.spec.catalog import (
    Catalog,
    TopicSpec,
    declaration_label,
    load_asset,
    load_catalog,
    parse_declaration,
    upstream_first,
)
from kappa.spec.transforms import FieldSpec, Source, Watermark

__all__ = [
    "AssetResources", "AssetSpec", "Catalog", "FieldSpec", "Freshness", "Resources", "RowExpectation", "Sink", "Source",
    "SpecError", "TopicSpec", "Transform", "TransformModel", "Trigger", "Watermark", "interval_seconds",
    "declaration_label", "load_asset", "load_catalog", "parse_declaration", "transform_kinds", "upstream_first",
]
