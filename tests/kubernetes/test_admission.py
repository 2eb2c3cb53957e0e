"""Attacks on what runs Kappa's code, against a real API server (issue 23, items 4 and 7).

- Admission: the kappa chart's ValidatingAdmissionPolicies (022-ValidatingAdmissionPolicy-spark)
  admit a SparkApplication only with the Kappa image, the drivers' service account, Kappa's
  entrypoint and jars and the Secrets the chart names; and a pod the drivers' service account
  creates (an executor) only as an executor of the driver's own application (issue 40: labels,
  owner, entrypoint, no token, its own Secrets) and deletes only pods its driver pod owns. The
  runner's own SparkApplication (k8s/, generated) is admitted.
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
    "an executor class path outside the image's /opt/kappa": (
        lambda a: a["spec"]["sparkConf"].update({"spark.executor.extraClassPath": "/opt/kappa/jars/spark/*:/tmp/x.jar"}),
        "class path only under /opt/kappa/"),
    "a writable root filesystem": (
        lambda a: _driver_container(a)["securityContext"].update(readOnlyRootFilesystem=False),
        "read-only root filesystem and an ephemeral-storage limit"),
    "executors without an ephemeral-storage limit": (
        lambda a: a["spec"]["executor"]["template"]["spec"]["containers"][0].pop("resources"),
        "read-only root filesystem and an ephemeral-storage limit"),
    "a sidecar": (
        lambda a: a["spec"]["driver"].update(sidecars=[{"name": "s", "image": IMAGE}]), "no sidecars"),
    # issue 40: its own Secrets only, RPC authenticated and encrypted with its own key from a file
    "another asset's KafkaUser": (
        lambda a: _driver_container(a)["env"].append(
            {"name": "JAAS", "valueFrom": {"secretKeyRef": {"name": "kappa-asset-weather-bronze", "key": "sasl.jaas.config"}}}),
        "may reference only these Secrets"),
    "another application's RPC key": (
        lambda a: next(v for v in a["spec"]["executor"]["template"]["spec"]["volumes"] if v["name"] == "spark-auth")[
            "secret"].update(secretName="weather-v1-auth-0123abcd"), "may reference only these Secrets"),
    "the RPC key as a value": (lambda a: a["spec"]["sparkConf"].update({"spark.authenticate.secret": "s3cret"}),
                               "authenticate and encrypt Spark RPC"),
    "unencrypted RPC": (lambda a: a["spec"]["sparkConf"].update({"spark.network.crypto.enabled": "false"}),
                        "authenticate and encrypt Spark RPC"),
    "no RPC key file for the executors": (
        lambda a: a["spec"]["sparkConf"].pop("spark.authenticate.secret.executor.file"), "authenticate and encrypt Spark RPC"),
    "another driver pod name": (lambda a: a["spec"]["driver"].update(podName="weather-v1-driver"), "and its driver pod is"),
    "a name its labels do not give": (lambda a: a["metadata"]["labels"].update({"kappa.dev/version": "2"}),
                                      "a Kappa SparkApplication is named"),
}


def test_the_runners_spark_application_is_admitted_and_each_attack_is_refused(api_client, guarded):
    namespace = guarded
    first_name, (first_change, first_message) = next(iter(ATTACKS.items()))
    bad = application(namespace)
    first_change(bad)
    # a policy takes effect once the API server's informer has it
    wait_for("the admission policy to be enforced",
             lambda: _refused(lambda: create(api_client, namespace, bad)), timeout_s=30)
    admitted = []
    for name, (change, message) in ATTACKS.items():
        app = application(namespace)
        change(app)
        try:
            create(api_client, namespace, app)
            admitted.append(name)
        except ApiException as exc:
            assert exc.status in (403, 422) and message in exc.body, (name, exc.body)
    assert admitted == [], f"admitted: {admitted}"
    create(api_client, namespace, application(namespace))  # admitted


def _refused(call) -> bool:
    try:
        call()
        return False
    except ApiException:
        return True


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


# ------------------------------------------------ a driver stays inside its application (issue 40)

def _driver_pod(app: dict, namespace: str) -> dict:
    """The driver pod the operator's spark-submit creates for ``app``: ``<name>-driver``, the
    drivers' account with its token, the application's labels and Spark's (the operator creates it
    with its own account; no driver policy applies to it)."""
    name = app["metadata"]["name"]
    tpl = app["spec"]["driver"]["template"]
    labels = {**tpl["metadata"]["labels"], "spark-role": "driver", "spark-app-selector": f"spark-{name.replace('-', '')}",
              "sparkoperator.k8s.io/app-name": name, "sparkoperator.k8s.io/launched-by-spark-operator": "true"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-driver", "namespace": namespace, "labels": labels},
            "spec": {**tpl["spec"], "serviceAccountName": DRIVERS,
                     "containers": [{**tpl["spec"]["containers"][0], "image": IMAGE, "args": ["driver"]}]}}


def _executor_pod(app: dict, driver: client.V1Pod, n: int = 1) -> dict:
    """An executor pod as the driver's Spark builds it from the runner's executor template (Spark
    4.1 BasicExecutorFeatureStep: Spark's labels, the operator's, the template's; one container
    running the image's ``executor`` entrypoint; owned by the driver pod)."""
    name = app["metadata"]["name"]
    tpl = app["spec"]["executor"]["template"]
    labels = {**tpl["metadata"]["labels"], "spark-role": "executor", "spark-exec-id": str(n),
              "spark-exec-resourceprofile-id": "0", "spark-app-selector": driver.metadata.labels["spark-app-selector"],
              "spark-app-name": name, "spark-version": "4.1.3", "sparkoperator.k8s.io/app-name": name,
              "sparkoperator.k8s.io/launched-by-spark-operator": "true", "sparkoperator.k8s.io/submission-id": "s-1"}
    env = [*tpl["spec"]["containers"][0]["env"], {"name": "SPARK_EXECUTOR_ID", "value": str(n)},
           {"name": "SPARK_DRIVER_URL", "value": f"spark://CoarseGrainedScheduler@{name}-driver-svc:7078"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-exec-{n}", "labels": labels,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": driver.metadata.name,
                                              "uid": driver.metadata.uid, "controller": True}]},
            "spec": {**tpl["spec"], "serviceAccountName": DRIVERS, "restartPolicy": "Never",
                     "volumes": [*tpl["spec"]["volumes"], {"name": "spark-local-dir-1", "emptyDir": {}}],
                     "containers": [{**tpl["spec"]["containers"][0], "image": IMAGE, "args": ["executor"], "env": env}]}}


def _as_driver(plane, api_client, namespace: str, pod: client.V1Pod):
    """A client with a token of the drivers' account bound to ``pod``, as the kubelet mounts it in
    the driver's container (TokenRequest with a boundObjectRef; the API server then names the pod
    in the request's userInfo.extra)."""
    token = client.CoreV1Api(api_client).create_namespaced_service_account_token(
        DRIVERS, namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=["https://kubernetes.default.svc.cluster.local"], expiration_seconds=600,
            bound_object_ref=client.V1BoundObjectReference(api_version="v1", kind="Pod", name=pod.metadata.name,
                                                           uid=pod.metadata.uid)))).status.token
    conf = client.Configuration()
    conf.host = plane.server
    conf.ssl_ca_cert = str(plane.state_dir) + "/pki/ca.crt"
    conf.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(conf)


def _labels(**changes):
    return lambda p: p["metadata"]["labels"].update(changes)


def _container(p: dict) -> dict:
    return p["spec"]["containers"][0]


DRIVER_ATTACKS = {
    "another application's label": (_labels(**{"sparkoperator.k8s.io/app-name": "weather-v1"}), "own application"),
    "another application's asset and version": (_labels(**{"kappa.dev/asset": "weather", "kappa.dev/version": "1"}),
                                                "own application"),
    "Dagster's pod labels": (_labels(**{"app.kubernetes.io/name": "dagster", "component": "user-deployments"}),
                             "own application"),
    "the SQL endpoint's client label": (_labels(**{"kappa.dev/sql-client": "true"}), "own application"),
    "a driver's role": (_labels(**{"spark-role": "driver"}), "own application"),
    "another image": (lambda p: _container(p).update(image=EVIL), "executor entrypoint"),
    "another command": (lambda p: _container(p).update(command=["/bin/sh", "-c", "id"]), "executor entrypoint"),
    "other arguments": (lambda p: _container(p).update(args=["driver", "--class", "evil"]), "executor entrypoint"),
    "a second container": (lambda p: p["spec"]["containers"].append({**_container(p), "name": "side"}),
                           "executor entrypoint"),
    "another asset's KafkaUser": (lambda p: p["spec"]["volumes"].append(
        {"name": "kafka", "secret": {"secretName": "kappa-asset-weather-bronze"}}), "only these Secrets"),
    "its own asset's KafkaUser in the environment": (lambda p: _container(p)["env"].append(
        {"name": "JAAS", "valueFrom": {"secretKeyRef": {"name": "kappa-asset-flights-bronze", "key": "sasl.jaas.config"}}}),
        "only these Secrets"),
    "another application's RPC key": (lambda p: p["spec"]["volumes"].append(
        {"name": "k", "secret": {"secretName": "weather-v1-auth-0123abcd"}}), "only these Secrets"),
    "the RPC key as a plain environment value": (lambda p: _container(p)["env"].append(
        {"name": "_SPARK_AUTH_SECRET", "value": "c2VjcmV0"}), "never the key as an environment value"),
    "a projected service-account token": (lambda p: p["spec"]["volumes"].append(
        {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}), "emptyDirs"),
    "the account's token mounted": (lambda p: p["spec"].update(automountServiceAccountToken=True),
                                    "without a service-account token"),
    "no owner": (lambda p: p["metadata"].pop("ownerReferences"), "owned by its own driver pod"),
    "another driver as owner": (lambda p: p["metadata"]["ownerReferences"][0].update(name="weather-v1-driver"),
                                "owned by its own driver pod"),
}


def test_a_driver_creates_only_executors_of_its_own_application_and_deletes_only_its_own_pods(
        plane, api_client, guarded):
    """Issue 40: the drivers' account may create and delete pods, and every driver shares it. A
    request made with a driver's token (bound to its pod, as the kubelet mounts it) is admitted
    only for an executor of that driver's own application; every other pod, and deleting a pod
    another driver owns, is refused. Each attack below was admitted by the chart before."""
    from tests.kubernetes.test_pod_security import application_for

    namespace = guarded
    core_admin = client.CoreV1Api(api_client)
    mine, theirs = application_for("flights_bronze", namespace), application_for("weather", namespace)
    for app in (mine, theirs):
        for role in ("driver", "executor"):  # the chart's default image, as the policy names it
            app["spec"][role]["template"]["spec"]["containers"][0]["image"] = IMAGE
    driver = core_admin.create_namespaced_pod(namespace, _driver_pod(mine, namespace))
    other = core_admin.create_namespaced_pod(namespace, _driver_pod(theirs, namespace))
    # an executor of the other application (created as its driver would, here by the admin)
    victim = core_admin.create_namespaced_pod(namespace, _executor_pod(theirs, other))
    core = client.CoreV1Api(_as_driver(plane, api_client, namespace, driver))
    evil = _executor_pod(mine, driver)
    _container(evil)["image"] = EVIL
    wait_for("the pod policy to be enforced",
             lambda: _refused(lambda: core.create_namespaced_pod(namespace, evil, dry_run="All")), timeout_s=30)
    # (the delete policy is another object, which the API server may load later)
    wait_for("the delete policy to be enforced",
             lambda: _refused(lambda: core.delete_namespaced_pod(victim.metadata.name, namespace, dry_run="All")),
             timeout_s=30)

    admitted = []
    for name, (change, message) in DRIVER_ATTACKS.items():
        pod = copy.deepcopy(_executor_pod(mine, driver))
        change(pod)
        try:
            core.create_namespaced_pod(namespace, pod, dry_run="All")
            admitted.append(name)
        except ApiException as exc:
            assert exc.status == 403 and message in exc.body, (name, exc.body)
    # deleting the other application's executor, one by one or by its labels (Spark's way)
    for name, call in (
            ("delete another driver's executor",
             lambda: core.delete_namespaced_pod(victim.metadata.name, namespace, dry_run="All")),
            ("delete another application's pods by label",
             lambda: core.delete_collection_namespaced_pod(
                 namespace, label_selector="sparkoperator.k8s.io/app-name=weather-v1", dry_run="All")),
            ("delete another driver", lambda: core.delete_namespaced_pod(other.metadata.name, namespace, dry_run="All"))):
        try:
            call()
            admitted.append(name)
        except ApiException as exc:
            assert exc.status == 403 and "deletes only the pods its own driver pod" in exc.body, (name, exc.body)
    # a token of the drivers' account not bound to a driver pod (as a stolen long-lived one would be)
    unbound = client.CoreV1Api(client_as(plane, api_client, namespace, DRIVERS))
    try:
        unbound.create_namespaced_pod(namespace, _executor_pod(mine, driver), dry_run="All")
        admitted.append("an executor from an unbound token")
    except ApiException as exc:
        assert exc.status == 403 and "token bound to that pod" in exc.body, exc.body
    assert admitted == [], f"admitted: {admitted}"

    # what Spark itself does is admitted: its executor, and deleting it again, by name and by label
    own = core.create_namespaced_pod(namespace, _executor_pod(mine, driver))
    core.delete_namespaced_pod(own.metadata.name, namespace, dry_run="All")
    core.delete_collection_namespaced_pod(namespace, label_selector="sparkoperator.k8s.io/app-name=flights-bronze-v1,spark-role=executor")
    assert core_admin.read_namespaced_pod(victim.metadata.name, namespace).metadata.deletion_timestamp is None


SECRET_ATTACKS = {
    "a service-account token Secret": (
        lambda s: (s.update(type="kubernetes.io/service-account-token"),
                   s["metadata"].update(annotations={"kubernetes.io/service-account.name": DRIVERS})),
        "only Spark RPC key Secrets"),
    "another key": (lambda s: s["data"].update({"password": "eA=="}), "only Spark RPC key Secrets"),
    "another name": (lambda s: s["metadata"].update(name="kappa-asset-weather-bronze"), "only Spark RPC key Secrets"),
    "another application's key name": (lambda s: s["metadata"].update(name="weather-v1-auth-0123abcd"),
                                       "only Spark RPC key Secrets"),
    "no owner": (lambda s: s["metadata"].pop("ownerReferences"), "only Spark RPC key Secrets"),
}


def test_a_run_may_create_its_applications_rpc_key_secret_and_no_other(plane, api_client, peers_guarded):
    """Issue 40: the run account creates each application's Spark RPC key Secret (the runner's,
    kappa.runners.kubernetes.application.build_auth_secret) and may read none; any other Secret
    it tries (a token Secret for another account, another key or name, no owner) is refused."""
    from kappa.runners.kubernetes.application import build_auth_secret

    namespace = peers_guarded
    app = application(namespace)
    app["metadata"]["uid"] = "5f0c6a3e-8d1b-4a52-9a57-0d3f4b1e2c77"
    secret = build_auth_secret(app)
    core = client.CoreV1Api(client_as(plane, api_client, namespace, RUNS))

    def changed(change) -> dict:
        bad = copy.deepcopy(secret)
        change(bad)
        return bad

    first = changed(next(iter(SECRET_ATTACKS.values()))[0])
    wait_for("the key Secret policy to be enforced",
             lambda: _refused(lambda: core.create_namespaced_secret(namespace, first, dry_run="All")), timeout_s=30)
    core.create_namespaced_secret(namespace, secret, dry_run="All")  # the runner's: admitted
    admitted = []
    for name, (change, message) in SECRET_ATTACKS.items():
        try:
            core.create_namespaced_secret(namespace, changed(change), dry_run="All")
            admitted.append(name)
        except ApiException as exc:
            assert exc.status in (403, 422) and message in exc.body, (name, exc.body)
    assert admitted == [], f"admitted: {admitted}"
    assert "forbidden" in refusal(lambda: core.read_namespaced_secret(secret["metadata"]["name"], namespace))
