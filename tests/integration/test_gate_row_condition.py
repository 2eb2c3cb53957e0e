"""The gate's Great Expectations run over an expectation whose ``row_condition`` matches no row:
GX reports ``unexpected_count`` 0 with ``unexpected_percent`` None, which the gate formatted with
``:.4g`` (``TypeError: unsupported format string passed to NoneType.__format__``, issue 46)."""

from __future__ import annotations

import pytest

from kappa.quality.gate import _run_gx
from kappa.spec import load_catalog

pytestmark = pytest.mark.integration


def test_a_row_condition_that_matches_no_row_is_a_result_not_a_crash(spark, tmp_path):
    from kappa.config import load_settings
    from tests.conftest import REPO

    settings = load_settings(project_dir=REPO, home=tmp_path / "home", warehouse=tmp_path / "warehouse")
    flights = load_catalog(REPO / "assets", {})["flights"]
    spec = flights.model_copy(update={"expectations": [
        {"expect_column_values_to_not_be_null": {"column": "origin", "row_condition": "dep_delay > 5000",
                                                 "condition_parser": "spark"}},
        {"expect_column_values_to_not_be_null": {"column": "origin"}},
    ]})
    df = spark.createDataFrame([("EWR", 3.0), (None, 9.0)], "origin string, dep_delay double")
    checks, _ = _run_gx(spark, settings, spec, 1, df)
    matched_none, whole = checks
    # nothing measured: "not evaluated" (never "passed"), and it does not block the version
    assert (matched_none.evaluated, matched_none.passed, matched_none.blocking) == (False, False, False)
    assert matched_none.describe().startswith(f"{matched_none.name}: NOT EVALUATED")
    assert matched_none.observed == "no row matched its row_condition"
    assert whole.evaluated and whole.passed is False and whole.blocking
    assert whole.observed == "1 unexpected (50%)"
