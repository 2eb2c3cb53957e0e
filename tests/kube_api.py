"""THE KUBERNETES API STAND-IN: an in-memory ``kubernetes.client.CustomObjectsApi`` for the unit
tests of the kubernetes runner and Dagster's tests that script the operator's states (states a
real operator cannot be made to report on demand: a version stuck SUBMITTED, a retrying driver).
The flows a real server can serve run against the real control plane in ``tests/kubernetes``
(kube-apiserver, the Spark operator, admission), e.g. the replay with ``--promote``. Everything else
in those tests (the registry's Delta table, the Kafka broker, Dagster) is real.

It implements the three namespaced custom-object verbs the runner uses, as the API server does
(and ``create_namespaced_secret``, the RPC key Secret's, 409 for a duplicate name):

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

    # -- CoreV1Api: the one Secret verb the runner uses (each application's RPC key) -------------
    def create_namespaced_secret(self, namespace, body, **_):
        name = body["metadata"]["name"]
        self.calls.append(("create_secret", name))
        key = ("", "v1", namespace, "secrets", name)
        if key in self.objects:
            raise _error(409, "AlreadyExists", f'secrets "{name}" already exists')
        self.objects[key] = copy.deepcopy(body)
        return copy.deepcopy(body)

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
        [key] = [k for k in self.objects if k[-1] == name and k[3] == "sparkapplications"]
        self._set(key, state, error)

    def script(self, name: str, *states: str) -> None:
        """The states successive ``get``s of ``name`` report (the last one stays);
        ``"FAILED:message"`` also sets the operator's ``errorMessage``."""
        self._scripts[name] = list(states)

    def names(self) -> set[str]:
        """Names of the SparkApplications stored."""
        return {k[-1] for k in self.objects if k[3] == "sparkapplications"}

    def policies(self) -> dict[str, dict]:
        """The NetworkPolicies stored (the applications' peers), by name."""
        return {k[-1]: v for k, v in self.objects.items() if k[3] == "networkpolicies"}

    def app(self, name: str) -> dict:
        [obj] = [v for k, v in self.objects.items() if k[-1] == name and k[3] == "sparkapplications"]
        return obj

