"""The SparkSession every query, gate and ``kappa sql`` uses, and THE Spark configuration
(:func:`spark_conf`), shared with the SparkApplications of the kubernetes runner.

Extra jars (Kafka source, Delta, hadoop-aws and its SDK) come from the Maven-resolved
``build/jars/spark``: on the driver's class path for the local session, and the image's copy of
that folder on the driver's and executors' class path for a SparkApplication; nothing is resolved
by Ivy at run time and nothing is copied. Delta is enabled with its SQL extension and
catalog (Delta docs, "Quickstart: Set up Apache Spark with Delta Lake").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kappa.config import Settings, aws_environment
from kappa.core.jvm import JIT_OPTIONS, java_executable, spark_jars

_LOG4J = Path(__file__).resolve().parents[1] / "resources" / "log4j2.properties"

#: Keys only one side can have. The local session names its master and its driver heap; in local
#: mode the executor is the driver's JVM, so the jars on the driver's class path reach every task.
#: A SparkApplication's master is the cluster (spark-submit sets it), its driver heap is
#: ``spec.driver.memory``, and its executors are other JVMs: the image's jars go on their class
#: path too (``spark.executor.extraClassPath``). Neither side uses ``spark.jars``: it has the
#: driver copy each jar into its working folder and every executor fetch a copy from the driver
#: (650 MB with the AWS SDK bundle hadoop-aws needs; on the real node that filled the pods'
#: 512 Mi work emptyDir within a minute and the kubelet evicted them). spark-submit must not
#: wait for a streaming application to end, and executors take their configuration from the
#: driver rather than a ConfigMap (the drivers may not write ConfigMaps).
SESSION_ONLY = frozenset({"spark.master", "spark.driver.memory"})  # local[…]
APPLICATION_ONLY = frozenset({"spark.kubernetes.submission.waitAppCompletion", "spark.kubernetes.executor.disableConfigMap",
                              "spark.authenticate", "spark.network.crypto.enabled",
                              "spark.authenticate.secret.driver.file", "spark.authenticate.secret.executor.file",
                              "spark.executor.extraClassPath"})
#: Keys both sides have whose value is a path: on this machine for the session, inside the Kappa
#: image (Dockerfile: the venv at /opt/kappa/venv, the writable work dir /opt/kappa/work, the jars
#: at /opt/kappa/jars/spark) for a SparkApplication. A path of the machine that rendered the
#: application must never reach a pod.
MACHINE_PATHS = frozenset({"spark.sql.warehouse.dir", "spark.driver.extraJavaOptions", "spark.driver.extraClassPath"})
#: Delta's log store for s3a:// (jvm/delta-logstore, build/jars/spark/kappa-delta-logstore.jar,
#: on the class path with the other jars of :func:`kappa.core.jvm.spark_jars`): put-if-absent
#: through S3's conditional PutObject, safe with many drivers per table.
LOG_STORE_CLASS = "dev.kappa.delta.S3ConditionalLogStore"
IMAGE_LOG4J = "/opt/kappa/venv/lib/python3.11/site-packages/kappa/resources/log4j2.properties"
IMAGE_WORK_DIR = "/opt/kappa/work"
#: The image's folder of the Maven-resolved jars (the Dockerfile copies build/jars/spark there).
IMAGE_JARS_DIR = "/opt/kappa/jars/spark"
#: Where a SparkApplication's driver and executors read their application's Spark RPC key: the
#: runner mounts the application's own Secret there (kappa.runners.kubernetes.application); the
#: chart's admission requires exactly this path.
AUTH_SECRET_FILE = "/etc/kappa/spark-auth/secret"


def spark_conf(settings: Settings, *, application: bool = False, jars_dir: str = IMAGE_JARS_DIR) -> dict[str, str]:
    """THE Spark configuration of Kappa, as ``spark.*`` key -> string value, for the local
    session (``application=False``) and for every SparkApplication's ``sparkConf``
    (``application=True``; :func:`kappa.runners.kubernetes.application.build_spark_application`).
    Both get the same settings apart from :data:`SESSION_ONLY` / :data:`APPLICATION_ONLY` and the
    paths of :data:`MACHINE_PATHS` (this machine's vs the image's). The jars: the Maven-resolved
    jars of ``settings.jars_dir`` on the session driver's class path, one path each; for an
    application, ``jars_dir`` (a folder inside the image) as ``<jars_dir>/*`` on the driver's and
    the executors' class path (``spark.{driver,executor}.extraClassPath``).

    Shared: Delta's SQL extension and catalog (Delta docs, "Quickstart"), session time zone UTC
    (event-time windows must not depend on the machine), RocksDB state store (Spark's
    "Structured Streaming Programming Guide", *RocksDB state store implementation*: state off the
    JVM heap) with changelog checkpointing, Delta's auto compaction off (compaction is ``kappa maintain``'s), Delta's snapshot
    partitions, and the object-store (s3a) settings (Hadoop-AWS docs; the credentials are the
    ``AWS_*`` variables, never values in the conf), Delta's log store for s3a:// being
    :data:`LOG_STORE_CLASS` (conditional writes: many writers per table).
    Kafka security is not Spark configuration: the query passes :meth:`Settings.kafka_client_options`
    to the Kafka source as ``kafka.*`` options, on both sides, from ``KAPPA_KAFKA_*``.
    """
    if application:
        log4j, warehouse_dir = IMAGE_LOG4J, f"{IMAGE_WORK_DIR}/spark-warehouse"
    else:
        log4j, warehouse_dir = str(_LOG4J), str((settings.home or Path(".kappa")) / "spark-warehouse")
    conf = {
        "spark.app.name": "kappa",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        # No variable substitution: Spark rewrites ${env:…} and ${system:…} with the driver's
        # environment and JVM properties before parsing, so SQL text a data engineer declares could
        # read the writers' keys (issue 40). None of the platform's own SQL uses ${…}; declarations
        # holding it are refused too (kappa.streaming.policy, rule substitution).
        "spark.sql.variable.substitute": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        **({"spark.ui.port": str(settings.spark_ui_port)} if settings.spark_ui_port else {}),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # Fair scheduling between the queries of one session: each query's jobs go to a pool of its
        # own (kappa.streaming.query.start_query), so a short micro-batch of one asset does not
        # wait behind a long one of another (Spark's "Job Scheduling" guide, "Scheduling Within an
        # Application"; FIFO is the default).
        "spark.scheduler.mode": "FAIR",
        # Changelog checkpointing: a micro-batch uploads the state changes it made, not a snapshot of
        # the changed RocksDB files; snapshots are made in the background (Structured Streaming
        # guide, "RocksDB State Store Changelog Checkpointing"). An existing checkpoint takes it on.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Auto compaction off: in open-source Delta it is a synchronous OPTIMIZE the writer runs
        # after its commit (Delta docs, "Optimizations" -> "Auto compaction",
        # docs.delta.io/latest/optimizations-oss.html#auto-compaction), i.e. inside the
        # micro-batch, delaying the next one; and with autoCompact.minFileSize at its default
        # (half of maxFileSize) files it already compacted are compacted again. The small files
        # each micro-batch writes are compacted by `kappa maintain` (kappa.lifecycle.maintain),
        # outside the queries. Local session and SparkApplications alike (this one function).
        "spark.databricks.delta.autoCompact.enabled": "false",
        "spark.databricks.delta.optimizeWrite.enabled": "false",
        # Delta rebuilds a table's snapshot (its log replayed into the list of live files) with
        # this many tasks; the default, 50, costs seconds per micro-batch on a few cores and small
        # logs, which is most of a small batch's time. Checkpoints keep the log short.
        "spark.databricks.delta.snapshotPartitions": str(settings.delta_snapshot_partitions),
        # Stop queries cleanly on JVM shutdown and don't keep a Hive metastore around.
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": warehouse_dir,
        # A larger thread stack: Spark matches long exception messages with java.util.regex when a
        # query is stopped mid-batch, which overflows the default 1 MB stack of its stream thread.
        # The parallel (throughput) collector instead of G1: a driver's heap is small (1-4 GB) and
        # its work is short micro-batches, where G1's concurrent marking and refinement threads
        # compete with the task threads for the few cores a driver has (Spark's "Tuning Spark" ->
        # "Garbage Collection Tuning"; Java 17's GC Tuning Guide, "The Parallel Collector"). On
        # 2 cores: tests/integration/test_replay.py 316 -> 271 s, test_late_rows + test_exactly_once
        # 261 -> 251 s, same machine, back to back.
        # The JIT compilers (Settings.spark_driver_jit): C1 only for short-lived drivers when asked,
        # with tiered's code cache; tiered with its compile thresholds scaled ×4.
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j} -Xss8m -XX:+UseParallelGC "
                                         + JIT_OPTIONS[settings.spark_driver_jit],
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        # Spark keeps the classes it compiled for whole-stage code generation in a cache of 100 by
        # default (an internal static setting); one driver running several assets' queries, gates
        # and reads (a laptop's session, `kappa serve`) plans more distinct stages than that, and
        # every miss compiles again with Janino. Six integration test files on one session, counted
        # with Spark's CodegenMetrics: 3,151 compilations (~54 s) at 100, 724 (~18 s) at 2,000.
        "spark.sql.codegen.cache.maxEntries": "2000",
        # The object store (s3a://). Harmless where tables are local; identical on both sides.
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        # AWS SDK v2 (Hadoop 3.4): read AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from the environment.
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
        "spark.hadoop.fs.s3a.path.style.access": str(settings.s3_path_style_access).lower(),
        # Delta's log store for s3a:// tables: several drivers commit to one table
        # (_kappa/quarantine and _kappa/late_events take every asset version's rows, forget deletes
        # from them), so a commit must be put-if-absent across processes. Delta's
        # S3SingleDriverLogStore is not (its check-then-write is guarded inside one JVM: two
        # drivers committing one version both "succeed" and the later file replaces the earlier,
        # a lost commit); LOG_STORE_CLASS writes each commit with S3's conditional PutObject
        # (If-None-Match: *) through S3A's conditional create, which the connector must have
        # enabled. tests/integration/test_concurrent_writers.py shows both, each commit made to collide
        # with another's (README, Object store).
        "spark.delta.logStore.s3a.impl": LOG_STORE_CLASS,
        "spark.hadoop.fs.s3a.create.conditional.enabled": "true",
    }
    if settings.s3_endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.s3_endpoint
        # With an endpoint of its own and no region, S3A (Hadoop 3.4) signs for us-east-2, which an
        # S3-compatible server rejects ("the region "us-east-2" is wrong"): sign for AWS_REGION.
        conf["spark.hadoop.fs.s3a.endpoint.region"] = aws_environment().get("AWS_REGION", "us-east-1")
    if application:
        conf["spark.kubernetes.submission.waitAppCompletion"] = "false"
        # Executors get their configuration from the driver, not from a ConfigMap the driver would
        # create: the drivers' Role (helm/kappa, 021-Role-spark-drivers) grants no ConfigMap writes.
        conf["spark.kubernetes.executor.disableConfigMap"] = "true"
        # Driver-executor RPC authenticated and encrypted (AES, Spark's "Security" docs, "Spark
        # RPC") with a key of the application's own: another application's pod cannot join or
        # read it. The key is a file from the application's Secret in driver and executors alike;
        # without the files Spark generates one and writes it into every executor pod's
        # environment, readable by anyone who may `get pods` (Spark docs, "Security" -> Kubernetes).
        conf["spark.authenticate"] = "true"
        conf["spark.network.crypto.enabled"] = "true"
        conf["spark.authenticate.secret.driver.file"] = AUTH_SECRET_FILE
        conf["spark.authenticate.secret.executor.file"] = AUTH_SECRET_FILE
        image_classpath = f"{jars_dir.rstrip('/')}/*"  # the JVM's class-path wildcard: every jar of the folder
        conf["spark.driver.extraClassPath"] = conf["spark.executor.extraClassPath"] = image_classpath
    else:
        conf["spark.master"] = settings.spark_master
        conf["spark.driver.memory"] = settings.spark_driver_memory
        classpath = os.pathsep.join(str(j) for j in spark_jars(settings))
        conf["spark.driver.extraClassPath"] = classpath
        if not settings.spark_master.startswith("local"):
            # Executors in other JVMs (a standalone cluster's) load the jars from the same paths: the
            # workers `kappa spark` starts share this machine's build/jars; other machines need it at
            # the same path (kappa.services.spark_cluster). spark.jars would copy every jar (see
            # SESSION_ONLY) into every executor's work folder.
            conf["spark.executor.extraClassPath"] = classpath
    return conf


def spark_session(settings: Settings, java_options: str = ""):
    """Get or create the process's SparkSession with Kappa's configuration; ``java_options`` are
    added to its driver's JVM options when this call starts the JVM (the class archive's writer,
    :mod:`kappa.streaming.class_archive`).

    Raises :class:`kappa.core.jvm.JvmError` when Java or the Maven-resolved jars are missing.
    """
    from pyspark.sql import SparkSession

    java_executable()
    # Python workers must be this interpreter (the project venv), not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Everything is on this machine; don't let Spark pick a routable interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Launched by spark-submit (a SparkApplication's driver): the configuration came with the
        # submission (the same spark_conf, application=True); setting it again would override the
        # cluster's master with local[*].
        return builder.getOrCreate()
    conf = spark_conf(settings)
    if java_options:
        conf["spark.driver.extraJavaOptions"] += f" {java_options}"
    _launch_jvm(settings, conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _launch_jvm(settings: Settings, conf: dict[str, str]) -> None:
    """Start Spark's JVM, once per process, with its stdout and stderr in the process's log file
    (:func:`kappa.core.logs.spark_output`; the console with ``KAPPA_VERBOSE``). pyspark would start it
    inheriting the console, and with it the Python workers' output, which Spark copies to the
    JVM's stderr. ``launch_gateway``'s ``popen_kwargs`` exist for this ("capturing
    stdout/stderr", its docstring); the SparkContext built on that gateway is the one
    ``getOrCreate`` then returns. The JVM maps its classes from the class-data-sharing archive
    when there is one for its class path (:mod:`kappa.streaming.class_archive`)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    from kappa.core import logs

    from kappa.core.jvm import class_archive_options

    if getattr(SparkContext, "_gateway", None) is not None:
        return  # the JVM is up (a stopped SparkContext keeps it): getOrCreate reuses it
    archive = class_archive_options(settings, conf.get("spark.driver.extraClassPath", ""))
    if archive:  # the driver's classes mapped from the archive `make install` wrote
        conf = {**conf, "spark.driver.extraJavaOptions": f"{conf['spark.driver.extraJavaOptions']} {archive}"}
    sconf = SparkConf().setAll(conf.items())
    with logs.spark_output(settings) as popen_kwargs:
        gateway = launch_gateway(sconf, popen_kwargs=popen_kwargs)
    SparkContext(conf=sconf, gateway=gateway)
