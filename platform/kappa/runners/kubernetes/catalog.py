"""The Helm chart's catalog of Kafka topics, least-privilege KafkaUsers and Kafka Connect
connectors, generated from ``assets/`` so they always match the declarations; and the example
SparkApplication in ``k8s/``.

``python -m kappa.runners.kubernetes catalog ASSETS_DIR`` prints the catalog;
``python -m kappa.runners.kubernetes example ASSETS_DIR ASSET [VERSION]`` an example application.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from kappa.runners.kubernetes.application import build_spark_application
from kappa.runners.kubernetes.config import KubernetesRunnerConfig
from kappa.runners.kubernetes.naming import group_prefix, kafka_user_name
from kappa.spec import Catalog, load_catalog


def connect_plugin(pom: Path) -> dict[str, str]:
    """Maven coordinates of the Debezium PostgreSQL connector the local Connect worker runs, read
    from ``jvm/connect/pom.xml`` (its ``debezium.version`` property), so the chart's KafkaConnect
    builds its image with the same plugin. Raises ``ValueError`` naming the file when it is absent."""
    import xml.etree.ElementTree as ET

    if not pom.is_file():
        raise ValueError(f"{pom}: not found (the Connect worker's Maven pom gives the Debezium plugin version)")
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(pom).getroot()
    version = root.findtext("m:properties/m:debezium.version", namespaces=ns)
    if not version:
        raise ValueError(f"{pom}: properties.debezium.version is missing")
    return {"group": "io.debezium", "artifact": "debezium-connector-postgres", "version": version}


def chart_connect(assets_dir: Path) -> dict:
    """The chart's view of ``assets/connectors.yaml`` (empty when none is declared): the Connect
    worker's group and internal topics and the Debezium plugin (:mod:`kappa.cdc.connect`, the
    names `kappa connect start` uses locally), and per connector its class, tasks, changelog
    topics and :meth:`~kappa.cdc.connectors.ConnectorSpec.declared_config` without class and tasks
    (Strimzi's KafkaConnector takes them as ``spec.class`` and ``spec.tasksMax``), and its
    heartbeat topic (``heartbeat``: name, partitions, config; absent when heartbeats are off), which
    the chart creates as the local worker does. The chart adds the keys in
    :data:`~kappa.cdc.connectors.CONNECTION_KEYS` from its values."""
    from kappa.cdc import connect
    from kappa.cdc.connectors import load_connectors

    connectors = load_connectors(assets_dir)
    if not connectors:
        return {}
    out = {}
    for name, spec in sorted(connectors.items()):
        config = spec.declared_config()
        out[name] = {
            "class": config.pop("connector.class"),
            "tasksMax": int(config.pop("tasks.max")),
            "topics": spec.topics,
            "config": dict(sorted(config.items())),
        }
        if spec.heartbeat_topic:
            beat = connect.heartbeat_topic_spec()
            out[name]["heartbeat"] = {"topic": spec.heartbeat_topic, "partitions": beat.partitions,
                                      "config": dict(sorted(beat.kafka_config().items()))}
    return {
        "connect": {
            "groupId": connect.GROUP_ID,
            "configStorageTopic": connect.CONFIG_TOPIC,
            "offsetStorageTopic": connect.OFFSET_TOPIC,
            "statusStorageTopic": connect.STATUS_TOPIC,
            "plugin": connect_plugin(Path(assets_dir).resolve().parent / "jvm" / "connect" / "pom.xml"),
        },
        "connectors": out,
    }


def chart_catalog(catalog: Catalog, connect: dict | None = None) -> dict:
    """The Helm chart's view of ``assets/``: every source topic with its Kafka config and its
    writer (``ingest``, or ``connect`` for a connector's changelog topic), every streaming asset
    that reads Kafka with its KafkaUser name, topics and consumer-group prefix, and the Connect
    worker and connectors of :func:`chart_connect` (``connect``).

    Config values are strings (a long such as ``"9223372036854775807"`` would lose precision as a
    YAML number in Helm, which parses numbers as float64). Assets that read only upstream tables need no KafkaUser.
    """
    connect = connect or {}
    changelogs = {t for c in connect.get("connectors", {}).values() for t in c["topics"]}
    topics = {
        name: {
            "partitions": t.partitions,
            "config": dict(sorted(t.kafka_config().items())),
            "description": t.description.strip(),
            "writtenBy": "connect" if name in changelogs else "ingest",
        }
        for name, t in sorted(catalog.topics.items())
    }
    assets = {
        spec.name: {
            "user": kafka_user_name(spec.name),
            "groupPrefix": group_prefix(spec.name),
            "topics": sorted(spec.topics),
        }
        for spec in sorted(catalog, key=lambda s: s.name)
        if spec.topics
    }
    return {"topics": topics, "assets": assets, **connect}


CATALOG_HEADER = """\
# GENERATED from assets/ by `make helm-catalog` (kappa.runners.kubernetes.chart_catalog); do not edit.
# The kappa chart reads this file (.Files.Get) to render one KafkaTopic per source topic, one
# least-privilege KafkaUser per streaming asset that reads Kafka, and the Kafka Connect worker and
# one KafkaConnector per connector of assets/connectors.yaml (the configuration `kappa connect
# start` registers locally, less where the database runs). tests/helm checks it is up to date.
"""


def render_chart_catalog(assets_dir: Path) -> str:
    """The text of ``helm/kappa/catalog.yaml`` for the declarations in ``assets_dir``."""
    doc = chart_catalog(load_catalog(assets_dir), chart_connect(assets_dir))
    return CATALOG_HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def example_settings():
    """The settings the example manifests show: the chart's defaults (object store, TLS listener, SCRAM)."""
    from kappa.config import load_settings

    return load_settings(
        warehouse="s3a://kappa/warehouse", checkpoints="s3a://kappa/checkpoints",
        bootstrap_servers="kappa-kafka-bootstrap:9093", kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512", kafka_ssl_truststore_type="PEM",
        kafka_ssl_truststore_location="/etc/kappa/kafka-ca/ca.crt", runner="kubernetes",
    )


def example_version(settings, spec, version: int, upstream: dict[str, int] | None = None):
    """A version record as the registry would create it (:func:`kappa.delta.registry.new_version_details`),
    for example manifests and tests; never registered."""
    from datetime import datetime, timezone

    from kappa.delta.registry import Version, new_version_details

    d = new_version_details(settings, spec.name, version, spec.fingerprint(),
                            upstream if upstream is not None else {u: 1 for u in spec.upstream}, writer_suffix="example")
    return Version(asset=spec.name, version=version, table_path=d["table_path"], checkpoint_path=d["checkpoint_path"],
                   txn_app_id=d["txn_app_id"], fingerprint=d["fingerprint"], upstream=d["upstream"],
                   created_at=datetime.now(timezone.utc))


def render_example_application(assets_dir: Path, asset: str, version: int = 1) -> str:
    """YAML of the example SparkApplication kept in ``k8s/`` (placeholder image and bucket)."""
    catalog = load_catalog(assets_dir)
    settings = example_settings()
    cfg = KubernetesRunnerConfig(image="registry.example.com/kappa/kappa:0.1.0")
    # a fixed nonce: the file is generated and compared (the runner picks a random one per creation)
    app = build_spark_application(catalog[asset], example_version(settings, catalog[asset], version), cfg, settings,
                                  auth_nonce="0" * 8)
    header = (
        f"# Example: version {version} of the streaming asset `{asset}` as a SparkApplication, as the\n"
        "# kubernetes runner builds it (GENERATED by `make k8s-manifests`; do not edit). Replace the\n"
        "# image and the buckets before applying, and create its Spark RPC key Secret (spark-auth\n"
        "# volume; the runner creates it with the application:\n"
        "# kappa.runners.kubernetes.application.build_auth_secret).\n"
    )
    return header + yaml.safe_dump(app, sort_keys=False, width=100)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kappa.runners.kubernetes catalog ASSETS_DIR`` prints the chart catalog;
    ``… example ASSETS_DIR ASSET [VERSION]`` prints an example SparkApplication."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 2 and args[0] == "catalog":
        sys.stdout.write(render_chart_catalog(Path(args[1])))
        return 0
    if len(args) >= 3 and args[0] == "example":
        sys.stdout.write(render_example_application(Path(args[1]), args[2], int(args[3]) if len(args) > 3 else 1))
        return 0
    sys.stderr.write("usage: python -m kappa.runners.kubernetes catalog ASSETS_DIR | example ASSETS_DIR ASSET [VERSION]\n")
    return 2
