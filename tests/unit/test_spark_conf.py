"""One Spark configuration: the local session and every SparkApplication get theirs from
kappa.streaming.session.spark_conf; they differ only where one side cannot have the other's value."""

from __future__ import annotations

from pathlib import Path

from kappa.config import load_settings
from kappa.runners import kubernetes as k8s
from kappa.spec import load_catalog
from kappa.streaming.session import APPLICATION_ONLY, IMAGE_LOG4J, MACHINE_PATHS, SESSION_ONLY, spark_conf

ROOT = Path(__file__).resolve().parents[2]


def test_session_and_spark_application_share_one_configuration(tmp_path):
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "delta.jar").write_text("")
    settings = load_settings(project_dir=ROOT, jars_dir=tmp_path, warehouse="s3a://lake/w", checkpoints="s3a://lake/c",
                             s3_endpoint="http://minio:9000", s3_path_style_access=True, shuffle_partitions=6)
    session = spark_conf(settings)
    cfg = k8s.KubernetesRunnerConfig(image="img:1", jars=("local:///opt/kappa/jars/spark/delta.jar",))
    spec = load_catalog(ROOT / "assets")["weather"]
    app = k8s.build_spark_application(spec, k8s.example_version(settings, spec, 1), cfg, settings)["spec"]["sparkConf"]
    # what only one side can have: master and driver heap (the session), submission mode (the app),
    # and the jars: files on this machine vs files in the image
    assert set(session) - set(app) == SESSION_ONLY
    assert set(app) - set(session) == APPLICATION_ONLY
    assert session["spark.jars"].endswith("/delta.jar") and app["spark.jars"] == "local:///opt/kappa/jars/spark/delta.jar"
    shared = set(session) & set(app) - {"spark.jars"} - MACHINE_PATHS
    assert {k: session[k] for k in shared} == {k: app[k] for k in shared}
    # paths: this machine's for the session, the image's for the application (never the renderer's)
    assert str(settings.project_dir) not in "".join(app[k] for k in MACHINE_PATHS)
    assert app["spark.sql.warehouse.dir"] == "/opt/kappa/work/spark-warehouse"
    assert app["spark.driver.extraJavaOptions"] == session["spark.driver.extraJavaOptions"].replace(
        session["spark.driver.extraJavaOptions"].split()[0], f"-Dlog4j2.configurationFile={IMAGE_LOG4J}")
    # and what the issue named is in both
    for key, value in {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.sql.shuffle.partitions": "6",
        # compaction is `kappa maintain`'s, never a synchronous OPTIMIZE inside a micro-batch
        "spark.databricks.delta.autoCompact.enabled": "false",
    }.items():
        assert session[key] == app[key] == value, key
