"""The ``add_asset``, ``edit_asset`` and ``retire_asset`` jobs: data engineers add, edit and retire
streaming assets from the Dagster UI (Jobs -> add_asset -> Launchpad). Each calls the same library
functions as its CLI twin (``kappa declarations add|edit|retire``, :mod:`kappa.lifecycle.declare`):

.. code-block:: yaml

    ops:
      validate_declaration:   # the one step that takes config; the others take it from here
        config:
          declaration: |        # the asset's YAML, the same fields as a file in assets/
            name: late_departures
            layer: gold
            source: {asset: flights}
            transform:
              sql: SELECT event_id, dep_delay / 60.0 AS delay_hours FROM input WHERE dep_delay > 60
          apply: false          # true: record it and reload the code location
          who: ana@example.com  # Dagster OSS has no login: who makes the change, as recorded
          reason: ""

Steps of ``add_asset`` (``edit_asset`` the same, its config, with ``expected_fingerprint``, given
to ``validate_edit``, its record step ``record_edit``):

1. ``validate_declaration`` — the same validation as a file, with the catalog it would join, plus
   the Dagster rules of the code location (owner, check names) and the run-time policy
   (:mod:`kappa.streaming.policy`). A bad declaration fails the step with the message naming
   ``declarations:<name>`` and the field, or the policy's rule. Metadata: the fingerprints, the
   kind, what it reads, its checks.
2. ``analyze_declaration`` — Spark runs the declaration's query, available-now, on a bounded
   sample of its upstreams' promoted tables in a scratch location
   (:func:`kappa.lifecycle.declare.analyze`); metadata: the output schema, sample rows, and the
   gate's checks on the sample (expectations, quarantine rate, late rows). A query that does not
   resolve fails the step with Spark's message.
3. ``record_declaration`` (``record_edit``) — ``proposed`` without ``apply``, else ``added``
   (``edited``), in the declarations log (:mod:`kappa.delta.declarations`).
4. ``reload_code_location`` — only with ``apply``: asks the webserver (``KAPPA_DAGSTER_URL``) to
   reload the code location (``DagsterGraphQLClient.reload_repository_location``), then waits until
   the asset key is in the workspace; a location that fails to load fails the step with its error,
   and the change is withdrawn so the location loads again (:func:`kappa.lifecycle.declare.withdraw`:
   an added declaration is ``retired``, an edited one gets its previous text back as ``edited``).

``retire_asset`` (config ``asset``, ``who``, ``reason``) retires a declaration, refused while another
asset or a dbt model reads it, stops its running versions, keeps its tables, and reloads.
"""


import json
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

import dagster as dg
from pydantic import Field

from kappa.config import Settings
from kappa.dagster.rules import check_dagster_rules
from kappa.dagster.names import ADD_ASSET_JOB, EDIT_ASSET_JOB, EVOLVE_ASSET_JOB, RETIRE_ASSET_JOB, LoadOptions
from kappa.dagster.failure import as_failure
from kappa.errors import KappaError

#: Declaration changes from Dagster run one at a time: each validates against the catalog, then records.
POOL = "kappa_declarations"


class DeclarationConfig(dg.Config):
    """Run config of ``add_asset`` (``kappa declarations add FILE [--apply]``)."""

    declaration: str = Field(description="The asset's YAML: the same fields as a file in assets/ "
                             "(name, layer, source, transform, watermark, expectations, ...).")
    apply: bool = Field(False, description="Record it and reload the code location (false: validate, check the "
                        "policy and record it as proposed only).")
    who: str = Field("", description="Who makes the change, as recorded (Dagster OSS has no login).")
    reason: str = Field("", description="Why, as recorded.")


class EditConfig(DeclarationConfig):
    """Run config of ``edit_asset`` (``kappa declarations edit FILE --expected-fingerprint F``)."""

    expected_fingerprint: str = Field(description="The fingerprint of the text you edited (`kappa declarations "
                                      "list`); an edit over text someone changed since is refused.")


class EvolveConfig(dg.Config):
    """Run config of ``evolve_asset`` (``kappa declarations evolve ASSET [--apply]``)."""

    asset: str = Field(description="A parse (silver) asset whose records carry fields it does not declare.")
    apply: bool = Field(False, description="Record the evolved declaration as an edit and reload the code location "
                        "(a declaration recorded in the warehouse; a file of assets/ is changed by a commit). "
                        "False: show the proposal only.")
    who: str = Field("", description="Who makes the change, as recorded (Dagster OSS has no login).")
    reason: str = Field("", description="Why, as recorded.")


class RetireConfig(dg.Config):
    """Run config of ``retire_asset`` (``kappa declarations retire NAME``)."""

    asset: str = Field(description="The declaration to retire (refused while assets or dbt models read it).")
    who: str = Field("", description="Who retires it, as recorded (Dagster OSS has no login).")
    reason: str = Field("", description="Why, as recorded.")


def _settings(context, options: LoadOptions) -> Settings:
    return context.resources.kappa.settings(assets_dir=str(options.assets_path))


def _who(config, context) -> str:
    return config.who or context.run.tags.get("dagster/user", "") or "dagster"


# -- the reload ------------------------------------------------------------------------------------
def _graphql(url: str, query: str, timeout: float = 30) -> dict:
    req = urllib.request.Request(f"{url.rstrip('/')}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def asset_in_workspace(url: str, asset: str) -> bool:
    """Whether the webserver at ``url`` serves asset key ``[asset]`` (GraphQL ``assetNodeOrError``)."""
    answer = _graphql(url, '{ assetNodeOrError(assetKey: {path: [%s]}) { __typename } }' % json.dumps(asset))
    return answer.get("data", {}).get("assetNodeOrError", {}).get("__typename") == "AssetNode"


def reload_location(settings: Settings, asset: str, present: bool, timeout_s: float = 120.0) -> float:
    """Reload the code location ``settings.dagster_location`` through the webserver at
    ``settings.dagster_url`` and wait until asset ``asset`` is ``present`` in the workspace (or gone).
    Returns the seconds it took. Raises :class:`ReloadError` with the location's error when it fails
    to load, or when the asset does not appear within ``timeout_s``."""
    from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError, ReloadRepositoryLocationStatus

    start = time.monotonic()
    url = urlparse(settings.dagster_url)
    try:
        client = DagsterGraphQLClient(url.hostname or "127.0.0.1", port_number=url.port,
                                      use_https=url.scheme == "https", path_prefix=url.path.rstrip("/"))
        info = client.reload_repository_location(settings.dagster_location)
    except (DagsterGraphQLClientError, OSError) as exc:
        raise ReloadError(f"could not reload code location {settings.dagster_location!r} at {settings.dagster_url}: "
                          f"{exc}") from None
    if info.status != ReloadRepositoryLocationStatus.SUCCESS:
        raise ReloadError(f"code location {settings.dagster_location!r} failed to load: {info.message}")
    while asset_in_workspace(settings.dagster_url, asset) != present:
        if time.monotonic() - start > timeout_s:
            raise ReloadError(f"asset {asset!r} is {'not yet' if present else 'still'} in the workspace "
                              f"{timeout_s:.0f} s after reloading {settings.dagster_location!r}")
        time.sleep(1.0)
    return time.monotonic() - start


class ReloadError(KappaError, RuntimeError):
    """The code location did not reload with the change (its load error), or the asset did not show."""


# -- jobs ------------------------------------------------------------------------------------------
def _validate_op(options: LoadOptions, editing: bool):
    @dg.op(name="validate_edit" if editing else "validate_declaration", required_resource_keys={"kappa"},
           tags={"kind": "spark"}, pool=POOL,
           out={"checked": dg.Out(dict)})
    def validate_declaration(context: dg.OpExecutionContext, config: EditConfig if editing else DeclarationConfig):
        """Validate the declaration with the catalog it would join, the code location's rules and
        the run-time policy (Spark parses its SQL)."""
        from kappa.delta.declarations import text_fingerprint
        from kappa.lifecycle import declare

        settings = _settings(context, options)
        started = time.monotonic()
        with as_failure():
            spec, _ = declare.validate(settings, config.declaration, replacing=editing)
            if editing:  # a stale edit fails first, before Spark starts
                declare.check_fresh(settings, spec, config.expected_fingerprint)
            check_dagster_rules(spec)
            # Spark starts only when a rule that needs none has not refused it already.
            declare.check_policy(settings, spec, lambda: context.resources.kappa.spark(settings))
        seconds = time.monotonic() - started
        context.log.info(f"{spec.where}: valid and within policy ({seconds:.1f} s)")
        # The next steps take the launchpad's config from here: it is given once, to this step; and
        # the spec, parsed and validated once here (the run's steps share one process).
        checked = {**config.model_dump(), "asset": spec.name, "fingerprint": text_fingerprint(config.declaration),
                   "spec": spec}
        yield dg.Output(checked, "checked", metadata={
            "asset": spec.name, "kind": spec.transform.kind, "layer": spec.layer,
            "reads": ", ".join(spec.topics or spec.upstream),
            "fingerprint": checked["fingerprint"], "logic_fingerprint": spec.fingerprint(),
            "checks": ", ".join(next(iter(e)) for e in spec.expectations) or "none declared",
            "seconds": round(seconds, 2),
        })

    return validate_declaration


def _analyze_op(options: LoadOptions):
    @dg.op(name="analyze_declaration", required_resource_keys={"kappa"}, tags={"kind": "spark"}, pool=POOL,
           out={"analyzed": dg.Out(dict)})
    def analyze_declaration(context: dg.OpExecutionContext, checked: dict):
        """Run the declaration's query available-now on a bounded sample of its upstreams in a
        scratch location: output schema, sample rows, and the gate's checks on the sample."""
        from kappa.lifecycle import declare

        settings = _settings(context, options)
        spec = checked["spec"]  # the validate step's
        with as_failure():
            try:
                analysis = declare.analyze(settings, spec, context.resources.kappa.spark(settings))
            except declare.DeclarationError as exc:  # reads a topic directly: nothing to sample here
                context.log.warning(str(exc))
                yield dg.Output(checked, "analyzed", metadata={"analysis": "not evaluated: " + str(exc)})
                return
        for c in analysis.checks:
            verdict = "passed" if c["passed"] else ("FAILED" if c["evaluated"] else "not evaluated")
            (context.log.info if c["passed"] or not c["blocking"] else context.log.warning)(
                f"on the sample: {c['name']}: {verdict} (observed {c['observed']})")
        yield dg.Output(checked, "analyzed", metadata={
            "schema": dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in analysis.schema.items()]),
            "sample_rows": dg.MetadataValue.md(_markdown(analysis.rows, list(analysis.schema))),
            "rows_from_sample": analysis.row_count,
            "sample": dg.MetadataValue.json(analysis.sample),
            "checks_on_sample": dg.MetadataValue.json(analysis.checks),
            "checks_passed": analysis.passed,
            "seconds": round(analysis.seconds, 2),
        })

    return analyze_declaration


def _markdown(rows: list[dict], columns: list[str]) -> str:
    """``rows`` as a Markdown table (the step's ``sample_rows``)."""
    def cell(v: object) -> str:
        return "" if v is None else str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) if rows else "(the sample produced no rows)"


def _record_op(options: LoadOptions, editing: bool):
    @dg.op(name="record_edit" if editing else "record_declaration", required_resource_keys={"kappa"},
           tags={"kind": "delta"}, pool=POOL,
           out={"applied": dg.Out(dict, is_required=False)})
    def record_declaration(context: dg.OpExecutionContext, analyzed: dict):
        """Record the declaration: ``proposed`` without ``apply``, else ``added`` (``edited``)."""
        from kappa.lifecycle import declare

        config = (EditConfig if editing else DeclarationConfig)(
            **{k: v for k, v in analyzed.items() if k not in ("asset", "fingerprint", "spec")})
        settings = _settings(context, options)
        with as_failure():
            if editing:
                change = declare.edit(settings, config.declaration, config.expected_fingerprint, apply=config.apply,
                                      checked=analyzed["spec"],
                                      who=_who(config, context), reason=config.reason, run_id=context.run_id,
                                      spark=context.resources.kappa.spark(settings))
            else:
                change = declare.add(settings, config.declaration, apply=config.apply, who=_who(config, context),
                                     checked=analyzed["spec"],
                                     reason=config.reason, run_id=context.run_id,
                                     spark=context.resources.kappa.spark(settings))
        for line in change.notes:
            context.log.info(line)
        if config.apply:
            yield dg.Output({"asset": change.asset, "fingerprint": change.fingerprint, "event": change.event},
                            "applied", metadata={
                "event": change.event, "fingerprint": change.fingerprint, "logic_changed": change.logic_changed,
                "notes": "\n".join(change.notes)})

    return record_declaration


def _reload_op(options: LoadOptions):
    @dg.op(name="reload_code_location", required_resource_keys={"kappa"}, pool=POOL)
    def reload_code_location(context: dg.OpExecutionContext, applied: dict) -> dict:
        """Reload the code location and wait until the asset is (or, retired, is no longer) in the
        workspace; on a load error, withdraw the change so the location loads again."""
        from kappa.lifecycle import declare

        settings = _settings(context, options)
        present = applied["event"] != "retired"
        with as_failure():
            try:
                seconds = reload_location(settings, applied["asset"], present)
            except ReloadError as exc:
                if present:  # added or edited: withdraw it, so the location loads as it did before
                    try:
                        declare.withdraw(settings, applied["asset"], applied["fingerprint"], run_id=context.run_id,
                                         reason=f"withdrawn: the code location failed to load: {exc}")
                        reload_location(settings, applied["asset"], applied["event"] == "edited")
                    except KappaError as again:  # changed since, or the location still does not load
                        context.log.error(f"{applied['asset']}: after the failed reload: {again}")
                raise
        context.log.info(f"code location {settings.dagster_location!r} reloaded in {seconds:.1f} s: "
                         f"{applied['asset']} is {'in' if present else 'gone from'} the workspace")
        return {**applied, "reload_s": round(seconds, 2)}

    return reload_code_location


def build_declaration_jobs(options: LoadOptions) -> list[dg.JobDefinition]:
    """``add_asset``, ``edit_asset`` and ``retire_asset`` (module docstring). Op names are unique in
    a repository, so the jobs share one ``analyze_declaration`` and one ``reload_code_location``,
    and ``edit_asset``'s own steps are ``validate_edit`` and ``record_edit``."""
    analyze, reload = _analyze_op(options), _reload_op(options)
    validate_add, record_add = _validate_op(options, False), _record_op(options, False)
    validate_edit, record_edit = _validate_op(options, True), _record_op(options, True)

    @dg.job(name=ADD_ASSET_JOB, tags={"kappa/kind": "declarations"},
            description="Add a streaming asset from its YAML: validate, check the policy, run it on a sample, "
                        "record, reload (kappa declarations add).")
    def add_asset():
        reload(record_add(analyze(validate_add())))

    @dg.job(name=EDIT_ASSET_JOB, tags={"kappa/kind": "declarations"},
            description="Edit a declared streaming asset (kappa declarations edit): a stale edit is refused; a "
                        "change of logic needs a replay.")
    def edit_asset():
        reload(record_edit(analyze(validate_edit())))

    return [add_asset, edit_asset, _retire_job(options, reload), _evolve_job(options, reload)]


def _evolve_job(options: LoadOptions, reload) -> dg.JobDefinition:
    """``evolve_asset``: ``kappa declarations evolve`` (:func:`kappa.lifecycle.evolve.propose`) from
    the launchpad, its reload the shared one."""
    @dg.op(name="evolve_declaration", required_resource_keys={"kappa"}, tags={"kind": "spark"}, pool=POOL,
           out={"proposal": dg.Out(dict), "applied": dg.Out(dict, is_required=False)})
    def evolve_declaration(context: dg.OpExecutionContext, config: EvolveConfig):
        """Propose the declaration with the undeclared fields the asset's records carried and the
        declared fields whose values were of another type (typed from their values), tried on the
        rescued records read back from the log (shown as metadata); with ``apply``, record it as an
        edit unless the sample shows it does not hold the drift."""
        from kappa.delta.declarations import DeclarationError, Declarations
        from kappa.lifecycle import declare
        from kappa.lifecycle.evolve import propose, sample_problems, try_on_sample

        settings = _settings(context, options)
        with as_failure():
            ev = propose(settings, config.asset)
            sample = try_on_sample(settings, ev, context.resources.kappa.spark(settings)) if ev.fields else None
            fields = [{"field": n, "declared": f["was"] or "(undeclared)", "type": f["type"], "records": f["records"],
                       "sample": f["sample"], "parsed on the sample": sample["parsed"].get(n, 0)}
                      for n, f in ev.fields.items()]
        problems = sample_problems(sample)
        yield dg.Output({"asset": config.asset, "version": ev.version, "fields": ev.fields, "sample": sample},
                        "proposal", metadata={
            "fields": dg.MetadataValue.md(_markdown(fields, list(fields[0])) if fields else "no schema drift"),
            "sample": dg.MetadataValue.json(sample or {}),
            "proposed": dg.MetadataValue.md(f"```yaml\n{ev.proposed}```"), "version": ev.version})
        with as_failure():
            if not config.apply or not ev.fields:
                context.log.info(f"{config.asset}: {len(ev.fields)} drifted field(s); nothing applied")
                return
            if problems:
                raise DeclarationError(f"{ev.origin}: evolve: not applied: the proposal does not hold the drift on "
                                       f"the sample ({problems[0]}); edit the declaration by hand")
            if ev.path is not None:
                raise DeclarationError(
                    f"{ev.origin}: a file of assets/ is changed by a commit, not from Dagster: the evolved text is "
                    "this step's 'proposed' metadata")
            current = Declarations(settings).active()[config.asset]
            change = declare.edit(settings, ev.proposed, current.fingerprint, who=_who(config, context),
                                  reason=config.reason or "evolve: schema drift", run_id=context.run_id)
        for line in change.notes:
            context.log.info(line)
        yield dg.Output({"asset": change.asset, "fingerprint": change.fingerprint, "event": change.event}, "applied")

    @dg.job(name=EVOLVE_ASSET_JOB, tags={"kappa/kind": "declarations"},
            description="Schema drift into a declaration (kappa declarations evolve): the undeclared fields its records "
                        "carried, typed; applied, a replay builds the next version with them.")
    def evolve_asset():
        _proposal, applied = evolve_declaration()
        reload(applied)

    return evolve_asset


def _retire_job(options: LoadOptions, reload) -> dg.JobDefinition:
    """``retire_asset`` (module docstring), its reload the shared one."""
    @dg.op(name="retire_declaration", required_resource_keys={"kappa"}, pool=POOL, out={"applied": dg.Out(dict)})
    def retire_declaration(context: dg.OpExecutionContext, config: RetireConfig) -> dict:
        """Retire the declaration: refused while assets or dbt models read it; stops its running
        versions; keeps its tables."""
        from kappa.lifecycle import declare

        settings = _settings(context, options)
        with as_failure():
            change = declare.retire(settings, config.asset, who=_who(config, context), reason=config.reason,
                                    run_id=context.run_id, runner=context.resources.kappa.build_runner(settings))
        for line in change.notes:
            context.log.info(line)
        return {"asset": config.asset, "event": "retired", "fingerprint": change.fingerprint}

    @dg.job(name=RETIRE_ASSET_JOB, tags={"kappa/kind": "declarations"},
            description="Retire a declared streaming asset (kappa declarations retire); its tables are kept.")
    def retire_asset():
        reload(retire_declaration())

    return retire_asset
