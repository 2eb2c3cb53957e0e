"""Attacks on what runs Kappa's code, against a real API server (issue 23, items 4 and 7).

- Admission: the kappa chart's ValidatingAdmissionPolicies (022-ValidatingAdmissionPolicy-spark)
  admit a SparkApplication only with the Kappa image, the drivers' service account, Kappa's
  entrypoint and jars and the Secrets the chart names; and a pod the drivers' service account
  creates (an executor) only with the Kappa image and those Secrets. The runner's own
  SparkApplication (k8s/, generated) is admitted.
- RBAC: the drivers' service account, bound to the chart's Role (021-Role-spark-drivers), may
  create pods and nothing else it could turn against the platform (SubjectAccessReview).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubernetes.plane import CHART, DEFAULT_VALUES, client_as, helm, wait_for
from kappa.runners.kubernetes.naming import GROUP, PLURAL, VERSION

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = "kappa-spark"  # values.yaml spark.serviceAccount
IMAGE = "registry.example.com/kappa/kappa:0.1.0"  # the chart's default image
EVIL = "evil.example/miner:latest"
TEMPLATES = ("templates/021-Role-spark-drivers.yaml", "templates/022-ValidatingAdmissionPolicy-spark.yaml")


@pytest.fixture
def guarded(kubectl, namespace):
    """``namespace`` with the chart's drivers' Role and admission policies (cluster-scoped, named
    after the namespace; deleted afterwards), once the API server enforces them."""
    args = ["template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", namespace]
    for t in TEMPLATES:
        args += ["--show-only", t]
    rendered = helm(*args).stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=rendered)
    yield namespace
    kubectl("delete", "-f", "-", "--ignore-not-found", stdin=rendered, check=False)


def application(namespace: str) -> dict:
    """The runner's SparkApplication of flights_bronze v1 (k8s/, generated), in ``namespace``."""
    app = yaml.safe_load((ROOT / "k8s" / "sparkapplication-flights-bronze-v1.yaml").read_text())
    app["metadata"]["namespace"] = namespace
    return app


def create(api_client, namespace: str, body: dict) -> None:
    """Create ``body`` with a server-side dry run: admission runs, nothing is stored."""
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body,
                                                                         dry_run="All")


def refusal(call) -> str:
    """The API server's message for ``call()``, which must be refused (403/422)."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status in (403, 422), refused.value.body
    return refused.value.body


def _driver_container(app: dict) -> dict:
    return app["spec"]["driver"]["template"]["spec"]["containers"][0]


ATTACKS = {
    "another image": (lambda a: a["spec"].update(image=EVIL), "run the Kappa image"),
    "another executor image": (
        lambda a: a["spec"]["executor"]["template"]["spec"]["containers"][0].update(image=EVIL), "run the Kappa image"),
    "another service account": (lambda a: a["spec"]["driver"].update(serviceAccount="kappa-dagster"),
                                "service account kappa-spark only"),
    "an extra Secret in the environment": (
        lambda a: _driver_container(a)["env"].append(
            {"name": "PG", "valueFrom": {"secretKeyRef": {"name": "kappa-dagster-postgresql",
                                                          "key": "postgresql-password"}}}),
        "may reference only these Secrets"),
    "an extra Secret volume": (
        lambda a: a["spec"]["driver"]["template"]["spec"]["volumes"].append(
            {"name": "pw", "secret": {"secretName": "kappa-serve-users"}}),
        "may reference only these Secrets"),
    "the operator's secrets field": (
        lambda a: a["spec"]["driver"].update(secrets=[{"name": "kappa-dagster-postgresql", "path": "/s",
                                                       "secretType": "Generic"}]),
        "may reference only these Secrets"),
    "the image through sparkConf": (
        lambda a: a["spec"]["sparkConf"].update({"spark.kubernetes.container.image": EVIL}), "no spark.kubernetes"),
    "jars from the internet": (
        lambda a: a["spec"].update(deps={"jars": ["https://evil.example/x.jar"]}), "no deps"),
    "a writable root filesystem": (
        lambda a: _driver_container(a)["securityContext"].update(readOnlyRootFilesystem=False),
        "read-only root filesystem and an ephemeral-storage limit"),
    "executors without an ephemeral-storage limit": (
        lambda a: a["spec"]["executor"]["template"]["spec"]["containers"][0].pop("resources"),
        "read-only root filesystem and an ephemeral-storage limit"),
    "a sidecar": (
        lambda a: a["spec"]["driver"].update(sidecars=[{"name": "s", "image": IMAGE}]), "no sidecars"),
}


def test_the_runners_spark_application_is_admitted_and_each_attack_is_refused(api_client, guarded):
    namespace = guarded
    first_name, (first_change, first_message) = next(iter(ATTACKS.items()))
    bad = application(namespace)
    first_change(bad)
    # a policy takes effect once the API server's informer has it
    wait_for("the admission policy to be enforced",
             lambda: _refused(lambda: create(api_client, namespace, bad)), timeout_s=30)
    create(api_client, namespace, application(namespace))  # admitted
    for name, (change, message) in ATTACKS.items():
        app = application(namespace)
        change(app)
        body = refusal(lambda: create(api_client, namespace, app))
        assert message in body, (name, body)


def _refused(call) -> bool:
    try:
        call()
        return False
    except ApiException:
        return True


def executor_pod(image: str = IMAGE, **spec) -> dict:
    """A pod as a driver creates its executors (Pod Security "restricted" settings)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "exec-probe"},
            "spec": {"serviceAccountName": DRIVERS, "securityContext": {
                "runAsNonRoot": True, "runAsUser": 185, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "spark-kubernetes-executor", "image": image, "securityContext": {
                    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}], **spec}}


def test_a_driver_may_create_executor_pods_of_the_kappa_image_only(plane, api_client, guarded):
    namespace = guarded
    as_driver = client_as(plane, api_client, namespace, DRIVERS)
    core = client.CoreV1Api(as_driver)
    wait_for("the pod policy to be enforced",
             lambda: _refused(lambda: core.create_namespaced_pod(namespace, executor_pod(EVIL), dry_run="All")),
             timeout_s=30)
    core.create_namespaced_pod(namespace, executor_pod(), dry_run="All")  # an executor: admitted
    assert "Kappa image" in refusal(lambda: core.create_namespaced_pod(namespace, executor_pod(EVIL), dry_run="All"))
    stolen = executor_pod(volumes=[{"name": "pw", "secret": {"secretName": "kappa-dagster-postgresql"}}])
    assert "only these Secrets" in refusal(lambda: core.create_namespaced_pod(namespace, stolen, dry_run="All"))


def _allowed(api_client, namespace: str, verb: str, resource: str, group: str = "") -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{namespace}:{DRIVERS}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(namespace=namespace, verb=verb, group=group,
                                                        resource=resource)))
    return client.AuthorizationV1Api(api_client).create_subject_access_review(review).status.allowed


def test_the_drivers_service_account_may_manage_pods_and_nothing_else(api_client, guarded):
    namespace = guarded
    for verb in ("create", "get", "list", "watch", "delete"):
        assert _allowed(api_client, namespace, verb, "pods"), verb
    for verb, resource, group in (("get", "secrets", ""), ("list", "secrets", ""), ("create", "configmaps", ""),
                                  ("update", "configmaps", ""), ("patch", "configmaps", ""),
                                  ("create", "services", ""), ("create", PLURAL, GROUP),
                                  ("create", "rolebindings", "rbac.authorization.k8s.io"),
                                  ("patch", "pods", "")):
        assert not _allowed(api_client, namespace, verb, resource, group), (verb, resource)


# ------------------------------------------------------------ the Jobs Dagster launches (its runs)

DAGSTER = "kappa-dagster"  # values.yaml dagster.serviceAccount: the webserver's and daemon's


@pytest.fixture
def dagster_guarded(kubectl, namespace):
    """``namespace`` with Dagster's accounts, their Roles and the admission policy of run Jobs."""
    rendered = helm("template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", namespace,
                    "--show-only", "templates/011-ServiceAccount-dagster.yaml",
                    "--show-only", "templates/020-Role-dagster-sparkapplications.yaml",
                    "--show-only", "templates/023-ValidatingAdmissionPolicy-dagster-runs.yaml").stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=rendered)
    kubectl("create", "serviceaccount", DAGSTER, "-n", namespace)
    yield namespace
    kubectl("delete", "-f", "-", "--ignore-not-found", stdin=rendered, check=False)


def test_dagster_may_launch_its_run_job_and_no_other(plane, api_client, dagster_guarded, tmp_path):
    """The Job dagster-k8s's K8sRunLauncher builds from helm/values/dagster.yaml is admitted when
    the daemon's account creates it; the same Job with another image, account or Secret is not."""
    from test_dagster_run_launcher import build_launcher, run_job

    namespace = dagster_guarded
    batch = client.BatchV1Api(client_as(plane, api_client, namespace, DAGSTER))
    job = run_job(build_launcher(tmp_path))
    job["metadata"]["namespace"] = namespace

    def changed(change) -> dict:
        bad = copy.deepcopy(job)
        change(bad["spec"]["template"]["spec"])
        return bad

    attacks = {
        "another image": (lambda p: p["containers"][0].update(image=EVIL), "run the Kappa image"),
        "another service account": (lambda p: p.update(serviceAccountName=DRIVERS), "service account kappa-dagster-run only"),
        "the host network": (lambda p: p.update(hostNetwork=True), "without host namespaces"),
        "another Secret": (lambda p: p["containers"][0]["env"].append(
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "kappa-serve-users", "key": "users"}}}),
            "only these Secrets"),
    }
    first = changed(next(iter(attacks.values()))[0])
    wait_for("the Job policy to be enforced",
             lambda: _refused(lambda: batch.create_namespaced_job(namespace, first, dry_run="All")), timeout_s=30)
    batch.create_namespaced_job(namespace, job, dry_run="All")  # the launcher's own Job: admitted
    for name, (change, message) in attacks.items():
        body = refusal(lambda: batch.create_namespaced_job(namespace, changed(change), dry_run="All"))
        assert message in body, (name, body)


RUNS = "kappa-dagster-run"  # values.yaml dagster.runServiceAccount


@pytest.fixture
def peers_guarded(kubectl, namespace):
    """``namespace`` with Dagster's accounts and Roles (the run account may create NetworkPolicies)
    and the Spark admission policies, among them the peers policy's shape."""
    rendered = helm("template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", namespace,
                    "--show-only", "templates/011-ServiceAccount-dagster.yaml",
                    "--show-only", "templates/020-Role-dagster-sparkapplications.yaml",
                    "--show-only", "templates/022-ValidatingAdmissionPolicy-spark.yaml").stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=rendered)
    yield namespace
    kubectl("delete", "-f", "-", "--ignore-not-found", stdin=rendered, check=False)


def _peer(policy: dict, direction: str) -> dict:
    key = "from" if direction == "ingress" else "to"
    return policy["spec"][direction][0][key][0]


PEER_ATTACKS = {
    "every pod of the namespace": (lambda p: p["spec"].update(podSelector={}), "select the pods of one SparkApplication"),
    "the SQL endpoint's pods": (lambda p: p["spec"].update(podSelector={"matchLabels": {"app.kubernetes.io/component": "serve"}}),
                                "select the pods of one SparkApplication"),
    "ingress from any address": (lambda p: p["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}}),
                                 "reach each other and nothing else"),
    "egress to every namespace": (lambda p: _peer(p, "egress").update(namespaceSelector={}),
                                  "reach each other and nothing else"),
    "another application's pods": (
        lambda p: _peer(p, "ingress")["podSelector"]["matchLabels"].update({"sparkoperator.k8s.io/app-name": "serve"}),
        "reach each other and nothing else"),
    "an extra rule": (lambda p: p["spec"]["egress"].append({}), "reach each other and nothing else"),
    "no owner": (lambda p: p["metadata"].pop("ownerReferences"), "owned by the SparkApplication"),
}


def test_a_run_may_create_its_applications_peers_policy_and_no_other(plane, api_client, peers_guarded):
    """The run account creates each application's peers NetworkPolicy (the runner's, built by
    kappa.runners.kubernetes.application.build_peers_policy); any other NetworkPolicy it tries
    would add reachability the chart's policies deny, and admission refuses it. It may not
    delete or change the chart's policies (RBAC)."""
    from kappa.runners.kubernetes.application import build_peers_policy

    namespace = peers_guarded
    app = application(namespace)
    app["metadata"]["uid"] = "5f0c6a3e-8d1b-4a52-9a57-0d3f4b1e2c77"
    policy = build_peers_policy(app)
    net = client.NetworkingV1Api(client_as(plane, api_client, namespace, RUNS))

    def changed(change) -> dict:
        bad = copy.deepcopy(policy)
        change(bad)
        return bad

    first = changed(next(iter(PEER_ATTACKS.values()))[0])
    wait_for("the peers policy to be enforced",
             lambda: _refused(lambda: net.create_namespaced_network_policy(namespace, first, dry_run="All")),
             timeout_s=30)
    net.create_namespaced_network_policy(namespace, policy, dry_run="All")  # the runner's: admitted
    for name, (change, message) in PEER_ATTACKS.items():
        body = refusal(lambda: net.create_namespaced_network_policy(namespace, changed(change), dry_run="All"))
        assert message in body, (name, body)
    for call in (lambda: net.delete_namespaced_network_policy("kappa-default-deny-ingress", namespace, dry_run="All"),
                 lambda: net.patch_namespaced_network_policy("kappa-default-deny-ingress", namespace,
                                                             {"spec": {"podSelector": {"matchLabels": {"x": "y"}}}},
                                                             dry_run="All")):
        assert "forbidden" in refusal(call)
