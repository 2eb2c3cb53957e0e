"""What a declaration added at run time may hold (issue 22 item 3).

A file under ``assets/`` ships in the image and was reviewed with it; a declaration a data
engineer adds from the Dagster UI was not. Before such a declaration is recorded,
:func:`check_runtime_declaration` holds it to the rules below and raises :class:`PolicyError`,
naming the declaration, the field and the rule, at the first one it breaks::

    declarations:busy_routes: transform.sql: refused (rule: relation): parquet.`/etc` reads files by path; …

Rules (short, stable names; a caller may match on :attr:`PolicyError.rule`):

* ``parse`` — Spark's own parser refuses the SQL text (the message is Spark's).
* ``one-select`` — a query field (``transform.sql``, ``transform.materialized_view.sql``) is not
  exactly one query statement: a command (``SET``, ``RESET``, ``ADD JAR``, ``CREATE``,
  ``INSERT``, Delta's ``VACUUM`` …), ``EXECUTE IMMEDIATE``, a SQL script (``BEGIN … END``) or more
  than one statement.
* ``relation`` — the SQL reads something other than what the declaration declares: ``input`` for
  ``transform.sql``, the listed ``tables`` for a materialized view, nothing for an expression, and
  in all of them the CTEs defined in the same text, in scope. This refuses other tables and views,
  path relations (``parquet.`/etc```), table-valued functions (``range``, ``read_files``,
  ``explode`` in ``FROM``) and ``IDENTIFIER(…)`` as a relation.
* ``function`` — a function that is not one of Spark's built-in functions
  (``FunctionRegistry.builtin``: a temporary or catalog function runs code nobody reviewed), a
  qualified name (``system.builtin.reflect``), ``IDENTIFIER(…)`` in an expression, or a built-in on
  :data:`DENIED_FUNCTIONS` (it reaches the JVM or the filesystem).
* ``operator`` — a query operator not on :data:`QUERY_NODES`, such as ``SELECT TRANSFORM(…) USING
  'cmd'``, which runs a program on the executors. The list is closed: an operator Spark adds later
  is refused until someone adds it here.
* ``python-needs-review`` — a ``python:`` transform. It runs arbitrary code, so it needs code
  review: it can only come from a file under ``assets/`` in the image.
* ``column-name`` — a column name with a backtick. The writers quote merge keys into SQL text
  (``t.`key` <=> s.`key```, :class:`kappa.streaming.writers.UpsertWriter`); a backtick would end
  the quoting and let the rest run as SQL.
* ``expectation-query`` — a Great Expectations expectation with a query argument
  (``expect_query_results_to_match_comparison``): GX runs it with ``spark.sql`` on the gate's
  session. A Spark ``row_condition`` (``condition_parser: spark``, or a ``pass_through``
  condition) is an expression and is held to the expression rules above.
* ``resources-cap`` — ``resources:`` asks for more than :class:`ResourceCaps` allows.
* ``unclassified-field`` — a text field this module does not know (the declaration models grew
  one and :data:`FIELD_ROLES` was not told): refused rather than guessed.

Which fields hold SQL is a table (:data:`FIELD_ROLES`), not a branch per kind: the walk over a
declaration (:func:`declared_texts`) finds the texts wherever the models put them, and
``tests/unit/test_policy.py`` fails when a model gains a text field the table lacks.

SQL is parsed, never run: ``parsePlan``/``parseQuery``/``parseExpression`` of the session's parser
(the same parser ``spark.sql`` and ``F.expr`` use, Delta's extension included), and the unresolved
plan is walked whole over py4j: every node's fields, so subqueries, CTE definitions, ``WINDOW``
clauses, lambdas and hint arguments are seen. Sources: Spark SQL reference, "SQL Syntax" (queries,
``WITH``, table-valued functions, ``TRANSFORM``, ``EXECUTE IMMEDIATE``) and "Functions".
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal, NamedTuple, Union, get_args, get_origin

from py4j.protocol import Py4JJavaError
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pyspark.errors.exceptions.captured import CapturedException

from kappa.errors import KappaError
from kappa.spec import AssetResources, AssetSpec, Resources, Sink, Source, Transform, Trigger, Watermark
from kappa.spec.base import MEMORY_RE, memory_bytes
from kappa.spec.transforms import (
    ChangelogTransform,
    FieldSpec,
    JoinRight,
    JoinTimeRange,
    JoinTransform,
    KafkaSource,
    LookupTable,
    MaterializedViewTransform,
    ParseTransform,
    PatternStep,
    PatternTransform,
    SlidingTransform,
    WindowTransform,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class PolicyError(KappaError):
    """A declaration added at run time breaks a rule of this module. The message is
    ``declarations:<asset>: <field>: refused (rule: <rule>): <detail>``; the parts are attributes."""

    def __init__(self, asset: str, field: str, rule: str, detail: str):
        self.asset, self.field, self.rule, self.detail = asset, field, rule, detail
        super().__init__(f"declarations:{asset}: {field}: refused (rule: {rule}): {detail}")


class Refusal(NamedTuple):
    """Why one text is refused: a rule name (module docstring) and what was found."""

    rule: str
    detail: str


# ----------------------------------------------------------------------------------------------
# Resources


# The default caps. Settings have none, so they are this module's constants, sized from
# docs/CAPACITY.md ("Spark executors per asset"): the largest need measured for 100K ev/s, silver
# at a 1 s trigger and 60 % utilisation, is 28 cores, within 8 executors x 4 cores.
#: Default :attr:`ResourceCaps.max_executors`.
MAX_EXECUTORS = 8
#: Default :attr:`ResourceCaps.max_cores`, per driver or executor pod.
MAX_CORES = 4
#: Default :attr:`ResourceCaps.max_driver_memory`: what the local driver gets
#: (``Settings.spark_driver_memory``'s default).
MAX_DRIVER_MEMORY = "4g"
#: Default :attr:`ResourceCaps.max_executor_memory`: four times the chart's default executor (2g);
#: the state the bench measured is tens of MB per asset.
MAX_EXECUTOR_MEMORY = "8g"


class ResourceCaps(BaseModel):
    """The most a run-time declaration's ``resources:`` may ask for, per asset version on the
    ``kubernetes`` runner: ``max_executors`` (``executor_instances``), ``max_cores`` (whole CPUs of
    one driver or executor pod: ``cores``, and ``core_limit`` as a Kubernetes CPU quantity),
    ``max_driver_memory`` and ``max_executor_memory`` (JVM sizes, bounding ``memory`` and
    ``memory`` + ``memory_overhead`` when the latter is declared). Defaults: :data:`MAX_EXECUTORS`,
    :data:`MAX_CORES`, :data:`MAX_DRIVER_MEMORY`, :data:`MAX_EXECUTOR_MEMORY`.

    Example::

        ResourceCaps(max_executors=4, max_executor_memory="4g")
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_executors: int = Field(MAX_EXECUTORS, ge=1)
    max_cores: int = Field(MAX_CORES, ge=1)
    max_driver_memory: str = MAX_DRIVER_MEMORY
    max_executor_memory: str = MAX_EXECUTOR_MEMORY

    @field_validator("max_driver_memory", "max_executor_memory")
    @classmethod
    def _jvm_size(cls, v: str) -> str:
        if not MEMORY_RE.match(v):
            raise ValueError(f"{v!r} is not a JVM size like '512m' or '2g'")
        return v


_CPU_RE = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")


def cpu_cores(quantity: str) -> float:
    """A Kubernetes CPU quantity in cores: ``"2"`` -> ``2.0``, ``"1.5"`` -> ``1.5``, ``"500m"``
    -> ``0.5`` (Kubernetes docs, "Resource Management for Pods and Containers", CPU units). Raises
    ``ValueError`` for anything else."""
    m = _CPU_RE.match(quantity.strip())
    if not m:
        raise ValueError(f"{quantity!r} is not a CPU quantity like '2', '1.5' or '500m'")
    return float(m.group(1)) / (1000 if m.group(2) else 1)


def resource_refusals(resources: AssetResources | None, caps: ResourceCaps) -> list[tuple[str, str]]:
    """``(field, detail)`` for every value of ``resources`` above ``caps``, in declaration order;
    ``[]`` when all are within them (or nothing is declared: the runner's defaults apply). Fields
    are named as in the YAML (``resources.executor.memory``)."""
    if resources is None:
        return []
    out: list[tuple[str, str]] = []
    roles: tuple[tuple[str, Resources | None, str], ...] = (
        ("driver", resources.driver, caps.max_driver_memory),
        ("executor", resources.executor, caps.max_executor_memory),
    )
    for role, res, max_memory in roles:
        if res is None:
            continue
        where = f"resources.{role}"
        if res.cores > caps.max_cores:
            out.append((f"{where}.cores", f"{res.cores} cores exceed the cap of {caps.max_cores} (max_cores)"))
        if res.core_limit is not None:
            try:
                limit = cpu_cores(res.core_limit)
            except ValueError as exc:
                out.append((f"{where}.core_limit", str(exc)))
            else:
                if limit > caps.max_cores:
                    out.append((f"{where}.core_limit",
                                f"{res.core_limit} ({limit:g} cores) exceeds the cap of {caps.max_cores} (max_cores)"))
        cap_name = f"max_{role}_memory"
        heap = memory_bytes(res.memory)
        if heap > memory_bytes(max_memory):
            out.append((f"{where}.memory", f"{res.memory} exceeds the cap of {max_memory} ({cap_name})"))
        elif res.memory_overhead is not None and heap + memory_bytes(res.memory_overhead) > memory_bytes(max_memory):
            out.append((f"{where}.memory_overhead", f"memory {res.memory} + memory_overhead {res.memory_overhead} "
                                                    f"exceeds the cap of {max_memory} ({cap_name})"))
    if resources.executor_instances is not None and resources.executor_instances > caps.max_executors:
        out.append(("resources.executor_instances", f"{resources.executor_instances} executors exceed the cap "
                                                    f"of {caps.max_executors} (max_executors)"))
    return out


# ----------------------------------------------------------------------------------------------
# Where a declaration holds text

#: Roles of a declaration's text fields. ``query``: one SQL query (its relations from
#: :data:`QUERY_RELATIONS`); ``expression``: a SQL expression (a mapping: its values, its keys
#: being column names); ``name``: column names (a string, a list, or a mapping's keys and values);
#: ``keys``: a mapping whose keys are column names and whose values are models (walked);
#: ``code``: a reference to Python code; ``plain``: text that never reaches Spark's SQL parser or
#: is validated by its model (intervals, asset and topic names, JVM sizes, descriptions).
QUERY, EXPRESSION, NAME, KEYS, CODE, PLAIN = "query", "expression", "name", "keys", "code", "plain"

#: Every text-holding field of the declaration models, ``(model, field) -> role``. Fields holding
#: only models, numbers, booleans or ``Literal`` choices need no entry.
FIELD_ROLES: dict[tuple[type[BaseModel], str], str] = {
    (AssetSpec, "name"): PLAIN, (AssetSpec, "description"): PLAIN, (AssetSpec, "group"): PLAIN,
    (AssetSpec, "owner"): PLAIN, (AssetSpec, "expectations"): PLAIN,  # see _expectation_texts
    (KafkaSource, "topics"): PLAIN, (Source, "asset"): PLAIN,
    (Trigger, "processing_time"): PLAIN, (Watermark, "delay"): PLAIN, (Watermark, "column"): NAME,
    (Sink, "keys"): NAME, (Sink, "partition_by"): NAME,
    (Resources, "core_limit"): PLAIN, (Resources, "memory"): PLAIN, (Resources, "memory_overhead"): PLAIN,
    (FieldSpec, "description"): PLAIN,
    (Transform, "raw"): PLAIN,  # ``raw: {}``: the raw kind reads nothing from it
    (Transform, "sql"): QUERY, (Transform, "python"): CODE,
    (ParseTransform, "schema_"): KEYS, (ParseTransform, "event_id"): NAME, (ParseTransform, "event_time"): NAME,
    (ParseTransform, "max_future"): PLAIN,
    (WindowTransform, "time_column"): NAME, (WindowTransform, "size"): PLAIN, (WindowTransform, "slide"): PLAIN,
    (WindowTransform, "gap"): PLAIN, (WindowTransform, "group_by"): NAME,
    (WindowTransform, "aggregations"): EXPRESSION, (WindowTransform, "filter"): EXPRESSION,
    (JoinTimeRange, "left_column"): NAME, (JoinTimeRange, "right_column"): NAME,
    (JoinTimeRange, "lower"): PLAIN, (JoinTimeRange, "upper"): PLAIN,
    (JoinRight, "asset"): PLAIN, (JoinRight, "columns"): NAME,
    (JoinTransform, "keys"): NAME, (JoinTransform, "matched_column"): NAME,
    (SlidingTransform, "time_column"): NAME, (SlidingTransform, "size"): PLAIN, (SlidingTransform, "group_by"): NAME,
    (SlidingTransform, "output"): NAME, (SlidingTransform, "columns"): NAME, (SlidingTransform, "filter"): EXPRESSION,
    (ChangelogTransform, "key"): NAME, (ChangelogTransform, "schema_"): KEYS,
    (LookupTable, "asset"): PLAIN, (LookupTable, "keys"): NAME, (LookupTable, "as_of"): NAME,
    (LookupTable, "columns"): NAME,
    (MaterializedViewTransform, "tables"): PLAIN, (MaterializedViewTransform, "key"): NAME,
    (MaterializedViewTransform, "sql"): QUERY,
    (PatternStep, "name"): NAME, (PatternStep, "when"): EXPRESSION,
    (PatternTransform, "key"): NAME, (PatternTransform, "time_column"): NAME, (PatternTransform, "order_by"): NAME,
    (PatternTransform, "event_id"): NAME, (PatternTransform, "where"): EXPRESSION, (PatternTransform, "within"): PLAIN,
    (PatternTransform, "collect"): NAME,
}

#: The relations a query field may read, from the model that holds it: ``transform.sql`` reads
#: the upstream stream as the view ``input`` (:mod:`kappa.streaming.kinds.sql`); a materialized
#: view's SQL reads each of its ``tables`` as a view of that name (:mod:`kappa.streaming.table_joins`).
QUERY_RELATIONS: dict[tuple[type[BaseModel], str], Callable[[BaseModel], tuple[str, ...]]] = {
    (Transform, "sql"): lambda model: ("input",),
    (MaterializedViewTransform, "sql"): lambda model: tuple(model.tables),  # type: ignore[attr-defined]
}

#: A role only the expectations have: a Great Expectations argument that is a whole SQL query.
GX_QUERY = "gx-query"


@dataclass(frozen=True)
class DeclaredText:
    """One text of a declaration: ``field`` as in the YAML (``transform.pattern.steps.0.when``),
    its ``role`` (:data:`FIELD_ROLES`, or :data:`GX_QUERY`), the ``text`` and, for a query, the
    ``relations`` it may read."""

    field: str
    role: str
    text: str
    relations: tuple[str, ...] = ()


def declared_texts(spec: AssetSpec) -> list[DeclaredText]:
    """Every text of ``spec`` that is SQL, a column name or code, in declaration order, found by
    walking the models with :data:`FIELD_ROLES` (``plain`` texts are left out), then the SQL in its
    expectations' arguments. A text field the table does not know comes back with role
    ``unclassified``. Pure: no Spark."""
    out: list[DeclaredText] = []
    _walk_model(spec, "", out)
    out.extend(_expectation_texts(spec))
    return out


def _walk_model(model: BaseModel, prefix: str, out: list[DeclaredText]) -> None:
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if value is None or info.exclude:
            continue
        field = f"{prefix}{info.alias or name}"
        role = FIELD_ROLES.get((type(model), name))
        if role is None:
            if _is_choice(info.annotation):
                continue  # a Literal: the model already holds it to a fixed set of words
            if isinstance(value, BaseModel):
                _walk_model(value, f"{field}.", out)
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, BaseModel) for v in value):
                for i, item in enumerate(value):
                    _walk_model(item, f"{field}.{i}.", out)
            elif _holds_text(value):
                out.append(DeclaredText(field, "unclassified", repr(value)))
        elif role == QUERY:
            relations = QUERY_RELATIONS[(type(model), name)](model)
            out.append(DeclaredText(field, QUERY, value, tuple(relations)))
        elif role == EXPRESSION:
            if isinstance(value, dict):
                for key, text in value.items():
                    out.append(DeclaredText(f"{field}.{key}", NAME, key))
                    out.append(DeclaredText(f"{field}.{key}", EXPRESSION, text))
            else:
                out.append(DeclaredText(field, EXPRESSION, value))
        elif role == NAME:
            if isinstance(value, dict):
                for key, other in value.items():
                    out += [DeclaredText(f"{field}.{key}", NAME, key), DeclaredText(f"{field}.{key}", NAME, other)]
            elif isinstance(value, (list, tuple)):
                out += [DeclaredText(f"{field}.{i}", NAME, v) for i, v in enumerate(value)]
            else:
                out.append(DeclaredText(field, NAME, value))
        elif role == KEYS:
            for key, item in value.items():
                out.append(DeclaredText(f"{field}.{key}", NAME, key))
                if isinstance(item, BaseModel):
                    _walk_model(item, f"{field}.{key}.", out)
        elif role == CODE:
            out.append(DeclaredText(field, CODE, value))


def _is_choice(annotation: object) -> bool:
    """Whether a field's type is a ``Literal`` (or an optional one)."""
    if get_origin(annotation) is Literal:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return bool(args) and all(get_origin(a) is Literal for a in args)
    return False


def _holds_text(value: object) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, dict):
        return any(_holds_text(k) or _holds_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_text(v) for v in value)
    return False


def _expectation_texts(spec: AssetSpec) -> list[DeclaredText]:
    """The SQL in the expectations' arguments. Great Expectations 1.x on Spark filters rows with
    a ``row_condition`` string through ``DataFrame.filter`` when ``condition_parser`` is
    ``spark``, and with a ``pass_through`` condition's ``pass_through_filter`` (also inside
    ``and``/``or`` conditions); its query metrics run an argument named ``*query*`` with
    ``spark.sql`` (``great_expectations/execution_engine/sparkdf_execution_engine.py``,
    ``expectations/metrics/query_metrics``)."""
    out: list[DeclaredText] = []
    for i, item in enumerate(spec.expectations):
        for name, kwargs in item.items():
            where = f"expectations.{i}.{name}"
            for key, value in (kwargs or {}).items():
                if "query" in key.lower():
                    out.append(DeclaredText(f"{where}.{key}", GX_QUERY, str(value)))
            condition = (kwargs or {}).get("row_condition")
            if isinstance(condition, str) and (kwargs or {}).get("condition_parser") == "spark":
                out.append(DeclaredText(f"{where}.row_condition", EXPRESSION, condition))
            elif condition is not None:
                out.extend(DeclaredText(path, EXPRESSION, text)
                           for path, text in _pass_through(condition, f"{where}.row_condition"))
    return out


def _pass_through(value: object, path: str) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        found = [(f"{path}.pass_through_filter", str(value["pass_through_filter"]))] \
            if "pass_through_filter" in value else []
        for key, item in value.items():
            if key != "pass_through_filter":
                found += _pass_through(item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        return [hit for i, item in enumerate(value) for hit in _pass_through(item, f"{path}.{i}")]
    return []


def text_refusal(text: DeclaredText) -> Refusal | None:
    """The rule a text breaks without asking Spark (``python-needs-review``, ``column-name``,
    ``expectation-query``, ``unclassified-field``), or None. Pure."""
    if text.role == CODE:
        return Refusal("python-needs-review", f"{text.text!r} is Python code, which needs code review: a python "
                                              "transform can only come from a file under assets/ in the image")
    if text.role == NAME and "`" in text.text:
        return Refusal("column-name", f"{text.text!r} holds a backtick; the writers quote column names into SQL "
                                      "text (`name`), so a backtick would end the quoting")
    if text.role == GX_QUERY:
        return Refusal("expectation-query", "Great Expectations runs this argument as a SQL statement on the "
                                            "gate's Spark session; declare the check in a file under assets/")
    if text.role == "unclassified":
        return Refusal("unclassified-field", f"{text.text} is text in a field this policy does not classify "
                                             "(kappa.streaming.policy.FIELD_ROLES)")
    return None


# ----------------------------------------------------------------------------------------------
# SQL, parsed with Spark's parser

#: Built-in functions refused although Spark ships them, and why (Spark 4.1's registry,
#: ``FunctionRegistry.builtin``; the SQL endpoint's guard refuses the first three too). Harmless
#: look-alikes stay allowed: ``input_file_name`` only names the file a row came from; ``xpath*`` and
#: ``from_xml`` do not resolve external entities (tried on Spark 4.1.3).
DENIED_FUNCTIONS: dict[str, str] = {
    "reflect": "calls a Java method by name",
    "java_method": "calls a Java method by name",
    "try_reflect": "calls a Java method by name",
    "from_protobuf": "loads a Java class by name or reads a descriptor file",
    "to_protobuf": "loads a Java class by name or reads a descriptor file",
    "from_avro": "its options read a schema from a URL or file (avroSchemaUrl)",
    "schema_of_avro": "its options read a schema from a URL or file (avroSchemaUrl)",
    "from_xml": "its options read a file (rowValidationXSDPath)",
    "schema_of_xml": "its options read a file (rowValidationXSDPath)",
}

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
        self._registry = jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
        self._identifier = jvm.org.apache.spark.sql.catalyst.FunctionIdentifier
        self._kinds: dict[str, str] = {}
        self._builtin: dict[str, bool] = {}

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
                if not isinstance(obj, JavaObject):
                    continue  # strings, numbers, booleans: py4j converted them
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
            why = _OPERATOR_WHY.get(name, "not on kappa.streaming.policy.QUERY_NODES")
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
        if fn in DENIED_FUNCTIONS:
            raise _Refused(Refusal("function", f"{fn}: {DENIED_FUNCTIONS[fn]}"))
        if fn not in self._builtin:
            self._builtin[fn] = bool(self._registry.functionExists(self._identifier.apply(fn)))
        if not self._builtin[fn]:
            raise _Refused(Refusal("function", f"{fn} is not one of Spark's built-in functions (a temporary or "
                                               "catalog function runs code nobody reviewed)"))


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


# ----------------------------------------------------------------------------------------------
# The entry point


def check_resources(spec: AssetSpec, caps: ResourceCaps | None = None) -> None:
    """Raise :class:`PolicyError` (rule ``resources-cap``) naming the first field of
    ``spec.resources`` above ``caps`` (default :class:`ResourceCaps`). Pure."""
    refused = resource_refusals(spec.resources, caps or ResourceCaps())
    if refused:
        field, detail = refused[0]
        raise PolicyError(spec.name, field, "resources-cap", detail)


def check_runtime_declaration(spark: "SparkSession", spec: AssetSpec, caps: ResourceCaps | None = None) -> None:
    """Hold ``spec`` (a validated declaration that did not come from ``assets/``) to the rules of
    this module before it is recorded. Returns None when it may be added; raises
    :class:`PolicyError` naming the declaration, the field and the rule of the first breach.

    The checks that need no Spark come first (python, column names, expectation queries,
    ``resources`` against ``caps``, default :class:`ResourceCaps`); then each SQL text is parsed by
    ``spark``'s parser, nothing run (some tens of milliseconds a text over py4j). ``spark`` must be
    a classic session (py4j), such as :func:`kappa.streaming.session.spark_session`'s.

    Example::

        check_runtime_declaration(spark, load_asset(path))  # raises PolicyError, or returns
    """
    texts = declared_texts(spec)
    for text in texts:
        refusal = text_refusal(text)
        if refusal is not None:
            raise PolicyError(spec.name, text.field, refusal.rule, refusal.detail)
    check_resources(spec, caps)
    sql = [t for t in texts if t.role in (QUERY, EXPRESSION)]
    if not sql:
        return
    policy = SqlPolicy(spark)
    for text in sql:
        refusal = policy.query_refusal(text.text, text.relations) if text.role == QUERY \
            else policy.expression_refusal(text.text)
        if refusal is not None:
            raise PolicyError(spec.name, text.field, refusal.rule, refusal.detail)
