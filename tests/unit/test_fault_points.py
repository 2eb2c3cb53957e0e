"""KAPPA_FAULT parsing: a bad value fails when the settings load, naming the variable."""

from __future__ import annotations

import pytest

from kappa.config import SettingsError, load_settings
from kappa.faults import FAULT_POINTS, Fault


def test_a_fault_point_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("KAPPA_FAULT", "flights:after_table_commit:4")
    assert load_settings().fault == Fault("flights", "after_table_commit", 4)
    monkeypatch.delenv("KAPPA_FAULT")
    assert load_settings().fault is None


@pytest.mark.parametrize("value, says", [
    ("flights:after_table_commit", "not three fields"),
    ("flights:after_commit:1", "unknown point 'after_commit'"),
    ("flights:before_write:-1", "not a non-negative integer"),
    (":before_write:1", "not three fields"),
])
def test_a_bad_fault_point_is_refused_at_load(monkeypatch, value, says):
    monkeypatch.setenv("KAPPA_FAULT", value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith(f"KAPPA_FAULT={value!r} is not valid") and says in message
    assert "<asset>:<point>:<batch_id>" in message and all(point in message for point in FAULT_POINTS)


def test_a_fault_fires_only_at_its_own_asset_point_and_batch():
    fault = Fault("flights", "before_write", 2)
    for point in FAULT_POINTS:  # returns: none of these is the fault point
        fault.hit("flights", point, 1)
        fault.hit("weather", point, 2)
    fault.hit("flights", "after_batch", 2)
