"""dbt over the promoted tables: ``kappa dbt build`` (or any dbt command) from the repo root.

The dbt project lives in ``dbt/`` (dbt-core 1.11, dbt-spark 1.11). It connects with
``method: thrift`` to ``kappa serve``, so dbt reads the same catalog BI tools query: each source is
the stable name of a promoted table, and a promotion or rollback is what the next dbt run reads.
Marts are Delta tables under ``<warehouse>/_dbt/<model>`` (readable without Spark through
:func:`kappa.tables.open`).

Why Thrift and not ``method: session``: a session would start a second Spark driver inside dbt with
its own in-memory catalog, so its marts would be invisible to the endpoint BI tools use, and every
dbt invocation would pay a JVM start; through the endpoint, dbt's models appear to BI tools as soon
as they are built and the endpoint's warm driver runs them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kappa.config import Settings
from kappa.errors import KappaError


def project_dir(settings: Settings) -> Path:
    """``<project>/dbt``: the dbt project (and its ``profiles.yml``)."""
    return settings.project_dir / "dbt"


def dbt_executable() -> str:
    """The ``dbt`` of this interpreter's environment (the project venv), not whatever is on PATH."""
    return str(Path(sys.executable).with_name("dbt"))


def dbt_env(settings: Settings, host: str, port: int, credentials: tuple[str, str] | None = None) -> dict[str, str]:
    """The environment ``dbt/profiles.yml`` and ``dbt/dbt_project.yml`` read, for dbt to connect to
    ``host``:``port`` in plain Thrift (an endpoint speaking TLS is reached through
    :func:`dbt_connection`'s relay, never with dbt-spark's unverified ``use_ssl``). With
    ``credentials`` (user, password) dbt uses the profile's ``serve_auth`` target (HiveServer2
    CUSTOM, SASL PLAIN)."""
    from kappa.services.serve import marts_root

    auth = {"DBT_TARGET": "serve"} if credentials is None else {
        "DBT_TARGET": "serve_auth", "KAPPA_SERVE_USER": credentials[0], "KAPPA_SERVE_PASSWORD": credentials[1]}
    return {
        **auth,
        "KAPPA_SERVE_HOST": host,
        "KAPPA_SERVE_PORT": str(port),
        "KAPPA_DBT_LOCATION_ROOT": str(marts_root(settings)),
        "DBT_PROFILES_DIR": str(project_dir(settings)),
        "DBT_PROJECT_DIR": str(project_dir(settings)),
        "DBT_TARGET_PATH": str(target_dir(settings)),
        "DBT_LOG_PATH": str((settings.home or Path(".kappa")) / "dbt" / "logs"),
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    }


def ensure_endpoint(settings: Settings, port: int | None = None):
    """The endpoint dbt talks to (a :class:`kappa.services.serve.ServeStatus`): with
    ``KAPPA_SERVE_HOST`` set (the chart's ``kappa-config`` sets it to the ``kappa-serve`` Service,
    so every Dagster run pod on Kubernetes has it), that endpoint, checked to answer and never
    started here (:func:`kappa.services.serve.remote`); otherwise the running ``kappa serve`` of
    this state dir, started (on ``port``, default ``settings.serve_port``: ``KAPPA_SERVE_PORT`` or
    10000) if it is not running. Raises :class:`kappa.services.serve.ServeError` if the remote
    endpoint does not answer or the local one cannot start."""
    from kappa.services import serve

    if settings.serve_host:
        return serve.remote(settings, port=port)
    return serve.SERVICE.ensure_running(settings, timeout_s=180.0, port=port)


@contextlib.contextmanager
def dbt_connection(settings: Settings, endpoint) -> Iterator[dict[str, str]]:
    """The :func:`dbt_env` for dbt to reach ``endpoint`` (a :class:`kappa.services.serve.ServeStatus`),
    valid inside the ``with``: its own host and port, or, when it speaks TLS, the loopback address of
    a :func:`kappa.services.tls_relay.tls_relay` that carries dbt's connections over TLS with the
    endpoint's certificate verified against ``settings.serve_tls_ca_file``
    (``KAPPA_SERVE_TLS_CA_FILE``; default the system's certificate authorities). dbt-spark's own
    ``use_ssl`` encrypts without verifying (``CERT_NONE``), so it is never used. Raises
    :class:`kappa.services.serve.ServeError` when the endpoint's certificate does not verify, naming
    why, before dbt starts."""
    from kappa.services.serve import client_credentials
    from kappa.services.tls_relay import tls_relay

    credentials = client_credentials(settings, endpoint)
    if not endpoint.tls:
        yield dbt_env(settings, endpoint.host, endpoint.port, credentials)
        return
    with tls_relay(endpoint.host, endpoint.port, settings.serve_tls_ca_file) as (host, port):
        yield dbt_env(settings, host, port, credentials)


def run_dbt(settings: Settings, args: list[str], port: int | None = None, capture: bool = False) -> subprocess.CompletedProcess:
    """Run ``dbt ARGS`` (e.g. ``["build"]``) against the endpoint (started if needed), through
    :func:`dbt_connection`; returns the finished process (dbt's exit status: 0 ok, 1 a model or test
    failed, 2 an error). Raises :class:`kappa.services.serve.ServeError` when the endpoint does not
    answer or its certificate does not verify."""
    with dbt_connection(settings, ensure_endpoint(settings, port)) as dbt:
        return subprocess.run([dbt_executable(), *args], env={**os.environ, **dbt}, cwd=project_dir(settings),
                              text=True, capture_output=capture)


def target_dir(settings: Settings) -> Path:
    """Where dbt writes its artifacts (``manifest.json``, ``run_results.json``)."""
    return (settings.home or Path(".kappa")) / "dbt" / "target"


def manifest(settings: Settings) -> Path:
    """``manifest.json`` of the dbt project, re-parsed (``dbt parse``, no connection needed) when
    any file of the project is newer than it. Raises :class:`DbtError` with dbt's output when the
    project does not parse."""
    path = target_dir(settings) / "manifest.json"
    project = project_dir(settings)
    newest = max((p.stat().st_mtime for p in project.rglob("*") if p.is_file()), default=0.0)
    if path.exists() and path.stat().st_mtime >= newest:
        return path
    env = {**os.environ, **dbt_env(settings, "127.0.0.1", 10000)}
    done = subprocess.run([dbt_executable(), "parse", "--quiet"], env=env, cwd=project, text=True, capture_output=True)
    if done.returncode != 0 or not path.exists():
        raise DbtError(f"dbt parse of {project} failed:\n{done.stdout}{done.stderr}")
    return path


class DbtError(KappaError, RuntimeError):
    """The dbt project does not parse, or a dbt command failed; dbt's own output says where."""
