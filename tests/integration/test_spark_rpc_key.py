"""Issue 40: a SparkApplication's Spark RPC key never appears in an executor pod's spec.

Spark on Kubernetes generates a key per application in the driver and, unless
``spark.authenticate.secret.executor.file`` is set, writes it into every executor pod it creates as
the environment variable ``_SPARK_AUTH_SECRET``, readable by anyone who may ``get pods``. The runner
sets both key files (the application's own Secret, mounted). Executor pods are built by the running
driver, which the control-plane tests cannot run (no container runtime), so this asks Spark's own
code: Spark 4.1's ``BasicExecutorFeatureStep`` builds an executor pod from the runner's
configuration, in the session's JVM (no SparkContext of its own, no cluster).
"""

from __future__ import annotations

from kappa.runners import kubernetes as k8s
from kappa.runners.kubernetes.catalog import example_settings, example_version
from kappa.spec import load_catalog
from tests.conftest import REPO


def _executor_env(jvm, spark_conf: dict[str, str], key_file: str) -> tuple[dict[str, str], str]:
    """(environment of the executor pod Spark's driver would create with ``spark_conf``, the driver's
    RPC key). The key files of ``spark_conf``, where set, are
    replaced by ``key_file`` (the mounted Secret's local stand-in)."""
    conf = jvm.org.apache.spark.SparkConf(False)
    for k, v in spark_conf.items():
        conf.set(k, key_file if k.startswith("spark.authenticate.secret.") and k.endswith(".file") else v)
    for k, v in {"spark.master": "k8s://https://127.0.0.1:6443", "spark.app.id": "spark-0123",
                 "spark.kubernetes.container.image": "img", "spark.kubernetes.executor.podNamePrefix": "a",
                 "spark.kubernetes.driver.pod.name": "a-driver", "spark.driver.host": "a-driver-svc",
                 "spark.driver.port": "7078"}.items():
        conf.set(k, v)
    config = getattr(jvm.org.apache.spark.internal.config, "package$").__getattr__("MODULE$")
    security = jvm.org.apache.spark.SecurityManager(conf, jvm.scala.Option.empty(), config.AUTH_SECRET_FILE_DRIVER())
    security.initializeAuth()  # the driver's key: generated, or read from its file
    executor = jvm.org.apache.spark.deploy.k8s.KubernetesExecutorConf(conf, "spark-0123", "1", jvm.scala.Option.empty(), 0)
    profile = getattr(jvm.org.apache.spark.resource, "ResourceProfile$").__getattr__("MODULE$").getOrCreateDefaultProfile(conf)
    step = jvm.org.apache.spark.deploy.k8s.features.BasicExecutorFeatureStep(executor, security, profile)
    pod = step.configurePod(getattr(jvm.org.apache.spark.deploy.k8s, "SparkPod$").__getattr__("MODULE$").initialPod())
    return {e.getName(): e.getValue() for e in pod.container().getEnv()}, security.getSecretKey()


def test_the_executor_pod_spark_builds_from_the_runners_configuration_carries_no_rpc_key(spark, tmp_path):
    settings = example_settings()
    spec = load_catalog(REPO / "assets")["flights_bronze"]
    conf = k8s.build_spark_application(spec, example_version(settings, spec, 1),
                                       k8s.KubernetesRunnerConfig(image="img"), settings)["spec"]["sparkConf"]
    key_file = tmp_path / "secret"
    key_file.write_bytes(b"k" * 32)
    env, key = _executor_env(spark._jvm, conf, str(key_file))
    assert key and "_SPARK_AUTH_SECRET" not in env and key not in env.values(), sorted(env)
    # the same configuration without the key files (the runner's before issue 40): the key is there
    before = {k: v for k, v in conf.items() if not k.startswith("spark.authenticate.secret.")}
    env, key = _executor_env(spark._jvm, before, str(key_file))
    assert env["_SPARK_AUTH_SECRET"] == key
