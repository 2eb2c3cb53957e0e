"""Dagster on the kubernetes runner (KAPPA_RUNNER=kubernetes), without a cluster.

The Kubernetes API is the in-memory stand-in of ``tests/kube_api.py`` (no API server can run here);
the registry (a real Delta table through delta-rs), the Kafka broker (start offsets, retention
check) and Dagster are real. No Spark runs: on this runner the Dagster process only creates and
observes SparkApplications.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import dagster as dg
import jsonschema
import pytest

from kappa.dagster import kubernetes as dk
from kappa.dagster.component import HEALTH_CHECK, SENSOR_NAME, StreamingAssets
from kappa.dagster.definitions import build_definitions
from kappa.dagster.resources import KappaResource
from kappa.delta.registry import Registry
from kappa.runners import kubernetes as k8s
from kappa.runners.kubernetes import AppStatus, Outcome
from tests.kube_api import KubeApi

ROOT = Path(__file__).resolve().parents[2]
K8S = {"namespace": "data", "image": "registry.example.com/kappa/kappa:1.2.3"}


# ------------------------------------------------------------------- the pure mapping, every state

#: state -> (materialize decision, query_health passed, health severity); streaming apps (the default).
EXPECTED = {
    "": ("pending", False, "WARN"),
    "SUBMITTED": ("pending", False, "WARN"),
    "PENDING_RERUN": ("pending", False, "WARN"),
    "INVALIDATING": ("pending", False, "WARN"),
    "RESUMING": ("pending", False, "WARN"),
    "RUNNING": ("materialized", True, "ERROR"),
    "FAILING": ("failed", False, "ERROR"),
    "SUBMISSION_FAILED": ("failed", False, "ERROR"),
    "SUSPENDING": ("pending", False, "WARN"),
    "SUSPENDED": ("pending", False, "WARN"),
    "FAILED": ("failed", False, "ERROR"),
    "UNKNOWN": ("failed", False, "ERROR"),
    # the operator reports a streaming driver that exited as completed: that is a failure
    "COMPLETED": ("failed", False, "ERROR"),
    "SUCCEEDING": ("failed", False, "ERROR"),
    "SOMETHING_NEW": ("failed", False, "ERROR"),
}


def _status(state: str | None, error: str = "") -> AppStatus:
    from kappa.config import load_settings

    runner = k8s.KubernetesRunner(k8s.KubernetesRunnerConfig(**K8S), load_settings(),
                                  k8s.SparkApplications("data", api=KubeApi()))
    app = None if state is None else {"status": {"applicationState": {"state": state, "errorMessage": error}}}
    return runner._status("flights", 3, "flights-v3", app)


def test_every_operator_state_is_covered():
    assert set(k8s.STATE_OUTCOMES) <= set(EXPECTED)


@pytest.mark.parametrize("state", sorted(EXPECTED))
def test_state_maps_to_the_right_dagster_outcome(state):
    kind, healthy, severity = EXPECTED[state]
    status = _status(state, error="driver OOMKilled" if state in ("FAILED", "FAILING") else "")
    assert dk.decide(status).kind == kind
    passed, sev, reason = dk.health_of(status)
    assert (passed, sev.value) == (healthy, severity)
    if kind == "materialized":
        event = dk.materialize_event(status, {})
        assert isinstance(event, dg.MaterializeResult)
        assert event.metadata["application"] == "flights-v3" and event.metadata["state"] == "RUNNING"
        assert event.metadata["namespace"] == "data" and event.metadata["version"] == 3
    elif kind == "pending":
        assert isinstance(dk.materialize_event(status, {}), dg.AssetObservation)
    else:
        with pytest.raises(dg.Failure) as exc:
            dk.materialize_event(status, {})
        assert "flights-v3" in exc.value.description
        if state in ("FAILED", "FAILING"):
            assert "driver OOMKilled" in exc.value.description and "driver OOMKilled" in reason
        if state in ("COMPLETED", "SUCCEEDING"):
            assert "never completes" in exc.value.description and "never completes" in reason


def test_a_missing_application_fails_both():
    status = _status(None)
    assert dk.decide(status).kind == "failed" and dk.health_of(status)[0] is False


def test_a_bounded_run_that_completed_is_a_success():
    status = dataclasses.replace(_status("COMPLETED"), outcome=Outcome.SUCCEEDED, error="")
    assert dk.decide(status).kind == "materialized" and dk.health_of(status)[0] is True


# ------------------------------------------------------------------------ Dagster end to end


@pytest.fixture(scope="module")
def crd_validator():
    path = ROOT / "build" / "tools" / "schemas" / "crds" / "sparkoperator.k8s.io" / "sparkapplication_v1beta2.json"
    if not path.exists():
        pytest.fail("SparkApplication CRD schema missing: run `make tools`")
    return jsonschema.Draft4Validator(json.loads(path.read_text()))


def _as_built(obj: dict) -> dict:
    """The object as the runner sent it (without what the API server and operator added)."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


@pytest.fixture
def k8s_env(make_env, monkeypatch):
    for key in [k for k in __import__("os").environ if k.startswith("KAPPA_K8S_")]:
        monkeypatch.delenv(key)
    settings, suffix = make_env()
    resource = _resource(settings, kubernetes_start_timeout_s=1.0)
    api = KubeApi()
    with dk.use_kubernetes_api(api):
        yield settings, suffix, resource, api


def _resource(settings, **fields) -> KappaResource:
    # (a ConfigurableResource is rebuilt from its constructor arguments: model_copy would be lost)
    base = KappaResource.from_settings(settings).model_dump()
    return KappaResource(**{**base, "runner": "kubernetes", "kubernetes": dict(K8S), "kubernetes_poll_s": 0.05,
                            **fields})


def _run(settings, resource, assets, instance=None):
    defs = build_definitions(settings.assets_dir, resource=resource)
    job = defs.get_implicit_global_asset_job_def()
    return job.execute_in_process(asset_selection=[dg.AssetKey(a) for a in assets],
                                  instance=instance or dg.DagsterInstance.ephemeral(), raise_on_error=False)


def _ui_status(instance, check_key) -> str:
    """The status the Dagster UI shows for the latest execution of ``check_key`` (its GraphQL
    resolves it with ``AssetCheckExecutionRecord.resolve_status``): a check planned by a run that
    finished without a result for it is ``SKIPPED``."""
    import asyncio

    from dagster._core.loader import LoadingContextForTest

    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([check_key])[check_key]
    return asyncio.run(record.resolve_status(LoadingContextForTest(instance))).value


def _sensor_health(settings, resource):
    component = StreamingAssets(assets_dir=str(settings.assets_dir))
    sensor = next(s for s in dg.build_defs_for_component(component).sensors if s.name == SENSOR_NAME)
    result = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"kappa": resource}))
    return {e.asset_key.to_user_string(): e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)}


def test_materialize_creates_running_applications_and_reports_them(k8s_env, crd_validator):
    settings, _, resource, api = k8s_env
    api.script("flights-v1", "SUBMITTED", "RUNNING")
    api.script("departures-hourly-v1", "RUNNING")
    instance = dg.DagsterInstance.ephemeral()
    result = _run(settings, resource, ["flights", "departures_hourly"], instance=instance)
    assert result.success
    assert api.names() == {"flights-v1", "departures-hourly-v1"}
    for name in api.names():
        crd_validator.validate(_as_built(api.app(name)))
    assert api.app("departures-hourly-v1")["spec"]["arguments"] == [
        "--asset", "departures_hourly", "--version", "1", "--upstream", "flights=1"]
    md = {m.asset_key.to_user_string(): m.metadata for node in ("flights", "departures_hourly")
          for m in result.asset_materializations_for_node(node)}
    assert md["flights"]["version"].value == 1 and md["flights"]["application"].value == "flights-v1"
    assert md["flights"]["namespace"].value == "data" and md["flights"]["state"].value == "RUNNING"
    assert md["flights"]["table_path"].value == Registry(settings).version("flights", 1).table_path
    assert md["departures_hourly"]["upstream_versions"].value == {"flights": 1}
    # gate checks are not evaluated in this mode: no result at all, and certainly no pass; the UI
    # shows each as skipped, and the materialization says the gate has not run
    assert [e for e in result.get_asset_check_evaluations() if e.check_name != HEALTH_CHECK] == []
    assert md["flights"]["gate"].value == dk.GATE_NOT_EVALUATED and md["flights"]["gate"].value.startswith("not evaluated")
    gate_checks = [k for k in result.job_def.asset_layer.asset_graph.asset_check_keys
                   if k.asset_key == dg.AssetKey("flights") and k.name != HEALTH_CHECK]
    assert gate_checks, "flights declares gate checks"
    assert {k.name: _ui_status(instance, k) for k in gate_checks} == {k.name: "SKIPPED" for k in gate_checks}
    assert Registry(settings).latest("flights").state == "running"

    # a second materialization observes the running applications (no second query on a checkpoint)
    assert _run(settings, resource, ["flights"]).success
    assert [c for c in api.calls if c[0] == "create" and "-peers-" not in c[1]] == [
        ("create", "flights-v1"), ("create", "departures-hourly-v1")]

    # the sensor: running passes; a streaming app the operator reports COMPLETED fails. It also reads
    # the lag (checkpoint against log end offsets, tests/dagster/test_dagster_kubernetes_lag.py), so
    # the topics exist, as the chart's KafkaTopics make them on a cluster
    from kappa.kafka.topics import ensure_topics
    from kappa.spec import load_catalog

    catalog = load_catalog(settings.assets_dir)
    ensure_topics(settings, {t: catalog.topics[t] for t in catalog["flights"].topics})
    health = _sensor_health(settings, resource)
    assert health["flights"].passed and health["departures_hourly"].passed
    assert health["flights"].metadata["consumer_lag"].value == 0
    api.set_state("flights-v1", "COMPLETED")
    api.set_state("departures-hourly-v1", "FAILED", "Job aborted: executor lost")
    health = _sensor_health(settings, resource)
    assert not health["flights"].passed and "never completes" in health["flights"].description
    assert health["flights"].severity == dg.AssetCheckSeverity.ERROR
    assert not health["departures_hourly"].passed and "executor lost" in health["departures_hourly"].description
    # the on-demand query_health check says the same
    from kappa.dagster.sensor import build_health_checks

    component = StreamingAssets(assets_dir=str(settings.assets_dir))
    [check] = build_health_checks(component.catalog, component.options, [component.catalog["flights"]])
    ev = check(dg.build_asset_check_context(resources={"kappa": resource}))
    assert not ev.passed and "never completes" in ev.description


@pytest.mark.parametrize("script,needle", [
    (("SUBMITTED", "FAILED:driver OOMKilled"), "driver OOMKilled"),
    (("SUBMITTED", "COMPLETED"), "never completes"),  # streaming COMPLETED: the driver exited
    (("SUBMISSION_FAILED:image pull back-off",), "image pull back-off"),
])
def test_a_failing_application_fails_the_run_with_the_operators_reason(k8s_env, script, needle):
    settings, _, resource, api = k8s_env
    api.script("flights-v1", *script)
    resource = _resource(settings, kubernetes_start_timeout_s=0.2)
    result = _run(settings, resource, ["flights", "departures_hourly"])
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert needle in failure.step_failure_data.user_failure_data.description
    assert "departures-hourly-v1" not in api.names()  # downstream never started
    if "FAILED" in script[-1] and "SUBMISSION" not in script[-1]:
        assert Registry(settings).latest("flights").state == "failed"


def test_an_application_still_pending_is_not_a_materialization(k8s_env):
    settings, _, resource, api = k8s_env  # nothing moves the state: the operator never picks it up
    result = _run(settings, resource, ["flights", "departures_hourly"])
    assert result.success
    assert result.asset_materializations_for_node("flights") == []
    obs = [e.event_specific_data.asset_observation for e in result.all_events
           if e.event_type_value == "ASSET_OBSERVATION"]
    assert [o.metadata["state"].value for o in obs] == ["NEW"]
    assert api.names() == {"flights-v1"}  # the downstream step is skipped: nothing to read yet


def test_replay_job_starts_the_new_chain_and_fails_when_it_does_not_catch_up(k8s_env, crd_validator):
    from kappa.ingest.nycflights13 import load_events, publish

    settings, suffix, resource, api = k8s_env
    publish(settings, [dataclasses.replace(e, topic=f"{e.topic}_{suffix}") for e in load_events(limit=5)])
    # weather too: assets downstream of flights (flights_weather) also read it
    for name in ("flights-v1", "weather-v1", "departures-hourly-v1"):
        api.script(name, "RUNNING")
    assert _run(settings, resource, ["flights", "weather", "departures_hourly"]).success
    Registry(settings).promote({"flights": 1, "weather": 1, "departures_hourly": 1})

    # the replay job: new versions, new applications pinned to the new upstream versions; the
    # stand-in runs nothing, so no checkpoint ever reaches the log end offsets: catch-up times out,
    # the run fails saying so, and the promoted versions and their applications are untouched.
    # (The whole replay -> gate -> promote on this runner, with the applications' commands run as
    # local processes, against the real API server and operator, is
    # tests/kubernetes/test_replay_on_the_plane.py.)
    for name in ("flights-v2", "departures-hourly-v2"):
        api.script(name, "SUBMITTED", "RUNNING")
    resource = _resource(settings, kubernetes_start_timeout_s=1.0, catch_up_timeout_s=0.5)
    defs = build_definitions(settings.assets_dir, resource=resource)
    res = defs.get_job_def("replay").execute_in_process(
        run_config={"ops": {"replay_asset": {"config": {"asset": "flights", "promote": True}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not res.success
    [failure] = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "flights/v2 did not catch up within" in failure.step_failure_data.user_failure_data.description
    assert api.names() == {"flights-v1", "weather-v1", "departures-hourly-v1", "flights-v2"}  # downstream waits for upstream
    for name in api.names():
        crd_validator.validate(_as_built(api.app(name)))
    registry = Registry(settings)
    assert registry.promoted("flights").version == 1 and registry.latest("flights").version == 2
    assert registry.latest("flights").state == "failed"
