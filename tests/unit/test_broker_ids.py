"""Cluster ids the local broker is formatted with."""

from __future__ import annotations

import base64
import uuid

from kappa.kafka import broker


def test_cluster_id_never_starts_with_a_dash(monkeypatch):
    # uuid4 bytes whose base64 starts with '-' (0xf8 -> '-' as the first 6 bits: 111110), then good ones
    dashed = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))
    good = uuid.UUID(bytes=bytes([0x10]) + bytes(15))
    seq = iter([dashed, dashed, good])
    monkeypatch.setattr(broker.uuid, "uuid4", lambda: next(seq))
    text = broker._kafka_uuid()
    assert not text.startswith("-")
    assert base64.urlsafe_b64decode(text + "==") == good.bytes


def test_cluster_id_is_22_url_safe_characters():
    for _ in range(500):
        text = broker._kafka_uuid()
        assert len(text) == 22 and not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
