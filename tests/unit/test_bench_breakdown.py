"""The per-micro-batch breakdown and the target judge of `kappa bench` (pure functions over
Spark's progress reports and a result dict)."""

from __future__ import annotations

import pytest

from kappa.harness.bench import batch_breakdown, files_read_of, judge_targets, metric_value, new_jobs, per_batch


def progress(rows: int, **ms) -> dict:
    return {"numInputRows": rows, "durationMs": ms}


def test_phases_are_shares_of_the_batches_with_input():
    reports = [
        progress(100, addBatch=800, walCommit=100, commitOffsets=50, triggerExecution=1000),
        progress(0, addBatch=5, triggerExecution=10),  # an empty batch: left out
        progress(300, addBatch=2400, walCommit=300, commitOffsets=150, latestOffset=50, triggerExecution=3000),
    ]
    b = batch_breakdown(reports)
    assert b["batches"] == 2
    assert b["phases"]["addBatch"] == {"median_ms": 1600, "share": 0.8}
    assert b["phases"]["walCommit"]["share"] == 0.1 and b["phases"]["triggerExecution"]["share"] == 1.0
    assert b["holding"] == "addBatch"
    assert b["other_share"] == pytest.approx(1 - 0.8 - 0.1 - 0.05 - 0.0125, abs=1e-3)


def test_no_batch_with_input_has_no_phases():
    assert batch_breakdown([progress(0, triggerExecution=10)]) == {"batches": 0, "phases": {}}
    assert per_batch(5, 1, 0, {"batches": 0, "phases": {}})["spark_jobs"] is None


def test_a_missed_target_names_the_phase_that_holds_it():
    slow = per_batch(30, 10, 10, batch_breakdown([progress(10, addBatch=900, walCommit=100, triggerExecution=1000)]))
    fast = per_batch(3, 1, 1, batch_breakdown([progress(10, addBatch=100, walCommit=700, triggerExecution=1000)]))
    assert slow["spark_jobs"] == 3.0 and slow["delta_commits"] == 1.0
    result = {"replay_over_u2": 0.79, "sustained_over_u2": 0.7, "replay": {"per_batch": slow},
              "live_per_batch": fast, "latency_ms": {"p50": 900, "p99": 5_000}}
    judged = {j["target"]: j for j in judge_targets(result)}
    assert judged["replay >= 1.0 x U2"] == {"target": "replay >= 1.0 x U2", "value": 0.79, "met": False,
                                            "holding": "addBatch", "share": 0.9}
    assert judged["sustained >= 0.6 x U2"]["met"] is True and "holding" not in judged["sustained >= 0.6 x U2"]
    assert judged["latency p50 <= 1000 ms"]["met"] is True
    assert judged["latency p99 <= 3000 ms"] == {"target": "latency p99 <= 3000 ms", "value": 5_000, "met": False,
                                                "holding": "walCommit", "share": 0.7}


def test_an_unmeasured_target_is_not_judged():
    judged = judge_targets({"replay_over_u2": None, "latency_ms": {"p50": None, "p99": None}})
    assert [j["met"] for j in judged] == [None, None, None, None]


def test_jobs_are_counted_only_when_the_tracker_kept_them_all():
    assert new_jobs({1, 2, 3}, {2, 3, 4, 5}, retained=1000) == 2
    assert new_jobs(set(), {7, 8}, retained=1000) == 2
    # the tracker is full and holds only jobs newer than the first reading: some were dropped
    assert new_jobs({1, 2}, {10, 11, 12}, retained=3) is None
    assert per_batch(None, 4, 4, {"batches": 4, "phases": {}})["spark_jobs"] is None


def test_metric_values_are_read_as_spark_formats_them():
    assert metric_value("6") == 6 and metric_value("1,024") == 1024
    assert metric_value("total (min, med, max (stageId: taskId))\n12 (1, 2, 9 (stage 3.0: task 7))") == 12
    assert metric_value("") is None and metric_value(None) is None and metric_value("n/a") is None


def test_files_read_are_summed_over_the_query_s_executions_only():
    executions = [
        {"jobs": {1, 2}, "files": ["3", "1,000"]},  # the query's: two scans
        {"jobs": {3}, "files": []},                 # the query's, no file scan (a Kafka read)
        {"jobs": {9}, "files": ["50"]},             # another query's
        {"jobs": set(), "files": ["7"]},            # no job of its own (an outer execution)
    ]
    assert files_read_of(executions, {1, 2, 3}, retained=1000) == 1_003
    pb = per_batch(3, 1, 1, {"batches": 1, "phases": {}}, files_read_of(executions, {1, 2, 3}, retained=1000))
    assert pb["files_read"] == 1_003.0 and pb["files_read_total"] == 1_003


def test_files_read_are_not_evaluated_when_they_cannot_be_counted():
    executions = [{"jobs": {1}, "files": ["3"]}]
    assert files_read_of(executions, {5, 6}, retained=1000) is None  # no execution of the query's jobs
    assert files_read_of(executions, set(), retained=1000) is None
    assert files_read_of(executions, {1}, retained=1) is None  # the store is full: some may be gone
    # full, but it still keeps an execution older than the query's: eviction has not reached them
    older = [{"jobs": {0}, "files": []}, {"jobs": {1}, "files": ["3"]}]
    assert files_read_of(older, {1}, retained=2) == 3
    assert files_read_of(older[1:] + [{"jobs": {2}, "files": ["1"]}], {1, 2}, retained=2) is None
    assert per_batch(3, 1, 1, {"batches": 1, "phases": {}})["files_read"] is None
