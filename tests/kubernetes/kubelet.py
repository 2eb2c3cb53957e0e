"""A kubelet stand-in for tests: runs one pod's command as a local process and reports the pod's
phase through the API, as the kubelet of its node would.

WHAT IT STANDS IN FOR. On a real cluster the kubelet of the pod's node pulls the Kappa image,
starts the container (the image's entrypoint, tools/image/entrypoint.sh, runs the driver:
``spark-submit ... local:///opt/kappa/bin/entrypoint.py ARGS``, whose two-line shim runs
``python -m kappa.runners.entrypoint ARGS``) and reports the container's state in the pod's status. Here there is no container runtime:
kwok reports the pod Running without running anything. This stand-in takes the pod over from kwok
(kwok sets a pod Running once, when it has no IP yet; it does not touch the status again), runs the same
``python -m kappa.runners.entrypoint ARGS`` on this machine with the container's plain ``env``
(Secret references cannot be resolved here: the test passes their local equivalents), and writes
``Running``, then ``Succeeded``/``Failed`` with the container's exit code, as the kubelet would.

The container's filesystem, as far as it can be stood in for: a driver container with
``readOnlyRootFilesystem`` runs (:func:`contained`) in a private mount namespace whose root is
this machine's, read-only, with a fresh tmpfs of the emptyDir's ``sizeLimit`` at ``/tmp`` and the
local equivalent of the image's work directory (``KAPPA_HOME``) writable: a process that writes
anywhere else fails here as it would in the pod.

What it does NOT prove: the image itself (its files, user 185), the Secrets' contents reaching the
pod, networking to Kafka's TLS listener and the object store.

Two ways to use it: :meth:`KubeletStandIn.run` runs one named pod's command to its end (a driver
that fails); :class:`KubeletWatcher` is the node's kubelet for a whole test: a background thread that
starts the command of every driver pod kwok reports Running on its node (long-running streaming
queries and batch gate jobs alike), reports each exit, and stops (SIGTERM to the process group, as
the kubelet's container stop does) the process of every pod that is deleted, e.g. by the garbage
collector after its SparkApplication was deleted.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from kubernetes.utils import parse_quantity

from kappa.runners.kubernetes.application import ENTRYPOINT_FILE, KAPPA_CLI_FILE

from ..kappa_cli import clean_env

#: The image's two shims (see the Dockerfile; their names are the runner's) and the module each runs.
ENTRY_POINTS = {
    ENTRYPOINT_FILE: ["-m", "kappa.runners.entrypoint"],
    KAPPA_CLI_FILE: ["-m", "kappa.cli"],
}


@dataclass
class PodRun:
    pod: str
    namespace: str
    command: list[str]
    exit_code: int | None = None
    output: str = ""
    env: dict[str, str] = field(default_factory=dict)


def local_command(pod: client.V1Pod) -> tuple[list[str], dict[str, str]]:
    """The driver container's Kappa command and plain environment: the arguments after the
    application file in the container's args (Spark's ``driver`` entrypoint arguments), run with
    this interpreter as the image's shim does (``entrypoint.py`` -> ``python -m
    kappa.runners.entrypoint``, ``kappa.py`` -> ``python -m kappa.cli``)."""
    (ctr,) = [c for c in pod.spec.containers if c.name == "spark-kubernetes-driver"]
    args = list(ctr.args or [])
    files = [a for a in args if a in ENTRY_POINTS]
    if not files:
        raise AssertionError(f"{pod.metadata.name}: none of {sorted(ENTRY_POINTS)} in the driver's args {args}")
    app_args = args[args.index(files[0]) + 1:]
    env = {e.name: e.value for e in (ctr.env or []) if e.value is not None}
    return [sys.executable, *ENTRY_POINTS[files[0]], *app_args], env


#: The image's work directory and ``KAPPA_HOME`` (the Dockerfile's ``WORKDIR``); its local
#: equivalent is the stand-in's ``KAPPA_HOME``.
IMAGE_WORK_DIR = "/opt/kappa/work"

#: Runs "$@" in a chroot of a read-only view of this machine's root (the mounts are set up by the
#: lines passed before it; see :func:`contained`).
_CONTAIN = """set -e
root=$1; cwd=$2; shift 2
mount --rbind / "$root"
mount -o remount,bind,ro "$root"
{mounts}
exec chroot "$root" sh -c 'cd "$0" && exec "$@"' "$cwd" "$@"
"""


def contained(command: list[str], pod: client.V1Pod, env: dict[str, str], root: Path) -> tuple[list[str], Path | None]:
    """(command, working directory) running ``command`` as the driver container's filesystem would
    let it, when the container sets ``readOnlyRootFilesystem``: ``unshare --mount`` (a private mount
    namespace, as root) and ``chroot`` into ``root``, where this machine's root is bound read-only;
    the container's emptyDir at ``/tmp`` is a fresh tmpfs of its ``sizeLimit``; the one at the
    image's work directory is ``env["KAPPA_HOME"]``, writable and the working directory (as in the
    image); Spark's own local directories (``spark-local-dir-*``) are stood in for by ``/tmp``
    (``SPARK_LOCAL_DIRS`` is not passed on). Paths the process reads that lie under ``/tmp``
    (assets, project, interpreter) are bound read-only into the fresh ``/tmp``. Without
    ``readOnlyRootFilesystem`` the command is returned as it is. Raises ``AssertionError`` for an
    emptyDir this stand-in has no local equivalent for."""
    (ctr,) = [c for c in pod.spec.containers if c.name == "spark-kubernetes-driver"]
    if not (ctr.security_context and ctr.security_context.read_only_root_filesystem):
        return command, None
    volumes = {v.name: v for v in pod.spec.volumes or []}
    home = Path(env["KAPPA_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    lines, tmpfs = [], None
    for m in ctr.volume_mounts or []:
        vol = volumes[m.name]
        if vol.empty_dir is None or m.name.startswith("spark-local-dir-"):
            continue
        if m.mount_path == "/tmp":
            tmpfs = int(parse_quantity(vol.empty_dir.size_limit or "1Gi"))
            lines.append(f'mount -t tmpfs -o size={tmpfs},mode=1777 kappa-tmp "$root/tmp"')
        elif m.mount_path != IMAGE_WORK_DIR:
            raise AssertionError(f"{pod.metadata.name}: no local equivalent for the emptyDir at {m.mount_path}")
    if tmpfs is None:
        raise AssertionError(f"{pod.metadata.name}: a read-only root without an emptyDir at /tmp")
    reads = {Path(p) for p in (env.get("KAPPA_ASSETS_DIR"), env.get("KAPPA_PROJECT_DIR"), sys.prefix) if p}
    for path in sorted(p for p in reads if str(p).startswith("/tmp/")):
        q = shlex.quote(str(path))
        lines += [f'mkdir -p "$root"{q}', f'mount --bind {q} "$root"{q}', f'mount -o remount,bind,ro "$root"{q}']
    q = shlex.quote(str(home))
    lines += [f'mkdir -p "$root"{q}', f'mount --bind {q} "$root"{q}']
    root.mkdir(parents=True, exist_ok=True)
    script = _CONTAIN.format(mounts="\n".join(lines))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "contain",
            str(root), str(home), *command], home


class KubeletStandIn:
    """``run(pod_name, namespace, env_overrides, timeout_s)``: run the pod's command to its end and
    report it (see the module docstring for what this stands in for)."""

    def __init__(self, api_client, workdir: Path, cwd: Path):
        """``workdir``: where the process's output is kept; ``cwd``: its working directory, the
        repository standing in for the image's ``/opt/kappa`` (assets/, the package)."""
        self.core = client.CoreV1Api(api_client)
        self.workdir, self.cwd = workdir, cwd

    def _now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc)

    def _report(self, pod: client.V1Pod, phase: str, state: dict) -> None:
        name, ns = pod.metadata.name, pod.metadata.namespace
        status = {
            "phase": phase,
            "containerStatuses": [{
                "name": "spark-kubernetes-driver", "image": pod.spec.containers[0].image, "imageID": "",
                "ready": phase == "Running", "restartCount": 0, "started": phase == "Running", "state": state,
            }],
        }
        self.core.patch_namespaced_pod_status(name, ns, {"status": status})

    def run(self, name: str, namespace: str, env_overrides: dict[str, str] | None = None,
            timeout_s: float = 600.0) -> PodRun:
        pod = self.core.read_namespaced_pod(name, namespace)
        command, env = local_command(pod)
        env.update(env_overrides or {})
        command, cwd = contained(command, pod, {**os.environ, **env}, self.workdir / f"{name}.root")
        started = self._now().isoformat()
        self._report(pod, "Running", {"running": {"startedAt": started}})
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.run(command, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=cwd or self.cwd, timeout=timeout_s)
        output = log.read_text(errors="replace")
        terminated = {"exitCode": proc.returncode, "reason": "Completed" if proc.returncode == 0 else "Error",
                      "message": output[-1000:], "startedAt": started, "finishedAt": self._now().isoformat()}
        self._report(pod, "Succeeded" if proc.returncode == 0 else "Failed", {"terminated": terminated})
        return PodRun(pod=name, namespace=namespace, command=command, exit_code=proc.returncode, output=output, env=env)


class KubeletWatcher:
    """The kubelet of kwok's node for one test (see the module docstring): a thread polling the
    namespace's pods every ``every_s`` seconds.

    * a ``*-driver`` pod bound to a node that kwok reports Running, not yet started and not in
      ``skip``: its command (:func:`local_command`) starts as a local process in a new session, with
      the container's plain environment minus Spark's container-filesystem settings (``SPARK_*``:
      local dirs and conf dir inside the image) over ``base_env`` (what the image's own environment
      gives: project and assets folders, a home), and without the test process's ``KAPPA_*`` but
      for the driver JIT every test process uses (:func:`tests.kappa_cli.clean_env`);
    * a started process that exited: the pod is reported ``Succeeded``/``Failed`` with its exit code,
      as :meth:`KubeletStandIn.run` does; the operator turns that into COMPLETED/FAILED;
    * a started pod that is gone or being deleted: its process group gets SIGTERM (the container
      stop), then SIGKILL after ``grace_s``.

    ``started``: pod name -> its process (the record of what ran; a pod created again under the same
    name, e.g. by a rollback, runs anew and the earlier process moves to ``earlier``); ``stopped``:
    pods whose process was stopped because the pod went away. Use as a context manager: leaving
    stops every process."""

    def __init__(self, api_client, namespace: str, workdir: Path, cwd: Path, base_env: dict[str, str],
                 *, skip: set[str] = frozenset(), every_s: float = 0.5, grace_s: float = 60.0):
        self.stand_in = KubeletStandIn(api_client, workdir, cwd)
        self.core, self.namespace, self.base_env = self.stand_in.core, namespace, dict(base_env)
        self.skip, self.every_s, self.grace_s = set(skip), every_s, grace_s
        self.started: dict[str, subprocess.Popen] = {}
        self.stopped: list[str] = []
        #: pod name -> whether its process ran under the container's read-only root (:func:`contained`)
        self.contained: dict[str, bool] = {}
        self.errors: list[str] = []
        self._reported: set[str] = set()
        #: pod name -> the uid of the pod its process in ``started`` runs
        self._uids: dict[str, str] = {}
        #: (pod name, process) of earlier pods of a name whose pod was created again
        self.earlier: list[tuple[str, subprocess.Popen]] = []
        self._started_at: dict[str, str] = {}
        self._pods: dict[str, client.V1Pod] = {}
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-stand-in", daemon=True)

    def __enter__(self) -> "KubeletWatcher":
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._halt.set()
        self._thread.join(timeout=30)
        for name in list(self.started):
            self._stop(name)

    def log_tail(self, pod: str, lines: int = 40) -> str:
        path = self.stand_in.workdir / f"{pod}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _loop(self) -> None:
        while not self._halt.is_set():
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - kept and shown by the test, never swallowed silently
                self.errors.append(repr(exc))
            self._halt.wait(self.every_s)

    def _tick(self) -> None:
        pods = {p.metadata.name: p for p in self.core.list_namespaced_pod(self.namespace).items}
        for name, pod in pods.items():
            # a pod of a name whose earlier pod went away (an application created again) is new
            fresh = self._uids.get(name) != pod.metadata.uid
            if (name.endswith("-driver") and fresh and name not in self.skip
                    and pod.spec.node_name and pod.status.phase == "Running"
                    and pod.metadata.deletion_timestamp is None):
                self._start(pod)
        for name, proc in list(self.started.items()):
            pod = pods.get(name)
            if pod is not None and pod.metadata.uid != self._uids.get(name):
                pod = None  # a new pod of the same name: the one this process ran is gone
            if pod is None or pod.metadata.deletion_timestamp is not None:
                if proc.poll() is None:
                    self._stop(name)
                    self.stopped.append(name)
            elif proc.poll() is not None and name not in self._reported:
                self._reported.add(name)
                code = proc.returncode
                terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                              "message": self.log_tail(name, 20)[-1000:], "startedAt": self._started_at[name],
                              "finishedAt": self.stand_in._now().isoformat()}
                self.stand_in._report(pod, "Succeeded" if code == 0 else "Failed", {"terminated": terminated})

    def _start(self, pod: client.V1Pod) -> None:
        name = pod.metadata.name
        if name in self.started:  # its earlier pod's run: stopped if need be, kept in the record
            if self.started[name].poll() is None:
                self._stop(name)
                self.stopped.append(name)
            self.earlier.append((name, self.started.pop(name)))
            self._reported.discard(name)
        self._uids[name] = pod.metadata.uid
        command, pod_env = local_command(pod)
        env = clean_env()
        env.update({k: v for k, v in pod_env.items() if not k.startswith("SPARK_")})
        env.update(self.base_env)
        self.stand_in.workdir.mkdir(parents=True, exist_ok=True)
        runs = sum(1 for n, _ in self.earlier if n == name)
        command, cwd = contained(command, pod, env, self.stand_in.workdir / f"{name}.{runs}.root")
        self.contained[name] = cwd is not None
        with open(self.stand_in.workdir / f"{name}.log", "wb") as out:
            self.started[name] = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, cwd=cwd or self.stand_in.cwd,
                                                  start_new_session=True)
        self._started_at[name] = self.stand_in._now().isoformat()
        self.stand_in._report(pod, "Running", {"running": {"startedAt": self._started_at[name]}})

    def _stop(self, name: str) -> None:
        proc = self.started[name]
        if proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
