"""The comparison tables' one pipeline (issue 51, item 6; ``analysis.comparison``): cells in, intervals, ranks under
the column's A/A band, same-work copies and the modeled overlay out; captions short, linking the method written once
in the docs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from analysis.comparison import METHOD_LINK, weigh
from analysis.gammatune.table2 import speedup_table
from analysis.gammatune.throughput import throughput_table
from analysis.hetero import HFBENCH_DEFINITIONS
from analysis.noise_floor import AABand
from analysis.uncertainty import Design, Estimate

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = 12


def _estimate(level: float, sigma: float, seed: int) -> Estimate:
    """A positive estimate with ``CLUSTERS`` jackknife replicates spread by ``sigma`` (log scale)."""
    draws = level * np.exp(np.random.default_rng(seed).normal(0.0, sigma, CLUSTERS))
    return Estimate(level, draws, Design.single(CLUSTERS), log=True)


def _slug(heading: str) -> str:
    """Python-Markdown's toc anchor of a heading (what mkdocs builds): lower case, word characters, spaces and
    hyphens kept, spaces to hyphens."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def test_a_copy_is_shown_never_ranked_and_its_neighbours_rank_without_it():
    cells = {("p", "a"): _estimate(2.0, 0.01, 1), ("p", "b"): _estimate(1.5, 0.01, 2),
             ("p", "c"): _estimate(1.0, 0.01, 3), ("q", "a"): _estimate(1.0, 0.01, 4)}
    weighed = weigh(cells, copies={("p", "b"): "a"})
    assert weighed[("p", "b")].rank is None and weighed[("p", "b")].same_work_as == "a"
    assert weighed[("p", "b")].mark == "" and np.isfinite(weighed[("p", "b")].interval[0])  # shown, with its CI
    assert (weighed[("p", "a")].rank, weighed[("p", "c")].rank) == (1, 2)
    assert weighed[("q", "a")].rank == 1  # each column ranks its own rows


def test_the_columns_band_gates_a_step_its_interval_would_resolve():
    cells = {("p", "fast"): _estimate(1.05, 0.002, 1), ("p", "slow"): _estimate(1.0, 0.002, 2)}
    alone = weigh(cells)
    assert alone[("p", "fast")].resolved and alone[("p", "slow")].resolved
    wide = AABand("twin", Estimate(math.exp(0.2), np.full(CLUSTERS, math.exp(0.2)), Design.single(CLUSTERS), True))
    gated = weigh(cells, gates={"p": wide})
    assert not gated[("p", "fast")].resolved and gated[("p", "fast")].mark.strip() == "≈"
    assert gated[("p", "fast")].gate is wide


def test_rows_left_out_of_the_ranking_keep_their_interval_and_the_modeled_value_is_tested_against_it():
    cells = {("p", "a", "γ"): _estimate(2.0, 0.05, 1), ("p", "a", "mean"): _estimate(2.0, 0.05, 2)}
    lo, hi = cells[("p", "a", "mean")].interval()
    weighed = weigh(cells, modeled={("p", "a", "mean"): hi * 1.5, ("p", "a", "γ"): 2.0},
                    ranked=lambda key: key[2] != "γ")
    assert weighed[("p", "a", "γ")].rank is None and weighed[("p", "a", "mean")].rank == 1
    assert weighed[("p", "a", "mean")].modeled_inside is False and weighed[("p", "a", "γ")].modeled_inside is True


def test_the_captions_links_name_sections_of_the_docs():
    for link in (METHOD_LINK, HFBENCH_DEFINITIONS):
        page, _, anchor = link.partition("#")
        text = (ROOT / page).read_text(encoding="utf-8")
        headings = {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}
        assert anchor in headings, f"{link}: no heading of {page} makes that anchor"


def test_a_comparison_tables_caption_is_short_and_links_the_method(complete):
    """Table 2's caption was a 2,000-character paragraph a reader skipped (issue 51): the method is linked, the
    caption says what is specific to the table."""
    for table in (speedup_table(complete), throughput_table(complete)):
        assert METHOD_LINK in table.caption and len(table.caption) < 1200, (table.name, len(table.caption))
