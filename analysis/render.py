"""Tables out: Markdown, LaTeX and CSV from the same frame; figures out as PNG and PDF.

A ``Table`` holds ``display`` (the frame the reader sees: formatted cells, one
per paper cell) and ``data`` (the same numbers, tidy and unformatted). The
``.md``, ``.tex`` and ``.csv`` files are all written from ``display``; ``data``
goes to ``<name>.data.csv`` for anyone who wants to compute further.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd
from matplotlib.figure import Figure

from specbench.markdown import cell_text, to_markdown


@dataclass
class Table:
    name: str
    caption: str
    display: pd.DataFrame
    data: pd.DataFrame


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_SYMBOLS = {"±": r"$\pm$", "×": r"$\times$", "γ": r"$\gamma$", "—": "---", "→": r"$\rightarrow$",
                  "≈": r"$\approx$", "÷": r"$\div$", "Δ": r"$\Delta$", "≠": r"$\neq$"}


def latex_escape(text: str) -> str:
    out = "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)
    for symbol, macro in _LATEX_SYMBOLS.items():
        out = out.replace(symbol, macro)
    return out


def to_latex(display: pd.DataFrame, caption: str = "", label: str = "") -> str:
    """A ``table`` environment with a booktabs ``tabular`` (needs ``\\usepackage{booktabs}``)."""
    cols = "l" * len(display.columns)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\begin{{tabular}}{{{cols}}}", r"\toprule"]
    lines.append(" & ".join(latex_escape(str(c)) for c in display.columns) + r" \\")
    lines.append(r"\midrule")
    for row in display.itertuples(index=False):
        lines.append(" & ".join(latex_escape(cell_text(v)) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(rf"\caption{{{latex_escape(caption)}}}")
    if label:
        lines.append(rf"\label{{tab:{label}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def write_table(table: Table, out_dir: str | Path) -> list[Path]:
    """``<name>.md``, ``<name>.tex``, ``<name>.csv`` (from ``display``) and ``<name>.data.csv``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{table.name}.{ext}" for ext in ("md", "tex", "csv")] + [out / f"{table.name}.data.csv"]
    paths[0].write_text(to_markdown(table.display, table.caption), encoding="utf-8")
    paths[1].write_text(to_latex(table.display, table.caption, table.name), encoding="utf-8")
    table.display.to_csv(paths[2], index=False)
    table.data.to_csv(paths[3], index=False)
    return paths


def save_figure(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """``<name>.png`` (150 dpi) and ``<name>.pdf`` (figures are built without pyplot,
    so nothing global is left open)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths
