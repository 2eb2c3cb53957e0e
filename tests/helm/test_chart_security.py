"""The kappa chart's security defaults, asserted on the objects `helm template` renders, for the
default values and every ci/*-values.yaml scenario."""

from __future__ import annotations

import re

import yaml

from helmtools import CHART, ROOT, kinds, render, render_fails
from kappa.cdc import connect
from kappa.cdc.connectors import load_connectors
from kappa.runners.kubernetes import group_prefix, kafka_user_name
from kappa.spec import load_catalog

CATALOG = load_catalog(ROOT / "assets")
KAFKA_ASSETS = {s.name: s for s in CATALOG if s.topics}
CONNECTORS = load_connectors(ROOT / "assets")
CHANGELOGS = {t for c in CONNECTORS.values() for t in c.topics}
HEARTBEATS = {c.heartbeat_topic for c in CONNECTORS.values() if c.heartbeat_topic}


def _acls(user: dict) -> list[dict]:
    return user["spec"]["authorization"]["acls"]


def _users(objs: list[dict], role: str) -> list[dict]:
    return [u for u in kinds(objs, "KafkaUser") if u["metadata"]["labels"].get("kappa.dev/user-role") == role]


# ----------------------------------------------------------------------------------------- Kafka


def test_should_not_render_a_plaintext_or_unauthenticated_kafka_listener(rendered):
    (kafka,) = kinds(rendered, "Kafka")
    listeners = kafka["spec"]["kafka"]["listeners"]
    assert listeners
    for listener in listeners:
        assert listener["tls"] is True, listener
        assert listener["authentication"]["type"] in ("scram-sha-512", "tls"), listener


def test_default_listener_is_tls_with_scram_sha_512_and_admits_only_kafka_clients(default_objects):
    (kafka,) = kinds(default_objects, "Kafka")
    (listener,) = kafka["spec"]["kafka"]["listeners"]
    assert listener["authentication"] == {"type": "scram-sha-512"}
    assert listener["networkPolicyPeers"] == [{"podSelector": {"matchLabels": {"kappa.dev/kafka-client": "true"}}}]


def test_values_refuse_a_listener_without_authentication():
    assert "authentication" in render_fails("kafka.listener.authentication=none")


def test_kafka_runs_in_kraft_mode_with_node_pools_and_simple_authorization(rendered):
    (kafka,) = kinds(rendered, "Kafka")
    assert kafka["metadata"]["annotations"]["strimzi.io/kraft"] == "enabled"
    assert kafka["metadata"]["annotations"]["strimzi.io/node-pools"] == "enabled"
    assert "zookeeper" not in kafka["spec"]
    assert kafka["spec"]["kafka"]["authorization"]["type"] == "simple"
    roles = {r for pool in kinds(rendered, "KafkaNodePool") for r in pool["spec"]["roles"]}
    assert roles == {"controller", "broker"}
    for pool in kinds(rendered, "KafkaNodePool"):
        assert pool["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]


def test_should_not_render_super_users_by_default(default_objects):
    (kafka,) = kinds(default_objects, "Kafka")
    assert "superUsers" not in kafka["spec"]["kafka"]["authorization"]


def test_should_not_auto_create_topics(rendered):
    (kafka,) = kinds(rendered, "Kafka")
    assert kafka["spec"]["kafka"]["config"]["auto.create.topics.enable"] is False


def test_a_node_pool_set_without_controllers_is_refused():
    err = render_fails("kafka.nodePools[0].name=b", "kafka.nodePools[0].roles={broker}",
                       "kafka.nodePools[0].replicas=3", "kafka.nodePools[0].storage.type=ephemeral")
    assert "controller" in err


# ---------------------------------------------------------------------------------------- topics


def _topics(objs: list[dict], role: str = "source") -> list[dict]:
    return [t for t in kinds(objs, "KafkaTopic") if t["metadata"]["labels"]["kappa.dev/topic-role"] == role]


def test_every_declared_source_topic_has_a_kafkatopic(rendered):
    topics = {t["spec"]["topicName"]: t for t in _topics(rendered)}
    assert set(topics) == set(CATALOG.topics)
    # the only other topics are Kafka Connect's three internal ones and Debezium's heartbeat topics
    others = {t["spec"]["topicName"] for t in kinds(rendered, "KafkaTopic")} - set(topics)
    assert others == {connect.CONFIG_TOPIC, connect.OFFSET_TOPIC, connect.STATUS_TOPIC, *HEARTBEATS}


def test_source_topics_keep_a_week_archived_and_changelogs_forever_by_default(default_objects):
    for topic in _topics(default_objects):
        config = topic["spec"]["config"]
        # flights and weather: 7 days on the brokers, the rest in their bronze archives (issue 45)
        assert config["retention.ms"] == ("-1" if topic["spec"]["topicName"].startswith("ops.") else "604800000")
        # changelogs of the operational database (Debezium) are compacted: the latest row per key
        expected = "compact" if topic["spec"]["topicName"].startswith("ops.") else "delete"
        assert config["cleanup.policy"] == expected
        # the broker's clock stamps records: old event times must not expire the producer's state
        assert config["message.timestamp.type"] == "LogAppendTime"


def test_retention_can_be_bounded_for_every_topic_or_one():
    every = render(sets=("topics.retentionMs=86400000",))
    assert {t["spec"]["config"]["retention.ms"] for t in _topics(every)} == {"86400000"}
    one = render(sets=("topics.overrides.weather.config.retention\\.ms=1000", "topics.overrides.weather.partitions=6"))
    by_name = {t["spec"]["topicName"]: t["spec"] for t in kinds(one, "KafkaTopic")}
    assert by_name["weather"]["config"]["retention.ms"] == "1000" and by_name["weather"]["partitions"] == 6
    assert by_name["flights"]["config"]["retention.ms"] == "604800000"


def test_compacted_topics_get_log_compaction(tmp_path):
    """A table-like topic (`compacted: true` in assets/topics.yaml) renders cleanup.policy=compact."""
    import shutil

    from kappa.runners.kubernetes import render_chart_catalog

    assets = tmp_path / "assets"
    (assets / "customers").mkdir(parents=True)
    (assets / "topics.yaml").write_text(
        "topics:\n  customers: {partitions: 2, compacted: true}\n  orders: {partitions: 4}\n")
    (assets / "customers" / "customers_bronze.yaml").write_text(
        "name: customers_bronze\nlayer: bronze\nsource: {kafka: {topics: [customers]}}\ntransform: {raw: {}}\n")
    chart = tmp_path / "kappa"
    shutil.copytree(CHART, chart)
    (chart / "catalog.yaml").write_text(render_chart_catalog(assets))
    objs = render(chart=chart)
    by_name = {t["spec"]["topicName"]: t["spec"] for t in kinds(objs, "KafkaTopic")}
    assert by_name["customers"]["config"]["cleanup.policy"] == "compact"
    assert by_name["customers"]["partitions"] == 2
    assert by_name["orders"]["config"]["cleanup.policy"] == "delete"
    users = {u["metadata"]["name"] for u in _users(objs, "streaming-asset")}
    assert users == {"kappa-asset-customers-bronze"}


# ----------------------------------------------------------------------------------------- users


def test_every_kafka_user_is_authenticated(rendered):
    (kafka,) = kinds(rendered, "Kafka")
    listener_auth = kafka["spec"]["kafka"]["listeners"][0]["authentication"]["type"]
    users = kinds(rendered, "KafkaUser")
    assert users
    for user in users:
        assert user["spec"]["authentication"]["type"] == listener_auth, user["metadata"]["name"]
        assert user["spec"]["authorization"]["type"] == "simple"
        assert user["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]


def test_should_not_grant_wildcards_cluster_or_administrative_operations(rendered):
    allowed_ops = {"Read", "Write", "Describe", "DescribeConfigs"}
    for user in kinds(rendered, "KafkaUser"):
        for acl in _acls(user):
            res = acl["resource"]
            assert res["type"] in ("topic", "group"), (user["metadata"]["name"], acl)
            assert res["name"] not in ("*", ""), acl
            assert set(acl["operations"]) <= allowed_ops, acl
            assert acl.get("type", "allow") == "allow"


def test_ingest_may_only_write_and_describe_the_source_topics(rendered):
    (ingest,) = _users(rendered, "ingest")
    by_topic = {a["resource"]["name"]: a for a in _acls(ingest)}
    # not the changelog topics of the connectors: Kafka Connect alone writes those
    assert set(by_topic) == set(CATALOG.topics) - CHANGELOGS and CHANGELOGS <= set(CATALOG.topics)
    for acl in by_topic.values():
        assert acl["resource"] == {"type": "topic", "name": acl["resource"]["name"], "patternType": "literal"}
        assert sorted(acl["operations"]) == ["Describe", "Write"]


def test_control_user_may_only_describe_the_source_topics(rendered):
    (control,) = _users(rendered, "control")
    for acl in _acls(control):
        assert acl["resource"]["type"] == "topic" and acl["resource"]["patternType"] == "literal"
        assert sorted(acl["operations"]) == ["Describe", "DescribeConfigs"]


def test_each_streaming_asset_reads_only_its_sources_and_its_own_group_prefix(rendered):
    users = {u["metadata"]["name"]: u for u in _users(rendered, "streaming-asset")}
    assert set(users) == {kafka_user_name(n) for n in KAFKA_ASSETS}
    for name, spec in KAFKA_ASSETS.items():
        acls = _acls(users[kafka_user_name(name)])
        topic_acls = [a for a in acls if a["resource"]["type"] == "topic"]
        group_acls = [a for a in acls if a["resource"]["type"] == "group"]
        assert {a["resource"]["name"] for a in topic_acls} == set(spec.topics)
        for a in topic_acls:
            assert a["resource"]["patternType"] == "literal"
            assert sorted(a["operations"]) == ["Describe", "Read"]
        assert group_acls == [{
            "resource": {"type": "group", "name": group_prefix(name), "patternType": "prefix"},
            "operations": ["Read"], "host": "*",
        }]


def test_group_prefixes_of_two_assets_never_overlap():
    prefixes = [group_prefix(n) for n in CATALOG.assets]
    for a in prefixes:
        for b in prefixes:
            assert a == b or not b.startswith(a), (a, b)


def test_should_not_render_a_kafka_user_for_assets_that_read_no_topic(default_objects):
    names = {u["metadata"]["name"] for u in kinds(default_objects, "KafkaUser")}
    for spec in CATALOG:
        if not spec.topics:
            assert kafka_user_name(spec.name) not in names


# --------------------------------------------------------------------------------------- secrets


def test_should_not_render_any_secret(rendered):
    assert kinds(rendered, "Secret") == []
    for obj in rendered:
        assert "stringData" not in obj
        if obj["kind"] != "ConfigMap":
            assert "data" not in obj, obj["kind"]


def test_config_map_names_secrets_but_holds_no_credentials(rendered):
    (cm,) = kinds(rendered, "ConfigMap")
    for key, value in cm["data"].items():
        if key.endswith(("_SECRET", "_KEY")):  # names of a Secret and of its keys: identifiers only
            assert re.fullmatch(r"[A-Za-z0-9_.-]+", value), (key, value)
        else:
            assert not re.search(r"(?i)(password|token|secret|BEGIN .*PRIVATE KEY)", value), key
    assert cm["data"]["KAPPA_K8S_OBJECT_STORE_SECRET"]


def test_values_and_templates_hold_no_secret_data():
    # no credentials-looking key in values (they name Secrets instead) ...
    def walk(node, path=()):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, (*path, str(k)))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, (*path, str(i)))
        else:
            yield path, node

    files = [CHART / "values.yaml", *sorted((CHART / "ci").glob("*.yaml"))]
    for f in files:
        for path, value in walk(yaml.safe_load(f.read_text())):
            leaf = path[-1].lower()
            # (`passwordKey` names a key inside a Secret: an identifier, not a password)
            if re.search(r"password(?!key$)|token|secretkey$|accesskey$|credential", leaf):
                raise AssertionError(f"{f.name}: {'.'.join(path)} looks like inline credentials")
    # ... and no template renders a Secret or literal key material
    for t in (CHART / "templates").glob("*"):
        text = t.read_text()
        assert not re.search(r"^kind:\s*Secret\s*$", text, re.M), t.name
        assert "stringData" not in text and "PRIVATE KEY" not in text, t.name


def test_values_refuse_inline_object_store_credentials():
    assert "additional properties" in render_fails("objectStore.secretAccessKey=abc")


def test_object_store_secret_name_is_required_and_paths_are_s3a():
    assert "existingSecret" in render_fails("objectStore.existingSecret=")
    assert "warehouse" in render_fails("objectStore.warehouse=/data/warehouse")


# ------------------------------------------------------------------------- pod security, policies


def test_namespace_enforces_pod_security_restricted(default_objects):
    (ns,) = kinds(default_objects, "Namespace")
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"]


def test_should_not_render_the_namespace_when_it_is_managed_outside_the_chart():
    assert kinds(render(sets=("namespace.create=false",)), "Namespace") == []


def _restricted_pod(sc: dict) -> None:
    assert sc["runAsNonRoot"] is True
    assert sc["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")


def _restricted_container(sc: dict) -> None:
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not sc["capabilities"].get("add")
    assert not sc.get("privileged", False)


def test_every_pod_template_has_restricted_security_contexts(rendered):
    (kafka,) = kinds(rendered, "Kafka")
    templates = [kafka["spec"]["kafka"]["template"], *(p["spec"]["template"] for p in kinds(rendered, "KafkaNodePool"))]
    for tpl in templates:
        _restricted_pod(tpl["pod"]["securityContext"])
        _restricted_container(tpl["kafkaContainer"]["securityContext"])
        _restricted_container(tpl["initContainer"]["securityContext"])
    (kc,) = kinds(rendered, "KafkaConnect")
    templates.append(kc["spec"]["template"])
    _restricted_pod(kc["spec"]["template"]["pod"]["securityContext"])
    _restricted_container(kc["spec"]["template"]["connectContainer"]["securityContext"])
    _restricted_container(kc["spec"]["template"]["initContainer"]["securityContext"])
    eo = kafka["spec"]["entityOperator"]["template"]
    _restricted_pod(eo["pod"]["securityContext"])
    _restricted_container(eo["topicOperatorContainer"]["securityContext"])
    _restricted_container(eo["userOperatorContainer"]["securityContext"])


def test_values_refuse_a_privileged_security_context():
    assert "allowPrivilegeEscalation" in render_fails("containerSecurityContext.allowPrivilegeEscalation=true")
    assert "runAsNonRoot" in render_fails("podSecurityContext.runAsNonRoot=false")


def test_network_policies_deny_all_ingress_then_allow_only_kappa_paths(rendered):
    policies = {p["metadata"]["name"]: p["spec"] for p in kinds(rendered, "NetworkPolicy")}
    deny = policies["kappa-default-deny-ingress"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    for name, spec in policies.items():
        for rule in spec.get("ingress", []):
            assert rule.get("from"), f"{name}: an ingress rule without `from` admits every source"
    # no chart policy admits Spark pods from other Spark pods: one application's driver and
    # executors reach each other through the peers policy the runner creates with it
    # (tests/unit/test_kubernetes_runner.py, tests/kubernetes/test_admission.py and the plane test)
    for name, spec in policies.items():
        for rule in spec.get("ingress", []):
            for peer in rule["from"]:
                labels = peer.get("podSelector", {}).get("matchLabels", {})
                assert labels.get("app.kubernetes.io/component") not in ("streaming-asset", "gate"), name
    (cm,) = [c for c in kinds(rendered, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert cm["data"]["KAPPA_K8S_NETWORK_POLICIES"] == "true"


def test_a_loadbalancer_listener_admits_only_the_named_client_networks():
    assert "kafka.externalListener.sourceRanges must name the client networks" in render_fails(
        "kafka.externalListener.enabled=true")
    (kafka,) = kinds(render(sets=("kafka.externalListener.enabled=true",
                                  "kafka.externalListener.sourceRanges={10.1.0.0/16}")), "Kafka")
    (external,) = [l for l in kafka["spec"]["kafka"]["listeners"] if l["name"] == "external"]
    assert external["configuration"]["loadBalancerSourceRanges"] == ["10.1.0.0/16"]


def test_should_not_render_network_policies_when_disabled():
    objs = render(sets=("networkPolicy.enabled=false",))
    assert kinds(objs, "NetworkPolicy") == []
    # ... and the runner creates none, nor may the run account
    (cm,) = [c for c in kinds(objs, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert cm["data"]["KAPPA_K8S_NETWORK_POLICIES"] == "false"
    assert "networkpolicies" not in str(kinds(objs, "Role"))


# -------------------------------------------------------------------------------------- Dagster


def _role_and_subjects(objs: list[dict], name: str) -> tuple[list[dict], list[dict]]:
    (role,) = [r for r in kinds(objs, "Role") if r["metadata"]["name"] == name]
    assert role["metadata"]["namespace"] == "kappa"
    (binding,) = [b for b in kinds(objs, "RoleBinding") if b["roleRef"]["name"] == name]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    return role["rules"], binding["subjects"]


def _sa(name: str) -> list[dict]:
    return [{"kind": "ServiceAccount", "name": name, "namespace": "kappa"}]


def test_only_dagsters_run_pods_may_create_sparkapplications(rendered):
    assert kinds(rendered, "ClusterRole") == [] and kinds(rendered, "ClusterRoleBinding") == []
    rules, subjects = _role_and_subjects(rendered, "kappa-dagster-sparkapplications")
    assert rules == [{"apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"],
                      "verbs": ["create", "get", "watch", "delete"]},
                     # each application's Spark RPC key: create only, never read (shape held by admission)
                     {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                     # each application's peers NetworkPolicy (shape held by admission); never changed or deleted
                     {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "create"]}]
    assert subjects == _sa("kappa-dagster-run")
    # every other Role of the chart: who holds it and that none of them names SparkApplications
    # with a write verb, Secrets beyond Connect's one, or RBAC itself
    holders = {b["roleRef"]["name"]: b["subjects"] for b in kinds(rendered, "RoleBinding")}
    assert set(holders) == {"kappa-dagster-sparkapplications", "kappa-dagster-code-location",
                            "kappa-dagster-run-launcher", "kappa-spark-drivers", "kappa-cdc-connect-database-secret"}
    for role in kinds(rendered, "Role"):
        for rule in role["rules"]:
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"], role["metadata"]["name"]
            if "sparkapplications" in rule["resources"] and role["metadata"]["name"] != "kappa-dagster-sparkapplications":
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, role["metadata"]["name"]
            if "secrets" in rule["resources"]:  # one named Secret, or create only (the RPC keys: admission)
                assert rule.get("resourceNames") or rule["verbs"] == ["create"], role["metadata"]["name"]


def test_the_code_location_may_only_read_sparkapplications(rendered):
    rules, subjects = _role_and_subjects(rendered, "kappa-dagster-code-location")
    assert rules == [{"apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"],
                      "verbs": ["get", "list", "watch"]}]
    assert subjects == _sa("kappa-dagster-code-location")


def test_the_webserver_and_daemon_may_launch_run_jobs_but_not_create_pods(rendered):
    rules, subjects = _role_and_subjects(rendered, "kappa-dagster-run-launcher")
    assert subjects == _sa("kappa-dagster")
    verbs = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert verbs == {("batch", "jobs"): {"create", "get", "list", "watch", "delete"}, ("batch", "jobs/status"): {"get"},
                     ("", "pods"): {"get", "list", "watch"}, ("", "pods/log"): {"get"}}


def test_the_chart_creates_the_run_code_location_and_read_only_webserver_accounts(rendered):
    accounts = {s["metadata"]["name"]: s for s in kinds(rendered, "ServiceAccount")}
    assert set(accounts) == {"kappa-dagster-run", "kappa-dagster-code-location", "kappa-dagster-webserver"}
    # the read-only webserver's: no token mounted by default, and no Role binds it
    assert accounts["kappa-dagster-webserver"]["automountServiceAccountToken"] is False
    bound = {s["name"] for b in kinds(rendered, "RoleBinding") for s in b["subjects"]}
    assert "kappa-dagster-webserver" not in bound and "kappa-dagster-run" in bound


def test_the_drivers_may_manage_pods_only_and_admission_holds_them_to_the_kappa_image(rendered):
    """The chart owns the drivers' Role (the spark-operator chart's is off): pods, nothing else.
    Its admission policies name the image and the Secrets a SparkApplication may use (the attacks
    themselves run against a real API server: tests/kubernetes/test_admission.py)."""
    operator = yaml.safe_load((ROOT / "helm" / "values" / "spark-operator.yaml").read_text())
    assert operator["spark"]["rbac"]["create"] is False
    (role,) = [r for r in kinds(rendered, "Role") if r["metadata"]["name"] == "kappa-spark-drivers"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"]}]
    (binding,) = [b for b in kinds(rendered, "RoleBinding") if b["roleRef"]["name"] == "kappa-spark-drivers"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kappa-spark", "namespace": "kappa"}]
    policies = {p["metadata"]["name"]: p for p in kinds(rendered, "ValidatingAdmissionPolicy")}
    # (and the Jobs Dagster launches: tests/helm/test_chart_hardening.py)
    assert set(policies) == {"kappa-sparkapplications-kappa", "kappa-spark-pods-kappa", "kappa-dagster-runs-kappa",
                             "kappa-spark-peers-kappa", "kappa-spark-pod-deletes-kappa", "kappa-spark-auth-secrets-kappa"}
    peers = policies["kappa-spark-peers-kappa"]["spec"]
    assert peers["failurePolicy"] == "Fail" and "kappa-dagster-run'" in peers["matchConditions"][0]["expression"]
    bindings = kinds(rendered, "ValidatingAdmissionPolicyBinding")
    assert {b["spec"]["policyName"] for b in bindings} == set(policies)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)
    for name in ("kappa-sparkapplications-kappa", "kappa-spark-pods-kappa", "kappa-spark-pod-deletes-kappa",
                 "kappa-spark-auth-secrets-kappa"):
        assert policies[name]["spec"]["failurePolicy"] == "Fail"
    # the Secrets: the common ones; a KafkaUser only the application's own asset's (issue 40), none
    # for the pods a driver creates (executors get the Kafka options with their tasks)
    variables = {n: {v["name"]: v["expression"] for v in policies[n]["spec"]["variables"]}
                 for n in ("kappa-sparkapplications-kappa", "kappa-spark-pods-kappa")}
    (config,) = [c for c in kinds(rendered, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    common = f"['{config['data']['KAPPA_K8S_OBJECT_STORE_SECRET']}', 'kappa-cluster-ca-cert']"
    assert variables["kappa-sparkapplications-kappa"]["secrets"] == \
        common + " + variables.ownUser + variables.ownKeys[0] + variables.ownKeys[1]"
    assert "'kappa-asset-flights'" in variables["kappa-sparkapplications-kappa"]["ownUser"]
    assert variables["kappa-spark-pods-kappa"]["secrets"].startswith(common + " + object.spec.?volumes")
    assert "kappa-asset" not in variables["kappa-spark-pods-kappa"]["secrets"]
    # the pods a driver creates and deletes are tied to the driver pod its token is bound to
    for name in ("kappa-spark-pods-kappa", "kappa-spark-pod-deletes-kappa"):
        assert "authentication.kubernetes.io/pod-uid" in str(policies[name]["spec"]["variables"])


def test_dagster_values_bind_the_same_service_account_and_load_kappa_config():
    dagster = yaml.safe_load((ROOT / "helm" / "values" / "dagster.yaml").read_text())
    chart = yaml.safe_load((CHART / "values.yaml").read_text())
    assert dagster["global"]["serviceAccountName"] == chart["dagster"]["serviceAccount"]
    (deployment,) = dagster["dagster-user-deployments"]["deployments"]
    assert {"name": "kappa-config"} in deployment["envConfigMaps"]
    assert deployment["labels"]["kappa.dev/kafka-client"] == "true"
    assert dagster["postgresql"]["enabled"] is False and dagster["generatePostgresqlPasswordSecret"] is False
    for sc in (deployment["securityContext"], dagster["dagsterWebserver"]["securityContext"]):
        _restricted_container(sc)
    # Reload re-imports the code location (a code server, not `dagster api grpc`), so an asset
    # added at run time appears; everyone gets the read-only webserver (the writable one is turned
    # off by tools/deploy.sh's post-renderer: tests/helm/test_dagster_webservers.py).
    assert deployment["codeServerArgs"] == ["--module-name", "kappa.dagster.definitions"]
    assert "dagsterApiGrpcArgs" not in deployment
    assert dagster["dagsterWebserver"]["enableReadOnly"] is True and dagster["dagsterWebserver"]["replicaCount"] >= 1


def test_only_dagster_pods_and_the_proxy_reach_the_writable_webserver_and_runs_know_where_it_is(rendered):
    policies = {p["metadata"]["name"]: p["spec"] for p in kinds(rendered, "NetworkPolicy")}
    writable = policies["kappa-dagster-webserver-writable"]
    assert writable["podSelector"]["matchLabels"] == {"component": "dagster-webserver"}
    assert writable["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "dagster"}}}],
                                    "ports": [{"protocol": "TCP", "port": 80}]}]
    assert policies["kappa-dagster-webserver"]["podSelector"]["matchLabels"] == {"component": "dagster-webserver-read-only"}
    (config,) = [c for c in kinds(rendered, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert config["data"]["KAPPA_DAGSTER_URL"] == "http://dagster-dagster-webserver.kappa.svc:80"
    assert config["data"]["KAPPA_DAGSTER_LOCATION"] == "kappa"


def test_notes_tell_how_to_reach_the_dagster_ui():
    from helmtools import DEFAULT_VALUES, helm

    out = helm("install", "kappa", str(CHART), "--namespace", "kappa", "-f", str(DEFAULT_VALUES), "--dry-run=client").stdout
    notes = out.split("NOTES:", 1)[1]
    assert "port-forward svc/dagster-dagster-webserver-read-only 8080:80" in notes
    assert "only behind an\nauthenticating proxy" in notes
    assert "http://127.0.0.1:8080" in notes
    # ... and which Secret change data capture needs, and how to see the connector
    assert 'Secret "kappa-ops-database"' in notes and "get kafkaconnectors -l strimzi.io/cluster=kappa-cdc" in notes


def test_runner_config_map_is_a_valid_kubernetes_runner_config(rendered):
    from kappa.runners.kubernetes import KubernetesRunnerConfig

    from kappa.config import Settings

    (cm,) = kinds(rendered, "ConfigMap")
    data = dict(cm["data"])
    cfg = KubernetesRunnerConfig.from_mapping(data)
    assert cfg.namespace == "kappa"
    (kafka,) = kinds(rendered, "Kafka")
    assert cfg.kafka_cluster == kafka["metadata"]["name"]
    # the same ConfigMap gives Dagster's code location and run pods Kappa's settings (KAPPA_*)
    settings = Settings(**{k[len("KAPPA_"):].lower(): v for k, v in data.items()
                           if k.startswith("KAPPA_") and not k.startswith("KAPPA_K8S_")})
    assert str(settings.warehouse).startswith("s3a://") and str(settings.checkpoints).startswith("s3a://")
    assert settings.runner == "kubernetes" and settings.kafka_security_protocol == "SASL_SSL"
    assert settings.kafka_sasl_mechanism == "SCRAM-SHA-512"
    tls = next(li for li in kafka["spec"]["kafka"]["listeners"] if li.get("tls"))
    assert settings.bootstrap_servers.endswith(f":{tls['port']}")


# ----------------------------------------------------------------------- the SQL endpoint (serve)


def _serve(objs: list[dict]) -> tuple[dict, dict, dict]:
    (deployment,) = [d for d in kinds(objs, "Deployment") if d["metadata"]["name"] == "kappa-serve"]
    (service,) = [s for s in kinds(objs, "Service") if s["metadata"]["name"] == "kappa-serve"]
    (policy,) = [p for p in kinds(objs, "NetworkPolicy") if p["metadata"]["name"] == "kappa-serve"]
    return deployment, service, policy


def test_sql_endpoint_runs_kappa_serve_with_password_file_authentication(rendered):
    deployment, service, _ = _serve(rendered)
    pod = deployment["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["command"][:3] == ["/opt/kappa/venv/bin/python", "-m", "kappa.services.serve"]
    assert ctr["command"][ctr["command"].index("--port") + 1] == str(ctr["ports"][0]["containerPort"])
    env = {e["name"]: e for e in ctr["env"]}
    # every login is checked against the password file mounted from the Secret (no NONE mode)
    path = env["KAPPA_SERVE_PASSWORD_FILE"]["value"]
    (mount,) = [m for m in ctr["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "kappa-serve-users"
    assert volume["secret"]["items"] == [{"key": "users", "path": path.rsplit("/", 1)[1]}]
    # mounted 0440 (owner and group read): readable by the image's user only through fsGroup
    assert volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["runAsUser"] == 185 and pod["securityContext"]["fsGroup"] == 185
    # its own object-store identity (issue 23 item 1), never the read-write keys every writer uses,
    # as files (issue 40 item 2): no secret in the container's environment, none from a Secret
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert not [e for e in ctr["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    (cm,) = kinds(rendered, "ConfigMap")
    folder = env["KAPPA_SERVE_OBJECT_STORE_KEYS"]["value"]
    (mount,) = [m for m in ctr["volumeMounts"] if m["mountPath"] == folder]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert mount["readOnly"] is True and volume["secret"]["defaultMode"] == 0o440
    assert volume["secret"]["secretName"] == "kappa-serve-object-store" != cm["data"]["KAPPA_K8S_OBJECT_STORE_SECRET"]
    assert {i["path"] for i in volume["secret"]["items"]} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert {"configMapRef": {"name": "kappa-config"}} in ctr["envFrom"]
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    # the Service selects exactly the endpoint's pods, on its port
    assert service["spec"]["type"] == "ClusterIP"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == ctr["ports"][0]["name"]


def test_sql_endpoint_pod_has_restricted_security_contexts(rendered):
    deployment, _, _ = _serve(rendered)
    pod = deployment["spec"]["template"]["spec"]
    _restricted_pod(pod["securityContext"])
    for ctr in pod["containers"]:
        _restricted_container(ctr["securityContext"])
    assert not any("hostPath" in v for v in pod["volumes"])


def test_sql_endpoint_admits_only_pods_with_the_client_label_not_the_whole_namespace(default_objects):
    deployment, _, policy = _serve(default_objects)
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (rule,) = spec["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"kappa.dev/sql-client": "true"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 10000}]


def test_sql_endpoint_clients_of_another_namespace_need_the_label_too():
    objs = render(sets=("networkPolicy.serveClientNamespaces={bi}",))
    _, _, policy = _serve(objs)
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"][1] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "bi"}},
                               "podSelector": {"matchLabels": {"kappa.dev/sql-client": "true"}}}


def test_values_refuse_an_empty_sql_client_label_or_no_password_secret():
    # an empty podSelector would admit every pod of the namespace
    assert "serveClientPodLabels" in render_fails("networkPolicy.serveClientPodLabels=null")
    assert "existingSecret" in render_fails("serve.auth.existingSecret=")
    # and no endpoint without its own object-store identity, nor with the writers' one
    assert "serve.objectStore.existingSecret is required" in render_fails("serve.objectStore.existingSecret=")
    assert "must not be objectStore.existingSecret" in render_fails("serve.objectStore.existingSecret=kappa-object-store")


def test_should_not_render_the_sql_endpoint_when_disabled():
    objs = render(sets=("serve.enabled=false",))
    assert not [o for o in objs if o["metadata"]["name"] == "kappa-serve"]
    # ... and then dbt is not pointed at a Service that does not exist
    (config,) = [c for c in kinds(objs, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert "KAPPA_SERVE_HOST" not in config["data"]


def test_dbt_runs_use_the_kappa_serve_service_with_a_login_from_a_secret(rendered):
    """Dagster's dbt assets connect to the chart's SQL endpoint (KAPPA_SERVE_HOST: they start no
    endpoint of their own, tests/unit/test_dbt_endpoint.py), from run pods the endpoint's
    NetworkPolicy admits, logging in as a user whose password comes from a Secret."""
    from kappa.config import Settings

    _, service, policy = _serve(rendered)
    (config,) = [c for c in kinds(rendered, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    namespace = config["metadata"]["namespace"]
    data = config["data"]
    assert data["KAPPA_SERVE_HOST"] == f"{service['metadata']['name']}.{namespace}.svc"
    assert data["KAPPA_SERVE_PORT"] == str(service["spec"]["ports"][0]["port"])
    settings = Settings(serve_host=data["KAPPA_SERVE_HOST"], serve_port=data["KAPPA_SERVE_PORT"])
    assert settings.serve_host == f"kappa-serve.{namespace}.svc"
    dagster = yaml.safe_load((ROOT / "helm" / "values" / "dagster.yaml").read_text())
    run = dagster["runLauncher"]["config"]["customRunLauncher"]["config"]["run_k8s_config"]
    labels = run["pod_template_spec_metadata"]["labels"]
    admitted = [peer["podSelector"]["matchLabels"] for rule in policy["spec"]["ingress"] for peer in rule["from"]
                if "podSelector" in peer and "namespaceSelector" not in peer]
    assert any(want.items() <= labels.items() for want in admitted), (admitted, labels)
    env = {e["name"]: e for e in run["container_config"]["env"]}
    for var, key in (("KAPPA_SERVE_USER", "username"), ("KAPPA_SERVE_PASSWORD", "password")):
        ref = env[var]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("kappa-serve-dbt", key) and "value" not in env[var]
    # the code location never connects: it holds no login
    (deployment,) = dagster["dagster-user-deployments"]["deployments"]
    assert not {e["name"] for e in deployment["env"]} & {"KAPPA_SERVE_USER", "KAPPA_SERVE_PASSWORD"}


def test_the_object_store_region_reaches_every_kappa_pod_as_aws_region():
    (config,) = [c for c in kinds(render(), "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert "AWS_REGION" not in config["data"]  # unset by default: the SDKs decide
    objs = render(sets=("objectStore.region=eu-west-3",))
    (config,) = [c for c in kinds(objs, "ConfigMap") if c["metadata"]["name"] == "kappa-config"]
    assert config["data"]["AWS_REGION"] == "eu-west-3"
    deployment, _, _ = _serve(objs)  # the SQL endpoint reads kappa-config whole
    (ctr,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {"configMapRef": {"name": "kappa-config"}} in ctr["envFrom"]
    assert "/objectStore/region" in render_fails("objectStore.region=EU West 3")


def test_notes_tell_how_to_connect_to_the_sql_endpoint():
    from helmtools import DEFAULT_VALUES, helm

    notes = helm("install", "kappa", str(CHART), "--namespace", "kappa", "-f", str(DEFAULT_VALUES), "--dry-run=client").stdout.split("NOTES:", 1)[1]
    assert "jdbc:hive2://kappa-serve.kappa.svc:10000/default" in notes
    assert "kappa.dev/sql-client=true" in notes and "kappa-serve-users" in notes


# ------------------------------------------------------------- change data capture (Kafka Connect)


def _connect(objs: list[dict]) -> dict:
    (kc,) = kinds(objs, "KafkaConnect")
    return kc


def test_kafka_connect_builds_the_debezium_plugin_of_the_local_worker_and_connects_like_other_clients(rendered):
    from kappa.runners.kubernetes.catalog import connect_plugin

    kc = _connect(rendered)
    assert kc["metadata"]["annotations"]["strimzi.io/use-connector-resources"] == "true"
    spec = kc["spec"]
    # the plugin `kappa connect start` runs locally (jvm/connect/pom.xml), built from Maven, or an
    # image built beforehand (ci/production: the restricted namespace admits no Kaniko build pod)
    if "build" in spec:
        (plugin,) = spec["build"]["plugins"]
        assert plugin["artifacts"] == [{"type": "maven", **connect_plugin(ROOT / "jvm" / "connect" / "pom.xml")}]
        assert plugin["artifacts"][0]["version"] == "3.5.0.Final"
        assert spec["build"]["output"]["type"] == "docker" and spec["build"]["output"]["image"]
        assert "image" not in spec
    else:
        assert spec["image"].endswith(":3.5.0.Final")
    # the TLS listener, the cluster CA, and the Connect KafkaUser's own credentials
    (kafka,) = kinds(rendered, "Kafka")
    (cm,) = kinds(rendered, "ConfigMap")
    assert spec["bootstrapServers"] == cm["data"]["KAPPA_BOOTSTRAP_SERVERS"]
    assert spec["tls"]["trustedCertificates"] == [{"secretName": f"{kafka['metadata']['name']}-cluster-ca-cert",
                                                   "certificate": "ca.crt"}]
    (user,) = _users(rendered, "connect")
    listener_auth = kafka["spec"]["kafka"]["listeners"][0]["authentication"]["type"]
    name = user["metadata"]["name"]
    if listener_auth == "scram-sha-512":  # the password Strimzi's user operator writes to the user's Secret
        assert spec["authentication"] == {"type": "scram-sha-512", "username": name,
                                          "passwordSecret": {"secretName": name, "password": "password"}}
    else:  # mTLS: the user's certificate and key from the same Secret
        assert spec["authentication"] == {"type": "tls", "certificateAndKey": {
            "secretName": name, "certificate": "user.crt", "key": "user.key"}}
    # the group and internal topics of the local worker; secrets through Strimzi's config provider
    config = spec["config"]
    assert (config["group.id"], config["config.storage.topic"], config["offset.storage.topic"],
            config["status.storage.topic"]) == (connect.GROUP_ID, connect.CONFIG_TOPIC, connect.OFFSET_TOPIC,
                                                connect.STATUS_TOPIC)
    assert config["config.providers.secrets.class"] == "io.strimzi.kafka.KubernetesSecretConfigProvider"
    # its pods carry the label the Kafka listener's NetworkPolicy admits
    peer = kafka["spec"]["kafka"]["listeners"][0]["networkPolicyPeers"][0]["podSelector"]["matchLabels"]
    assert peer.items() <= spec["template"]["pod"]["metadata"]["labels"].items()
    # Connect's internal topics exist, compacted (Connect refuses others); the config topic has one partition
    internal = {t["spec"]["topicName"]: t["spec"] for t in _topics(rendered, "connect-internal")}
    assert set(internal) == {connect.CONFIG_TOPIC, connect.OFFSET_TOPIC, connect.STATUS_TOPIC}
    assert {t["config"]["cleanup.policy"] for t in internal.values()} == {"compact"}
    assert internal[connect.CONFIG_TOPIC]["partitions"] == 1
    # each connector's heartbeat topic exists before Debezium writes to it (the connector stops
    # sending while one is missing), compacted: the latest beat per connector stays
    beats = {t["spec"]["topicName"]: t["spec"] for t in _topics(rendered, "connect-heartbeat")}
    assert set(beats) == HEARTBEATS == {"__debezium-heartbeat.ops"}
    assert all(b["config"]["cleanup.policy"] == "compact" and b["partitions"] == 1 for b in beats.values())


def test_kafka_connector_config_is_what_kappa_connect_start_registers(default_objects):
    """One source: the KafkaConnector's configuration equals ConnectorSpec.connector_config (what
    `kappa connect start` PUTs to the local worker) for the chart's database and Secret."""
    from kappa.config import load_settings

    values = yaml.safe_load((CHART / "values.yaml").read_text())["connect"]["database"]
    connectors = {c["metadata"]["name"]: c for c in kinds(default_objects, "KafkaConnector")}
    assert set(connectors) == set(CONNECTORS) == {"ops"}
    for name, spec in CONNECTORS.items():
        kc = connectors[name]
        assert kc["metadata"]["labels"]["strimzi.io/cluster"] == _connect(default_objects)["metadata"]["name"]
        secret = f"kappa/{values['existingSecret']}"
        settings = load_settings(postgres_host=values["host"], postgres_port=values["port"],
                                 postgres_user=f"${{secrets:{secret}:{values['usernameKey']}}}",
                                 postgres_password=f"${{secrets:{secret}:{values['passwordKey']}}}")
        rendered = {"connector.class": kc["spec"]["class"], "tasks.max": str(kc["spec"]["tasksMax"]), **kc["spec"]["config"]}
        assert rendered == spec.connector_config(settings)
        assert rendered["tombstones.on.delete"] == "true" and rendered["plugin.name"] == "pgoutput"
        assert rendered["topic.prefix"] == "ops" and rendered["database.password"].startswith("${secrets:")


def test_connect_user_may_only_use_its_group_its_internal_topics_and_write_the_changelogs_and_heartbeats(rendered):
    (user,) = _users(rendered, "connect")
    acls = {(a["resource"]["type"], a["resource"]["name"], a["resource"]["patternType"]): sorted(a["operations"])
            for a in _acls(user)}
    internal = ["Describe", "DescribeConfigs", "Read", "Write"]
    expected = {("group", connect.GROUP_ID, "literal"): ["Read"],
                **{("topic", t, "literal"): internal for t in (connect.CONFIG_TOPIC, connect.OFFSET_TOPIC, connect.STATUS_TOPIC)},
                **{("topic", t, "literal"): ["Describe", "Write"] for t in CHANGELOGS | HEARTBEATS}}
    assert acls == expected and len(_acls(user)) == len(expected)


def test_connect_may_read_only_the_database_secret(rendered):
    kc = _connect(rendered)
    (connector,) = kinds(rendered, "KafkaConnector")
    secret = connector["spec"]["config"]["database.password"].split("/", 1)[1].split(":", 1)[0]
    assert secret in ("kappa-ops-database", "ops-db-debezium")  # values.yaml, ci/production-values.yaml
    (role,) = [r for r in kinds(rendered, "Role") if r["metadata"]["name"].startswith(kc["metadata"]["name"])]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret], "verbs": ["get"]}]
    (binding,) = [b for b in kinds(rendered, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]]
    # Strimzi's service account of the workers: <KafkaConnect name>-connect
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{kc['metadata']['name']}-connect", "namespace": "kappa"}]


def test_connect_rest_api_admits_only_the_operator_and_workers_reach_only_dns_kafka_database_and_api(default_objects):
    kc = _connect(default_objects)
    workers = {"strimzi.io/name": f"{kc['metadata']['name']}-connect"}
    policies = {p["metadata"]["name"]: p["spec"] for p in kinds(default_objects, "NetworkPolicy")
                if p["spec"]["podSelector"].get("matchLabels") == workers}
    rest = next(p for p in policies.values() if p["policyTypes"] == ["Ingress"])
    (rule,) = rest["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8083}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "strimzi"}},
         "podSelector": {"matchLabels": {"strimzi.io/kind": "cluster-operator"}}},
        {"podSelector": {"matchLabels": workers}}]
    egress = next(p for p in policies.values() if p["policyTypes"] == ["Egress"])["egress"]
    ports = [sorted(p["port"] for p in r["ports"]) for r in egress]
    assert ports == [[53, 53], [9093], [5432], [443, 6443]]
    assert egress[1]["to"] == [{"podSelector": {"matchLabels": {"strimzi.io/cluster": "kappa", "strimzi.io/kind": "Kafka"}}}]
    # the database's peers narrow its rule when given
    narrowed = render(sets=("connect.networkPolicy.databasePeers[0].ipBlock.cidr=10.1.2.3/32",
                            "connect.database.port=6432", "connect.database.name=ops",
                            "connect.build.enabled=false", "connect.image=registry.example.com/connect:1"))
    (np,) = [p for p in kinds(narrowed, "NetworkPolicy") if p["metadata"]["name"].endswith("-connect-egress")]
    assert np["spec"]["egress"][2] == {"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [{"protocol": "TCP", "port": 6432}]}
    (connector,) = kinds(narrowed, "KafkaConnector")
    assert connector["spec"]["config"]["database.port"] == "6432" and connector["spec"]["config"]["database.dbname"] == "ops"
    spec = _connect(narrowed)["spec"]
    assert "build" not in spec and spec["image"] == "registry.example.com/connect:1"


def test_connect_values_refuse_no_image_and_can_turn_it_off():
    assert "connect.image" in render_fails("connect.build.enabled=false")
    assert "additional properties" in render_fails("connect.database.password=abc")
    objs = render(sets=("connect.enabled=false",))
    assert not [o for o in objs if o["kind"] in ("KafkaConnect", "KafkaConnector")]
    assert not _users(objs, "connect") and not _topics(objs, "connect-internal")
    assert not [p for p in kinds(objs, "NetworkPolicy") if "-connect-" in p["metadata"]["name"]]
