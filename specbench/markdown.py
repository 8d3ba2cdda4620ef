"""Markdown tables: one writer for every table the project prints or saves as ``.md`` — the analysis'
(``analysis.render``) and the simulator's (``python -m runners.replay lab compare``), which may not import
``analysis`` (pyproject's import-linter contracts)."""

from __future__ import annotations

from typing import Any


def cell_text(value: object) -> str:
    """A cell as the tables show it: empty for None and NaN, ``%g`` for other floats."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if value != value else f"{value:g}"
    return str(value)


def to_markdown(display: Any, caption: str = "") -> str:
    """A GitHub-flavoured Markdown table of a pandas frame (with the caption as a paragraph after it)."""
    header = [str(c) for c in display.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in display.itertuples(index=False):
        lines.append("| " + " | ".join(cell_text(v).replace("|", "\\|") for v in row) + " |")
    text = "\n".join(lines) + "\n"
    return text + (f"\n{caption}\n" if caption else "")
