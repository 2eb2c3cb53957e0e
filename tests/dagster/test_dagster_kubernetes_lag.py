"""Consumer lag on the kubernetes runner: Dagster's sensor reads the version's checkpoint (where
the query's SparkApplication wrote it: the object store on a cluster, ``file://`` here) and the log
end offsets with the pod's Kafka settings, so it shows the numbers ``kappa status`` shows and the
local runner's sensor shows. The broker and the query (Spark, run until caught up) are real; the
Kubernetes API is the in-memory stand-in of ``tests/kube_api.py``, saying the application runs."""

from __future__ import annotations

import json

import dagster as dg
from typer.testing import CliRunner

from kappa.dagster import kubernetes as dk
from kappa.dagster.component import SENSOR_NAME, StreamingAssets
from kappa.dagster.resources import KappaResource
from kappa.delta.registry import Registry
from kappa.ingest.events import nycflights13_events
from kappa.ingest.producer import produce
from kappa.kafka.topics import ensure_topics, offsets
from kappa.runners import run_until_caught_up
from kappa.spec import load_catalog
from tests.kube_api import KubeApi

K8S = {"namespace": "data", "image": "registry.example.com/kappa/kappa:1.2.3"}


def _sensor_health(settings, resource) -> dict[str, dg.AssetCheckEvaluation]:
    component = StreamingAssets(assets_dir=str(settings.assets_dir))
    sensor = next(s for s in dg.build_defs_for_component(component).sensors if s.name == SENSOR_NAME)
    result = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"kappa": resource}))
    return {e.asset_key.to_user_string(): e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)}


def test_the_kubernetes_sensor_reads_the_lag_kappa_status_reads(make_env, spark, monkeypatch):
    settings, suffix = make_env()
    # checkpoints by URI, as on a cluster (s3a:// there): the query writes, and both runners read, there
    settings = settings.model_copy(update={"checkpoints": f"file://{settings.home}/checkpoints"})
    topic = f"flights_{suffix}"
    catalog = load_catalog(settings.assets_dir)
    ensure_topics(settings, {topic: catalog.topics[topic]})
    events = nycflights13_events("flights", limit=900)
    rows = list(zip(events.keys, events.values, events.timestamps_ms.tolist()))
    produce(settings, topic, rows[:600])
    run_until_caught_up(settings, ["flights_bronze"], spark=spark)  # the query commits offsets 600
    produce(settings, topic, rows[600:])  # 300 records the checkpoint has not read
    version = Registry(settings).latest("flights_bronze")
    assert str(version.checkpoint_path).startswith("file:///")
    ends = {str(p.partition): p.end for p in offsets(settings, [topic])}
    assert sum(ends.values()) == 900

    base = KappaResource.from_settings(settings).model_dump()
    k8s_resource = KappaResource(**{**base, "runner": "kubernetes", "kubernetes": dict(K8S),
                                    "kubernetes_poll_s": 0.05})
    api = KubeApi()
    api.script(f"flights-bronze-v{version.version}", "RUNNING")
    with dk.use_kubernetes_api(api):
        runner = k8s_resource.build_runner(k8s_resource.settings())
        runner.start(catalog["flights_bronze"], version)
        [observed] = dk.observe(k8s_resource.settings(), catalog, runner, ["flights_bronze"])
        on_k8s = _sensor_health(settings, k8s_resource)["flights_bronze"]
    local = _sensor_health(settings, KappaResource.from_settings(settings))["flights_bronze"]

    committed = observed.committed[topic]
    assert sum(int(v) for v in committed.values()) == 600
    assert observed.lag == {topic: {p: end - int(committed.get(p, 0)) for p, end in ends.items()}}
    assert observed.total_lag == 300 and observed.end_offsets == {topic: ends}
    assert observed.healthy and observed.application == f"flights-bronze-v{version.version}"
    assert observed.application_state == "RUNNING" and observed.reason.endswith("; lag 300")
    # the sensor on both runners and `kappa status` show the same numbers
    for ev in (on_k8s, local):
        assert ev.metadata["consumer_lag"].value == 300, ev.metadata
        assert ev.metadata["consumer_lag_by_partition"].value == observed.lag
    monkeypatch.setenv("KAPPA_HOME", str(settings.home))
    monkeypatch.setenv("KAPPA_ASSETS_DIR", str(settings.assets_dir))
    monkeypatch.setenv("KAPPA_CHECKPOINTS", str(settings.checkpoints))
    monkeypatch.setenv("KAPPA_KAFKA_PORT", str(settings.kafka_port))
    from kappa.cli.app import app

    out = CliRunner().invoke(app, ["status", "flights_bronze", "--format", "json"])
    assert out.exit_code == 0, out.output
    [status] = json.loads(out.output)
    assert status["lag"] == observed.lag and status["total_lag"] == 300
