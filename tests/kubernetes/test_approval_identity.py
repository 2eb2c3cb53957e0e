"""`kappa approve` on the kubernetes runner records the approver as the real API server
authenticated them (a SelfSubjectReview), and a service account (any pod: a Dagster run, a driver)
cannot approve (issue 40, item 4). No request is run here: only who may approve it."""

from __future__ import annotations

import pytest

from kappa.config import load_settings
from kappa.lifecycle.approval import ApprovalError, approver_identity
from tests.kubernetes.plane import ROOT, client_as


def test_the_approver_is_who_the_api_server_says_and_not_a_service_account(plane, api_client, kubectl, namespace,
                                                                             tmp_path):
    settings = load_settings(project_dir=ROOT, home=tmp_path, runner="kubernetes")
    # The plane's kubeconfig (its admin), as an operator's `kappa approve` loads theirs.
    me = approver_identity(settings, api_client=api_client)
    assert me["source"] == "kubernetes SelfSubjectReview" and me["user"]
    assert not me["user"].startswith("system:serviceaccount:") and "system:authenticated" in me["groups"]
    kubectl("create", "serviceaccount", "a-run", "-n", namespace)
    with pytest.raises(ApprovalError, match=f"system:serviceaccount:{namespace}:a-run is a service account"):
        approver_identity(settings, api_client=client_as(plane, api_client, namespace, "a-run"))
