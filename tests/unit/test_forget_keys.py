"""`kappa forget`'s key forms: what a --key means on each kind of topic (pure functions)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kappa.delta.forgotten import ForgetError, key_hash, key_values, record_key
from kappa.spec import load_catalog

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(REPO / "assets")


def test_a_plain_topic_key_is_its_bytes_and_names_the_topics_key_field(catalog):
    assert record_key(catalog, "flights", "N14228") == b"N14228"
    assert key_values(catalog, "flights", "N14228") == {"tailnum": "N14228"}
    assert catalog.readers("flights") == ["flights", "flights_bronze"]
    # weather declares no key_field: its key (the origin) is no column of derived tables to match
    assert key_values(catalog, "weather", "EWR") == {}
    assert key_hash(record_key(catalog, "flights", "N14228")) == hashlib.sha256(b"N14228").hexdigest()


def test_a_changelog_key_is_the_compact_json_of_its_key_columns(catalog):
    assert catalog.changelog_key("ops.public.planes") == ["tailnum"]
    assert catalog.changelog_key("flights") is None
    canonical = b'{"tailnum":"N10156"}'
    assert record_key(catalog, "ops.public.planes", "N10156") == canonical
    # Debezium's own spelling and a spaced one are the same key
    assert record_key(catalog, "ops.public.planes", '{"tailnum": "N10156"}') == canonical
    assert key_values(catalog, "ops.public.planes", "N10156") == {"tailnum": "N10156"}
    assert json.loads(record_key(catalog, "ops.public.airlines", "UA")) == {"carrier": "UA"}


@pytest.mark.parametrize("key, message", [
    ('{"carrier": "UA"}', "must name exactly its key columns ['tailnum']"),
    ('{"tailnum": "N1", "x": 1}', "must name exactly its key columns"),
    ("{not json", "--key is not a JSON object"),
])
def test_a_changelog_key_naming_other_columns_is_refused(catalog, key, message):
    with pytest.raises(ForgetError, match=message.replace("[", r"\[").replace("]", r"\]")):
        record_key(catalog, "ops.public.planes", key)
