"""The gate: the blocking checks a candidate version must pass before it can be promoted.

* the asset's Great Expectations suite (its YAML's ``expectations:``), validated against the
  version's Delta table on GX's Spark execution engine; one check per expectation; GX Data Docs are
  built for every validated version, in the warehouse (:data:`DATA_DOCS_SITE`; on the object
  store, where the gate builds them in its scratch, copied to :func:`data_docs_location`, so they
  outlive a Kubernetes gate pod);
* ``quarantine_rate`` (parse assets): quarantined records / records read from the log, against the
  asset's ``max_quarantine_rate``;
* ``schema_drift`` (parse assets): the fields its records carried that it does not declare
  (kept in the rescued-fields table), named with counts and a sample; reported, not blocking;
* ``late_rows`` (stateful assets: windows, joins, sliding windows, patterns): the version's rows in
  the late-events table (a pattern's, and the rows a window's, join's or sliding window's watermark
  dropped, named from the checkpoint by :mod:`kappa.streaming.late`) plus the rows Spark dropped
  that were not named, must be none — a version that lost events is not promoted;
* ``row_expectation__<rule>`` per per-row expectation (:func:`row_expectation_checks`): its
  violations over the version's rows, kept or dropped to quarantine; blocking above ``max_rate``;
* ``shadow_diff``: the candidate against the promoted version (row counts, keys on one side only,
  differences of numeric column sums), both read at one cut: the Delta versions of the two whose
  micro-batches covered the same source offsets (:func:`kappa.quality.shadow_cut.same_cut`), so a promoted query that has
  read further since does not differ from a correct replay; blocking only if the asset sets
  ``shadow_diff_blocking``. With no version promoted it is not evaluated and does not block; with
  no common cut it is not evaluated and blocks when declared blocking.

The result is recorded in the registry as ``gate_passed`` or ``gate_failed`` with every check.
See the Great Expectations 1.x docs ("Validate data", "Run a Checkpoint", "Data Docs").
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kappa.config import Settings
from kappa.delta.registry import Registry, late_events_path, quarantine_path
from kappa.spec import AssetSpec, Catalog, SpecError
from kappa.delta.declarations import catalog as catalog_of, known_version, recorded_spec
from kappa.streaming.kinds import kind_of
from kappa.quality.shadow_cut import same_cut
from kappa.core.storage import exists, filesystem, join, local_path

QUARANTINE_CHECK = "quarantine_rate"
LATE_CHECK = "late_rows"
SHADOW_CHECK = "shadow_diff"
DRIFT_CHECK = "schema_drift"
ROW_CHECK_PREFIX = "row_expectation__"
#: How a row dropped by a per-row expectation's reason starts in the quarantine table
#: (:meth:`kappa.streaming.writers.MicroBatchWriter.expect_rows`).
ROW_DROP_REASON = "row expectation '"


@dataclass
class CheckResult:
    """One check of a gate run. ``name``: the check (a GX expectation's name, or
    ``quarantine_rate``, ``late_rows``, ``shadow_diff``); ``blocking``: whether failing it blocks
    promotion; ``observed``/``expected``: what was measured and the bound, as shown to a person
    (a number or a short text); ``details``: JSON data kept with the record (the shadow diff's
    summary, a GX result's unexpected counts, why a check was not evaluated)."""

    name: str
    passed: bool
    blocking: bool
    observed: object
    expected: str
    details: dict = field(default_factory=dict)
    #: False when the check had nothing to measure: then it has not passed (``passed`` is False, so
    #: a blocking one blocks promotion) and says "not evaluated", never "passed".
    evaluated: bool = True

    def describe(self) -> str:
        """One line: what failed and by how much."""
        verdict = "passed" if self.passed else ("FAILED" if self.evaluated else "NOT EVALUATED")
        return f"{self.name}: {verdict} (observed {self.observed}; expected {self.expected})"


@dataclass
class GateReport:
    """The outcome of one gate run of ``asset`` version ``version``: ``passed`` when every blocking
    check passed; ``data_docs_path`` the ``index.html`` of the GX Data Docs site (None: the asset
    declares no expectations, or the site was not built); ``shadow_diff`` the candidate-vs-promoted
    summary (None: no other version promoted to compare with).
    The registry records it as ``gate_passed``/``gate_failed`` (:func:`recorded_gate` reads it
    back)."""

    asset: str
    version: int
    passed: bool
    checks: list[CheckResult]
    data_docs_path: str | None = None
    shadow_diff: dict | None = None

    @property
    def failed(self) -> list[CheckResult]:
        """The blocking checks that did not pass, in check order (empty when :attr:`passed`); a
        non-blocking shadow diff that found differences is not among them."""
        return [c for c in self.checks if c.blocking and not c.passed]

    def to_dict(self) -> dict:
        """The report as plain data (``dataclasses.asdict``: ``checks`` a list of dicts), for
        ``--json`` output and run metrics."""
        return asdict(self)


def recorded_gate(version) -> GateReport | None:
    """The report of the most recent gate run recorded for ``version`` (a
    :class:`kappa.delta.registry.Version`), as :func:`run_gate` recorded it (wherever it ran:
    here or in a gate SparkApplication); None when it was never gated."""
    for e in reversed(version.events):
        if e["event"] in ("gate_passed", "gate_failed"):
            d = e["details"]
            checks = [CheckResult(**{k: c.get(k) for k in ("name", "passed", "blocking", "observed", "expected")},
                                  details=c.get("details") or {}, evaluated=c.get("evaluated", True))
                      for c in d.get("checks", [])]
            diff = next((c.details for c in checks if c.name == SHADOW_CHECK), None)
            return GateReport(asset=version.asset, version=version.version, passed=e["event"] == "gate_passed",
                              checks=checks, data_docs_path=d.get("data_docs"), shadow_diff=diff or None)
    return None


def _class_name(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


def check_name(expectation: str, kwargs: dict) -> str:
    """A stable, identifier-safe check name: ``<expectation>__<columns>``."""
    cols = kwargs.get("column") or kwargs.get("column_list") or [
        kwargs[k] for k in ("column_A", "column_B") if k in kwargs
    ]
    if isinstance(cols, str):
        cols = [cols]
    suffix = "_".join(str(c) for c in cols)
    return re.sub(r"[^A-Za-z0-9_]", "_", f"{expectation}__{suffix}" if suffix else expectation)


def expectation_names(spec: AssetSpec) -> list[str]:
    """The check name of each declared expectation, in declaration order (:func:`check_name`; a
    repeated name gets ``_2``, ``_3``, …). Reads only the YAML: Great Expectations, seconds to
    import, is not loaded (Dagster's definitions and sensors name the checks in every process)."""
    out: list[str] = []
    seen: set[str] = set()
    for item in spec.expectations:
        ((name, kwargs),) = item.items()
        cname = check_name(name, kwargs or {})
        n, base = 2, cname
        while cname in seen:
            cname, n = f"{base}_{n}", n + 1
        seen.add(cname)
        out.append(cname)
    return out


def expectations(spec: AssetSpec) -> list[tuple[str, object]]:
    """``(check name, GX expectation object)`` per declared expectation (names as
    :func:`expectation_names`).

    Raises :class:`SpecError` naming the file and item for an unknown expectation or bad kwargs."""
    if not spec.expectations:
        return []
    import great_expectations.expectations as gxe

    out: list[tuple[str, object]] = []
    for i, (item, cname) in enumerate(zip(spec.expectations, expectation_names(spec))):
        ((name, kwargs),) = item.items()
        cls = getattr(gxe, _class_name(name), None)
        if cls is None:
            raise SpecError(f"{spec.where}: expectations.{i}: {name!r} is not a Great Expectations expectation")
        try:
            expectation = cls(**(kwargs or {}))
        except Exception as exc:  # GX raises pydantic (v1) errors for bad kwargs: one line per field
            detail = ("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                      if callable(getattr(exc, "errors", None)) else str(exc).strip().replace("\n", " "))
            raise SpecError(f"{spec.where}: expectations.{i}: {name}: {detail}") from None
        out.append((cname, expectation))
    return out


def check_names(spec: AssetSpec) -> list[str]:
    """The gate's check names for ``spec``, without running anything or loading Great Expectations
    (for Dagster's asset checks): the expectations', then quarantine rate and late rows where the
    kind has them, the per-row expectations' (:func:`row_check_name`), then the shadow diff."""
    names = expectation_names(spec)
    checks = kind_of(spec).gate_checks
    if "quarantine_rate" in checks:
        names.append(QUARANTINE_CHECK)
    if "schema_drift" in checks:
        names.append(DRIFT_CHECK)
    if "late_rows" in checks:
        names.append(LATE_CHECK)
    names += [row_check_name(r.name) for r in spec.row_expectations]
    names.append(SHADOW_CHECK)
    return names


def row_check_name(rule: str) -> str:
    """The gate's check of the per-row expectation ``rule``: ``row_expectation__<rule>``."""
    return f"{ROW_CHECK_PREFIX}{rule}"


#: The GX Data Docs site of a local warehouse, relative to it (GX's own layout of a file project
#: under ``_kappa``): ``index.html`` links every suite (``<asset>_v<N>``) and validation.
DATA_DOCS_SITE = ("_kappa", "gx", "uncommitted", "data_docs", "local_site")


def data_docs_location(settings: Settings, asset: str, version: int) -> str:
    """Where the Data Docs of ``asset`` version ``version`` are kept when the warehouse is on the
    object store: ``<warehouse>/_kappa/data_docs/<asset>/v<N>`` (an ``s3a://`` URI)."""
    return join(str(settings.warehouse), "_kappa", "data_docs", asset, f"v{version}")


def publish_data_docs(settings: Settings, site: Path, asset: str, version: int) -> str:
    """The GX Data Docs site built in ``site`` (a local folder) for a gate of ``asset`` version
    ``version``, in the warehouse. A local warehouse's is where GX built it (:data:`DATA_DOCS_SITE`,
    one site for every version). On the object store GX builds it in the gate's scratch, which a
    Kubernetes gate pod loses: the site is copied (pyarrow's ``copy_files``) to
    :func:`data_docs_location`, an index and the pages of what that scratch project validated.
    Returns the location of its ``index.html`` (a path or an ``s3a://`` URI). Raises ``OSError``
    when the object store refuses the copy."""
    from pyarrow import fs as pafs

    if local_path(str(settings.warehouse)) is not None:
        return str(site / "index.html")
    dest = data_docs_location(settings, asset, version)
    fs, path = filesystem(dest, settings)
    pafs.copy_files(str(site), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    return join(dest, "index.html")


def _run_gx(spark, settings: Settings, spec: AssetSpec, version: int, df) -> tuple[list[CheckResult], str | None]:
    declared = expectations(spec)
    if not declared:
        return [], None
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GX keeps its project (suites, results, Data Docs) in a local folder: next to the tables when
    # they are local, else in this process's scratch (the results are recorded in the registry,
    # the Data Docs copied to the warehouse: publish_data_docs).
    warehouse = local_path(str(settings.warehouse))
    root = (warehouse if warehouse is not None else (settings.home or Path(".kappa"))) / "_kappa"
    context = gx.get_context(mode="file", project_root_dir=str(root))
    # Kappa prints its own progress; GX's per-metric progress bars would flood the terminal.
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_or_update_spark(name="kappa")
    asset_name = f"{spec.name}_v{version}"
    try:
        data_asset = source.get_asset(asset_name)
    except LookupError:
        data_asset = source.add_dataframe_asset(name=asset_name)
    try:
        batch_def = data_asset.get_batch_definition("whole_table")
    except (KeyError, LookupError):
        batch_def = data_asset.add_batch_definition_whole_dataframe("whole_table")
    suite = context.suites.add_or_update(
        gx.ExpectationSuite(name=asset_name, expectations=[e for _, e in declared])
    )
    validation = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=asset_name, data=batch_def, suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=asset_name, validation_definitions=[validation],
        actions=[UpdateDataDocsAction(name="data_docs")], result_format="SUMMARY",
    ))
    run = checkpoint.run(batch_parameters={"dataframe": df})
    (validation_result,) = run.run_results.values()
    # GX does not keep the declaration order: match each result to its expectation by id, and each
    # id to its declaration by expectation type and arguments.
    name_by_config = {_config_key(e): name for name, e in declared}
    names_by_id = {e.id: name_by_config[_config_key(e)] for e in suite.expectations}
    checks_by_name: dict[str, CheckResult] = {}
    for res in validation_result.results:
        name = names_by_id[res.expectation_config.id]
        r = res.result or {}
        observed = r.get("observed_value")
        # GX leaves the count and percent None (and says success) when no row matched the
        # expectation's row_condition: nothing was measured, so the check is not evaluated, and it
        # does not block (a condition that matches no row of this version is not a defect of it)
        measured = not (observed is None and "unexpected_count" in r and r["unexpected_count"] is None)
        if not measured:
            observed = "no row matched its row_condition"
        elif observed is None and "unexpected_count" in r:
            percent = r.get("unexpected_percent")
            observed = f"{r['unexpected_count']} unexpected" + ("" if percent is None else f" ({percent:.4g}%)")
        kwargs = {k: v for k, v in res.expectation_config.kwargs.items() if k not in ("batch_id",)}
        details = {k: v for k, v in r.items() if k in ("unexpected_count", "unexpected_percent",
                                                         "partial_unexpected_list", "element_count")}
        if res.exception_info and res.exception_info.get("raised_exception"):
            details["exception"] = str(res.exception_info.get("exception_message"))[:500]
        checks_by_name[name] = CheckResult(name=name, passed=measured and bool(res.success), blocking=measured,
                                           observed=_jsonable(observed), expected=str(kwargs),
                                           details=_jsonable(details), evaluated=measured)
    checks = [checks_by_name[name] for name, _ in declared]
    site = root.joinpath(*DATA_DOCS_SITE[1:])
    return checks, publish_data_docs(settings, site, spec.name, version) if (site / "index.html").exists() else None


def _config_key(expectation) -> str:
    import json

    config = expectation.configuration
    return json.dumps([config.type, {k: v for k, v in config.kwargs.items() if k != "batch_id"}],
                      sort_keys=True, default=str)


def _jsonable(value):
    import json

    try:
        json.dumps(value)
        return value
    except TypeError:
        return json.loads(json.dumps(value, default=str))


def records_read_by(version_obj, settings: Settings | None = None) -> int:
    """Records a version has read from the log, whatever ran it (until caught up, continuously, on
    Kubernetes): the Kafka offsets of its checkpoint's newest committed batch minus the log start
    offsets recorded when the version was created, summed over partitions, plus the records it took
    from archives below them (:func:`kappa.delta.archive.archived_records`: all read by its first
    micro-batch) (0: nothing committed)."""
    from kappa.streaming.checkpoint import read_checkpoint, records_read_through

    return records_read_through(read_checkpoint(version_obj.checkpoint_path, settings), version_obj.last("created"))


def quarantine_rate(spark, settings: Settings, spec: AssetSpec, version_obj) -> CheckResult:
    """Quarantined records of this version / records it read from the log
    (:func:`records_read_by`); rows a per-row expectation dropped are not bad records and are left
    out (:func:`row_expectation_checks` counts them). Not evaluated when it has read nothing."""
    from pyspark.sql import functions as F

    read = records_read_by(version_obj, settings)
    q = quarantine_path(settings)
    quarantined = 0
    if exists(join(q, "_delta_log"), settings):
        quarantined = (spark.read.format("delta").load(str(q))
                       .where(f"asset = '{spec.name}' AND version = {version_obj.version}")
                       .where(~F.col("reason").startswith(ROW_DROP_REASON)).count())
    if read <= 0:
        return CheckResult(name=QUARANTINE_CHECK, passed=False, blocking=True, observed="not evaluated",
                           expected=f"<= {spec.max_quarantine_rate}", evaluated=False,
                           details={"quarantined": quarantined, "read": 0,
                                    "why": "the checkpoint has no committed batch: nothing read to measure"})
    rate = quarantined / read
    return CheckResult(
        name=QUARANTINE_CHECK, passed=rate <= spec.max_quarantine_rate, blocking=True,
        observed=round(rate, 6), expected=f"<= {spec.max_quarantine_rate}",
        details={"quarantined": quarantined, "read": read},
    )


def schema_drift(spark, settings: Settings, spec: AssetSpec, version_obj) -> CheckResult:
    """The fields this version's records carried that its declaration does not, and its declared
    optional fields whose values were of another type (the rescued-fields table, read by
    :func:`kappa.delta.rescued.rescued_fields`): per field, how many records and its first value as
    a sample (``details["fields"]``: name -> ``{"records", "sample", "declared"}``, ``declared`` the
    declared type of a changed field, None for an undeclared one). Not blocking (the rows are
    written, the values kept aside): it passes with no drift and otherwise names the fields;
    ``kappa declarations evolve`` proposes the declaration that holds them."""
    from kappa.delta.rescued import rescued_fields

    types = {n: f.type for n, f in (kind_of(spec).declared_columns(spec) or {}).items()}
    found = {name: {"records": f["records"], "sample": f["sample"], "declared": types.get(name)}
             for name, f in sorted(rescued_fields(settings, spec.name, version_obj.version, samples=1).items())}
    new = {n: d for n, d in found.items() if d["declared"] is None}
    retyped = {n: d for n, d in found.items() if d["declared"] is not None}
    parts = []
    if new:
        parts.append(f"{len(new)} undeclared field(s): " + ", ".join(
            f"{f} ({d['records']:,} records, e.g. {d['sample']!r})" for f, d in new.items()))
    if retyped:
        parts.append(f"{len(retyped)} field(s) of another type: " + ", ".join(
            f"{f} (declared {d['declared']}; {d['records']:,} records, e.g. {d['sample']!r})" for f, d in retyped.items()))
    return CheckResult(name=DRIFT_CHECK, passed=not found, blocking=False, observed="; ".join(parts) or "no schema drift",
                       expected="every field declared, of its declared type (reported, not blocking)",
                       details={"fields": found})


def row_expectation_checks(spark, settings: Settings, spec: AssetSpec, version_obj, df) -> list[CheckResult]:
    """One check per per-row expectation (:class:`kappa.spec.RowExpectation`), counted again over
    what the version holds, not from its commits: a ``warn`` (or ``fail``) rule's violations are
    the rows of the version's table ``df`` whose ``expr`` is not true; a ``drop`` rule's, its rows
    in the quarantine table. Rate = violations / (table rows + rows any rule dropped). Blocking
    when the rule sets ``max_rate`` (passed: rate ≤ max_rate); otherwise a warning that passes
    only with no violation. Not evaluated when the version holds no row at all."""
    from pyspark.sql import functions as F

    rules = spec.row_expectations
    if not rules:
        return []
    kept = df.agg(F.count(F.lit(1)).alias("_rows"), *[
        F.count_if(~F.coalesce(F.expr(r.expr), F.lit(False))).alias(r.name) for r in rules]).first()
    dropped: dict[str, int] = {r.name: 0 for r in rules}
    total_dropped = 0
    q = quarantine_path(settings)
    if any(r.on_violation == "drop" for r in rules) and exists(join(q, "_delta_log"), settings):
        mine = (spark.read.format("delta").load(str(q))
                .where(f"asset = '{spec.name}' AND version = {version_obj.version}")
                .where(F.col("reason").startswith(ROW_DROP_REASON)))
        got = mine.agg(F.count(F.lit(1)).alias("_all"), *[
            F.count_if(F.col("reason").contains(f"{ROW_DROP_REASON}{r.name}' failed")).alias(r.name)
            for r in rules]).first()
        dropped, total_dropped = {r.name: got[r.name] for r in rules}, got["_all"]
    total = kept["_rows"] + total_dropped
    out = []
    for r in rules:
        name = row_check_name(r.name)
        bound = f"<= {r.max_rate}" if r.max_rate is not None else "no violation (reported, not blocking)"
        if total == 0:
            out.append(CheckResult(name=name, passed=False, blocking=r.max_rate is not None, observed="not evaluated",
                                   expected=bound, evaluated=False, details={"why": "the version holds no row"}))
            continue
        violations = dropped[r.name] if r.on_violation == "drop" else kept[r.name]
        rate = violations / total
        out.append(CheckResult(
            name=name, passed=rate <= r.max_rate if r.max_rate is not None else violations == 0,
            blocking=r.max_rate is not None,
            observed=f"{violations:,} of {total:,} rows ({rate:.2%}) " + ("dropped" if r.on_violation == "drop" else "kept"),
            expected=bound,
            details={"rule": r.expr, "on_violation": r.on_violation, "violations": violations, "rows": total,
                     "rate": rate}))
    return out


def late_rows(version_obj, named: int = 0) -> CheckResult:
    """Rows behind the watermark while building this version, which must be none: a version that
    lost events is not promoted. ``named``: the version's rows in the late-events table (silver's
    and a pattern's late rows, set aside instead of dropped, and the rows a window's, session's,
    join's or sliding window's watermark dropped, named afterwards by :mod:`kappa.streaming.late`).
    Compares with Spark's count: the ``dropped_by_watermark`` of every recorded run (``caught_up``
    events of until-caught-up runs, ``stopped`` events of continuous runs, ``dropped`` events of
    a Kubernetes driver), of which the runs' ``dropped_named`` were named; the rest (``not_named``)
    are lost rows. Observed = named + not named. Not evaluated when no run of it has reported and
    nothing was set aside."""
    reports = [e["details"] for e in version_obj.events
               if e["event"] in ("caught_up", "stopped", "dropped") and "dropped_by_watermark" in e["details"]]
    if not reports and not named:
        return CheckResult(name=LATE_CHECK, passed=False, blocking=True, observed="not evaluated", expected="0",
                           evaluated=False, details={"why": "no run of this version has reported its metrics"})
    dropped = sum(int(d.get("dropped_by_watermark") or 0) for d in reports)
    dropped_named = sum(int(d.get("dropped_named") or 0) for d in reports)
    not_named = max(0, dropped - dropped_named)
    batches = [b for d in reports for b in (d.get("late_not_named") or [])]
    return CheckResult(name=LATE_CHECK, passed=named + not_named == 0, blocking=True, observed=named + not_named,
                       expected="0", details={"dropped_by_watermark": dropped, "dropped_named": dropped_named,
                                              "not_named": not_named, "late_events": named, "runs": len(reports),
                                              "batches_not_named": batches[:20]})


def late_events_of(spark, settings: Settings, asset: str, version: int) -> int:
    """Rows of ``asset`` ``version`` in the late-events table (0 when the table does not exist)."""
    path = late_events_path(settings)
    if not exists(join(path, "_delta_log"), settings):
        return 0
    return spark.read.format("delta").load(str(path)).where(f"asset = '{asset}' AND version = {version}").count()


def _keys_on_one_side(candidate_df, promoted_df, keys: list[str], examples: int = 5) -> dict:
    """The distinct ``keys`` present in one frame only, in one Spark job: their count per side and
    up to ``examples`` of them per side (the first by key order). Nulls compare equal, as in SQL's
    set operations (``EXCEPT``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tagged = (candidate_df.select(*keys).withColumn("_side", F.lit("candidate"))
              .unionByName(promoted_df.select(*keys).withColumn("_side", F.lit("promoted"))))
    one_side = (tagged.groupBy(*keys).agg(F.min("_side").alias("_side"), F.countDistinct("_side").alias("_sides"))
                .where("_sides = 1").drop("_sides"))
    side = Window.partitionBy("_side")
    rows = (one_side.withColumn("_n", F.count(F.lit(1)).over(side))
            .withColumn("_i", F.row_number().over(side.orderBy(*[F.col(k).asc_nulls_first() for k in keys])))
            .where(F.col("_i") <= examples).collect())
    out: dict = {}
    for name in ("candidate", "promoted"):
        mine = sorted((r for r in rows if r["_side"] == name), key=lambda r: r["_i"])
        out[f"keys_only_in_{name}"] = mine[0]["_n"] if mine else 0
        out[f"examples_only_in_{name}"] = [{k: r[k] for k in keys} for r in mine]
    return out


def shadow_diff(spark, spec: AssetSpec, candidate_df, promoted_df, candidate: int, promoted: int | None) -> CheckResult:
    """Compare the candidate with the promoted version: row counts, keys on one side only (with up
    to five examples), and the relative difference of every numeric column's sum. With no other
    version promoted (``promoted_df`` None) there is nothing to compare: the check is not evaluated
    (not passed, not blocking), never "passed"."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if promoted_df is None:
        return CheckResult(name=SHADOW_CHECK, passed=False, blocking=False, observed="not evaluated",
                           expected="no difference", evaluated=False,
                           details={"why": "no other version of the asset is promoted: nothing to compare with"})
    keys = spec.merge_keys
    numeric = [f.name for f in candidate_df.schema.fields
               if isinstance(f.dataType, T.NumericType) and f.name in promoted_df.columns and f.name not in keys]
    # One job per side for its row count and column sums, one for the keys on one side only.
    cs, ps = (df.agg(F.count(F.lit(1)).alias("_rows"), *[F.sum(c).alias(c) for c in numeric]).first().asDict()
              for df in (candidate_df, promoted_df))
    summary: dict = {"candidate": candidate, "promoted": promoted,
                     "rows_candidate": cs["_rows"], "rows_promoted": ps["_rows"]}
    if keys:
        summary.update(_keys_on_one_side(candidate_df, promoted_df, keys))
    if numeric:
        diffs = {}
        for c in numeric:
            a, b = cs[c] or 0, ps[c] or 0
            rel = abs(a - b) / max(abs(b), 1e-12)
            if rel > 1e-9:
                diffs[c] = {"candidate_sum": a, "promoted_sum": b, "relative_difference": rel}
        summary["aggregate_differences"] = diffs
    differs = (summary["rows_candidate"] != summary["rows_promoted"]
               or summary.get("keys_only_in_candidate") or summary.get("keys_only_in_promoted")
               or summary.get("aggregate_differences"))
    observed = ("no difference" if not differs else
                f"rows {summary['rows_promoted']} -> {summary['rows_candidate']}, "
                f"{summary.get('keys_only_in_candidate', 0)} new keys, {summary.get('keys_only_in_promoted', 0)} missing keys, "
                f"{len(summary.get('aggregate_differences', {}))} column sums differ")
    # A difference fails the check whether or not it blocks: ``shadow_diff_blocking`` decides only
    # whether that failure blocks promotion (a non-blocking one is a warning, never a pass).
    return CheckResult(name=SHADOW_CHECK, passed=not differs,
                       blocking=spec.shadow_diff_blocking, observed=observed,
                       expected="no difference" + ("" if spec.shadow_diff_blocking else " (reported, not blocking)"),
                       details=_jsonable(summary))


def run_gate(settings: Settings, asset: str, version: int, spark=None, registry: Registry | None = None,
             catalog: Catalog | None = None) -> GateReport:
    """Run every check of ``asset`` version ``version`` and record ``gate_passed``/``gate_failed``
    (through ``registry``, the command's snapshot; default: a new one, ``kappa gate``'s; with
    ``catalog``, the command's, default: loaded here).

    Raises :class:`kappa.delta.registry.RegistryError` for an unknown version, :class:`SpecError`
    for a bad expectation declaration, and :class:`kappa.streaming.policy.PolicyError` for a
    declaration recorded at run time that breaks the policy (checked again here, before GX hands
    its row conditions to Spark; nothing is recorded then)."""
    from kappa.streaming.policy import check_before_running
    from kappa.streaming.session import spark_session

    registry = registry or Registry(settings)
    ver = known_version(settings, registry, asset, version)
    spec = recorded_spec(settings, ver, (catalog or catalog_of(settings)).assets.get(asset))  # the version's own checks
    spark = spark or spark_session(settings)
    check_before_running(spark, spec)
    df = spark.read.format("delta").load(ver.table_path)
    checks, docs = _run_gx(spark, settings, spec, version, df)
    kind = kind_of(spec)
    if "quarantine_rate" in kind.gate_checks:
        checks.append(quarantine_rate(spark, settings, spec, ver))
    if "schema_drift" in kind.gate_checks:
        checks.append(schema_drift(spark, settings, spec, ver))
    if "late_rows" in kind.gate_checks:
        # A kind that keeps late rows names them in the late-events table (a window's, join's or
        # sliding window's after Spark dropped them); late_rows compares with Spark's count.
        named = late_events_of(spark, settings, asset, version) if kind.keeps_late_rows else 0
        checks.append(late_rows(ver, named))
    checks += row_expectation_checks(spark, settings, spec, ver, df)
    promoted = registry.promoted(asset)
    if promoted is None or promoted.version == version:
        diff = shadow_diff(spark, spec, df, None, version, None)
    else:
        cut = same_cut(settings, registry, ver, promoted)
        if "why" in cut:
            diff = CheckResult(name=SHADOW_CHECK, passed=False, blocking=spec.shadow_diff_blocking,
                               observed="not evaluated", expected="no difference at one cut", evaluated=False,
                               details={"candidate": version, "promoted": promoted.version, **cut})
        else:
            candidate_df, promoted_df = (spark.read.format("delta").option("versionAsOf", cut[f"{side}_snapshot"])
                                         .load(v.table_path) for side, v in (("candidate", ver), ("promoted", promoted)))
            diff = shadow_diff(spark, spec, candidate_df, promoted_df, version, promoted.version)
            diff.details = {**diff.details, "cut": cut}
    checks.append(diff)
    report = GateReport(asset=asset, version=version, passed=all(c.passed for c in checks if c.blocking),
                        checks=checks, data_docs_path=docs, shadow_diff=diff.details or None)
    registry.record(asset, version, "gate_passed" if report.passed else "gate_failed",
                    checks=[asdict(c) for c in checks], data_docs=docs)
    return report
