"""Typed settings: the only module that reads the environment.

Settings are read when :func:`load_settings` is called (never at import time), so tests and
front ends can set ``KAPPA_*`` variables, or pass overrides, right before they need them.

Environment variables (all optional):

=============================  ==============================================  ======================
variable                       meaning                                         default
=============================  ==============================================  ======================
``KAPPA_PROJECT_DIR``          folder holding ``assets/`` and ``build/jars``    found from the cwd
``KAPPA_HOME``                 local state: broker data, warehouse, checkpoints ``<project>/.kappa``
``KAPPA_WAREHOUSE``            root of the Delta tables                         ``<home>/warehouse``
``KAPPA_CHECKPOINTS``          root of the streaming checkpoints                ``<home>/checkpoints``
``KAPPA_KAFKA_PORT``           local broker's client port                       ``9092``
``KAPPA_KAFKA_CONTROLLER_PORT`` local broker's KRaft controller port            ``9093``
``KAPPA_KAFKA_HOST``           the address the local broker's client listener   ``127.0.0.1``
                               binds and advertises (the machine's own address
                               lets pods on a real node reach it; the
                               controller stays on loopback)
``KAPPA_BOOTSTRAP_SERVERS``    Kafka bootstrap servers                          ``<host>:<port>``
``KAPPA_SPARK_MASTER``         Spark master URL                                 ``local[*]``
``KAPPA_SPARK_DRIVER_MEMORY``  driver heap, Spark size string                   ``4g``
``KAPPA_SPARK_DRIVER_JIT``     the driver JVM's JIT compilers: ``tiered`` (C1   ``tiered``
                               then C2, for long-running queries) or ``c1``
                               (C1 only: less CPU for short runs)
``KAPPA_SPARK_UI``             ``true``: the driver's web UI and REST API        ``false``
``KAPPA_SPARK_UI_PORT``        their port (``spark.ui.port``)                   Spark's (``4040``,
                                                                                the next free one)
``KAPPA_SPARK_CLUSTER_PORT``   ``kappa spark``'s standalone master port          ``7077``
``KAPPA_SPARK_CLUSTER_WEBUI_PORT`` its master's web UI (JSON at ``/json/``)      ``8080``
``KAPPA_SPARK_WORKERS``        its workers (each one executor per application)  ``2``
``KAPPA_SPARK_WORKER_CORES``   cores each worker offers                         ``1``
``KAPPA_SPARK_WORKER_MEMORY``  memory each worker offers (≥ an executor's,      ``1g``
                               ``spark.executor.memory``, 1g by default)
``KAPPA_SHUFFLE_PARTITIONS``   ``spark.sql.shuffle.partitions``                 ``2``
``KAPPA_RUNNER``               where queries run: ``local`` or ``kubernetes``   ``local``
``KAPPA_CLUSTER_NODE``         ``kappa cluster start``'s node: ``kwok`` (a fake  ``kwok``
                               node, no containers) or ``real`` (containerd and
                               a kubelet beside it: :mod:`kappa.services.node`)
``KAPPA_MAX_OFFSETS_PER_TRIGGER`` records per micro-batch of a continuous    ``500000``
                               query reading Kafka (``maxOffsetsPerTrigger``;
                               ``0``: no bound); not applied to available-now
                               runs; an asset's ``max_offsets_per_trigger``
                               wins (:meth:`Settings.kafka_batch_limit`)
``KAPPA_MIN_RETENTION_HOURS`` the platform floor of a VACUUM retention, in   ``168`` (Delta's
                               hours: ``kappa maintain`` and the ``maintain``   ``deletedFile``
                               job refuse a shorter one                         ``RetentionDuration``,
                                                                                7 days)
``KAPPA_POSTGRES_HOST``        the operational PostgreSQL's host                ``127.0.0.1``
``KAPPA_POSTGRES_PORT``        its port (the local server listens there)        ``55432``
``KAPPA_POSTGRES_DATABASE``    its database                                     ``kappa``
``KAPPA_POSTGRES_USER``        its user / password                              ``kappa`` / ``kappa``
``KAPPA_CONNECT_PORT``         the local Kafka Connect worker's REST port       ``58083``
``KAPPA_SERVE_PORT``           port ``kappa serve`` listens on when none given  ``10000``
                               (``kappa demo``, ``kappa dbt`` starting one),
                               or that ``KAPPA_SERVE_HOST``'s endpoint listens on
``KAPPA_SERVE_HOST``           an endpoint another process runs (the chart's    none (this state
                               ``kappa-serve`` Service): Kappa's clients use    dir's endpoint,
                               it and start none                                started if needed)
``KAPPA_SERVE_PASSWORD_FILE``  ``kappa serve`` checks logins against this file  none (no password)
                               (salted hashes, see :mod:`kappa.services.serve_users`)
``KAPPA_SERVE_USER``           user / password ``kappa dbt`` logs in with       none (required when
``KAPPA_SERVE_PASSWORD``       when the endpoint checks passwords               it checks passwords)
``KAPPA_SERVE_TLS_KEYSTORE``   ``kappa serve`` speaks TLS (HiveServer2 SSL)     none (plain TCP)
                               with this PKCS12 keystore (key and certificate)
``KAPPA_SERVE_TLS_PASSWORD_FILE`` a file holding that keystore's password       required with it
``KAPPA_ALERT_WEBHOOK``        URL each alert is POSTed to as JSON              none (alerts only in
                               (:mod:`kappa.quality.freshness`)                 ``_kappa/alerts``)
``KAPPA_SERVE_TLS``            clients of ``KAPPA_SERVE_HOST``'s endpoint use   ``false``
                               TLS (a local endpoint says so in its state)
``KAPPA_SERVE_TLS_CA_FILE``    PEM certificates clients verify the endpoint's   the system's CAs
                               certificate against (``kappa dbt`` included)
``KAPPA_SERVE_AWS_ACCESS_KEY_ID`` the object-store keys a local ``kappa serve``   none (the caller's
``KAPPA_SERVE_AWS_SECRET_ACCESS_KEY`` runs with (its ``AWS_*``): read the         ``AWS_*``)
                               warehouse, write only ``<warehouse>/_dbt``
                               (``kappa objectstore``'s ``env`` sets them)
``KAPPA_SERVE_OBJECT_STORE_KEYS`` a folder with the files ``AWS_ACCESS_KEY_ID``  none (``kappa serve``
                               and ``AWS_SECRET_ACCESS_KEY``: the endpoint      writes one, 0700/0600,
                               process's object-store keys (read from files,    from the keys above or
                               never its environment; the chart mounts them)    the caller's ``AWS_*``)
``KAPPA_S3_ENDPOINT``          S3-compatible object-store endpoint              AWS S3
``KAPPA_S3_PATH_STYLE_ACCESS`` path-style bucket addressing                     ``false``
``KAPPA_OBJECTSTORE_PORT``     the local object store's S3 port                 ``59000``
                               (``kappa objectstore``, see
                               :mod:`kappa.services.objectstore`)
``KAPPA_OBJECTSTORE_HOST``     the address it listens on and its endpoint       ``127.0.0.1``
                               names (the machine's own address lets pods
                               on a real node reach it)
``KAPPA_OBJECTSTORE_BUCKET``   the bucket it creates at start                   ``kappa``
``AWS_ACCESS_KEY_ID``          the local object store's root credentials when   generated at first
``AWS_SECRET_ACCESS_KEY``      both are set (read by :func:`aws_environment`)   start (0600 file)
``AWS_REGION``                 the region it reports                            ``us-east-1``
``KAPPA_VERBOSE``              ``true``: Spark's JVM and Python workers, py4j   ``false``
                               and librdkafka log to the console, not to
                               ``<home>/logs/kappa-<pid>.log`` (``kappa
                               --verbose``; see :mod:`kappa.core.logs`)
``KAPPA_FAULT``                ``<asset>:<point>:<batch_id>``: exit there      none
                               (fault injection, see :class:`kappa.faults.Fault`)
``KAPPA_DEDUP_ANTI_JOIN``      test only: ``false`` turns off silver's          ``true``
                               anti-join on ``event_id`` against the table
=============================  ==============================================  ======================

A value that does not validate (``KAPPA_RUNNER=foo``, ``KAPPA_KAFKA_PORT=abc``, ``KAPPA_FAULT=x``)
raises :class:`SettingsError`, a :class:`kappa.errors.KappaError` whose one line names the variable,
the value and what it should be, so the ``kappa`` command prints it without a traceback.
"""

from __future__ import annotations

import ipaddress

import os
import re
import types
import typing
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as _SourceError

from kappa.errors import KappaError
from kappa.faults import FAULT_FORM, Fault

ENV_PREFIX = "KAPPA_"


class SettingsError(KappaError):
    """A ``KAPPA_*`` variable (or a :func:`load_settings` override) whose value does not validate.
    The message is one line: the variable, its value and the allowed values or expected form."""


def find_project_dir(start: Path | None = None) -> Path:
    """The nearest folder, from ``start`` (default: the cwd) upwards, holding ``assets/`` and a
    ``pyproject.toml``; else the source checkout this package was installed from; else the cwd."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "assets").is_dir() and (candidate / "pyproject.toml").is_file():
            return candidate
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "assets").is_dir():
        return checkout
    return here


def is_uri(location: object) -> bool:
    """Whether ``location`` is a URI string (``s3a://…``, ``file://…``) rather than a local path."""
    return isinstance(location, str) and "://" in location


def _location(value: Path | str | None, default: Path) -> Path | str:
    """An absolute local Path, or an object-store URI kept as a string (``Path`` would fold
    ``s3a://b`` into ``s3a:/b``)."""
    if value is None:
        return default.resolve()
    if is_uri(value):
        return str(value).rstrip("/")
    return Path(value).resolve()


def join(root: Path | str, *parts: str) -> Path | str:
    """``root/part/…`` for a local Path or an object-store URI."""
    if isinstance(root, str):
        return "/".join([root.rstrip("/"), *parts])
    return root.joinpath(*parts)


class Settings(BaseSettings):
    """Every knob Kappa reads. Paths are absolute after validation."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    project_dir: Path = Field(default_factory=find_project_dir)
    home: Path | None = None
    #: A local folder, or an object-store URI (``s3a://bucket/prefix``) on Kubernetes.
    warehouse: Path | str | None = None
    checkpoints: Path | str | None = None
    assets_dir: Path | None = None
    jars_dir: Path | None = None

    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    #: The one address the local broker's client listener binds and advertises (loopback by
    #: default; the machine's own for pods on a real node, ``kappa.services.node.node_ip``).
    kafka_host: ipaddress.IPv4Address = ipaddress.IPv4Address("127.0.0.1")
    bootstrap_servers: str | None = None
    topic_partitions: int = Field(3, ge=1)

    spark_master: str = "local[*]"
    spark_driver_memory: str = "4g"
    #: The driver JVM's JIT compilers (the options: ``kappa.core.jvm.JIT_OPTIONS``).
    #: ``tiered`` (HotSpot's default) compiles hot methods with C1, then the hottest again with C2,
    #: whose optimised code pays back over a long-running query; its compile thresholds are scaled
    #: ×4 (``-XX:CompileThresholdScaling=4``), so C2 compiles what stays hot, not all that gets warm:
    #: the tests' shared session spent 152 s compiling in a 194 s stretch of the full-data run (JFR),
    #: and six integration files on it (replay, streams, late_rows, exactly_once, pipeline,
    #: delay_streaks_full; -n 2, 2 cores) took 782 and 790 CPU-s (418, 408 s wall) without the
    #: scaling, 725 and 742 (377, 387 s) with it. A long-running query's hot loops still reach C2
    #: in its first minutes.
    #: ``c1`` (``-XX:TieredStopAtLevel=1``) stops at C1: for a process that lives a minute, C2's
    #: compiling is most of its CPU. It keeps tiered's 240 MB code cache: a C1-only VM defaults to
    #: 48 MB, which a driver running five assets for two minutes filled. Measured on 2 cores, a
    #: ``kappa run flights departures_hourly --until-caught-up`` of 2,400 flights (JVM CPU from
    #: process accounting; ``-XX:+CITime``: 45 s of compiling, 34.5 s of it C2): 64 CPU-s tiered,
    #: 44 CPU-s c1, wall 37 s either way. A longer Delta write/read/MERGE workload took more CPU
    #: with c1 (290 vs 219 CPU-s), and so did the tests' shared session, which lives the whole run
    #: (the same six files: 795 vs 728 CPU-s, 429 vs 378 s wall), hence the default.
    #: ``kappa serve``'s endpoint, which runs for hours, is always ``tiered``.
    spark_driver_jit: Literal["tiered", "c1"] = "tiered"
    #: ``spark.sql.shuffle.partitions``: a laptop's cores. Each stateful operator keeps one state
    #: store per partition and every micro-batch runs one task per partition, so more partitions than
    #: cores only add per-task cost to small micro-batches (tests/integration replay, late-rows,
    #: exactly-once, history, dedup and keyed-ingest files: 612 -> 558 s on 2 cores together with
    #: the coalesced appends of ``kappa.streaming.writers.files_for``). Fixed in a checkpoint when
    #: a version first runs: size it for production before (docs/CAPACITY.md, "State store").
    shuffle_partitions: int = Field(2, ge=1)
    #: ``spark.databricks.delta.snapshotPartitions``: tasks that rebuild a Delta snapshot.
    delta_snapshot_partitions: int = Field(2, ge=1)
    spark_ui: bool = False
    #: ``spark.ui.port`` when set; else Spark's 4040 (or the next free port).
    spark_ui_port: int | None = Field(None, ge=1, le=65535)
    #: ``kappa spark`` (:mod:`kappa.services.spark_cluster`): the standalone master's ports, and the
    #: workers it starts with their cores and memory.
    spark_cluster_port: int = Field(7077, ge=1, le=65535)
    spark_cluster_webui_port: int = Field(8080, ge=1, le=65535)
    spark_workers: int = Field(2, ge=1)
    spark_worker_cores: int = Field(1, ge=1)
    spark_worker_memory: str = Field("1g", pattern=r"^[0-9]+[kmgtKMGT]?$")

    runner: Literal["local", "kubernetes"] = "local"
    #: ``kappa cluster start`` (:mod:`kappa.services.cluster`): ``kwok`` alone, or also a ``real``
    #: node (:mod:`kappa.services.node`; ``make node-tools`` first).
    cluster_node: Literal["kwok", "real"] = "kwok"

    #: ``KAPPA_VERBOSE``: the libraries' logs on the console instead of :attr:`logs_dir`.
    verbose: bool = False
    #: ``KAPPA_MAX_OFFSETS_PER_TRIGGER``: back-pressure of a continuous query reading Kafka, in
    #: records per micro-batch (Spark's ``maxOffsetsPerTrigger``, split across partitions by their
    #: lag); 0 = no bound. Without a bound, the first micro-batch after an outage reads the whole
    #: backlog: an hour's outage at the 12,000 ev/s the bench sustained is 43 million records, some
    #: 16 minutes in one batch at silver's speed, committing nothing until the end, redone whole
    #: after a crash. Why 500,000 (README, "Faults and speed", measured on the 2-core machine):
    #: the bound must not slow a catch-up. A processing-time query reads at most one bound per
    #: trigger, so at the default 10 s trigger and silver's measured replay speed, 43,758 ev/s, it
    #: must be >= 437,580 records; rounded up. A batch that size then takes ~11 s for silver and
    #: ~21 s for ``delay_streaks`` (23,362 ev/s), the slowest kind measured: a catch-up commits every
    #: 10-20 s. A longer trigger or a faster machine may want a larger bound; a shorter trigger
    #: (the bench's 1 s) only raises the cap.
    max_offsets_per_trigger: int = Field(500_000, ge=0)
    #: ``KAPPA_MIN_RETENTION_HOURS``: the shortest VACUUM retention ``kappa maintain`` accepts, in
    #: hours. Default 168: Delta's default ``delta.deletedFileRetentionDuration`` (7 days, Delta docs,
    #: "Remove files no longer referenced by a Delta table"), the time travel a reader can count on.
    #: Only ``kappa forget`` vacuums below it (RETAIN 0 HOURS, the files that held the key).
    min_retention_hours: float = Field(168.0, gt=0)

    #: ``KAPPA_FAULT``: a deterministic fault point (tests and chaos drills), None in normal runs.
    fault: Fault | None = None
    #: ``KAPPA_DEDUP_ANTI_JOIN``: test only. ``False`` disables silver's anti-join against the table
    #: (for events behind the watermark; on-time copies are dropped by the state store either way),
    #: so the fault-point tests show that Delta's transaction ids alone give exactly-once.
    dedup_anti_join: bool = True

    @field_validator("fault", mode="before")
    @classmethod
    def _parse_fault(cls, value: object) -> object:
        if value in (None, ""):
            return None
        return Fault.parse(value) if isinstance(value, str) else value

    # The operational database (CDC source) and the Kafka Connect worker that captures it.
    postgres_host: str = "127.0.0.1"
    postgres_port: int = 55432
    postgres_database: str = "kappa"
    postgres_user: str = "kappa"
    postgres_password: str = "kappa"
    connect_port: int = 58083

    #: ``KAPPA_ALERT_WEBHOOK``: where an alert (freshness breach, stopped query) is POSTed as JSON
    #: (:func:`kappa.quality.freshness.notify`); None = recorded in ``<warehouse>/_kappa/alerts`` only.
    alert_webhook: str | None = None
    #: ``kappa serve``'s port when none is given (HiveServer2's registered port).
    serve_port: int = Field(10000, ge=1, le=65535)
    #: ``KAPPA_SERVE_HOST``: the host of an endpoint another process runs, on ``serve_port`` (on
    #: Kubernetes the chart's ``kappa-serve`` Service, set in its ``kappa-config``). Set, Kappa's
    #: clients (``kappa dbt``, Dagster's dbt assets, ``kappa demo``) connect there and never start an
    #: endpoint of their own; None = this state dir's endpoint, started when needed.
    serve_host: str | None = None
    #: ``kappa serve``'s password file (HiveServer2 CUSTOM authentication); None = no password.
    serve_password_file: Path | None = None
    #: The login of Kappa's own endpoint clients (``kappa dbt``) when the endpoint checks passwords.
    serve_user: str | None = None
    serve_password: str | None = None
    #: ``kappa serve`` speaks TLS (HiveServer2 SSL) with this PKCS12 keystore; None = plain TCP.
    serve_tls_keystore: Path | None = None
    #: The file holding the keystore's password (a file, so the password is in no process's
    #: arguments or environment; on Kubernetes a Secret's key).
    serve_tls_password_file: Path | None = None
    #: ``KAPPA_SERVE_TLS``: the endpoint at ``serve_host`` speaks TLS (a local one records it).
    serve_tls: bool = False
    #: ``KAPPA_SERVE_TLS_CA_FILE``: PEM certificates Kappa's clients of the endpoint (``kappa dbt``
    #: through :mod:`kappa.services.tls_relay`, :func:`kappa.services.serve.connect`) verify its
    #: certificate against; None: the system's certificate authorities.
    serve_tls_ca_file: Path | None = None
    #: The object-store keys a local ``kappa serve`` is started with (as its ``AWS_ACCESS_KEY_ID``/
    #: ``AWS_SECRET_ACCESS_KEY``): an identity that reads the warehouse and writes only
    #: ``<warehouse>/_dbt`` (``kappa objectstore`` makes one and puts it in its ``env``). None: the
    #: endpoint inherits the caller's keys. On Kubernetes the chart gives the endpoint its own Secret.
    serve_aws_access_key_id: str | None = None
    serve_aws_secret_access_key: str | None = None
    #: ``KAPPA_SERVE_OBJECT_STORE_KEYS``: the folder the endpoint's process reads its object-store
    #: keys from (files ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``), so they are in no
    #: process's environment; :func:`kappa.services.serve.start` writes it, the chart mounts it.
    serve_object_store_keys: Path | None = None

    #: ``KAPPA_DAGSTER_URL``: the Dagster webserver that ``add_asset``, ``edit_asset`` and
    #: ``retire_asset`` ask to reload the code location ``dagster_location`` (``make dagster``'s).
    dagster_url: str = "http://127.0.0.1:3000"
    dagster_location: str = "kappa"

    #: S3-compatible endpoint of the object store (MinIO, Ceph…); None = AWS S3's own endpoint.
    s3_endpoint: str | None = None
    #: Path-style bucket addressing (most S3-compatible stores need it).
    s3_path_style_access: bool = False

    #: ``kappa objectstore``: the local S3-compatible server's port, the one address it listens on
    #: (loopback by default; the machine's own for pods on a real node, ``kappa.services.node.node_ip``)
    #: and the bucket it creates at start.
    objectstore_port: int = Field(59000, ge=1, le=65535)
    objectstore_host: ipaddress.IPv4Address = ipaddress.IPv4Address("127.0.0.1")
    objectstore_bucket: str = Field("kappa", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")

    # Kafka client security (the kubernetes runner sets these from the KafkaUser's Secret; the local
    # broker is PLAINTEXT on loopback and needs none). Passed to Spark's Kafka source as kafka.*.
    kafka_security_protocol: str | None = None
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_jaas_config: str | None = None
    kafka_ssl_truststore_type: str | None = None
    kafka_ssl_truststore_location: str | None = None
    #: Consumer-group prefix of Spark's Kafka source (must stay inside the KafkaUser's ACL prefix).
    kafka_group_id_prefix: str | None = None

    def kafka_batch_limit(self, declared: int | None, continuous: bool) -> int | None:
        """Records per micro-batch for a query reading Kafka (Spark's ``maxOffsetsPerTrigger``),
        None = no bound. ``declared`` (the asset's ``source.kafka.max_offsets_per_trigger``) wins
        in every trigger mode; else a ``continuous`` (processing-time) query gets
        :attr:`max_offsets_per_trigger` and an available-now run none: its end offsets are fixed
        when it starts, so it cannot chase a growing log, and a replay's table must not depend on
        an operator's knob (a stateful kind's late rows depend on where batches split)."""
        if declared is not None:
            return declared
        return (self.max_offsets_per_trigger or None) if continuous else None

    def kafka_client_options(self) -> dict[str, str]:
        """Kafka client properties beyond bootstrap servers (security), without the ``kafka.`` prefix."""
        pairs = {
            "security.protocol": self.kafka_security_protocol,
            "sasl.mechanism": self.kafka_sasl_mechanism,
            "sasl.jaas.config": self.kafka_sasl_jaas_config,
            "ssl.truststore.type": self.kafka_ssl_truststore_type,
            "ssl.truststore.location": self.kafka_ssl_truststore_location,
        }
        return {k: v for k, v in pairs.items() if v}

    def librdkafka_options(self) -> dict[str, str]:
        """The same security settings for confluent-kafka (librdkafka) clients: it takes the SASL
        user and password rather than a JAAS line, and a PEM CA file as ``ssl.ca.location``."""
        out: dict[str, str] = {}
        if self.kafka_security_protocol:
            out["security.protocol"] = self.kafka_security_protocol
        if self.kafka_sasl_mechanism:
            out["sasl.mechanisms"] = self.kafka_sasl_mechanism
        if self.kafka_sasl_jaas_config:
            for key in ("username", "password"):
                m = re.search(rf'{key}="([^"]*)"', self.kafka_sasl_jaas_config)
                if m:
                    out[f"sasl.{key}"] = m.group(1)
        if self.kafka_ssl_truststore_location and (self.kafka_ssl_truststore_type or "PEM").upper() == "PEM":
            out["ssl.ca.location"] = self.kafka_ssl_truststore_location
        return out

    @model_validator(mode="after")
    def _derive_paths(self) -> "Settings":
        self.project_dir = self.project_dir.resolve()
        self.home = (self.home or self.project_dir / ".kappa").resolve()
        self.warehouse = _location(self.warehouse, self.home / "warehouse")
        self.checkpoints = _location(self.checkpoints, self.home / "checkpoints")
        self.assets_dir = (self.assets_dir or self.project_dir / "assets").resolve()
        self.jars_dir = (self.jars_dir or self.project_dir / "build" / "jars").resolve()
        if self.bootstrap_servers is None:
            self.bootstrap_servers = f"{self.kafka_host}:{self.kafka_port}"
        return self

    @property
    def broker_dir(self) -> Path:
        """State of the local broker: its KRaft log dirs, config, pid file and log file."""
        assert self.home is not None
        return self.home / "kafka"

    @property
    def logs_dir(self) -> Path:
        """Log files of the processes Kappa runs in the foreground (:mod:`kappa.core.logs`)."""
        assert self.home is not None
        return self.home / "logs"

    @property
    def postgres_dir(self) -> Path:
        """State of the local PostgreSQL server: its cluster (``data/``) and its log."""
        assert self.home is not None
        return self.home / "postgres"

    @property
    def objectstore_dir(self) -> Path:
        """State of the local object store: its objects (``data/``), credentials, pid file and log."""
        assert self.home is not None
        return self.home / "objectstore"

    @property
    def connect_dir(self) -> Path:
        """State of the local Kafka Connect worker: its properties, pid file and log."""
        assert self.home is not None
        return self.home / "connect"


def kubernetes_values() -> dict[str, str]:
    """The ``KAPPA_K8S_*`` variables (the kubernetes runner's settings, see
    :meth:`kappa.runners.kubernetes.KubernetesRunnerConfig.from_mapping`), read now."""
    return {k: v for k, v in os.environ.items() if k.startswith("KAPPA_K8S_")}


#: The standard AWS variables that Spark (S3A's environment credentials provider), delta-rs and
#: pyarrow all read.
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


def aws_environment() -> dict[str, str]:
    """The :data:`AWS_VARIABLES` that are set (and not empty), read now."""
    return {k: os.environ[k] for k in AWS_VARIABLES if os.environ.get(k)}


def load_settings(**overrides: object) -> Settings:
    """Read ``KAPPA_*`` from the environment now; keyword ``overrides`` win over the environment.
    Raises :class:`SettingsError` (one line, see :func:`describe_invalid`) when a value does not
    validate."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise SettingsError(describe_invalid(exc, overrides)) from exc
    except _SourceError as exc:  # pydantic-settings could not decode a value (JSON of a complex field)
        raise SettingsError(re.sub(r'field "(\w+)"', lambda m: _variable(m.group(1)), str(exc))) from exc


#: Fields whose value an error message must not echo.
_SECRET = re.compile(r"password|jaas")


def _variable(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


def describe_invalid(exc: ValidationError, overrides: typing.Mapping[str, object] | None = None) -> str:
    """One line for a :class:`Settings` validation error: per bad field, its variable and value
    (``KAPPA_RUNNER='foo'``; ``runner='foo'`` and the variable when a :func:`load_settings` override
    gave it), for ``KAPPA_FAULT`` which part is wrong, and what the field takes
    (:func:`_expected`); several bad fields are joined with ``"; "``."""
    problems, seen = [], set()
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        if field not in Settings.model_fields:  # a model-level check: its own message
            problems.append(error["msg"])
            continue
        if field in seen:  # a union field fails once per member type: one problem is enough
            continue
        seen.add(field)
        value = "<hidden>" if _SECRET.search(field) else repr(error.get("input"))
        name = (f"{field}={value} (load_settings override of {_variable(field)})"
                if field in (overrides or {}) else f"{_variable(field)}={value}")
        why, expected = _expected(field, error)
        problems.append(f"{name} is not valid{f' ({why})' if why else ''}: expected {expected}")
    return "; ".join(problems)


def _expected(field: str, error: dict) -> tuple[str | None, str]:
    """(why, what ``field`` takes), from its annotation and constraints rather than pydantic's
    wording, which speaks of Python types: ``one of local, kubernetes``, ``an integer from 1 to
    65535``…; why is the fault parser's reason (which part of the form is wrong), else None."""
    info = Settings.model_fields[field]
    if field == "fault":
        cause = error.get("ctx", {}).get("error")
        return (str(cause) if cause else None), FAULT_FORM
    union = typing.get_origin(info.annotation) in (typing.Union, types.UnionType)
    kinds = [a for a in typing.get_args(info.annotation) if a is not type(None)] if union else [info.annotation]
    literals = [v for k in kinds if typing.get_origin(k) is typing.Literal for v in typing.get_args(k)]
    if literals:
        return None, "one of " + ", ".join(str(v) for v in literals)
    if bool in kinds:
        return None, "true or false (also 1/0, yes/no, on/off)"
    if int in kinds:
        bounds = {b: getattr(m, b) for m in info.metadata for b in ("ge", "le") if hasattr(m, b)}
        if "ge" in bounds and "le" in bounds:
            return None, f"an integer from {bounds['ge']} to {bounds['le']}"
        if "ge" in bounds:
            return None, f"an integer >= {bounds['ge']}"
        return None, "an integer"
    return None, error["msg"][:1].lower() + error["msg"][1:]
