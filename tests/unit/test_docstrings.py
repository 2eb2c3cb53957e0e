"""Every module of the ``kappa`` package and every public name it defines carries a docstring
(issue 18, item 7; STYLE.md, "Docstrings that teach").

What is checked, per module (``__main__`` scripts aside):

* the module docstring;
* every public class and function *defined* in the module (``obj.__module__`` is the module; a name
  imported from elsewhere is checked where it is defined);
* every public method, classmethod, staticmethod and property written in the body of such a class.

What is not: module-level constants (Python gives them no ``__doc__``), dunder and ``_private``
names, members a decorator generates (dataclass and pydantic ones: they are dunders or inherited
from ``BaseModel``), and a method overriding a documented base method (``commits`` of a
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
        missing = _undocumented(module)
        if missing:
            report[module.__name__] = missing
    lines = [f"{mod}: {', '.join(names)}" for mod, names in sorted(report.items())]
    total = sum(len(names) for names in report.values())
    assert not report, f"{total} public names without a docstring:\n" + "\n".join(lines)


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
