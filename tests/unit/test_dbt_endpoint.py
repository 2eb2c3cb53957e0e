"""Which SQL endpoint dbt uses: with ``KAPPA_SERVE_HOST`` (the chart's ``kappa-config`` on
Kubernetes) the endpoint at that host, never one started here; the chart side (the ConfigMap sets
the variable to the ``kappa-serve`` Service) is in tests/helm/test_chart_security.py. The endpoint
here is a real TCP listener on loopback standing in for the Service (no Thrift server: what is
tested is where dbt is pointed and that nothing starts)."""

from __future__ import annotations

import socket
import time

import pytest

from kappa.analytics.dbt import dbt_env, ensure_endpoint
from kappa.config import load_settings
from kappa.harness.env import free_port
from kappa.services import serve
from kappa.services.serve import ServeError, client_credentials


@pytest.fixture
def listener():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


def _settings(tmp_path, port: int, **fields):
    return load_settings(home=str(tmp_path / "home"), serve_host="127.0.0.1", serve_port=port, **fields)


def test_dbt_uses_the_endpoint_at_kappa_serve_host_and_starts_none(tmp_path, listener):
    settings = _settings(tmp_path, listener, serve_user="dbt", serve_password="pw")
    endpoint = ensure_endpoint(settings)
    assert (endpoint.host, endpoint.port, endpoint.up) == ("127.0.0.1", listener, True)
    assert endpoint.jdbc_url == f"jdbc:hive2://127.0.0.1:{listener}/default"
    # nothing was started: no endpoint process of this state dir, not even its state folder
    assert serve.running_pid(settings) is None
    assert not (tmp_path / "home" / "serve").exists()
    # an endpoint on another host always checks passwords: dbt logs in with the run's credentials
    env = dbt_env(settings, endpoint.host, endpoint.port, client_credentials(settings, endpoint))
    assert env["DBT_TARGET"] == "serve_auth"
    assert (env["KAPPA_SERVE_HOST"], env["KAPPA_SERVE_PORT"]) == ("127.0.0.1", str(listener))
    assert (env["KAPPA_SERVE_USER"], env["KAPPA_SERVE_PASSWORD"]) == ("dbt", "pw")
    # `kappa dbt --port` still wins over KAPPA_SERVE_PORT
    assert ensure_endpoint(settings, port=listener).port == listener


def test_without_a_login_dbt_is_told_which_variables_to_set(tmp_path, listener):
    settings = _settings(tmp_path, listener)
    with pytest.raises(ServeError, match="KAPPA_SERVE_USER and KAPPA_SERVE_PASSWORD"):
        client_credentials(settings, ensure_endpoint(settings))


def test_an_endpoint_that_does_not_answer_fails_fast_and_starts_nothing(tmp_path):
    settings = _settings(tmp_path, free_port(), serve_user="dbt", serve_password="pw")
    began = time.monotonic()
    with pytest.raises(ServeError, match=r"127\.0\.0\.1:\d+ \(KAPPA_SERVE_HOST, KAPPA_SERVE_PORT\) does not answer"):
        ensure_endpoint(settings)
    assert time.monotonic() - began < 10
    assert serve.running_pid(settings) is None


def test_the_variable_is_read_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KAPPA_SERVE_HOST", "kappa-serve.kappa.svc")
    monkeypatch.setenv("KAPPA_SERVE_PORT", "10001")
    settings = load_settings(home=str(tmp_path))
    assert (settings.serve_host, settings.serve_port) == ("kappa-serve.kappa.svc", 10001)
    monkeypatch.delenv("KAPPA_SERVE_HOST")
    assert load_settings(home=str(tmp_path)).serve_host is None


def test_a_remote_endpoint_said_to_speak_tls_gets_tls_clients(tmp_path, listener):
    settings = _settings(tmp_path, listener, serve_user="dbt", serve_password="pw", serve_tls=True)
    endpoint = ensure_endpoint(settings)
    assert endpoint.tls and endpoint.jdbc_url == f"jdbc:hive2://127.0.0.1:{listener}/default;ssl=true"
    env = dbt_env(settings, endpoint.host, endpoint.port, client_credentials(settings, endpoint))
    # dbt never speaks its own (unverified) TLS: dbt_connection hands it a verifying relay
    # (tests/unit/test_tls_relay.py); dbt/profiles.yml's use_ssl is for runs by hand only
    assert "KAPPA_DBT_USE_SSL" not in env and "KAPPA_SERVE_TLS" not in env
