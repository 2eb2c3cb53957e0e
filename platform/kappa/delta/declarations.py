"""Asset declarations kept in the warehouse, outside any image, and the catalog that joins them to
the files of ``assets/``.

Data engineers add, edit and retire assets at run time (``kappa declarations``, Dagster's
``add_asset``/``edit_asset``/``retire_asset``); what they declared is an append-only event log
(event sourcing, DDIA ch. 11) kept as a Delta table at ``<warehouse>/_kappa/declarations``, beside
the version registry, written and read with delta-rs (one Delta commit per event).

Event rows: ``asset`` string, ``event`` string (``proposed``: validated and analyzed, not applied;
``added``; ``edited``; ``retired``), ``yaml`` string (the declaration's exact text; empty for
``retired``), ``fingerprint`` string (:func:`text_fingerprint` of ``yaml``), ``replaces`` string
(the fingerprint an edit or a retirement replaced, else null), ``who`` string (as given), ``at``
timestamp (UTC), ``run_id`` string (the Dagster run, else null), ``reason`` string.

A declaration is **active** from its ``added`` event until a ``retired`` one; an ``edited`` event
replaces its text. :func:`catalog` is THE catalog every front end and runner loads: the files of
``assets/`` plus the active declarations, validated together
(:func:`kappa.spec.load_catalog`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from kappa.config import Settings, join
from kappa.core.storage import delta_rs_options, delta_rs_uri
from kappa.errors import KappaError
from kappa.spec import AssetSpec, Catalog, SpecError, load_catalog, parse_declaration

if TYPE_CHECKING:
    from kappa.delta.registry import Registry, Version

EVENTS = ("proposed", "added", "edited", "retired")

_SCHEMA = pa.schema([
    ("asset", pa.string()),
    ("event", pa.string()),
    ("yaml", pa.string()),
    ("fingerprint", pa.string()),
    ("replaces", pa.string()),
    ("who", pa.string()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("run_id", pa.string()),
    ("reason", pa.string()),
])


class DeclarationError(KappaError, ValueError):
    """A declaration change that is not allowed: a stale edit, an unknown or file-declared asset,
    a retirement something still depends on."""


def text_fingerprint(text: str) -> str:
    """The fingerprint of a declaration's exact text (16 hex digits of its SHA-256): what an edit's
    ``expected_fingerprint`` is compared with. Unlike :meth:`kappa.spec.AssetSpec.fingerprint`
    (the logic only), any change of the text changes it."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Declaration:
    """One event of the declarations log (module docstring)."""

    asset: str
    event: str
    yaml: str
    fingerprint: str
    replaces: str | None
    who: str
    at: datetime
    run_id: str | None
    reason: str

    def to_dict(self) -> dict:
        """JSON-ready fields (``at`` as ISO-8601 UTC)."""
        return {**self.__dict__, "at": self.at.isoformat()}


class Declarations:
    """Read and append the declarations log. Cheap to construct; reads the table on each query."""

    def __init__(self, settings: Settings):
        assert settings.warehouse is not None
        self.settings = settings
        self.path: Path | str = join(settings.warehouse, "_kappa", "declarations")
        self.uri = delta_rs_uri(self.path)
        self.storage_options = delta_rs_options(self.path, settings)

    def events(self, asset: str | None = None) -> list[Declaration]:
        """Every event, oldest first, optionally of one asset."""
        from kappa.delta.tables import dataset, is_table

        if not is_table(self.path, self.settings):
            return []
        rows = dataset(self.path, self.settings).to_table().to_pylist()
        rows.sort(key=lambda r: r["at"])
        return [Declaration(**r) for r in rows if asset is None or r["asset"] == asset]

    def active(self, events: list[Declaration] | None = None) -> dict[str, Declaration]:
        """Asset name -> its current ``added``/``edited`` event, for every declaration not retired."""
        out: dict[str, Declaration] = {}
        for e in self.events() if events is None else events:
            if e.event in ("added", "edited"):
                out[e.asset] = e
            elif e.event == "retired":
                out.pop(e.asset, None)
        return out

    def record(self, asset: str, event: str, text: str, *, who: str, reason: str = "",
               run_id: str | None = None, replaces: str | None = None) -> Declaration:
        """Append one ``event`` (one of :data:`EVENTS`) in one Delta commit and return it. Raises
        ``ValueError`` for an unknown event name."""
        [row] = self.record_all({asset: text}, event, who=who, reason=reason, run_id=run_id, replaces=replaces)
        return row

    def record_all(self, texts: dict[str, str], event: str, *, who: str, reason: str = "",
                   run_id: str | None = None, replaces: str | None = None) -> list[Declaration]:
        """Append one ``event`` per asset of ``texts`` (name -> YAML text) in ONE Delta commit and
        return them (an empty ``texts`` writes nothing). Raises ``ValueError`` for an unknown event."""
        from deltalake import write_deltalake

        if event not in EVENTS:
            raise ValueError(f"unknown declarations event {event!r}")
        at = datetime.now(timezone.utc)
        rows = [Declaration(asset=asset, event=event, yaml=text, fingerprint=text_fingerprint(text) if text else "",
                            replaces=replaces, who=who, at=at, run_id=run_id, reason=reason)
                for asset, text in texts.items()]
        if not rows:
            return []
        if isinstance(self.path, Path):
            self.path.mkdir(parents=True, exist_ok=True)
        write_deltalake(self.uri, pa.Table.from_pylist([r.__dict__ for r in rows], schema=_SCHEMA), mode="append",
                        storage_options=self.storage_options)
        return rows


def known_version(settings: Settings, registry: "Registry", asset: str, version: int) -> "Version":
    """``registry.version(asset, version)``, except that a name with no version in the registry that
    the catalog does not declare either is an unknown name: raises :class:`kappa.spec.SpecError`
    (``unknown asset 'x' (known: …)``) rather than "x has no version v1"; otherwise
    :class:`kappa.delta.registry.RegistryError` as ``Registry.version``."""
    from kappa.delta.registry import RegistryError

    try:
        return registry.version(asset, version)
    except RegistryError:
        if not registry.versions(asset):
            catalog(settings)[asset]
        raise


def catalog(settings: Settings, declared: "dict[str, str | AssetSpec] | None" = None) -> Catalog:
    """THE catalog: the files of ``settings.assets_dir`` plus the active declarations of the
    warehouse (``declared``, name -> YAML text or its parsed spec, replaces them when given: a
    candidate catalog), validated together. Raises :class:`kappa.spec.SpecError` naming the file or
    ``declarations:<name>`` and the field."""
    if declared is None:
        declared = {} if settings.warehouse is None else {
            name: d.yaml for name, d in Declarations(settings).active().items()}
    return load_catalog(settings.assets_dir, declared)


def provenance(settings: Settings, spec: AssetSpec) -> dict[str, str]:
    """What a new version records of the declaration it is created from: ``declaration`` (the
    exact YAML text) and ``source`` (the file relative to the assets folder, or
    ``declarations:<name>``). Empty for a spec built in code (no text)."""
    if spec.text is None:
        return {}
    if spec.path is None:
        return {"declaration": spec.text, "source": spec.where}
    try:
        source = str(Path(spec.path).resolve().relative_to(Path(settings.assets_dir).resolve()))
    except ValueError:
        source = str(spec.path)
    return {"declaration": spec.text, "source": source}


def as_recorded(settings: Settings, catalog: Catalog, versions: "dict[str, Version]") -> Catalog:
    """``catalog`` with each asset of ``versions`` replaced by the spec its version recorded
    (:func:`recorded_spec`): what runners start, so a version always runs the declaration it was
    created from."""
    specs = {n: recorded_spec(settings, v, catalog.assets.get(n)) for n, v in versions.items()}
    return Catalog({**catalog.assets, **specs}, catalog.topics, catalog.root)


def recorded_spec(settings: Settings, version: "Version", current: AssetSpec | None = None) -> AssetSpec:
    """The spec ``version`` was created from, parsed from the YAML text it recorded (a file's
    ``python`` module is found beside that file in this assets folder). A version created before
    versions recorded their text gets ``current`` (the catalog's entry). Raises
    :class:`kappa.spec.SpecError` when there is neither, or the recorded text no longer parses."""
    if version.declaration is None:
        if current is None:
            raise SpecError(f"{version.name} recorded no declaration and {version.asset} is not in the catalog")
        return current
    source = version.source or version.asset
    path = None if source.startswith("declarations:") else (
        Path(source) if Path(source).is_absolute() else Path(settings.assets_dir) / source)
    if current is not None and current.text == version.declaration and (
            current.origin == source if path is None else
            current.path is not None and Path(current.path).resolve() == path.resolve()):
        return current  # the same text from the same place: the catalog's parse of it, not another
    if path is None:
        return parse_declaration(version.declaration, source)
    return parse_declaration(version.declaration, f"{version.name} (recorded from {source})", path)
