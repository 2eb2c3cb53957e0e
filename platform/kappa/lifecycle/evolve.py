"""``kappa declarations evolve``: schema drift turned into a declaration, built by a replay.

Silver keeps every field a record carries that its declaration lacks, and every value of a declared
optional field that is not of its declared type (the rescued-fields table,
:func:`kappa.streaming.records.rescued_schema`; the gate's ``schema_drift`` check names them). From
the rows a version rescued, :func:`propose` types each undeclared field from its values, widens
the type of each declared field whose values did not fit (:func:`widen`), and writes the
declaration with the new fields added to ``transform.parse.schema`` and the changed types
replaced, keeping the rest of the text as it is (comments included); :func:`try_on_sample` parses
the rescued records again, read back from the log, with the proposed declaration. Applied, the
declaration's logic has changed, so the next ``kappa replay ASSET`` builds version N+1 from the
log with the fields as columns of their new types.

Typing (rescued values are the JSON tokens' text; a nested value its JSON): every value an integer
-> ``long`` (``int`` when all fit 32 bits), every value a number -> ``double``, ``true``/``false``
-> ``boolean``, an ISO-8601 date-time -> ``timestamp``, otherwise ``string``. A string whose every
value looks like a number is proposed as a number: the proposal is shown before it is applied.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kappa.config import Settings
from kappa.delta.registry import Registry
from kappa.delta.rescued import rescued_fields
from kappa.spec import SpecError, parse_declaration

_INT = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass
class Evolution:
    """What :func:`propose` found and wrote: ``fields`` name -> ``{"type", "records", "sample",
    "was"}`` (the new fields, ``was`` None, and the declared fields whose type changes, ``was`` the
    declared type; in name order), the ``version`` whose rescued rows were read, the declaration's
    current ``text`` and the ``proposed`` one (equal when nothing drifted), and where it came from
    (``origin``: its file, or ``declarations:<name>``); ``sample``: :func:`try_on_sample`'s
    figures once run."""

    asset: str
    version: int
    fields: dict[str, dict] = field(default_factory=dict)
    text: str = ""
    proposed: str = ""
    origin: str = ""
    #: The declaration's file (None: it is recorded in the warehouse's declarations log).
    path: Path | None = None
    sample: dict | None = None


def infer_type(values: list[str]) -> str:
    """The declared type (:data:`kappa.streaming.records.SPARK_TYPES`) of rescued ``values`` (see
    the module docstring); ``string`` for none."""
    if values and all(_INT.match(v) for v in values):
        return "int" if all(-2**31 <= int(v) < 2**31 for v in values) else "long"
    if values and all(_NUMBER.match(v) for v in values):
        return "double"
    if values and all(v in ("true", "false") for v in values):
        return "boolean"
    if values and all(_is_timestamp(v) for v in values):
        return "timestamp"
    return "string"


#: The numeric types, each holding every value of those before it.
_WIDER = ("int", "long", "double")


def widen(declared: str, values: list[str]) -> str:
    """The type a declared field needs to hold both its declared type's values and ``values`` (the
    rescued values that did not convert): the wider number (``int`` < ``long`` < ``double``) when
    both are numbers, else ``string`` (Spark's JSON reader takes any token's text as a string)."""
    found = infer_type(values)
    if declared in _WIDER and found in _WIDER:
        return max(declared, found, key=_WIDER.index)
    return "string"


def _is_timestamp(v: str) -> bool:
    if not re.match(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", v):
        return False
    try:
        datetime.fromisoformat(v.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def drift_counts(settings: Settings, version, limit: int = 500) -> dict[str, int]:
    """Undeclared field -> records that carried it, summed over the ``schema_drift`` counts of the
    micro-batch commits among the last ``limit`` of ``version``'s table (a
    :class:`kappa.delta.registry.Version`; commit metadata, no data read); empty when none."""
    from kappa.delta.tables import is_table, open_table

    if not is_table(version.table_path, settings):
        return {}
    out: dict[str, int] = {}
    for entry in open_table(version.table_path, settings).history(limit):
        try:
            meta = json.loads(entry.get("userMetadata") or "{}")
        except ValueError:
            continue
        for name, n in ((meta.get("schema_drift") or {}).get("fields") or {}).items():
            out[name] = out.get(name, 0) + int(n)
    return dict(sorted(out.items()))


def propose(settings: Settings, asset: str) -> Evolution:
    """The declaration of ``asset`` (a ``parse`` asset) with the fields its promoted version (the
    newest when none is) rescued added to ``transform.parse.schema``. Raises
    :class:`kappa.spec.SpecError` for an unknown asset, one that is not a ``parse`` asset, or a
    declaration whose schema block cannot be found in its text."""
    from kappa.delta.declarations import catalog as catalog_of

    from kappa.streaming.kinds import kind_of

    spec = catalog_of(settings)[asset]
    kind = kind_of(spec)
    if "schema_drift" not in kind.gate_checks:
        raise SpecError(f"{spec.where}: evolve: {asset} is a '{kind.name}' asset; only a parse asset "
                        "keeps undeclared fields")
    declared = kind.declared_columns(spec)
    registry = Registry(settings)
    version = registry.promoted(asset) or registry.latest(asset)
    if version is None:
        raise SpecError(f"{asset} has no version yet: run it before evolving its declaration")
    text = spec.text if spec.text is not None else (spec.path.read_text() if spec.path else "")
    found = rescued_fields(settings, asset, version.version)
    types = {name: f.type for name, f in (declared or {}).items()}
    new = {name: {"type": infer_type(f["values"]), "records": f["records"], "sample": f["sample"], "was": None}
           for name, f in sorted(found.items()) if name not in declared}
    retyped = {name: {"type": widen(types[name], f["values"]), "records": f["records"], "sample": f["sample"],
                      "was": types[name]}
               for name, f in sorted(found.items()) if name in types}
    proposed = text
    if retyped:
        proposed = _with_types(proposed, {n: (f["was"], f["type"]) for n, f in retyped.items()}, spec.where)
    if new:
        proposed = _with_fields(proposed, {n: f["type"] for n, f in new.items()}, spec.where)
    drifted = {**new, **retyped}
    if drifted:
        evolved = parse_declaration(proposed, where=spec.where, path=spec.path)
        fields = kind_of(evolved).declared_columns(evolved) or {}
        assert all(fields[n].type == f["type"] for n, f in drifted.items())
    from_log = spec.origin is not None and spec.origin.startswith("declarations:")
    return Evolution(asset, version.version, drifted, text, proposed, spec.where, None if from_log else spec.path)


def try_on_sample(settings: Settings, ev: Evolution, spark, limit: int = 1_000) -> dict:
    """Run the proposed declaration's parse on the first ``limit`` records ``ev.version`` rescued,
    read back from the log by their coordinates (:func:`kappa.kafka.topics.records_at`), as silver
    would parse them in the next version. Sets and returns ``ev.sample``: ``{"records": rescued
    records asked for, "read": still in the log, "bad": {reason: records the proposal would
    quarantine}, "carried": {field: records with a non-null value for it}, "parsed": {field: those
    of them whose value the proposed type holds}, "still_rescued": {field: records whose field would
    still be rescued}}``; the proposal holds the drift when ``parsed`` equals ``carried`` and
    ``still_rescued`` and ``bad`` are empty. Spark errors propagate."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from kappa.delta.rescued import rescued_coordinates
    from kappa.kafka.topics import records_at
    from kappa.streaming.kinds import kind_of
    from kappa.streaming.records import KAFKA_COLUMNS, RESCUED, json_path, kafka_schema

    coordinates = rescued_coordinates(settings, ev.asset, ev.version, limit)
    records = records_at(settings, coordinates)
    out: dict = {"records": len(coordinates), "read": len(records), "bad": {}, "carried": {}, "parsed": {},
                 "still_rescued": {}}
    if records and ev.fields:
        proposed = parse_declaration(ev.proposed, where=ev.origin, path=ev.path)
        parse_records = kind_of(proposed).parse_records
        assert parse_records is not None, f"{ev.origin}: a {proposed.transform.kind} asset does not parse records"
        frame = spark.createDataFrame(
            [(r.key, r.value, r.topic, r.partition, r.offset, datetime.fromtimestamp(r.timestamp_ms / 1000, timezone.utc))
             for r in records], kafka_schema())
        parsed = parse_records(frame.select(*KAFKA_COLUMNS), proposed)
        good = F.col("reason").isNull()
        rescued = F.map_keys(F.from_json(F.col(RESCUED), T.MapType(T.StringType(), T.StringType())))
        text = F.col("value").cast("string")
        carried = {n: F.get_json_object(text, json_path(n)).isNotNull() for n in ev.fields}
        row = parsed.agg(*[F.count_if(carried[n]).alias(f"c{i}") for i, n in enumerate(ev.fields)],
                         *[F.count_if(good & carried[n] & F.col(f"r.`{n}`").isNotNull()).alias(f"p{i}")
                           for i, n in enumerate(ev.fields)],
                         *[F.count_if(good & F.coalesce(F.array_contains(rescued, n), F.lit(False))).alias(f"s{i}")
                           for i, n in enumerate(ev.fields)]).first()
        bad = parsed.where(~good).groupBy("reason").count().collect()
        out["carried"] = {n: row[f"c{i}"] for i, n in enumerate(ev.fields)}
        out["parsed"] = {n: row[f"p{i}"] for i, n in enumerate(ev.fields)}
        out["still_rescued"] = {n: row[f"s{i}"] for i, n in enumerate(ev.fields) if row[f"s{i}"]}
        out["bad"] = {r["reason"]: r["count"] for r in bad}
    ev.sample = out
    return out


def sample_problems(sample: dict | None) -> list[str]:
    """Why :func:`try_on_sample`'s figures show the proposal not holding the drift, one line each
    (empty: it holds, or there was nothing to try)."""
    if not sample:
        return []
    out = [f"{n}: {c - sample['parsed'].get(n, 0):,} value(s) the proposed type does not hold"
           for n, c in sample["carried"].items() if sample["parsed"].get(n, 0) < c]
    out += [f"{n}: {c:,} record(s) still rescued" for n, c in sample["still_rescued"].items()]
    out += [f"{c:,} record(s) would be quarantined: {reason}" for reason, c in sample["bad"].items()]
    return out


def _schema_block(text: str, where: str) -> tuple[list[str], int, int, int]:
    """(lines of ``text``, index of its ``schema:`` line under ``parse:``, index after the block's
    last entry, the entries' indentation)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"^\s+schema:\s*(#.*)?$", ln)), None)
    if start is None:
        raise SpecError(f"{where}: evolve: no block 'schema:' under transform.parse to add fields to")
    outer = len(lines[start]) - len(lines[start].lstrip())
    end, indent = start + 1, None
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        depth = len(ln) - len(ln.lstrip())
        if depth <= outer:
            break
        indent = indent if indent is not None else depth
        end = i + 1
    if indent is None:
        raise SpecError(f"{where}: evolve: the schema block is not a mapping of one field per line")
    return lines, start, end, indent


def _with_types(text: str, types: dict[str, tuple[str, str]], where: str) -> str:
    """``text`` with the type of each field ``name`` of its schema block changed (name -> (declared,
    new)), in either form (``name: int`` or ``name: {type: int, …}``), noted in a comment."""
    lines, start, end, indent = _schema_block(text, where)
    for name, (was, kind) in types.items():
        entry = re.compile(rf"^(\s{{{indent}}}{re.escape(name)}:\s*)(\{{.*?\btype:\s*)?{re.escape(was)}\b")
        i = next((i for i in range(start + 1, end) if entry.match(lines[i])), None)
        if i is None:
            raise SpecError(f"{where}: evolve: field '{name}' of type {was} not found in the schema block "
                            "as 'name: type' or 'name: {type: …}' on one line")
        line = entry.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{kind}", lines[i], count=1)
        body, newline = line.rstrip("\n"), "\n" if line.endswith("\n") else ""
        note = f"was {was}: changed by kappa declarations evolve"
        lines[i] = (f"{body}  # {note}" if "#" not in body else f"{body} ({note})") + newline
    return "".join(lines)


def _with_fields(text: str, fields: dict[str, str], where: str) -> str:
    """``text`` with ``name: type`` lines added at the end of its ``schema:`` mapping under
    ``parse:``, indented as its entries are."""
    lines, _start, end, indent = _schema_block(text, where)
    if not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    added = [f"{' ' * indent}{name}: {kind}  # added by kappa declarations evolve\n" for name, kind in fields.items()]
    return "".join(lines[:end] + added + lines[end:])
