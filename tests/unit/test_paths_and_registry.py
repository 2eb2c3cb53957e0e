"""Version paths and the registry's event folding (real Delta tables through delta-rs)."""

from __future__ import annotations

import pytest

from kappa.config import load_settings
from kappa.delta.registry import Registry, RegistryError, checkpoint_path, table_path
from kappa.core.jvm import artifact_name


@pytest.fixture
def settings(tmp_path):
    return load_settings(home=tmp_path / "home")


def test_version_paths(settings):
    assert table_path(settings, "flights", 3) == settings.warehouse / "flights" / "v3"
    assert checkpoint_path(settings, "flights", 3) == settings.checkpoints / "flights" / "v3"
    assert settings.warehouse == settings.home / "warehouse"


def test_settings_read_environment_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv("KAPPA_KAFKA_PORT", "29092")
    monkeypatch.setenv("KAPPA_HOME", str(tmp_path / "h"))
    s = load_settings()
    assert s.bootstrap_servers == "127.0.0.1:29092" and s.checkpoints == tmp_path / "h" / "checkpoints"


def test_object_store_roots_stay_uris(tmp_path):
    s = load_settings(home=tmp_path, warehouse="s3a://bucket/wh/", checkpoints="s3a://bucket/cp")
    assert s.warehouse == "s3a://bucket/wh" and table_path(s, "flights", 2) == "s3a://bucket/wh/flights/v2"
    assert checkpoint_path(s, "flights", 2) == "s3a://bucket/cp/flights/v2"


def test_registry_on_a_uri_warehouse(tmp_path):
    # delta-rs reads and writes the registry through a URI (s3a:// becomes s3://); file:// runs here.
    s = load_settings(home=tmp_path, warehouse=f"file://{tmp_path}/wh")
    reg = Registry(s)
    reg.create_version("a", "f", {})
    reg.promote({"a": 1})
    assert Registry(s).promoted("a").table_path == f"file://{tmp_path}/wh/a/v1"
    assert Registry(load_settings(home=tmp_path, warehouse="s3a://b/wh")).uri == "s3://b/wh/_kappa/registry"


def test_versions_promotion_and_rollback(settings):
    reg = Registry(settings)
    v1 = reg.create_version("a", "f1", {})
    v2 = reg.create_version("a", "f2", {})
    assert (v1.version, v2.version) == (1, 2)
    assert v1.txn_app_id != v2.txn_app_id and v1.checkpoint_path != v2.checkpoint_path
    assert reg.promoted("a") is None and reg.latest("a").version == 2
    reg.record("a", 1, "caught_up", rows=10)
    reg.promote({"a": 1})
    assert reg.promoted("a").version == 1 and reg.version("a", 1).state == "promoted"
    reg.promote({"a": 2})
    assert reg.promoted("a").version == 2 and reg.version("a", 1).state == "caught-up"
    assert reg.previous_promoted("a") == 1
    reg.promote({"a": 1}, reason="rollback")
    assert reg.promoted("a").version == 1
    assert reg.version("a", 1).last("caught_up") == {"rows": 10}


def test_chain_promotion_is_one_commit(settings):
    from deltalake import DeltaTable

    reg = Registry(settings)
    reg.create_version("s", "f", {})
    reg.create_version("g", "f", {"s": 1})
    before = DeltaTable(reg.uri).version()
    reg.promote({"s": 1, "g": 1})
    assert DeltaTable(reg.uri).version() == before + 1
    assert set(reg.promoted_all()) == {"s", "g"}


def test_a_promotion_re_pins_only_the_names_whose_pin_changes(settings):
    """A promotion re-pins the other names of its lineage; one whose pin it leaves as it was gets
    no ``pinned`` event (Dagster would report it as a materialization, and dbt's automation would
    rebuild every model below it), one whose snapshot moves gets one."""
    reg = Registry(settings)
    reg.create_version("s", "f", {})
    reg.create_version("g", "f", {"s": 1})
    s_pin = {"version": 1, "snapshot": 3, "cut": {"t": {0: 5}}, "verified": True}  # int partition, as plan_cut gives
    reg.promote({"s": 1}, pins={"s": s_pin})
    reg.promote({"g": 1}, pins={"g": {"version": 1, "snapshot": 0}, "s": dict(s_pin)})
    assert [e["event"] for e in reg.events("s")] == ["created", "promoted"]
    reg.promote({"g": 1}, pins={"g": {"version": 1, "snapshot": 1}, "s": {**s_pin, "snapshot": 4}})
    assert [e["event"] for e in reg.events("s")] == ["created", "promoted", "pinned"]
    assert reg.promoted("s").snapshot == 4


def test_unknown_and_retired_versions_cannot_be_promoted(settings):
    reg = Registry(settings)
    reg.create_version("a", "f", {})
    with pytest.raises(RegistryError, match="no version v7"):
        reg.promote({"a": 7})
    reg.record("a", 1, "retired")
    with pytest.raises(RegistryError, match="retired"):
        reg.promote({"a": 1})


@pytest.mark.parametrize("jar, name", [("jackson-core-2.21.2.jar", "jackson-core"),
                                        ("delta-spark_4.1_2.13-4.4.0.jar", "delta-spark_4.1_2.13"),
                                        ("scala-library-2.13.17.jar", "scala-library"),
                                        ("RoaringBitmap-1.3.0.jar", "RoaringBitmap")])
def test_artifact_name(jar, name):
    assert artifact_name(jar) == name


def test_kafka_security_settings_for_spark_and_librdkafka(monkeypatch, tmp_path):
    monkeypatch.setenv("KAPPA_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAPPA_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KAPPA_KAFKA_SASL_JAAS_CONFIG",
                       'org.apache.kafka.common.security.scram.ScramLoginModule required username="ingest" password="s3cr=t";')
    monkeypatch.setenv("KAPPA_KAFKA_SSL_TRUSTSTORE_TYPE", "PEM")
    monkeypatch.setenv("KAPPA_KAFKA_SSL_TRUSTSTORE_LOCATION", "/etc/kafka-ca/ca.crt")
    s = load_settings(home=tmp_path)
    assert s.kafka_client_options()["sasl.jaas.config"].startswith("org.apache.kafka")
    assert s.librdkafka_options() == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                                      "sasl.username": "ingest", "sasl.password": "s3cr=t",
                                      "ssl.ca.location": "/etc/kafka-ca/ca.crt"}
    assert load_settings(home=tmp_path / "x", kafka_security_protocol=None, kafka_sasl_mechanism=None,
                         kafka_sasl_jaas_config=None, kafka_ssl_truststore_location=None).librdkafka_options() == {}


def _gated_chain(reg: Registry, n: int) -> None:
    """Version n of silver ``s`` and of gold ``g`` (pinned to ``s`` vn), both gate-passed."""
    reg.create_version("s", f"f{n}", {})
    reg.create_version("g", f"f{n}", {"s": n})
    for asset in ("s", "g"):
        reg.record(asset, n, "gate_passed", checks=[])


def _two_chain_promotions(settings) -> Registry:
    """v1 of ``s`` and ``g`` promoted together (``kappa demo``), then v2 of both (a replay)."""
    from kappa.lifecycle.promotion import commit_promotion

    reg = Registry(settings)
    for n, reason in ((1, "demo"), (2, "replay")):
        _gated_chain(reg, n)
        commit_promotion(settings, {"s": n, "g": n}, reason=reason, chain=["s", "g"])
    return reg


def test_rollback_moves_the_chain_promoted_with_the_asset_in_one_commit(settings):
    from deltalake import DeltaTable

    from kappa.lifecycle.promotion import rollback

    reg = _two_chain_promotions(settings)
    before = DeltaTable(reg.uri).version()

    assert rollback(settings, "g") == {"g": 1, "s": 1}  # gold alone would sit over silver v2

    assert DeltaTable(reg.uri).version() == before + 1
    assert {a: v.version for a, v in reg.refresh().promoted_all().items()} == {"s": 1, "g": 1}
    assert rollback(settings, "s") == {"s": 2, "g": 2}  # a rollback is a chain too: undone whole


def test_rollback_refuses_when_a_chain_member_was_promoted_again_since(settings):
    from kappa.lifecycle.promotion import commit_promotion, rollback

    reg = _two_chain_promotions(settings)
    reg.create_version("g", "f3", {"s": 2})
    commit_promotion(settings, {"g": 3}, reason="manual")
    with pytest.raises(RegistryError, match="g was promoted with s but has been promoted again since"):
        rollback(settings, "s")
    reg.refresh()  # the promotions and the refused rollback: other commands'
    assert reg.promoted("s").version == 2 and reg.promoted("g").version == 3


def test_promoting_one_version_refuses_to_split_the_cut_unless_only(settings):
    from kappa.lifecycle.promotion import InconsistentPromotionError, commit_promotion, promote

    reg = Registry(settings)
    _gated_chain(reg, 1)
    commit_promotion(settings, {"s": 1, "g": 1}, reason="demo", chain=["s", "g"])
    _gated_chain(reg, 2)
    with pytest.raises(InconsistentPromotionError, match=r"g v1 was computed from s v1, but s would point at v2"):
        promote(settings, "s", 2)
    with pytest.raises(InconsistentPromotionError, match=r"g v2 was computed from s v2, but s would point at v1"):
        promote(settings, "g", 2)
    assert reg.refresh().promoted("s").version == 1  # the promotions: other commands'
    promote(settings, "s", 2, only=True)
    assert reg.refresh().promoted("s").version == 2
    promote(settings, "g", 2)  # now consistent: g v2 reads s v2
    assert reg.refresh().promoted("g").version == 2


class GateOnly:
    """A runner whose gate returns the given outcome per asset (the demo's promotion step asks a
    runner only for gates: ``kind`` and ``gate``; ``stop`` is never reached when nothing is promoted)."""

    kind = "test"

    def __init__(self, outcomes: dict[str, bool]):
        self.outcomes = outcomes

    def gate(self, asset: str, version: int, registry: Registry, catalog=None):
        from kappa.quality.gate import CheckResult, GateReport

        ok = self.outcomes[asset]
        return GateReport(asset, version, ok, [CheckResult("rows", ok, True, 0 if not ok else 10, "> 0")])

    def stop(self, asset: str, version: int) -> bool:
        raise AssertionError("nothing was promoted, so no query is stopped")


def test_the_demos_promotion_is_atomic_one_failed_gate_promotes_nothing(settings):
    """kappa demo's step 5 (cli.demo.promote_new_versions, atomic): silver passes its gate, gold
    fails its own; the registry (real, delta-rs) is unchanged, so no stable name shows silver's new
    version without gold's. With ``atomic=False`` silver would be promoted alone."""
    from deltalake import DeltaTable

    from kappa.cli.demo import promote_new_versions
    from kappa.runners.base import AssetRunResult

    reg = Registry(settings)
    reg.create_version("s", "f", {})
    reg.create_version("g", "f", {"s": 1})
    before = DeltaTable(reg.uri).version()
    results = [AssetRunResult(a, 1, 10, 10, 0, 0, 0, 1.0, 1, 1) for a in ("s", "g")]

    gates, promoted = promote_new_versions(settings, GateOnly({"s": True, "g": False}), results, Registry(settings))

    assert gates["s"].passed and not gates["g"].passed and promoted == {}
    assert reg.promoted_all() == {}
    assert [e["event"] for e in Registry(settings).events() if e["event"] in ("promoted", "pinned")] == []
    assert DeltaTable(reg.uri).version() == before  # the gate of a test runner records nothing either


def test_delta_rs_reaches_an_object_store_at_kappa_s3_endpoint():
    from kappa.config import load_settings
    from kappa.core.storage import delta_rs_options

    local = load_settings(s3_endpoint="http://127.0.0.1:59000", s3_path_style_access=True)
    assert delta_rs_options("s3a://kappa/warehouse/t", local) == {
        "conditional_put": "etag", "AWS_ENDPOINT_URL": "http://127.0.0.1:59000",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false", "AWS_ALLOW_HTTP": "true"}
    # not for local tables; on AWS S3 (no endpoint) delta-rs reads the AWS_* environment, and
    # every object-store table commits with conditional puts (many writers per table)
    assert delta_rs_options("/tmp/warehouse/t", local) is None
    assert delta_rs_options("s3://kappa/t", load_settings()) == {"conditional_put": "etag"}
    assert delta_rs_options("s3://kappa/t", load_settings(s3_endpoint="https://s3.example")) == {
        "conditional_put": "etag", "AWS_ENDPOINT_URL": "https://s3.example"}


def test_a_registry_reads_its_table_once_keeps_its_own_appends_and_sees_others_after_refresh(settings):
    """One snapshot per command: the first query reads the event table (counted in
    ``TABLE_READS``), later queries and the registry's own appends read nothing more, and the
    snapshot after the appends equals a fresh read of the table; another registry's append shows
    only after ``refresh()``."""
    from kappa.delta import registry as registry_module

    reg = Registry(settings)
    before = registry_module.TABLE_READS
    reg.create_version("s", "f", {})  # the first query: one read (no table yet)
    reg.create_version("g", "f", {"s": 1})
    reg.record("s", 1, "gate_passed", checks=[{"name": "rows", "passed": True}])
    reg.promote({"s": 1}, reason="test")
    assert reg.promoted("s").version == 1 and reg.latest("g").version == 1
    assert registry_module.TABLE_READS == before + 1
    fresh = Registry(settings).events()
    assert reg.events() == fresh and [e["event"] for e in fresh] == ["created", "created", "gate_passed", "promoted"]
    assert registry_module.TABLE_READS == before + 2

    Registry(settings).create_version("s", "f2", {})  # another command's write
    assert reg.latest("s").version == 1  # not in the snapshot
    assert registry_module.TABLE_READS == before + 3  # the other registry's create_version read once
    assert reg.refresh().latest("s").version == 2
    assert registry_module.TABLE_READS == before + 4


def test_a_version_knows_the_tables_of_the_upstream_versions_it_is_pinned_to(settings):
    reg = Registry(settings)
    s1 = reg.create_version("s", "f", {})
    s2 = reg.create_version("s", "f2", {})
    g = reg.create_version("g", "f", {"s": 1})
    assert g.upstream_tables == {"s": s1.table_path} and g.upstream_table("s") == s1.table_path != s2.table_path
    # a fresh snapshot folds the same (each command's driver reads no registry of its own for it)
    assert Registry(settings).version("g", 1).upstream_table("s") == s1.table_path
    with pytest.raises(RegistryError, match=r"g/v1 was not built against t \(upstream: \['s'\]\)"):
        g.upstream_table("t")
    # folded from events that lack the upstream's creation: said, not a KeyError
    only_g = [e for e in reg.events() if e["asset"] == "g"]
    with pytest.raises(RegistryError, match="g/v1 is pinned to s/v1, which the registry lacks"):
        reg.version("g", 1, only_g).upstream_table("s")
