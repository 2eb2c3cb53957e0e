"""``kappa bench nexmark``: the Nexmark queries declared in ``assets/nexmark/`` run as ``kappa run``
runs assets, beside the published Flink figures.

One run, in fresh state under ``<KAPPA_HOME>/nexmark-<stamp>/`` with its own broker (as
``kappa bench``, :func:`kappa.harness.env.isolated_env`):

1. **warm-up** (not measured): 5,000 events through every asset, so no asset's time holds the
   session's class loading and JIT compilation; then **publish** ``--events`` more events of the
   pinned generator to the three topics (:mod:`kappa.harness.nexmark`).
2. **throughput**: every asset the chosen queries need catches up with those events, one asset
   at a time in topological order (:func:`kappa.runners.run_until_caught_up` with that one name: the
   queries ``kappa run --until-caught-up`` starts, available-now trigger, writing Delta), so each
   asset's seconds are its own. A query's time is the sum over its whole path from Kafka (the silver
   tables it reads, its stateless stages, its own query), each run alone from the log; its events
   are every generated event, as Nexmark counts them (``Throughput/Cores`` of the Nexmark README:
   source events over cores x time). Per core: over the cores this process may use
   (``os.sched_getaffinity``), whatever else runs on them (the load average is reported).
3. **latency**: the same assets running continuously (:func:`kappa.runners.local.run_continuous`,
   processing-time trigger ``--trigger``) while ``--latency-events`` more events are published at
   ``--rate`` events/s in generation order, each event's send time kept. A row is visible at the
   first Delta commit that added it (:func:`kappa.harness.delta_log.first_visible`: the commit
   file's mtime). Latency of a row = visible - sent of the event it comes from (``event_id``: a bid,
   or an auction for q3 and q8); for q5, whose rows are windows, visible - sent of the window's
   newest bid. A windowed query's latency therefore includes the wait for its watermark: the
   generator's event time advances 0.1 ms per event, so at ``--rate`` events/s a 10-second window
   closes ``10,000 / rate`` times slower than the wall clock.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kappa.config import Settings
from kappa.errors import KappaError

#: The queries ``kappa bench nexmark`` runs by default (``assets/nexmark/<q>.yaml``).
QUERIES = ("q0", "q1", "q2", "q3", "q5", "q7", "q8")

#: Throughput per core of Flink 1.13 in the Nexmark README's results table (nexmark/nexmark,
#: "Benchmark Results": 100 million events, 8 TaskManagers of 1 slot on 3 x 8-core workers,
#: exactly-once checkpoints every 3 minutes, RocksDB), events/s per core.
FLINK_PER_CORE = {"q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120, "q4": 34_330, "q5": 22_140,
                  "q7": 12_330, "q8": 146_140}

#: What differs from the Flink figures, printed under the table.
DIFFERS = ("Flink 1.13: datagen source generating in the job, blackhole sink, exactly-once checkpoints every 3 "
           "minutes, 8 TaskManagers on 3 machines of 8 cores (its per-core figure: over the cores it used), 100M events. Kappa: Kafka in (events published to a local broker first, then read from the log), "
           "Delta out (every micro-batch a transactional Delta commit, exactly-once), silver's parsing, validation and "
           "deduplication included, each stage a query of its own.")


class NexmarkBenchError(KappaError, ValueError):
    """A ``--queries`` name is not declared in ``assets/nexmark/``."""


@dataclass
class NexmarkOptions:
    """What ``kappa bench nexmark`` runs: ``events`` for throughput; ``latency_events`` published at
    ``rate`` events/s (0: no latency step) with the continuous queries' ``trigger``."""

    events: int = 200_000
    #: Events run through every asset before anything is measured (0: none).
    warmup_events: int = 5_000
    queries: tuple[str, ...] = QUERIES
    latency_events: int = 150_000
    rate: float = 1_000.0
    trigger: str = "1 second"
    drain_s: float = 120.0
    keep_state: bool = False


def _pct(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None


def chains(catalog, queries: tuple[str, ...]) -> dict[str, list[str]]:
    """Each query's path from Kafka: the query and every asset it reads, directly or not, upstream
    first. Raises :class:`NexmarkBenchError` for a name the catalog lacks."""
    out = {}
    for q in queries:
        if q not in catalog.assets:
            raise NexmarkBenchError(f"--queries: {q!r} is not declared in {catalog.root} "
                                    f"(queries: {', '.join(n for n in QUERIES if n in catalog.assets)})")
        seen, todo = set(), [q]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(catalog[n].upstream)
        out[q] = catalog.topological(sorted(seen))
    return out


def _publish_paced(settings: Settings, events, rate: float) -> dict[int, float]:
    """Publish ``events`` (:class:`kappa.harness.nexmark.Events`) in generation order at ``rate``
    records/s, one producer for the three topics; returns event_id -> send time (epoch ms)."""
    from confluent_kafka import Producer

    from kappa.harness.nexmark import KEY_FIELDS, TOPICS
    from kappa.ingest.producer import producer_config
    import json

    ordered = sorted(((r["event_id"], kind, topic, r) for kind, topic in TOPICS.items()
                      for r in events.records[topic]), key=lambda x: x[0])
    producer = Producer(producer_config(settings))
    sent: dict[int, float] = {}
    t0 = time.monotonic()
    for i, (eid, kind, topic, r) in enumerate(ordered):
        ahead = i / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
        sent[eid] = time.time() * 1000
        while True:
            try:
                producer.produce(topic, json.dumps(r, separators=(",", ":")).encode(), str(r[KEY_FIELDS[kind]]).encode())
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise KappaError("nexmark latency step: records left undelivered after 120 s")
    return sent


def _latencies(settings: Settings, queries: tuple[str, ...], versions_before: dict[str, int], sent: dict[int, float],
               events) -> dict[str, dict]:
    """Per query: p50/p99 (ms) of visible - sent over the rows its table gained after
    ``versions_before`` (see the module docstring)."""
    import bisect

    import pandas as pd

    from kappa.delta.registry import Registry
    from kappa.harness.delta_log import first_visible

    registry = Registry(settings)
    bids = sorted((pd.Timestamp(r["date_time"]).value // 10**6, sent[r["event_id"]])
                  for r in events.records["nexmark_bid"])
    bid_times = [t for t, _ in bids]
    newest_sent = []
    for _t, s in bids:  # the newest send time among the bids up to each event time
        newest_sent.append(max(s, newest_sent[-1]) if newest_sent else s)
    out = {}
    for q in queries:
        table = registry.latest(q).table_path
        lat: list[float] = []
        if q == "q5":
            for ws, (_v, at) in first_visible(table, "window_start", versions_before[q]).items():
                start_ms = pd.Timestamp(ws).value // 10**6
                i = bisect.bisect_left(bid_times, start_ms + 10_000) - 1
                if i >= 0 and bid_times[i] >= start_ms:
                    lat.append(at * 1000 - newest_sent[i])
        else:
            for eid, (_v, at) in first_visible(table, "event_id", versions_before[q]).items():
                if int(eid) in sent:
                    lat.append(at * 1000 - sent[int(eid)])
        out[q] = {"rows": len(lat), "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99)}
    return out


def run_nexmark_bench(base: Settings, opts: NexmarkOptions, say: Callable[[str], None] = lambda _m: None) -> dict:
    """Run the steps of the module docstring; returns the JSON-ready result: ``queries`` (query ->
    ``events``, ``seconds``, ``events_per_s``, ``events_per_s_per_core``, ``flink_per_core``,
    ``p50_ms``, ``p99_ms``, ``latency_rows``, ``rows``, ``path``), ``assets`` (asset -> seconds,
    input rows, rows, batches), the load and the configuration. Raises :class:`NexmarkBenchError`
    for an unknown query, :class:`kappa.harness.nexmark.NexmarkError` when the generator is missing."""
    from kappa.delta.registry import Registry
    from kappa.harness.delta_log import latest_commit
    from kappa.harness.env import isolated_env
    from kappa.harness.nexmark import generate, generator_path, publish
    from kappa.runners import run_until_caught_up
    from kappa.runners.local import run_continuous
    from kappa.spec import load_catalog
    from kappa.streaming.session import spark_session

    project = base.model_copy(update={"assets_dir": base.project_dir / "assets" / "nexmark"})
    paths = chains(load_catalog(project.assets_dir), tuple(opts.queries))
    generator_path(base)  # fail in one line before anything starts
    names = load_catalog(project.assets_dir).topological(sorted({n for c in paths.values() for n in c}))

    def edit(_name: str, doc: dict) -> None:
        doc["trigger"] = {"processing_time": opts.trigger}

    env = isolated_env(project, "nexmark", edit)
    settings = env.settings
    cores = len(os.sched_getaffinity(0))
    result: dict = {"events": opts.events, "cores": os.cpu_count(), "cores_usable": cores,
                    "loadavg_before": [round(x, 2) for x in os.getloadavg()],
                    "config": {"trigger": opts.trigger, "rate": opts.rate, "latency_events": opts.latency_events,
                               "shuffle_partitions": settings.shuffle_partitions, "spark_master": settings.spark_master},
                    "differs": DIFFERS}
    say(f"state in {env.root}")
    started = time.monotonic()
    env.start_broker()
    spark = None
    try:
        spark = spark_session(settings)
        if opts.warmup_events:
            # Not measured: the session's first queries pay class loading and JIT compilation (the
            # first asset of a cold session took 27 s for 12,000 auctions, the next 5.7 s for 4,000
            # persons), which would be charged to whichever asset runs first.
            t = time.monotonic()
            publish(settings, generate(settings, opts.warmup_events))
            run_until_caught_up(settings, names, spark=spark)
            result["warmup_s"] = round(time.monotonic() - t, 1)
            say(f"warm-up: {opts.warmup_events:,} events through every asset in {result['warmup_s']} s")
        t = time.monotonic()
        events = generate(settings, opts.events, offset=opts.warmup_events)
        published = publish(settings, events)
        result["publish_s"] = round(time.monotonic() - t, 1)
        say(f"published {sum(published.values()):,} events ({published}) in {result['publish_s']} s")
        assets: dict[str, dict] = {}
        for name in names:
            (r,) = run_until_caught_up(settings, [name], spark=spark)
            assets[name] = {"seconds": round(r.seconds, 2), "input_rows": r.input_rows, "rows": r.rows,
                            "batches": r.batches}
            say(f"{name}: {r.input_rows:,} rows in, {r.rows:,} rows, {r.seconds:.1f} s")
        result["assets"] = assets
        queries = {}
        for q, path in paths.items():
            seconds = sum(assets[n]["seconds"] for n in path)
            rate = opts.events / seconds if seconds else None
            queries[q] = {"events": opts.events, "seconds": round(seconds, 1), "path": path, "rows": assets[q]["rows"],
                          "events_per_s": round(rate) if rate else None,
                          "events_per_s_per_core": round(rate / cores) if rate else None,
                          "flink_per_core": FLINK_PER_CORE.get(q)}
        result["queries"] = queries

        if opts.latency_events:
            registry = Registry(settings)
            before = {q: latest_commit(registry.latest(q).table_path) for q in paths}
            live = generate(settings, opts.latency_events, offset=opts.warmup_events + opts.events)
            stop = threading.Event()
            last_input = {"t": time.monotonic()}
            failure: list[BaseException] = []

            def progress(_name: str, p: dict) -> None:
                if p.get("numInputRows"):
                    last_input["t"] = time.monotonic()

            def runner() -> None:
                try:
                    run_continuous(settings, names, stop=stop, spark=spark, on_progress=progress, poll_s=1.0)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    failure.append(exc)
                    stop.set()

            thread = threading.Thread(target=runner, name="nexmark-continuous", daemon=True)
            thread.start()
            time.sleep(10)  # the queries start and read what is there (nothing new) before the clock runs
            say(f"latency: {opts.latency_events:,} events at {opts.rate:,.0f} ev/s, trigger {opts.trigger}")
            sent = _publish_paced(settings, live, opts.rate)
            deadline = time.monotonic() + opts.drain_s
            while time.monotonic() < deadline and not failure and time.monotonic() - last_input["t"] < 15:
                time.sleep(1)
            stop.set()
            thread.join(180)
            if failure:
                raise failure[0]
            lat = _latencies(settings, tuple(paths), before, sent, live)
            for q, v in lat.items():
                queries[q].update(p50_ms=v["p50_ms"], p99_ms=v["p99_ms"], latency_rows=v["rows"])
    finally:
        if spark is not None:
            for sq in spark.streams.active:
                sq.stop()
        env.stop_broker()
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = round(time.monotonic() - started, 1)
    if not opts.keep_state:
        shutil.rmtree(env.root, ignore_errors=True)
    return result


def nexmark_table(r: dict):
    """The result as a Rich table, one row per query, with the Flink figure beside each."""
    from rich.table import Table

    t = Table(title=f"kappa bench nexmark: {r['events']:,} events, {r['cores_usable']} cores usable, "
                    f"load {r['loadavg_before'][0]} -> {r['loadavg_after'][0]}",
              caption=r["differs"])
    for col in ("query", "events", "s", "ev/s", "ev/s/core", "p50 ms", "p99 ms", "Flink ev/s/core", "ratio"):
        t.add_column(col, justify="left" if col == "query" else "right")
    for q, v in r["queries"].items():
        flink = v.get("flink_per_core")
        per_core = v.get("events_per_s_per_core")
        t.add_row(q, f"{v['events']:,}", f"{v['seconds']}", f"{v['events_per_s'] or 0:,}", f"{per_core or 0:,}",
                  str(v.get("p50_ms", "")), str(v.get("p99_ms", "")), f"{flink:,}" if flink else "",
                  f"{per_core / flink:.3f}" if flink and per_core else "")
    return t
