"""A Spark standalone cluster on this machine: one master and N workers, started from the pyspark
package, so that a pipeline's executors run in other JVMs than its driver, as they do on a cluster of
machines (Spark's "Spark Standalone Mode").

``kappa spark start`` runs, from ``<pyspark>/jars`` (the Spark that the driver uses):

* ``org.apache.spark.deploy.master.Master`` on ``127.0.0.1:<KAPPA_SPARK_CLUSTER_PORT>`` (web UI and
  its JSON state on ``<KAPPA_SPARK_CLUSTER_WEBUI_PORT>``);
* ``KAPPA_SPARK_WORKERS`` × ``org.apache.spark.deploy.worker.Worker``, each offering
  ``KAPPA_SPARK_WORKER_CORES`` cores and ``KAPPA_SPARK_WORKER_MEMORY`` to the master, with its own
  work folder (where its executors' ``stdout``/``stderr`` go) and free RPC and web UI ports;

waits until the master reports every worker ``ALIVE``, and prints the variable that points Kappa at
it: ``KAPPA_SPARK_MASTER=spark://127.0.0.1:<port>`` (in the status's ``env``). A query then runs its
driver in the ``kappa`` process and its tasks in one executor per worker; Kafka partitions are read
by tasks on both workers, and when a worker (with its executor) dies, Spark runs its tasks again on
the others (Spark's "Job Scheduling": task retries, ``spark.task.maxFailures``). Checkpoints and
tables belong on storage every executor reaches: the object store (``kappa objectstore``), or a
shared folder.

Executors load Kappa's jars (Kafka source, Delta, S3A, the log store) from the same paths as the
driver (``spark.executor.extraClassPath``, :func:`kappa.streaming.session.spark_conf`): the workers
started here share this machine's ``build/jars``; workers on other machines need that folder at the
same path (Spark's "Advanced Dependency Management": jars pre-installed on every node) — Spark
would otherwise copy every jar, the 640 MB AWS SDK bundle included, to every executor.

State lives under ``<KAPPA_HOME>/spark``: ``cluster.json`` (ports and pids), ``master.log``,
``worker-<n>.log`` and ``work/worker-<n>/``. Each process runs in its own session, so a worker and
the executors it started can be killed together (``os.killpg``), as a lost machine would be.

Sources: Spark's "Spark Standalone Mode" (``Master``/``Worker`` options, ``SPARK_WORKER_DIR``) and its
``JsonProtocol`` (``/json/`` of the master and worker web UIs: workers with ``id``, ``state``,
``webuiaddress``; a worker's ``executors`` with ``appid`` and ``id``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kappa.config import Settings
from kappa.core import processes
from kappa.core.jvm import java_executable
from kappa.core.service import LocalService, ServiceStatus
from kappa.errors import KappaError
from kappa.services.cluster import spark_home  # the pyspark package: its jars/ run the daemons and executors

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Heap of the master and worker daemons themselves (Spark's SPARK_DAEMON_MEMORY default: 1g); an
#: executor's heap is the application's ``spark.executor.memory``.
DAEMON_HEAP = "256m"


class SparkClusterError(KappaError, RuntimeError):
    """The standalone cluster cannot be started, reached or stopped; the message says why."""


@dataclass
class SparkClusterStatus(ServiceStatus):
    """``up``: the master answers and reports every worker started here ``ALIVE``. ``master``: the URL
    drivers connect to; ``webui``: the master's web UI; ``workers``: as the master reports them (``id``,
    ``state``, ``cores``, ``memory`` in MiB, ``webuiaddress``), plus ``name`` and ``pid`` for the ones
    started here; ``pids``: process name -> pid (None: not running); ``env``: the variables that point
    Kappa at it."""

    up: bool
    master: str
    webui: str
    state_dir: str
    workers: list[dict] = field(default_factory=list)
    pids: dict[str, int | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def summary(self) -> list[str]:
        """The master's URL, the variable to export, and each worker (plain text)."""
        lines = [f"at {self.master} (web UI {self.webui})",
                 *(f"export {k}={v}" for k, v in self.env.items())]
        for w in self.workers:
            lines.append(f"  {w.get('name', w.get('id')):<10} {w.get('state', 'not running'):<6} "
                         f"{w.get('cores', '?')} cores, {w.get('memory', '?')} MiB, pid {w.get('pid') or '-'}")
        return lines


def state_dir(settings: Settings) -> Path:
    """``<KAPPA_HOME>/spark``: the cluster's state, logs and work folders."""
    assert settings.home is not None
    return settings.home / "spark"


def master_url(settings: Settings) -> str:
    """``spark://127.0.0.1:<KAPPA_SPARK_CLUSTER_PORT>``: what ``KAPPA_SPARK_MASTER`` is set to."""
    return f"spark://{HOST}:{settings.spark_cluster_port}"


def webui(settings: Settings) -> str:
    """The master's web UI (its JSON state at ``/json/``)."""
    return f"http://{HOST}:{settings.spark_cluster_webui_port}"


def _load_state(settings: Settings) -> dict:
    try:
        return json.loads((state_dir(settings) / "cluster.json").read_text())
    except (OSError, ValueError):
        return {}


def master_state(settings: Settings, timeout_s: float = 2.0) -> dict | None:
    """The master's JSON state (``/json/``: ``status``, ``workers``, ``activeapps`` …), None when it
    does not answer."""
    return _json(webui(settings) + "/json/", timeout_s)


def worker_state(worker: dict, timeout_s: float = 2.0) -> dict | None:
    """A worker's JSON state (its ``executors``: ``appid`` and executor ``id``), from the
    ``webuiaddress`` the master reports for it; None when it does not answer."""
    address = worker.get("webuiaddress")
    return _json(address.rstrip("/") + "/json/", timeout_s) if address else None


def _json(url: str, timeout_s: float) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def status(settings: Settings) -> SparkClusterStatus:
    """What runs now: the processes started here (from ``cluster.json``) and the master's view of its
    workers. Never raises for a cluster that is down."""
    state = _load_state(settings)
    pids = {name: (pid if processes.pid_alive(pid) else None) for name, pid in (state.get("pids") or {}).items()}
    ports = state.get("worker_ports") or {}
    master = master_state(settings) if pids.get("master") else None
    by_port = {int(w.get("port", 0)): w for w in (master or {}).get("workers", [])}
    workers = []
    for name, port in ports.items():
        seen = dict(by_port.get(int(port)) or {})
        workers.append({"name": name, "pid": pids.get(name), **seen})
    up = (master is not None and master.get("status") == "ALIVE" and bool(workers)
          and all(w.get("state") == "ALIVE" and w.get("pid") for w in workers))
    return SparkClusterStatus(up=up, master=master_url(settings), webui=webui(settings),
                              state_dir=str(state_dir(settings)), workers=workers, pids=pids,
                              env={"KAPPA_SPARK_MASTER": master_url(settings)})


def _env(settings: Settings) -> dict[str, str]:
    """The daemons' environment: Spark's home (the pyspark package: workers build their executors'
    command from it), Java's, loopback only, this interpreter for Python workers."""
    java = Path(os.path.realpath(java_executable()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    # SPARK_SCALA_VERSION: Spark's launcher (which a worker uses to build an executor's command)
    # asks for it when SPARK_HOME has no RELEASE file, as the pyspark package has not; bin/spark-class
    # would set it from load-spark-env.sh.
    env.update(SPARK_HOME=str(spark_home()), JAVA_HOME=str(java.parent.parent), SPARK_LOCAL_IP=HOST,
               SPARK_SCALA_VERSION=_scala_version(),
               SPARK_MASTER_HOST=HOST, PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable))
    return env


def _scala_version() -> str:
    """The Scala binary version of pyspark's jars (``2.13`` from ``spark-core_2.13-….jar``)."""
    for jar in (spark_home() / "jars").glob("spark-core_*.jar"):
        return jar.name.split("_", 1)[1].split("-", 1)[0]
    raise SparkClusterError(f"no spark-core jar in {spark_home() / 'jars'}: is pyspark installed?")


def _daemon(cls: str, *args: str) -> list[str]:
    classpath = f"{spark_home() / 'conf'}{os.pathsep}{spark_home() / 'jars' / '*'}"
    return [java_executable(), f"-Xmx{DAEMON_HEAP}", "-cp", classpath, cls, *args]


def start(settings: Settings, timeout_s: float = 90.0) -> SparkClusterStatus:
    """Start the master and ``KAPPA_SPARK_WORKERS`` workers in the background and wait until the
    master reports every worker ``ALIVE``.

    Raises :class:`SparkClusterError` when it already runs, a port is taken, or a process exits or
    is not ready within ``timeout_s`` seconds (with its log's tail); whatever it started is stopped
    again then."""
    d = state_dir(settings)
    if processes.pid_alive((_load_state(settings).get("pids") or {}).get("master")):
        raise SparkClusterError(f"the Spark cluster already runs at {master_url(settings)}; "
                                "`kappa spark stop` stops it")
    for port, var in ((settings.spark_cluster_port, "KAPPA_SPARK_CLUSTER_PORT"),
                      (settings.spark_cluster_webui_port, "KAPPA_SPARK_CLUSTER_WEBUI_PORT")):
        if processes.port_in_use(port, HOST):
            raise SparkClusterError(f"port {port} is already in use on {HOST}; choose another with {var}")
    d.mkdir(parents=True, exist_ok=True)
    env = _env(settings)
    pids: dict[str, int] = {}
    worker_ports: dict[str, int] = {}
    state = {"master": master_url(settings), "pids": pids, "worker_ports": worker_ports}

    def save() -> None:
        (d / "cluster.json").write_text(json.dumps(state, indent=2))

    try:
        log = d / "master.log"
        proc = processes.spawn(_daemon(MASTER_CLASS, "--host", HOST, "--port", str(settings.spark_cluster_port),
                                       "--webui-port", str(settings.spark_cluster_webui_port)), log, env=env)
        pids["master"] = proc.pid
        save()
        processes.wait_ready(proc, lambda: (master_state(settings, 1.0) or {}).get("status") == "ALIVE",
                             what="the Spark master", log=log, timeout_s=timeout_s, error=SparkClusterError)
        workers = []
        for n in range(1, settings.spark_workers + 1):
            name, port = f"worker-{n}", processes.free_port(HOST)
            work = d / "work" / name
            work.mkdir(parents=True, exist_ok=True)
            wproc = processes.spawn(_daemon(WORKER_CLASS, master_url(settings), "--host", HOST, "--port", str(port),
                                            "--webui-port", "0", "--cores", str(settings.spark_worker_cores),
                                            "--memory", settings.spark_worker_memory, "--work-dir", str(work)),
                                    d / f"{name}.log", env=env)
            pids[name], worker_ports[name] = wproc.pid, port
            workers.append((name, wproc))
            save()

        def all_alive() -> bool:
            seen = {int(w.get("port", 0)): w.get("state") for w in (master_state(settings, 1.0) or {}).get("workers", [])}
            return all(seen.get(p) == "ALIVE" for p in worker_ports.values())

        deadline = time.monotonic() + timeout_s
        while not all_alive():
            for name, wproc in workers:
                if wproc.poll() is not None:
                    raise SparkClusterError(f"Spark {name} exited with code {wproc.returncode} while starting; "
                                            f"last lines of {d / (name + '.log')}:\n{processes.log_tail(d / (name + '.log'))}")
            if time.monotonic() > deadline:
                raise SparkClusterError(f"the Spark workers did not register with the master within {timeout_s:.0f} s; "
                                        f"logs in {d}")
            time.sleep(0.3)
    except BaseException:
        stop(settings)
        raise
    return status(settings)


def stop(settings: Settings, grace_s: float = 15.0) -> dict[str, int]:
    """Stop the workers (each with the executors it started: its process group), then the master.
    Returns name -> pid of what it stopped; logs and work folders stay."""
    state = _load_state(settings)
    pids: dict[str, int] = state.get("pids") or {}
    stopped: dict[str, int] = {}
    for name in sorted(pids, key=lambda n: n == "master"):
        pid = pids[name]
        if processes.pid_alive(pid):
            processes.terminate(pid, grace_s, group=True)
            stopped[name] = pid
    if state:
        state["pids"] = {}
        (state_dir(settings) / "cluster.json").write_text(json.dumps(state, indent=2))
    return stopped


def kill_worker(settings: Settings, name: str) -> int:
    """SIGKILL worker ``name`` and the executors it started (its process group), as a lost machine:
    no clean shutdown, no goodbye to the master. Returns its pid. Raises :class:`SparkClusterError`
    when it is not running. Fault injection for tests and ``kappa chaos``-style trials."""
    pid = (_load_state(settings).get("pids") or {}).get(name)
    if not processes.pid_alive(pid):
        raise SparkClusterError(f"Spark {name} is not running (state in {state_dir(settings)})")
    os.killpg(pid, signal.SIGKILL)
    processes.kill(pid)  # waits until it is gone
    return pid


def ensure_running(settings: Settings, timeout_s: float = 90.0) -> SparkClusterStatus:
    """The running cluster of this state dir, started if it is not up (see :func:`start`)."""
    st = status(settings)
    if st.up:
        return st
    if any(st.pids.values()):
        stop(settings)
    return start(settings, timeout_s=timeout_s)


class SparkClusterService(LocalService):
    """The Spark standalone cluster as a local part (:class:`~kappa.core.service.LocalService`)."""

    name, title, start_timeout_s = "spark", "Spark standalone cluster", 90.0
    help = ("A Spark standalone cluster on this machine (a master and KAPPA_SPARK_WORKERS workers from the "
            "pyspark package): executors in other JVMs than the driver; its status's `env` sets "
            "KAPPA_SPARK_MASTER.")
    start, stop, status = staticmethod(start), staticmethod(stop), staticmethod(status)
    ensure_running = staticmethod(ensure_running)


SERVICE = SparkClusterService()
