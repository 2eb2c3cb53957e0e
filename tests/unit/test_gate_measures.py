"""The gate's quarantine_rate and late_rows read what a version did from its checkpoint and its
registry events, whatever ran it; with nothing to measure they say "not evaluated", never passed."""

from __future__ import annotations

from pathlib import Path

from kappa.config import load_settings
from kappa.delta.registry import Registry
from kappa.quality.gate import late_rows, quarantine_rate, records_read_by
from kappa.spec import load_catalog

REPO = Path(__file__).resolve().parents[2]


def _commit_batch(checkpoint: str, batch: int, offsets_line: str) -> None:
    root = Path(checkpoint)
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets_line}\n')
    (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_records_read_come_from_the_checkpoint_minus_the_recorded_log_start(tmp_path):
    settings = load_settings(project_dir=REPO, home=tmp_path)
    reg = Registry(settings)
    v = reg.create_version("flights", "f", {}, start_offsets={"flights": {"0": 10, "1": 0}})
    assert records_read_by(v) == 0
    _commit_batch(v.checkpoint_path, 0, '{"flights":{"0":50,"1":30}}')
    _commit_batch(v.checkpoint_path, 1, '{"flights":{"0":110,"1":90}}')
    Path(v.checkpoint_path, "offsets", "2").write_text('v1\n{}\n{"flights":{"0":999,"1":999}}\n')  # planned only
    assert records_read_by(v) == (110 - 10) + 90


def test_nothing_read_or_reported_is_not_evaluated_and_not_passed(tmp_path):
    settings = load_settings(project_dir=REPO, home=tmp_path)
    spec = load_catalog(settings.assets_dir)["flights"]
    v = Registry(settings).create_version("flights", "f", {})
    q = quarantine_rate(None, settings, spec, v)
    assert (q.evaluated, q.passed) == (False, False) and "NOT EVALUATED" in q.describe()
    late = late_rows(v)
    assert (late.evaluated, late.passed) == (False, False)


def test_late_rows_counts_continuous_runs_too(tmp_path):
    settings = load_settings(project_dir=REPO, home=tmp_path)
    reg = Registry(settings)
    reg.create_version("departures_hourly", "f", {})
    reg.record("departures_hourly", 1, "stopped", mode="continuous", dropped_by_watermark=3)
    late = late_rows(reg.version("departures_hourly", 1))
    assert (late.evaluated, late.passed, late.observed) == (True, False, 3)


def test_late_rows_counts_a_patterns_named_late_events_too(tmp_path):
    settings = load_settings(project_dir=REPO, home=tmp_path)
    reg = Registry(settings)
    reg.create_version("delay_streaks", "f", {})
    assert late_rows(reg.version("delay_streaks", 1), named=2).observed == 2  # evidence even before a report
    reg.record("delay_streaks", 1, "caught_up", dropped_by_watermark=0)
    assert late_rows(reg.version("delay_streaks", 1)).passed
    late = late_rows(reg.version("delay_streaks", 1), named=1)
    assert (late.evaluated, late.passed, late.observed, late.details["late_events"]) == (True, False, 1, 1)


def test_a_non_blocking_difference_is_a_warning_in_dagster_not_a_pass():
    """A shadow diff that found a difference has not passed, blocking or not; only a blocking one
    fails the gate. Dagster shows the non-blocking one with WARN severity (it does not block)."""
    import dagster as dg

    from kappa.dagster.metadata import gate_check_results
    from kappa.quality.gate import SHADOW_CHECK, CheckResult, GateReport

    for blocking in (False, True):
        diff = CheckResult(name=SHADOW_CHECK, passed=False, blocking=blocking, observed="rows 10 -> 11",
                           expected="no difference")
        ok = CheckResult(name="expect_table_row_count_to_be_between", passed=True, blocking=True, observed=11,
                         expected=">= 1")
        report = GateReport(asset="departures_hourly", version=2, passed=not blocking, checks=[ok, diff])
        [_, shown] = gate_check_results(dg.AssetKey("departures_hourly"), report, [ok.name, SHADOW_CHECK])
        assert shown.passed is False
        assert shown.severity == (dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN)
        assert [c.name for c in report.failed] == ([SHADOW_CHECK] if blocking else [])


def test_a_first_versions_shadow_diff_is_not_evaluated_and_blocks_nothing():
    # nothing promoted to compare with: no figure was measured, so the check must not say "passed"
    from types import SimpleNamespace

    from kappa.dagster.metadata import check_description
    from kappa.quality.gate import SHADOW_CHECK, GateReport, shadow_diff

    for blocking in (False, True):
        spec = SimpleNamespace(merge_keys=["id"], shadow_diff_blocking=blocking)
        diff = shadow_diff(None, spec, None, None, 1, None)
        assert (diff.name, diff.passed, diff.evaluated, diff.blocking) == (SHADOW_CHECK, False, False, False)
        assert diff.describe().startswith("shadow_diff: NOT EVALUATED") and "nothing to compare" in diff.details["why"]
        report = GateReport(asset="a", version=1, passed=True, checks=[diff])
        assert report.failed == []  # not evaluated blocks nothing
        assert "shadow_diff NOT EVALUATED" in check_description(diff, report)


def test_the_shadow_diff_compares_at_the_latest_batches_that_cover_the_same_offsets():
    """The candidate's latest batch with a twin in the promoted version (equal source-offset
    watermarks), whatever the promoted version read since; none: one line saying why, with the
    candidate's offsets."""
    from kappa.quality.shadow_cut import common_cut
    from kappa.streaming.provenance import BatchWatermark as B

    wm = lambda *o: {"flights": {str(p): n for p, n in enumerate(o)}}
    promoted = [B(0, 1, 2, wm(10, 10)), B(1, 3, 3, wm(20, 15)), B(2, 4, 7, wm(30, 31))]
    replay = [B(0, 1, 1, wm(5, 5)), B(1, 2, 2, wm(20, 15)), B(2, 3, 4, wm(25, 30))]
    cut = common_cut("a/v2", replay, "a/v1", promoted)
    assert (cut["candidate_batch"], cut["candidate_snapshot"], cut["promoted_batch"], cut["promoted_snapshot"]) == (1, 2, 1, 3)
    assert cut["watermark"] == wm(20, 15)
    apart = common_cut("a/v2", replay[2:], "a/v1", promoted)
    assert apart == {"why": "no micro-batch of a/v1 covers the source offsets a/v2 batch 2 covers (flights[0:25,1:30]); "
                            "let both queries reach the same offsets (stop ingesting, run each until caught up) "
                            "and run the gate again"}
    unrecorded = common_cut("a/v2", [B(0, 1, 1, None)], "a/v1", promoted)
    assert unrecorded["why"].startswith("a/v2 has no micro-batch commit that records the source offsets")


def test_check_names_load_no_great_expectations_and_equal_the_gates_names():
    """Dagster's definitions name every check in every run process: the names come from the YAML
    alone (Great Expectations costs seconds to import), and they are the names the gate gives its
    GX results (repeats numbered the same way)."""
    import subprocess
    import sys

    from kappa.quality.gate import expectation_names, expectations
    from kappa.spec import parse_declaration

    probe = ("import sys; from kappa.config import load_settings; from kappa.spec import load_catalog; "
             "from kappa.quality.gate import check_names; "
             f"c = load_catalog(load_settings(project_dir={str(REPO)!r}).assets_dir); "
             "n = [x for s in c for x in check_names(s)]; "
             "print(len(n), 'great_expectations' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    count, loaded = out.stdout.split()
    assert int(count) > 10 and loaded == "False", out.stdout
    spec = parse_declaration("name: twice\nlayer: gold\nsource: {asset: flights}\ntransform: {sql: 'SELECT 1 AS a'}\n"
                             "expectations:\n  - expect_column_values_to_not_be_null: {column: a}\n"
                             "  - expect_column_values_to_not_be_null: {column: a}\n"
                             "  - expect_table_row_count_to_be_between: {min_value: 1}\n")
    assert expectation_names(spec) == ["expect_column_values_to_not_be_null__a",
                                       "expect_column_values_to_not_be_null__a_2", "expect_table_row_count_to_be_between"]
    assert [name for name, _ in expectations(spec)] == expectation_names(spec)
