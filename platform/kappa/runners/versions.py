"""What every runner needs before a query starts, whatever runs it: the source topics exist, and
each asset has the version it runs (its latest live one, or a new v1 pinned to its upstreams'
versions). :func:`kappa.runners.run_until_caught_up`, ``kappa run --continuous`` and the Dagster
assets call it before they pick a runner (:func:`kappa.runners.pick_runner`)."""

from __future__ import annotations

from kappa.config import Settings
from kappa.delta.declarations import provenance
from kappa.delta.registry import Registry, Version
from kappa.kafka.topics import start_offsets
from kappa.runners.base import RunError
from kappa.spec import Catalog, SpecError


class LogicChangedError(SpecError):
    """An asset's declaration changed since its current version was created: a new version (a
    replay) is needed, its checkpoint must not be reused with other logic."""


def ensure_source_topics(settings: Settings, catalog: Catalog, names: list[str]) -> list[str]:
    """Create every declared source topic of ``names`` that does not exist yet (as ``topics.yaml``
    declares it), so an asset whose producer has not started (a CDC changelog before
    ``kappa connect start``) runs on an empty log instead of failing. Returns the topics created."""
    from kappa.kafka.topics import ensure_topics

    wanted = {t: catalog.topics[t] for n in names for t in catalog[n].topics}
    if not wanted:
        return []
    try:
        return ensure_topics(settings, wanted)
    except Exception as exc:  # the broker is down: say so, no traceback
        raise RunError(f"cannot create the source topics at {settings.bootstrap_servers}: {exc}") from None


def resolve_versions(catalog: Catalog, names: list[str], registry: Registry) -> dict[str, Version]:
    """The version each asset in ``names`` runs: its latest live version, or a new v1 (pinned to its
    upstream assets' versions). Raises :class:`LogicChangedError` when the declaration changed."""
    chosen: dict[str, Version] = {}
    for name in catalog.topological(names):
        spec = catalog[name]
        current = registry.latest(name)
        if current is None:
            upstream = {}
            for up in spec.upstream:
                up_version = chosen.get(up) or registry.latest(up)
                if up_version is None:
                    raise SpecError(f"{name} reads {up}, which has no version yet: run {up} first")
                upstream[up] = up_version.version
            current = registry.create_version(name, spec.fingerprint(), upstream,
                                              start_offsets=start_offsets(registry.settings, spec.topics),
                                              **provenance(registry.settings, spec))
        elif current.fingerprint != spec.fingerprint():
            raise LogicChangedError(
                f"{spec.where}: the declaration of {name} changed since {current.name} was created; "
                f"its checkpoint cannot be reused with other logic. Replay it into a new version: "
                f"`kappa replay {name}`"
            )
        chosen[name] = current
    return chosen
