"""``kappa declarations evolve``'s pure parts: a rescued field's type from its values, a declared
field's type widened to hold values of another type, and the declaration's text with the fields
added where its schema block ends and changed types replaced in place (comments kept)."""

from __future__ import annotations

import pytest

from kappa.lifecycle.evolve import _with_fields, _with_types, infer_type, sample_problems, widen
from kappa.spec import SpecError, parse_declaration


@pytest.mark.parametrize("values, kind", [
    (["1", "-20"], "int"), (["1", "3000000000"], "long"), (["1", "2.5", "1e3"], "double"),
    (["true", "false"], "boolean"), (["2013-01-05T06:00:00Z", "2013-01-05 07:10:00"], "timestamp"),
    (["B12", "7"], "string"), (["{\"a\": 1}"], "string"), ([], "string"),
])
def test_a_rescued_fields_type_comes_from_every_value(values, kind):
    assert infer_type(values) == kind


@pytest.mark.parametrize("declared, values, kind", [
    ("int", ["3000000000"], "long"), ("int", ["2.5"], "double"), ("long", ["1.5"], "double"),
    ("double", ["late"], "string"), ("int", ["13:05"], "string"), ("boolean", ["yes"], "string"),
    ("timestamp", ["soon"], "string"), ("double", ["{\"h\": 3}"], "string"),
])
def test_a_declared_types_values_of_another_type_widen_it(declared, values, kind):
    assert widen(declared, values) == kind


TEXT = """\
name: rides
layer: silver
source:
  kafka:
    topics: [rides]
transform:
  parse:
    event_id: id
    event_time: at
    schema:
      id: {type: string, required: true}
      # when the ride started
      at: {type: timestamp, required: true}

max_quarantine_rate: 0.01  # kept
"""


def test_fields_are_added_at_the_end_of_the_schema_block_and_the_rest_is_kept():
    out = _with_fields(TEXT, {"gate": "string", "wifi": "boolean"}, "rides.yaml")
    assert out == TEXT.replace("      at: {type: timestamp, required: true}\n",
                               "      at: {type: timestamp, required: true}\n"
                               "      gate: string  # added by kappa declarations evolve\n"
                               "      wifi: boolean  # added by kappa declarations evolve\n")
    spec = parse_declaration(out)
    assert list(spec.transform.model.fields) == ["id", "at", "gate", "wifi"] and spec.max_quarantine_rate == 0.01


def test_a_text_without_a_schema_block_is_refused_in_one_line():
    with pytest.raises(SpecError, match="rides.yaml: evolve: no block 'schema:'"):
        _with_fields("name: rides\n", {"gate": "string"}, "rides.yaml")


def test_a_changed_type_is_replaced_in_place_in_either_form_with_a_note():
    text = TEXT.replace("      # when the ride started\n", "      fare: double  # dollars\n      stops: int\n"
                        "      tip: {type: int, description: cents}\n")
    out = _with_types(text, {"fare": ("double", "string"), "stops": ("int", "long"), "tip": ("int", "double")},
                      "rides.yaml")
    assert "      fare: string  # dollars (was double: changed by kappa declarations evolve)\n" in out
    assert "      stops: long  # was int: changed by kappa declarations evolve\n" in out
    assert "      tip: {type: double, description: cents}  # was int: changed by kappa declarations evolve\n" in out
    spec = parse_declaration(out)
    assert {n: f.type for n, f in spec.transform.model.fields.items()} == {
        "id": "string", "fare": "string", "stops": "long", "tip": "double", "at": "timestamp"}
    with pytest.raises(SpecError, match="rides.yaml: evolve: field 'gate' of type int not found"):
        _with_types(text, {"gate": ("int", "string")}, "rides.yaml")


def test_a_sample_that_does_not_hold_the_drift_says_why_per_field():
    held = {"carried": {"gate": 3}, "parsed": {"gate": 3}, "still_rescued": {}, "bad": {}}
    assert sample_problems(held) == [] and sample_problems(None) == []
    assert sample_problems({**held, "parsed": {"gate": 1}, "still_rescued": {"gate": 2},
                            "bad": {"missing required field(s): id": 4}}) == [
        "gate: 2 value(s) the proposed type does not hold", "gate: 2 record(s) still rescued",
        "4 record(s) would be quarantined: missing required field(s): id"]
