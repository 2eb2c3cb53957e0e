"""A kubelet stand-in for tests: runs one pod's command as a local process and reports the pod's
phase through the API, as the kubelet of its node would.

WHAT IT STANDS IN FOR. On a real cluster the kubelet of the pod's node pulls the Kappa image,
starts the container (Spark's image entrypoint runs the driver: ``spark-submit ... local:///opt/
kappa/bin/entrypoint.py ARGS``, whose two-line shim runs ``python -m kappa.runners.entrypoint
ARGS``) and reports the container's state in the pod's status. Here there is no container runtime:
kwok reports the pod Running without running anything. This stand-in takes the pod over from kwok
(kwok sets a pod Running once, when it has no IP yet; it does not touch the status again), runs the same
``python -m kappa.runners.entrypoint ARGS`` on this machine with the container's plain ``env``
(Secret references cannot be resolved here: the test passes their local equivalents), and writes
``Running``, then ``Succeeded``/``Failed`` with the container's exit code, as the kubelet would.

What it does NOT prove: the image itself (its files, user 185, read-only paths), the Secrets'
contents reaching the pod, networking to Kafka's TLS listener and the object store.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

ENTRYPOINT_FILE = "local:///opt/kappa/bin/entrypoint.py"


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
    this interpreter as the image's shim does."""
    (ctr,) = [c for c in pod.spec.containers if c.name == "spark-kubernetes-driver"]
    args = list(ctr.args or [])
    if ENTRYPOINT_FILE not in args:
        raise AssertionError(f"{pod.metadata.name}: no {ENTRYPOINT_FILE} in the driver's args {args}")
    app_args = args[args.index(ENTRYPOINT_FILE) + 1:]
    env = {e.name: e.value for e in (ctr.env or []) if e.value is not None}
    return [sys.executable, "-m", "kappa.runners.entrypoint", *app_args], env


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
        started = self._now().isoformat()
        self._report(pod, "Running", {"running": {"startedAt": started}})
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.run(command, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=self.cwd, timeout=timeout_s)
        output = log.read_text(errors="replace")
        terminated = {"exitCode": proc.returncode, "reason": "Completed" if proc.returncode == 0 else "Error",
                      "message": output[-1000:], "startedAt": started, "finishedAt": self._now().isoformat()}
        self._report(pod, "Succeeded" if proc.returncode == 0 else "Failed", {"terminated": terminated})
        return PodRun(pod=name, namespace=namespace, command=command, exit_code=proc.returncode, output=output, env=env)
