"""The Debezium connectors Kappa declares: ``assets/connectors.yaml`` read and validated
(:func:`load_connectors`) into :class:`ConnectorSpec` models, each of which gives its changelog
topics and its connector configuration (:meth:`ConnectorSpec.declared_config`). The worker that runs
them, locally, is :mod:`kappa.cdc.connect`; on Kubernetes, Strimzi's (the chart's view is
:func:`kappa.runners.kubernetes.catalog.chart_connect` over these models). See Debezium's
PostgreSQL connector docs for every setting written here."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kappa.cdc import CdcError
from kappa.config import Settings


#: The Debezium connector class every declared connector runs.
CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
#: The configuration keys that depend on where the database runs (local settings, or the chart's
#: values and Secret); every other key comes from :meth:`ConnectorSpec.declared_config`.
CONNECTION_KEYS = ("database.hostname", "database.port", "database.user", "database.password")

#: Milliseconds between two Debezium heartbeats, by default (``heartbeat_interval_ms`` in
#: connectors.yaml). Debezium confirms an LSN to the replication slot only when it commits a source
#: offset, and it commits one only when it sends a record; when the captured tables are idle nothing
#: is sent, and PostgreSQL keeps every WAL segment written since the last captured commit (Debezium's
#: PostgreSQL connector docs, "WAL disk space consumption"). Each beat sends one record to the
#: heartbeat topic and runs :data:`HEARTBEAT_ACTION_QUERY`; at 5 s the slot confirms the WAL's end
#: within about two beats (the confirmed position trails by the last beat's ~100-byte WAL record),
#: for one WAL record and one Kafka record per beat.
HEARTBEAT_INTERVAL_MS = 5_000
#: What each heartbeat runs in the captured database: a non-transactional logical decoding message
#: (PostgreSQL >= 14 decodes these with pgoutput; any role may call the function). It is one WAL record
#: the slot decodes whatever the publication holds, so Debezium receives it, moves its offset to its
#: LSN and the next heartbeat record commits that offset, which confirms the LSN to the slot.
#: A write to a heartbeat table would not do: PostgreSQL >= 15 does not send a transaction that
#: touches no published table (an unpublished heartbeat table moves nothing), and a published one is
#: captured as data (a topic ``<prefix>.public.<table>`` of heartbeat rows).
HEARTBEAT_ACTION_QUERY = "SELECT pg_logical_emit_message(false, 'kappa.heartbeat', now()::text)"
#: Debezium's heartbeat topic is ``<prefix>.<topic.prefix>`` (``__debezium-heartbeat.ops``); set
#: explicitly so the name Kappa creates cannot drift from the one Debezium writes.
HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"


class ConnectorSpec(BaseModel):
    """One Debezium PostgreSQL source connector (``assets/connectors.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    database: str
    schema_: str = Field("public", alias="schema")
    tables: list[str] = Field(min_length=1)
    slot: str = Field(pattern=r"^[a-z0-9_]+$")  # PostgreSQL replication slot names: lower case, digits, _
    publication: str = Field(pattern=r"^[a-z0-9_]+$")
    topic_prefix: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    #: Milliseconds between heartbeats; 0 turns them off (and the slot then stays at the last
    #: captured commit while the captured tables are idle).
    heartbeat_interval_ms: int = Field(HEARTBEAT_INTERVAL_MS, ge=0)

    def topic(self, table: str) -> str:
        """The changelog topic of ``table``: ``<topic_prefix>.<schema>.<table>`` (Debezium's naming)."""
        return f"{self.topic_prefix}.{self.schema_}.{table}"

    @property
    def topics(self) -> list[str]:
        """The changelog topic of each captured table, in ``tables`` order (:meth:`topic`)."""
        return [self.topic(t) for t in self.tables]

    @property
    def heartbeat_topic(self) -> str | None:
        """Where Debezium sends heartbeat records (``__debezium-heartbeat.<topic_prefix>``), None
        when heartbeats are off."""
        return f"{HEARTBEAT_TOPIC_PREFIX}.{self.topic_prefix}" if self.heartbeat_interval_ms else None

    def connector_config(self, settings: Settings) -> dict[str, str]:
        """The connector's configuration as Connect's REST API takes it (every value a string):
        :meth:`declared_config` plus where the local database runs and its credentials."""
        return {
            **self.declared_config(),
            "database.hostname": settings.postgres_host,
            "database.port": str(settings.postgres_port),
            "database.user": settings.postgres_user,
            "database.password": settings.postgres_password,
        }

    def declared_config(self) -> dict[str, str]:
        """Everything of the connector's configuration but the keys in :data:`CONNECTION_KEYS`
        (where the database runs and who logs in): the part `kappa connect start` and the Helm
        chart's KafkaConnector share (helm/kappa/catalog.yaml is generated from it)."""
        config = {
            "connector.class": CONNECTOR_CLASS,
            "tasks.max": "1",  # a PostgreSQL connector always runs one task (one replication stream)
            "plugin.name": "pgoutput",  # PostgreSQL's built-in logical decoding plugin
            "database.dbname": self.database,
            "topic.prefix": self.topic_prefix,
            "table.include.list": ",".join(f"{self.schema_}.{t}" for t in self.tables),
            "slot.name": self.slot,
            "publication.name": self.publication,
            "publication.autocreate.mode": "filtered",  # a publication for exactly the listed tables
            "snapshot.mode": "initial",
            "tombstones.on.delete": "true",
            "decimal.handling.mode": "double",
            # Plain JSON (no embedded schema): {"before", "after", "source": {"lsn", "ts_ms", …}, "op", "ts_ms"}
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            # Logical decoding messages (the heartbeat's, or any application's) are not captured: one
            # would go to the topic <prefix>.message, which nothing creates (the broker does not
            # auto-create topics), and the connector would stop sending anything until it existed.
            # An excluded message still moves the connector's position (and so the slot).
            "message.prefix.exclude.list": ".*",
        }
        if self.heartbeat_interval_ms:
            config |= {
                "heartbeat.interval.ms": str(self.heartbeat_interval_ms),
                "heartbeat.action.query": HEARTBEAT_ACTION_QUERY,
                "topic.heartbeat.prefix": HEARTBEAT_TOPIC_PREFIX,
            }
        return config


class ConnectorsFile(BaseModel):
    """``assets/connectors.yaml``: connector name -> :class:`ConnectorSpec`."""
    model_config = ConfigDict(extra="forbid")
    connectors: dict[str, ConnectorSpec]


def load_connectors(assets_dir: Path) -> dict[str, ConnectorSpec]:
    """The connectors declared in ``assets_dir/connectors.yaml`` (none if the file is absent).
    Raises :class:`CdcError` naming the file and the field when it does not validate."""
    path = Path(assets_dir) / "connectors.yaml"
    if not path.is_file():
        return {}
    try:
        return ConnectorsFile.model_validate(yaml.safe_load(path.read_text()) or {}).connectors
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise CdcError(f"{path}: {loc}: {first['msg']}") from None
    except yaml.YAMLError as err:
        raise CdcError(f"{path}: not valid YAML: {err}") from None
