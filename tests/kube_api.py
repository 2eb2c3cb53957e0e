"""THE KUBERNETES API STAND-IN. No API server (and no cluster) can run on the build machine, so the
tests of the kubernetes runner and of Dagster on it talk to this in-memory stand-in for
``kubernetes.client.CustomObjectsApi`` instead. It is used for that reason only; everything else in
those tests (the registry's Delta table, the Kafka broker, Dagster) is real.

It implements the three namespaced custom-object verbs the runner uses, as the API server does:

* ``create``: stores a deep copy keyed by (group, version, namespace, plural, name), sets
  ``metadata.uid``/``creationTimestamp``; ``409 AlreadyExists`` for a duplicate name; ``422`` if
  ``apiVersion``/``kind``/namespace do not match the request;
* ``get``: a deep copy, ``404 NotFound`` if missing;
* ``delete``: removes it, ``404 NotFound`` if missing.

The Spark operator is not simulated: a test sets ``status.applicationState`` itself
(:meth:`set_state`), or scripts the states the operator would report on successive reads
(:meth:`script`).
"""

from __future__ import annotations

import copy
import itertools
import json

from kubernetes.client.exceptions import ApiException

_uids = itertools.count(1)


def _error(status: int, reason: str, message: str) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "reason": reason, "message": message, "code": status})
    return exc


class KubeApi:
    def __init__(self):
        self.objects: dict[tuple, dict] = {}
        self.calls: list[tuple[str, str]] = []  # (verb, name)
        self._scripts: dict[str, list[str]] = {}

    # -- CustomObjectsApi ---------------------------------------------------------------------------
    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **_):
        name = body["metadata"]["name"]
        self.calls.append(("create", name))
        if body.get("apiVersion") != f"{group}/{version}" or body["metadata"].get("namespace", namespace) != namespace:
            raise _error(422, "Invalid", f"{name}: apiVersion/namespace do not match the request")
        key = (group, version, namespace, plural, name)
        if key in self.objects:
            raise _error(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists')
        obj = copy.deepcopy(body)
        obj["metadata"] = {**obj["metadata"], "namespace": namespace, "uid": f"uid-{next(_uids)}",
                           "creationTimestamp": "2026-01-01T00:00:00Z"}
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **_):
        self.calls.append(("get", name))
        key = (group, version, namespace, plural, name)
        if key not in self.objects:
            raise _error(404, "NotFound", f'{plural}.{group} "{name}" not found')
        if self._scripts.get(name):
            state, _, error = self._scripts[name].pop(0).partition(":")
            self._set(key, state, error)
        return copy.deepcopy(self.objects[key])

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **_):
        self.calls.append(("delete", name))
        key = (group, version, namespace, plural, name)
        if key not in self.objects:
            raise _error(404, "NotFound", f'{plural}.{group} "{name}" not found')
        del self.objects[key]
        return {"kind": "Status", "status": "Success"}

    # -- what the operator would do -----------------------------------------------------------------
    def _set(self, key: tuple, state: str, error: str = "") -> None:
        app_state = {"state": state}
        if error:
            app_state["errorMessage"] = error
        self.objects[key]["status"] = {"applicationState": app_state}

    def set_state(self, name: str, state: str, error: str = "") -> None:
        [key] = [k for k in self.objects if k[-1] == name]
        self._set(key, state, error)

    def script(self, name: str, *states: str) -> None:
        """The states successive ``get``s of ``name`` report (the last one stays);
        ``"FAILED:message"`` also sets the operator's ``errorMessage``."""
        self._scripts[name] = list(states)

    def names(self) -> set[str]:
        return {k[-1] for k in self.objects}

    def app(self, name: str) -> dict:
        [obj] = [v for k, v in self.objects.items() if k[-1] == name]
        return obj


class KubeletApi(KubeApi):
    """THE STAND-IN FOR THE SPARK OPERATOR AND THE KUBELET, on top of the API stand-in. No container
    runtime exists here, so when a SparkApplication is created this runs what its driver pod would
    run, as a local process: the image's entry point (``mainApplicationFile`` -> ``python -m
    kappa.runners.entrypoint`` or ``python -m kappa.cli``) with the application's ``arguments`` and
    its driver pod template's plain ``env`` values (``valueFrom`` Secrets cannot be resolved here; the tests
    use a PLAINTEXT broker and a local warehouse, so none is needed), over ``base_env`` (what the
    image's own environment provides: project and assets folders). It reports the states the
    operator would: RUNNING while the process lives, COMPLETED on exit 0, FAILED with the log's
    tail otherwise. Deleting the application SIGTERMs the process group (as the operator's pod
    deletion does) and waits for it. The processes are real Spark drivers (``local[*]``): only
    the operator's submission and the pods are stood in for."""

    ENTRY_POINTS = {
        "local:///opt/kappa/bin/entrypoint.py": ["-m", "kappa.runners.entrypoint"],
        "local:///opt/kappa/bin/kappa.py": ["-m", "kappa.cli"],
    }

    def __init__(self, base_env: dict[str, str], logs, adopt: set[str] = frozenset()):
        super().__init__()
        self.base_env, self.logs = dict(base_env), logs
        self.procs: dict[str, object] = {}
        #: Application names created before this stand-in ran anything: kept RUNNING, no process.
        self.adopt = set(adopt)

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kw):
        import os
        import subprocess
        import sys

        obj = super().create_namespaced_custom_object(group, version, namespace, plural, body, **kw)
        name = body["metadata"]["name"]
        key = (group, version, namespace, plural, name)
        if name in self.adopt:
            self._set(key, "RUNNING")
            return obj
        spec = body["spec"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
        env.update(self.base_env)
        (container,) = spec["driver"]["template"]["spec"]["containers"]  # what reaches the driver pod
        env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, *self.ENTRY_POINTS[spec["mainApplicationFile"]], *spec["arguments"]],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._set(key, "RUNNING")
        return obj

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **kw):
        proc = self.procs.get(name)
        key = (group, version, namespace, plural, name)
        if proc is not None and key in self.objects and proc.poll() is not None:
            if proc.returncode == 0:
                self._set(key, "COMPLETED")
            else:
                self._set(key, "FAILED", f"driver exited with code {proc.returncode}: {self.log_tail(name)}")
        return super().get_namespaced_custom_object(group, version, namespace, plural, name, **kw)

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kw):
        result = super().delete_namespaced_custom_object(group, version, namespace, plural, name, **kw)
        self._terminate(name)
        return result

    def _terminate(self, name: str, grace_s: float = 60.0) -> None:
        import os
        import signal
        import subprocess

        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.logs / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def shutdown(self) -> None:
        """Stop every process still running (what deleting the namespace would do)."""
        for name in list(self.procs):
            self._terminate(name, grace_s=30)
