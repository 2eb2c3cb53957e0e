"""A real single-node Apache Kafka broker in KRaft mode (broker and controller in one process),
run from the Maven-resolved jars in ``build/jars/kafka``.

State lives under ``<KAPPA_HOME>/kafka``: ``server.properties``, the KRaft log dirs (``data/``), the
broker's log (``broker.log``) and ``broker.pid``. See Kafka's "KRaft" operations docs for the
settings written here.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from kappa.config import Settings
from kappa.errors import KappaError
from kappa.jvm import jar_dir, java_executable


class BrokerError(KappaError, RuntimeError):
    """The local broker cannot be started, stopped or reached; the message says why and what to do."""


@dataclass
class BrokerStatus:
    up: bool
    bootstrap_servers: str
    pid: int | None
    state_dir: str
    log_file: str
    port: int
    controller_port: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still answers kill(0); read its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def running_pid(settings: Settings) -> int | None:
    """The pid of this state dir's broker if its process is alive, else None (stale pid files are
    removed)."""
    pid_file = _paths(settings)["pid"]
    if not pid_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().strip())
    except ValueError:
        pid_file.unlink(missing_ok=True)
        return None
    if _pid_alive(pid):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _server_properties(settings: Settings, data_dir: Path) -> str:
    p, c = settings.kafka_port, settings.kafka_controller_port
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{c}",
        "listeners": f"PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{c}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{p}",
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
    return "".join(f"{k}={v}\n" for k, v in props.items())


_LOG4J = """\
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


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


def _log_tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return "(no broker log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


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
    for name, port in (("client", settings.kafka_port), ("controller", settings.kafka_controller_port)):
        if port_in_use(port):
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
    paths["log4j"].write_text(_LOG4J.format(log=paths["log"]))
    jvm_opts = [f"-Dlog4j2.configurationFile={paths['log4j']}", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC"]

    if not (paths["data"] / "meta.properties").exists():
        fmt = subprocess.run(
            [java, *jvm_opts, "-cp", classpath, "kafka.tools.StorageTool", "format",
             "-t", _kafka_uuid(), "-c", str(paths["config"]), "--ignore-formatted"],
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            raise BrokerError(f"formatting the KRaft log dir failed:\n{fmt.stdout}{fmt.stderr}")

    with open(paths["log"], "ab") as log:
        proc = subprocess.Popen(
            [java, *jvm_opts, "-cp", classpath, "kafka.Kafka", str(paths["config"])],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the calling shell must not kill the broker
        )
    paths["pid"].write_text(str(proc.pid))

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            paths["pid"].unlink(missing_ok=True)
            raise BrokerError(
                f"the broker exited with code {proc.returncode} while starting; last lines of "
                f"{paths['log']}:\n{_log_tail(paths['log'])}"
            )
        if _reachable(settings, timeout_s=1.0):
            return status(settings)
        time.sleep(0.5)
    _terminate(proc.pid, grace_s=5)
    paths["pid"].unlink(missing_ok=True)
    raise BrokerError(
        f"the broker did not become ready within {timeout_s:.0f} s; last lines of {paths['log']}:\n"
        f"{_log_tail(paths['log'])}"
    )


def _terminate(pid: int, grace_s: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(settings: Settings, grace_s: float = 30.0) -> int:
    """Stop the broker cleanly (SIGTERM, then SIGKILL after ``grace_s`` seconds); returns its pid.
    Raises :class:`BrokerError` when it is not running."""
    pid = running_pid(settings)
    if pid is None:
        raise BrokerError(f"the local broker is not running (state dir {settings.broker_dir})")
    _terminate(pid, grace_s)
    _paths(settings)["pid"].unlink(missing_ok=True)
    return pid


def kill(settings: Settings) -> int:
    """SIGKILL the broker (fault injection: no clean shutdown). Raises :class:`BrokerError` when it
    is not running."""
    pid = running_pid(settings)
    if pid is None:
        raise BrokerError("the local broker is not running")
    os.kill(pid, signal.SIGKILL)
    while _pid_alive(pid):
        time.sleep(0.05)
    _paths(settings)["pid"].unlink(missing_ok=True)
    return pid


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
