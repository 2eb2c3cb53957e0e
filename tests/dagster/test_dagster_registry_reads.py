"""The registry is read once per command: a Dagster materialization and ``kappa replay`` each read
the event table once (:data:`kappa.delta.registry.TABLE_READS`, counted in the one function that
reads it), whatever they append along the way, plus one read per iteration of a loop that waits for
another process's events (none on the local runner). A declaration is parsed once per command
(:data:`kappa.spec.catalog.PARSES`, counted in :func:`kappa.spec.parse_declaration`): the
materialization and the replay parse ``flights.yaml`` once, Dagster's ``add_asset`` the text it is
given once, and hands its SQL to Spark's parser once
(:data:`kappa.streaming.policy.SQL_PARSES`) though it validates, runs, gates and records it. A
tiny slice of nycflights13 keeps it quick; the runs, the gate and the promotion are real."""

from __future__ import annotations

import dagster as dg
import pytest

from kappa.dagster.component import HEALTH_CHECK
from kappa.dagster.definitions import build_definitions
from kappa.dagster.resources import KappaResource
from kappa.delta import registry as registry_module
from kappa.delta.registry import Registry
from kappa.lifecycle.promotion import replay
from kappa.spec import catalog as catalog_module
from kappa.streaming import policy

from tests.integration.helpers import WINDOW, WINDOW_ASSET, ingest

pytestmark = pytest.mark.integration

LIMIT = 100


def _reads_of(call) -> tuple[object, int]:
    """(what ``call()`` returns, how many times it read the registry's event table)."""
    before = registry_module.TABLE_READS
    out = call()
    return out, registry_module.TABLE_READS - before


def _parses_of(call, text: str) -> tuple[object, int]:
    """(what ``call()`` returns, how many times it parsed the declaration ``text``)."""
    before = catalog_module.PARSES[text]
    out = call()
    return out, catalog_module.PARSES[text] - before




def test_a_materialization_and_a_replay_each_read_the_registry_once(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=LIMIT)
    defs = build_definitions(settings.assets_dir, resource=KappaResource.from_settings(settings))
    key = dg.AssetKey("flights")
    gate = {k for k in defs.resolve_assets_def(key).check_keys if k.name != HEALTH_CHECK}
    # flights' op: runs it until caught up (v1, created here), then its gate checks; not the
    # query_health check, another op (a command of its own, with its own read)
    job = defs.get_implicit_global_asset_job_def().get_subset(asset_selection={key}, asset_check_selection=gate)

    flights_yaml = (settings.assets_dir / "flights" / "flights.yaml").read_text()
    (result, reads), parses = _parses_of(
        lambda: _reads_of(lambda: job.execute_in_process(instance=dg.DagsterInstance.ephemeral())), flights_yaml)
    assert result.success
    assert any(c.passed for c in result.get_asset_check_evaluations())  # the gate ran
    print(f"materialization: {reads} reads, {parses} parses of flights.yaml")
    assert reads == 1
    assert parses == 0  # the code location's catalog (parsed when the definitions loaded) serves the run

    # `kappa replay flights --promote` (the CLI calls exactly this): v2 created, run, gated, promoted
    (report, reads), parses = _parses_of(
        lambda: _reads_of(lambda: replay(settings, "flights", promote=True, spark=spark)), flights_yaml)
    assert report.versions == {"flights": 2} and report.promoted
    print(f"replay: {reads} reads, {parses} parses of flights.yaml")
    assert reads == 1
    assert parses == 1  # the command's one catalog; the version's recorded text is that same text
    assert Registry(settings).promoted("flights").version == 2

    # Dagster's add_asset (not applied: validate, policy, run on a sample in scratch, gate there,
    # record as proposed): one parse of the text, one hand-over of its SQL to Spark's parser
    add = defs.get_job_def("add_asset")
    sql_before = policy.SQL_PARSES
    result, parses = _parses_of(lambda: add.execute_in_process(
        run_config={"ops": {"validate_declaration": {"config": {"declaration": WINDOW, "apply": False}}}},
        instance=dg.DagsterInstance.ephemeral()), WINDOW)
    assert result.success
    analyzed = result.output_for_node("analyze_declaration", "analyzed")
    assert analyzed["spec"].name == WINDOW_ASSET
    sql_parses = policy.SQL_PARSES - sql_before
    print(f"add_asset: {parses} parses of the text, {sql_parses} hand-overs to Spark's parser")
    assert parses == 1 and sql_parses == 1
