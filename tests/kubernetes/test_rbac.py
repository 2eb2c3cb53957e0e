"""RBAC on a real API server: Dagster's four identities (the kappa chart's ServiceAccounts, Roles
and RoleBindings, issue 23 item 3). Only the run pods' account may create SparkApplications; the
daemon's (and the writable webserver's) account launches run Jobs and nothing else; the code
location's only reads SparkApplications; the read-only webserver's may do nothing at all. None of
them may create pods, read Secrets or touch RBAC.

Checked twice: with SubjectAccessReviews (the authorizer's answer for each verb), and with real
requests made with a token the API server issued for the run account (TokenRequest)."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubernetes.plane import CHART, DEFAULT_VALUES, client_as, helm
from kappa.runners.kubernetes.naming import GROUP, PLURAL, VERSION

RUNS = "kappa-dagster-run"  # values.yaml dagster.runServiceAccount
WEBSERVER = "kappa-dagster"  # dagster.serviceAccount: the webserver's and the daemon's (one in the Dagster chart)
CODE_LOCATION = "kappa-dagster-code-location"  # dagster.codeLocationServiceAccount
READ_ONLY_WEBSERVER = "kappa-dagster-webserver"  # dagster.webserverServiceAccount (helm/postrender/kappa-dagster-webservers)


@pytest.fixture
def dagster_ns(kubectl, namespace):
    rendered = helm("template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", namespace,
                    "--show-only", "templates/011-ServiceAccount-dagster.yaml",
                    "--show-only", "templates/020-Role-dagster-sparkapplications.yaml").stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=rendered)
    kubectl("create", "serviceaccount", WEBSERVER, "-n", namespace)  # the Dagster chart creates it
    return namespace


def _allowed(api_client, namespace: str, verb: str, resource: str, group: str = "", *, sa: str = RUNS,
             in_ns: str | None = None) -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{namespace}:{sa}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(
            namespace=in_ns or namespace, verb=verb, group=group, resource=resource)))
    return client.AuthorizationV1Api(api_client).create_subject_access_review(review).status.allowed


@pytest.mark.parametrize("verb", ["create", "get", "watch", "delete"])
def test_dagster_runs_may_manage_spark_applications_in_their_namespace(api_client, dagster_ns, verb):
    assert _allowed(api_client, dagster_ns, verb, PLURAL, GROUP)


@pytest.mark.parametrize("verb,resource,group", [
    ("get", "secrets", ""), ("list", "secrets", ""), ("update", "secrets", ""), ("patch", "secrets", ""),
    ("delete", "secrets", ""), ("create", "pods", ""), ("create", "jobs", "batch"), ("update", PLURAL, GROUP), ("patch", PLURAL, GROUP), ("create", "rolebindings", "rbac.authorization.k8s.io"),
    # the peers NetworkPolicies: created, never changed or deleted (the garbage collector does)
    ("update", "networkpolicies", "networking.k8s.io"), ("patch", "networkpolicies", "networking.k8s.io"),
    ("delete", "networkpolicies", "networking.k8s.io"), ("list", "networkpolicies", "networking.k8s.io"),
])
def test_dagster_runs_may_not_do_anything_else(api_client, dagster_ns, verb, resource, group):
    assert not _allowed(api_client, dagster_ns, verb, resource, group)


@pytest.mark.parametrize("verb", ["create", "get"])
def test_dagster_runs_may_create_their_applications_peers_network_policies(api_client, dagster_ns, verb):
    # what they may create is held by admission (tests/kubernetes/test_admission.py)
    assert _allowed(api_client, dagster_ns, verb, "networkpolicies", "networking.k8s.io")


@pytest.mark.parametrize("verb", ["create", "get", "delete"])
def test_dagster_runs_may_not_touch_other_namespaces(api_client, dagster_ns, verb):
    assert not _allowed(api_client, dagster_ns, verb, PLURAL, GROUP, in_ns="default")


@pytest.mark.parametrize("sa", [WEBSERVER, CODE_LOCATION])
@pytest.mark.parametrize("verb,resource,group", [
    ("create", "pods", ""), ("get", "secrets", ""), ("list", "secrets", ""), ("create", PLURAL, GROUP),
    ("delete", PLURAL, GROUP), ("create", "rolebindings", "rbac.authorization.k8s.io"),
    ("update", "configmaps", ""),
])
def test_the_webserver_and_the_code_location_cannot_create_pods_read_secrets_or_start_applications(
        api_client, dagster_ns, sa, verb, resource, group):
    assert not _allowed(api_client, dagster_ns, verb, resource, group, sa=sa)


@pytest.mark.parametrize("verb,resource,group", [
    ("get", "pods", ""), ("list", "pods", ""), ("get", "pods/log", ""), ("create", "jobs", "batch"),
    ("delete", "jobs", "batch"), ("get", PLURAL, GROUP), ("list", "secrets", ""), ("list", "configmaps", ""),
])
def test_the_read_only_webservers_account_may_do_nothing(api_client, dagster_ns, verb, resource, group):
    assert not _allowed(api_client, dagster_ns, verb, resource, group, sa=READ_ONLY_WEBSERVER)


def test_the_chart_creates_the_read_only_webservers_account_without_a_token(dagster_ns, kubectl):
    account = kubectl("get", "serviceaccount", READ_ONLY_WEBSERVER, "-n", dagster_ns, "-o",
                      "jsonpath={.automountServiceAccountToken}")
    assert account.stdout.strip() == "false"


def test_the_daemon_launches_run_jobs_and_the_code_location_reads_applications(api_client, dagster_ns):
    for verb in ("create", "get", "watch", "delete"):
        assert _allowed(api_client, dagster_ns, verb, "jobs", "batch", sa=WEBSERVER), verb
    assert _allowed(api_client, dagster_ns, "get", "pods", sa=WEBSERVER)
    assert not _allowed(api_client, dagster_ns, "create", "jobs", "batch", sa=CODE_LOCATION)
    for verb in ("get", "list", "watch"):
        assert _allowed(api_client, dagster_ns, verb, PLURAL, GROUP, sa=CODE_LOCATION), verb


def test_real_requests_with_the_run_accounts_token(api_client, plane, dagster_ns):
    as_run = client_as(plane, api_client, dagster_ns, RUNS)
    apps = client.CustomObjectsApi(as_run)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SparkApplication", "metadata": {"name": "rbac-probe"},
            "spec": {"type": "Python", "mode": "cluster", "sparkVersion": "4.1.3",
                     "mainApplicationFile": "local:///opt/kappa/bin/entrypoint.py",
                     # suspended: the operator leaves it alone
                     "suspend": True, "driver": {}, "executor": {}}}
    apps.create_namespaced_custom_object(GROUP, VERSION, dagster_ns, PLURAL, body)
    assert apps.get_namespaced_custom_object(GROUP, VERSION, dagster_ns, PLURAL, "rbac-probe")["metadata"]["name"] == "rbac-probe"
    as_webserver = client.CustomObjectsApi(client_as(plane, api_client, dagster_ns, WEBSERVER))
    for call in (lambda: client.CoreV1Api(as_run).list_namespaced_secret(dagster_ns),
                 lambda: apps.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body),
                 lambda: client.CoreV1Api(as_run).create_namespaced_pod(dagster_ns, {
                     "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                     "spec": {"containers": [{"name": "c", "image": "x"}]}}),
                 lambda: as_webserver.create_namespaced_custom_object(GROUP, VERSION, dagster_ns, PLURAL, body)):
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403
    apps.delete_namespaced_custom_object(GROUP, VERSION, dagster_ns, PLURAL, "rbac-probe")
