"""The forgotten list: the requests of ``kappa forget`` and the keys they name, low in the layers so
every query can drop forgotten records as it reads a topic (:func:`forgotten_condition`), while the
command itself (:mod:`kappa.lifecycle.forget`) sits above promotion.

The list is a Delta table ``<warehouse>/_kappa/forgotten`` (written with delta-rs), an append-only
event log like the registry: rows ``request_id`` string, ``topic`` string, ``key_sha256`` string
(SHA-256 of the record key's bytes, hex: the list itself must not hold the key it removes everywhere
else), ``event`` string, ``at`` timestamp (UTC), ``reason`` string, ``details`` JSON string. Events:
``requested``, then one per step done (:data:`STEPS`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from kappa.config import Settings, join
from kappa.errors import KappaError

STEPS = ("located", "deleted", "replayed", "checkpoints", "vacuumed", "log", "done")

_SCHEMA = pa.schema([
    ("request_id", pa.string()),
    ("topic", pa.string()),
    ("key_sha256", pa.string()),
    ("event", pa.string()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("reason", pa.string()),
    ("details", pa.string()),
])


class ForgetError(KappaError, RuntimeError):
    """A forget request that cannot be carried out (unknown topic, empty key or reason)."""


def forgotten_path(settings: Settings) -> Path | str:
    """``<warehouse>/_kappa/forgotten``: the forget requests and their steps."""
    assert settings.warehouse is not None
    return join(settings.warehouse, "_kappa", "forgotten")


def key_hash(key: bytes) -> str:
    """SHA-256 of a record key, hex (what the forgotten list keeps)."""
    import hashlib

    return hashlib.sha256(key).hexdigest()


def record_key(catalog, topic: str, key: str) -> bytes:
    """The canonical bytes of ``key`` on ``topic`` (what the forgotten list hashes): the key itself
    (UTF-8), or, on a changelog topic, the compact JSON object of its key columns with string
    values, ``{"tailnum":"N12345"}`` (Debezium's keys are JSON objects of the source table's
    primary key; see :func:`key_column`). ``key`` may be that object or, for a one-column key, the
    value alone.

    Raises :class:`ForgetError` when a changelog key lacks or adds a key column."""
    if catalog.changelog_key(topic) is None:
        return key.encode()
    return json.dumps(key_values(catalog, topic, key), separators=(",", ":"), ensure_ascii=False).encode()


def key_values(catalog, topic: str, key: str) -> dict[str, str]:
    """The value columns ``key`` stands for on ``topic`` (column -> value as a string): a changelog
    topic's key columns, else the topic's ``key_field``, else nothing.

    Raises :class:`ForgetError` for a changelog key that does not name exactly its key columns."""
    columns = catalog.changelog_key(topic)
    if columns is None:
        field_ = catalog.topics[topic].key_field
        return {field_: key} if field_ else {}
    if key.lstrip().startswith("{"):
        try:
            given = json.loads(key)
        except json.JSONDecodeError as err:
            raise ForgetError(f"--key is not a JSON object: {err}") from None
    elif len(columns) == 1:
        given = {columns[0]: key}
    else:
        raise ForgetError(f"{topic} is keyed by ({', '.join(columns)}): give --key as a JSON object "
                          f"with those columns, e.g. {json.dumps({c: '…' for c in columns})}")
    if not isinstance(given, dict) or set(given) != set(columns):
        raise ForgetError(f"--key for {topic} must name exactly its key columns {columns}, got {key!r}")
    return {c: str(given[c]) for c in columns}


def key_column(catalog, topic: str):
    """A Spark Column over Kafka records (or a bronze table: ``key`` binary): the canonical key
    bytes of :func:`record_key`, so a changelog key matches however its JSON is spaced."""
    from pyspark.sql import functions as F

    columns = catalog.changelog_key(topic)
    if columns is None:
        return F.col("key")
    text = F.col("key").cast("string")
    return F.to_json(F.struct(*[F.get_json_object(text, f"$.{c}").alias(c) for c in columns])).cast("binary")



def _uri(settings: Settings) -> str:
    from kappa.core.storage import delta_rs_uri

    return delta_rs_uri(forgotten_path(settings))


def _options(settings: Settings) -> dict[str, str] | None:
    from kappa.core.storage import delta_rs_options

    return delta_rs_options(forgotten_path(settings), settings)


@dataclass
class Request:
    """One forget request folded from its events: step name -> details of the step done."""

    request_id: str
    topic: str
    key_sha256: str
    reason: str
    requested_at: datetime
    steps: dict[str, dict] = field(default_factory=dict)
    key: bytes | None = None  # the canonical key (record_key), only while a forget runs (never stored)

    @property
    def state(self) -> str:
        """``done`` once the request's last step is recorded, else ``in progress`` (``kappa
        forget`` with the same topic and key resumes it)."""
        return "done" if "done" in self.steps else "in progress"


def requests(settings: Settings) -> list[Request]:
    """Every forget request, oldest first, with the steps done so far."""
    from kappa.delta.tables import dataset, is_table

    if not is_table(forgotten_path(settings), settings):
        return []
    rows = sorted(dataset(forgotten_path(settings), settings).to_table().to_pylist(), key=lambda r: r["at"])
    out: dict[str, Request] = {}
    for r in rows:
        if r["event"] == "requested":
            out[r["request_id"]] = Request(r["request_id"], r["topic"], r["key_sha256"], r["reason"], r["at"])
        elif r["request_id"] in out:
            out[r["request_id"]].steps[r["event"]] = json.loads(r["details"] or "{}")
    return list(out.values())


def forgotten_keys(settings: Settings, topics: list[str]) -> dict[str, list[str]]:
    """topic -> SHA-256 (hex) of the record keys forgotten on it, for ``topics`` (a request counts
    from the moment it is recorded, whatever its later steps)."""
    found: dict[str, list[str]] = {}
    for r in requests(settings):
        if r.topic in topics:
            found.setdefault(r.topic, []).append(r.key_sha256)
    return found


def forgotten_offsets(settings: Settings, topic: str) -> dict[int, set[int]]:
    """partition -> offsets of ``topic``'s records that ``kappa forget`` located (its ``located``
    step's ``offsets``): the rows it deletes from the topic's archive, and which no version reads
    again, so the archive's contiguity check (:func:`kappa.delta.archive.coverage`) excuses them.
    Coordinates only, never a key."""
    out: dict[int, set[int]] = {}
    for r in requests(settings):
        if r.topic == topic:
            for p, offs in ((r.steps.get("located") or {}).get("offsets") or {}).items():
                out.setdefault(int(p), set()).update(int(o) for o in offs)
    return out


def forgotten_condition(settings: Settings, topics: list[str]):
    """A Spark Column over Kafka records (``topic``, ``key``), true for a forgotten record; None
    when nothing is forgotten on ``topics``."""
    from pyspark.sql import functions as F

    from kappa.delta.declarations import catalog as catalog_of

    found = forgotten_keys(settings, topics)
    if not found:
        return None
    catalog = catalog_of(settings)
    cond = None
    for topic, keys in found.items():
        c = (F.col("topic") == F.lit(topic)) & F.sha2(key_column(catalog, topic), 256).isin(keys)
        cond = c if cond is None else cond | c
    return cond


def record_step(settings: Settings, req: Request, event: str, details: dict | None = None) -> None:
    """Append one event of ``req`` (``requested`` or a step of :data:`STEPS`) to the forgotten list,
    one row of the module docstring's schema stamped now (UTC), ``details`` as JSON (values JSON
    cannot hold as ``str``), and note the step in ``req.steps``. The key itself is never written,
    only its hash. One delta-rs append (a Delta commit) per call."""
    from deltalake import write_deltalake

    row = {"request_id": req.request_id, "topic": req.topic, "key_sha256": req.key_sha256, "event": event,
           "at": datetime.now(timezone.utc), "reason": req.reason, "details": json.dumps(details or {}, default=str)}
    path = forgotten_path(settings)
    if isinstance(path, Path):
        path.mkdir(parents=True, exist_ok=True)
    write_deltalake(_uri(settings), pa.Table.from_pylist([row], schema=_SCHEMA), mode="append",
                    storage_options=_options(settings))
    req.steps[event] = details or {}
