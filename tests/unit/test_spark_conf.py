"""One Spark configuration: the local session and every SparkApplication get theirs from
kappa.streaming.session.spark_conf; they differ only where one side cannot have the other's value."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappa.config import load_settings
from kappa.runners import kubernetes as k8s
from kappa.spec import load_catalog
from kappa.streaming.session import APPLICATION_ONLY, IMAGE_LOG4J, MACHINE_PATHS, SESSION_ONLY, spark_conf

ROOT = Path(__file__).resolve().parents[2]


def _jars(tmp_path: Path, *names: str) -> None:
    """A fake build/jars/spark: ``names`` and Kappa's log store jar, all empty."""
    (tmp_path / "spark").mkdir(exist_ok=True)
    for name in (*names, "kappa-delta-logstore.jar"):
        (tmp_path / "spark" / name).write_text("")


def test_session_and_spark_application_share_one_configuration(tmp_path):
    _jars(tmp_path, "delta.jar")
    settings = load_settings(project_dir=ROOT, jars_dir=tmp_path, warehouse="s3a://lake/w", checkpoints="s3a://lake/c",
                             s3_endpoint="http://minio:9000", s3_path_style_access=True, shuffle_partitions=6)
    session = spark_conf(settings)
    cfg = k8s.KubernetesRunnerConfig(image="img:1")
    spec = load_catalog(ROOT / "assets")["weather"]
    app = k8s.build_spark_application(spec, k8s.example_version(settings, spec, 1), cfg, settings)["spec"]["sparkConf"]
    # what only one side can have: master and driver heap (the session), submission mode, RPC
    # security and the executors' class path (the app)
    assert set(session) - set(app) == SESSION_ONLY
    assert set(app) - set(session) == APPLICATION_ONLY
    # the jars on the class path where they are, never spark.jars (a copy of each per start, per
    # executor): the session's files on this machine, one path each (local mode's executor is the
    # driver's JVM); the image's folder for the application's driver and executors
    assert [Path(j).name for j in session["spark.driver.extraClassPath"].split(":")] == [
        "delta.jar", "kappa-delta-logstore.jar"] and "spark.jars" not in session
    assert app["spark.driver.extraClassPath"] == app["spark.executor.extraClassPath"] == "/opt/kappa/jars/spark/*"
    assert "spark.jars" not in app
    # executors in other JVMs (a standalone cluster's) load them from the same paths, not copies
    remote = spark_conf(load_settings(project_dir=ROOT, jars_dir=tmp_path, spark_master="spark://127.0.0.1:7077"))
    assert remote["spark.executor.extraClassPath"] == remote["spark.driver.extraClassPath"] == \
        session["spark.driver.extraClassPath"] and "spark.jars" not in remote
    assert "spark.executor.extraClassPath" not in session
    shared = set(session) & set(app) - MACHINE_PATHS
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
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.scheduler.mode": "FAIR",  # a pool per query (start_query)
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.sql.shuffle.partitions": "6",
        # compaction is `kappa maintain`'s, never a synchronous OPTIMIZE inside a micro-batch
        "spark.databricks.delta.autoCompact.enabled": "false",
        # many drivers commit to one s3a:// table (quarantine, late events): conditional writes
        "spark.delta.logStore.s3a.impl": "dev.kappa.delta.S3ConditionalLogStore",
        "spark.hadoop.fs.s3a.create.conditional.enabled": "true",
        # no ${env:…}/${system:…} substitution in SQL text (issue 40)
        "spark.sql.variable.substitute": "false",
    }.items():
        assert session[key] == app[key] == value, key


def test_s3a_signs_for_aws_region_at_an_endpoint_of_its_own(tmp_path, monkeypatch):
    # S3A (Hadoop 3.4) signs for us-east-2 when an endpoint is set without a region; an
    # S3-compatible server (kappa objectstore) rejects that.
    _jars(tmp_path, "delta.jar")
    settings = load_settings(project_dir=ROOT, jars_dir=tmp_path, s3_endpoint="http://127.0.0.1:59000")
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert spark_conf(settings)["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert spark_conf(settings)["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    # AWS S3 itself (no endpoint): S3A finds the bucket's region on its own
    assert "spark.hadoop.fs.s3a.endpoint.region" not in spark_conf(load_settings(project_dir=ROOT, jars_dir=tmp_path))


def test_spark_gets_hadoop_aws_but_keeps_pyspark_hadoop_client(tmp_path):
    # hadoop-aws must match the Hadoop client pyspark ships; the client jars themselves come from pyspark
    import pyspark

    from kappa.core.jvm import JvmError, artifact_name, spark_jars

    _jars(tmp_path, "hadoop-aws-3.4.2.jar", "bundle-2.29.52.jar", "hadoop-client-api-3.4.2.jar", "delta-spark_4.1_2.13-4.4.0.jar")
    import re

    pinned = re.search(r"<hadoop.version>(.+?)</hadoop.version>", (ROOT / "jvm/spark/pom.xml").read_text()).group(1)
    shipped = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    assert [j.name for j in shipped] == [f"hadoop-client-api-{pinned}.jar"], "jvm/spark/pom.xml's hadoop.version must match pyspark"
    names = {artifact_name(j) for j in spark_jars(load_settings(project_dir=ROOT, jars_dir=tmp_path))}
    assert names == {"hadoop-aws", "bundle", "delta-spark_4.1_2.13", "kappa-delta-logstore.jar"}
    # without Kappa's log store a driver could not commit to an s3a:// table: refused at start
    (tmp_path / "spark" / "kappa-delta-logstore.jar").unlink()
    with pytest.raises(JvmError, match="kappa-delta-logstore.jar is missing: build it with `make install`"):
        spark_jars(load_settings(project_dir=ROOT, jars_dir=tmp_path))


def _flags(options: list[str]) -> dict[str, float]:
    """HotSpot's numeric flags for these JVM options, as the JVM itself reports them."""
    import re
    import subprocess

    from kappa.core.jvm import java_executable

    out = subprocess.run([java_executable(), *options, "-XX:+PrintFlagsFinal", "-version"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s*\S+\s+(\w+)\s+=\s+([0-9.]+)\s", out, re.M)}


def test_the_jvm_runs_each_driver_jit_with_its_flags(tmp_path):
    # stopping at C1 alone shrinks HotSpot's code cache to 48 MB, which a two-minute driver filled
    # (test_chaos: "Out of space in CodeCache"); the c1 driver's options must keep tiered's
    def jvm_options(jit: str) -> list[str]:
        options = spark_conf(load_settings(project_dir=ROOT, home=tmp_path, spark_driver_jit=jit))
        return [o for o in options["spark.driver.extraJavaOptions"].split() if o.startswith("-XX:")]

    c1, tiered = _flags(jvm_options("c1")), _flags(jvm_options("tiered"))
    assert c1["TieredStopAtLevel"] == 1 and tiered["TieredStopAtLevel"] == 4
    assert c1["ReservedCodeCacheSize"] >= tiered["ReservedCodeCacheSize"] >= 240 * 2**20
    # tiered compiles with C2 only what stays hot (Settings.spark_driver_jit): thresholds ×4
    assert tiered["CompileThresholdScaling"] == 4 and c1["CompileThresholdScaling"] == 1
