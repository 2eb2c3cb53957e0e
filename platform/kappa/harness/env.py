"""An isolated Kappa environment for harness runs and tests: its own copy of ``assets/``, its own
broker on free loopback ports, warehouse and checkpoints; the user's ``.kappa`` is never touched."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from kappa.config import Settings, load_settings
from kappa.core.processes import free_port  # re-exported: the tests' free ports
from kappa.spec.catalog import nested_projects


@dataclass
class IsolatedEnv:
    """Fresh Kappa state in ``root``: ``assets/`` (a copy), ``home/`` (broker, warehouse,
    checkpoints), ``logs/``; a broker on free loopback ports once :meth:`start_broker` ran."""

    root: Path
    settings: Settings

    @property
    def logs(self) -> Path:
        """``<root>/logs``, created on first use: where the harness's subprocesses write."""
        path = self.root / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        """The environment for a ``kappa`` subprocess that must see only this state."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPA_")}
        s = self.settings
        env.update({
            "KAPPA_PROJECT_DIR": str(s.project_dir),
            "KAPPA_HOME": str(s.home),
            "KAPPA_ASSETS_DIR": str(s.assets_dir),
            "KAPPA_KAFKA_PORT": str(s.kafka_port),
            "KAPPA_KAFKA_CONTROLLER_PORT": str(s.kafka_controller_port),
            "KAPPA_SPARK_DRIVER_MEMORY": s.spark_driver_memory,
            "KAPPA_SPARK_DRIVER_JIT": s.spark_driver_jit,
            "KAPPA_SPARK_MASTER": s.spark_master,
            "KAPPA_SHUFFLE_PARTITIONS": str(s.shuffle_partitions),
            "KAPPA_MAX_OFFSETS_PER_TRIGGER": str(s.max_offsets_per_trigger),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(extra)
        return env

    def start_broker(self) -> None:
        """Start this environment's own broker (:func:`kappa.kafka.broker.start`, up to 120 s).
        Raises :class:`kappa.kafka.broker.BrokerError` if it does not come up."""
        from kappa.kafka import broker

        broker.start(self.settings, timeout_s=120)

    def stop_broker(self) -> None:
        """Stop this environment's broker (SIGTERM, SIGKILL after 20 s); a broker that is not
        running is not an error."""
        from kappa.kafka import broker

        try:
            broker.stop(self.settings, grace_s=20)
        except broker.BrokerError:
            pass


def isolated_env(
    base: Settings,
    name: str,
    edit: Callable[[str, dict], None] | None = None,
    **overrides: object,
) -> IsolatedEnv:
    """Make ``<base.home>/<name>-<stamp>/`` with a copy of ``base.assets_dir`` (each asset YAML
    passed through ``edit(asset_name, doc)``) and settings pointing only inside it.

    ``overrides`` go to :func:`kappa.config.load_settings` (e.g. ``spark_driver_memory``)."""
    assert base.home is not None and base.assets_dir is not None
    root = base.home / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    assets = root / "assets"
    shutil.copytree(base.assets_dir, assets)
    projects = nested_projects(assets)  # another project's declarations (assets/nexmark): not edited
    for path in sorted(assets.rglob("*.yaml")):
        if path.name == "topics.yaml" or edit is None or any(p in path.parents for p in projects):
            continue
        doc = yaml.safe_load(path.read_text())
        if not isinstance(doc, dict) or "name" not in doc:
            continue  # not an asset declaration (e.g. connectors.yaml)
        edit(doc["name"], doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    home = root / "home"
    settings = load_settings(
        project_dir=base.project_dir, home=home, assets_dir=assets,
        warehouse=home / "warehouse", checkpoints=home / "checkpoints",
        kafka_port=free_port(), kafka_controller_port=free_port(),
        bootstrap_servers=None, **{"spark_master": base.spark_master,
                                   "shuffle_partitions": base.shuffle_partitions, **overrides},
    )
    return IsolatedEnv(root=root, settings=settings)
