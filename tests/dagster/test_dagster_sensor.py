"""The sensor with nothing to talk to: a broker that does not answer makes the Kafka-sourced assets
unhealthy (lag unknown) instead of silencing the tick. Registry only (delta-rs); no broker, no Spark."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import dagster as dg

from kappa.config import load_settings
from kappa.dagster.component import HEALTH_CHECK, SENSOR_NAME, StreamingAssets
from kappa.dagster.resources import KappaResource
from kappa.delta.registry import Registry
from kappa.spec import load_catalog

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def test_an_unreachable_broker_fails_query_health_quickly_and_names_the_broker(tmp_path, monkeypatch):
    import kappa.kafka.topics as topics

    calls: list[list[str]] = []
    real_offsets = topics.offsets

    def counted(settings, names, *args, **kwargs):
        calls.append(list(names))
        return real_offsets(settings, names, *args, **kwargs)

    monkeypatch.setattr(topics, "offsets", counted)
    shutil.copytree(REPO / "assets", tmp_path / "assets")
    port = _closed_port()
    settings = load_settings(project_dir=REPO, home=tmp_path / "home", assets_dir=tmp_path / "assets",
                             kafka_port=port)
    catalog = load_catalog(settings.assets_dir)
    registry = Registry(settings)
    for name in ("flights_bronze", "weather_bronze"):
        registry.create_version(name, catalog[name].fingerprint(), {})
    component = StreamingAssets(assets_dir=str(settings.assets_dir))
    sensor = next(s for s in dg.build_defs_for_component(component).sensors if s.name == SENSOR_NAME)
    started = time.monotonic()
    result = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(),
                                            resources={"kappa": KappaResource.from_settings(settings)}))
    elapsed = time.monotonic() - started
    health = {e.asset_key.to_user_string(): e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)}
    assert set(health) == {"flights_bronze", "weather_bronze"}  # only assets with a version
    for name, evaluation in health.items():
        assert evaluation.check_name == HEALTH_CHECK and not evaluation.passed, name
        assert f"127.0.0.1:{port}" in evaluation.description
    assert len(calls) == 1, f"one broker timeout per tick, not one per asset: {calls}"
    assert elapsed < 30, f"{elapsed:.0f} s"
