"""Dagster on the kubernetes runner against the real control plane: Dagster materializes an asset ->
the SparkApplication is created on the real API server -> the real Spark operator submits it
(spark-submit from pyspark) -> the driver pod is admitted and bound to the kwok node -> kwok reports
it Running -> the operator reports RUNNING -> Dagster records the materialization.

A driver failure: the kubelet stand-in (tests/kubernetes/kubelet.py, which says what it stands in
for) runs the driver's command as a local process and reports the container's non-zero exit; the
operator turns that into FAILED with its own message, and the Dagster run that finds the version's
application failed fails with that message.

The registry and the Kafka broker are real and local (start offsets, retention); no Spark job runs
for the materialization itself (on this runner Dagster only creates and observes applications).
"""

from __future__ import annotations

import dagster as dg
import pytest
from kubernetes import client

from tests.kubernetes.plane import ROOT, wait_for
from kappa.dagster.definitions import build_definitions
from kappa.dagster.resources import KappaResource
from kappa.delta.registry import Registry
from kappa.runners.kubernetes import SparkApplications, application_name, state_of
from kappa.runners.kubernetes.client import use_kubernetes_api
from tests.kubernetes.kubelet import KubeletStandIn

IMAGE = "registry.example.com/kappa/kappa:test"


@pytest.fixture
def env(make_env, monkeypatch, api_client, namespace):
    for key in [k for k in __import__("os").environ if k.startswith("KAPPA_K8S_")]:
        monkeypatch.delenv(key)
    settings, suffix = make_env()
    base = KappaResource.from_settings(settings).model_dump()
    resource = KappaResource(**{**base, "runner": "kubernetes", "kubernetes_poll_s": 0.25,
                                "kubernetes_start_timeout_s": 90.0, "kubernetes": {
                                    "namespace": namespace, "image": IMAGE, "on_failure_retries": "0",
                                    "on_submission_failure_retries": "0"}})
    apps = SparkApplications(namespace, client.CustomObjectsApi(api_client))
    with use_kubernetes_api(apps.api):
        yield settings, resource, apps, namespace


def _run(settings, resource, assets):
    defs = build_definitions(settings.assets_dir, resource=resource)
    job = defs.get_implicit_global_asset_job_def()
    return job.execute_in_process(asset_selection=[dg.AssetKey(a) for a in assets],
                                  instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)


LATE = """\
name: late_departures
layer: gold
owner: team:data-eng
source: {asset: flights}
transform:
  sql: SELECT event_id, event_time, dep_delay / 60.0 AS delay_hours FROM input WHERE dep_delay > 60
"""


def test_dagster_materializes_through_the_real_operator_and_observes_running(env, api_client, spark, monkeypatch):
    """A file-declared asset and one added at run time (recorded in the warehouse only, as
    ``add_asset`` does) both become SparkApplications the real operator submits; the declared one's
    version records the text its driver builds the query from (``kappa.runners.entrypoint`` reads
    it from the registry, never from the image's assets/)."""
    from kappa.lifecycle import declare
    from kappa.runners.entrypoint import version_and_spec

    settings, resource, apps, ns = env
    monkeypatch.setenv("KAPPA_HOME", str(settings.home))  # the code location reads declarations from here
    declare.add(settings, LATE, apply=True, who="ana@example.com", spark=spark)
    result = _run(settings, resource, ["flights", "late_departures"])
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    declared = apps.get("late-departures-v1")
    assert state_of(declared) == "RUNNING"
    args = declared["spec"]["arguments"]
    assert args[args.index("--asset") + 1] == "late_departures" and args[args.index("--version") + 1] == "1"
    version, spec = version_and_spec(settings, "late_departures", 1)
    assert version.source == "declarations:late_departures" and spec.text == LATE and spec.path is None
    [mat] = result.asset_materializations_for_node("flights")
    assert mat.metadata["state"].value == "RUNNING" and mat.metadata["application"].value == "flights-v1"
    app = apps.get("flights-v1")
    assert state_of(app) == "RUNNING" and app["status"]["driverInfo"]["podName"] == "flights-v1-driver"
    pod = client.CoreV1Api(api_client).read_namespaced_pod("flights-v1-driver", ns)
    assert pod.spec.node_name == "kwok-node-0" and pod.status.phase == "Running"
    assert Registry(settings).latest("flights").state == "running"


def test_a_driver_failure_fails_the_dagster_run_with_the_operators_message(env, api_client, tmp_path):
    settings, resource, apps, ns = env
    assert _run(settings, resource, ["flights"]).success
    name = application_name("flights", 1)
    # The kubelet stand-in runs the driver's command (python -m kappa.runners.entrypoint --asset
    # flights --version 1) with the pod's environment as a local process. Outside the image what the
    # driver needs is not there (the Spark session spark-submit prepares in the container, the s3a
    # object store, Kafka's TLS listener), so it exits non-zero, as a failing driver does.
    run = KubeletStandIn(api_client, tmp_path, cwd=ROOT).run(
        f"{name}-driver", ns, env_overrides={"KAPPA_HOME": str(tmp_path / "home")}, timeout_s=300)
    assert run.exit_code not in (0, None) and run.command[-4:] == ["--asset", "flights", "--version", "1"]
    wait_for(f"{name} FAILED", lambda: state_of(apps.get(name)) == "FAILED", timeout_s=60)
    message = apps.get(name)["status"]["applicationState"]["errorMessage"]
    assert message == f"driver container failed with ExitCode: {run.exit_code}, Reason: Error"

    result = _run(settings, resource, ["flights"])
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert message in failure.step_failure_data.user_failure_data.description
