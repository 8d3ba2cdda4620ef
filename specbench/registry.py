"""Name → object registries with helpful errors (lm-evaluation-harness style), imported lazily.

A registry maps a name (the ``name:`` of a config file, which is also the file's stem) to an
object, or to a ``"module:attribute"`` string that is imported the first time the name is
asked for, so choosing one backend never imports the others (optional heavy dependencies
stay optional). An unknown name fails with ``ConfigError``: "did you mean …? known: …".
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Mapping
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


class Registry(Generic[T]):
    """Names to objects; an entry may be the object or a lazy ``"module:attribute"`` string."""

    def __init__(self, kind: str, entries: Mapping[str, T | str] | None = None) -> None:
        self.kind = kind
        self._items: dict[str, T | str] = {}
        for name, obj in (entries or {}).items():
            self.add(name, obj)

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T | str) -> None:
        if name in self._items:
            raise KeyError(f"{self.kind} {name!r} registered twice")
        self._items[name] = obj

    def get(self, name: str) -> T:
        try:
            obj = self._items[name]
        except (KeyError, TypeError):
            raise ConfigError(unknown_name_message(self.kind, name, self._items)) from None
        if isinstance(obj, str):
            obj = import_target(obj)
            self._items[name] = obj
        return obj

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items
