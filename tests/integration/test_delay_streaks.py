"""delay_streaks: complex event processing (a pattern per tailnum) on real Kafka, Spark and Delta,
checked against a plain-Python computation of the same rule (tests/integration/helpers.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from kappa.promotion import promote, replay
from kappa.runners.local import run_until_caught_up

from .helpers import assert_streaks_equal, expected_delay_streaks, ingest, table

pytestmark = pytest.mark.integration

SLICE = 20_000  # the first 20,000 flights (to 2013-01-24): 10 matches
ASSETS = ["flights", "delay_streaks"]


def _emitted(expected: pd.DataFrame, latest: pd.Timestamp) -> pd.DataFrame:
    """The matches a stream has written once it has read the whole log: those whose last departure
    is at or before the final watermark (latest event time - the asset's 2-hour delay); the others
    wait in state for later events."""
    return expected[expected.last_event_time <= latest - pd.Timedelta(hours=2)]


def test_slice_equals_the_independent_computation_and_a_replay_equals_v1(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=SLICE, disorder_minutes=5)
    results = {r.asset: r for r in run_until_caught_up(settings, ASSETS, spark=spark)}
    expected, latest = expected_delay_streaks(SLICE)
    v1 = table(settings, "delay_streaks")
    assert len(v1) >= 5
    assert_streaks_equal(v1, _emitted(expected, latest))
    assert results["delay_streaks"].dropped_by_watermark == 0 and results["delay_streaks"].late_events == 0

    for asset in ASSETS:
        promote(settings, asset, 1, spark=spark)  # runs the gate: GX suite, late_rows, shadow_diff
    report = replay(settings, "delay_streaks", promote=True, spark=spark)
    assert report.versions == {"delay_streaks": 2} and report.passed
    checks = {c.name: c for c in report.gates["delay_streaks"].checks}
    assert checks["late_rows"].passed and checks["late_rows"].observed == 0
    assert checks["expect_compound_columns_to_be_unique__tailnum_first_event_time"].passed
    assert_streaks_equal(table(settings, "delay_streaks", 2), v1)  # row for row, arrays in order
