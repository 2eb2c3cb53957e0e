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


def test_a_forget_named_by_hash_needs_the_key_only_on_a_changelog_topic_and_a_key_given_must_match(tmp_path):
    """An approved request names its key by SHA-256 (kappa.lifecycle.approval): on a plain topic
    the hash is enough (its key_field's value hashes to it); a changelog topic's key columns are
    compared one by one, so the key itself is needed; a key that does not hash to the request's
    SHA-256 is refused. Each before anything is read or recorded (no broker, no Spark here)."""
    from kappa.config import load_settings
    from kappa.delta.forgotten import requests
    from kappa.lifecycle.forget import _value_hashes, forget

    settings = load_settings(project_dir=REPO, home=tmp_path)
    catalog = load_catalog(REPO / "assets")
    digest = hashlib.sha256(b"N14228").hexdigest()
    assert _value_hashes(catalog, "flights", None, digest) == {"tailnum": digest} == \
        _value_hashes(catalog, "flights", "N14228", digest)
    with pytest.raises(ForgetError, match="ops.public.planes is a changelog topic: .* give the key"):
        forget(settings, "ops.public.planes", None, "dsr", key_sha256=hashlib.sha256(b'{"tailnum":"N1"}').hexdigest())
    with pytest.raises(ForgetError, match="does not match the request's SHA-256"):
        forget(settings, "flights", "N99999", "dsr", key_sha256=digest)
    assert requests(settings) == []
