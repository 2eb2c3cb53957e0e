"""The run-time declaration policy's pure parts (kappa.streaming.policy): sizes and caps, where a
declaration holds SQL, names and code, and the rules that need no Spark. The SQL rules, which ask
Spark's parser, are in tests/integration/test_policy.py."""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from kappa.errors import KappaError
from kappa.spec import AssetSpec, TransformModel, load_catalog, transform_kinds
from kappa.spec import asset as spec_asset
from kappa.streaming.policy import (
    PolicyError,
    ResourceCaps,
    check_resources,
    check_runtime_declaration,
    cpu_cores,
    declared_texts,
    field_roles,
    resource_refusals,
    text_refusal,
)

REPO = Path(__file__).resolve().parents[2]


def _spec(transform: dict, **more) -> AssetSpec:
    return AssetSpec.model_validate({"name": "busy_routes", "layer": "gold", "source": {"asset": "flights"},
                                     "transform": transform, **more})


SQL = {"sql": "SELECT origin, dest FROM input WHERE dep_delay > 15"}


# --- CPU quantities ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, cores", [("2", 2.0), ("1.5", 1.5), ("500m", 0.5), ("4000m", 4.0), (" 3 ", 3.0)])
def test_cpu_cores_reads_kubernetes_quantities(text, cores):
    assert cpu_cores(text) == cores


@pytest.mark.parametrize("text", ["2 cores", "1k", "m", "-1"])
def test_cpu_cores_refuses_anything_else(text):
    with pytest.raises(ValueError, match="CPU quantity"):
        cpu_cores(text)


# --- resource caps -------------------------------------------------------------------------------

def _resources(**block):
    return _spec(SQL, resources=block).resources


def test_resources_within_the_default_caps_pass():
    res = _resources(driver={"cores": 4, "memory": "4g"}, executor={"cores": 4, "memory": "6g",
                                                                    "memory_overhead": "2g", "core_limit": "4000m"},
                     executor_instances=8)
    assert resource_refusals(res, ResourceCaps()) == []
    assert resource_refusals(None, ResourceCaps()) == []


@pytest.mark.parametrize("block, field, words", [
    ({"executor_instances": 9}, "resources.executor_instances", "9 executors exceed the cap of 8 (max_executors)"),
    ({"executor": {"cores": 5}}, "resources.executor.cores", "5 cores exceed the cap of 4 (max_cores)"),
    ({"driver": {"cores": 8}}, "resources.driver.cores", "(max_cores)"),
    ({"executor": {"core_limit": "4500m"}}, "resources.executor.core_limit", "4500m (4.5 cores) exceeds"),
    ({"executor": {"core_limit": "lots"}}, "resources.executor.core_limit", "not a CPU quantity"),
    ({"executor": {"memory": "9g"}}, "resources.executor.memory", "9g exceeds the cap of 8g (max_executor_memory)"),
    ({"executor": {"memory": "16384"}}, "resources.executor.memory", "(max_executor_memory)"),  # MiB
    ({"driver": {"memory": "5g"}}, "resources.driver.memory", "5g exceeds the cap of 4g (max_driver_memory)"),
    ({"driver": {"memory": "3g", "memory_overhead": "2g"}}, "resources.driver.memory_overhead",
     "memory 3g + memory_overhead 2g exceeds the cap of 4g"),
])
def test_each_cap_names_the_field_it_stops(block, field, words):
    refused = resource_refusals(_resources(**block), ResourceCaps())
    assert [f for f, _ in refused] == [field]
    assert words in refused[0][1]


def test_caps_are_configurable_and_checked():
    caps = ResourceCaps(max_executors=2, max_executor_memory="1g")
    assert [f for f, _ in resource_refusals(_resources(executor={"memory": "2g"}, executor_instances=3), caps)] == [
        "resources.executor.memory", "resources.executor_instances"]
    with pytest.raises(ValueError, match="JVM size"):
        ResourceCaps(max_driver_memory="lots")


def test_check_resources_raises_a_policy_error_naming_declaration_field_and_rule():
    spec = _spec(SQL, resources={"executor_instances": 50})
    with pytest.raises(PolicyError) as err:
        check_resources(spec)
    assert str(err.value).startswith(
        "declarations:busy_routes: resources.executor_instances: refused (rule: resources-cap): 50 executors")
    assert (err.value.asset, err.value.field, err.value.rule) == ("busy_routes", "resources.executor_instances",
                                                                  "resources-cap")
    assert isinstance(err.value, KappaError)


# --- where a declaration holds text -----------------------------------------------------------------

def test_the_shipped_assets_sql_is_found_where_each_kind_keeps_it():
    catalog = load_catalog(REPO / "assets")
    found = {(name, t.field, t.role) for name, spec in catalog.assets.items() for t in declared_texts(spec)
             if t.role != "name"}
    assert {("delay_streaks", "transform.pattern.where", "expression"),
            ("delay_streaks", "transform.pattern.steps.0.when", "expression"),
            ("departures_hourly", "transform.window.aggregations.flights", "expression"),
            ("plane_sessions", "transform.window.filter", "expression"),
            ("fleet_by_airline", "transform.materialized_view.sql", "query")} <= found
    mv = next(t for t in declared_texts(catalog["fleet_by_airline"]) if t.role == "query")
    assert mv.relations == ("fleet", "airlines", "planes")
    names = {t.field for t in declared_texts(catalog["flights"]) if t.role == "name"}
    assert {"transform.parse.schema.dep_delay", "transform.parse.event_id", "watermark.column"} <= names


def test_the_shipped_assets_break_no_rule_that_needs_no_spark():
    catalog = load_catalog(REPO / "assets")
    broken = [(name, t.field, text_refusal(t).rule) for name, spec in catalog.assets.items()
              for t in declared_texts(spec) if text_refusal(t) is not None]
    # The python kind's example is the one shipped asset a run-time declaration could not be: its
    # code was reviewed as a file under assets/, which is the only way python comes in.
    assert broken == [("flight_status", "transform.python", "python-needs-review")]
    for spec in catalog.assets.values():
        check_resources(spec)


def test_a_sql_transform_is_a_query_over_input():
    (text,) = [t for t in declared_texts(_spec(SQL)) if t.role == "query"]
    assert (text.field, text.text, text.relations) == ("transform.sql", SQL["sql"], ("input",))


def test_a_python_transform_needs_review_and_spark_is_not_asked():
    spec = _spec({"python": "busy.py:transform"})
    with pytest.raises(PolicyError) as err:
        check_runtime_declaration(None, spec)  # type: ignore[arg-type]  # refused before any parse
    assert (err.value.field, err.value.rule) == ("transform.python", "python-needs-review")
    assert "code review" in str(err.value)


@pytest.mark.parametrize("doc_change, field", [
    (lambda d: d.update(sink={"mode": "merge", "keys": ["origin` = s.`origin` OR reflect('a', 'b') IS NULL OR `x"]}),
     "sink.keys.0"),
    (lambda d: d["transform"].update(window={"type": "tumbling", "time_column": "event_time", "size": "1 hour",
                                             "group_by": ["o`rigin"], "aggregations": {"n": "count(*)"}}),
     "transform.window.group_by.0"),
])
def test_a_column_name_with_a_backtick_is_refused(doc_change, field):
    doc = {"transform": dict(SQL), "watermark": {"column": "event_time", "delay": "1 minute"}}
    doc_change(doc)
    if "window" in doc["transform"]:
        doc["transform"].pop("sql")
    spec = _spec(**{"transform": doc["transform"]}, **{k: v for k, v in doc.items() if k != "transform"})
    with pytest.raises(PolicyError) as err:
        check_runtime_declaration(None, spec)  # type: ignore[arg-type]
    assert (err.value.field, err.value.rule) == (field, "column-name")


def test_an_expectation_that_runs_a_query_is_refused():
    spec = _spec(SQL, expectations=[{"expect_query_results_to_match_comparison": {
        "base_query": "SELECT reflect('java.lang.Runtime', 'getRuntime')", "comparison_data_source_name": "x",
        "comparison_query": "SELECT 1"}}])
    with pytest.raises(PolicyError) as err:
        check_runtime_declaration(None, spec)  # type: ignore[arg-type]
    assert (err.value.field, err.value.rule) == (
        "expectations.0.expect_query_results_to_match_comparison.base_query", "expectation-query")


def _not_null(**kwargs) -> dict:
    return {"expect_column_values_to_not_be_null": {"column": "a", **kwargs}}


def test_every_row_condition_is_the_filter_gx_hands_to_spark_whatever_its_parser():
    """GX 1.24 filters a Spark batch with a string row_condition as it is unless its parser is
    ``great_expectations`` (then with the SQL its grammar builds), and with a condition object as
    the SQL the Spark engine builds from it: the policy checks that text, built by GX itself."""
    spec = _spec(SQL, expectations=[
        _not_null(row_condition="b > 1", condition_parser="spark"),
        _not_null(row_condition="EXISTS (SELECT TRANSFORM(1) USING 'touch /tmp/x' AS (a STRING))"),
        _not_null(row_condition="b > 1", condition_parser="pandas"),
        _not_null(row_condition='col("b")>1', condition_parser="great_expectations"),
        _not_null(row_condition={"type": "comparison", "column": {"name": "c"}, "operator": "==",
                                 "parameter": "x'y"}),
        _not_null(row_condition={"type": "pass_through", "pass_through_filter": "c < 2"}),
    ])
    got = [(t.field.split(".")[1], t.role, t.text) for t in declared_texts(spec) if t.field.startswith("expectations")]
    assert got == [("0", "expression", "b > 1"),
                   ("1", "expression", "EXISTS (SELECT TRANSFORM(1) USING 'touch /tmp/x' AS (a STRING))"),
                   ("2", "expression", "b > 1"),
                   ("3", "expression", "`b` > 1"),
                   ("4", "expression", "`c` == \"x'y\""),
                   ("5", "expression", "c < 2")]


def test_a_row_condition_gx_cannot_build_a_filter_from_is_refused():
    spec = _spec(SQL, expectations=[_not_null(row_condition='col("b") >', condition_parser="great_expectations")])
    with pytest.raises(PolicyError) as err:
        check_runtime_declaration(None, spec)  # type: ignore[arg-type]  # refused before any parse
    assert (err.value.field, err.value.rule) == (
        "expectations.0.expect_column_values_to_not_be_null.row_condition", "expectation-arguments")


@pytest.mark.parametrize("change, field", [
    (lambda d: d["transform"].update(sql="SELECT '${env:AWS_SECRET_ACCESS_KEY}' AS k FROM input"), "transform.sql"),
    (lambda d: d.update(expectations=[_not_null(row_condition="'${system:user.dir}' IS NOT NULL")]),
     "expectations.0.expect_column_values_to_not_be_null.row_condition"),
    (lambda d: d.update(expectations=[_not_null(mostly=1, meta={"${env:X}": 1})]),
     "expectations.0.expect_column_values_to_not_be_null.meta.${env:X}"),
    (lambda d: d.update(description="costs ${x}"), "description"),
    (lambda d: d.update(source={"asset": "flights"}, transform={"window": {
        "type": "tumbling", "time_column": "event_time", "size": "1 hour",
        "aggregations": {"n": "max('${env:HOME}')"}}}, watermark={"column": "event_time", "delay": "1 hour"}),
     "transform.window.aggregations.n"),
])
def test_substitution_is_refused_in_any_string_before_anything_is_parsed(change, field):
    doc = {"transform": dict(SQL)}
    change(doc)
    spec = _spec(**{"transform": doc.pop("transform")}, **doc)
    with pytest.raises(PolicyError) as err:
        check_runtime_declaration(None, spec)  # type: ignore[arg-type]  # no Spark: refused first
    assert (err.value.field, err.value.rule) == (field, "substitution")
    assert "variable substitution" in str(err.value) and "\n" not in str(err.value)


def test_only_declarations_recorded_at_run_time_are_checked_again_before_running():
    from kappa.spec import parse_declaration
    from kappa.streaming.policy import check_before_running, recorded_at_run_time

    text = "name: leak\nlayer: gold\nsource: {asset: flights}\ntransform: {python: x.py:f}\n"
    stored = parse_declaration(text.replace("{python: x.py:f}", "{sql: \"SELECT '${env:X}' FROM input\"}"))
    assert recorded_at_run_time(stored) and stored.where == "declarations:leak"
    with pytest.raises(PolicyError, match=r"^declarations:leak: transform.sql: refused \(rule: substitution\)"):
        check_before_running(None, stored)  # type: ignore[arg-type]
    shipped = load_catalog(REPO / "assets")["flight_status"]  # a python transform, from a file
    assert not recorded_at_run_time(shipped)
    check_before_running(None, shipped)  # type: ignore[arg-type]  # files keep their trust: nothing parsed


# --- the table of text fields is whole ----------------------------------------------------------------

def _choice(annotation) -> bool:
    if typing.get_origin(annotation) is typing.Literal:
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and all(_choice(a) for a in args)


def _holds_text(annotation) -> bool:
    if _choice(annotation):
        return False
    if annotation in (str, dict) or annotation is typing.Any:
        return True
    return any(_holds_text(a) for a in typing.get_args(annotation))


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _text_fields() -> set[tuple[type, str]]:
    seen: set[type] = set()
    fields: set[tuple[type, str]] = set()
    todo: list[type[BaseModel]] = [AssetSpec, *transform_kinds().values()]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            if info.exclude:  # where the spec came from (path, origin, text): not a declared field
                continue
            todo += _models(info.annotation)
            if _holds_text(info.annotation):
                fields.add((model, name))
    return fields


def test_every_text_field_of_the_declaration_models_has_a_role():
    """A kind that gains a SQL field (or any text) must declare its role on the field, or this
    fails; at run time such a field is refused (unclassified-field) rather than let through. The
    policy's table is the fields' own declarations, nothing more."""
    fields = _text_fields()
    assert len(fields) > 40
    roles = field_roles()
    missing = sorted(f"{m.__name__}.{n}" for m, n in fields - set(roles))
    stale = sorted(f"{m.__name__}.{n}" for m, n in set(roles) - fields)
    assert (missing, stale) == ([], [])


def test_an_unclassified_text_field_is_refused():
    class Unclassified(TransformModel):  # a kind whose model grew a text field without a role
        kind = "unclassified_test"
        note: str

    try:
        spec = _spec({"unclassified_test": {"note": "new field"}})
        with pytest.raises(PolicyError) as err:
            check_runtime_declaration(None, spec)  # type: ignore[arg-type]
        assert (err.value.field, err.value.rule) == ("transform.unclassified_test.note", "unclassified-field")
    finally:
        spec_asset._MODELS.pop("unclassified_test")
