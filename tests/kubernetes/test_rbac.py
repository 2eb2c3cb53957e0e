"""RBAC on a real API server: Dagster's service account may create, get, watch and delete
SparkApplications in its namespace, and nothing else (the kappa chart's Role and RoleBinding).

Checked twice: with SubjectAccessReviews (the authorizer's answer for each verb), and with real
requests made with a token the API server issued for that service account (TokenRequest)."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubernetes.plane import CHART, client_as, helm
from kappa.runners.kubernetes.naming import GROUP, PLURAL, VERSION

SA = "kappa-dagster"  # values.yaml dagster.serviceAccount


@pytest.fixture
def dagster_ns(kubectl, namespace):
    role = helm("template", "kappa", str(CHART), "-n", namespace, "--show-only",
                "templates/020-Role-dagster-sparkapplications.yaml").stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=role)
    kubectl("create", "serviceaccount", SA, "-n", namespace)
    return namespace


def _allowed(api_client, namespace: str, verb: str, resource: str, group: str = "", *, in_ns: str | None = None) -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{namespace}:{SA}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(
            namespace=in_ns or namespace, verb=verb, group=group, resource=resource)))
    return client.AuthorizationV1Api(api_client).create_subject_access_review(review).status.allowed


@pytest.mark.parametrize("verb", ["create", "get", "watch", "delete"])
def test_dagster_may_manage_spark_applications_in_its_namespace(api_client, dagster_ns, verb):
    assert _allowed(api_client, dagster_ns, verb, PLURAL, GROUP)


@pytest.mark.parametrize("verb,resource,group", [
    ("get", "secrets", ""), ("list", "secrets", ""), ("create", "pods", ""),
    ("update", PLURAL, GROUP), ("patch", PLURAL, GROUP), ("create", "rolebindings", "rbac.authorization.k8s.io"),
])
def test_dagster_may_not_do_anything_else(api_client, dagster_ns, verb, resource, group):
    assert not _allowed(api_client, dagster_ns, verb, resource, group)


@pytest.mark.parametrize("verb", ["create", "get", "delete"])
def test_dagster_may_not_touch_other_namespaces(api_client, dagster_ns, verb):
    assert not _allowed(api_client, dagster_ns, verb, PLURAL, GROUP, in_ns="default")


def test_real_requests_with_dagsters_token(api_client, plane, dagster_ns):
    as_dagster = client_as(plane, api_client, dagster_ns, SA)
    apps = client.CustomObjectsApi(as_dagster)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SparkApplication", "metadata": {"name": "rbac-probe"},
            "spec": {"type": "Python", "mode": "cluster", "sparkVersion": "4.1.3",
                     "mainApplicationFile": "local:///opt/kappa/bin/entrypoint.py",
                     # suspended: the operator leaves it alone
                     "suspend": True, "driver": {}, "executor": {}}}
    apps.create_namespaced_custom_object(GROUP, VERSION, dagster_ns, PLURAL, body)
    assert apps.get_namespaced_custom_object(GROUP, VERSION, dagster_ns, PLURAL, "rbac-probe")["metadata"]["name"] == "rbac-probe"
    for call in (lambda: client.CoreV1Api(as_dagster).list_namespaced_secret(dagster_ns),
                 lambda: apps.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body),
                 lambda: client.CoreV1Api(as_dagster).create_namespaced_pod(dagster_ns, {
                     "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                     "spec": {"containers": [{"name": "c", "image": "x"}]}})):
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403
    apps.delete_namespaced_custom_object(GROUP, VERSION, dagster_ns, PLURAL, "rbac-probe")
