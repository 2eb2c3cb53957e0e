"""The local broker's client listener binds and advertises ``KAPPA_KAFKA_HOST`` (pods on the real
node reach it at the machine's address), its KRaft controller stays on loopback, and the default
bootstrap servers name that host."""

from __future__ import annotations

from kappa.config import load_settings
from kappa.kafka.broker import _server_properties


def _props(settings, tmp_path) -> dict[str, str]:
    lines = _server_properties(settings, tmp_path / "data").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_the_client_listener_is_on_the_kafka_host_and_the_controller_on_loopback(tmp_path):
    settings = load_settings(home=tmp_path, kafka_host="10.1.2.3", kafka_port=19092, kafka_controller_port=19093)
    props = _props(settings, tmp_path)
    assert props["listeners"] == "PLAINTEXT://10.1.2.3:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://10.1.2.3:19092"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert settings.bootstrap_servers == "10.1.2.3:19092"


def test_by_default_everything_is_on_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv("KAPPA_KAFKA_HOST", raising=False)
    monkeypatch.delenv("KAPPA_BOOTSTRAP_SERVERS", raising=False)
    settings = load_settings(home=tmp_path, kafka_port=19092, kafka_controller_port=19093)
    assert _props(settings, tmp_path)["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert settings.bootstrap_servers == "127.0.0.1:19092"
