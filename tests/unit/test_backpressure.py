"""Back-pressure by default: which ``maxOffsetsPerTrigger`` a query reading Kafka gets
(:meth:`kappa.config.Settings.kafka_batch_limit`). The bounded micro-batches themselves are shown
against the real broker and Spark in ``tests/integration/test_backpressure.py``."""

from __future__ import annotations

import pytest

from kappa.config import SettingsError, load_settings


@pytest.mark.parametrize("declared, continuous, expected", [
    (None, True, 500_000),          # the platform default bounds a continuous query
    (None, False, None),            # an available-now run (replay, catch-up) reads in one pass
    (500, True, 500),               # the asset's declaration wins over the default...
    (500, False, 500),              # ...in both trigger modes
    (1_000_000, True, 1_000_000),   # even when it is larger than the default
])
def test_declared_bound_wins_else_the_default_bounds_continuous_queries(declared, continuous, expected):
    assert load_settings().kafka_batch_limit(declared, continuous=continuous) == expected


def test_the_default_comes_from_the_environment_and_zero_turns_it_off(monkeypatch):
    monkeypatch.setenv("KAPPA_MAX_OFFSETS_PER_TRIGGER", "500")
    assert load_settings().kafka_batch_limit(None, continuous=True) == 500
    monkeypatch.setenv("KAPPA_MAX_OFFSETS_PER_TRIGGER", "0")
    assert load_settings().kafka_batch_limit(None, continuous=True) is None
    assert load_settings().kafka_batch_limit(7, continuous=True) == 7


def test_a_negative_bound_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("KAPPA_MAX_OFFSETS_PER_TRIGGER", "-1")
    with pytest.raises(SettingsError, match=r"^KAPPA_MAX_OFFSETS_PER_TRIGGER='-1' is not valid: expected an integer >= 0$"):
        load_settings()
