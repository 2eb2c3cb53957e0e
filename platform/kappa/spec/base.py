"""What every declaration model shares: the strict model base, the one error type of a bad
declaration, and Spark's interval and JVM size syntax (:func:`interval_seconds`, :func:`memory_bytes`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

from kappa.errors import KappaError

#: Spark interval strings accepted for watermarks, windows and triggers: "<n> <unit>".
INTERVAL_RE = re.compile(
    r"^\s*(\d+)\s+(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)
#: A JVM heap size (Spark's ``spark.driver.memory`` syntax): ``512m``, ``2g``.
MEMORY_RE = re.compile(r"^\d+[kmgt]?$", re.IGNORECASE)
_UNIT_SECONDS = {"millisecond": 0.001, "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def check_name(v: str) -> str:
    """``v`` if it is lower_snake_case (:data:`NAME_RE`: an asset's or a rule's name); raises
    ``ValueError`` (pydantic's one-line field error) otherwise."""
    if not NAME_RE.match(v):
        raise ValueError(f"{v!r} must be lower_snake_case (letters, digits, _), starting with a letter")
    return v

FieldType = Literal["string", "int", "long", "double", "boolean", "timestamp", "date"]


class SpecError(KappaError, ValueError):
    """A declaration is invalid. The message names the file and the field."""


def interval_seconds(text: str) -> float:
    """``"2 hours"`` -> ``7200.0``. Raises ``ValueError`` for anything else."""
    m = INTERVAL_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not an interval like '10 seconds' or '2 hours'")
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]


def memory_bytes(text: str) -> int:
    """A JVM size as Spark reads ``spark.driver.memory``/``spark.executor.memory`` and their
    ``memoryOverhead``, in bytes: ``"512m"`` -> ``536870912``, ``"2g"`` -> ``2147483648``; the
    suffixes ``k``, ``m``, ``g``, ``t`` are powers of 1024 and a bare number is MiB (Spark's
    ``ConfigBuilder.bytesConf(ByteUnit.MiB)`` for these settings; Spark configuration docs,
    "Application Properties"). Raises ``ValueError`` for anything :data:`MEMORY_RE` refuses."""
    if not MEMORY_RE.match(text):
        raise ValueError(f"{text!r} is not a JVM size like '512m' or '2g'")
    suffix = text[-1].lower()
    power = "kmgt".index(suffix) + 1 if suffix in "kmgt" else 2
    number = text[:-1] if suffix in "kmgt" else text
    return int(number) * 1024 ** power


def check_interval(value: str) -> str:
    """A pydantic validator's body for interval fields: ``value`` stripped of surrounding
    whitespace if :func:`interval_seconds` accepts it. Raises ``ValueError`` otherwise (pydantic
    reports it as a validation error of the field)."""
    interval_seconds(value)
    return value.strip()


def schema_shorthand(v: object) -> object:
    """``year: int`` is shorthand for ``year: {type: int}`` in a ``schema:`` mapping (parse and
    changelog transforms)."""
    if isinstance(v, dict):
        return {k: ({"type": t} if isinstance(t, str) else t) for k, t in v.items()}
    return v


@dataclass(frozen=True)
class Role:
    """What a text field of a declaration model holds, declared on the field as ``Annotated``
    metadata (``time_column: Annotated[str, NAME]``); the run-time policy
    (:mod:`kappa.streaming.policy`) reads it to know which texts are SQL. ``name`` is one of:
    ``query`` (one SQL query reading ``relations(model)``, the model holding the field),
    ``expression`` (a SQL expression; in a mapping, its values, the keys being column names),
    ``name`` (column names: a string, a list, or a mapping's keys and values), ``keys`` (a mapping
    whose keys are column names and whose values are models, walked), ``code`` (a reference to
    Python code), ``plain`` (text that never reaches Spark's SQL parser or is validated by its
    model: intervals, asset and topic names, JVM sizes, descriptions). A text field without a role
    is refused at run time (``unclassified-field``); fields holding only models, numbers, booleans
    or ``Literal`` choices need none."""

    name: Literal["query", "expression", "name", "keys", "code", "plain"]
    relations: Callable[[BaseModel], tuple[str, ...]] | None = None


#: Role of a text that never reaches Spark's SQL parser (:class:`Role`).
PLAIN = Role("plain")
#: Role of column names (:class:`Role`).
NAME = Role("name")
#: Role of a SQL expression, or of a mapping column name -> SQL expression (:class:`Role`).
EXPRESSION = Role("expression")
#: Role of a mapping column name -> model (:class:`Role`).
KEYS = Role("keys")
#: Role of a reference to Python code (:class:`Role`).
CODE = Role("code")


def query(relations: Callable[[BaseModel], tuple[str, ...]]) -> Role:
    """The :class:`Role` of a field holding one SQL query that may read ``relations(model)`` (the
    view names its text may name, from the model holding the field) and the CTEs it defines."""
    return Role("query", relations)


def role_of(model: type[BaseModel], field: str) -> Role | None:
    """The :class:`Role` declared on ``model``'s field ``field`` (its ``Annotated`` metadata), or
    None when it declares none."""
    info = model.model_fields[field]
    return next((m for m in info.metadata if isinstance(m, Role)), None)


class StrictModel(BaseModel):
    """A frozen pydantic model that refuses unknown fields (a typo in a YAML key is an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


