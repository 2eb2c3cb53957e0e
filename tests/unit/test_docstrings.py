"""Every module of the ``kappa`` package and every public name it defines carries a docstring
(issue 18, item 7; STYLE.md, "Docstrings that teach").

What is checked, per module (``__main__`` scripts aside):

* the module docstring;
* every public class and function *defined* in the module (``obj.__module__`` is the module; a name
  imported from elsewhere is checked where it is defined);
* every public method, classmethod, staticmethod and property written in the body of such a class.

What is not: module-level constants (Python gives them no ``__doc__``), dunder and ``_private``
names, members a decorator generates (dataclass and pydantic ones: they are dunders or inherited
from ``BaseModel``), and a method overriding a documented base method (``write`` of a
``MicroBatchWriter`` subclass, ``init``/``handleInputRows``/``close`` of a Spark
``StatefulProcessor``): it inherits the base's doc, as ``inspect.getdoc`` would show it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
import sys
from types import ModuleType

import kappa

#: TEMPORARY, filled by the merge of the concurrent refactor: the names still without a docstring in
#: the files that refactor (issue 18) is changing, left alone on this branch so the two do not
#: conflict. Empty it after that merge; the test then checks those files like any other.
PENDING: dict[str, set[str]] = {
    "kappa.cdc.connect": {"ConnectorSpec.topics", "ConnectorsFile", "ConnectStatus", "url"},
    "kappa.cdc.postgres": {"PostgresStatus"},
    "kappa.config": {"is_uri"},
    "kappa.dagster.component": {
        "StreamingAssets.catalog", "StreamingAssets.assets_path", "StreamingAssets.build_defs",
        "StreamingAssets.asset_spec",
    },
    "kappa.delta.registry": {"Version.name", "Registry.version", "Registry.promoted", "Registry.record"},
    "kappa.harness.bench": {
        "LiveProducer.start", "LiveProducer.stop", "Lag.processed", "Lag.log_end", "Lag.sample", "Lag.close",
        "BenchOptions", "BenchOptions.for_quick",
    },
    "kappa.kafka.broker": {"BrokerStatus"},
    "kappa.lifecycle.promotion": {"ReplayReport", "ReplayReport.passed"},
    "kappa.runners.base": {"Outcome.terminal", "AssetRunResult.to_dict"},
    "kappa.runners.local": {
        "LocalRunner.spark", "LocalRunner.start", "LocalRunner.status", "LocalRunner.stop", "LocalRunner.gate",
    },
    "kappa.services.cluster": {"state_dir"},
    "kappa.services.serve": {"ServeStatus", "jdbc_url", "main"},
}


def _modules() -> list[ModuleType]:
    names = [i.name for i in pkgutil.walk_packages(kappa.__path__, "kappa.")]
    return [kappa] + [importlib.import_module(n) for n in names if n.rsplit(".", 1)[-1] != "__main__"]


def _has_text(doc: object) -> bool:
    return isinstance(doc, str) and bool(doc.strip())


def _class_doc(cls: type) -> str | None:
    """The class's own docstring; a base's does not count, nor the signature a dataclass or a
    namedtuple writes into ``__doc__`` when the class has none."""
    doc = cls.__dict__.get("__doc__")
    if not _has_text(doc):
        return None
    generated = dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    if generated and doc.startswith(f"{cls.__name__}("):
        return None
    return doc


def _member_doc(member: object) -> str | None:
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    doc = getattr(member, "__doc__", None)
    return doc if _has_text(doc) else None


def _function_of(member: object):
    """The plain function behind a class-body member, or None for anything that is not a method
    or a property (class constants, nested classes, pydantic fields)."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    elif isinstance(member, property):
        member = member.fget
    elif isinstance(member, functools.cached_property):
        member = member.func
    member = inspect.unwrap(member) if callable(member) else member
    return member if inspect.isfunction(member) else None


def _undocumented_members(cls: type) -> list[str]:
    missing = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        func = _function_of(member)
        # Written in this class's body (a generated or aliased function has another qualname).
        if func is None or not func.__qualname__.startswith(f"{cls.__qualname__}."):
            continue
        if _member_doc(member):
            continue
        inherited = any(_member_doc(vars(base)[name]) for base in cls.__mro__[1:] if name in vars(base))
        if not inherited:
            missing.append(f"{cls.__name__}.{name}")
    return missing


def _undocumented(module: ModuleType) -> list[str]:
    missing = [] if _has_text(module.__doc__) else ["(module docstring)"]
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            if _class_doc(obj) is None:
                missing.append(name)
            missing.extend(_undocumented_members(obj))
        elif inspect.isfunction(inspect.unwrap(obj) if callable(obj) else obj):
            if not _has_text(obj.__doc__):
                missing.append(name)
    return missing


def test_every_public_name_has_a_docstring():
    report = {}
    for module in _modules():
        pending = PENDING.get(module.__name__, set())
        missing = [n for n in _undocumented(module) if n not in pending]
        if missing:
            report[module.__name__] = missing
    lines = [f"{mod}: {', '.join(names)}" for mod, names in sorted(report.items())]
    total = sum(len(names) for names in report.values())
    assert not report, f"{total} public names without a docstring:\n" + "\n".join(lines)


def test_pending_lists_only_names_still_missing():
    """PENDING must shrink as docstrings are written: an entry that is documented (or gone) fails."""
    stale = {}
    for module in _modules():
        pending = PENDING.get(module.__name__)
        if pending:
            gone = pending - set(_undocumented(module))
            if gone:
                stale[module.__name__] = sorted(gone)
    assert not stale, f"documented now, remove from PENDING: {stale}"


_SAMPLE = '''
"""A module."""
import dataclasses, functools
from pathlib import Path

class Base:
    """Documented."""
    def write(self):
        """What a write does."""

@dataclasses.dataclass
class Plain:
    x: int
    def helper(self):
        pass
    @property
    def size(self):
        """Bytes."""
    def _private(self):
        pass

class Child(Base):
    """Documented."""
    def write(self):
        pass
    alias = Path.exists

def undocumented():
    pass

@functools.lru_cache
def cached():
    """Documented, through the cache wrapper."""

CONSTANT = 3
'''


def test_the_check_finds_what_it_should(monkeypatch):
    module = ModuleType("sample")
    monkeypatch.setitem(sys.modules, "sample", module)  # dataclasses look their module up there
    exec(compile(_SAMPLE, "sample.py", "exec"), module.__dict__)
    # A dataclass's generated signature is no docstring; an override inherits; imports, aliases,
    # constants and private names are not checked.
    assert _undocumented(module) == ["Plain", "Plain.helper", "undocumented"]
