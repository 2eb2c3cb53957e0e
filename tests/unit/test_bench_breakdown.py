"""The per-micro-batch breakdown and the target judge of `kappa bench` (pure functions over
Spark's progress reports and a result dict)."""

from __future__ import annotations

import pytest

from kappa.harness.bench.judge import judge_targets
from kappa.harness.bench.status import (DRIVER, add_batch_sum, batch_breakdown, files_read_of, metric_value, new_jobs,
                                        per_batch, step_breakdown)
from kappa.harness.bench.status import job_step
from kappa.streaming.writers import STEP_MARK


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
    assert b["phases"]["addBatch"] == {"median_ms": 1600, "share": 0.8, "sum_ms": 3200}
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


def stage(job, step, wall, run, cpu, tasks=2, job_wall=None):
    return {"job": job, "job_wall_ms": wall if job_wall is None else job_wall, "step": step, "stage": job * 10,
            "tasks": tasks, "wall_ms": wall, "run_ms": run, "cpu_ms": cpu}


def test_add_batch_time_is_split_by_the_writer_step_its_jobs_ran_in_and_the_driver_takes_the_rest():
    # job 1: two stages in one job of 7.2 s; job 2: one stage; job 3 ran outside any step
    rows = [stage(1, "evaluate", 6_000, 11_000, 9_000, job_wall=7_200), stage(1, "evaluate", 1_000, 1_500, 1_000, job_wall=7_200),
            stage(2, "append table", 2_500, 4_000, 1_000), stage(3, None, 300, 600, 500)]
    b = step_breakdown(rows, batches=2, add_batch_ms=12_000)
    assert list(b["steps"]) == ["evaluate", "append table", DRIVER, "outside a step"]
    ev = b["steps"]["evaluate"]
    assert (ev["jobs"], ev["stages"], ev["tasks"], ev["wall_ms"], ev["per_batch_ms"]) == (1, 2, 4, 7_200, 3_600)
    assert (ev["run_ms"], ev["cpu_ms"], ev["share"]) == (12_500, 10_000, 0.6)
    assert b["steps"][DRIVER]["wall_ms"] == 12_000 - 7_200 - 2_500 - 300 and b["steps"][DRIVER]["share"] == 0.167
    assert b["holding"] == "evaluate"
    # without addBatch's time, the shares are of the jobs' time and no driver step is made up
    b = step_breakdown(rows, batches=2)
    assert DRIVER not in b["steps"] and b["steps"]["evaluate"]["share"] == 0.72


def test_a_stage_the_status_store_dropped_is_counted_missing_and_its_job_still_timed():
    gone = {**stage(2, "append table", 0, 0, 0, job_wall=900), "missing": True}
    b = step_breakdown([stage(1, "evaluate", 500, 600, 400), gone], batches=1, add_batch_ms=1_500)
    app = b["steps"]["append table"]
    assert (app["wall_ms"], app["stages"], app["stages_missing"], app["run_ms"]) == (900, 0, 1, 0)
    assert "stages_missing" not in b["steps"]["evaluate"] and b["steps"][DRIVER]["wall_ms"] == 100


def test_steps_not_known_are_not_evaluated_and_no_stage_holds_nothing():
    assert step_breakdown(None, 3) == {"evaluated": False}
    assert step_breakdown([], 3) == {"evaluated": True, "steps": {}, "holding": None}


def test_a_missed_target_held_by_add_batch_names_the_step_inside_it():
    steps = step_breakdown([stage(1, "evaluate", 800, 900, 850), stage(2, "append table", 200, 300, 100)], 1)
    slow = per_batch(3, 1, 1, batch_breakdown([progress(10, addBatch=900, walCommit=100, triggerExecution=1000)]),
                     steps=steps)
    judged = judge_targets({"replay_over_u2": 0.5, "replay": {"per_batch": slow}, "latency_ms": {}})[0]
    assert judged == {"target": "replay >= 1.0 x U2", "value": 0.5, "met": False, "holding": "addBatch",
                      "share": 0.9, "step": "evaluate", "step_share": 0.8, "step_cpu_ms": 850, "step_run_ms": 900}


def test_the_state_store_s_time_is_read_from_the_progress_of_stateful_batches():
    ops = [{"allUpdatesTimeMs": 40, "allRemovalsTimeMs": 1, "commitTimeMs": 300}, {"commitTimeMs": 100}]
    b = batch_breakdown([{**progress(10, addBatch=900, triggerExecution=1000), "stateOperators": ops},
                         {**progress(0, addBatch=5, triggerExecution=10), "stateOperators": ops}])
    assert b["state_store"] == {"updates_median_ms": 40, "removals_median_ms": 1, "commit_median_ms": 400}
    assert b["phases"]["addBatch"]["sum_ms"] == 900 and add_batch_sum(b) == 900
    assert "state_store" not in batch_breakdown([progress(10, addBatch=900, triggerExecution=1000)])


def test_a_job_description_names_its_step():
    assert job_step(f"flights_v2 id = 1 batch = 3{STEP_MARK}append late") == "append late"
    assert job_step("flights_v2 id = 1 batch = 3") is None and job_step(None) is None
    # Delta appends its own description to the caller's; its numbers differ batch by batch
    assert job_step(f"b = 3{STEP_MARK}append table: Compute snapshot for version: 12") == \
        "append table: Compute snapshot for version: N"
