"""The live part of ``kappa bench``: a producer at a fixed rate (:class:`LiveProducer`), the
backlog of a running query (:class:`Lag`), the search for the highest sustained rate
(:func:`sustained_search`) and end-to-end latency (:func:`latency`)."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Callable, Iterator

from kappa.config import Settings
from kappa.core.logs import LIBRDKAFKA
from kappa.harness.bench.events import LIVE_TOPIC, SENT_HEADER, event_id_of
from kappa.harness.bench.judge import judge_flat
from kappa.harness.delta_log import (change_data_feed_enabled, commit_actions, first_visible, first_visible_cdf,
                                     latest_commit, rearranges_only)


def _log_ends(consumer, topic: str, partitions: list[int]) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}

class LiveProducer:
    """Publishes synthetic events to the live topic at ``rate`` events/s in a thread until
    :meth:`stop`; every record carries its send time (epoch ms) in the header ``kappa-sent-ms``."""

    def __init__(self, settings: Settings, source: Iterator, rate: float):
        self.settings, self.source, self.rate = settings, source, rate
        self._stop = threading.Event()
        self.sent = 0
        self.error: str | None = None
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)

    def _records(self):
        for rec in self.source:
            if self._stop.is_set():
                return
            self.sent += 1
            yield rec

    def _run(self) -> None:
        from kappa.ingest.producer import produce

        try:
            report = produce(self.settings, LIVE_TOPIC, self._records(), rate=self.rate,
                             headers=lambda: [(SENT_HEADER, str(time.time_ns() // 1_000_000).encode())])
            self.seconds = report.seconds
        except Exception as exc:
            self.error = str(exc)

    def start(self) -> "LiveProducer":
        """Start publishing in the background; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop publishing and wait for the thread (at most 330 s: a delivery timeout plus a flush)."""
        self._stop.set()
        self._thread.join(330)


class Lag:
    """Backlog of a running query: log end offsets of its topic minus the end offsets of its last
    completed micro-batch."""

    def __init__(self, settings: Settings, query, topic: str, partitions: list[int]):
        from confluent_kafka import Consumer

        self.query, self.topic, self.partitions = query, topic, partitions
        self.consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                                  "group.id": f"kappa-bench-lag-{time.time_ns()}", "enable.auto.commit": False,
                                  "logger": LIBRDKAFKA})

    def processed(self) -> int:
        """Records of the topic the query's last completed micro-batch read up to (sum of its end
        offsets over the partitions; 0 before the first batch)."""
        from kappa.runners.local import kafka_offsets, progress_as_dict

        p = self.query.lastProgress
        if not p:
            return 0
        return sum(kafka_offsets([progress_as_dict(p)]).get(self.topic, {}).values())

    def log_end(self) -> int:
        """Records in the topic now (sum of the partitions' log end offsets)."""
        return sum(_log_ends(self.consumer, self.topic, self.partitions).values())

    def sample(self) -> int:
        """The backlog now, records: :meth:`log_end` - :meth:`processed`."""
        return self.log_end() - self.processed()

    def close(self) -> None:
        """Close the consumer used to read log end offsets."""
        self.consumer.close()

def run_step(settings: Settings, lag: Lag, source: Iterator, rate: float, seconds: float, warmup_s: float,
             check: Callable[[], None]) -> dict:
    """Publish at ``rate`` for ``warmup_s + seconds``; sample the backlog every 0.5 s of the
    measured part; return whether it stayed flat (:func:`judge_flat`)."""
    producer = LiveProducer(settings, source, rate).start()
    try:
        time.sleep(warmup_s)
        sent0, t0 = producer.sent, time.monotonic()
        samples: list[tuple[float, int]] = []
        while time.monotonic() - t0 < seconds:
            check()
            samples.append((time.monotonic() - t0, lag.sample()))
            time.sleep(0.5)
        sent = producer.sent - sent0
        elapsed = time.monotonic() - t0
    finally:
        producer.stop()
    k = max(1, len(samples) // 5)
    start_backlog = statistics.median(s for _, s in samples[:k])
    end_backlog = statistics.median(s for _, s in samples[-k:])
    achieved = sent / elapsed if elapsed else 0.0
    return {
        "rate": rate, "achieved_rate": round(achieved, 1), "seconds": round(elapsed, 1),
        "backlog_start": int(start_backlog), "backlog_end": int(end_backlog), "backlog_max": max(s for _, s in samples),
        **judge_flat(samples, rate),
        "producer_limited": achieved < 0.9 * rate, "producer_error": producer.error,
    }


def drain(lag: Lag, timeout_s: float, check: Callable[[], None]) -> bool:
    """Wait until the query has processed everything published (backlog 0)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check()
        if lag.sample() <= 0:
            return True
        time.sleep(0.5)
    return False


def sustained_search(settings: Settings, lag: Lag, source: Iterator, *, start_rate: float, max_rate: float,
                     step_s: float, warmup_s: float, bisections: int, check: Callable[[], None],
                     say: Callable[[str], None], budget_s: float, min_rate: float = 50.0,
                     drain_s: float = 120.0) -> tuple[float, list[dict]]:
    """From ``start_rate``, double the rate while the backlog stays flat (halve it while it rises),
    then bisect between the highest flat and the lowest rising rate ``bisections`` times, within
    ``budget_s`` seconds. Returns (highest flat rate, 0 if none; the steps)."""
    steps: list[dict] = []
    good, bad = 0.0, float("inf")
    rate = start_rate
    bisected = 0
    deadline = time.monotonic() + budget_s
    while min_rate <= rate <= max_rate and time.monotonic() < deadline:
        step = run_step(settings, lag, source, rate, step_s, warmup_s, check)
        steps.append(step)
        say(f"sustained: {rate:,.0f} ev/s -> {'flat' if step['flat'] else 'rising'} "
            f"(backlog troughs {step['trough_first']} -> {step['trough_last']}, slope {step['trough_slope']:,.0f} ev/s; "
            f"achieved {step['achieved_rate']:,.0f})")
        step["drained"] = drain(lag, drain_s, check)
        if step["flat"] and step["producer_limited"]:
            # the producer, not the pipeline, is the limit: report what it achieved, go no higher
            good = max(good, step["achieved_rate"])
            say("sustained: the producer cannot publish faster on this machine; stopping the search")
            break
        if step["flat"]:
            good = max(good, rate)
        else:
            bad = min(bad, rate)
        if bad == float("inf"):
            rate *= 2  # still flat: go up
        elif good == 0.0:
            rate /= 2  # never flat yet: go down
        elif bisected < bisections:
            bisected += 1
            rate = (good + bad) / 2
        else:
            break
    return good, steps


def latency(settings: Settings, lag: Lag, source: Iterator, table: str, rate: float, seconds: float,
            warmup_s: float, partitions: list[int], check: Callable[[], None], drain_s: float = 120.0) -> dict:
    """Publish at ``rate`` for ``warmup_s + seconds``, wait until every row is in the table, then
    pair each row's send time (Kafka header) with the time of the first commit that made it
    visible (:func:`kappa.harness.delta_log.first_visible`: a later auto-compaction rewriting the
    row does not count). When the table records its change data feed, the same rows are measured
    again from the feed (:func:`~kappa.harness.delta_log.first_visible_cdf`) and the result has a
    ``cross_check``: its percentiles and how many rows the two methods place in different commits."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = lag.consumer
    drain(lag, drain_s, check)  # start from an empty backlog, or the queue is what gets measured
    start = _log_ends(consumer, LIVE_TOPIC, partitions)
    v0 = latest_commit(table)
    t_start = time.time()
    producer = LiveProducer(settings, source, rate).start()
    time.sleep(warmup_s + seconds)
    producer.stop()
    end = _log_ends(consumer, LIVE_TOPIC, partitions)
    drained = drain(lag, drain_s, check)
    time.sleep(1.0)
    v1 = latest_commit(table)
    first = first_visible(table, "event_id", v0, v1)
    visible = {eid: at for eid, (_v, at) in first.items()}
    cdf = first_visible_cdf(table, "event_id", v0, v1) if change_data_feed_enabled(table) else None
    cdf_ms: list[float] = []
    placed_apart = 0
    reader = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": f"kappa-bench-lat-{time.time_ns()}",
                       "enable.auto.commit": False, "logger": LIBRDKAFKA})
    lat_ms: list[float] = []
    missing = 0
    warm_until_ms = (t_start + warmup_s) * 1000
    try:
        reader.assign([TopicPartition(LIVE_TOPIC, p, start[p]) for p in partitions if end[p] > start[p]])
        want, n = sum(end[p] - start[p] for p in partitions), 0
        deadline = time.monotonic() + 120
        while n < want and time.monotonic() < deadline:
            for msg in reader.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None or msg.offset() >= end[msg.partition()]:
                    continue
                n += 1
                sent = float(dict(msg.headers() or [])[SENT_HEADER])
                if sent < warm_until_ms:
                    continue
                eid = event_id_of(msg.value())
                at = visible.get(eid)
                if at is None:
                    missing += 1
                else:
                    lat_ms.append(at * 1000 - sent)
                if cdf is not None and (other := cdf.get(eid)) is not None:
                    cdf_ms.append(other[1] * 1000 - sent)
                    placed_apart += other[0] != first.get(eid, (None,))[0]
    finally:
        reader.close()
    lat_ms.sort()
    cdf_ms.sort()

    def pct(values: list[float], q: float) -> float | None:
        return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None

    compactions = sum(rearranges_only(commit_actions(table, v)) for v in range(v0 + 1, v1 + 1))
    out = {"rate": rate, "rows_measured": len(lat_ms), "rows_not_visible": missing, "drained": drained,
           "commits": v1 - v0, "compaction_commits": compactions, "warmup_s": warmup_s, "seconds": seconds,
           "p50": pct(lat_ms, 0.50), "p95": pct(lat_ms, 0.95), "p99": pct(lat_ms, 0.99),
           "max": round(lat_ms[-1], 1) if lat_ms else None, "producer_error": producer.error}
    if cdf is not None:
        out["cross_check"] = {"method": "Delta change data feed (delta-rs load_cdf, _commit_timestamp)",
                              "rows_measured": len(cdf_ms), "rows_in_another_commit": placed_apart,
                              "p50": pct(cdf_ms, 0.50), "p95": pct(cdf_ms, 0.95), "p99": pct(cdf_ms, 0.99),
                              "max": round(cdf_ms[-1], 1) if cdf_ms else None}
    return out
