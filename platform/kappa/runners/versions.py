"""What every runner needs before a query starts, whatever runs it: the source topics exist, and
each asset has the version it runs (its latest live one, or a new v1 pinned to its upstreams'
versions). :func:`kappa.runners.run_until_caught_up`, ``kappa run --continuous`` and the Dagster
assets call it before they pick a runner (:func:`kappa.runners.pick_runner`)."""

from __future__ import annotations

from kappa.config import Settings
from kappa.delta.declarations import provenance
from kappa.delta.registry import Registry, Version
from kappa.kafka.topics import start_offsets
from kappa.errors import KappaError
from kappa.runners.base import RunError
from kappa.spec import AssetSpec, Catalog, SpecError


class RetentionError(KappaError, RuntimeError):
    """Retention (or a record deletion) removed part of a topic's log and no archive holds it: a
    replay would be partial."""


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
                                              **log_sources(registry.settings, catalog, spec, registry),
                                              **provenance(registry.settings, spec))
        elif current.fingerprint != spec.fingerprint():
            raise LogicChangedError(
                f"{spec.where}: the declaration of {name} changed since {current.name} was created; "
                f"its checkpoint cannot be reused with other logic. Replay it into a new version: "
                f"`kappa replay {name}`"
            )
        chosen[name] = current
    return chosen


def log_sources(settings: Settings, catalog: Catalog, spec: AssetSpec, registry: Registry) -> dict:
    """Where a new version of ``spec`` reads its topics' log, as the registry records it on the
    version (:meth:`kappa.delta.registry.Registry.create_version`'s extras): ``start_offsets``
    (topic -> partition -> the log start offset now: Kafka is read from there) and, for a topic whose
    retention deleted records and that declares an ``archive``, ``archive`` (topic -> ``{"asset",
    "version", "table", "below": {partition: log start}}``: offsets below ``below`` come from that
    version of the archive asset's Delta table, :func:`kappa.streaming.sources.read_source`).

    Before anything is created it proves, per partition whose log no longer starts at 0, that the
    archive (the promoted version of the topic's ``archive`` asset, else its latest) holds every
    offset from 0 to the log start (:func:`kappa.delta.archive.coverage`; the records ``kappa forget``
    deleted from it excepted, :func:`kappa.delta.forgotten.forgotten_offsets`). Raises
    :class:`RetentionError` naming the topic, partition and missing range, or when a topic with
    deleted records has no archive (Kafka's log start offset moves only when records are deleted,
    by retention or DeleteRecords; compaction does not move it)."""
    from kappa.delta.archive import archive_version, coverage
    from kappa.delta.forgotten import forgotten_offsets

    starts = start_offsets(settings, spec.topics)
    out: dict = {"start_offsets": starts}
    archive: dict = {}
    for topic, parts in starts.items():
        deleted = {p: s for p, s in parts.items() if s > 0}
        if not deleted:
            continue
        where = ", ".join(f"{topic}[{p}] starts at offset {s}" for p, s in sorted(deleted.items()))
        name = catalog.topics[topic].archive if topic in catalog.topics else None
        if name is None:
            raise RetentionError(
                f"cannot read the whole log of {topic!r} for {spec.name}: retention has deleted its start ({where}) "
                f"and it declares no archive; a new version would be partial. Keep retention_ms: -1 or declare "
                f"`archive: <raw asset>` for it in {catalog.root / 'topics.yaml'}.")
        kept = archive_version(registry, name)
        if kept is None:
            raise RetentionError(f"cannot read {topic!r} below its log start ({where}): its archive {name} has no "
                                 f"version yet")
        try:
            held = coverage(settings, kept.table_path, topic)
        except Exception:  # TableNotFoundError: the archive has written nothing
            held = {}
        excused = forgotten_offsets(settings, topic)  # rows `kappa forget` deleted from the archive
        for p, s in sorted(deleted.items()):
            part = held.get(int(p))
            missing = part.missing_below(s, excused.get(int(p), set())) if part is not None else (0, s - 1)
            if missing is not None:
                raise RetentionError(
                    f"cannot replay {spec.name}: {topic}[{p}] starts at offset {s} in the log and the archive "
                    f"{kept.name} lacks offsets {missing[0]}-{missing[1]} (it holds "
                    f"{part.records if part else 0:,} record(s) of the partition); a replay would have a gap.")
        archive[topic] = {"asset": name, "version": kept.version, "table": kept.table_path,
                          "below": {p: s for p, s in sorted(deleted.items())}}
    if archive:
        out["archive"] = archive
    return out
