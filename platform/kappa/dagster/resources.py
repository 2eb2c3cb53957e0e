"""The one Dagster resource: Kappa's settings and the process's SparkSession.

Settings are read from ``KAPPA_*`` (see :mod:`kappa.config`) when a run or sensor tick asks for them,
not when the code location loads; a field set here wins over the environment. Tests point a run at a
private warehouse and broker by setting fields.

Example::

    KappaResource(home="/tmp/t/home", kafka_port=39092).settings().warehouse
    # PosixPath('/tmp/t/home/warehouse')

The code location binds its resources :func:`sealed`: a Dagster resource's fields are otherwise
settable from any run's config (the launchpad's ``resources.kappa.config.kubernetes.image``, a
``warehouse``, dbt's ``dbt_executable``), which would let whoever can launch a run choose the
image, the service account or the tables a run writes.
"""

from __future__ import annotations

import dagster as dg

from kappa.config import Settings, load_settings


def sealed(resource: dg.ConfigurableResource, name: str) -> dg.ResourceDefinition:
    """``resource`` as it is, taking no run config: a run config that sets any of its fields fails
    to launch with Dagster's ``DagsterInvalidConfigError`` ("Received unexpected config entry …
    at path root:resources:<name>:config"). Settings come from the code location's environment
    (``KAPPA_*``, on Kubernetes the chart's ConfigMap) or from the fields given here."""
    return dg.ResourceDefinition(resource_fn=lambda _: resource, config_schema={},
                                 description=f"{type(resource).__name__} ({name}), fixed by the code location: "
                                             f"run config cannot change it")


class KappaResource(dg.ConfigurableResource):
    """Overrides of :class:`kappa.config.Settings`; unset fields come from ``KAPPA_*`` or defaults."""

    project_dir: str | None = None
    home: str | None = None
    assets_dir: str | None = None
    warehouse: str | None = None
    checkpoints: str | None = None
    kafka_port: int | None = None
    kafka_controller_port: int | None = None
    bootstrap_servers: str | None = None
    runner: str | None = None
    #: Overrides of the kubernetes runner's ``KAPPA_K8S_*`` settings, keys without the prefix
    #: (``{"image": "…", "warehouse": "s3a://…"}``); see :mod:`kappa.dagster.kubernetes`.
    kubernetes: dict[str, str] | None = None
    #: How long a materialization waits for its SparkApplication to run (s), and how often it polls.
    kubernetes_start_timeout_s: float = 120.0
    kubernetes_poll_s: float = 2.0
    #: How long a run waits for a version to catch up (s); None: as long as it takes.
    catch_up_timeout_s: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> "KappaResource":
        """A resource that reproduces ``settings`` exactly (paths, ports, bootstrap servers)."""
        return cls(
            project_dir=str(settings.project_dir), home=str(settings.home), assets_dir=str(settings.assets_dir),
            warehouse=str(settings.warehouse), checkpoints=str(settings.checkpoints),
            kafka_port=settings.kafka_port, kafka_controller_port=settings.kafka_controller_port,
            bootstrap_servers=settings.bootstrap_servers,
        )

    def settings(self, **overrides: object) -> Settings:
        """``load_settings`` with this resource's fields, then ``overrides``, over the environment."""
        # Settings ignores the fields it does not know (the kubernetes_* ones).
        fields = {k: v for k, v in self.model_dump().items() if v is not None}
        return load_settings(**{**fields, **overrides})

    def build_runner(self, settings: Settings):
        """The runner ``settings.runner`` names (:func:`kappa.runners.pick_runner`), with this
        resource's kubernetes overrides, poll interval and start timeout, and this process's Spark."""
        from kappa.runners import pick_runner

        config = {f"KAPPA_K8S_{k.upper()}": str(v) for k, v in (self.kubernetes or {}).items()}
        return pick_runner(settings, config=config, poll_s=self.kubernetes_poll_s,
                           start_timeout_s=self.kubernetes_start_timeout_s)

    def spark(self, settings: Settings):
        """The process's SparkSession (created on first use; one JVM per run process, which is why
        the code location runs every step of a run in one process)."""
        from kappa.streaming.session import spark_session

        return spark_session(settings)
