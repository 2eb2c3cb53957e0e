"""Attacks on `kappa serve` with an analyst's real login: the endpoint's statement policy
(`jvm/sql-guard`, a Spark session extension) refuses each, naming its rule, and nothing the
platform serves changes. Issue 23, item 1."""

from __future__ import annotations

import pytest

from .conftest import hive_connect, hive_count

pytestmark = pytest.mark.integration


def attacks(settings) -> list[tuple[str, str]]:
    """(statement, the rule its refusal names) for every attack on the analysts' state."""
    from kappa.delta.registry import Registry
    from kappa.services.serve import marts_root

    flights = Registry(settings).promoted("flights")
    passwords = settings.home / "serve-passwords"
    out = settings.home / "exfiltrated"
    return [
        ("SELECT reflect('java.lang.System', 'getenv', 'PATH')", "no-reflection"),
        ("SELECT java_method('java.lang.System', 'exit', 1)", "no-reflection"),
        ("SELECT try_reflect('java.lang.System', 'getProperty', 'user.home')", "no-reflection"),
        ("SELECT * FROM flights WHERE dep_delay IN (SELECT length(reflect('java.lang.System', 'getenv', 'PATH')))",
         "no-reflection"),
        (f"SELECT * FROM text.`{passwords}`", "no-path-reads"),
        (f"SELECT count(*) FROM delta.`{flights.table_path}`", "no-path-reads"),
        ("ADD JAR /tmp/evil.jar", "no-code"),
        (f"ADD FILE {passwords}", "no-code"),
        ("CREATE TEMPORARY FUNCTION evil AS 'org.example.Evil'", "no-code"),
        (f"INSERT OVERWRITE DIRECTORY '{out}' USING csv SELECT * FROM flights", "no-directory-writes"),
        ("SET spark.sql.runSQLOnFiles=true", "no-settings"),
        ("RESET", "no-settings"),
        (f"DELETE FROM kappa.flights_v{flights.version}", "writes-only-in-schema"),
        (f"INSERT INTO kappa.flights_v{flights.version} SELECT * FROM flights LIMIT 1", "writes-only-in-schema"),
        (f"DROP TABLE kappa.flights_v{flights.version}", "writes-only-in-schema"),
        ("CREATE OR REPLACE VIEW default.flights AS SELECT * FROM weather", "writes-only-in-schema"),
        ("DROP VIEW default.weather", "writes-only-in-schema"),
        (f"CREATE TABLE analytics.stolen USING delta LOCATION '{flights.table_path}'", "writes-only-in-schema"),
        (f"CREATE TABLE analytics.pw USING text LOCATION '{passwords.parent}'", "writes-only-in-schema"),
        (f"CREATE TABLE analytics.escape USING delta LOCATION '{marts_root(settings)}/../flights'",
         "writes-only-in-schema"),
        (f"VACUUM kappa.flights_v{flights.version} RETAIN 0 HOURS", "no-delta-commands"),
        (f"RESTORE TABLE kappa.flights_v{flights.version} TO VERSION AS OF 0", "no-delta-commands"),
        (f"DESCRIBE HISTORY '{flights.table_path}'", "no-delta-commands"),
        ("EXECUTE IMMEDIATE 'DROP VIEW default.flights'", "no-dynamic-sql"),
    ]


def state_of(settings) -> dict:
    """What an attack could change: the registry's and every promoted table's Delta version, the
    password file, what the endpoint serves."""
    from deltalake import DeltaTable

    from kappa.delta.registry import Registry
    from kappa.services import serve

    registry = Registry(settings)
    return {"registry": serve.registry_version(settings),
            "tables": {a: DeltaTable(v.table_path).version() for a, v in registry.promoted_all().items()},
            "passwords": (settings.home / "serve-passwords").read_bytes(),
            "served": serve.status(settings).tables}


def test_an_analyst_login_cannot_run_code_read_files_or_change_what_others_read(served):
    settings, port = served
    before, flights_rows = state_of(settings), hive_count(port, "flights")
    with hive_connect(port) as conn:
        cur = conn.cursor()
        for statement, rule in attacks(settings):
            with pytest.raises(Exception) as refused:
                cur.execute(statement)
                cur.fetchall()
            assert f"kappa sql guard: {rule}" in str(refused.value), (statement, str(refused.value)[:400])
        # reading stays open: the stable names, the catalog, a setting's value
        cur.execute("SELECT count(*) FROM flights")
        assert cur.fetchone()[0] == flights_rows
        cur.execute("SHOW TABLES")
        assert "flights" in {r[1] for r in cur.fetchall()}
        cur.execute("SET spark.sql.runSQLOnFiles")
        assert cur.fetchall()[0][1] == "false"
    assert state_of(settings) == before
    assert not (settings.home / "exfiltrated").exists()


def test_a_session_setting_from_the_connection_cannot_turn_path_reads_back_on(served):
    """HiveServer2 applies the ``set:hiveconf:`` keys of a connection to its Spark session before any
    statement, so a client can turn ``spark.sql.runSQLOnFiles`` back on; the guard then refuses
    every statement of that session, PyHive's own ``USE default`` at connect included."""
    settings, port = served
    with pytest.raises(Exception, match="kappa sql guard: no-path-reads: spark.sql.runSQLOnFiles is on"):
        hive_connect(port, configuration={"set:hiveconf:spark.sql.runSQLOnFiles": "true"})
    assert hive_count(port, "flights") > 0  # other sessions are untouched
