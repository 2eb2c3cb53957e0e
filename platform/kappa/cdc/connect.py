"""A Kafka Connect worker in distributed mode with the Debezium PostgreSQL connector, run from the
Maven-resolved jars in ``build/jars/connect`` (``jvm/connect/pom.xml``).

Distributed mode keeps the worker's state in three compacted topics of the broker (connector
configs, source offsets, statuses), the mode Strimzi's ``KafkaConnect`` runs; one worker here. The
connectors are declared in ``assets/connectors.yaml`` (:mod:`kappa.cdc.connectors`) and registered through Connect's REST API
(``PUT /connectors/<name>/config``, idempotent). See Kafka's "Kafka Connect" docs (running in
distributed mode, REST API) and Debezium's PostgreSQL connector docs for every setting written here.

State lives under ``<KAPPA_HOME>/connect``: ``worker.properties``, ``log4j2.properties``,
``connect.pid`` and the worker's log ``connect.log``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kappa.core import processes
from kappa.cdc import CdcError
from kappa.cdc.connectors import ConnectorSpec, load_connectors
from kappa.config import Settings
from kappa.core.jvm import JIT_OPTIONS, jar_dir, java_executable, log4j2_file_config, properties_text
from kappa.core.service import LocalService, ServiceStatus

if TYPE_CHECKING:
    from kappa.spec import TopicSpec

#: The worker's group and internal topics (compacted, created by the worker itself).
GROUP_ID = "kappa-connect"
CONFIG_TOPIC = "kappa-connect-configs"
OFFSET_TOPIC = "kappa-connect-offsets"
STATUS_TOPIC = "kappa-connect-status"


@dataclass
class ConnectStatus(ServiceStatus):
    """The Connect worker as ``kappa connect status`` reports it: ``up`` (the REST API answers), ``url``,
    ``pid``, state folder and log, and each declared connector's and task's state."""
    up: bool
    url: str
    pid: int | None
    state_dir: str
    log_file: str
    #: per connector: {"state": RUNNING|PAUSED|FAILED|UNASSIGNED|not registered, "tasks": [{"id", "state", "trace"}]}
    connectors: dict[str, dict] = field(default_factory=dict)
    #: per connector, its replication slot whether the worker runs or not (a stopped connector's slot
    #: keeps WAL too): {"slot", "active", "confirmed_flush_lsn", "wal_lsn", "lag_bytes", "error"}, the
    #: fields of :class:`kappa.cdc.postgres.SlotPosition` (null when the slot does not exist yet or
    #: PostgreSQL does not answer; ``error`` says which).
    slots: dict[str, dict] = field(default_factory=dict)

    def summary(self) -> list[str]:
        """Where the worker listens, each declared connector's and task's state, then where each
        connector's replication slot stands (plain text)."""
        lines = [f"at {self.url} (pid {self.pid or '-'}, state {self.state_dir}); log: {self.log_file}"]
        for name, c in self.connectors.items():
            tasks = ", ".join(f"task {t['id']} {t['state']}" for t in c["tasks"]) or "no tasks"
            lines.append(f"  connector {name}: {c['state']} ({tasks})")
            for t in c["tasks"]:
                if t["trace"]:
                    lines.append(f"    task {t['id']}: {t['trace'].splitlines()[0]}")
        for name, s in self.slots.items():
            if s["error"]:
                lines.append(f"  slot {s['slot']} ({name}): {s['error']}")
                continue
            behind = "nothing confirmed yet" if s["lag_bytes"] is None else f"{s['lag_bytes']:,} bytes behind"
            idle = "" if s["active"] else " (no connector streaming from it: PostgreSQL keeps its WAL)"
            lines.append(f"  slot {s['slot']} ({name}): confirmed {s['confirmed_flush_lsn']}, WAL at {s['wal_lsn']}: "
                         f"{behind}{idle}")
        return lines


def _paths(settings: Settings) -> dict[str, Path]:
    d = settings.connect_dir
    return {"dir": d, "config": d / "worker.properties", "pid": d / "connect.pid", "log": d / "connect.log",
            "log4j": d / "log4j2.properties"}


def url(settings: Settings) -> str:
    """The local worker's REST API: ``http://127.0.0.1:<KAPPA_CONNECT_PORT>``."""
    return f"http://127.0.0.1:{settings.connect_port}"


def _worker_properties(settings: Settings) -> str:
    props = {
        "bootstrap.servers": settings.bootstrap_servers,
        "group.id": GROUP_ID,
        "config.storage.topic": CONFIG_TOPIC,
        "offset.storage.topic": OFFSET_TOPIC,
        "status.storage.topic": STATUS_TOPIC,
        # One broker: one replica of each internal topic; one partition is plenty for a few connectors.
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "listeners": f"http://127.0.0.1:{settings.connect_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(settings.connect_port),
        # Commit source offsets (the LSN Debezium confirms to PostgreSQL) every second, not every
        # minute: after a crash the connector re-sends at most ~1 s of changes (consumers are idempotent).
        "offset.flush.interval.ms": "1000",
        "topic.creation.enable": "true",
        # Plugins come from ServiceLoader manifests (every jar here has them): no reflective classpath
        # scan, which costs ~20 s at start.
        "plugin.discovery": "service_load",
    }
    return properties_text(props)


#: The Debezium plugin scan's reflections library is noisy below ERROR.
_LOG_LEVELS = {"org.reflections": "ERROR"}


def running_pid(settings: Settings) -> int | None:
    """The worker's pid if its process is alive, else None (a stale pid file is removed)."""
    return processes.running_pid(_paths(settings)["pid"])


def _request(settings: Settings, method: str, path: str, body: dict | None = None, timeout_s: float = 10.0):
    """One REST call; returns (status, parsed JSON or None). Raises OSError when nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url(settings) + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw) if raw else None
        except ValueError:
            return err.code, {"message": raw.decode(errors="replace")}


def _reachable(settings: Settings) -> bool:
    try:
        code, _ = _request(settings, "GET", "/connectors", timeout_s=2.0)
        return code == 200
    except OSError:
        return False


def connector_status(settings: Settings, name: str) -> dict:
    """``{"state": …, "tasks": [{"id", "state", "trace"}]}`` of one connector, state ``not
    registered`` when the worker does not know it."""
    code, body = _request(settings, "GET", f"/connectors/{name}/status")
    if code == 404:
        return {"state": "not registered", "tasks": []}
    if code != 200:
        return {"state": f"unknown (HTTP {code})", "tasks": []}
    return {"state": body["connector"]["state"],
            "tasks": [{"id": t["id"], "state": t["state"], "trace": (t.get("trace") or "")[:2000]} for t in body["tasks"]]}


def slot_status(settings: Settings, connectors: dict[str, ConnectorSpec]) -> dict[str, dict]:
    """Per connector, where its replication slot stands (:func:`kappa.cdc.postgres.replication_slots`)
    as the ``slots`` entry of :class:`ConnectStatus`; never raises."""
    from kappa.cdc import postgres

    empty = {"active": None, "confirmed_flush_lsn": None, "wal_lsn": None, "lag_bytes": None}
    try:
        found = postgres.replication_slots(settings, [spec.slot for spec in connectors.values()]) if connectors else {}
    except CdcError as exc:
        return {name: {"slot": spec.slot, **empty, "error": str(exc)} for name, spec in connectors.items()}
    out = {}
    for name, spec in connectors.items():
        pos = found[spec.slot]
        out[name] = ({**asdict(pos), "error": None} if pos else
                     {"slot": spec.slot, **empty, "error": "no such replication slot (the connector creates it on its first start)"})
    return out


def status(settings: Settings) -> ConnectStatus:
    """Whether the worker answers, the state of every declared connector and its tasks, and where
    each connector's replication slot stands in PostgreSQL's WAL."""
    paths = _paths(settings)
    pid = running_pid(settings)
    up = pid is not None and _reachable(settings)
    declared = load_connectors(settings.assets_dir)
    connectors = {}
    if up:
        for name in declared:
            connectors[name] = connector_status(settings, name)
    return ConnectStatus(up=up, url=url(settings), pid=pid, state_dir=str(paths["dir"]), log_file=str(paths["log"]),
                         connectors=connectors, slots=slot_status(settings, declared))


def start(settings: Settings, timeout_s: float = 120.0, register_connectors: bool = True) -> ConnectStatus:
    """Start the worker, wait until its REST API answers, create the changelog topics and register
    every declared connector. Raises :class:`CdcError` if it already runs, the port is taken, the
    broker is down, the jars are missing, or the worker is not ready within ``timeout_s`` seconds."""
    from kappa.kafka.broker import _reachable as broker_reachable
    paths = _paths(settings)
    pid = running_pid(settings)
    if pid is not None:
        raise CdcError(f"the Connect worker is already running (pid {pid}) at {url(settings)}; "
                       "`kappa connect status` shows it, `kappa connect stop` stops it")
    if processes.port_in_use(settings.connect_port):
        raise CdcError(f"port {settings.connect_port} is already in use by another process; stop it or choose "
                       "another port with KAPPA_CONNECT_PORT")
    if not broker_reachable(settings, timeout_s=5.0):
        raise CdcError(f"the Kafka broker does not answer at {settings.bootstrap_servers}: `kappa kafka start` first")
    connectors = load_connectors(settings.assets_dir)
    try:
        java = java_executable()
        classpath = f"{jar_dir(settings, 'connect')}/*"
    except Exception as exc:
        raise CdcError(str(exc)) from None
    ensure_changelog_topics(settings, connectors)

    paths["dir"].mkdir(parents=True, exist_ok=True)
    paths["config"].write_text(_worker_properties(settings))
    paths["log4j"].write_text(log4j2_file_config(paths["log"], _LOG_LEVELS))
    jvm_opts = [f"-Dlog4j2.configurationFile={paths['log4j']}", "-Xms128m", "-Xmx768m", "-XX:+UseG1GC",
                *JIT_OPTIONS["c1"].split()]  # C1 only: kappa.core.jvm.JIT_OPTIONS
    deadline = time.monotonic() + timeout_s
    proc = processes.spawn([java, *jvm_opts, "-cp", classpath, "org.apache.kafka.connect.cli.ConnectDistributed",
                            str(paths["config"])], paths["log"], paths["pid"])
    processes.wait_ready(proc, lambda: _reachable(settings), what="the Connect worker", log=paths["log"],
                         timeout_s=timeout_s, error=CdcError, pid_file=paths["pid"])
    if register_connectors:
        for name, spec in connectors.items():
            register(settings, name, spec)
        wait_running(settings, list(connectors), timeout_s=max(10.0, deadline - time.monotonic()))
    return status(settings)


def heartbeat_topic_spec() -> TopicSpec:
    """The heartbeat topic: one partition, compacted (Debezium keys each record by the connector's
    ``topic.prefix``, ``{"serverName": "ops"}``, so the latest beat stays). Not a source topic, so
    not in topics.yaml: no asset reads it; its records carry the offsets that let Debezium confirm
    the slot's position."""
    from kappa.spec import TopicSpec

    return TopicSpec(partitions=1, compacted=True, description="Debezium heartbeats (the latest per connector).")


def ensure_changelog_topics(settings: Settings, connectors: dict[str, ConnectorSpec]) -> list[str]:
    """Create the connectors' changelog topics as ``assets/topics.yaml`` declares them (compacted)
    and their heartbeat topics (:func:`heartbeat_topic_spec`) before Debezium writes to them: the
    broker does not auto-create topics, and a record for a missing topic stops the connector's
    sending until it exists. Returns the names created. Raises :class:`CdcError` for a changelog
    topic not declared in topics.yaml."""
    from kappa.kafka.topics import ensure_topics
    from kappa.delta.declarations import catalog as catalog_of

    declared = catalog_of(settings).topics
    wanted = {}
    for name, spec in connectors.items():
        for topic in spec.topics:
            if topic not in declared:
                raise CdcError(f"{settings.assets_dir / 'connectors.yaml'}: connectors.{name}: changelog topic "
                               f"{topic!r} is not declared in {settings.assets_dir / 'topics.yaml'}")
            wanted[topic] = declared[topic]
        if spec.heartbeat_topic:
            wanted[spec.heartbeat_topic] = heartbeat_topic_spec()
    return ensure_topics(settings, wanted)


def register(settings: Settings, name: str, spec: ConnectorSpec) -> None:
    """Create or update connector ``name`` (``PUT /connectors/<name>/config``). Raises
    :class:`CdcError` with Connect's message when it refuses the configuration."""
    code, body = _request(settings, "PUT", f"/connectors/{name}/config", spec.connector_config(settings), timeout_s=60)
    if code not in (200, 201):
        raise CdcError(f"Connect refused connector {name!r} (HTTP {code}): {(body or {}).get('message', body)}")


def wait_running(settings: Settings, names: list[str], timeout_s: float = 60.0) -> None:
    """Wait until every connector in ``names`` and its tasks are RUNNING. Raises :class:`CdcError`
    with the task's stack trace when one FAILED, or when the time is up."""
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            st = connector_status(settings, name)
            tasks = st["tasks"]
            failed = [t for t in tasks if t["state"] == "FAILED"]
            if st["state"] == "FAILED" or failed:
                trace = failed[0]["trace"] if failed else ""
                raise CdcError(f"connector {name!r} FAILED: {trace.splitlines()[0] if trace else st}")
            if st["state"] == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks):
                break
            if time.monotonic() > deadline:
                raise CdcError(f"connector {name!r} is not RUNNING after {timeout_s:.0f} s: {st}")
            time.sleep(0.5)


def stop(settings: Settings, grace_s: float = 30.0) -> int:
    """Stop the worker cleanly (SIGTERM: it commits its offsets and leaves the group; SIGKILL after
    ``grace_s`` seconds); returns its pid. Raises :class:`CdcError` when it is not running."""
    return processes.stop_from_pid_file(
        _paths(settings)["pid"], CdcError(f"the Connect worker is not running (state dir {settings.connect_dir})"),
        grace_s=grace_s)


def kill(settings: Settings) -> int:
    """SIGKILL the worker (fault injection). Raises :class:`CdcError` when it is not running."""
    return processes.stop_from_pid_file(_paths(settings)["pid"], CdcError("the Connect worker is not running"),
                                        sigkill=True)


def ensure_running(settings: Settings, timeout_s: float = 120.0) -> ConnectStatus:
    """Start the worker unless it already answers; (re-)register the declared connectors either way."""
    st = status(settings)
    if not st.up:
        return start(settings, timeout_s)
    connectors = load_connectors(settings.assets_dir)
    ensure_changelog_topics(settings, connectors)
    for name, spec in connectors.items():
        register(settings, name, spec)
    wait_running(settings, list(connectors), timeout_s=timeout_s)
    return status(settings)


def wait_snapshot(settings: Settings, timeout_s: float = 300.0) -> dict[str, int]:
    """Wait until every captured table's changelog holds at least as many records as the table has
    rows (the connector's initial snapshot writes one per row), so an available-now run that starts
    next sees every row. Returns topic -> end offset. Raises :class:`CdcError` on timeout."""
    from kappa.cdc import postgres
    from kappa.kafka.topics import offsets

    deadline = time.monotonic() + timeout_s
    for spec in load_connectors(settings.assets_dir).values():
        for table in spec.tables:
            topic = spec.topic(table)
            with postgres.connect(settings) as conn:
                rows = conn.execute(f'SELECT count(*) FROM "{spec.schema_}"."{table}"').fetchone()[0]
            while True:
                end = sum(p.end for p in offsets(settings, [topic]))
                if end >= rows:
                    break
                if time.monotonic() > deadline:
                    raise CdcError(f"{topic} holds {end:,} records after {timeout_s:.0f} s, fewer than the {rows:,} "
                                   f"rows of {table}: is the connector running? (`kappa connect status`)")
                time.sleep(0.5)
    return {t: sum(p.end for p in offsets(settings, [t])) for s in load_connectors(settings.assets_dir).values()
            for t in s.topics}


class ConnectService(LocalService):
    """The Connect worker as a local part (:class:`~kappa.core.service.LocalService`)."""

    name, title, start_timeout_s = "connect", "Connect worker", 120.0
    help = ("The local Kafka Connect worker (distributed mode) with Debezium: `start` also creates the changelog "
            "topics and registers the connectors declared in assets/connectors.yaml.")
    start, stop, status = staticmethod(start), staticmethod(stop), staticmethod(status)
    ensure_running = staticmethod(ensure_running)


SERVICE = ConnectService()
