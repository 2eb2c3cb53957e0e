"""The SQL endpoint guard's table of Spark's logical operators (kappa/resources/sql_operators.json,
issue 40 item 1): every concrete LogicalPlan class of the Spark release pyspark ships is classified,
and the table names no class that does not exist. A Spark upgrade that adds an operator fails here
until someone decides whether analysts' SQL may use it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyspark

from kappa.core.jvm import java_executable
from kappa.services.serve import OPERATORS_PATH

REPO = Path(__file__).resolve().parents[2]

#: The jars whose LogicalPlan classes the table classifies (Delta's are refused by origin).
SPARK_JARS = ("spark-catalyst", "spark-sql", "spark-hive", "spark-hive-thriftserver")
GROUPS = ("query", "read_commands", "session_commands", "writes", "references", "refused")


def operator_classes() -> set[str]:
    """Every concrete LogicalPlan subclass in :data:`SPARK_JARS`, listed in a JVM by the guard's
    ``dev.kappa.serve.OperatorClasses`` (build/jars/serve/kappa-sql-guard.jar)."""
    jars = Path(pyspark.__file__).parent / "jars"
    listed = [str(j) for name in SPARK_JARS for j in jars.glob(f"{name}_2.13-*.jar")]
    assert len(listed) == len(SPARK_JARS), listed
    guard = REPO / "build" / "jars" / "serve" / "kappa-sql-guard.jar"
    out = subprocess.run([java_executable(), "-cp", f"{jars}/*:{guard}", "dev.kappa.serve.OperatorClasses", *listed],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    return {line.split()[1] for line in out.splitlines()}


def test_every_logical_operator_of_spark_is_classified_and_every_classified_one_exists():
    table = json.loads(OPERATORS_PATH.read_text())
    assert table["spark"] == pyspark.__version__
    classified = [name for group in GROUPS for name in table[group]]
    found = operator_classes()
    assert not found - set(classified), f"classify these in {OPERATORS_PATH.name}: {sorted(found - set(classified))}"
    assert not set(classified) - found, f"not in Spark {pyspark.__version__}: {sorted(set(classified) - found)}"
    # each in one group only, except a view: a session's own temporary one, or one of dbt's writes
    twice = {n for n in classified if classified.count(n) > 1}
    assert twice == {"org.apache.spark.sql.execution.command.CreateViewCommand"}
    # the operators the issue names as a query's are all allowed; code and scripts are not
    short = {n.rsplit(".", 1)[1] for n in table["query"]}
    assert {"Project", "Filter", "Join", "Aggregate", "Window", "Sort", "GlobalLimit", "Union", "Generate",
            "WithCTE", "SubqueryAlias", "View", "LogicalRelation"} <= short
    assert not {"ScriptTransformation", "MapInPandas", "BatchEvalPython", "LogicalRDD", "SQLFunctionNode"} & short
