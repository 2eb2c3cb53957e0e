"""SQL texts of a run-time declaration held to the policy's rules by Spark's own parser
(:mod:`kappa.streaming.policy` says which rules and where a declaration holds SQL): parsed, never
run, and the unresolved plan walked whole over py4j (:class:`SqlPolicy`). Rules (their names as in
:mod:`kappa.streaming.policy`): ``parse``, ``one-select``, ``relation``, ``function``,
``operator`` and, for a name in a parsed plan, ``column-name``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException

from kappa.core.sql_functions import function_tables
from kappa.errors import KappaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Refusal(NamedTuple):
    """Why one text is refused: a rule name (module docstring) and what was found."""

    rule: str
    detail: str


def clip(text: str, width: int = 60) -> str:
    """``text`` cut to ``width`` characters (with an ellipsis when cut), for a message."""
    return text if len(text) <= width else text[:width] + "…"



#: What a parse failure raises through PySpark: Spark's ``ParseException`` converted, or any
#: other JVM exception as py4j hands it over. A dead gateway (``Py4JNetworkError``) is not one.
_PARSE_ERRORS = (CapturedException, Py4JJavaError)

_A = "org.apache.spark.sql.catalyst.analysis."
_L = "org.apache.spark.sql.catalyst.plans.logical."
_RELATION = _A + "UnresolvedRelation"
_TVF = _A + "UnresolvedTableValuedFunction"
_WITH = _L + "UnresolvedWith"
_FUNCTION = _A + "UnresolvedFunction"
_GENERATOR = _A + "UnresolvedGenerator"

#: The operators of a parsed query that the walk lets through (full class names). Everything a
#: ``SELECT`` builds before analysis: projection, filter, aggregation (``HAVING``), sort, limits,
#: set operations, joins (lateral too), aliases, ``LATERAL VIEW``, ``TABLESAMPLE``, ``PIVOT``,
#: ``UNPIVOT``, hints, ``DISTRIBUTE BY``/``CLUSTER BY``, ``VALUES``, ``WINDOW``, ``WITH`` and the
#: pipe syntax (``|>``). Relations are checked on their own (:data:`_RELATION`).
QUERY_NODES: frozenset[str] = frozenset({
    _RELATION, _WITH,
    _A + "UnresolvedHaving", _A + "UnresolvedSubqueryColumnAliases", _A + "UnresolvedInlineTable",
    "org.apache.spark.sql.catalyst.expressions.PipeOperator",
    *(_L + n for n in (
        "Aggregate", "Distinct", "Except", "Filter", "Generate", "GlobalLimit", "Intersect", "Join", "LateralJoin",
        "LocalLimit", "LocalRelation", "Offset", "OneRowRelation", "Pivot", "Project", "RepartitionByExpression",
        "Sample", "Sort", "SubqueryAlias", "Union", "Unpivot", "UnresolvedHint", "WithWindowDefinition")),
})

#: Why some operators are refused, for the message (others: "not on QUERY_NODES").
_OPERATOR_WHY = {
    _L + "ScriptTransformation": "SELECT TRANSFORM … USING runs a program on the executors",
    _A + "RelationTimeTravel": "time travel reads another version of a table",
}


class _Refused(KappaError):
    """Internal: unwinds the walk with a :class:`Refusal` (never leaves this module)."""

    def __init__(self, refusal: Refusal):
        super().__init__(refusal.detail)
        self.refusal = refusal


class SqlPolicy:
    """Spark's parser and the walk over its unresolved plans, for one session: build once, ask
    :meth:`query_refusal` and :meth:`expression_refusal` per text (class lookups and the function
    registry's answers are cached). Nothing is analysed or run."""

    def __init__(self, spark: "SparkSession"):
        jvm = getattr(spark, "_jvm", None)
        assert jvm is not None, "a classic (py4j) SparkSession is needed; Spark Connect has no parser here"
        self._parser = spark._jsparkSession.sessionState().sqlParser()
        classes = {
            "plan": "org.apache.spark.sql.catalyst.plans.logical.LogicalPlan",
            "expr": "org.apache.spark.sql.catalyst.expressions.Expression",
            "iterable": "scala.collection.Iterable",
            "datatype": "org.apache.spark.sql.types.DataType",
            "product": "scala.Product",
        }
        self._classes = [(kind, jvm.java.lang.Class.forName(name)) for kind, name in classes.items()]
        self._functions, _ = function_tables()
        self._kinds: dict[str, str] = {}

    def query_refusal(self, text: str, relations: tuple[str, ...] = ("input",)) -> Refusal | None:
        """Why ``text`` is not one ``SELECT`` reading only ``relations`` (and the CTEs it defines)
        with allowed functions and operators, or None when it is. Rules: ``parse``, ``one-select``,
        ``relation``, ``function``, ``operator``."""
        try:
            plan = self._parser.parsePlan(text)
        except _PARSE_ERRORS as exc:
            return self._second_statement(text, str(exc)) or Refusal("parse", _spark_message(exc))
        try:
            # The grammar's own answer to "is this a query": ``singleQuery``. It refuses a trailing
            # ';' that parsePlan (and so spark.sql) accepts; nothing else differs.
            self._parser.parseQuery(re.sub(r"[\s;]+\Z", "", text))
        except _PARSE_ERRORS:
            return Refusal("one-select", _not_a_query(plan.getClass().getName()))
        return self._walk(plan, relations)

    def expression_refusal(self, text: str) -> Refusal | None:
        """Why the SQL expression ``text`` (as ``F.expr`` reads it) is refused, or None. An
        expression reads no relation: a subquery in it may read only CTEs it defines. Rules:
        ``parse``, ``relation``, ``function``, ``operator``."""
        try:
            expression = self._parser.parseExpression(text)
        except _PARSE_ERRORS as exc:
            return Refusal("parse", _spark_message(exc))
        return self._walk(expression, ())

    def _second_statement(self, text: str, error: str) -> Refusal | None:
        """``one-select`` when the parse failed right after a ';' that ends a statement Spark
        parses: the text holds more than one statement. The position is read from Spark's message,
        ``… (line L, pos P)``, as ``ParseException`` formats it."""
        m = re.search(r"\(line (\d+), pos (\d+)\)", error)
        if not m:
            return None
        lines = text.split("\n")
        line, pos = int(m.group(1)), int(m.group(2))
        offset = sum(len(ln) + 1 for ln in lines[:line - 1]) + pos
        head = text[:offset].rstrip()
        if not head.endswith(";"):
            return None
        try:
            self._parser.parsePlan(head)
        except _PARSE_ERRORS:
            return None
        return Refusal("one-select", f"more than one statement: a second one starts at line {line}, position {pos}; "
                                     "declare one SELECT")

    def _kind(self, obj) -> tuple[str, str]:
        cls = obj.getClass()
        name = cls.getName()
        kind = self._kinds.get(name)
        if kind is None:
            kind = next((k for k, c in self._classes if c.isAssignableFrom(cls)), "other")
            self._kinds[name] = kind
        return name, kind

    def _walk(self, root, relations: tuple[str, ...]) -> Refusal | None:
        from py4j.java_gateway import JavaObject

        stack: list[tuple[object, frozenset[str]]] = [(root, frozenset(r.lower() for r in relations))]
        try:
            while stack:
                obj, scope = stack.pop()
                if isinstance(obj, str):
                    _check_name(obj)  # py4j hands names over as str (literals stay JVM objects)
                    continue
                if not isinstance(obj, JavaObject):
                    continue  # numbers, booleans: py4j converted them
                name, kind = self._kind(obj)
                if kind == "plan":
                    if name == _WITH:
                        stack += self._with(obj, scope)
                        continue
                    self._check_plan(obj, name, scope)
                elif kind == "expr":
                    self._check_expression(obj, name)
                elif kind == "iterable":
                    it = obj.iterator()
                    while it.hasNext():
                        stack.append((it.next(), scope))
                    continue
                elif kind != "product":
                    continue  # data types, Java objects (options maps, builder functions)
                stack += [(obj.productElement(i), scope) for i in range(obj.productArity())]
        except _Refused as refused:
            return refused.refusal
        return None

    def _with(self, node, scope: frozenset[str]) -> list[tuple[object, frozenset[str]]]:
        """``WITH a AS (…), b AS (…) body``: each definition sees the names defined before it (and
        itself, under ``RECURSIVE``); the body sees them all. A name defined in an inner ``WITH``
        is not visible outside it, where Spark would look it up in the catalog."""
        names = set(scope)
        out: list[tuple[object, frozenset[str]]] = []
        recursive = bool(node.allowRecursion())
        it = node.cteRelations().iterator()
        while it.hasNext():
            pair = it.next()
            cte = str(pair._1()).lower()
            out.append((pair._2(), frozenset(names | {cte}) if recursive else frozenset(names)))
            names.add(cte)
        out.append((node.child(), frozenset(names)))
        return out

    def _check_plan(self, node, name: str, scope: frozenset[str]) -> None:
        if name == _RELATION:
            parts = _strings(node.multipartIdentifier())
            if len(parts) == 1 and parts[0].lower() in scope:
                return
            shown = ".".join(f"`{p}`" if "/" in p or ":" in p else p for p in parts)
            allowed = ", ".join(sorted(scope)) or "no relation"
            if len(parts) == 2 and ("/" in parts[1] or ":" in parts[1]):
                why = f"{shown} reads files by path"
            else:
                why = f"{shown} is not a relation this text declares"
            raise _Refused(Refusal("relation", f"{why}; it may read {allowed}"))
        if name == _TVF:
            fn = ".".join(_strings(node.name()))
            raise _Refused(Refusal("relation", f"{fn}(…) is a table-valued function; it may read "
                                               f"{', '.join(sorted(scope)) or 'no relation'}"))
        if name.endswith("PlanWithUnresolvedIdentifier"):
            raise _Refused(Refusal("relation", "IDENTIFIER(…) chooses the relation when the query is analysed; "
                                               "write its name"))
        if name not in QUERY_NODES:
            simple = name.rsplit(".", 1)[-1]
            why = _OPERATOR_WHY.get(name, "not on kappa.streaming.sql_policy.QUERY_NODES")
            raise _Refused(Refusal("operator", f"{simple}: {why}"))

    def _check_expression(self, node, name: str) -> None:
        if name == _FUNCTION:
            self._check_function(_strings(node.nameParts()))
        elif name == _GENERATOR:
            ident = node.name()
            parts = [*_strings(ident.catalog()), *_strings(ident.database()), ident.funcName()]
            self._check_function(parts)
        elif name.endswith("ExpressionWithUnresolvedIdentifier"):
            raise _Refused(Refusal("function", "IDENTIFIER(…) chooses a function or column when the query is "
                                               "analysed; write its name"))

    def _check_function(self, parts: list[str]) -> None:
        shown = ".".join(parts)
        if len(parts) != 1:
            raise _Refused(Refusal("function", f"{shown}: a qualified function name; call Spark's built-in "
                                               "functions by their plain name"))
        fn = parts[0].lower()
        why = self._functions.refusal(fn)
        if why is not None:
            raise _Refused(Refusal("function", f"{fn}: {why}"))


def _check_name(name: str) -> None:
    """A name in a parsed plan (an alias, a column, a CTE, a hint) must not hold a backtick: the
    writers quote column names into SQL text, and Great Expectations quotes the output columns
    into expressions (``COALESCE(`<name>`, 0)`` in ``expect_multicolumn_sum_to_equal``, without
    doubling a backtick), so a backtick in an output name would end the quoting there."""
    if "`" in name:
        raise _Refused(Refusal("column-name", f"{clip(name)!r} holds a backtick; the writers and the gate quote "
                                              "column names into SQL text (`name`), so a backtick would end the "
                                              "quoting"))


def _strings(scala_iterable) -> list[str]:
    """The strings of a Scala ``Seq``/``Option`` of strings."""
    out: list[str] = []
    it = scala_iterable.iterator()
    while it.hasNext():
        out.append(str(it.next()))
    return out


def _spark_message(exc: BaseException) -> str:
    """Spark's message of a parse error, first line (the error class, the token, the position)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _not_a_query(class_name: str) -> str:
    simple = class_name.rsplit(".", 1)[-1]
    if "ExecuteImmediate" in simple:
        return "EXECUTE IMMEDIATE runs SQL text built when the query runs; declare one SELECT"
    if simple == "CompoundBody":
        return "a SQL script (BEGIN … END); declare one SELECT"
    return f"{simple} is a statement, not a query; declare one SELECT"
