"""The promotion registry, as Dagster sees it: the ``kappa_registry`` sensor.

Whatever ran the gate or moved a stable name — ``kappa promote``/``rollback``/``replay``/``demo``,
a Dagster run, another process — the registry (:class:`kappa.delta.registry.Registry`) holds the
truth. Every tick the sensor reads the registry events it has not seen yet (its cursor is the
timestamp of the newest event handled) and reports:

* each ``promoted`` event (a promotion, a replay's chain, a rollback) as an ``AssetMaterialization``
  of the stable-name asset with ``version``, ``reason`` (manual, replay, demo, rollback),
  ``previous`` version, ``dagster/row_count``, ``source_offsets`` (topic -> partition -> offset the
  version had read when it caught up), ``delta_table_version`` and ``table_path``; a materialization
  of an upstream asset is what the dbt models' automation condition reacts to;
* the latest gate of the promoted version as one ``AssetCheckEvaluation`` per declared check, with
  its metadata (``version``, ``observed``, ``expected``, ``blocking``, the GX Data Docs link). A
  declared check the gate did not evaluate is left "not evaluated" (never reported as passed).

On its first tick (no cursor) it reports the current promoted version of every asset, so a Dagster
started after ``make demo`` shows what the demo promoted.
"""


from datetime import datetime
from typing import TYPE_CHECKING, Iterable

import dagster as dg

from kappa.dagster.names import LoadOptions
from kappa.dagster.resources import KappaResource
from kappa.dagster.sensor import running_sensor
from kappa.delta.registry import Registry, Version

if TYPE_CHECKING:
    from kappa.spec import Catalog

REGISTRY_SENSOR = "kappa_registry"


def promotion_materialization(version: Version, event: dict, settings) -> dg.AssetMaterialization:
    """The materialization recording that ``event`` (a ``promoted`` registry event) pointed the
    stable name at ``version``, or (a ``pinned`` event) moved its snapshot: rows and Delta version
    of the pinned snapshot, and the cut (topic -> partition -> offset) it covers."""
    from kappa.delta.tables import table_rows
    from kappa.dagster.metadata import meta_value

    caught = version.last("caught_up") or {}
    details = event["details"]
    rows, delta_version = table_rows(version.table_path, settings, details.get("snapshot"))
    reason = details.get("reason", "promote")
    md: dict[str, object] = {
        "version": version.version,
        "version_name": version.name,
        "reason": reason,
        "previous": meta_value(details.get("previous")),
        "promoted_at": event["at"].isoformat(),
        "dagster/row_count": rows,
        "delta_table_version": meta_value(delta_version),
        "source_offsets": dg.MetadataValue.json(caught.get("end_offsets") or {}),
        "quarantined": meta_value(caught.get("quarantined")),
        "table_path": dg.MetadataValue.path(version.table_path),
    }
    if version.upstream:
        md["upstream_versions"] = dg.MetadataValue.json(version.upstream)
    if "cut" in details:
        md["cut"] = dg.MetadataValue.json(details["cut"])
    verb = ("snapshot moved for" if event["event"] == "pinned" else "rolled back to" if reason == "rollback"
            else "promoted")
    return dg.AssetMaterialization(asset_key=dg.AssetKey(version.asset), metadata=md,
                                   description=f"{verb} {version.name} ({reason})",
                                   tags={"kappa/registry_event": event["event"], "kappa/reason": str(reason)})


def gate_evaluations(version: Version, declared: Iterable[str]) -> list[dg.AssetCheckEvaluation]:
    """The latest recorded gate of ``version`` as check evaluations of the declared checks (none
    when the version was never gated)."""
    from kappa.dagster.metadata import data_docs_url, meta_value

    gate = None
    for e in reversed(version.events):
        if e["event"] in ("gate_passed", "gate_failed"):
            gate = e
            break
    if gate is None:
        return []
    by_name = {c["name"]: c for c in gate["details"].get("checks", [])}
    docs = gate["details"].get("data_docs")
    out = []
    for name in declared:
        c = by_name.get(name)
        if c is None:
            continue
        md: dict[str, object] = {
            "version": version.version,
            "observed": meta_value(c.get("observed")),
            "expected": str(c.get("expected")),
            "blocking": bool(c.get("blocking")),
            "gated_at": gate["at"].isoformat(),
        }
        for k, v in (c.get("details") or {}).items():
            md[f"details/{k}"] = meta_value(v)
        if docs:
            md["data_docs"] = data_docs_url(docs)
        verdict = "passed" if c.get("passed") else "FAILED"
        out.append(dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey(version.asset), check_name=name, passed=bool(c.get("passed")),
            severity=dg.AssetCheckSeverity.ERROR if c.get("blocking") else dg.AssetCheckSeverity.WARN,
            description=f"{version.name} {name} {verdict}: observed {c.get('observed')!r}, expected {c.get('expected')}",
            metadata=md,
        ))
    return out


def registry_events_since(registry: Registry, cursor: str | None, declared: dict[str, list[str]]) -> tuple[list, str | None]:
    """(asset events, new cursor) for the registry events after ``cursor`` (an ISO timestamp;
    None: the current promoted state of every asset). Only assets in ``declared`` (asset -> its
    declared check names) are reported."""
    events = registry.events()
    if not events:
        return [], cursor
    newest = events[-1]["at"].isoformat()
    out: list = []
    if cursor is None:
        for asset, version in registry.promoted_all().items():
            if asset not in declared:
                continue
            promoted = [e for e in version.events if e["event"] == "promoted"]
            out.append(promotion_materialization(version, promoted[-1], registry.settings))
            out.extend(gate_evaluations(version, declared[asset]))
        return out, newest
    since = datetime.fromisoformat(cursor)
    for e in events:
        if e["at"] <= since or e["asset"] not in declared:
            continue
        if e["event"] in ("promoted", "pinned"):
            version = registry.version(e["asset"], e["version"], events)
            out.append(promotion_materialization(version, e, registry.settings))
            out.extend(gate_evaluations(version, declared[e["asset"]]))
        elif e["event"] in ("gate_passed", "gate_failed"):
            promoted = registry.promoted(e["asset"], events)
            # Checks show the promoted version: a candidate's gate is recorded when it is promoted.
            if promoted is not None and promoted.version == e["version"]:
                out.extend(gate_evaluations(promoted, declared[e["asset"]]))
    return out, newest


def build_registry_sensor(catalog: "Catalog", options: LoadOptions, interval_s: int = 10) -> dg.SensorDefinition:
    """The ``kappa_registry`` sensor over the assets of ``catalog`` (on by default, every
    ``interval_s`` seconds)."""
    from kappa.quality.gate import check_names

    declared = {spec.name: list(check_names(spec)) for spec in catalog}

    @running_sensor(REGISTRY_SENSOR, interval_s,
                    "Reports the promotion registry: each promotion or rollback (by the CLI, a Dagster "
                    "run or a replay) as a materialization of the stable-name asset, and the promoted "
                    "version's latest gate as its check evaluations.")
    def _sensor(context: dg.SensorEvaluationContext, kappa: KappaResource) -> dg.SensorResult:
        settings = kappa.settings(assets_dir=str(options.assets_path))
        events, cursor = registry_events_since(Registry(settings), context.cursor or None, declared)
        if events:
            context.log.info(f"registry: {len(events)} events to report")
        return dg.SensorResult(asset_events=events, cursor=cursor)

    return _sensor
