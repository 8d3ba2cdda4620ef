"""Name → object registries with helpful errors (lm-evaluation-harness style), imported lazily.

A registry maps a name (the ``name:`` of a config file, which is also the file's stem) to an object. An unknown
name fails with ``ConfigError``: "did you mean …? known: …".

**One convention: declared where defined, found by a package scan, imported when asked.** A registry built with
``package`` and ``marker`` (``Registry("gamma policy", package="methods", marker="policy")``) finds its names by
reading the sources of that package's modules (``ast``, no import) for a module-level definition decorated with
``@<marker>("<name>", ...)``, the first argument a string literal::

    @policy("dynamic_depth")            # methods/dynamic_depth.py
    class DynamicDepth(StopRule): ...

Asking for a name (``get``) imports only the module that declares it; importing it runs the decorator
(``register``), which puts the object in the registry; the object is cached. ``names()`` and ``in`` read the scan
alone, so listing the known names imports nothing. The scan is read once per registry and cached
(``declarations``); a name declared twice, a marker whose name is no literal, or a module whose import does not
register the name it declares fails with the module's name. The same decorator, the same scan, for every kind:
``methods.base.POLICIES`` (``@policy``), ``specbench.tasks.config.TASKS`` (``@dataset``, on a dataset module's
``load``: the entry is the module), ``analysis.artefacts`` (``@artefact``), and a drafter (``@drafter``) the same way.

A registry may also be given ``entries`` by hand (an object, or a ``"module:attribute"`` string imported the first
time the name is asked for), as ``specbench.loggers.LOGGERS`` is.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A bad configuration value, raised before any model is loaded."""


def unknown_name_message(kind: str, name: object, known: Iterable[str]) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"Unknown {kind} {name!r}.{hint} Known: {', '.join(known)}."


def import_target(target: str) -> Any:
    """The object a ``"package.module:attribute"`` string names."""
    module, _, attribute = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        obj = getattr(obj, part)
    return obj


# --------------------------------------------------------------------------- the scan


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


#: a declaration's keyword argument that the scan cannot read without importing (no literal)
NOT_LITERAL = object()


def declared_entries(source: str, marker: str, filename: str = "<source>") -> list[tuple[str, str, dict[str, Any]]]:
    """What ``source`` declares: ``(name, object, arguments)`` for each module-level class or function decorated with
    ``@<marker>("<name>", key=literal, …)``, in the order of definition; ``object`` is the decorated class's or
    function's name, ``arguments`` the decorator's keyword arguments, read without importing (``NOT_LITERAL`` for
    one that is no literal: a registry that reads arguments refuses it). A ``@<marker>(…)`` whose first argument
    is no string literal is refused (the scan could not see its name, so the name could never be found)."""
    entries = []
    for node in ast.parse(source, filename).body:
        if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and _dotted(deco.func) == marker):
                continue
            first = deco.args[0] if deco.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                raise ValueError(f"{filename}:{deco.lineno}: @{marker}(...) must name its entry with a string literal "
                                 "(the registry finds names by reading the source)")
            arguments = {}
            for keyword in deco.keywords:
                try:
                    arguments[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    arguments[keyword.arg] = NOT_LITERAL
            entries.append((first.value, node.name, arguments))
    return entries


def declared_names(source: str, marker: str, filename: str = "<source>") -> list[str]:
    """The names ``source`` declares (``declared_entries``), in the order of definition."""
    return [name for name, _, _ in declared_entries(source, marker, filename)]


def package_modules(package: str) -> list[tuple[str, Path]]:
    """Every module of ``package`` and its subpackages, as ``(dotted name, source file)``, sorted by path."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{package!r} is no package")
    folder = Path(next(iter(spec.submodule_search_locations)))
    out = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        out.append((".".join((package, *parts)).removesuffix(".__init__"), path))
    return out


def declaration_entries(package: str, marker: str) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """``{name: (module, object, arguments)}`` for every ``@<marker>("<name>", …)`` in ``package``'s sources (read,
    never imported; ``declared_entries``), in the order of the modules' paths, then of definition. A name declared
    twice fails, naming both modules."""
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for module, path in package_modules(package):
        text = path.read_text(encoding="utf-8")
        if f"@{marker}(" not in text:
            continue
        for name, obj, arguments in declared_entries(text, marker, str(path)):
            if name in found:
                raise ValueError(f"{name!r} is declared twice (@{marker}): in {found[name][0]} and in {module}")
            found[name] = (module, obj, arguments)
    return found


def declarations(package: str, marker: str) -> dict[str, str]:
    """``{name: module}`` for every ``@<marker>("<name>")`` in ``package``'s sources (``declaration_entries``)."""
    return {name: module for name, (module, _, _) in declaration_entries(package, marker).items()}


def origin(obj: object) -> str | None:
    """The module an object was defined in (a module: itself)."""
    return obj.__name__ if isinstance(obj, ModuleType) else getattr(obj, "__module__", None)


# --------------------------------------------------------------------------- the registry


class Registry(Generic[T]):
    """Names to objects: declared in ``package`` by ``@<marker>("name")`` (module docstring), or given by hand
    (``entries``: the object or a lazy ``"module:attribute"`` string)."""

    def __init__(self, kind: str, entries: Mapping[str, T | str] | None = None, *, package: str | None = None,
                 marker: str | None = None) -> None:
        if (package is None) != (marker is None):
            raise ValueError("a scanned registry names both its package and its marker")
        self.kind = kind
        self.package, self.marker = package, marker
        self._items: dict[str, T | str] = {}
        self._origins: dict[str, str] = {}  # where each registered object was defined
        self._declared: dict[str, str] | None = None if package else {}
        for name, obj in (entries or {}).items():
            self.add(name, obj)

    def declared(self) -> dict[str, str]:
        """``{name: module}`` of the package's declarations (scanned once, then cached); empty without a package.
        What was registered before the scan is checked against it then (``add``)."""
        if self._declared is None:
            self._declared = declarations(self.package, self.marker)  # type: ignore[arg-type]
            for name, where in self._origins.items():
                self._check_origin(name, where)
        return self._declared

    def _check_origin(self, name: str, where: str) -> None:
        declared = self.declared().get(name)
        if declared is not None and where != declared:
            raise ValueError(f"{self.kind} {name!r} registered twice: declared in {declared}, registered from {where}")

    def register(self, name: str) -> Callable[[T], T]:
        """The decorator a declaration is written with (``@policy("name")``): registers the object, returns it."""
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T | str, module: str | None = None) -> None:
        """Register ``obj`` under ``name``; ``module``: where it is defined (default: ``origin(obj)``), which must
        be the module the scan found declaring ``name``. The same object twice is no error (a module imported
        once more); another object under a taken name is."""
        where = None if isinstance(obj, str) else module or origin(obj)
        if name in self._items:
            if self._items[name] is obj:
                return
            raise ValueError(f"{self.kind} {name!r} registered twice (again from {where})")
        if self.package is not None and where is not None:
            if self._declared is not None:  # else checked when the scan is first read: importing scans nothing
                self._check_origin(name, where)
            self._origins[name] = where
        self._items[name] = obj

    def get(self, name: str) -> T:
        """The object ``name`` stands for, importing only the module that declares it (module docstring)."""
        if name not in self._items and isinstance(name, str) and name in self.declared():
            module = self.declared()[name]
            importlib.import_module(module)
            if name not in self._items:
                raise ValueError(f"{module} declares {self.kind} {name!r} (@{self.marker}) but importing it "
                                 "registered nothing under that name")
        try:
            obj = self._items[name]
        except (KeyError, TypeError):
            raise ConfigError(unknown_name_message(self.kind, name, self.names())) from None
        if isinstance(obj, str):
            obj = import_target(obj)
            self._items[name] = obj
        return obj

    def load_all(self) -> dict[str, T]:
        """Every entry, by name, in the scan's order (then the hand-given ones): imports every declaring module."""
        return {name: self.get(name) for name in [*self.declared(), *(n for n in self._items if n not in
                                                                       self.declared())]}

    def names(self) -> list[str]:
        return sorted({*self._items, *self.declared()})

    def undeclared(self) -> list[str]:
        """Names registered that no source of the package declares (given by hand, or registered at run time)."""
        return sorted(n for n in self._items if n not in self.declared())

    def __contains__(self, name: object) -> bool:
        return name in self._items or (isinstance(name, str) and name in self.declared())
