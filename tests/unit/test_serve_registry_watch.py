"""The endpoint's idle loop looks at the registry's Delta version four times a second: a
:class:`RegistryWatch` opens the table once and then reads only newer commits, and answers as a
fresh open would (a new commit, delta-rs's checkpoint every 100 commits, no table yet)."""

from __future__ import annotations

from kappa.config import load_settings
from kappa.delta.registry import Registry
from kappa.services.serve import RegistryWatch, registry_version


def test_a_watch_sees_every_commit_a_fresh_open_sees(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    watch = RegistryWatch(settings)
    assert watch.version() is None and registry_version(settings) is None  # no registry yet
    registry = Registry(settings)
    registry.record("flights", 1, "running")
    assert watch.version() == registry_version(settings) == 0
    opened = watch.table
    for n in range(1, 106):  # across delta-rs's checkpoint at version 100
        registry.record("flights", 1, "running", n=n)
        if n % 35 == 0 or n == 105:
            assert watch.version() == registry_version(settings) == n
    assert watch.table is opened  # opened once, updated since
