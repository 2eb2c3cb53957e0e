"""Kappa's SparkApplications through the official ``kubernetes`` client (``CustomObjectsApi``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kappa.runners.kubernetes.naming import (
    GROUP,
    NETWORK_POLICIES,
    NETWORKING_GROUP,
    NETWORKING_VERSION,
    PLURAL,
    VERSION,
)
from kappa.runners.kubernetes.states import Outcome, outcome_of


_api_override: list[Any] = []


@contextlib.contextmanager
def use_kubernetes_api(api: Any) -> Iterator[None]:
    """Make every :class:`SparkApplications` built without an ``api`` in this process talk to
    ``api`` (a ``CustomObjectsApi``-like object) instead of the cluster's. Tests use it."""
    _api_override.append(api)
    try:
        yield
    finally:
        _api_override.remove(api)


class SparkApplications:
    """Create, get, delete and list Kappa's SparkApplications in one namespace, through the official
    ``kubernetes`` client's ``CustomObjectsApi``, each one's peers NetworkPolicy (:meth:`isolate`)
    and its Spark RPC key Secret (:meth:`provide_auth_secret`). Only the verbs the chart's Role
    grants Dagster's runs are used (applications: create, get, watch, delete; NetworkPolicies: get,
    create; Secrets: create), nothing cluster-wide.

    ``api``: a ``kubernetes.client.CustomObjectsApi``; by default one built from the in-cluster
    service account, else the local kubeconfig.
    """

    def __init__(self, namespace: str, api: Any | None = None):
        self.namespace = namespace
        self._api = api if api is not None else (_api_override[-1] if _api_override else None)

    @property
    def api(self) -> Any:
        """The ``CustomObjectsApi`` in use: the one given (or installed by
        :func:`use_kubernetes_api`), else built on first use from the in-cluster service account,
        falling back to the local kubeconfig. Raises the client's ``ConfigException`` when
        neither is available."""
        if self._api is None:
            from kubernetes import client, config

            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            self._api = client.CustomObjectsApi()
        return self._api

    def create(self, app: Mapping[str, Any]) -> dict:
        """Create the SparkApplication ``app`` (a whole manifest, e.g. from
        :func:`~kappa.runners.kubernetes.application.build_spark_application`) in the namespace;
        returns the object as the API server stored it. Raises ``ApiException``, status 409 when an
        application of that name exists (:class:`~kappa.runners.kubernetes.runner.KubernetesRunner`
        then observes the existing one)."""
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, dict(app))

    def get(self, name: str) -> dict | None:
        """The application, or None if it does not exist (HTTP 404)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, name: str) -> bool:
        """Stop a version's query by deleting its application (the operator deletes the pods).
        Returns False if it did not exist."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def isolate(self, app: Mapping[str, Any]) -> dict:
        """Make sure the peers NetworkPolicy of ``app`` (:func:`~kappa.runners.kubernetes.application.
        build_peers_policy`, named after its uid) exists: one GET, and a create when it is missing.
        NetworkPolicies live at ``/apis/networking.k8s.io/v1/namespaces/<ns>/networkpolicies``, the
        same path shape as custom objects, so the same ``CustomObjectsApi`` serves. Returns the
        policy. Raises ``ApiException`` (403 when the caller may not create NetworkPolicies or
        admission refuses the shape)."""
        from kubernetes.client.exceptions import ApiException

        from kappa.runners.kubernetes.application import build_peers_policy

        policy = build_peers_policy(dict(app))
        name = policy["metadata"]["name"]
        try:
            return self.api.get_namespaced_custom_object(NETWORKING_GROUP, NETWORKING_VERSION, self.namespace,
                                                         NETWORK_POLICIES, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        try:
            return self.api.create_namespaced_custom_object(NETWORKING_GROUP, NETWORKING_VERSION, self.namespace,
                                                            NETWORK_POLICIES, policy)
        except ApiException as exc:
            if exc.status != 409:  # 409: created since our get
                raise
            return policy

    @property
    def core(self) -> Any:
        """The ``CoreV1Api`` for the application's RPC key Secret, on the same connection as
        :attr:`api` (Secrets are core objects, not under ``/apis``). An ``api`` that has
        ``create_namespaced_secret`` itself (the tests' in-memory stand-in) serves both."""
        if hasattr(self.api, "create_namespaced_secret"):
            return self.api
        from kubernetes import client

        return client.CoreV1Api(self.api.api_client)

    def provide_auth_secret(self, app: Mapping[str, Any]) -> str:
        """Make sure the Spark RPC key Secret ``app`` mounts exists
        (:func:`~kappa.runners.kubernetes.application.build_auth_secret`, a fresh random key, owned
        by ``app``): one create; 409 means it exists (made by whoever created ``app``) and is kept,
        since the run account may not read Secrets. Returns its name. Raises ``ApiException`` (403
        when the caller may not create Secrets or admission refuses the shape)."""
        from kubernetes.client.exceptions import ApiException

        from kappa.runners.kubernetes.application import build_auth_secret

        secret = build_auth_secret(dict(app))
        try:
            self.core.create_namespaced_secret(self.namespace, secret)
        except ApiException as exc:
            if exc.status != 409:
                raise
        return secret["metadata"]["name"]

    def outcome(self, name: str, *, streaming: bool = True) -> Outcome | None:
        """:func:`outcome_of` the named application; None if it does not exist."""
        app = self.get(name)
        return None if app is None else outcome_of(app, streaming=streaming)

    def watch(self, name: str, timeout_s: int = 60) -> Iterable[Outcome]:
        """Yield the outcome of the named application each time the operator changes it, for at most
        ``timeout_s`` seconds (a ``watch`` request filtered to that one object)."""
        from kubernetes import watch

        w = watch.Watch()
        for event in w.stream(
            self.api.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
            field_selector=f"metadata.name={name}", timeout_seconds=timeout_s,
        ):
            yield outcome_of(event["object"])
