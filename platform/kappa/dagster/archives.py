"""The ``kappa_archives`` sensor: a topic's archive always on.

A topic that bounds its retention names the ``raw`` asset that archives it (``assets/topics.yaml``:
``archive``, :mod:`kappa.delta.archive`); a record the broker deletes before that asset's query read
it is lost to every replay. So the archive's query must run all the time, not when someone
materializes it. Every tick (``sensor_interval_s``) this sensor asks the runner for the query of
each archive asset's latest version (:meth:`kappa.runners.base.Runner.status`) and requests a
``continuous`` materialization of every one that is not pending, running or retrying: none was
ever started (a fresh deployment: the materialization creates v1), or it failed or was stopped.
The run key names the version and the query's state (the operator's application state and its
error), so one stop asks for one restart, not one a tick.

On by default where a query outlives the run that starts it (the kubernetes runner: a
SparkApplication the operator keeps; ``Runner.detached``). On the local runner a query lives in the
process that started it, which a sensor cannot see from its own, so the sensor is off by default
there: keep ``kappa run flights_bronze weather_bronze --continuous`` running, and ``kappa status``
turns red when an archive falls behind (:func:`kappa.quality.archive.archive_health`).
"""

import hashlib

import dagster as dg

from kappa.config import load_settings
from kappa.dagster.names import ARCHIVE_SENSOR, LoadOptions, RunMode
from kappa.dagster.resources import KappaResource
from kappa.delta.registry import Registry
from kappa.runners import runner_class
from kappa.runners.base import Outcome
from kappa.spec import Catalog

#: The query states in which an archive needs nothing: started and not over.
_ALIVE = (Outcome.PENDING, Outcome.RUNNING, Outcome.RETRYING)


def archive_assets(catalog: Catalog) -> list[str]:
    """The assets that archive a topic of ``catalog`` (``topics.<t>.archive``), sorted."""
    return sorted({t.archive for t in catalog.topics.values() if t.archive is not None})


def build_archive_sensor(catalog: Catalog, options: LoadOptions) -> dg.SensorDefinition | None:
    """The ``kappa_archives`` sensor over :func:`archive_assets` (None when no topic has an
    archive): running by default on a runner whose queries outlive their run, stopped otherwise
    (module docstring). Each tick returns a ``RunRequest`` per archive whose query is not alive:
    the asset selected alone, run config ``mode: continuous``."""
    archives = archive_assets(catalog)
    if not archives:
        return None
    detached = runner_class(load_settings()).detached

    @dg.sensor(name=ARCHIVE_SENSOR, minimum_interval_seconds=options.sensor_interval_s,
               asset_selection=[dg.AssetKey(a) for a in archives],
               default_status=dg.DefaultSensorStatus.RUNNING if detached else dg.DefaultSensorStatus.STOPPED,
               description="Keeps the query of every topic's archive running (assets/topics.yaml: archive): "
                           "starts it continuous when it never ran, failed or stopped.")
    def _sensor(context: dg.SensorEvaluationContext, kappa: KappaResource):
        settings = kappa.settings(assets_dir=str(options.assets_path))
        runner = kappa.build_runner(settings)
        registry = Registry(settings)
        requests = []
        for name in archives:
            version = registry.latest(name)
            if version is None:
                key = f"{name}:new"
            else:
                status = runner.status(name, version.version)
                if status.outcome in _ALIVE:
                    continue
                outcome = status.outcome.value if status.outcome is not None else "none"
                # one request per stop: the version, its state and error, and the registry events since
                why = hashlib.sha1(f"{status.state}|{status.error}|{len(version.events)}".encode()).hexdigest()[:12]
                key = f"{name}:v{version.version}:{outcome}:{why}"
            context.log.info(f"{name}: its query is not running ({key}); starting it continuous")
            requests.append(dg.RunRequest(run_key=key, asset_selection=[dg.AssetKey(name)],
                                          run_config={"ops": {name: {"config": {"mode": RunMode.continuous.value}}}},
                                          tags={"kappa/archive": name}))
        if not requests:
            return dg.SkipReason(f"every archive's query runs: {', '.join(archives)}")
        return requests

    return _sensor
