"""Fixtures of the chart tests: every ci/*-values.yaml scenario rendered once per session."""

from __future__ import annotations

import pytest

from helmtools import SCENARIOS, render


@pytest.fixture(scope="session", params=SCENARIOS)
def scenario(request) -> str:
    return request.param



@pytest.fixture(scope="session")
def rendered(scenario) -> list[dict]:
    return render(scenario)


@pytest.fixture(scope="session")
def default_objects() -> list[dict]:
    return render()
