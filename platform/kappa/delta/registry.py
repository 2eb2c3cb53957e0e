"""The version registry: which versions of each asset exist, what happened to them, and which one a
stable name resolves to.

It is an append-only event log (event sourcing, DDIA ch. 11) kept as a Delta table at
``<warehouse>/_kappa/registry``, written and read with delta-rs. Each write is one Delta commit, so a
promotion of several assets (a chain) is atomic: readers see all of it or none of it (Delta's
transaction log gives atomic commits; see "Delta Lake transaction log protocol").

Event rows: ``asset`` string, ``version`` int, ``event`` string, ``at`` timestamp (UTC), ``details``
JSON string. Events: ``created``, ``running``, ``caught_up``, ``stopped`` (a continuous run ended, with its
metrics), ``dropped`` (a Kubernetes driver's micro-batches whose stateful operators dropped rows
behind the watermark, recorded while it runs: ``dropped_by_watermark``, ``batches``,
``dropped_named``, ``late_not_named``; :class:`kappa.streaming.late.LateTally`), ``failed``, ``gate_passed``,
``gate_failed``, ``promoted``, ``pinned`` (the Delta table version its stable name reads moved: a
new cut, :mod:`kappa.lifecycle.cut`), ``retired``. A ``promoted`` or ``pinned`` event's details
carry the version's pin: ``snapshot`` (the Delta table version readers of the stable name read),
``batch_id``, ``reads`` (upstream asset -> the Delta version of it the snapshot covers), ``offsets``
(its own Kafka sources: topic -> partition -> end offset, exclusive) and ``cut`` (the same through
its upstreams: the source-offset watermark it covers). ``checkpoint_deleted``: ``kappa forget`` deleted the
version's checkpoint because its state may hold a forgotten key (details ``request_id``, ``reason``,
``files``; :mod:`kappa.lifecycle.forget`).

Requests that destroy data wait for approval here too, as events of the pseudo-asset
:data:`REQUESTS` (version 0; :mod:`kappa.lifecycle.approval`): ``requested`` (details
``request_id``, ``kind`` ``forget`` or ``maintain``, its parameters, ``claimed_by``: who the
requester said they are, unverified, and ``origin``, e.g. the Dagster run), ``approved``
(``request_id``, ``approver``: the verified identity of whoever ran ``kappa approve``), then
``request_done`` (``request_id``, ``outcome``) or ``request_failed`` (``request_id``, ``error``).

A version's state is derived from its events: running, caught-up, failed, failed-gate, promoted
(the one the stable name points at), retired, checkpoint-deleted. A version whose checkpoint was
deleted can never run again (:meth:`Registry.latest` skips it) nor be promoted (a rollback onto it
refuses); its table stays readable while it stays promoted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from kappa.config import Settings, join
from kappa.errors import KappaError
from kappa.core.storage import delta_rs_options, delta_rs_uri

EVENTS = ("created", "running", "caught_up", "stopped", "dropped", "failed", "gate_passed", "gate_failed",
          "promoted", "pinned", "retired", "checkpoint_deleted",
          "requested", "approved", "request_done", "request_failed")

#: The ``asset`` of the approval events (``requested``, ``approved``, ``request_done``,
#: ``request_failed``; version 0): a name no declaration can take (asset names are identifiers).
REQUESTS = "_kappa/requests"

#: How many times this process has read the event table (:meth:`Registry._read`, the one function
#: that reads it): tests count a command's reads with it.
TABLE_READS = 0

_SCHEMA = pa.schema([
    ("asset", pa.string()),
    ("version", pa.int32()),
    ("event", pa.string()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("details", pa.string()),
])


class RegistryError(KappaError, RuntimeError):
    """An unknown asset or version, or a promotion that is not allowed."""


@dataclass
class Version:
    """One version of one asset, folded from its events."""

    asset: str
    version: int
    table_path: str
    checkpoint_path: str
    txn_app_id: str
    fingerprint: str
    upstream: dict[str, int]
    created_at: datetime
    state: str = "created"
    promoted_at: datetime | None = None
    events: list[dict] = field(default_factory=list)
    #: The pin of the last ``promoted``/``pinned`` event that carried one (see the module
    #: docstring), or None (never pinned: readers read the table's latest commit).
    pin: dict | None = None
    #: The exact YAML text the version was created from and where it came from (a file relative
    #: to the assets folder, ``flights/flights.yaml``, or ``declarations:<name>``); None for a
    #: version created before versions recorded them. Runners build the version's query from
    #: this text (:func:`kappa.delta.declarations.recorded_spec`), never from the file as it is now.
    declaration: str | None = None
    source: str | None = None
    #: Upstream asset -> the table path of the version of it this one is pinned to
    #: (:attr:`upstream`), resolved from the same snapshot of the registry as this version: a
    #: driver reads its upstream tables without another read of the registry.
    upstream_tables: dict[str, str] = field(default_factory=dict)

    @property
    def snapshot(self) -> int | None:
        """The Delta table version its stable name reads (:attr:`pin`), or None (the latest)."""
        return None if self.pin is None else self.pin.get("snapshot")

    @property
    def name(self) -> str:
        """``<asset>/v<N>``, how messages and the CLI name a version."""
        return f"{self.asset}/v{self.version}"

    def upstream_table(self, asset: str) -> str:
        """The table path of the version of upstream ``asset`` this version is pinned to
        (:attr:`upstream_tables`). Raises :class:`RegistryError` when ``asset`` is not one of its
        upstreams."""
        if asset not in self.upstream:
            raise RegistryError(f"{self.name} was not built against {asset} (upstream: {sorted(self.upstream)})")
        if asset not in self.upstream_tables:
            raise RegistryError(f"{self.name} is pinned to {asset}/v{self.upstream[asset]}, which the registry lacks")
        return self.upstream_tables[asset]

    def writer_id(self, side: str | None = None) -> str:
        """Delta's ``txnAppId`` of this version's writes: ``txn_app_id`` for its own table,
        ``<txn_app_id>-<side>`` for its rows in a shared side table (``side`` ``"quarantine"`` or
        ``"late"``), so each table's transaction ids never collide across writers. The only place
        a side writer id is made."""
        return self.txn_app_id if side is None else f"{self.txn_app_id}-{side}"

    @property
    def checkpoint_deleted(self) -> dict | None:
        """Details of the ``checkpoint_deleted`` event (``request_id``, ``reason``, ``files``) when
        ``kappa forget`` deleted this version's checkpoint, else None. Such a version cannot run
        again (its state is gone) nor be promoted."""
        return self.last("checkpoint_deleted")

    def last(self, event: str) -> dict | None:
        """Details of the most recent ``event`` of this version, or None."""
        for e in reversed(self.events):
            if e["event"] == event:
                return e["details"]
        return None


def table_path(settings: Settings, asset: str, version: int) -> Path | str:
    """``<warehouse>/<asset>/v<N>``: where version N of an asset keeps its Delta table."""
    assert settings.warehouse is not None
    return join(settings.warehouse, asset, f"v{version}")


def checkpoint_path(settings: Settings, asset: str, version: int) -> Path | str:
    """``<checkpoints>/<asset>/v<N>``: the version's checkpoint; never shared between versions."""
    assert settings.checkpoints is not None
    return join(settings.checkpoints, asset, f"v{version}")


def quarantine_path(settings: Settings) -> Path | str:
    """The quarantine table, shared by every asset and version (rows carry both)."""
    assert settings.warehouse is not None
    return join(settings.warehouse, "_kappa", "quarantine")


def rescued_path(settings: Settings) -> Path | str:
    """Fields of silver's records that their asset does not declare, per record (schema drift;
    :func:`kappa.streaming.records.rescued_schema`), shared by every asset and version."""
    assert settings.warehouse is not None
    return join(settings.warehouse, "_kappa", "rescued")


def late_events_path(settings: Settings) -> Path | str:
    """Events that arrived behind their asset's watermark (kept, never silently dropped)."""
    assert settings.warehouse is not None
    return join(settings.warehouse, "_kappa", "late_events")


def new_version_details(settings: Settings, asset: str, version: int, fingerprint: str,
                        upstream: dict[str, int], writer_suffix: str | None = None) -> dict:
    """THE place a version's locations and writer id are made: ``table_path``
    (``<warehouse>/<asset>/v<N>``), ``checkpoint_path`` (``<checkpoints>/<asset>/v<N>``) and the
    idempotent-writer id ``txn_app_id`` (``kappa-<asset>-v<N>-<12 hex>``, unique per version even
    if a warehouse is reused, Delta's ``txnAppId``). Everything else (runners, the kubernetes
    entrypoint, the SparkApplication) receives them with the :class:`Version`, never re-derives them."""
    return {
        "table_path": str(table_path(settings, asset, version)),
        "checkpoint_path": str(checkpoint_path(settings, asset, version)),
        "txn_app_id": f"kappa-{asset}-v{version}-{writer_suffix or uuid.uuid4().hex[:12]}",
        "fingerprint": fingerprint,
        "upstream": dict(upstream),
    }


def not_promoted_message(asset: str, versions: list[Version]) -> str:
    """One line saying that stable name ``asset`` has no promoted version, naming the versions that
    exist (with their states) and how to promote one."""
    listed = ", ".join(f"v{v.version} ({v.state})" for v in versions) or "none"
    best = next((v for v in reversed(versions) if v.state in ("caught-up", "running")), versions[-1] if versions else None)
    how = f"`kappa promote {asset} {best.version}`" if best else f"`kappa run {asset}`, then `kappa promote`"
    return f"{asset} has no promoted version (versions: {listed}); promote one with {how}"


def not_promoted_sql(message: str, columns: Sequence[tuple[str, str]] = ()) -> str:
    """A ``SELECT`` that fails with ``message`` whatever is selected from it, even ``count(*)``
    (Spark's ``raise_error`` in a filter over one row, which column pruning cannot drop): the
    relation an unpromoted stable name is served as. ``columns`` (name, Spark SQL type), the
    asset's newest table's (:meth:`Registry.unpromoted_columns`), are its columns, each itself a
    ``raise_error`` cast to the column's type (not a typed NULL, which the optimizer folds: a
    filter on it would be pruned, query and all, to no rows): a query that names them
    (``sum(flights)``, a join on ``carrier``) resolves and then fails with ``message`` instead of
    Spark's ``UNRESOLVED_COLUMN``. Without them its one column is ``id``."""
    quoted = message.replace("\\", "\\\\").replace("'", "\\'")
    fail = f"raise_error('{quoted}')"
    select = ", ".join(f"CAST({fail} AS {kind}) AS `{name.replace('`', '``')}`" for name, kind in columns) or "id"
    return f"SELECT {select} FROM range(1) WHERE {fail} IS NULL"


class Registry:
    """Read and append registry events: ONE snapshot of the event table per command.

    A command constructs one ``Registry`` at its entry point (a CLI command, a Dagster op, sensor
    or job, the runners' entrypoint) and passes it down. The first query reads the whole table
    (:meth:`_read`) and keeps it; every later query folds that snapshot. The registry's own appends
    are added to it as written (no re-read: the appended rows are exactly what a read would return
    for them), so a command sees its own writes. Others' appends are seen only after
    :meth:`refresh`, which a command calls where it waits for another process's events (a loop
    polling for a state a driver records) and nowhere else. :meth:`create_version` numbers the new
    version from the snapshot, so a command takes its snapshot just before it creates versions
    (two commands creating versions of one asset at once could collide, as with a fresh read:
    the table has no compare-and-swap)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        assert settings.warehouse is not None
        self.path = join(settings.warehouse, "_kappa", "registry")
        self.uri = delta_rs_uri(self.path)
        #: delta-rs options for the registry's location (the object store's endpoint, if any).
        self.storage_options = delta_rs_options(self.path, settings)
        self._snapshot: list[dict] | None = None  # every event, oldest first; None until first read

    # -- reading ---------------------------------------------------------------------------------
    def events(self, asset: str | None = None) -> list[dict]:
        """Every event of the snapshot (oldest first; read on the first call), optionally of one
        asset; ``details`` decoded. The dicts are the snapshot's own: read them, never change them."""
        if self._snapshot is None:
            self._snapshot = self._read()
        return [r for r in self._snapshot if asset is None or r["asset"] == asset]

    def refresh(self) -> "Registry":
        """Read the event table again (others' appends since the snapshot was taken); returns self.
        Call it where a command waits for another process's events, once per wait."""
        self._snapshot = self._read()
        return self

    def _read(self) -> list[dict]:
        """Every event of the table (oldest first), ``details`` decoded: THE read of the event table
        (counted in :data:`TABLE_READS`); ``[]`` when it has no table yet."""
        from kappa.delta.tables import dataset, is_table

        global TABLE_READS
        TABLE_READS += 1
        if not is_table(self.path, self.settings):
            return []
        rows = dataset(self.path, self.settings).to_table().to_pylist()  # not delta-rs's reader: see kappa.delta.tables
        rows.sort(key=lambda r: r["at"])
        for r in rows:
            r["details"] = json.loads(r["details"] or "{}")
        return rows

    def versions(self, asset: str, events: list[dict] | None = None) -> list[Version]:
        """Every version of ``asset``, oldest first, with its derived state (folded from
        ``events`` when given — all assets' events, oldest first — else from the snapshot)."""
        by_version: dict[int, Version] = {}
        promoted: int | None = None
        events = self.events() if events is None else events
        tables: dict[tuple[str, int], str] | None = None  # (asset, version) -> table path, when needed
        for e in (e for e in events if e["asset"] == asset):
            v = e["version"]
            if e["event"] == "created":
                d = e["details"]
                upstream = d.get("upstream", {})
                if upstream and tables is None:
                    tables = {(c["asset"], c["version"]): c["details"]["table_path"]
                              for c in events if c["event"] == "created"}
                by_version[v] = Version(
                    asset=asset, version=v, table_path=d["table_path"], checkpoint_path=d["checkpoint_path"],
                    txn_app_id=d["txn_app_id"], fingerprint=d["fingerprint"], upstream=upstream,
                    created_at=e["at"], declaration=d.get("declaration"), source=d.get("source"),
                    upstream_tables={a: tables[(a, n)] for a, n in upstream.items() if (a, n) in tables},
                )
            if v not in by_version:
                continue
            ver = by_version[v]
            ver.events.append(e)
            if e["event"] == "promoted":
                promoted = v
                ver.promoted_at = e["at"]
            if e["event"] in ("promoted", "pinned") and "snapshot" in e["details"]:
                ver.pin = e["details"]
            state = {"running": "running", "caught_up": "caught-up", "failed": "failed",
                     "gate_failed": "failed-gate", "gate_passed": "caught-up", "retired": "retired",
                     "checkpoint_deleted": "checkpoint-deleted"}.get(e["event"])
            if state:
                ver.state = state
        for ver in by_version.values():
            if ver.version == promoted and ver.state != "retired":
                ver.state = "promoted"
        return [by_version[k] for k in sorted(by_version)]

    def version(self, asset: str, version: int, events: list[dict] | None = None) -> Version:
        """Version ``version`` of ``asset``. Raises :class:`RegistryError` when it does not exist."""
        for v in self.versions(asset, events):
            if v.version == version:
                return v
        raise RegistryError(f"{asset} has no version v{version}")

    def upstream_of(self, version: Version, asset: str) -> Version:
        """The version of upstream ``asset`` that ``version`` was built against (pinned when it was
        created). Raises :class:`RegistryError` when ``asset`` is not one of its upstreams."""
        if asset not in version.upstream:
            raise RegistryError(f"{version.name} was not built against {asset} (upstream: {sorted(version.upstream)})")
        return self.version(asset, version.upstream[asset])

    def latest(self, asset: str, events: list[dict] | None = None) -> Version | None:
        """The newest version that is not retired and still has its checkpoint (the one ``kappa
        run`` continues), or None."""
        live = [v for v in self.versions(asset, events) if v.state != "retired" and v.checkpoint_deleted is None]
        return live[-1] if live else None

    def promoted(self, asset: str, events: list[dict] | None = None) -> Version | None:
        """The version ``asset``'s stable name points at, or None (never promoted)."""
        for v in self.versions(asset, events):
            if v.state == "promoted":
                return v
        return None

    def promoted_all(self) -> dict[str, Version]:
        """Stable name -> promoted version, for every asset that has one."""
        events = self.events()  # one read of the registry, folded per asset
        found = {asset: self.promoted(asset, events) for asset in sorted({e["asset"] for e in events})}
        return {asset: v for asset, v in found.items() if v is not None}

    def unpromoted(self, events: list[dict] | None = None) -> dict[str, str]:
        """asset -> :func:`not_promoted_message`, for every asset that has live (not retired)
        versions but no promoted one (a stable name readers would otherwise get Spark's
        ``TABLE_OR_VIEW_NOT_FOUND`` for)."""
        events = self.events() if events is None else events
        out = {}
        for asset in sorted({e["asset"] for e in events}):
            versions = self.versions(asset, events)
            live = [v for v in versions if v.state != "retired"]  # all retired: a retired declaration
            if live and not any(v.state == "promoted" for v in versions):
                out[asset] = not_promoted_message(asset, versions)
        return out

    def unpromoted_columns(self, asset: str, events: list[dict] | None = None) -> list[tuple[str, str]]:
        """(column, Spark SQL type) of the newest live version of ``asset`` that has a table (its
        latest commit's schema, read with delta-rs; the types as Spark SQL names them,
        ``StructType.fromJson`` of Delta's schema JSON, ``simpleString``); ``[]`` when none has
        committed yet."""
        from pyspark.sql.types import StructType

        from kappa.delta.tables import is_table, open_table

        for v in reversed(self.versions(asset, events)):
            if v.state != "retired" and is_table(v.table_path, self.settings):
                schema = StructType.fromJson(json.loads(open_table(v.table_path, self.settings).schema().to_json()))
                return [(f.name, f.dataType.simpleString()) for f in schema.fields]
        return []

    # -- writing ---------------------------------------------------------------------------------
    def _append(self, rows: list[dict]) -> None:
        from deltalake import write_deltalake

        now = datetime.now(timezone.utc)
        table = pa.Table.from_pylist(
            [{**r, "at": r.get("at", now), "details": json.dumps(r.get("details", {}), default=str)} for r in rows],
            schema=_SCHEMA,
        )
        if isinstance(self.path, Path):
            self.path.mkdir(parents=True, exist_ok=True)
        write_deltalake(self.uri, table, mode="append", storage_options=self.storage_options)
        if self._snapshot is not None:  # keep the snapshot true without reading: the rows as a read decodes them
            written = table.to_pylist()
            for r in written:
                r["details"] = json.loads(r["details"])
            self._snapshot = sorted([*self._snapshot, *written], key=lambda r: r["at"])

    def record(self, asset: str, version: int, event: str, **details: object) -> None:
        """Append one lifecycle ``event`` (one of :data:`EVENTS`) of ``asset`` ``version`` with its
        ``details``. Raises ``ValueError`` for an unknown event name."""
        if event not in EVENTS:
            raise ValueError(f"unknown registry event {event!r}")
        self._append([{"asset": asset, "version": version, "event": event, "details": details}])

    def create_version(self, asset: str, fingerprint: str, upstream: dict[str, int], **extra: object) -> Version:
        """Register version N+1 of ``asset`` with fresh paths and a fresh idempotent-writer id;
        ``extra`` (e.g. ``start_offsets``, and ``declaration``/``source``:
        :func:`kappa.delta.declarations.provenance`) is kept in the ``created`` event's details."""
        existing = self.versions(asset)
        n = (existing[-1].version + 1) if existing else 1
        details = {**new_version_details(self.settings, asset, n, fingerprint, upstream), **extra}
        self._append([{"asset": asset, "version": n, "event": "created", "details": details}])
        return self.version(asset, n)

    def promote(self, targets: dict[str, int], reason: str = "promote", pins: dict[str, dict] | None = None,
                **evidence: object) -> None:
        """Point each stable name in ``targets`` at its version, in ONE commit (atomic for a chain).
        ``pins`` (asset -> pin, :func:`kappa.lifecycle.cut.plan_cut`) go into the same commit: a
        target's with its ``promoted`` event, any other promoted asset's as a ``pinned`` event (its
        snapshot moved with the cut; none when its pin is unchanged). Readers see it at their next look
        (:func:`kappa.lifecycle.promotion.commit_promotion` also waits for a running SQL endpoint).

        Raises :class:`RegistryError` for an unknown or retired version, or one whose checkpoint
        ``kappa forget`` deleted (a rollback onto it too)."""
        pins = pins or {}
        rows = []
        for asset, v in targets.items():
            ver = self.version(asset, v)
            if ver.state == "retired":
                raise RegistryError(f"{ver.name} is retired and cannot be promoted")
            if (deleted := ver.checkpoint_deleted) is not None:
                raise RegistryError(
                    f"{ver.name} cannot be promoted: kappa forget (request {deleted.get('request_id')}) deleted its "
                    f"checkpoint, whose state held a forgotten key, so it can never run again. Promote a newer "
                    f"version of {asset} (`kappa versions {asset}`) or replay it (`kappa replay {asset}`)")
            previous = self.promoted(asset)
            rows.append({"asset": asset, "version": v, "event": "promoted",
                         "details": {"reason": reason, "previous": previous.version if previous else None,
                                     **pins.get(asset, {}), **evidence}})
        rows += self._pin_rows({a: p for a, p in pins.items() if a not in targets}, reason)
        self._append(rows)

    def pin(self, pins: dict[str, dict], reason: str) -> None:
        """Move the snapshots of promoted versions (asset -> pin, each with ``version``) in ONE
        commit of ``pinned`` events (``kappa advance``). Raises :class:`RegistryError` for a pin of
        a version that is not the promoted one."""
        rows = self._pin_rows(pins, reason)
        if rows:
            self._append(rows)

    def _pin_rows(self, pins: dict[str, dict], reason: str) -> list[dict]:
        """The ``pinned`` events of ``pins``, leaving out a pin equal in every field to the one the
        promoted version has: re-pinning a name at the snapshot it reads is not an event (a
        promotion re-pins its lineage's other names; one Dagster reads as a materialization of the
        name, which its dbt automation rebuilds the models below)."""
        events = self.events()
        rows = []
        for asset, pin in pins.items():
            current = self.promoted(asset, events)
            if current is None or current.version != pin["version"]:
                raise RegistryError(f"cannot pin {asset}/v{pin['version']}: it is not the promoted version")
            as_recorded = json.loads(json.dumps(pin, default=str))  # as _append stores it: keys are strings
            if current.pin is not None and all(current.pin.get(k) == v for k, v in as_recorded.items()):
                continue
            rows.append({"asset": asset, "version": pin["version"], "event": "pinned",
                         "details": {"reason": reason, **pin}})
        return rows

    def previous_promoted(self, asset: str) -> int | None:
        """The version that was promoted before the current one (the rollback target), or None."""
        history = [e["version"] for e in self.events(asset) if e["event"] == "promoted"]
        current = history[-1] if history else None
        for v in reversed(history):
            if v != current:
                return v
        return None
