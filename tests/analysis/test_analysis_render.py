"""Rendering (``analysis.render``): Markdown, LaTeX and CSV from one frame, escaped; figures as PNG and PDF."""

from __future__ import annotations

import pandas as pd

from analysis.gammatune.rounds import plot_trace, trace_frame
from analysis.gammatune.table2 import speedup_table
from analysis.gammatune.throughput import plot_sensitivity, plot_throughput
from analysis.render import save_figure, to_latex, to_markdown, write_table

from helpers.analysis_records import VICUNA


def test_markdown_latex_csv_from_the_same_frame(complete, paper, tmp_path):
    table = speedup_table(complete, paper=paper)
    paths = write_table(table, tmp_path)
    assert [p.name for p in paths] == [f"{table.name}.md", f"{table.name}.tex", f"{table.name}.csv",
                                       f"{table.name}.data.csv"]
    assert all(p.stat().st_size > 0 for p in paths)
    md = paths[0].read_text()
    assert md.startswith("| Method | Source |") and "| GammaTune | measured |" in md and table.caption in md
    tex = paths[1].read_text()
    assert r"\begin{tabular}" in tex and r"vicuna-7b\_vicuna-68m" in tex and r"1.15 $\pm$ 0.11$\times$" in tex
    back = pd.read_csv(paths[2], keep_default_na=False)
    assert back.columns.tolist() == table.display.columns.tolist()
    assert back.astype(str).values.tolist() == table.display.astype(str).values.tolist()
    assert to_markdown(pd.DataFrame({"a": ["x|y"]})).splitlines()[2] == "| x\\|y |"
    assert "50\\%" in to_latex(pd.DataFrame({"a": ["50%"]}))


def test_figures_written_png_and_pdf(complete, tmp_path):
    trace, meta = trace_frame(complete, pair=VICUNA)
    for name, fig in (("throughput", plot_throughput(complete)), ("sensitivity", plot_sensitivity(complete, "mean")),
                      ("trace", plot_trace(trace, meta))):
        png, pdf = save_figure(fig, tmp_path, name)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000
