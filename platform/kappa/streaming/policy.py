"""What a declaration added at run time may hold (issue 22 item 3, issue 40 item 3).

A file under ``assets/`` ships in the image and was reviewed with it; a declaration a data
engineer adds from the Dagster UI (or ``kappa declarations add``) was not. Such a declaration is
held to the rules below twice: before it is recorded (:func:`check_runtime_declaration`, from
:func:`kappa.lifecycle.declare.check_policy`), and again whenever a query or a gate is built from
the text the declarations log keeps (:func:`check_before_running`, from
:func:`kappa.streaming.query.start_query` and :func:`kappa.quality.gate.run_gate`), so a text
written into the log some other way, or recorded before a rule existed, does not start. A file of
``assets/`` is not parsed again there. :class:`PolicyError` names the declaration, the field and
the rule at the first one it breaks, in one line::

    declarations:busy_routes: transform.sql: refused (rule: relation): parquet.`/etc` reads files by path; …

Everything is an allow-list: what may be called, read and built is named; the rest is refused.
Rules (short, stable names; a caller may match on :attr:`PolicyError.rule`):

* ``substitution`` — ``${`` in any string of the declaration (every field of every model, mapping
  keys, the expectations' arguments), checked before anything is parsed. Spark's variable
  substitution rewrites ``${env:…}``/``${system:…}`` with the driver's environment and JVM
  properties before its parser runs, so no parser-level check sees it (the value would land in
  the output, and in ``analyze_declaration``'s ``sample_rows``); THE Spark configuration turns
  substitution off too (``spark.sql.variable.substitute``, :mod:`kappa.streaming.session`).
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
* ``function`` — a function not on the allow-list of Spark's built-in functions,
  ``kappa/resources/sql_functions.json`` (:func:`kappa.core.sql_functions.function_tables`: the
  one table the SQL endpoint's guard reads too; a name it does not list is refused, so a temporary
  or catalog function and a built-in a later Spark adds are refused until classified there), a
  qualified name (``system.builtin.reflect``) or ``IDENTIFIER(…)`` in an expression.
* ``operator`` — a query operator not on :data:`QUERY_NODES`, such as ``SELECT TRANSFORM(…) USING
  'cmd'``, which runs a program on the executors. The list is closed: an operator Spark adds later
  is refused until someone adds it here.
* ``python-needs-review`` — a ``python:`` transform. It runs arbitrary code, so it needs code
  review: it can only come from a file under ``assets/`` in the image.
* ``column-name`` — a backtick in a column name a field declares, or in any name of a parsed text
  (an alias, a CTE). The writers quote merge keys into SQL text (``t.`key` <=> s.`key```,
  :class:`kappa.streaming.writers.UpsertWriter`) and Great Expectations quotes output columns into
  expressions; a backtick would end the quoting and let the rest run as SQL.
* ``expectation-query`` — a Great Expectations expectation with a query argument
  (``expect_query_results_to_match_comparison``): GX runs it with ``spark.sql`` on the gate's
  session.
* ``expectation-arguments`` — a ``row_condition`` Great Expectations cannot build a filter from.
  Every other ``row_condition``, whatever its ``condition_parser`` (``spark``, ``pandas``, none,
  ``great_expectations``, a condition object), is held to the expression rules above as the
  exact text GX 1.x hands to ``DataFrame.filter`` on Spark, built by GX's own code
  (:func:`_gx_filter`): a string is handed over as it is unless the parser is
  ``great_expectations``.
* ``resources-cap`` — ``resources:`` asks for more than :class:`ResourceCaps` allows.
* ``unclassified-field`` — a text field that declares no role (a model grew one without saying
  what it holds): refused rather than guessed.

Which fields hold SQL each field says itself (``Annotated[str, EXPRESSION]``, a
:class:`kappa.spec.base.Role`), not a table here nor a branch per kind: the walk over a
declaration (:func:`declared_texts`) finds the texts wherever the models put them, a new kind's
fields included, and ``tests/unit/test_policy.py`` fails when a model gains a text field without a
role;
``tests/integration/test_policy.py`` fails when Spark's function registries and the function table
disagree.

SQL is parsed, never run: ``parsePlan``/``parseQuery``/``parseExpression`` of the session's parser
(the same parser ``spark.sql``, ``F.expr`` and ``DataFrame.filter`` use, Delta's extension
included), and the unresolved plan is walked whole over py4j: every node's fields, so subqueries,
CTE definitions, ``WINDOW`` clauses, lambdas and hint arguments are seen. Sources: Spark SQL
reference, "SQL Syntax" (queries, ``WITH``, table-valued functions, ``TRANSFORM``, ``EXECUTE
IMMEDIATE``), "Functions" and "Configuration" (``spark.sql.variable.substitute``).
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kappa.errors import KappaError
from kappa.spec import AssetResources, AssetSpec, Resources, Transform, TransformModel, transform_kinds
from kappa.spec.base import MEMORY_RE, Role, memory_bytes, role_of
from kappa.streaming.sql_policy import Refusal, SqlPolicy, clip

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class PolicyError(KappaError):
    """A declaration added at run time breaks a rule of this module. The message is
    ``declarations:<asset>: <field>: refused (rule: <rule>): <detail>``; the parts are attributes."""

    def __init__(self, asset: str, field: str, rule: str, detail: str):
        self.asset, self.field, self.rule, self.detail = asset, field, rule, detail
        super().__init__(f"declarations:{asset}: {field}: refused (rule: {rule}): {detail}")


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

#: The role names of :class:`kappa.spec.base.Role`: ``query`` (one SQL query, reading the relations
#: its role names), ``expression``, ``name``, ``keys``, ``code`` and ``plain`` (see there).
QUERY, EXPRESSION, NAME, KEYS, CODE, PLAIN = "query", "expression", "name", "keys", "code", "plain"


def declaration_models() -> list[type[BaseModel]]:
    """Every model a declaration can hold, found from :class:`~kappa.spec.AssetSpec` and every
    registered kind's model (:func:`kappa.spec.transform_kinds`) through their fields' types."""
    todo: list[type[BaseModel]] = [AssetSpec, *transform_kinds().values()]
    seen: list[type[BaseModel]] = []
    while todo:
        model = todo.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for info in model.model_fields.values():
            todo += _models_in(info.annotation)
    return seen


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models_in(a)]


def field_roles() -> dict[tuple[type[BaseModel], str], Role]:
    """``(model, field) -> role`` for every field of :func:`declaration_models` that declares a
    :class:`~kappa.spec.base.Role` on itself: the policy's table of where a declaration holds SQL,
    names and code, derived from the models, never written here."""
    return {(model, name): role for model in declaration_models() for name in model.model_fields
            if (role := role_of(model, name)) is not None}


#: A role only the expectations have: a Great Expectations argument that is a whole SQL query.
GX_QUERY = "gx-query"
#: A role only the expectations have: arguments Great Expectations itself refuses (the text is its
#: message), so the filter it would build is unknown.
GX_ARGUMENTS = "gx-arguments"


@dataclass(frozen=True)
class DeclaredText:
    """One text of a declaration: ``field`` as in the YAML (``transform.pattern.steps.0.when``),
    its ``role`` (the field's :class:`~kappa.spec.base.Role`, or :data:`GX_QUERY`), the ``text`` and, for a query, the
    ``relations`` it may read."""

    field: str
    role: str
    text: str
    relations: tuple[str, ...] = ()


def declared_texts(spec: AssetSpec) -> list[DeclaredText]:
    """Every text of ``spec`` that is SQL, a column name or code, in declaration order, found by
    walking the models and the :class:`~kappa.spec.base.Role` each field declares (``plain`` texts
    are left out), then the SQL in its expectations' arguments. A text field that declares no role
    comes back with role ``unclassified``. Pure: no Spark."""
    out: list[DeclaredText] = []
    _walk_model(spec, "", out)
    out.extend(_expectation_texts(spec))
    return out


def _walk_model(model: BaseModel, prefix: str, out: list[DeclaredText]) -> None:
    if isinstance(model, Transform):  # ``transform: {<kind>: …}``: the kind's model, under its key
        _walk_model(model.model, f"{prefix}{model.kind}.", out)
        return
    value_field = type(model).value_field if isinstance(model, TransformModel) else None
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if value is None or info.exclude:
            continue
        # A kind whose YAML value is one field's (``sql: SELECT …``) names that field by its key.
        field = prefix.rstrip(".") if name == value_field else f"{prefix}{info.alias or name}"
        declared = role_of(type(model), name)
        role = declared.name if declared is not None else None
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
            assert declared is not None and declared.relations is not None, f"{field}: a query role names its relations"
            relations = declared.relations(model)
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
    """The SQL in the expectations' arguments: an argument named ``*query*`` (GX's query metrics
    run it with ``spark.sql``: ``expectations/metrics/query_metrics``) and every ``row_condition``,
    as the text Great Expectations hands to ``DataFrame.filter`` (:func:`_gx_filter`)."""
    out: list[DeclaredText] = []
    for i, item in enumerate(spec.expectations):
        for name, kwargs in item.items():
            where = f"expectations.{i}.{name}"
            for key, value in (kwargs or {}).items():
                if "query" in key.lower():
                    out.append(DeclaredText(f"{where}.{key}", GX_QUERY, str(value)))
            if (kwargs or {}).get("row_condition") is not None:
                out.append(_gx_filter(f"{where}.row_condition", name, kwargs))
    return out


def _gx_filter(field: str, name: str, kwargs: dict) -> DeclaredText:
    """The filter text Great Expectations 1.x builds from an expectation's ``row_condition`` on
    Spark, whatever its ``condition_parser``: GX turns a string into a ``PassThroughCondition``
    (handed to ``DataFrame.filter`` as it is) unless the parser is ``great_expectations``, whose
    grammar makes a condition object; an object (or a dict of one) becomes a SQL string through
    the Spark engine's ``condition_to_filter_clause``, which is then filtered with
    (``expectations/expectation.py`` ``_transform_legacy_row_condition``,
    ``execution_engine/sparkdf_execution_engine.py`` ``_apply_row_condition_filter``). The text is
    built with GX's own code, so the policy checks exactly what Spark will parse. GX is imported
    only here (seconds), for a declaration with a row condition. Arguments GX refuses come back
    with role ``gx-arguments``."""
    import warnings

    import great_expectations.expectations as gxe
    from great_expectations.execution_engine.sparkdf_execution_engine import SparkDFExecutionEngine
    from great_expectations.expectations.row_conditions import PassThroughCondition

    cls = getattr(gxe, "".join(part.capitalize() for part in name.split("_")), None)
    try:
        with warnings.catch_warnings():  # GX warns that string conditions are deprecated
            warnings.simplefilter("ignore")
            condition = cls(**kwargs).row_condition if cls is not None else None
        if isinstance(condition, PassThroughCondition):
            return DeclaredText(field, EXPRESSION, condition.pass_through_filter)
        if condition is None:
            raise ValueError(f"{name} is not a Great Expectations expectation with a row_condition")
        # The clause builders read nothing of the engine: no session is made for them.
        engine = object.__new__(SparkDFExecutionEngine)
        return DeclaredText(field, EXPRESSION, engine.condition_to_filter_clause(condition))
    except Exception as exc:  # GX raises pydantic, parser and its own errors for bad arguments
        return DeclaredText(field, GX_ARGUMENTS, str(exc).strip().splitlines()[0] if str(exc).strip()
                            else type(exc).__name__)


#: What Spark's variable substitution rewrites before its parser runs (``${env:…}``,
#: ``${system:…}``, ``${hiveconf:…}``, ``${var}``: ``VariableSubstitution``, applied by
#: ``SparkSqlParser`` to every text it parses when ``spark.sql.variable.substitute`` is on).
SUBSTITUTION = "${"


def substitution_refusal(spec: AssetSpec) -> tuple[str, str] | None:
    """``(field, detail)`` for the first string of ``spec`` holding ``${`` — any field of any model,
    mapping keys and the expectations' arguments included, named as in the YAML
    (``expectations.0.expect_column_values_to_not_be_null.row_condition``) — or None. Pure.

    Spark substitutes ``${env:NAME}`` and ``${system:NAME}`` with the driver's environment and JVM
    properties *before* parsing, so a parser-level check never sees it and the value (an
    object-store key) ends up in the output rows; the platform's session turns substitution off
    (:func:`kappa.streaming.session.spark_conf`) and this rule refuses the text outright."""
    stack: list[tuple[str, object]] = [("", spec.model_dump(by_alias=True, exclude_none=True))]
    while stack:
        path, value = stack.pop(0)
        if isinstance(value, str):
            if SUBSTITUTION in value:
                return path.rstrip("."), f"{clip(value)!r} holds '${{', which Spark's variable substitution " \
                                         "would replace with the driver's environment or JVM properties"
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and SUBSTITUTION in key:
                    return f"{path}{key}", f"{clip(key)!r} holds '${{' (variable substitution)"
                stack.append((f"{path}{key}.", item))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}{i}.", item) for i, item in enumerate(value))
    return None


def text_refusal(text: DeclaredText) -> Refusal | None:
    """The rule a text breaks without asking Spark (``python-needs-review``, ``column-name``,
    ``expectation-query``, ``expectation-arguments``, ``unclassified-field``), or None. Pure."""
    if text.role == CODE:
        return Refusal("python-needs-review", f"{text.text!r} is Python code, which needs code review: a python "
                                              "transform can only come from a file under assets/ in the image")
    if text.role == NAME and "`" in text.text:
        return Refusal("column-name", f"{text.text!r} holds a backtick; the writers quote column names into SQL "
                                      "text (`name`), so a backtick would end the quoting")
    if text.role == GX_QUERY:
        return Refusal("expectation-query", "Great Expectations runs this argument as a SQL statement on the "
                                            "gate's Spark session; declare the check in a file under assets/")
    if text.role == GX_ARGUMENTS:
        return Refusal("expectation-arguments", f"Great Expectations refuses these arguments ({text.text}), so "
                                                "the filter it would hand to Spark cannot be checked")
    if text.role == "unclassified":
        return Refusal("unclassified-field", f"{text.text} is text in a field that declares no policy role "
                                             "(kappa.spec.base.Role)")
    return None


# ----------------------------------------------------------------------------------------------
# The entry point


def check_resources(spec: AssetSpec, caps: ResourceCaps | None = None) -> None:
    """Raise :class:`PolicyError` (rule ``resources-cap``) naming the first field of
    ``spec.resources`` above ``caps`` (default :class:`ResourceCaps`). Pure."""
    refused = resource_refusals(spec.resources, caps or ResourceCaps())
    if refused:
        field, detail = refused[0]
        raise PolicyError(spec.name, field, "resources-cap", detail)


def check_texts(spec: AssetSpec, caps: ResourceCaps | None = None) -> list[DeclaredText]:
    """The part of the policy that needs no Spark, in this order: ``substitution`` (before anything
    is parsed, GX's row conditions included), then each text's :func:`text_refusal`, then
    ``resources`` against ``caps`` (default :class:`ResourceCaps`). Raises :class:`PolicyError`
    naming the first breach; returns the SQL texts (queries and expressions) left for Spark's
    parser."""
    found = substitution_refusal(spec)
    if found is not None:
        raise PolicyError(spec.name, found[0], "substitution", found[1])
    texts = declared_texts(spec)
    for text in texts:
        refusal = text_refusal(text)
        if refusal is not None:
            raise PolicyError(spec.name, text.field, refusal.rule, refusal.detail)
    check_resources(spec, caps)
    return [t for t in texts if t.role in (QUERY, EXPRESSION)]


def check_runtime_declaration(spark: "SparkSession | Callable[[], SparkSession]", spec: AssetSpec,
                              caps: ResourceCaps | None = None) -> None:
    """Hold ``spec`` (a validated declaration that did not come from ``assets/``) to the rules of
    this module. Returns None when it may be added (or run); raises :class:`PolicyError` naming
    the declaration, the field and the rule of the first breach.

    The checks that need no Spark come first (:func:`check_texts`); then each SQL text is parsed
    by ``spark``'s parser, nothing run (some tens of milliseconds a text over py4j). ``spark`` must
    be a classic session (py4j), such as :func:`kappa.streaming.session.spark_session`'s, or a
    function returning one, called only when there is SQL to parse (a refusal that needs no Spark
    then starts none).

    Example::

        check_runtime_declaration(spark, load_asset(path))  # raises PolicyError, or returns
    """
    key = (spec.text, (caps or ResourceCaps()).model_dump_json()) if spec.text is not None else None
    if key is not None and key in _PASSED:
        return  # this text passed these rules in this process already (a pure function of both)
    sql = check_texts(spec, caps)
    if sql:
        global SQL_PARSES
        SQL_PARSES += 1
        policy = SqlPolicy(spark() if callable(spark) else spark)
        for text in sql:
            refusal = policy.query_refusal(text.text, text.relations) if text.role == QUERY \
                else policy.expression_refusal(text.text)
            if refusal is not None:
                raise PolicyError(spec.name, text.field, refusal.rule, refusal.detail)
    if key is not None:
        _PASSED.add(key)


#: Declaration texts (with the caps, as JSON) that passed :func:`check_runtime_declaration` in this
#: process: a run that validated a text (Dagster's first step) does not hand its SQL to Spark's
#: parser again where it runs it and gates it (:func:`check_before_running`).
_PASSED: set[tuple[str, str]] = set()

#: How many declarations this process has handed to Spark's parser (:func:`check_runtime_declaration`):
#: tests count a run's with it.
SQL_PARSES = 0


def recorded_at_run_time(spec: AssetSpec) -> bool:
    """Whether ``spec`` was declared at run time (its text kept in the warehouse's declarations
    log, :mod:`kappa.delta.declarations`) rather than shipped as a file under ``assets/``: its
    origin is ``declarations:<name>`` and it has no file."""
    return spec.path is None and (spec.origin or "").startswith("declarations:")


def check_before_running(spark: "SparkSession", spec: AssetSpec) -> None:
    """Hold a declaration recorded at run time to the policy again where a query or a gate is
    built from it (:func:`kappa.streaming.query.start_query`, :func:`kappa.quality.gate.run_gate`):
    a text written into the declarations log without passing :func:`check_runtime_declaration`
    (or recorded before a rule existed) does not start. A file of ``assets/`` shipped in the image
    keeps its trust and is not parsed again. Raises :class:`PolicyError` (one line: declaration,
    field, rule)."""
    if recorded_at_run_time(spec):
        check_runtime_declaration(spark, spec)
