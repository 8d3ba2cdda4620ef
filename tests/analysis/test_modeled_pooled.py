"""The paired modeled check (measured ÷ modeled, ``analysis.modeled``): identical-work rows left out of its count,
and the check pooled across re-runs, where a bias every run shares shows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.modeled import main, paired_agreement, pooled_paired, sign_test


def _run(ratios: dict[tuple[str, str], float], copies: dict[tuple[str, str], str] | None = None) -> pd.DataFrame:
    """A Table 2 ``data`` frame: one measured row per (pair, method), its paired interval ±1 % around the ratio."""
    copies = copies or {}
    rows = [{"pair": p, "method": m, "source": "measured", "measured_over_modeled": r,
             "measured_over_modeled_lo": r - 0.01, "measured_over_modeled_hi": r + 0.01,
             "same_work_as": copies.get((p, m))} for (p, m), r in ratios.items()]
    rows.append({"pair": "p", "method": "specdecode", "source": "measured", "measured_over_modeled": 1.0,
                 "measured_over_modeled_lo": 1.0, "measured_over_modeled_hi": 1.0, "same_work_as": None})
    return pd.DataFrame(rows)


def test_an_identical_work_row_is_no_test_of_the_costs():
    intervals = [(1.001, 1.014), (0.98, 1.01), (1.0, 1.0)]
    assert paired_agreement(intervals) == "measured ÷ modeled excludes 1 in 1 of 2 cells"
    assert paired_agreement(intervals, [True, False, False]) == (
        "measured ÷ modeled excludes 1 in 0 of 1 cells (1 of identical work left out)")


def test_a_bias_every_run_shares_shows_only_pooled():
    # each run: three cells 0.6 % low, each interval containing 1, and an identical-work row 2 % high
    runs = {r: _run({("p", "a"): 0.994 - 0.001 * i, ("p", "b"): 0.995, ("p", "c"): 0.993 + 0.0005 * i,
                     ("p", "twin"): 1.02}, {("p", "twin"): "specdecode"}) for i, r in enumerate("ABCD")}
    for data in runs.values():  # no single run's count sees it
        assert paired_agreement(list(zip(data["measured_over_modeled_lo"], data["measured_over_modeled_hi"])),
                                list(data["same_work_as"].notna())).startswith("measured ÷ modeled excludes 1 in 0")
    row = pooled_paired(runs).set_index("pair").loc["p"]
    assert (row["runs"], row["cells"], row["below_one"]) == (4, 12, 12)  # the twin and the baseline left out
    assert row["mean_pct"] == pytest.approx(-0.6, abs=0.05) and row["run_hi_pct"] < 0
    assert row["sign_p"] == pytest.approx(2 / 2 ** 12)


def test_the_sign_test_is_exact():
    assert sign_test(15, 16) == pytest.approx(2 * 17 / 2 ** 16)
    assert sign_test(4, 8) == 1.0 and sign_test(0, 1) == 1.0 and math.isnan(sign_test(0, 0))


def test_the_command_pools_run_folders(tmp_path, capsys):
    for i, run in enumerate("AB"):
        (tmp_path / run / "analysis" / "tables").mkdir(parents=True)
        _run({("p", "a"): 0.99 + 0.001 * i}).to_csv(
            tmp_path / run / "analysis" / "tables" / "gammatune_table2_speedup.data.csv", index=False)
    assert main([str(tmp_path / "A"), str(tmp_path / "B")]) == 0
    assert "p: measured ÷ modeled below 1 in 2 of 2 cells of 2 runs" in capsys.readouterr().out
    assert main([str(tmp_path / "missing")]) == 2


@pytest.mark.slow
def test_table2_s_paired_count_leaves_the_identical_work_rows_out(tmp_path):
    # run A: its one paired miss is AssistantThreshold ≡ SpecDecode on prompt lookup, an identical-work row
    from pathlib import Path

    from analysis.make_artefacts import main as analysis_main

    folder = Path(__file__).resolve().parents[2] / "results" / "committed" / "mini_gammatune_table2"
    if not folder.is_dir():
        pytest.skip("no committed results")
    assert analysis_main([str(folder), "--out", str(tmp_path), "--tables-only"]) == 0
    caption = (tmp_path / "tables" / "gammatune_table2_speedup.md").read_text()
    assert "measured ÷ modeled excludes 1 in 0 of 6 cells (2 of identical work left out)" in caption
