"""Issue 23, items 4 and 5 in the kappa chart: default-deny egress with an allow rule per component,
an image pinned by digest that admission enforces, the SQL endpoint's read-only root filesystem and
bounded scratch space, and admission of the Jobs Dagster launches. Asserted on the objects
`helm template` renders (the attacks themselves, where an API server answers: tests/kubernetes)."""

from __future__ import annotations

import pytest
import yaml

from helmtools import CHART, DEFAULT_VALUES, ROOT, helm, kinds, render, render_fails

DIGEST = "sha256:" + "ab" * 32


def _policies(objs: list[dict]) -> dict[str, dict]:
    return {p["metadata"]["name"]: p["spec"] for p in kinds(objs, "NetworkPolicy")}


def _egress_ports(rule: dict) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for p in rule["ports"]}


# ------------------------------------------------------------------------------------------ egress


def test_every_pod_of_the_namespace_is_denied_egress_by_default(rendered):
    policies = _policies(rendered)
    assert policies["kappa-default-deny-egress"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    # and no policy opens egress to everything: every rule names ports or peers, none is empty
    for name, spec in policies.items():
        for rule in spec.get("egress", []):
            assert rule.get("to") or rule.get("ports"), f"{name}: an egress rule without `to` or `ports` opens everything"


def test_every_pod_reaches_only_the_cluster_dns_on_port_53(default_objects):
    dns = _policies(default_objects)["kappa-egress-dns"]
    assert dns["podSelector"] == {}
    (rule,) = dns["egress"]
    assert rule["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                           "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    assert _egress_ports(rule) == {("UDP", 53), ("TCP", 53)}


def test_kafka_clients_reach_only_the_brokers_client_listener(rendered):
    (kafka,) = kinds(rendered, "Kafka")
    clients = _policies(rendered)["kappa-egress-kafka-clients"]
    assert clients["podSelector"] == {"matchLabels": {"kappa.dev/kafka-client": "true"}}
    (rule,) = clients["egress"]
    assert rule["to"] == [{"podSelector": {"matchLabels": {"strimzi.io/cluster": kafka["metadata"]["name"],
                                                           "strimzi.io/kind": "Kafka"}}}]
    port = next(li["port"] for li in kafka["spec"]["kafka"]["listeners"] if li["name"] != "external")
    assert _egress_ports(rule) == {("TCP", port)}


def _rules_by_port(spec: dict) -> dict[int, dict]:
    return {p["port"]: r for r in spec["egress"] for p in r.get("ports", [])}


def test_each_component_reaches_exactly_what_it_needs(default_objects):
    """(component -> the ports its egress policy opens, besides DNS and the Kafka-client rule)"""
    policies = _policies(default_objects)
    expected = {
        "kappa-egress-streaming-asset": {443},          # object store (its own application: the peers policy)
        "kappa-egress-gate": {443},
        "kappa-egress-spark-drivers": {443, 6443},      # API: executor pods
        "kappa-egress-sql-endpoint": {443},             # object store only: no API, no Kafka
        "kappa-egress-sql-clients": {10000},
        "kappa-egress-dagster": {5432, 3030},           # Dagster's database, the code location
        "kappa-egress-dagster-daemon": {443, 6443},     # API: run Jobs
        "kappa-egress-dagster-code-location": {5432, 443, 6443},
        "kappa-egress-dagster-runs": {443, 6443, 80},   # object store, API, the writable webserver
        "kappa-egress-kafka-entity-operator": {443, 6443},
    }
    for name, ports in expected.items():
        assert set(_rules_by_port(policies[name])) == ports, name
    # a Spark pod reaches no other Spark pod through the chart's policies (driver <-> executors of
    # one application: the peers policy the runner creates with it)
    for kind in ("streaming-asset", "gate"):
        spec = policies[f"kappa-egress-{kind}"]
        assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/component": kind}}
        assert [r for r in spec["egress"] if "ports" not in r] == []
    assert policies["kappa-egress-spark-drivers"]["podSelector"]["matchLabels"] == {"spark-role": "driver"}
    # the SQL clients reach the endpoint's pods, and the endpoint nothing but the object store
    (to_serve,) = policies["kappa-egress-sql-clients"]["egress"]
    assert to_serve["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "sql-endpoint"
    assert len(policies["kappa-egress-sql-endpoint"]["egress"]) == 1
    assert policies["kappa-egress-dagster-runs"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/component": "run_worker"}}
    assert policies["kappa-egress-dagster-daemon"]["podSelector"] == {"matchLabels": {"component": "dagster-daemon"}}


@pytest.mark.parametrize("value", ["networkPolicy.egress.objectStorePeers", "networkPolicy.egress.kubernetesApiPeers",
                                   "networkPolicy.egress.dagsterDatabasePeers", "connect.networkPolicy.databasePeers",
                                   "connect.networkPolicy.kubernetesApiPeers"])
def test_the_egress_peers_are_required_no_default_opens_a_port_to_any_address(value, tmp_path):
    # issue 40: a rule without `to` reaches every address on its ports; the values must say where.
    # The chart's default ([]) is refused by the schema, and by the template's own check, which
    # says what to write
    *parents, key = value.split(".")
    empty: dict = {key: []}
    for p in reversed(parents):
        empty = {p: empty}
    (tmp_path / "empty.yaml").write_text(yaml.safe_dump(empty))
    args = ["template", "kappa", str(CHART), "-n", "kappa", "-f", str(DEFAULT_VALUES), "-f", str(tmp_path / "empty.yaml")]
    schema = helm(*args, check=False)
    assert schema.returncode != 0 and f"at '/{value.replace('.', '/')}': minItems: got 0, want 1" in schema.stderr, schema.stderr
    template = helm(*args, "--skip-schema-validation", check=False)
    assert template.returncode != 0 and f"{value} is required" in template.stderr and "0.0.0.0/0" in template.stderr


def test_every_egress_rule_names_its_peers_in_every_scenario(rendered):
    for policy in kinds(rendered, "NetworkPolicy"):
        for rule in policy["spec"].get("egress") or []:
            assert rule.get("to"), (policy["metadata"]["name"], rule)


def test_named_peers_narrow_the_object_store_api_and_database_rules():
    objs = render(sets=("networkPolicy.egress.objectStorePeers[0].ipBlock.cidr=10.0.5.0/24",
                        "networkPolicy.egress.objectStorePorts={9000}",
                        "networkPolicy.egress.kubernetesApiPeers[0].ipBlock.cidr=10.96.0.1/32",
                        "networkPolicy.egress.kubernetesApiPorts={443}",
                        "networkPolicy.egress.dagsterDatabasePeers[0].ipBlock.cidr=10.0.9.7/32"))
    rules = _rules_by_port(_policies(objs)["kappa-egress-dagster-code-location"])
    assert rules[9000]["to"] == [{"ipBlock": {"cidr": "10.0.5.0/24"}}]
    assert rules[443]["to"] == [{"ipBlock": {"cidr": "10.96.0.1/32"}}]
    assert rules[5432]["to"] == [{"ipBlock": {"cidr": "10.0.9.7/32"}}]
    assert set(rules) == {9000, 443, 5432}


def test_the_code_location_reaches_the_alert_webhook_only_when_its_peers_are_named():
    # default: no webhook peers, so no port beyond the database, the object store and the API
    assert set(_rules_by_port(_policies(render())["kappa-egress-dagster-code-location"])) == {5432, 443, 6443}
    objs = render(sets=("networkPolicy.egress.alertWebhookPeers[0].ipBlock.cidr=203.0.113.7/32",
                        "networkPolicy.egress.alertWebhookPorts={8443}"))
    spec = _policies(objs)["kappa-egress-dagster-code-location"]
    assert _rules_by_port(spec)[8443] == {"to": [{"ipBlock": {"cidr": "203.0.113.7/32"}}],
                                           "ports": [{"protocol": "TCP", "port": 8443}]}
    # ... and only the code location (where the health sensor runs) gets it
    others = [n for n, sp in _policies(objs).items() if n != "kappa-egress-dagster-code-location"
              and "egress" in sp and 8443 in _rules_by_port(sp)]
    assert others == []
    assert "alertWebhookPorts" in render_fails("networkPolicy.egress.alertWebhookPorts={0}")
    # the URL is a credential: the code location reads it from an optional Secret, never a value
    dagster = yaml.safe_load((ROOT / "helm" / "values" / "dagster.yaml").read_text())
    (deployment,) = dagster["dagster-user-deployments"]["deployments"]
    (hook,) = [e for e in deployment["env"] if e["name"] == "KAPPA_ALERT_WEBHOOK"]
    assert hook["valueFrom"] == {"secretKeyRef": {"name": "kappa-alert-webhook", "key": "url", "optional": True}}


def test_ci_scenarios_name_their_object_store(rendered, scenario):
    rules = _rules_by_port(_policies(rendered)["kappa-egress-sql-endpoint"])
    if scenario == "s3-compatible-values.yaml":  # MinIO in its namespace, on 9000
        assert rules[9000]["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}]
    if scenario == "production-values.yaml":
        assert all(r.get("to") for r in rules.values())


def test_egress_can_be_left_to_the_cluster_but_not_half_configured():
    objs = render(sets=("networkPolicy.egress.enabled=false",))
    # (Connect's workers keep their own egress policy: connect.networkPolicy)
    assert [n for n in _policies(objs) if "egress" in n] == ["kappa-cdc-connect-egress"]
    assert "kappa-default-deny-ingress" in _policies(objs)
    assert "dnsPeers" in render_fails("networkPolicy.egress.dnsPeers=null")


# ------------------------------------------------------------------------------------ the image


def _admission_images(objs: list[dict]) -> dict[str, str]:
    out = {}
    for p in kinds(objs, "ValidatingAdmissionPolicy"):
        variables = {v["name"]: v["expression"] for v in p["spec"].get("variables", [])}
        out[p["metadata"]["name"]] = variables.get("image", "") + " ".join(
            v["expression"] for v in p["spec"]["validations"])
    return out


def test_an_image_digest_pins_every_pod_the_runner_and_admission():
    objs = render(sets=(f"image.digest={DIGEST}", "image.tag=moving"))
    pinned = f"registry.example.com/kappa/kappa@{DIGEST}"
    (cm,) = kinds(objs, "ConfigMap")
    assert cm["data"]["KAPPA_K8S_IMAGE"] == pinned
    (serve,) = [d for d in kinds(objs, "Deployment") if d["metadata"]["name"] == "kappa-serve"]
    assert serve["spec"]["template"]["spec"]["containers"][0]["image"] == pinned
    images = _admission_images(objs)
    assert f"'{pinned}'" in images["kappa-sparkapplications-kappa"] and f"'{pinned}'" in images["kappa-spark-pods-kappa"]
    assert f"'@{DIGEST}'" in images["kappa-dagster-runs-kappa"]
    assert "moving" not in str(objs)


def test_without_a_digest_the_tag_is_used():
    (cm,) = kinds(render(), "ConfigMap")
    assert cm["data"]["KAPPA_K8S_IMAGE"] == "registry.example.com/kappa/kappa:0.1.0"


@pytest.mark.parametrize("digest", ["sha256:abc", "latest", "sha512:" + "a" * 128])
def test_values_refuse_a_digest_that_is_not_sha256(digest):
    assert "digest" in render_fails(f"image.digest={digest}")


# ---------------------------------------------------------------------------- the SQL endpoint


def test_sql_endpoint_has_a_read_only_root_and_bounded_scratch_space(rendered):
    (serve,) = [d for d in kinds(rendered, "Deployment") if d["metadata"]["name"] == "kappa-serve"]
    pod = serve["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["automountServiceAccountToken"] is False
    # every writable path is an emptyDir with a size limit, and the pod's ephemeral storage is bounded
    writable = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"] if not m.get("readOnly")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(writable) == {"/opt/kappa/work", "/tmp"}
    for name in writable.values():
        assert volumes[name]["emptyDir"]["sizeLimit"]
    assert ctr["resources"]["requests"]["ephemeral-storage"] and ctr["resources"]["limits"]["ephemeral-storage"]


def test_sql_endpoint_speaks_tls_with_a_keystore_from_its_secret_and_tells_its_clients(rendered):
    """Item 2: HiveServer2 SSL in the chart. The keystore and its password come from an existing
    Secret mounted read-only (the password as a file: never in the environment or values), and the
    kappa-config every Kappa pod reads says the endpoint speaks TLS (dbt's use_ssl)."""
    (serve,) = [d for d in kinds(rendered, "Deployment") if d["metadata"]["name"] == "kappa-serve"]
    pod = serve["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["KAPPA_SERVE_TLS_KEYSTORE"]["value"] == "/etc/kappa/serve-tls/keystore.p12"
    assert env["KAPPA_SERVE_TLS_PASSWORD_FILE"]["value"] == "/etc/kappa/serve-tls/password"
    assert not any("valueFrom" in e and "tls" in str(e["valueFrom"]) for e in ctr["env"])
    (mount,) = [m for m in ctr["volumeMounts"] if m["mountPath"] == "/etc/kappa/serve-tls"]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "kappa-serve-tls" and volume["secret"]["defaultMode"] == 0o440
    (config,) = [c for c in kinds(rendered, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert config["data"]["KAPPA_SERVE_TLS"] == "true"


def test_sql_endpoint_tls_off_renders_no_keystore_and_tells_clients_so():
    objs = render(sets=("serve.tls.enabled=false",))
    (serve,) = [d for d in kinds(objs, "Deployment") if d["metadata"]["name"] == "kappa-serve"]
    (ctr,) = serve["spec"]["template"]["spec"]["containers"]
    assert not {"KAPPA_SERVE_TLS_KEYSTORE", "KAPPA_SERVE_TLS_PASSWORD_FILE"} & {e["name"] for e in ctr["env"]}
    (config,) = [c for c in kinds(objs, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert config["data"]["KAPPA_SERVE_TLS"] == "false"


def test_values_refuse_sql_endpoint_resources_without_ephemeral_storage():
    assert "ephemeral-storage" in render_fails("serve.resources.limits.ephemeral-storage=null")


# --------------------------------------------------------------------------------- Dagster Jobs


def test_jobs_dagster_launches_are_held_to_the_kappa_image_run_account_and_secrets(rendered):
    (policy,) = [p for p in kinds(rendered, "ValidatingAdmissionPolicy") if p["metadata"]["name"] == "kappa-dagster-runs-kappa"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["jobs"]
    assert spec["matchConditions"][0]["expression"] == "request.userInfo.username == 'system:serviceaccount:kappa:kappa-dagster'"
    text = " ".join(v["expression"] for v in spec["validations"])
    assert "'kappa-dagster-run'" in text
    secrets = next(v["expression"] for v in spec["variables"] if v["name"] == "secrets")
    assert "'kappa-dagster-postgresql'" in secrets and "'kappa-control'" in secrets
    (binding,) = [b for b in kinds(rendered, "ValidatingAdmissionPolicyBinding")
                  if b["spec"]["policyName"] == "kappa-dagster-runs-kappa"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_every_container_the_chart_sizes_has_an_ephemeral_storage_limit(rendered):
    """The SQL endpoint, and the Kafka, entity-operator and Connect containers Strimzi runs from the
    chart's resources: a container that fills its node's disk is evicted, not the node's others."""
    (kafka,) = kinds(rendered, "Kafka")
    eo = kafka["spec"]["entityOperator"]
    sized = {"topic operator": eo["topicOperator"]["resources"], "user operator": eo["userOperator"]["resources"],
             **{f"pool {p['metadata']['name']}": p["spec"]["resources"] for p in kinds(rendered, "KafkaNodePool")},
             **{f"connect {c['metadata']['name']}": c["spec"]["resources"] for c in kinds(rendered, "KafkaConnect")},
             **{f"deployment {d['metadata']['name']}": ctr["resources"] for d in kinds(rendered, "Deployment")
                for ctr in d["spec"]["template"]["spec"]["containers"]}}
    for what, res in sized.items():
        assert res["requests"]["ephemeral-storage"] and res["limits"]["ephemeral-storage"], what
