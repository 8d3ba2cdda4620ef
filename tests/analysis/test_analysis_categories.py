"""The speedup per Spec-Bench category (``analysis.categories``), by hand on the synthetic results folder: over
the target alone, or over SpecDecode averaged over γ where the target alone did not run."""

from __future__ import annotations

import pytest

from analysis.categories import category_table

from helpers.analysis_records import VICUNA


def test_category_table_by_hand(complete):
    table = category_table(complete)
    data = table.data
    pick = lambda m, c: data[(data["pair"] == VICUNA) & (data["method"] == m) & (data["category"] == c)].iloc[0]  # noqa: E731
    # baseline AR: writing (p1) 10 tok/s, coding (p2) 15 tok/s, all 13.333
    assert pick("gammatune", "writing")["speedup"] == pytest.approx(2.25)  # (25/10 + 20/10) / 2
    assert pick("gammatune", "coding")["speedup"] == pytest.approx(1.944444, abs=1e-6)  # (25/15 + 33.333/15) / 2
    assert pick("gammatune", "All")["speedup"] == pytest.approx(2.008929, abs=1e-6)  # (25 + 28.571) / 2 / 13.333
    assert pick("specdecode", "writing")["speedup"] == pytest.approx(1.5)  # (20/10 + 10/10) / 2
    assert set(data["baseline"]) == {"ar"}
    # without AR runs the baseline is SpecDecode averaged over γ: writing B = (20 + 10) / 2 = 15
    no_ar = category_table(complete[complete["method"] != "ar"]).data
    row = no_ar[(no_ar["pair"] == VICUNA) & (no_ar["method"] == "gammatune") & (no_ar["category"] == "writing")]
    assert row["speedup"].iloc[0] == pytest.approx(1.5) and set(no_ar["baseline"]) == {"specdecode"}
