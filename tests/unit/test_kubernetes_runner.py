"""The kubernetes runner: the SparkApplication it builds for an asset version (checked against the
operator's own CRD schema, strictly), its state handling, and its API calls (through a recording
stand-in for the kubernetes client's CustomObjectsApi: the API server itself is a later issue)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kappa.runners import kubernetes as k8s
from kappa.runners.base import RunError
from kappa.runners.kubernetes import (
    KubernetesRunnerConfig,
    Outcome,
    SparkApplications,
    build_spark_application,
    outcome_of,
)
from kappa.config import load_settings
from kappa.spec import AssetResources, load_catalog

ROOT = Path(__file__).resolve().parents[2]
CATALOG = load_catalog(ROOT / "assets")
TOOLS = ROOT / "build" / "tools"


def _upstream_env() -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+)=(\S+)$", (ROOT / "helm" / "upstream.env").read_text(), re.M))


def _ensure_tools() -> None:
    if not (TOOLS / "schemas" / ".stamp").exists():
        proc = subprocess.run(["make", "-s", "tools"], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"`make tools` failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    """The strict JSON schema of SparkApplication v1beta2, converted from the spark-operator
    module's CRD by tools/schemas.py (built by `make tools`)."""
    _ensure_tools()
    return json.loads((TOOLS / "schemas" / "crds" / "sparkoperator.k8s.io" / "sparkapplication_v1beta2.json").read_text())


#: What the Dagster code location sees on the cluster (the chart's ConfigMap and Secrets).
SETTINGS = load_settings(
    warehouse="s3a://lake/warehouse/", checkpoints="s3a://lake/checkpoints", runner="kubernetes",
    s3_endpoint="http://minio.minio:9000", s3_path_style_access=True,
    bootstrap_servers="events-kafka-bootstrap.data.svc:9093", kafka_security_protocol="SASL_SSL",
    kafka_sasl_mechanism="SCRAM-SHA-512", kafka_ssl_truststore_type="PEM",
    kafka_ssl_truststore_location="/etc/kappa/kafka-ca/ca.crt",
)


def _v(asset: str, version: int, upstream: dict | None = None):
    """The version record the registry would create (see kappa.delta.registry.new_version_details)."""
    return k8s.example_version(SETTINGS, CATALOG[asset], version, upstream)


def build(asset_or_spec, version: int, cfg, upstream: dict | None = None):
    spec = CATALOG[asset_or_spec] if isinstance(asset_or_spec, str) else asset_or_spec
    return build_spark_application(spec, k8s.example_version(SETTINGS, spec, version, upstream), cfg, SETTINGS)


@pytest.fixture
def cfg() -> KubernetesRunnerConfig:
    return KubernetesRunnerConfig(
        namespace="data",
        image="registry.example.com/kappa/kappa:1.2.3",
        object_store_secret="lake-keys",
        kafka_cluster="events",
        jars_dir="/opt/kappa/jars/lake",
    )


def _container(role: dict) -> dict:
    (container,) = role["template"]["spec"]["containers"]
    return container


def _env(role: dict) -> dict[str, dict]:
    return {e["name"]: e for e in _container(role)["env"]}


# --------------------------------------------------------------------------------- the object


@pytest.mark.parametrize("asset", sorted(CATALOG.assets))
def test_application_of_every_asset_validates_against_the_crd_schema(asset, cfg, crd_schema):
    app = build(asset, 3, cfg)
    jsonschema.Draft4Validator(crd_schema).validate(app)


def test_schema_is_strict_so_a_misspelt_field_fails(cfg, crd_schema):
    app = build("flights_bronze", 1, cfg)
    app["spec"]["driver"]["memmory"] = "1g"
    with pytest.raises(jsonschema.ValidationError, match="memmory"):
        jsonschema.Draft4Validator(crd_schema).validate(app)


def test_application_runs_the_asset_version_in_the_kappa_image(cfg):
    app = build("flights_bronze", 3, cfg)
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["kind"] == "SparkApplication"
    assert app["metadata"]["name"] == "flights-bronze-v3" and app["metadata"]["namespace"] == "data"
    spec = app["spec"]
    assert spec["image"] == "registry.example.com/kappa/kappa:1.2.3"
    assert spec["type"] == "Python" and spec["mode"] == "cluster"
    assert spec["mainApplicationFile"] == "local:///opt/kappa/bin/entrypoint.py"
    assert spec["arguments"] == ["--asset", "flights_bronze", "--version", "3"]
    assert spec["sparkVersion"] == "4.1.3"
    assert spec["driver"]["serviceAccount"] == "kappa-spark"


def test_table_and_checkpoint_are_the_versions_own_paths_on_the_object_store(cfg):
    app = build("flights", 2, cfg)
    for role in ("driver", "executor"):
        env = _env(app["spec"][role])
        assert env["KAPPA_TABLE_PATH"]["value"] == "s3a://lake/warehouse/flights/v2"
        assert env["KAPPA_CHECKPOINT_PATH"]["value"] == "s3a://lake/checkpoints/flights/v2"
    for role in ("driver", "executor"):  # the writer id is the registry's, never re-derived
        assert _env(app["spec"][role])["KAPPA_TXN_APP_ID"]["value"] == "kappa-flights-v2-example"
    conf = app["spec"]["sparkConf"]
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio.minio:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.driver.extraClassPath"] == conf["spark.executor.extraClassPath"] == "/opt/kappa/jars/lake/*"
    assert "spark.jars" not in conf
    assert all(isinstance(v, str) for v in conf.values())


def test_a_new_version_never_shares_a_checkpoint_with_the_old_one(cfg):
    v1 = _env(build("flights", 1, cfg)["spec"]["driver"])
    v2 = _env(build("flights", 2, cfg)["spec"]["driver"])
    assert v1["KAPPA_CHECKPOINT_PATH"]["value"] != v2["KAPPA_CHECKPOINT_PATH"]["value"]
    assert v1["KAPPA_TXN_APP_ID"]["value"] != v2["KAPPA_TXN_APP_ID"]["value"]


def test_credentials_are_secret_references_never_values(cfg):
    app = build("weather_bronze", 1, cfg)
    driver, executor = _env(app["spec"]["driver"]), _env(app["spec"]["executor"])
    for env in (driver, executor):
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {"secretKeyRef": {"name": "lake-keys", "key": "AWS_ACCESS_KEY_ID"}}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "lake-keys", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert driver["KAPPA_KAFKA_SASL_JAAS_CONFIG"]["valueFrom"] == {
        "secretKeyRef": {"name": "kappa-asset-weather-bronze", "key": "sasl.jaas.config"}}
    assert "KAPPA_KAFKA_SASL_JAAS_CONFIG" not in executor  # executors get the options with their tasks
    assert driver["KAPPA_KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert driver["KAPPA_KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
    assert driver["KAPPA_BOOTSTRAP_SERVERS"]["value"] == "events-kafka-bootstrap.data.svc:9093"
    for role in ("driver", "executor"):
        (volume,) = [v for v in app["spec"][role]["template"]["spec"]["volumes"]
                     if "emptyDir" not in v and v["name"] != k8s.application.AUTH_VOLUME]
        assert volume["secret"]["secretName"] == "events-cluster-ca-cert"
        assert {"name": "kafka-cluster-ca", "mountPath": k8s.KAFKA_CA_DIR, "readOnly": True} in _container(app["spec"][role])["volumeMounts"]
    text = json.dumps(app)
    assert "password" not in text.lower().replace("sasl.jaas.config", "")


def test_group_id_prefix_is_inside_the_assets_acl_prefix(cfg):
    app = build("flights_bronze", 4, cfg)
    prefix = _env(app["spec"]["driver"])["KAPPA_KAFKA_GROUP_ID_PREFIX"]["value"]
    assert prefix == "kappa-flights_bronze-v4-" and prefix.startswith(k8s.group_prefix("flights_bronze"))
    assert not prefix.startswith(k8s.group_prefix("flights"))


def test_assets_that_read_no_topic_get_no_kafka_credentials_or_label(cfg):
    app = build("departures_hourly", 1, cfg)
    text = json.dumps(app)
    assert "sasl" not in text.lower() and "kafka-cluster-ca" not in text
    assert k8s.LABEL_KAFKA_CLIENT not in app["metadata"]["labels"]
    assert build("flights", 1, cfg)["metadata"]["labels"][k8s.LABEL_KAFKA_CLIENT] == "true"


def test_restart_on_failure_with_backoff_suited_to_streaming(cfg):
    policy = build("flights", 1, cfg)["spec"]["restartPolicy"]
    assert policy == {"type": "OnFailure", "onFailureRetries": 10, "onFailureRetryInterval": 30,
                      "onSubmissionFailureRetries": 5, "onSubmissionFailureRetryInterval": 60}


def test_pods_are_restricted_through_the_pod_templates_the_operator_passes_to_spark_submit(cfg):
    # Without the operator's webhook only spec.{driver,executor}.template reaches the pods (see
    # tests/kubernetes/test_pod_security.py for the real API server's admission of them).
    app = build("flights", 1, cfg)
    for role in ("driver", "executor"):
        for field in ("podSecurityContext", "securityContext", "env", "volumeMounts"):
            assert field not in app["spec"][role]
        tpl = app["spec"][role]["template"]["spec"]
        assert tpl["containers"][0]["name"] == f"spark-kubernetes-{role}"
        pod, ctr = tpl["securityContext"], tpl["containers"][0]["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}
        assert ctr["allowPrivilegeEscalation"] is False and ctr["capabilities"] == {"drop": ["ALL"]}


def test_spark_pods_have_a_read_only_root_and_bounded_scratch_space(cfg):
    # Writable: /tmp and the image's work directory (size-limited emptyDirs) and Spark's own local
    # directories; the container's ephemeral-storage limit bounds them all with the logs. The kubelet
    # stand-in (tests/kubernetes/kubelet.py) runs the plane test's drivers under exactly this.
    for name in ("flights", "departures_hourly"):
        app = build(name, 1, cfg)
        for role in ("driver", "executor"):
            tpl = app["spec"][role]["template"]["spec"]
            ctr = _container(app["spec"][role])
            assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
            empty = {v["name"]: v["emptyDir"] for v in tpl["volumes"] if "emptyDir" in v}
            assert empty == {"kappa-tmp": {"sizeLimit": "2Gi"}, "kappa-work": {"sizeLimit": "512Mi"}}
            mounted = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
            assert mounted["/tmp"] == "kappa-tmp" and mounted["/opt/kappa/work"] == "kappa-work"
            assert ctr["resources"] == {"requests": {"ephemeral-storage": "1Gi"}, "limits": {"ephemeral-storage": "8Gi"}}
            # only the driver talks to the API server (its executors' pods)
            assert tpl.get("automountServiceAccountToken", True) is (role == "driver")
    small = k8s.KubernetesRunnerConfig.from_mapping({
        "KAPPA_K8S_IMAGE": "kappa:1", "KAPPA_K8S_TMP_SIZE_LIMIT": "256Mi", "KAPPA_K8S_EPHEMERAL_STORAGE_LIMIT": "3Gi"})
    ctr = _container(build("flights", 1, small)["spec"]["executor"])
    assert ctr["resources"]["limits"] == {"ephemeral-storage": "3Gi"}
    with pytest.raises(ValidationError, match="ephemeral_storage_limit"):
        k8s.KubernetesRunnerConfig.from_mapping({"KAPPA_K8S_IMAGE": "kappa:1", "KAPPA_K8S_EPHEMERAL_STORAGE_LIMIT": "lots"})


def test_default_resources_and_asset_overrides(cfg):
    app = build("flights", 1, cfg)
    assert (app["spec"]["driver"]["cores"], app["spec"]["driver"]["memory"]) == (1, "2g")
    assert (app["spec"]["executor"]["instances"], app["spec"]["executor"]["memory"]) == (1, "2g")
    # an asset YAML's optional `resources` block (kappa.spec.AssetResources) wins
    spec = CATALOG["flights"].model_copy(update={"resources": AssetResources.model_validate({
        "driver": {"cores": 2, "memory": "3g"},
        "executor": {"cores": 4, "memory": "8g", "memory_overhead": "1g"},
        "executor_instances": 3,
    })})
    app = build(spec, 1, cfg)
    assert app["spec"]["driver"]["cores"] == 2 and app["spec"]["driver"]["memory"] == "3g"
    ex = app["spec"]["executor"]
    assert (ex["cores"], ex["memory"], ex["memoryOverhead"], ex["instances"]) == (4, "8g", "1g", 3)


def test_bad_versions_names_and_paths_are_refused(cfg):
    with pytest.raises(ValueError, match="version"):
        build("flights", 0, cfg)
    with pytest.raises(ValueError, match="63"):
        k8s.application_name("a" * 70, 1)
    with pytest.raises(Exception, match="warehouse"):  # where data lives is Settings', not the runner's
        KubernetesRunnerConfig(image="x", warehouse="s3a://b/w")


def test_config_from_the_charts_configmap_keys():
    cfg = KubernetesRunnerConfig.from_mapping({
        "KAPPA_RUNNER": "kubernetes",
        "KAPPA_K8S_IMAGE": "img:1",
        "KAPPA_K8S_DRIVER_MEMORY": "3g",
        "KAPPA_K8S_EXECUTOR_CORES": "2",
        "KAPPA_K8S_EXECUTOR_INSTANCES": "4",
        "KAPPA_K8S_JARS_DIR": "/opt/kappa/jars/lake",
        "OTHER": "ignored",
    })
    assert cfg.driver.memory == "3g" and cfg.executor.cores == 2 and cfg.executor_instances == 4
    # a folder inside the image, never listed here: a runner outside the image (a laptop's CLI) has
    # the same config as the one inside it
    assert cfg.jars_dir == "/opt/kappa/jars/lake"
    assert KubernetesRunnerConfig.from_mapping({"KAPPA_K8S_IMAGE": "img:1"}).jars_dir == "/opt/kappa/jars/spark"
    with pytest.raises(Exception, match="imag"):
        KubernetesRunnerConfig.from_mapping({"KAPPA_K8S_IMAGEE": "x"})


# ------------------------------------------------------------------------------------ outcomes


def _operator_states() -> set[str]:
    """Every ApplicationStateType constant in the pinned spark-operator's Go API."""
    _ensure_tools()
    go = (TOOLS / f"spark-operator-{_upstream_env()['SPARK_OPERATOR_VERSION']}" / "upstream" / "sparkapplication_types.go").read_text()
    states = set(re.findall(r'ApplicationState\w+\s+ApplicationStateType\s*=\s*"([A-Z_]*)"', go))
    assert len(states) >= 14, states
    return states


def test_every_operator_state_has_an_outcome():
    assert _operator_states() == set(k8s.STATE_OUTCOMES)


@pytest.mark.parametrize("state,streaming,expected", [
    ("", True, Outcome.PENDING),
    ("SUBMITTED", True, Outcome.PENDING),
    ("PENDING_RERUN", True, Outcome.PENDING),
    ("INVALIDATING", True, Outcome.PENDING),
    ("RESUMING", True, Outcome.PENDING),
    ("RUNNING", True, Outcome.RUNNING),
    ("FAILING", True, Outcome.RETRYING),
    ("SUBMISSION_FAILED", True, Outcome.RETRYING),
    ("SUSPENDING", True, Outcome.SUSPENDED),
    ("SUSPENDED", True, Outcome.SUSPENDED),
    ("FAILED", True, Outcome.FAILED),
    ("UNKNOWN", True, Outcome.UNKNOWN),
    # a streaming query never completes on its own: the operator's COMPLETED is a failure
    ("COMPLETED", True, Outcome.FAILED),
    ("SUCCEEDING", True, Outcome.FAILED),
    # a bounded (available-now) run may complete
    ("COMPLETED", False, Outcome.SUCCEEDED),
    ("SUCCEEDING", False, Outcome.SUCCEEDED),
    ("FAILED", False, Outcome.FAILED),
    ("SOMETHING_NEW", True, Outcome.UNKNOWN),
])
def test_state_maps_to_outcome(state, streaming, expected):
    app = {"status": {"applicationState": {"state": state}}}
    assert outcome_of(app, streaming=streaming) is expected
    assert outcome_of(state, streaming=streaming) is expected


def test_streaming_is_the_default_and_no_status_yet_is_pending():
    assert outcome_of({"status": {"applicationState": {"state": "COMPLETED"}}}) is Outcome.FAILED
    assert outcome_of({"metadata": {"name": "x"}}) is Outcome.PENDING
    assert Outcome.FAILED.terminal and Outcome.SUCCEEDED.terminal and not Outcome.RETRYING.terminal
    assert "never completes" in k8s.error_message({"status": {"applicationState": {"state": "COMPLETED"}}})
    assert k8s.error_message({"status": {"applicationState": {"state": "FAILED", "errorMessage": "OOMKilled"}}}) == "OOMKilled"


# ---------------------------------------------------------------------------------- API client


class RecordingApi:
    """Stands in for kubernetes.client.CustomObjectsApi; stores objects by name."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple] = []

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.calls.append(("create", group, version, namespace, plural))
        self.objects[body["metadata"]["name"]] = body
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("get", group, version, namespace, plural))
        if name not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        return self.objects[name]

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("delete", group, version, namespace, plural))
        if name not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        return self.objects.pop(name)


def test_create_get_delete_through_the_custom_objects_api(cfg):
    api = RecordingApi()
    apps = SparkApplications("data", api=api)
    app = build("flights", 1, cfg)
    apps.create(app)
    assert apps.outcome("flights-v1") is Outcome.PENDING
    api.objects["flights-v1"]["status"] = {"applicationState": {"state": "COMPLETED"}}
    assert apps.outcome("flights-v1") is Outcome.FAILED
    assert apps.delete("flights-v1") is True
    assert apps.get("flights-v1") is None and apps.outcome("flights-v1") is None
    assert apps.delete("flights-v1") is False
    assert {c[1:] for c in api.calls} == {("sparkoperator.k8s.io", "v1beta2", "data", "sparkapplications")}
    assert {c[0] for c in api.calls} <= {"create", "get", "delete"}  # within the chart's Role


def test_other_api_errors_are_raised(cfg):
    class Forbidden(RecordingApi):
        def get_namespaced_custom_object(self, *a, **k):
            raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException):
        SparkApplications("data", api=Forbidden()).get("x")


def test_module_does_not_import_dagster():
    for module in Path(k8s.__file__).parent.glob("*.py"):
        assert not re.search(r"^\s*(import|from)\s+dagster", module.read_text(), re.M), module


# ------------------------------------------------------------------------------ upstream, runner


def test_asset_sourced_asset_gets_its_upstream_versions_as_arguments(cfg, crd_schema):
    app = build("departures_hourly", 4, cfg, {"flights": 3})
    jsonschema.Draft4Validator(crd_schema).validate(app)
    assert app["spec"]["arguments"] == ["--asset", "departures_hourly", "--version", "4", "--upstream", "flights=3"]
    # the entrypoint parses exactly these arguments
    from kappa.runners.entrypoint import argument_parser
    args = argument_parser().parse_args(app["spec"]["arguments"])
    assert (args.asset, args.version, args.upstream) == ("departures_hourly", 4, ["flights=3"])
    with pytest.raises(ValueError, match="flights"):
        build("departures_hourly", 4, cfg, {})
    kafka_only = build("flights", 2, cfg, {})
    assert kafka_only["spec"]["arguments"] == ["--asset", "flights", "--version", "2"]


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _runner(cfg, api):
    from kappa.runners.kubernetes import KubernetesRunner

    clock = _Clock()
    return KubernetesRunner(cfg, SETTINGS, SparkApplications(cfg.namespace, api=api), poll_s=2, clock=clock, sleep=clock.sleep), clock


def test_runner_creates_the_application_and_waits_until_it_runs(cfg, crd_schema):
    from tests.kube_api import KubeApi

    api = KubeApi()
    runner, clock = _runner(cfg, api)
    api.script("departures-hourly-v2", "", "SUBMITTED", "RUNNING")
    status = runner.start(CATALOG["departures_hourly"], _v("departures_hourly", 2, {"flights": 5}))
    assert status.outcome is Outcome.RUNNING and status.created and status.state == "RUNNING"
    assert status.name == "departures-hourly-v2" and status.namespace == "data"
    stored = api.app("departures-hourly-v2")
    jsonschema.Draft4Validator(crd_schema).validate({k: v for k, v in stored.items() if k != "status"}
                                                     | {"metadata": {k: v for k, v in stored["metadata"].items()
                                                                     if k in ("name", "namespace", "labels")}})
    assert stored["spec"]["arguments"][-2:] == ["--upstream", "flights=5"]
    # a second start observes the running application; it never creates a second query
    again = runner.start(CATALOG["departures_hourly"], _v("departures_hourly", 2, {"flights": 5}))
    assert again.outcome is Outcome.RUNNING and not again.created
    uid = stored["metadata"]["uid"]
    # ... and its peers NetworkPolicy once, named after the application's uid and owned by it
    assert [c for c in api.calls if c[0] == "create"] == [
        ("create", "departures-hourly-v2"), ("create", f"departures-hourly-v2-peers-{uid[:8]}")]
    (policy,) = api.policies().values()
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "name": "departures-hourly-v2",
         "uid": uid}]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"sparkoperator.k8s.io/app-name": "departures-hourly-v2"}}
    assert runner.outcome("departures_hourly", 2) is Outcome.RUNNING
    assert runner.stop("departures_hourly", 2) is True
    assert runner.outcome("departures_hourly", 2) is None and runner.stop("departures_hourly", 2) is False


def test_runner_wait_is_bounded_and_stops_on_a_terminal_state(cfg):
    from tests.kube_api import KubeApi

    api = KubeApi()
    runner, clock = _runner(cfg, api)
    status = runner.start(CATALOG["flights"], _v("flights", 1), timeout_s=120)  # the operator never picks it up
    assert status.outcome is Outcome.PENDING and status.state == "" and 120 <= clock.t <= 122
    api.script("flights-v2", "SUBMITTED", "COMPLETED")  # a streaming driver that exited: failed
    clock.t = 0
    failed = runner.start(CATALOG["flights"], _v("flights", 2))
    assert failed.outcome is Outcome.FAILED and clock.t == 4 and "never completes" in failed.error
    with pytest.raises(ValueError, match="flights"):
        runner.start(CATALOG["departures_hourly"], _v("departures_hourly", 1, {}))  # an asset-sourced asset needs its upstream


def test_runner_observes_an_application_created_concurrently(cfg):
    from tests.kube_api import KubeApi

    class Racing(KubeApi):
        def get_namespaced_custom_object(self, group, version, namespace, plural, name, **kw):
            if plural != "sparkapplications":
                return super().get_namespaced_custom_object(group, version, namespace, plural, name, **kw)
            obj = super().get_namespaced_custom_object(group, version, namespace, plural, name, **kw) \
                if any(k[-1] == name for k in self.objects) else None
            if obj is None:  # someone else creates it between our get and our create
                body = build("flights", 1, cfg)
                super().create_namespaced_custom_object(group, version, namespace, plural, body)
                self.set_state(name, "RUNNING")
                raise ApiException(status=404, reason="Not Found")
            return obj

    api = Racing()
    runner, _ = _runner(cfg, api)
    status = runner.start(CATALOG["flights"], _v("flights", 1))
    assert status.outcome is Outcome.RUNNING and not status.created
    assert api.names() == {"flights-v1"} and len(api.policies()) == 1  # the one observed, isolated


# ------------------------------------------------------------------------- gate, entrypoint, catch-up


def test_gate_application_runs_kappa_gate_from_the_image_once(cfg, crd_schema):
    app = k8s.build_gate_application(CATALOG["weather"], _v("weather", 2), cfg, SETTINGS)
    jsonschema.Draft4Validator(crd_schema).validate(app)
    assert app["metadata"]["name"] == "weather-v2-gate"
    spec = app["spec"]
    assert spec["mainApplicationFile"] == k8s.KAPPA_CLI_FILE and spec["arguments"] == ["gate", "weather", "2"]
    assert spec["restartPolicy"] == {"type": "Never"}
    env = _env(spec["driver"])
    assert env["KAPPA_WAREHOUSE"]["value"] == "s3a://lake/warehouse"  # the registry it records in
    assert "KAPPA_KAFKA_SASL_JAAS_CONFIG" not in env  # the gate reads tables only
    assert spec["sparkConf"] == build("weather", 2, cfg)["spec"]["sparkConf"]


def test_entrypoint_refuses_paths_or_upstream_that_differ_from_the_registry():
    from kappa.runners.entrypoint import mismatches

    v = _v("departures_hourly", 3, {"flights": 2})
    env = {"KAPPA_TABLE_PATH": v.table_path, "KAPPA_CHECKPOINT_PATH": v.checkpoint_path, "KAPPA_TXN_APP_ID": v.txn_app_id}
    assert mismatches(v, {"flights": 2}, env) == []
    wrong = mismatches(v, {"flights": 1}, {**env, "KAPPA_TXN_APP_ID": "kappa-departures_hourly-v3"})
    assert len(wrong) == 2 and "flights" in wrong[0] and "KAPPA_TXN_APP_ID" in wrong[1]


def test_catch_up_is_read_from_the_checkpoint_against_the_end_offsets():
    from kappa.streaming.checkpoint import CatchUpTarget, CheckpointState, remaining

    target = CatchUpTarget(end_offsets={"weather": {"0": 10, "1": 5, "2": 0}})
    assert remaining(CheckpointState(), target) == 15  # nothing committed: the whole log
    assert remaining(CheckpointState(), target, {"weather": {"0": 4}}) == 11  # from the recorded log start
    half = CheckpointState(batch_id=0, offsets={"weather": {"0": 6, "1": 5}})
    assert remaining(half, target) == 4
    done = CheckpointState(batch_id=1, offsets={"weather": {"0": 10, "1": 5, "2": 0}})
    assert remaining(done, target) == 0
    # a version reading 4 records below the log start from an archive: they are read by batch 0, so
    # it is not caught up before a batch commits even when Kafka holds nothing more to read
    whole = CatchUpTarget(end_offsets={"weather": {"0": 4}})
    assert remaining(CheckpointState(), whole, {"weather": {"0": 4}}, archived=4) == 4
    assert remaining(CheckpointState(batch_id=0, offsets={"weather": {"0": 4}}), whole, archived=4) == 0
    # an upstream table: Delta's offset (reservoirVersion=v, index=-1) has read everything before v
    up = CatchUpTarget(upstream_version=4)
    assert remaining(CheckpointState(), up) == 5
    assert remaining(CheckpointState(batch_id=2, offsets={"reservoirVersion": 4, "index": -1}), up) == 1
    assert remaining(CheckpointState(batch_id=3, offsets={"reservoirVersion": 5, "index": -1}), up) == 0
    assert remaining(CheckpointState(), CatchUpTarget(upstream_version=-1)) == 0  # empty upstream


def test_checkpoint_reader_takes_paths_and_file_uris(tmp_path):
    from kappa.streaming.checkpoint import read_checkpoint

    cp = tmp_path / "cp"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()
    (cp / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"weather":{"0":7}}\n')
    (cp / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n{"weather":{"0":9}}\n')
    (cp / "commits" / "0").write_text("v1\n{}\n")
    for location in (cp, f"file://{cp}"):
        state = read_checkpoint(location)
        assert (state.batch_id, state.offsets, state.planned_batch_id) == (0, {"weather": {"0": 7}}, 1)
        assert state.committed_at is not None
    assert read_checkpoint(f"file://{tmp_path}/missing").batch_id is None


def test_the_driver_gets_the_back_pressure_default_the_code_location_has(cfg, monkeypatch):
    """The entrypoint builds the query with the same read_source, from its own load_settings():
    the default bound must reach it through the driver's environment."""
    settings = SETTINGS.model_copy(update={"max_offsets_per_trigger": 1234})
    app = build_spark_application(CATALOG["flights"], k8s.example_version(settings, CATALOG["flights"], 2), cfg, settings)
    env = _env(app["spec"]["driver"])
    assert env["KAPPA_MAX_OFFSETS_PER_TRIGGER"]["value"] == "1234"
    monkeypatch.setenv("KAPPA_MAX_OFFSETS_PER_TRIGGER", env["KAPPA_MAX_OFFSETS_PER_TRIGGER"]["value"])
    assert load_settings().kafka_batch_limit(None, continuous=True) == 1234


def test_every_application_signs_for_the_region_of_the_code_location(cfg, monkeypatch):
    """The chart's objectStore.region reaches Dagster as AWS_REGION (kappa-config); each
    SparkApplication (streaming and gate, driver and executors) gets the same, or none."""
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert "AWS_REGION" not in _env(build("flights", 2, cfg)["spec"]["driver"])
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    apps = [build("flights", 2, cfg), k8s.build_gate_application(CATALOG["weather"], _v("weather", 2), cfg, SETTINGS)]
    for app in apps:
        for role in ("driver", "executor"):
            assert _env(app["spec"][role])["AWS_REGION"] == {"name": "AWS_REGION", "value": "eu-west-3"}
    assert apps[0]["spec"]["sparkConf"]["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"


# ------------------------------------------------------------------------------------ rollback


def _promoted_twice(tmp_path):
    """A registry (real, delta-rs) where flights -> departures_hourly v1 were promoted, then the
    v2 chain replaced them (whose promotion deleted the v1 applications)."""
    from kappa.delta.declarations import provenance
    from kappa.delta.registry import Registry
    from kappa.lifecycle.promotion import commit_promotion

    settings = load_settings(home=tmp_path / "home", assets_dir=ROOT / "assets", runner="kubernetes")
    registry = Registry(settings)
    for n in (1, 2):
        registry.create_version("flights", CATALOG["flights"].fingerprint(), {},
                                **provenance(settings, CATALOG["flights"]))
        registry.create_version("departures_hourly", CATALOG["departures_hourly"].fingerprint(), {"flights": n},
                                **provenance(settings, CATALOG["departures_hourly"]))
        commit_promotion(settings, {"flights": n, "departures_hourly": n}, reason="replay",
                         chain=["flights", "departures_hourly"])
    return settings, registry


def test_rollback_runs_the_rolled_back_to_versions_again_upstream_first(cfg, tmp_path):
    from kappa.lifecycle.promotion import rollback
    from kappa.runners.kubernetes import KubernetesRunner
    from tests.kube_api import KubeApi

    settings, registry = _promoted_twice(tmp_path)
    api = KubeApi()
    api.script("flights-v1", "SUBMITTED", "RUNNING")
    api.script("departures-hourly-v1", "RUNNING")
    clock = _Clock()
    runner = KubernetesRunner(cfg, settings, SparkApplications(cfg.namespace, api=api), poll_s=2, clock=clock,
                              sleep=clock.sleep)
    steps: list[str] = []
    assert rollback(settings, "departures_hourly", runner=runner, on_step=steps.append) == {
        "departures_hourly": 1, "flights": 1}
    # the applications the v2 promotion deleted exist again, upstream first, built from v1's record
    assert [c for c in api.calls if c[0] == "create" and "-peers-" not in c[1]] == [
        ("create", "flights-v1"), ("create", "departures-hourly-v1")]
    registry.refresh()  # the rollback's events: another command's
    for asset, app in (("flights", "flights-v1"), ("departures_hourly", "departures-hourly-v1")):
        v1 = registry.version(asset, 1)
        env = _env(api.app(app)["spec"]["driver"])
        assert env["KAPPA_CHECKPOINT_PATH"]["value"] == str(v1.checkpoint_path)  # continues from its checkpoint
        assert env["KAPPA_TXN_APP_ID"]["value"] == v1.txn_app_id
        running = v1.last("running")
        assert running is not None and running["application"] == app and running["reason"] == "rollback"
        assert registry.promoted(asset).version == 1
    assert api.app("departures-hourly-v1")["spec"]["arguments"][-2:] == ["--upstream", "flights=1"]
    assert steps == ["flights/v1 runs again (data/flights-v1, from its checkpoint)",
                     "departures_hourly/v1 runs again (data/departures-hourly-v1, from its checkpoint)"]


def test_a_rollback_whose_application_fails_says_so_and_the_names_stay_rolled_back(cfg, tmp_path):
    from kappa.lifecycle.promotion import rollback
    from kappa.runners.base import RunError
    from kappa.runners.kubernetes import KubernetesRunner
    from tests.kube_api import KubeApi

    settings, registry = _promoted_twice(tmp_path)
    api = KubeApi()
    api.script("flights-v1", "SUBMISSION_FAILED:image pull back-off")
    clock = _Clock()
    runner = KubernetesRunner(cfg, settings, SparkApplications(cfg.namespace, api=api), poll_s=2, clock=clock,
                              sleep=clock.sleep)
    with pytest.raises(RunError, match="flights/v1 is promoted again but its query does not run.*image pull back-off"):
        rollback(settings, "flights", runner=runner)
    assert registry.refresh().promoted("flights").version == 1 and registry.version("flights", 1).last("running") is None


def test_a_local_rollback_starts_no_query(tmp_path):
    """Local queries live in the process that started them (`kappa run`): a rollback process
    starts none, and never creates a Spark session for it."""
    from kappa.lifecycle.promotion import rollback
    from kappa.runners.local import LocalRunner

    settings, registry = _promoted_twice(tmp_path)
    settings = settings.model_copy(update={"runner": "local"})
    runner = LocalRunner(settings)
    assert rollback(settings, "flights", runner=runner) == {"flights": 1, "departures_hourly": 1}
    assert runner._spark is None and runner._running == {}
    assert registry.version("flights", 1).last("running") is None


def test_without_network_policies_the_runner_creates_no_peers_policy(cfg):
    from tests.kube_api import KubeApi

    api = KubeApi()
    runner, _ = _runner(cfg.model_copy(update={"network_policies": False}), api)
    api.script("flights-v1", "RUNNING")
    assert runner.start(CATALOG["flights"], _v("flights", 1)).outcome is Outcome.RUNNING
    assert api.names() == {"flights-v1"} and api.policies() == {}


def test_a_refused_peers_policy_deletes_the_new_application_and_says_why(cfg):
    # On a cluster that enforces the chart's NetworkPolicies an application without its peers
    # policy could not reach its executors: it is not left behind.
    from tests.kube_api import KubeApi, _error

    class NoPolicies(KubeApi):
        def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kw):
            if plural == "networkpolicies":
                raise _error(403, "Forbidden", 'networkpolicies.networking.k8s.io is forbidden: User '
                             '"system:serviceaccount:data:kappa-dagster-run" cannot create resource')
            return super().create_namespaced_custom_object(group, version, namespace, plural, body, **kw)

    api = NoPolicies()
    runner, _ = _runner(cfg, api)
    with pytest.raises(RunError, match=r"data/flights-v1: its peers NetworkPolicy was refused \(403 .*"
                                       r"KAPPA_K8S_NETWORK_POLICIES=false.*the application was deleted"):
        runner.start(CATALOG["flights"], _v("flights", 1))
    assert api.names() == set()


def test_each_application_gets_its_own_rpc_key_in_a_secret_file_never_in_its_spec(cfg):
    # issue 40: Spark RPC authenticated and encrypted with a key read from a file in driver and
    # executors; without the files Spark would write a generated key into every executor pod's env
    import base64

    from tests.kube_api import KubeApi

    api = KubeApi()
    runner, _ = _runner(cfg, api)
    api.script("flights-v1", "RUNNING")
    runner.start(CATALOG["flights"], _v("flights", 1))
    app = api.app("flights-v1")
    conf = app["spec"]["sparkConf"]
    assert conf["spark.authenticate"] == conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.authenticate.secret.driver.file"] == conf["spark.authenticate.secret.executor.file"] == \
        "/etc/kappa/spark-auth/secret"
    assert not any(k in conf for k in ("spark.authenticate.secret", "spark.authenticate.secret.file"))
    (name,) = [c[1] for c in api.calls if c[0] == "create_secret"]
    assert re.fullmatch(r"flights-v1-auth-[0-9a-f]{8}", name)
    secret = api.objects[("", "v1", "data", "secrets", name)]
    assert secret["type"] == "Opaque" and list(secret["data"]) == ["secret"]
    assert len(base64.b64decode(secret["data"]["secret"])) == 32
    assert secret["metadata"]["ownerReferences"] == [{"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                                      "kind": "SparkApplication", "name": "flights-v1",
                                                      "uid": app["metadata"]["uid"]}]
    for role in ("driver", "executor"):
        spec = app["spec"][role]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "spark-auth"]
        assert volume["secret"]["secretName"] == name
        assert {"name": "spark-auth", "mountPath": "/etc/kappa/spark-auth", "readOnly": True} in \
            spec["containers"][0]["volumeMounts"]
    assert secret["data"]["secret"] not in json.dumps(app)
    # a new incarnation of the application gets a Secret of a new name (the old one may still be
    # waiting for the garbage collector)
    assert build("flights", 1, cfg)["spec"]["driver"]["template"]["spec"]["volumes"] != \
        app["spec"]["driver"]["template"]["spec"]["volumes"]


def test_a_refused_rpc_key_secret_deletes_the_new_application_and_says_why(cfg):
    from tests.kube_api import KubeApi, _error

    class NoSecrets(KubeApi):
        def create_namespaced_secret(self, namespace, body, **kw):
            raise _error(403, "Forbidden", 'secrets is forbidden: User "system:serviceaccount:data:kappa-dagster-run" '
                         'cannot create resource "secrets"')

    api = NoSecrets()
    runner, _ = _runner(cfg, api)
    with pytest.raises(RunError, match=r"data/flights-v1: its Spark RPC key Secret was refused \(403 .*"
                                       r"create on secrets.*the application was deleted"):
        runner.start(CATALOG["flights"], _v("flights", 1))
    assert api.names() == set()


def test_checkpoint_result_reads_records_and_end_offsets_from_the_checkpoint(tmp_path):
    """The result a detached run reports (no Spark): records read from the Kafka offsets less the
    version's recorded log start, the end offsets as committed, and nothing for a table not written."""
    from kappa.runners.kubernetes.runner import checkpoint_result
    from kappa.streaming.checkpoint import CheckpointState

    settings = load_settings(home=tmp_path / "home")
    spec = CATALOG["weather"]
    v = k8s.example_version(settings, spec, 2, {})  # local paths: no table there yet
    v.events.append({"event": "created", "details": {"start_offsets": {"weather": {"0": 4}}}})
    cp = CheckpointState(batch_id=1, offsets={"weather": {"0": 10, "1": 5}})
    result = checkpoint_result(settings, spec, v, cp, seconds=2.0)
    assert (result.input_rows, result.end_offsets, result.batches) == (11, {"weather": {"0": 10, "1": 5}}, 2)
    assert (result.rows, result.delta_version, result.input_rows_per_s) == (0, None, 5.5)
