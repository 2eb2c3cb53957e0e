"""Kubernetes names of Kappa's objects, shared by the chart generator and the runner so ACLs,
Secrets and SparkApplications line up.

=========================  ==============================================  ==========================
what                       name                                            example (``flights_bronze``)
=========================  ==============================================  ==========================
KafkaUser and its Secret   ``kappa-asset-<name, _ -> ->``                  ``kappa-asset-flights-bronze``
consumer-group prefix      ``kappa-<name>-`` (ACL, prefix pattern)         ``kappa-flights_bronze-``
group id prefix of v<N>    ``kappa-<name>-v<N>-``                          ``kappa-flights_bronze-v3-``
SparkApplication           ``<name, _ -> ->>-v<N>``                        ``flights-bronze-v3``
gate SparkApplication      ``<name, _ -> ->>-v<N>-gate``                   ``flights-bronze-v3-gate``
its peers NetworkPolicy    ``<application>-peers-<uid[:8]>``               ``flights-bronze-v3-peers-1f0c…``
its Spark RPC key Secret   ``<application>-auth-<8 random hex>``           ``flights-bronze-v3-auth-9b2e…``
=========================  ==============================================  ==========================

Asset names match ``[a-z][a-z0-9_]*`` (no ``-``), so the ``-`` that ends a group prefix cannot be part
of another asset's name: the prefix ACL of ``flights`` does not cover ``flights_bronze``'s groups.
"""

from __future__ import annotations

GROUP = "sparkoperator.k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SparkApplication"
PLURAL = "sparkapplications"

#: Label every Kappa-created SparkApplication carries (selectors, NetworkPolicies, clean-up).
LABEL_ASSET = "kappa.dev/asset"
LABEL_VERSION = "kappa.dev/version"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_KAFKA_CLIENT = "kappa.dev/kafka-client"
#: The label the Spark operator puts on every driver and executor pod of an application (its
#: name; spark-operator ``internal/controller/sparkapplication/submission.go``).
LABEL_OPERATOR_APP = "sparkoperator.k8s.io/app-name"
#: The NetworkPolicy API (``networking.k8s.io/v1``), reached through the same generic client.
NETWORKING_GROUP, NETWORKING_VERSION, NETWORK_POLICIES = "networking.k8s.io", "v1", "networkpolicies"
COMPONENT = "streaming-asset"
GATE_COMPONENT = "gate"

_K8S_NAME_MAX = 63


def dns_name(asset: str) -> str:
    """``flights_bronze`` -> ``flights-bronze`` (Kubernetes names allow no ``_``)."""
    return asset.replace("_", "-")


def kafka_user_name(asset: str) -> str:
    """The KafkaUser (and the Secret Strimzi's user operator writes) of one streaming asset."""
    return f"kappa-asset-{dns_name(asset)}"


def group_prefix(asset: str) -> str:
    """The consumer-group prefix one asset may use (a ``prefix`` ACL); ends in ``-``, which no asset
    name contains, so one asset's prefix never covers another's groups."""
    return f"kappa-{asset}-"


def _checked(name: str) -> str:
    if len(name) > _K8S_NAME_MAX:
        raise ValueError(f"SparkApplication name {name!r} is longer than {_K8S_NAME_MAX} characters")
    return name


def application_name(asset: str, version: int) -> str:
    """``flights_bronze``, 3 -> ``flights-bronze-v3``. Raises ``ValueError`` if longer than 63
    characters (the operator derives Service names from it, which are DNS labels)."""
    return _checked(f"{dns_name(asset)}-v{version}")


def gate_application_name(asset: str, version: int) -> str:
    """``flights_bronze``, 3 -> ``flights-bronze-v3-gate``: the batch application that runs the gate."""
    return _checked(f"{dns_name(asset)}-v{version}-gate")


def peers_policy_name(application: str, uid: str) -> str:
    """The NetworkPolicy that lets the pods of one application incarnation reach each other:
    ``<application>-peers-<first 8 characters of its uid>`` (a new name for an application created
    again under the same name, so the garbage collector's deletion of the old one never races it)."""
    return f"{application}-peers-{uid[:8]}"


#: The one key of an application's RPC key Secret (the file name where it is mounted).
AUTH_SECRET_KEY = "secret"


def auth_secret_name(application: str, nonce: str) -> str:
    """The Secret holding the Spark RPC key of one application incarnation:
    ``<application>-auth-<nonce>``, ``nonce`` 8 lowercase hex digits chosen when the application is
    built (a new name for an application created again under the same name, as for its peers
    NetworkPolicy). The chart's admission admits exactly this shape. Raises ``ValueError`` for
    another ``nonce``."""
    if len(nonce) != 8 or any(c not in "0123456789abcdef" for c in nonce):
        raise ValueError(f"the RPC key Secret's nonce must be 8 lowercase hex digits, got {nonce!r}")
    return f"{application}-auth-{nonce}"
