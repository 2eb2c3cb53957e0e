"""A real single-node Apache Kafka broker in KRaft mode (broker and controller in one process),
run from the Maven-resolved jars in ``build/jars/kafka``.

State lives under ``<KAPPA_HOME>/kafka``: ``server.properties``, the KRaft log dirs (``data/``), the
broker's log (``broker.log``) and ``broker.pid``. See Kafka's "KRaft" operations docs for the
settings written here.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kappa.core import processes
from kappa.config import Settings
from kappa.errors import KappaError
from kappa.core.jvm import JIT_OPTIONS, jar_dir, java_executable, log4j2_file_config, properties_text
from kappa.core.service import LocalService, ServiceStatus


class BrokerError(KappaError, RuntimeError):
    """The local broker cannot be started, stopped or reached; the message says why and what to do."""


@dataclass
class BrokerStatus(ServiceStatus):
    """The local broker as ``kappa kafka status`` reports it: ``up`` (it answers on its port),
    bootstrap servers, pid, state folder, log and ports."""
    up: bool
    bootstrap_servers: str
    pid: int | None
    state_dir: str
    log_file: str
    port: int
    controller_port: int

    def summary(self) -> list[str]:
        """Where the broker listens, its pid, state folder and log (plain text)."""
        return [f"at {self.bootstrap_servers} (pid {self.pid or '-'}, state {self.state_dir}); log: {self.log_file}"]


def _paths(settings: Settings) -> dict[str, Path]:
    d = settings.broker_dir
    return {
        "dir": d,
        "data": d / "data",
        "config": d / "server.properties",
        "pid": d / "broker.pid",
        "log": d / "broker.log",
        "log4j": d / "log4j2.properties",
    }


def running_pid(settings: Settings) -> int | None:
    """The pid of this state dir's broker if its process is alive, else None (stale pid files are
    removed)."""
    return processes.running_pid(_paths(settings)["pid"])


def _server_properties(settings: Settings, data_dir: Path) -> str:
    p, c = settings.kafka_port, settings.kafka_controller_port
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{c}",
        "listeners": f"PLAINTEXT://{settings.kafka_host}:{p},CONTROLLER://127.0.0.1:{c}",
        "advertised.listeners": f"PLAINTEXT://{settings.kafka_host}:{p}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": str(settings.topic_partitions),
        # One node: every internal topic has one replica.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Kafka is the system of record: never delete by age unless a topic says so.
        "log.retention.ms": "-1",
        # A topic that does set a retention sees it applied within seconds, not the default 5 min.
        "log.retention.check.interval.ms": "5000",
        "auto.create.topics.enable": "false",
        # Room for oversized records (a bad-input corpus sends a 5 MB value).
        "message.max.bytes": str(16 * 1024 * 1024),
        "replica.fetch.max.bytes": str(16 * 1024 * 1024),
    }
    return properties_text(props)


#: What the broker logs besides INFO: its state-change chatter only from WARN.
_LOG_LEVELS = {"kafka": "INFO", "state.change.logger": "WARN"}


def _kafka_uuid() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's ``Uuid``).

    Like Kafka's ``Uuid.randomUuid()``, never one that starts with ``-``: ``kafka-storage format
    -t -abc…`` reads it as an option and fails (1 start in 64 did)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def status(settings: Settings) -> BrokerStatus:
    """Whether this state dir's broker process is alive, and where it listens."""
    paths = _paths(settings)
    pid = running_pid(settings)
    return BrokerStatus(
        up=pid is not None and _reachable(settings, timeout_s=2.0),
        bootstrap_servers=settings.bootstrap_servers or "",
        pid=pid,
        state_dir=str(paths["dir"]),
        log_file=str(paths["log"]),
        port=settings.kafka_port,
        controller_port=settings.kafka_controller_port,
    )


def _reachable(settings: Settings, timeout_s: float) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
        return True
    except Exception:
        return False


def start(settings: Settings, timeout_s: float = 90.0) -> BrokerStatus:
    """Start the broker and wait until it answers a metadata request.

    Raises :class:`BrokerError` if it is already running, a port is taken, Java or the jars are
    missing, the process dies, or it is not ready within ``timeout_s`` seconds (with the log's tail).
    """
    paths = _paths(settings)
    pid = running_pid(settings)
    if pid is not None:
        raise BrokerError(
            f"the local broker is already running (pid {pid}) at {settings.bootstrap_servers}; "
            "`kappa kafka status` shows it, `kappa kafka stop` stops it"
        )
    for name, port, host in (("client", settings.kafka_port, str(settings.kafka_host)),
                             ("controller", settings.kafka_controller_port, "127.0.0.1")):
        if processes.port_in_use(port, host):
            raise BrokerError(
                f"port {port} ({name} port) is already in use by another process; stop it or choose "
                f"another port with KAPPA_KAFKA_PORT / KAPPA_KAFKA_CONTROLLER_PORT"
            )
    try:
        java = java_executable()
        classpath = f"{jar_dir(settings, 'kafka')}/*"
    except Exception as exc:
        raise BrokerError(str(exc)) from None

    paths["data"].mkdir(parents=True, exist_ok=True)
    paths["config"].write_text(_server_properties(settings, paths["data"]))
    paths["log4j"].write_text(log4j2_file_config(paths["log"], _LOG_LEVELS))
    jvm_opts = [f"-Dlog4j2.configurationFile={paths['log4j']}", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC",
                *JIT_OPTIONS["c1"].split()]  # C1 only: kappa.core.jvm.JIT_OPTIONS

    if not (paths["data"] / "meta.properties").exists():
        fmt = subprocess.run(
            [java, *jvm_opts, "-cp", classpath, "kafka.tools.StorageTool", "format",
             "-t", _kafka_uuid(), "-c", str(paths["config"]), "--ignore-formatted"],
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            raise BrokerError(f"formatting the KRaft log dir failed:\n{fmt.stdout}{fmt.stderr}")

    # start_new_session (in spawn): Ctrl-C in the calling shell must not kill the broker
    proc = processes.spawn([java, *jvm_opts, "-cp", classpath, "kafka.Kafka", str(paths["config"])],
                           paths["log"], paths["pid"])
    processes.wait_ready(proc, lambda: _reachable(settings, timeout_s=1.0), what="the broker", log=paths["log"],
                         timeout_s=timeout_s, error=BrokerError, pid_file=paths["pid"])
    return status(settings)


def stop(settings: Settings, grace_s: float = 30.0) -> int:
    """Stop the broker cleanly (SIGTERM, then SIGKILL after ``grace_s`` seconds); returns its pid.
    Raises :class:`BrokerError` when it is not running."""
    return processes.stop_from_pid_file(
        _paths(settings)["pid"], BrokerError(f"the local broker is not running (state dir {settings.broker_dir})"),
        grace_s=grace_s)


def kill(settings: Settings) -> int:
    """SIGKILL the broker (fault injection: no clean shutdown). Raises :class:`BrokerError` when it
    is not running."""
    return processes.stop_from_pid_file(_paths(settings)["pid"], BrokerError("the local broker is not running"),
                                        sigkill=True)


def ensure_running(settings: Settings, timeout_s: float = 90.0) -> BrokerStatus:
    """Start the broker unless this state dir's broker already answers."""
    st = status(settings)
    if st.up:
        return st
    if st.pid is not None:  # alive but not answering yet (still starting)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _reachable(settings, 1.0):
                return status(settings)
            time.sleep(0.5)
        raise BrokerError(f"the broker (pid {st.pid}) runs but does not answer at {settings.bootstrap_servers}")
    return start(settings, timeout_s)


class BrokerService(LocalService):
    """The broker as a local part (:class:`~kappa.core.service.LocalService`)."""

    name, title, start_timeout_s = "kafka", "broker", 90.0
    help = "The local single-node KRaft Kafka broker."
    start, stop, status = staticmethod(start), staticmethod(stop), staticmethod(status)
    ensure_running = staticmethod(ensure_running)


SERVICE = BrokerService()
