"""``kappa declarations evolve``: schema drift turned into a declaration, built by a replay.

Silver keeps every field a record carries that its declaration lacks (the rescued-fields table,
:func:`kappa.streaming.parse.rescued_schema`; the gate's ``schema_drift`` check names them). From
the rows a version rescued, :func:`propose` types each undeclared field from its values and writes
the declaration with the new fields added to ``transform.parse.schema``, keeping the rest of the
text as it is (comments included). Applied, the declaration's logic has changed, so the next
``kappa replay ASSET`` builds version N+1 from the log with the fields as columns.

Typing (rescued values are the JSON tokens' text; a nested value its JSON): every value an integer
-> ``long`` (``int`` when all fit 32 bits), every value a number -> ``double``, ``true``/``false``
-> ``boolean``, an ISO-8601 date-time -> ``timestamp``, otherwise ``string``. A string whose every
value looks like a number is proposed as a number: the proposal is shown before it is applied.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kappa.config import Settings
from kappa.delta.registry import Registry
from kappa.delta.rescued import rescued_fields
from kappa.spec import SpecError, parse_declaration

_INT = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass
class Evolution:
    """What :func:`propose` found and wrote: ``fields`` name -> ``{"type", "records", "sample"}``
    (the new fields, in first-seen name order), the ``version`` whose rescued rows were read, the
    declaration's current ``text`` and the ``proposed`` one (equal when nothing drifted), and where
    it came from (``origin``: its file, or ``declarations:<name>``)."""

    asset: str
    version: int
    fields: dict[str, dict] = field(default_factory=dict)
    text: str = ""
    proposed: str = ""
    origin: str = ""
    #: The declaration's file (None: it is recorded in the warehouse's declarations log).
    path: Path | None = None


def infer_type(values: list[str]) -> str:
    """The declared type (:data:`kappa.streaming.parse.SPARK_TYPES`) of rescued ``values`` (see
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
    new = {name: {"type": infer_type(f["values"]), "records": f["records"], "sample": f["sample"]}
           for name, f in found.items() if name not in declared}
    proposed = _with_fields(text, {n: f["type"] for n, f in new.items()}, spec.where) if new else text
    if new:
        evolved = parse_declaration(proposed, where=spec.where, path=spec.path)
        assert set(new) <= set(kind_of(evolved).declared_columns(evolved))
    from_log = spec.origin is not None and spec.origin.startswith("declarations:")
    return Evolution(asset, version.version, new, text, proposed, spec.where, None if from_log else spec.path)


def _with_fields(text: str, fields: dict[str, str], where: str) -> str:
    """``text`` with ``name: type`` lines added at the end of its ``schema:`` mapping under
    ``parse:``, indented as its entries are."""
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
    if not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    added = [f"{' ' * indent}{name}: {kind}  # added by kappa declarations evolve\n" for name, kind in fields.items()]
    return "".join(lines[:end] + added + lines[end:])
