"""`kappa chaos` fails when a recovery misses its target, unless told to only report."""

from __future__ import annotations

from kappa.harness.chaos import verdict


def summary(recoveries, within_target, enforced=True, all_equal=True):
    return {"kills": [{"recovery_s": r} for r in recoveries], "within_target": within_target,
            "targets_enforced": enforced, "all_equal": all_equal, "ingest_errors": [],
            "unexpected_pipeline_exits": 0}


def test_a_recovery_over_its_target_fails_the_run():
    assert verdict(summary([12.0, 75.0], within_target=False), 2) is False


def test_no_targets_only_reports_the_times():
    assert verdict(summary([12.0, 75.0], within_target=False, enforced=False), 2) is True


def test_every_table_exact_and_every_kill_recovered_in_time_passes():
    assert verdict(summary([12.0, 20.0], within_target=True), 2) is True
    assert verdict(summary([12.0, None], within_target=False, enforced=False), 2) is False
    assert verdict(summary([12.0, 20.0], within_target=True, all_equal=False), 2) is False
