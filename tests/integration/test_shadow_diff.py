"""The shadow diff (kappa.quality.gate.shadow_diff) on Spark frames: row counts, the keys present on
one side only (null keys equal, as in SQL's EXCEPT), their first examples by key order, and the
column sums that differ."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kappa.quality.gate import shadow_diff

pytestmark = pytest.mark.integration


def test_keys_on_one_side_are_counted_and_shown_and_sums_compared(spark):
    spec = SimpleNamespace(merge_keys=["origin", "hour"], shadow_diff_blocking=True)
    rows = [("EWR", h, 1.0) for h in range(10)] + [(None, 0, 2.0)]
    promoted = spark.createDataFrame(rows, "origin string, hour int, n double")
    # candidate: EWR hours 0-2 missing, JFK hours 0-6 new, the null-origin key kept, EWR 9 twice
    candidate = spark.createDataFrame([r for r in rows if not (r[0] == "EWR" and r[1] < 3)]
                                      + [("JFK", h, 1.0) for h in range(7)] + [("EWR", 9, 1.0)],
                                      "origin string, hour int, n double")
    check = shadow_diff(spark, spec, candidate, promoted, 2, 1)
    d = check.details
    assert (check.passed, check.blocking) == (False, True)
    assert (d["rows_candidate"], d["rows_promoted"]) == (16, 11)
    assert (d["keys_only_in_candidate"], d["keys_only_in_promoted"]) == (7, 3)
    assert d["examples_only_in_candidate"] == [{"origin": "JFK", "hour": h} for h in range(5)]
    assert d["examples_only_in_promoted"] == [{"origin": "EWR", "hour": h} for h in range(3)]
    assert d["aggregate_differences"]["n"]["candidate_sum"] == 17.0 and d["aggregate_differences"]["n"]["promoted_sum"] == 12.0
    assert check.observed == "rows 11 -> 16, 7 new keys, 3 missing keys, 1 column sums differ"

    same = shadow_diff(spark, spec, promoted, promoted, 2, 1)
    assert same.passed and same.observed == "no difference"
    assert (same.details["keys_only_in_candidate"], same.details["examples_only_in_promoted"]) == (0, [])
