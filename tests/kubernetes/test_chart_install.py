"""`helm install` of the kappa chart on a real API server, in every ci/ values scenario.

The API server validates each object against its schema (core types, and the Strimzi CRDs'
including KafkaConnect and KafkaConnector, and the SparkApplication CRD's OpenAPI schemas) with
strict field validation, so an unknown or misspelt field fails here although `helm template`
renders it. Nothing reconciles the Kafka or Connect resources (no Strimzi operator runs here: no
Connect image is built, no connector runs; the data plane of the other tests is the local broker).
"""

from __future__ import annotations

import pytest
import yaml

from tests.kubernetes.plane import CHART, DEFAULT_VALUES, helm, helm_on, kappa_namespace
from helmtools import SCENARIOS  # noqa: E402  (plane puts tests/helm on the path)


def _values(scenario: str) -> list[str]:
    return [str(CHART / "ci" / scenario)]  # each scenario names the required values itself


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_install_of_every_scenario_is_accepted_by_the_api_server(plane, kubectl, scenario):
    ns = f"kappa-{scenario.removesuffix('-values.yaml').replace('_', '-')}"
    kappa_namespace(plane, ns, *_values(scenario))
    args = ["install", "kappa", str(CHART), "-n", ns, "--set", "namespace.create=false", "--wait", "--timeout", "2m"]
    for v in _values(scenario):
        args += ["-f", v]
    try:
        helm_on(plane, *args)
        listed = helm_on(plane, "list", "-n", ns, "-o", "yaml").stdout
        assert [r["status"] for r in yaml.safe_load(listed)] == ["deployed"]
        # Strict server-side validation of every object the chart renders (fieldValidation=Strict
        # rejects unknown fields, which a plain create would prune silently).
        rendered = helm("template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", ns, "--set", "namespace.create=false",
                        *[a for v in _values(scenario) for a in ("-f", v)]).stdout
        kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
        assert {"Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser", "KafkaConnect", "KafkaConnector", "Role",
                "ConfigMap"} <= kinds
        kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "--validate=strict",
                "-f", "-", stdin=rendered)
        # The objects are really stored: a KafkaTopic per source topic, read back from the server.
        topics = yaml.safe_load(kubectl("get", "kafkatopics", "-n", ns, "-o", "yaml").stdout)["items"]
        expected = sorted(d["metadata"]["name"] for d in yaml.safe_load_all(rendered) if d and d["kind"] == "KafkaTopic")
        assert sorted(t["metadata"]["name"] for t in topics) == expected and expected
        # ... and the change-data-capture resources: stored as the chart renders them (the CRD schemas
        # accepted them); no Strimzi operator runs here, so no image is built and no connector runs.
        for kind in ("KafkaConnect", "KafkaConnector"):
            stored = yaml.safe_load(kubectl("get", kind.lower() + "s", "-n", ns, "-o", "yaml").stdout)["items"]
            want = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == kind]
            assert [o["spec"] for o in stored] == [d["spec"] for d in want] and want, kind
        # The SQL endpoint's pod was admitted by Pod Security "restricted" (a refused pod would
        # leave the Deployment unavailable and `--wait` would have timed out) and runs on kwok.
        pods = yaml.safe_load(kubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=sql-endpoint",
                                      "-o", "yaml").stdout)["items"]
        assert [p["status"]["phase"] for p in pods] == ["Running"]
        assert pods[0]["spec"]["securityContext"]["runAsNonRoot"] is True
    finally:
        helm_on(plane, "uninstall", "kappa", "-n", ns, check=False)


def test_a_misspelt_field_in_a_strimzi_resource_is_rejected_by_the_server(plane, kubectl, namespace):
    """The negative case: proves the CRD schemas above are enforced, not merely present."""
    rendered = [d for d in yaml.safe_load_all(helm("template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", namespace,
                                                   "--set", "namespace.create=false").stdout) if d]
    topic = next(d for d in rendered if d["kind"] == "KafkaTopic")
    topic["spec"]["partitons"] = 3
    proc = kubectl("apply", "--server-side", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(topic), check=False)
    assert proc.returncode != 0 and "partitons" in proc.stderr, proc.stderr
    topic["spec"].pop("partitons")
    topic["spec"]["partitions"] = "three"
    proc = kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(topic), check=False)
    assert proc.returncode != 0 and "spec.partitions" in proc.stderr, proc.stderr
    # the same for a KafkaConnector (its CRD is applied too)
    connector = next(d for d in rendered if d["kind"] == "KafkaConnector")
    connector["spec"]["tasksMaximum"] = 1
    proc = kubectl("apply", "--server-side", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(connector), check=False)
    assert proc.returncode != 0 and "tasksMaximum" in proc.stderr, proc.stderr


def test_connect_workers_may_get_only_the_database_secret_and_their_pods_pass_restricted(kubectl, api_client, namespace):
    """The Connect resources of the chart in a restricted namespace: the workers' service account
    (Strimzi's `<KafkaConnect>-connect`) may `get` the database Secret and no other (SubjectAccessReview);
    a pod with the KafkaConnect template's security contexts is admitted by Pod Security (a dry
    run: no operator builds the real pod here, which also carries Strimzi's own settings)."""
    from kubernetes import client

    rendered = helm("template", "kappa", str(CHART), "-f", str(DEFAULT_VALUES), "-n", namespace, "--show-only",
                    "templates/042-KafkaConnect.yaml").stdout
    kubectl("apply", "--server-side", "--validate=strict", "-f", "-", stdin=rendered)
    objs = [d for d in yaml.safe_load_all(rendered) if d]
    (kc,) = [d for d in objs if d["kind"] == "KafkaConnect"]
    sa = f"{kc['metadata']['name']}-connect"
    kubectl("create", "serviceaccount", sa, "-n", namespace)  # Strimzi's operator would create it

    def allowed(verb: str, name: str | None) -> bool:
        review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:{sa}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(namespace=namespace, verb=verb, resource="secrets",
                                                            name=name)))
        return client.AuthorizationV1Api(api_client).create_subject_access_review(review).status.allowed

    assert allowed("get", "kappa-ops-database")
    assert not allowed("get", "kappa-object-store") and not allowed("list", None) and not allowed("watch", None)
    tpl = kc["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": sa + "-0", "labels": tpl["pod"]["metadata"]["labels"]},
           "spec": {"securityContext": tpl["pod"]["securityContext"], "serviceAccountName": sa,
                    "containers": [{"name": sa, "image": kc["spec"]["build"]["output"]["image"],
                                    "securityContext": tpl["connectContainer"]["securityContext"]}]}}
    created = client.CoreV1Api(api_client).create_namespaced_pod(namespace, pod, dry_run="All")
    assert created.spec.security_context.run_as_non_root is True


def test_tools_deploy_sh_installs_on_the_plane_and_says_what_it_skipped(plane):
    """The platform team's script, as the README runs it (`KUBECONFIG=… tools/deploy.sh -f
    helm/kappa/ci/default-values.yaml`: the egress peers are required values): offline,
    Strimzi's CRDs stand in for its operator chart and the Spark operator's chart comes from its Go
    module; every step that needs the network or a reconciler says SKIPPED, nothing fails."""
    import os
    import subprocess

    from tests.kubernetes.plane import ROOT

    ns = "kappa-deploy"
    # OFFLINE=1: the same path whether or not this machine could reach the chart repositories
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "NAMESPACE": ns, "OFFLINE": "1"}
    try:
        done = subprocess.run([str(ROOT / "tools" / "deploy.sh"), "-f", str(DEFAULT_VALUES)], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out = done.stdout
        for step in ("== 1/5", "== 2/5", "== 3/5", "== 4/5", "== 5/5"):
            assert step in out
        assert "SKIPPED: the Strimzi operator chart cannot be fetched" in out
        assert "Done (partial: see SKIPPED above)." in out
        listed = helm_on(plane, "list", "-n", ns, "-o", "yaml").stdout
        assert [(r["name"], r["status"]) for r in yaml.safe_load(listed)] == [("kappa", "deployed")]
        operator = helm_on(plane, "list", "-n", "spark-operator", "-o", "yaml").stdout
        assert [(r["name"], r["status"]) for r in yaml.safe_load(operator)] == [("spark-operator", "deployed")]
    finally:
        helm_on(plane, "uninstall", "kappa", "-n", ns, check=False)
        helm_on(plane, "uninstall", "spark-operator", "-n", "spark-operator", check=False)
