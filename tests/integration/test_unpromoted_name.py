"""An asset with versions but none promoted is named, in one line, whatever the query does with its
stable name: ``count(*)``, an aggregate of its columns, a filter, a join, a CTE (issue 46 item 5).
Before, a query naming a column got Spark's ``UNRESOLVED_COLUMN … Did you mean id`` (the
placeholder view had one column); the view now has the columns of the asset's newest table."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.integration


def test_every_query_shape_over_an_unpromoted_name_fails_naming_it(spark, tmp_path):
    from kappa.analytics.sql import QueryError, run_sql
    from kappa.config import load_settings
    from kappa.delta.registry import Registry

    settings = load_settings(home=tmp_path / "home")
    asset = f"probe_{uuid.uuid4().hex[:8]}"
    registry = Registry(settings)
    v1 = registry.create_version(asset, "f" * 16, {})
    spark.createDataFrame([("AA", 3), ("UA", 5)], "carrier STRING, flights BIGINT").write.format(
        "delta").save(str(v1.table_path))
    registry.create_version(asset, "e" * 16, {})  # v2: created, not run (no table yet)
    assert registry.unpromoted_columns(asset) == [("carrier", "string"), ("flights", "bigint")]
    line = (f"{asset} has no promoted version (versions: v1 (created), v2 (created)); "
            f"promote one with `kappa promote {asset} 2`")
    for query in (f"SELECT * FROM {asset}", f"SELECT count(*) FROM {asset}",
                  f"SELECT count(*), sum(flights) FROM {asset}",
                  f"SELECT carrier FROM {asset} WHERE flights > 3 ORDER BY carrier",
                  f"SELECT a.carrier, b.flights FROM {asset} a JOIN {asset} b ON a.carrier = b.carrier",
                  f"WITH t AS (SELECT carrier, max(flights) AS m FROM {asset} GROUP BY carrier) SELECT * FROM t",
                  f"SELECT carrier FROM {asset} UNION ALL SELECT 'x'"):
        with pytest.raises(QueryError) as raised:
            run_sql(spark, settings, query)
        assert str(raised.value) == line, (query, str(raised.value))
    # a column the asset does not have is still Spark's own error, naming the column
    with pytest.raises(QueryError, match="UNRESOLVED_COLUMN.*nosuch"):
        run_sql(spark, settings, f"SELECT nosuch FROM {asset}")
