"""The catalog joins the files of assets/ and the declarations recorded in the warehouse: the same
validation for both, errors naming the source (``assets/…yaml`` or ``declarations:<name>``)."""

from pathlib import Path

import pytest

from kappa.config import load_settings
from kappa.delta.declarations import text_fingerprint
from kappa.lifecycle.declare import dbt_readers
from kappa.spec import SpecError, load_catalog, parse_declaration

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "assets"

LATE = """\
name: late_departures
layer: gold
source: {asset: flights}
transform:
  sql: SELECT event_id, dep_delay / 60.0 AS delay_hours FROM input WHERE dep_delay > 60
"""


def test_a_declaration_joins_the_catalog_with_its_label_and_text():
    catalog = load_catalog(ASSETS, {"late_departures": LATE})
    spec = catalog["late_departures"]
    assert spec.where == "declarations:late_departures" and spec.path is None and spec.text == LATE
    assert "late_departures" in catalog.downstream("flights")
    assert catalog["flights"].where == str(ASSETS / "flights" / "flights.yaml")


def test_a_name_declared_by_a_file_and_a_declaration_names_both_sources():
    text = (ASSETS / "flights" / "departures_hourly.yaml").read_text()
    with pytest.raises(SpecError) as err:
        load_catalog(ASSETS, {"departures_hourly": text})
    assert str(err.value) == (f"declarations:departures_hourly: name: 'departures_hourly' is already declared in "
                              f"{ASSETS / 'flights' / 'departures_hourly.yaml'}")


@pytest.mark.parametrize("text, message", [
    (LATE.replace("{asset: flights}", "{asset: nope}"), "declarations:late_departures: source.asset: unknown asset 'nope'"),
    (LATE.replace("layer: gold", "layer: platinum"), "declarations:late_departures: layer: Input should be"),
    (LATE.replace("sql:", "sqll:"), "declarations:late_departures: transform.sqll: Extra inputs are not permitted"),
    ("name: [1\n", "declarations:(unnamed): not valid YAML"),
    (LATE.replace("sql: SELECT", "python: mod.py:f\n  #"), "declarations:late_departures: transform.python: "),
])
def test_a_bad_declaration_names_its_label_and_field(text, message):
    with pytest.raises(SpecError) as err:
        load_catalog(ASSETS, {"late_departures": text} if "(unnamed)" not in message else {"x": text})
    assert message in str(err.value) or message.replace("(unnamed)", "x") in str(err.value)


def test_a_declaration_recorded_under_another_name_is_refused():
    with pytest.raises(SpecError, match="declarations:other: name: 'late_departures' must stay 'other'"):
        parse_declaration(LATE, "declarations:other")


def test_the_text_fingerprint_changes_with_any_byte_and_the_logic_fingerprint_only_with_logic():
    described = LATE.replace("layer: gold", "layer: gold\ndescription: hours late")
    assert text_fingerprint(LATE) != text_fingerprint(described)
    assert parse_declaration(LATE).fingerprint() == parse_declaration(described).fingerprint()
    assert parse_declaration(LATE).fingerprint() != parse_declaration(LATE.replace("> 60", "> 90")).fingerprint()


def test_dbt_readers_are_the_models_selecting_the_kappa_source(tmp_path):
    settings = load_settings(project_dir=REPO, home=tmp_path)
    assert dbt_readers(settings, "flights") == ["stg_kappa__flights"]
    assert dbt_readers(settings, "weather") == ["stg_kappa__weather"]
    assert dbt_readers(settings, "plane_sessions") == []


def test_an_unknown_asset_name_is_one_clear_error_in_every_catalog_walk():
    """``kappa run nosuch --until-caught-up`` printed a Rich traceback ending in KeyError."""
    catalog = load_catalog(ASSETS, {})
    for walk in (lambda: catalog.levels(["flights", "nosuch"]), lambda: catalog.topological(["nosuch"]),
                 lambda: catalog.downstream("nosuch")):
        with pytest.raises(SpecError, match=r"unknown asset 'nosuch' \(known: .*flights"):
            walk()
