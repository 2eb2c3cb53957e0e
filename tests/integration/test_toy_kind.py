"""A transform kind is one module (issue 42): the toy kind ``echo`` of ``toy_kind.py``, which
nothing else in the repository names, is validated when a declaration uses it, runs on the local
runner, is gated, forgets a key and is admitted from the Dagster UI by the run-time policy, its
fields classified by the roles they declare. Four records on a one-partition topic."""

from __future__ import annotations

import sys

import pytest
import yaml

from kappa.ingest.producer import produce
from kappa.kafka.topics import ensure_topics
from kappa.lifecycle.forget import forget
from kappa.quality.gate import run_gate
from kappa.runners import run_until_caught_up
from kappa.spec import SpecError, load_catalog, parse_declaration
from kappa.spec import asset as spec_asset
from kappa.streaming.kinds import kind_of, kinds
from kappa.streaming.policy import PolicyError, check_runtime_declaration

from .helpers import table

pytestmark = pytest.mark.integration

ASSET = {
    "name": "echoed", "layer": "bronze", "description": "Notes as text.",
    "source": {"kafka": {"topics": ["notes"]}},
    "transform": {"echo": {"column": "text", "keep": "text <> 'skip'"}},
    "expectations": [{"expect_column_values_to_not_be_null": {"column": "text"}}],
}


@pytest.fixture
def echo():
    """The toy kind's module, imported (which registers its kind) and unregistered afterwards."""
    from . import toy_kind

    assert "echo" in kinds()
    yield toy_kind
    spec_asset._MODELS.pop("echo")
    sys.modules.pop(toy_kind.__name__)


def _declared(**changes) -> str:
    doc = {**ASSET, "name": "echoed_again", **changes}
    return yaml.safe_dump(doc, sort_keys=False)


def test_a_kind_in_one_module_is_validated_run_gated_forgotten_and_admitted(echo, make_env, spark, tmp_path):
    source = tmp_path / "toy_assets"
    source.mkdir()
    (source / "topics.yaml").write_text(yaml.safe_dump({"topics": {"notes": {"partitions": 1,
                                                                             "description": "Toy notes."}}}))
    (source / "echoed.yaml").write_text(yaml.safe_dump(ASSET, sort_keys=False))
    settings, suffix = make_env(source=source, name="toy")
    topic = f"notes_{suffix}"

    # Validated: the declaration layer knows the kind, asks its model, and applies its rules.
    catalog = load_catalog(settings.assets_dir)
    spec = catalog["echoed"]
    assert (spec.transform.kind, spec.sink_mode, spec.merge_keys) == ("echo", "append", ["topic", "partition", "offset"])
    assert kind_of(spec) is echo.KIND
    with pytest.raises(SpecError, match="declarations:echoed_again: .*an echo asset has no event time"):
        parse_declaration(_declared(watermark={"column": "text", "delay": "1 minute"}), "declarations:echoed_again")
    with pytest.raises(SpecError, match=r"transform\.echo\.column: Input should be a valid string"):
        parse_declaration(_declared(transform={"echo": {"column": 3}}), "declarations:echoed_again")

    # Run on the local runner.
    ensure_topics(settings, {topic: catalog.topics[topic]})
    produce(settings, topic, [(b"ana", b"hello", None), (b"bob", b"skip", None), (b"bob", b"world", None),
                              (b"ana", b"again", None)])
    run_until_caught_up(settings, ["echoed"], spark=spark)
    rows = table(settings, "echoed")
    assert sorted(zip([bytes(k) for k in rows["key"]], rows["text"])) == [(b"ana", "again"), (b"ana", "hello"),
                                                                         (b"bob", "world")]

    # Gated: its expectations run on its table.
    report = run_gate(settings, "echoed", 1, spark=spark)
    assert report.passed, [c for c in report.checks if not c.passed]

    # Forgotten: its Kind says forget finds a key's rows by the record key.
    forget(settings, topic, "ana", "test: the toy kind forgets by record key", spark=spark)
    assert list(table(settings, "echoed", 1)["text"]) == ["world"]

    # Admitted from the UI: every text field has the role its model declares; its SQL expression is
    # parsed by Spark and held to the allow-list like any kind's.
    check_runtime_declaration(spark, parse_declaration(_declared(), "declarations:echoed_again"))
    leak = _declared(transform={"echo": {"keep": "reflect('java.lang.System', 'getenv', 'HOME') IS NOT NULL"}})
    with pytest.raises(PolicyError) as refused:
        check_runtime_declaration(spark, parse_declaration(leak, "declarations:echoed_again"))
    assert (refused.value.field, refused.value.rule) == ("transform.echo.keep", "function")
