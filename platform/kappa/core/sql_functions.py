"""The one table of Spark SQL functions Kappa lets untrusted SQL call (issue 40).

``kappa/resources/sql_functions.json`` classifies every built-in function of Spark's two registries
(``FunctionRegistry.builtin``: scalar, aggregate and window functions; ``TableFunctionRegistry.builtin``:
table-valued functions and generators in ``FROM``) as allowed or refused with a reason. The SQL
endpoint's guard (``jvm/sql-guard``, given the file's path by ``kappa serve``) and the run-time
declaration policy (:mod:`kappa.streaming.policy`) read this same file; a name in neither list is
refused. Source of the names: Spark 4.1.3's registries, listed through py4j; Spark SQL reference,
"Functions".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: Where the table is (shipped in the wheel as package data).
TABLE_PATH = Path(__file__).resolve().parents[1] / "resources" / "sql_functions.json"


@dataclass(frozen=True)
class FunctionTable:
    """One registry's classification: ``allowed`` names (lower case) and ``refused`` name -> why."""

    allowed: frozenset[str]
    refused: dict[str, str]

    def refusal(self, name: str) -> str | None:
        """None when ``name`` (any case) may be called; else why not, in a few words."""
        fn = name.lower()
        if fn in self.allowed:
            return None
        return self.refused.get(fn, "not on Kappa's allow-list of Spark built-in functions "
                                    "(kappa/resources/sql_functions.json)")


@lru_cache(maxsize=1)
def function_tables() -> tuple[FunctionTable, FunctionTable]:
    """``(functions, table_functions)`` read from :data:`TABLE_PATH` (once per process)."""
    doc = json.loads(TABLE_PATH.read_text())

    def table(part: dict) -> FunctionTable:
        return FunctionTable(frozenset(n.lower() for n in part["allowed"]),
                             {n.lower(): why for n, why in part["refused"].items()})

    return table(doc["functions"]), table(doc["table_functions"])
