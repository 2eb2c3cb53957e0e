"""``StreamingAssets``: the Dagster Component that turns ``assets/`` into Dagster definitions.

One YAML file under ``assets/`` is one streaming asset (see :mod:`kappa.spec`); this component adds no
declarations of its own. Everything is loaded and validated in ``__post_init__`` (the pattern of
dagster-k8s ``PipesK8sComponent``), so a bad file fails when the code location loads, with the
:class:`~kappa.spec.SpecError` naming the file and the field, never when a run starts.

What each asset YAML becomes:

* an asset keyed by the asset's name, with its ``group``, ``owner``, ``description``, kinds
  ``spark`` and ``delta`` (plus ``kafka`` when it reads Kafka), its column schema (parse assets) and
  a link to the YAML file;
* lineage: each source topic is an external asset ``topic/<topic>``; an upstream asset is a dep;
* blocking asset checks, one per name in :func:`kappa.quality.gate.check_names` (the GX expectations the
  YAML declares, ``quarantine_rate`` for parse assets, ``shadow_diff``), evaluated by
  :func:`kappa.quality.gate.run_gate` after the asset runs; a failing blocking check stops downstream
  assets of the run;
* a non-blocking ``query_health`` check, evaluated on demand and by the
  ``kappa_streaming_queries`` sensor (consumer lag, last progress, failed or stalled queries).

Plus one ``replay`` job (config: ``asset``, ``promote``) over :func:`kappa.lifecycle.promotion.replay`,
and one ``maintain`` job (config: ``assets``, ``retention_hours``) over
:func:`kappa.lifecycle.maintain.maintain` with its ``kappa_maintain`` schedule (``maintain_cron``),
and one ``advance`` job (config: ``assets``, ``wait_s``) over :func:`kappa.lifecycle.cut.advance`
with its ``kappa_advance`` sensor (:mod:`kappa.dagster.advance`). And the rest of the version
lifecycle, each job the same function as its CLI twin: ``promote_version`` (``asset``, ``version``,
``only``; ``kappa promote``) and ``rollback`` (``asset``; ``kappa rollback``) in
:mod:`kappa.dagster.promote`, ``forget_key`` (``topic``, ``key``, ``reason``, ``truncate_log``;
``kappa forget``) in :mod:`kappa.dagster.forget`. And the run-time declarations: ``add_asset``,
``edit_asset`` and ``retire_asset`` (``kappa declarations add|edit|retire``) in
:mod:`kappa.dagster.declare`.

Example (Python; ``definitions.py`` does this)::

    import dagster as dg
    from kappa.dagster.component import StreamingAssets

    defs = dg.build_defs_for_component(StreamingAssets(assets_dir="assets", continuous=["flights"]))

The same as a ``defs.yaml`` in a dg project's defs folder::

    type: kappa.dagster.component.StreamingAssets
    attributes:
      assets_dir: assets
      continuous: [flights]
"""


from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from kappa.config import load_settings
from kappa.dagster import execution
from kappa.dagster.execution import StreamingRunConfig
from kappa.dagster.advance import build_advance_job, build_advance_sensor
from kappa.dagster.archives import build_archive_sensor
from kappa.dagster.rules import check_dagster_rules, declared_checks
from kappa.dagster.declare import build_declaration_jobs
from kappa.dagster.forget import build_forget_job
from kappa.dagster.maintain import build_maintain_job, build_maintain_schedule
from kappa.dagster.names import HEALTH_CHECK, REPLAY_JOB, SENSOR_NAME, LoadOptions, RunMode, topic_key
from kappa.dagster.promote import build_promote_job, build_rollback_job
from kappa.dagster.replay import build_replay_job
from kappa.dagster.resources import KappaResource
from kappa.dagster.sensor import build_health_checks, build_sensor
from kappa.delta.declarations import catalog as catalog_of
from kappa.spec import AssetSpec, Catalog, SpecError
from kappa.streaming.kinds import kind_of

__all__ = ["HEALTH_CHECK", "REPLAY_JOB", "SENSOR_NAME", "RunMode", "StreamingAssets", "StreamingRunConfig",
           "topic_key"]

# Dagster accepts an owner that is an email address or "team:<name>" (AssetSpec docs, "owners").
_SPARK_TYPES = {"string": "string", "int": "int", "long": "bigint", "double": "double", "boolean": "boolean",
                "timestamp": "timestamp", "date": "date"}


@dataclass
class StreamingAssets(dg.Component, dg.Resolvable):
    """Every streaming asset declared in an ``assets/`` folder.

    Attributes:
        assets_dir: the folder of asset YAML files; relative paths are relative to the project dir.
            Default: ``KAPPA_ASSETS_DIR`` or ``<project>/assets``.
        continuous: assets whose materialization runs long-running (processing-time trigger) by
            default instead of until caught up; a run's config overrides this.
        stall_after_s: a running query with records to read and no commit for this many seconds
            is reported unhealthy (default 300 s: well above the 10 s triggers of ``assets/``).
        sensor_interval_s: how often the sensor observes the queries (seconds).
        maintain_cron: when the ``kappa_maintain`` schedule compacts, checkpoints and vacuums the
            tables (cron, UTC; default daily at 03:00).
    """

    assets_dir: str | None = None
    continuous: list[str] = field(default_factory=list)
    stall_after_s: float = 300.0
    sensor_interval_s: int = 30
    maintain_cron: str = "0 3 * * *"

    def __post_init__(self) -> None:
        settings = load_settings()
        path = Path(self.assets_dir) if self.assets_dir else settings.assets_dir
        assert path is not None
        self._assets_path = (path if path.is_absolute() else settings.project_dir / path).resolve()
        # The files plus the warehouse's active declarations. SpecError names the file (or
        # declarations:<name>) and the field; let it propagate unchanged.
        self._catalog: Catalog = catalog_of(settings.model_copy(update={"assets_dir": self._assets_path}))
        for spec in self._catalog:
            check_dagster_rules(spec)
        unknown = sorted(set(self.continuous) - set(self._catalog.assets))
        if unknown:
            raise SpecError(f"{self.__class__.__name__}: continuous: unknown assets {unknown} "
                            f"(known: {', '.join(sorted(self._catalog.assets))})")
        if self.stall_after_s <= 0 or self.sensor_interval_s <= 0:
            raise SpecError(f"{self.__class__.__name__}: stall_after_s and sensor_interval_s must be > 0")
        self._check_names = {spec.name: declared_checks(spec) for spec in self._catalog}
        self._options = LoadOptions(assets_path=self._assets_path, continuous=tuple(self.continuous),
                                    stall_after_s=self.stall_after_s, sensor_interval_s=self.sensor_interval_s,
                                    maintain_cron=self.maintain_cron)

    # -- what was loaded ---------------------------------------------------------------------------
    @property
    def catalog(self) -> Catalog:
        """The validated catalog of ``assets_dir`` (loaded in ``__post_init__``)."""
        return self._catalog

    @property
    def assets_path(self) -> Path:
        """The resolved folder of asset YAML files the component loads."""
        return self._assets_path

    @property
    def options(self) -> LoadOptions:
        """What the builders of the sensor, checks, replay job and ops receive with :attr:`catalog`."""
        return self._options

    def check_names(self, asset: str) -> list[str]:
        """The blocking gate checks declared for ``asset``."""
        return list(self._check_names[asset])

    # -- definitions -------------------------------------------------------------------------------
    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """One Dagster asset per declaration (with its gate checks and ``query_health``), the topics as
        external assets, the sensors, the replay job, the maintain job with its schedule, the
        advance job with its sensor, the archives' sensor (:mod:`kappa.dagster.archives`), the
        promote_version, rollback and forget_key jobs, and the
        add_asset, edit_asset and retire_asset jobs."""
        specs = [self._catalog[n] for n in self._catalog.topological()]
        maintain_job = build_maintain_job(self._catalog, self._options)
        advance_job = build_advance_job(self._catalog, self._options)
        return dg.Definitions(
            assets=[*self._topic_specs(), *(self._build_asset(s) for s in specs)],
            asset_checks=build_health_checks(self._catalog, self._options, specs),
            sensors=[build_sensor(self._catalog, self._options), build_advance_sensor(advance_job, self._options),
                     *filter(None, [build_archive_sensor(self._catalog, self._options)])],
            jobs=[build_replay_job(self._catalog, self._options), maintain_job, advance_job,
                  build_promote_job(self._options), build_rollback_job(self._options),
                  build_forget_job(self._options), *build_declaration_jobs(self._options)],
            schedules=[build_maintain_schedule(maintain_job, self._options)],
        )

    def _topic_specs(self) -> list[dg.AssetSpec]:
        used = sorted({t for s in self._catalog for t in s.topics})
        out = []
        for topic in used:
            t = self._catalog.topics[topic]
            out.append(dg.AssetSpec(
                key=topic_key(topic),
                description=t.description or f"Kafka topic {topic}",
                group_name="kafka_topics",
                kinds={"kafka"},
                metadata={
                    "partitions": t.partitions,
                    "retention_ms": t.retention_ms,
                    "compacted": t.compacted,
                    "dagster/code_references": _code_ref(self._catalog.root / "topics.yaml"),
                },
            ))
        return out

    def asset_spec(self, spec: AssetSpec) -> dg.AssetSpec:
        """The Dagster ``AssetSpec`` of one declaration: key, upstream topics and assets, group, owner, and
        metadata (layer, transform kind, sink mode, source, trigger, watermark, code references, the
        declared column schema where the kind fixes one)."""
        deps = [topic_key(t) for t in spec.topics] + [dg.AssetKey(u) for u in spec.upstream]
        metadata: dict = {
            "layer": spec.layer,
            "transform": spec.transform.kind,
            "sink_mode": spec.sink_mode,
            "source": ", ".join(spec.topics) if spec.topics else f"asset {spec.source.asset}",
            "trigger": spec.trigger.processing_time,
            # the file, or declarations:<name> for one recorded in the warehouse
            "spec_path": dg.MetadataValue.path(spec.where) if spec.path is not None else spec.where,
        }
        if spec.watermark is not None:
            metadata["watermark"] = f"{spec.watermark.column} - {spec.watermark.delay}"
        if spec.path is not None:
            metadata["dagster/code_references"] = _code_ref(spec.path)
        declared = kind_of(spec).declared_columns(spec)
        if declared is not None:
            metadata["dagster/column_schema"] = dg.TableSchema(columns=[
                dg.TableColumn(name, _SPARK_TYPES[f.type], description=f.description,
                               constraints=dg.TableColumnConstraints(nullable=not f.required))
                for name, f in declared.items()
            ])
        return dg.AssetSpec(
            key=dg.AssetKey(spec.name),
            deps=deps,
            description=spec.description.strip() or None,
            group_name=spec.group or spec.layer,
            owners=[spec.owner] if spec.owner else None,
            kinds={"spark", "delta", *(["kafka"] if spec.topics else [])},
            tags={"layer": spec.layer},
            code_version=spec.fingerprint(),
            metadata=metadata,
        )

    def _build_asset(self, spec: AssetSpec) -> dg.AssetsDefinition:
        key = dg.AssetKey(spec.name)
        check_specs = [
            dg.AssetCheckSpec(name, asset=key, blocking=True, description=_check_description(name))
            for name in self._check_names[spec.name]
        ]
        catalog, options = self._catalog, self._options

        # One asset per op: a failed blocking check then stops the downstream assets of the run.
        # The pool serializes runs of the same asset: two queries must never share a checkpoint.
        @dg.multi_asset(
            name=spec.name,
            specs=[self.asset_spec(spec)],
            check_specs=check_specs,
            can_subset=True,
            pool=f"kappa_{spec.name}",
            description=f"Run {spec.name}'s current version with the configured runner (local: until caught up "
                        f"or long-running, then its gate; kubernetes: start its SparkApplication).",
        )
        def _streaming_asset(context: dg.AssetExecutionContext, config: StreamingRunConfig, kappa: KappaResource):
            yield from execution.materialize(catalog, options, spec.name, context, config, kappa)

        return _streaming_asset


def _code_ref(path: Path) -> dg.CodeReferencesMetadataValue:
    return dg.CodeReferencesMetadataValue(code_references=[dg.LocalFileCodeReference(file_path=str(path))])


def _check_description(name: str) -> str:
    known = {
        "quarantine_rate": "Quarantined records / input records must not exceed the asset's max_quarantine_rate.",
        "schema_drift": "Fields the version's records carried that its declaration lacks, and declared fields whose "
                        "values were of another type (kept in the rescued-fields table), with counts and a sample; "
                        "`kappa declarations evolve` proposes the declaration that holds them.",
        "shadow_diff": "The candidate compared with the promoted version (row counts, keys on one side only, "
                       "aggregate differences); blocks only if the asset says so.",
    }
    if name.startswith("row_expectation__"):
        return (f"Per-row expectation {name.removeprefix('row_expectation__')}: its violations over the version's "
                "rows (kept, or dropped to quarantine), counted in every micro-batch; blocks above its max_rate.")
    return known.get(name, f"Great Expectations expectation {name} on the version's Delta table.")

