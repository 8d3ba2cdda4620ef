"""Value checks: a config value checked where it enters, with a one-line ``ConfigError`` naming its key.

Every typed config node (``specbench.config`` and the node modules it is made of) and every γ policy's
knobs (``methods/``) validate with these, so a bad value reads the same wherever it is caught
(optimum-benchmark's "typed configs at the boundary"; lm-evaluation-harness's "did you mean" for an
unknown key, ``specbench.registry.unknown_name_message``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from numbers import Real
from typing import Any

from specbench.registry import ConfigError, unknown_name_message

#: strings that mean "off" where a setting may be switched off from the command line (``latency=off``)
OFF_WORDS = ("false", "off", "none")


def check_int(key: str, value: Any, lo: int | None = None, optional: bool = False) -> int | None:
    """An integer (not a bool) ``>= lo``; ``None`` allowed when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (lo is not None and value < lo):
        bound = f" >= {lo}" if lo is not None else ""
        null = " or null" if optional else ""
        raise ConfigError(f"{key} must be an integer{bound}{null}, got {value!r}")
    return value


def check_number(key: str, value: Any, lo: float | None = None, hi: float | None = None) -> float:
    """A finite real number in ``[lo, hi]`` (bounds optional)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        lo_s = f">= {lo:g}" if lo is not None else ""
        hi_s = f"<= {hi:g}" if hi is not None else ""
        raise ConfigError(f"{key} must be {' and '.join(s for s in (lo_s, hi_s) if s)}, got {value!r}")
    return float(value)


def check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return value


def check_choice(key: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        shown = ", ".join("null" if c is None else str(c) for c in choices)
        raise ConfigError(f"{key} {value!r} is not one of {shown}")
    return value


def check_str(key: str, value: Any, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value


def only_known(node: Mapping[str, Any] | None, where: str, known: Sequence[str]) -> dict[str, Any]:
    """``node`` as a dict; an unknown key is a ``ConfigError`` naming it and the known ones."""
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {node!r}")
    bad = [k for k in node if k not in known]
    if bad:
        raise ConfigError(f"{where}: " + unknown_name_message("setting", bad[0], known))
    return dict(node)


def field_names(cls: type) -> list[str]:
    """The field names of dataclass ``cls`` (the keys its config node may hold)."""
    return [f.name for f in fields(cls)]
