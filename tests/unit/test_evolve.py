"""``kappa declarations evolve``'s pure parts: a rescued field's type from its values, and the
declaration's text with the fields added where its schema block ends (comments kept)."""

from __future__ import annotations

import pytest

from kappa.lifecycle.evolve import _with_fields, infer_type
from kappa.spec import SpecError, parse_declaration


@pytest.mark.parametrize("values, kind", [
    (["1", "-20"], "int"), (["1", "3000000000"], "long"), (["1", "2.5", "1e3"], "double"),
    (["true", "false"], "boolean"), (["2013-01-05T06:00:00Z", "2013-01-05 07:10:00"], "timestamp"),
    (["B12", "7"], "string"), (["{\"a\": 1}"], "string"), ([], "string"),
])
def test_a_rescued_fields_type_comes_from_every_value(values, kind):
    assert infer_type(values) == kind


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
    assert list(spec.transform.parse.fields) == ["id", "at", "gate", "wifi"] and spec.max_quarantine_rate == 0.01


def test_a_text_without_a_schema_block_is_refused_in_one_line():
    with pytest.raises(SpecError, match="rides.yaml: evolve: no block 'schema:'"):
        _with_fields("name: rides\n", {"gate": "string"}, "rides.yaml")
