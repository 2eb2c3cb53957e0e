"""A bad ``KAPPA_*`` value is a KappaError whose one line names the variable and what it takes,
and the ``kappa`` command prints that line (exit 1), not pydantic's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kappa.config import SettingsError, load_settings
from kappa.faults import FAULT_POINTS
from kappa.errors import KappaError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("variable, value, expected", [
    ("KAPPA_RUNNER", "foo", "expected one of local, kubernetes"),
    ("KAPPA_KAFKA_PORT", "abc", "expected an integer"),
    ("KAPPA_KAFKA_HOST", "kafka.example", "expected input is not a valid IPv4 address"),
    ("KAPPA_OBJECTSTORE_HOST", "x", "expected input is not a valid IPv4 address"),
    ("KAPPA_SHUFFLE_PARTITIONS", "0", "expected an integer >= 1"),
    ("KAPPA_SERVE_PORT", "70000", "expected an integer from 1 to 65535"),
    ("KAPPA_SPARK_UI", "maybe", "expected true or false"),
    ("KAPPA_FAULT", "x", "expected <asset>:<point>:<batch_id>, <point> one of " + ", ".join(FAULT_POINTS)),
    ("KAPPA_FAULT", "flights:nowhere:1", "(unknown point 'nowhere')"),
])
def test_a_bad_value_names_the_variable_and_what_it_takes(monkeypatch, variable, value, expected):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    message = str(err.value)
    assert isinstance(err.value, KappaError)
    assert message.startswith(f"{variable}={value!r} is not valid") and expected in message
    assert "\n" not in message
    field = variable.removeprefix("KAPPA_").lower()
    assert f"{field} " not in message and "validation error" not in message  # no pydantic wording


def test_every_bad_variable_is_named_on_one_line(monkeypatch):
    monkeypatch.setenv("KAPPA_RUNNER", "foo")
    monkeypatch.setenv("KAPPA_KAFKA_PORT", "abc")
    message = str(pytest.raises(SettingsError, load_settings).value)
    assert "KAPPA_RUNNER='foo'" in message and "KAPPA_KAFKA_PORT='abc'" in message and "\n" not in message


def test_an_override_is_named_as_the_override_of_its_variable():
    with pytest.raises(SettingsError) as err:
        load_settings(shuffle_partitions=0)
    assert str(err.value) == ("shuffle_partitions=0 (load_settings override of KAPPA_SHUFFLE_PARTITIONS) "
                              "is not valid: expected an integer >= 1")


def test_the_kappa_command_prints_one_line_and_exits_1():
    # `python -m kappa.cli` is the kappa command (the console script calls the same Typer app; the
    # image's driver runs this form), and it runs the kappa on sys.path, whichever checkout that is.
    env = {**os.environ, "KAPPA_RUNNER": "foo", "KAPPA_HOME": "/nonexistent/kappa-home", "COLUMNS": "60"}
    result = subprocess.run([sys.executable, "-m", "kappa.cli", "kafka", "status"], capture_output=True, text=True,
                            env=env, timeout=120, cwd=REPO)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: KAPPA_RUNNER='foo' is not valid: expected one of local, kubernetes"]
