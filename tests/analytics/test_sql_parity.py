"""`kappa sql` and `kappa serve` name the same things (kappa.services.serve.process.sync_catalog, one function
for both): a promoted asset and a dbt mart in ``analytics`` answer alike through either, on the
analysts' state and its running endpoint."""

from __future__ import annotations

import json
import shutil

from kappa.services.serve import marts_root

from ..kappa_cli import invoke_kappa, settings_env
from .conftest import hive_connect

#: A mart made here the way dbt makes one (its login, a Delta table under <warehouse>/_dbt).
MART = "sqlparity_origins"


def hive(port: int, sql: str) -> list[tuple]:
    with hive_connect(port) as conn:
        cur = conn.cursor()
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def kappa_sql(settings, sql: str) -> list[tuple]:
    result = invoke_kappa("sql", sql, "--format", "json", env=settings_env(settings))
    assert result.returncode == 0, result.stdout + result.stderr
    return [tuple(r.values()) for r in json.loads(result.stdout)]


def test_kappa_sql_and_the_endpoint_answer_alike_for_a_promoted_asset_and_a_dbt_mart(served):
    settings, port = served
    location = f"{marts_root(settings)}/{MART}"
    hive(port, f"CREATE TABLE analytics.{MART} USING delta LOCATION '{location}' AS "
               "SELECT origin, count(*) AS flights, sum(distance) AS miles FROM flights GROUP BY origin")
    try:
        for sql in ("SELECT count(*) AS n, sum(distance) AS miles, min(event_id) AS first FROM flights",
                    f"SELECT origin, flights, miles FROM analytics.{MART} ORDER BY origin",
                    f"SELECT m.origin, count(*) AS n FROM flights f JOIN analytics.{MART} m ON f.origin = m.origin "
                    "GROUP BY m.origin ORDER BY m.origin"):
            through_endpoint = hive(port, sql)
            assert through_endpoint and kappa_sql(settings, sql) == through_endpoint, sql
    finally:
        hive(port, f"DROP TABLE IF EXISTS analytics.{MART}")
        shutil.rmtree(location, ignore_errors=True)
