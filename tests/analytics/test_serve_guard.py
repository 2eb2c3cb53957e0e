"""Attacks on `kappa serve` through real logins: the endpoint's statement policy (`jvm/sql-guard`, a
Spark session extension that admits only allow-listed statements) refuses each, naming its rule,
and nothing the platform serves changes. Issue 23, item 1; issue 40, items 1 and 7."""

from __future__ import annotations

import pytest

from .conftest import ANALYST_PASSWORD, ANALYST_USER, SERVE_PASSWORD, SERVE_USER, hive_connect, hive_count

pytestmark = pytest.mark.integration


def analyst_attacks(settings) -> list[tuple[str, str]]:
    """(statement, the rule its refusal names) for every attack an analyst's login tries."""
    from kappa.delta.registry import Registry
    from kappa.services.serve import marts_root

    flights = Registry(settings).promoted("flights")
    passwords = settings.home / "serve-passwords"
    out = settings.home / "exfiltrated"
    pwned = settings.home / "pwned"
    return [
        # code: a shell through script transformation, Java through reflection, anywhere in a plan
        (f"SELECT TRANSFORM(1) USING 'touch {pwned}' AS (line STRING)", "operators"),
        (f"SELECT * FROM flights WHERE EXISTS (SELECT TRANSFORM(1) USING 'touch {pwned}' AS (a STRING))",
         "operators"),
        (f"WITH t AS (SELECT TRANSFORM(carrier) USING 'touch {pwned}' AS (c STRING) FROM flights) SELECT * FROM t",
         "operators"),
        ("SELECT reflect('java.lang.System', 'getenv', 'PATH')", "functions"),
        ("SELECT java_method('java.lang.System', 'exit', 1)", "functions"),
        ("SELECT try_reflect('java.lang.System', 'getProperty', 'user.home')", "functions"),
        ("SELECT * FROM flights WHERE dep_delay IN (SELECT length(reflect('java.lang.System', 'getenv', 'PATH')))",
         "functions"),
        ("SELECT * FROM python_worker_logs()", "functions"),
        ("SELECT no_such_function(1)", "functions"),
        # files and other sources
        (f"SELECT * FROM text.`{passwords}`", "no-path-reads"),
        (f"SELECT count(*) FROM delta.`{flights.table_path}`", "no-path-reads"),
        ("CREATE TEMPORARY VIEW j USING jdbc OPTIONS (url 'jdbc:derby:memory:j;create=true', dbtable 'SYS.SYSTABLES')",
         "commands"),
        ("ADD JAR /tmp/evil.jar", "commands"),
        (f"ADD FILE {passwords}", "commands"),
        ("CREATE TEMPORARY FUNCTION evil AS 'org.example.Evil'", "commands"),
        (f"INSERT OVERWRITE DIRECTORY '{out}' USING csv SELECT * FROM flights", "operators"),
        # settings: fixed at start, a short allow-list excepted
        ("SET spark.sql.runSQLOnFiles=true", "settings"),
        ("SET spark.sql.variable.substitute=true", "settings"),
        ("SET spark.sql.catalog.evil=org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
         "settings"),
        ("RESET", "settings"),
        # writes: only dbt's login writes, and only in its schema
        (f"DELETE FROM kappa.flights_v{flights.version}", "writes-only-for-dbt"),
        (f"INSERT INTO kappa.flights_v{flights.version} SELECT * FROM flights LIMIT 1", "writes-only-for-dbt"),
        (f"DROP TABLE kappa.flights_v{flights.version}", "writes-only-for-dbt"),
        ("CREATE OR REPLACE VIEW default.flights AS SELECT * FROM weather", "writes-only-for-dbt"),
        ("DROP VIEW default.weather", "writes-only-for-dbt"),
        (f"CREATE TABLE analytics.stolen USING delta LOCATION '{marts_root(settings)}/stolen' AS SELECT 1 AS a",
         "writes-only-for-dbt"),
        ("CREATE OR REPLACE VIEW analytics.carrier_daily_performance AS SELECT 1 AS a", "writes-only-for-dbt"),
        # Delta's maintenance and history, dynamic SQL
        (f"VACUUM kappa.flights_v{flights.version} RETAIN 0 HOURS", "no-delta-commands"),
        (f"RESTORE TABLE kappa.flights_v{flights.version} TO VERSION AS OF 0", "no-delta-commands"),
        (f"DESCRIBE HISTORY '{flights.table_path}'", "no-delta-commands"),
        ("EXECUTE IMMEDIATE 'DROP VIEW default.flights'", "no-dynamic-sql"),
    ]


def dbt_attacks(settings) -> list[tuple[str, str]]:
    """(statement, rule) for writes dbt's own login may not make: outside its schema and location."""
    from kappa.delta.registry import Registry
    from kappa.services.serve import marts_root

    flights = Registry(settings).promoted("flights")
    passwords = settings.home / "serve-passwords"
    return [
        (f"DELETE FROM kappa.flights_v{flights.version}", "writes-only-in-schema"),
        (f"INSERT INTO kappa.flights_v{flights.version} SELECT * FROM flights LIMIT 1", "writes-only-in-schema"),
        (f"DROP TABLE kappa.flights_v{flights.version}", "writes-only-in-schema"),
        ("CREATE OR REPLACE VIEW default.flights AS SELECT * FROM weather", "writes-only-in-schema"),
        (f"CREATE TABLE analytics.stolen USING delta LOCATION '{flights.table_path}'", "writes-only-in-schema"),
        (f"CREATE TABLE analytics.pw USING text LOCATION '{passwords.parent}'", "writes-only-in-schema"),
        (f"CREATE TABLE analytics.escape USING delta LOCATION '{marts_root(settings)}/../flights'",
         "writes-only-in-schema"),
        (f"SELECT TRANSFORM(1) USING 'touch {settings.home / 'pwned'}' AS (line STRING)", "operators"),
    ]


def state_of(settings) -> dict:
    """What an attack could change: the registry's and every promoted table's Delta version, the
    password file, what the endpoint serves, dbt's location."""
    from deltalake import DeltaTable

    from kappa.core import storage
    from kappa.delta.registry import Registry
    from kappa.services import serve

    registry = Registry(settings)
    return {"registry": serve.registry_version(settings),
            "tables": {a: DeltaTable(v.table_path).version() for a, v in registry.promoted_all().items()},
            "passwords": (settings.home / "serve-passwords").read_bytes(),
            "served": serve.status(settings).tables,
            "marts": sorted(storage.list_names(serve.marts_root(settings), settings))
            if storage.exists(serve.marts_root(settings), settings) else []}


def refused_all(port: int, user: str, password: str, attacks: list[tuple[str, str]]) -> None:
    with hive_connect(port, user, password) as conn:
        cur = conn.cursor()
        for statement, rule in attacks:
            with pytest.raises(Exception) as refused:
                cur.execute(statement)
                cur.fetchall()
            assert f"kappa sql guard: {rule}" in str(refused.value), (statement, str(refused.value)[:400])


def test_an_analyst_login_cannot_run_code_read_files_or_change_what_others_read(served):
    settings, port = served
    before, flights_rows = state_of(settings), hive_count(port, "flights", ANALYST_USER, ANALYST_PASSWORD)
    refused_all(port, ANALYST_USER, ANALYST_PASSWORD, analyst_attacks(settings))
    refused_all(port, SERVE_USER, SERVE_PASSWORD, dbt_attacks(settings))
    with hive_connect(port, ANALYST_USER, ANALYST_PASSWORD) as conn:
        cur = conn.cursor()
        # Variable substitution is off: the text stays as written, the server's values stay unread.
        cur.execute("SELECT '${env:KAPPA_HOME}' AS k, '${system:user.dir}' AS d, '${spark.app.name}' AS a")
        assert cur.fetchall() == [("${env:KAPPA_HOME}", "${system:user.dir}", "${spark.app.name}")]
        # reading stays open: the stable names, joins, windows, generators, the catalog, a setting
        cur.execute("SELECT count(*) FROM flights")
        assert cur.fetchone()[0] == flights_rows
        cur.execute("WITH c AS (SELECT carrier, count(*) AS n FROM flights GROUP BY carrier) "
                    "SELECT carrier, n, rank() OVER (ORDER BY n DESC) AS r FROM c "
                    "JOIN (SELECT explode(array(1, 2)) AS k) ON k = 1 ORDER BY r LIMIT 3")
        assert len(cur.fetchall()) == 3
        cur.execute("SHOW TABLES")
        assert "flights" in {r[1] for r in cur.fetchall()}
        cur.execute("DESCRIBE flights")
        assert cur.fetchall()
        cur.execute("SET spark.sql.session.timeZone=UTC")  # on the allow-list of session settings
        cur.execute("SET spark.sql.runSQLOnFiles")
        assert cur.fetchall()[0][1] == "false"
    assert state_of(settings) == before
    assert not (settings.home / "exfiltrated").exists() and not (settings.home / "pwned").exists()


def test_session_settings_from_the_connection_are_refused(served):
    """HiveServer2 applies the ``set:hiveconf:``/``set:hivevar:`` keys of a connection to its Spark
    session before any statement: a JDBC catalog over Derby (whose ``sessionInitStatement`` runs
    Derby SQL, here an export that writes a file), path reads or variable substitution turned back
    on. The guard refuses every statement of such a session, PyHive's own ``USE default`` at
    connect included; a setting on the allow-list (the session time zone) is fine."""
    settings, port = served
    pwned = settings.home / "derby-pwned"
    jdbc = {"set:hiveconf:spark.sql.catalog.evil":
            "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
            "set:hiveconf:spark.sql.catalog.evil.url": "jdbc:derby:memory:evil;create=true",
            "set:hiveconf:spark.sql.catalog.evil.driver": "org.apache.derby.jdbc.EmbeddedDriver",
            "set:hiveconf:spark.sql.catalog.evil.sessionInitStatement":
            f"CALL SYSCS_UTIL.SYSCS_EXPORT_QUERY('VALUES 1', '{pwned}', NULL, NULL, NULL)"}
    for configuration in (jdbc, {"set:hiveconf:spark.sql.runSQLOnFiles": "true"},
                          {"set:hiveconf:spark.sql.variable.substitute": "true"},
                          {"set:hivevar:spark.sql.catalog.evil":
                           "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"}):
        with pytest.raises(Exception) as refused:
            with hive_connect(port, ANALYST_USER, ANALYST_PASSWORD, configuration=configuration) as conn:
                cur = conn.cursor()
                cur.execute("SELECT count(*) FROM evil.SYS.SYSSCHEMAS" if configuration is jdbc
                            else "SELECT '${env:KAPPA_HOME}'")
                cur.fetchall()
        assert "kappa sql guard: settings" in str(refused.value), (configuration, str(refused.value)[:400])
    assert not pwned.exists()
    with hive_connect(port, ANALYST_USER, ANALYST_PASSWORD,
                      configuration={"set:hiveconf:spark.sql.session.timeZone": "UTC"}) as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM flights")
        assert cur.fetchone()[0] > 0  # other sessions, and allowed settings, are untouched
