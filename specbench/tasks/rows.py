"""Rows into prompts: what the dataset modules share -- a ``task.template`` filled from a row's fields
(``render``, ``templated``), a reference answer as text (``reference``), and the fields a row must hold
(``require_fields``); every error names the task and the row.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specbench.registry import ConfigError
from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig


def render(template: str, row: Mapping[str, Any], cfg: TaskConfig) -> str:
    """``template`` (``str.format`` fields) filled from ``row``; a field the rows lack is a ``ConfigError``."""
    try:
        names = {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(template) if f}
    except ValueError as exc:
        raise ConfigError(f"task {cfg.name!r}: bad task.template {template!r}: {exc}") from None
    missing = sorted(n for n in names if n not in row)
    if missing:
        raise ConfigError(
            f"task {cfg.name!r}: task.template uses {{{missing[0]}}} but the rows have the fields "
            f"{sorted(row)} (write a literal brace as {{{{ or }}}})"
        )
    return template.format_map(row)


def reference(value: Any) -> str | None:
    """A row's reference answer as text: None when empty, JSON when not a string."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)  # e.g. Spec-Bench's per-turn reference lists


def templated(
    cfg: TaskConfig,
    rows: Iterable[Mapping[str, Any]],
    template: str,
    id_field: str,
    reference_field: str | None,
    category: str,
) -> list[Prompt]:
    """One single-turn prompt per row: ``template`` rendered, id ``row[id_field]`` (else the row number)."""
    out: list[Prompt] = []
    for i, row in enumerate(rows):
        pid = str(row[id_field]) if row.get(id_field) is not None else str(i)
        ref = reference(row.get(reference_field)) if reference_field else None
        out.append(Prompt(pid, category, (render(template, row, cfg),), ref))
    return out


def require_fields(rows: Sequence[Mapping[str, Any]], fields: Sequence[str], cfg: TaskConfig) -> None:
    """Refuse the first row lacking one of ``fields``, naming it and the fields it has."""
    for i, row in enumerate(rows):
        missing = [f for f in fields if f not in row]
        if missing:
            raise ConfigError(
                f"task {cfg.name!r}: row {i} has no field {missing[0]!r} (it has {sorted(row)})"
            )
