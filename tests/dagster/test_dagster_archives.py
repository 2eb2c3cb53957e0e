"""The ``kappa_archives`` sensor (kappa.dagster.archives): the query of every topic's archive kept
running. The registry (a real Delta table) and Dagster are real; the Kubernetes API is the
in-memory stand-in of ``tests/kube_api.py``, which reports the application states the Spark
operator would (a test cannot make a real operator fail a driver on demand)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kappa.dagster import kubernetes as dk
from kappa.dagster.component import StreamingAssets
from kappa.dagster.resources import KappaResource
from kappa.delta.registry import Registry
from kappa.runners.kubernetes.naming import GROUP, PLURAL, VERSION, application_name
from tests.kube_api import KubeApi

REPO = Path(__file__).resolve().parents[2]
K8S = {"namespace": "data", "image": "registry.example.com/kappa/kappa:1.2.3"}


def _defs(monkeypatch, runner: str) -> dg.Definitions:
    monkeypatch.setenv("KAPPA_RUNNER", runner)
    return dg.build_defs_for_component(StreamingAssets(assets_dir=str(REPO / "assets")))


def _sensor(monkeypatch, runner: str) -> dg.SensorDefinition:
    return next(s for s in _defs(monkeypatch, runner).sensors if s.name == "kappa_archives")


def _tick(sensor: dg.SensorDefinition, resource: KappaResource) -> dict[str, dg.RunRequest]:
    result = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"kappa": resource}))
    if isinstance(result, dg.SkipReason):
        return {}
    return {r.tags["kappa/archive"]: r for r in result}


def test_the_archive_sensor_is_on_by_default_on_kubernetes_and_off_on_the_local_runner(monkeypatch):
    local = _sensor(monkeypatch, "local")
    assert local.default_status == dg.DefaultSensorStatus.STOPPED
    defs = _defs(monkeypatch, "kubernetes")
    on_k8s = next(s for s in defs.sensors if s.name == "kappa_archives")
    assert on_k8s.default_status == dg.DefaultSensorStatus.RUNNING
    assert sorted(k.to_user_string() for k in on_k8s.asset_selection.resolve(
        dg.Definitions.merge(defs, dg.Definitions(resources={"kappa": KappaResource()})).resolve_asset_graph())) == [
        "flights_bronze", "weather_bronze"]


def test_the_archive_sensor_starts_an_archive_that_never_ran_or_stopped_and_leaves_a_running_one(tmp_path, monkeypatch):
    sensor = _sensor(monkeypatch, "kubernetes")
    resource = KappaResource(home=str(tmp_path), assets_dir=str(REPO / "assets"), runner="kubernetes",
                             kubernetes=dict(K8S), kubernetes_poll_s=0.05)
    api = KubeApi()
    with dk.use_kubernetes_api(api):
        # A fresh deployment: no version of either archive yet; both are started, continuous.
        first = _tick(sensor, resource)
        assert sorted(first) == ["flights_bronze", "weather_bronze"]
        assert first["flights_bronze"].run_key == "flights_bronze:new"
        assert first["flights_bronze"].asset_selection == [dg.AssetKey("flights_bronze")]
        assert first["flights_bronze"].run_config == {"ops": {"flights_bronze": {"config": {"mode": "continuous"}}}}

        # v1 of flights_bronze runs (its SparkApplication RUNNING): only weather_bronze is asked for.
        registry = Registry(resource.settings())
        registry.create_version("flights_bronze", "f", {})
        name = application_name("flights_bronze", 1)
        api.create_namespaced_custom_object(GROUP, VERSION, "data", PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "SparkApplication", "metadata": {"name": name}})
        for state in ("SUBMITTED", "RUNNING", "PENDING_RERUN"):  # pending, running, retrying: alive
            api.set_state(name, state)
            assert sorted(_tick(sensor, resource)) == ["weather_bronze"], state

        # Its driver failed for good: one restart is asked for, with the same key on every tick
        # until something changes (Dagster runs a run key once).
        api.set_state(name, "FAILED", "driver OOMKilled")
        failed = _tick(sensor, resource)["flights_bronze"]
        assert failed.run_key.startswith("flights_bronze:v1:failed:")
        assert _tick(sensor, resource)["flights_bronze"].run_key == failed.run_key
        # The restart ran and the query stopped again: a new key, so a new restart.
        registry.record("flights_bronze", 1, "running", mode="kubernetes, continuous")
        again = _tick(sensor, resource)["flights_bronze"]
        assert again.run_key.startswith("flights_bronze:v1:failed:") and again.run_key != failed.run_key
