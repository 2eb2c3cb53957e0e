"""Asset declarations: the repo's assets load; bad files fail naming the file and the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kappa.spec import AssetSpec, SpecError, interval_seconds, load_asset, load_catalog
from kappa.spec.base import memory_bytes

REPO = Path(__file__).resolve().parents[2]


def test_repo_assets_load_in_dependency_order():
    catalog = load_catalog(REPO / "assets")
    order = catalog.topological()
    assert set(order) >= {"flights_bronze", "flights", "departures_hourly", "weather_bronze", "weather", "delay_streaks",
                          "airlines", "airports", "planes", "fleet", "planes_history"}
    assert order.index("flights") < order.index("departures_hourly")
    assert "departures_hourly" in catalog.levels(order)[-1]
    assert "departures_hourly" in catalog.downstream("flights")
    gold = catalog["departures_hourly"]
    assert gold.merge_keys == ["origin", "window_start"] and gold.sink_mode == "merge"
    assert catalog["flights_bronze"].sink_mode == "append"
    assert catalog.topics["flights"].kafka_config()["retention.ms"] == "604800000"  # 7 days; then the archive
    assert catalog.topics["flights"].archive == "flights_bronze"
    assert catalog.topics["flights"].kafka_config()["message.timestamp.type"] == "LogAppendTime"


def _write(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


SILVER = {
    "name": "s", "layer": "silver",
    "source": {"kafka": {"topics": ["t"]}},
    "transform": {"parse": {"schema": {"event_id": {"type": "string", "required": True},
                                       "event_time": "timestamp", "n": "int"}}},
}


def test_shorthand_field_types_are_accepted(tmp_path):
    spec = load_asset(_write(tmp_path, "s", SILVER))
    fields = spec.transform.model.fields
    assert fields["n"].type == "int" and not fields["n"].required and fields["event_id"].required


@pytest.mark.parametrize(
    "change, field, message",
    [
        (lambda d: d["transform"]["parse"]["schema"].update(n="integer"), "transform.parse.schema.n.type", "Input should be"),
        (lambda d: d.update(layer="platinum"), "layer", "Input should be"),
        (lambda d: d["source"].update(asset="x"), "source", "exactly one of 'kafka' or 'asset'"),
        (lambda d: d.pop("source"), "source", "Field required"),
        (lambda d: d.update(colour="blue"), "colour", "Extra inputs are not permitted"),
        (lambda d: d["transform"]["parse"].update(event_time="n"), "transform.parse", "must have type timestamp"),
        (lambda d: d.update(name="Bad-Name"), "name", "lower_snake_case"),
        (lambda d: d["source"]["kafka"].update(topics=[]), "source.kafka.topics", "at least 1"),
    ],
)
def test_invalid_declarations_fail_naming_file_and_field(tmp_path, change, field, message):
    doc = yaml.safe_load(yaml.safe_dump(SILVER))
    change(doc)
    path = _write(tmp_path, doc.get("name", "s") if doc.get("name") == "s" else "s", doc)
    with pytest.raises(SpecError) as err:
        load_asset(path)
    text = str(err.value)
    assert str(path) in text and f": {field}" in text and message in text


GOLD = {
    "name": "g", "layer": "gold", "source": {"asset": "s"},
    "watermark": {"column": "event_time", "delay": "1 hour"},
    "transform": {"window": {"type": "tumbling", "time_column": "event_time", "size": "1 hour",
                             "group_by": ["k"], "aggregations": {"n": "count(*)"}}},
}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("watermark"), "needs a watermark"),
        (lambda d: d["watermark"].update(delay="soon"), "is not an interval"),
        (lambda d: d["transform"]["window"].update(type="hopping"), "needs 'slide'"),
        (lambda d: d["transform"]["window"].update(type="hopping", slide="2 hours"), "must not exceed 'size'"),
        (lambda d: d["transform"]["window"].update(type="session"), "a session window takes no 'size'"),
        (lambda d: d["transform"]["window"].update(type="session", size=None), "needs 'gap'"),
        (lambda d: d["watermark"].update(column="other"), "watermark.column must equal"),
        (lambda d: d.update(source={"kafka": {"topics": ["t"]}}), "set source.asset"),
    ],
)
def test_invalid_windows_fail_at_load(tmp_path, change, message):
    doc = yaml.safe_load(yaml.safe_dump(GOLD))
    change(doc)
    with pytest.raises(SpecError, match=message):
        load_asset(_write(tmp_path, "g", doc))


def test_file_name_must_match_asset_name(tmp_path):
    with pytest.raises(SpecError, match="must equal the file name"):
        load_asset(_write(tmp_path, "other", SILVER))


def test_invalid_yaml_names_the_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match=f"{path}: not valid YAML"):
        load_asset(path)


def _catalog_dir(tmp_path: Path) -> Path:
    root = tmp_path / "assets"
    shutil.copytree(REPO / "assets", root)
    return root


def test_catalog_rejects_unknown_upstream(tmp_path):
    root = _catalog_dir(tmp_path)
    doc = yaml.safe_load((root / "flights/departures_hourly.yaml").read_text())
    doc["source"]["asset"] = "nope"
    (root / "flights/departures_hourly.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match="departures_hourly.yaml: source.asset: unknown asset 'nope'"):
        load_catalog(root)


def test_catalog_rejects_undeclared_topic(tmp_path):
    root = _catalog_dir(tmp_path)
    doc = yaml.safe_load((root / "flights/flights.yaml").read_text())
    doc["source"]["kafka"]["topics"] = ["nowhere"]
    (root / "flights/flights.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match="topic 'nowhere' is not declared"):
        load_catalog(root)


@pytest.mark.parametrize("edit, error", [
    ({"archive": None}, r"topics\.flights\.archive: retention_ms 604800000 deletes records a replay reads; "
                        r"name the raw \(bronze\) asset that archives 'flights'"),
    ({"archive": "nope"}, r"topics\.flights\.archive: unknown asset 'nope'"),
    ({"archive": "flights"}, r"topics\.flights\.archive: 'flights' must be a raw asset reading only 'flights'"),
    ({"archive": "weather_bronze"}, r"'weather_bronze' must be a raw asset reading only 'flights'"),
    ({"compacted": True}, r"topics\.flights\.archive: a compacted topic keeps the latest record per key"),
])
def test_a_topic_with_bounded_retention_names_a_raw_archive_of_it(tmp_path, edit, error):
    root = _catalog_dir(tmp_path)
    doc = yaml.safe_load((root / "topics.yaml").read_text())
    doc["topics"]["flights"].update(edit)
    (root / "topics.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match=error):
        load_catalog(root)
    doc["topics"]["flights"].update({"retention_ms": -1, "archive": None, "compacted": False})
    (root / "topics.yaml").write_text(yaml.safe_dump(doc))
    assert load_catalog(root).topics["flights"].archive is None  # a log kept forever needs none


def test_archive_coverage_names_the_first_range_it_lacks_except_what_forget_deleted():
    from kappa.delta.archive import Coverage

    whole = Coverage(0, first=0, last=99, records=100)
    assert (whole.contiguous_end(), whole.missing_below(100), whole.missing_below(101)) == (100, None, (100, 100))
    holed = Coverage(0, first=0, last=99, records=90, gaps=[(10, 19)])
    assert (holed.contiguous_end(), holed.missing_below(10), holed.missing_below(50)) == (10, None, (10, 19))
    # Offsets `kappa forget` deleted are excused; any other one is still missing.
    assert holed.contiguous_end(set(range(10, 20))) == 100 and holed.missing_below(50, set(range(10, 20))) is None
    assert holed.missing_below(50, {10, 11, 12}) == (13, 19)
    late = Coverage(0, first=5, last=99, records=95)
    assert (late.contiguous_end(), late.missing_below(50)) == (0, (0, 4))
    assert late.missing_below(50, {0, 1}) == (2, 4)
    assert Coverage(0).missing_below(7) == (0, 6)


def test_catalog_rejects_duplicate_names(tmp_path):
    root = _catalog_dir(tmp_path)
    (root / "weather" / "x").mkdir()
    shutil.copy(root / "weather/weather.yaml", root / "weather/x/weather.yaml")
    with pytest.raises(SpecError, match="already declared"):
        load_catalog(root)


def test_fingerprint_changes_with_logic_not_with_description(tmp_path):
    spec = load_asset(_write(tmp_path, "s", SILVER))
    (tmp_path / "a").mkdir()
    described = load_asset(_write(tmp_path / "a", "s", {**SILVER, "description": "words"}))
    assert spec.fingerprint() == described.fingerprint()
    changed = AssetSpec.model_validate({**SILVER, "source": {"kafka": {"topics": ["t", "u"]}}})
    assert changed.fingerprint() != spec.fingerprint()


@pytest.mark.parametrize("text, seconds", [("10 seconds", 10), ("2 hours", 7200), ("1 hour", 3600),
                                           ("500 milliseconds", 0.5), ("1 day", 86400)])
def test_interval_seconds(text, seconds):
    assert interval_seconds(text) == seconds


def test_a_latency_sensitive_asset_may_declare_a_zero_trigger(tmp_path):
    # "0 seconds": the next micro-batch starts as soon as the last one ends (Spark's
    # ProcessingTime(0)); README "Triggers and back-pressure" gives the cost in commits.
    spec = load_asset(_write(tmp_path, "s", {**SILVER, "trigger": {"processing_time": "0 seconds"}}))
    assert interval_seconds(spec.trigger.processing_time) == 0


@pytest.mark.parametrize("text", ["10", "ten seconds", "1 fortnight", ""])
def test_interval_seconds_rejects_non_intervals(text):
    with pytest.raises(ValueError):
        interval_seconds(text)


@pytest.mark.parametrize("text, size", [
    ("512m", 512 * 2**20), ("2g", 2 * 2**30), ("2G", 2 * 2**30), ("1t", 2**40), ("64k", 64 * 2**10),
    ("2048", 2048 * 2**20),  # a bare number is MiB, as Spark reads spark.executor.memory
])
def test_memory_bytes_reads_spark_jvm_sizes(text, size):
    assert memory_bytes(text) == size


@pytest.mark.parametrize("text", ["2gb", "1.5g", "", "g", "-1g"])
def test_memory_bytes_refuses_what_the_spec_refuses(text):
    with pytest.raises(ValueError, match="JVM size"):
        memory_bytes(text)


def test_changelog_assets_merge_on_the_primary_key_and_read_compacted_topics():
    catalog = load_catalog(REPO / "assets")
    planes, history = catalog["planes"], catalog["planes_history"]
    assert planes.transform.kind == "changelog" and planes.sink_mode == "merge" and planes.merge_keys == ["tailnum"]
    assert planes.transform.model.mode == "current" and history.transform.model.mode == "history"
    assert catalog.topics["ops.public.planes"].kafka_config()["cleanup.policy"] == "compact"
    assert catalog["fleet"].transform.model.fields["since"].type == "date"


def test_a_changelog_key_must_be_a_declared_column(tmp_path):
    (tmp_path / "topics.yaml").write_text("topics: {ops.public.t: {compacted: true}}\n")
    (tmp_path / "t.yaml").write_text(
        "name: t\nlayer: silver\nsource: {kafka: {topics: [ops.public.t]}}\n"
        "transform: {changelog: {key: [id], schema: {name: string}}}\n")
    with pytest.raises(SpecError, match=r"t.yaml: transform.changelog.*key column 'id' is not in schema"):
        load_catalog(tmp_path)


def test_table_joins_are_declared_against_changelog_tables():
    catalog = load_catalog(REPO / "assets")
    enriched, view = catalog["flights_enriched"], catalog["fleet_by_airline"]
    assert enriched.upstream == ["flights", "planes_history", "airlines_history"]
    assert enriched.sink_mode == "append" and enriched.merge_keys == ["event_id"]
    assert view.upstream == ["fleet", "airlines", "planes"]
    assert view.sink_mode == "merge" and view.merge_keys == ["carrier"]
    assert "fleet_by_airline" in catalog.downstream("airlines") and "flights_enriched" in catalog.downstream("planes_history")


def _lookup_catalog(tmp_path: Path, change) -> Path:
    dest = tmp_path / "assets"
    shutil.copytree(REPO / "assets", dest)
    path = dest / "flights" / "flights_enriched.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))
    return dest


@pytest.mark.parametrize("change, message", [
    (lambda d: d["transform"]["lookup"]["tables"][0].update(asset="planes"),
     r"flights_enriched.yaml: transform.lookup.tables.0.asset: 'planes' must be a changelog asset with mode 'history'"),
    (lambda d: d["transform"]["lookup"]["tables"][0].pop("as_of"),
     r"tables.0.asset: 'planes_history' must be a changelog asset with mode 'current'"),
    (lambda d: d["transform"]["lookup"]["tables"][0]["columns"].update(year="year"),
     r"tables.0.columns: output column\(s\) \['year'\] are already columns of flights"),
    (lambda d: d["transform"]["lookup"]["tables"][0]["columns"].update(wingspan="wingspan"),
     r"tables.0: column 'wingspan' is not in planes_history's schema"),
    (lambda d: d["transform"]["lookup"]["tables"][0].update(as_of="dep_delay"),
     r"tables.0.as_of: 'dep_delay' must be a timestamp column of flights"),
    (lambda d: d["transform"]["lookup"]["tables"][1]["columns"].update(name="model"),
     r"transform.lookup.tables: output column names repeat"),
])
def test_invalid_lookups_fail_at_load_naming_file_and_field(tmp_path, change, message):
    with pytest.raises(SpecError, match=message):
        load_catalog(_lookup_catalog(tmp_path, change))


def test_a_materialized_view_reads_current_state_tables_only(tmp_path):
    dest = tmp_path / "assets"
    shutil.copytree(REPO / "assets", dest)
    path = dest / "operational" / "fleet_by_airline.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["transform"]["materialized_view"]["tables"].append("planes_history")
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match=r"fleet_by_airline.yaml: transform.materialized_view.tables: 'planes_history' "
                                        r"is not a current-state changelog asset"):
        load_catalog(dest)
    doc["transform"]["materialized_view"]["tables"] = ["airlines", "planes"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match=r"source.asset must be one of transform.materialized_view.tables"):
        load_catalog(dest)


def test_upstream_first_orders_readers_after_what_they_read_and_names_a_cycle():
    from kappa.spec import upstream_first

    # names outside the mapping are ignored; ties broken by name
    order = upstream_first({"gold": ["silver", "weather"], "silver": ["bronze"], "bronze": [], "weather": [],
                            "join": {"silver": 1, "weather": 1}})
    assert order == ["bronze", "weather", "silver", "gold", "join"]
    assert upstream_first({}) == []
    with pytest.raises(SpecError, match=r"cycle among assets: \['a', 'b', 'c'\]"):
        upstream_first({"a": ["b"], "b": ["a"], "c": ["a"], "d": []})
