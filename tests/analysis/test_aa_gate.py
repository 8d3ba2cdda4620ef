"""The A/A twin as a gate (issue 40, item 4): a difference inside the twin's band is never marked
resolved, and a twin whose interval excludes 1 is flagged in the noise floor, in the comparison tables
and in the terminal's lines (``analysis.noise_floor``, "A/A gate"; ``analysis.uncertainty``, "resolved")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.frame import rows_to_frame
from analysis.gammatune.table2 import AA_ROW, speedup_table
from analysis.gammatune.throughput import throughput_table
from analysis.noise_floor import AA_FLAG, aa_bands, noise_floor_lines, noise_floor_table
from analysis.uncertainty import UNRESOLVED_MARK

N = 20
GAMMAS = (2, 4)


def _frame(factors: dict[str, np.ndarray], seed: int = 0) -> pd.DataFrame:
    """Methods at γ 2 and 4 over ``N`` prompt turns of 100 tokens: wall = the turn's base wall ÷ the
    method's factor for that turn (the prompts 20× apart, as in ``test_analysis_uncertainty``)."""
    base = np.random.default_rng(seed).uniform(200.0, 4000.0, N)
    rows = [{"pair": "p", "target": "tgt", "draft": "d", "method": method, "task": "t", "category": "c",
             "prompt_id": f"q{i}", "turn": 1, "gamma_init": gamma, "temperature": 0.0, "new_tokens": 100.0,
             "wall_ms": float(base[i] / factor[i]), "tokens_per_s": 100.0 / float(base[i] / factor[i]) * 1000.0,
             "ttft_ms": 1.0}
            for method, factor in factors.items() for gamma in GAMMAS for i in range(N)]
    return rows_to_frame(rows)


def _noise(sigma: float, seed: int) -> np.ndarray:
    return np.exp(np.random.default_rng(seed).normal(0.0, sigma, N))


def _gammatune(table) -> pd.Series:
    data = table.data
    return data[(data["method"] == "gammatune") & (data["pair"] == "p") & (data["source"] == "measured")].iloc[0]


def test_a_difference_inside_the_twins_band_is_not_resolved():
    """GammaTune 5 % faster than SpecDecode with little noise: its CI excludes 1 and it is resolved, until
    a twin as noisy as the host here (σ = 0.15 per turn) runs beside them: its band is wider than the lower
    bound of GammaTune's ratio, so the step is no longer resolved."""
    methods = {"specdecode": np.ones(N), "gammatune": 1.05 * _noise(0.02, 1)}
    alone = speedup_table(_frame(methods))
    assert _gammatune(alone)["resolved"] and _gammatune(alone)["ci_lo"] > 1.0
    assert AA_ROW not in set(alone.display["Source"]) and "A/A band" not in alone.caption

    gated = speedup_table(_frame({**methods, "specdecode_twin": _noise(0.15, 2)}))
    cell = _gammatune(gated)
    band = aa_bands(_frame({**methods, "specdecode_twin": _noise(0.15, 2)}))["p"].band
    assert 0.0 < math.log(cell["ci_lo"]) < band  # the CI excludes 1 but reaches into the band
    assert not cell["resolved"] and cell["aa_band"] == band
    ci = gated.display[(gated.display["Source"] == "95 % CI")]["p"]
    assert ci.str.endswith(UNRESOLVED_MARK).all()
    shown = gated.display[gated.display["Source"] == AA_ROW].iloc[0]
    assert shown["p"] == f"±{100 * math.expm1(band):.1f} %" and AA_FLAG not in shown["p"]
    assert f"A/A band (noise_floor): p ±{100 * math.expm1(band):.1f} %" in gated.caption

    means = throughput_table(_frame({**methods, "specdecode_twin": _noise(0.15, 2)})).data
    means = means[means["scope"] == "mean over γ"].set_index("method")
    assert not means.loc["gammatune", "tokens_per_s_resolved"] and means.loc["gammatune", "aa_band"] == band


def test_a_twin_whose_interval_excludes_one_is_flagged():
    """A twin 8 % faster than its original on every turn (a host that sped up between them): its CI
    excludes 1, flagged in the noise floor, Table 2's A/A band row and caption and the terminal; its band
    (log 1.08) gates a 5 % difference."""
    df = _frame({"specdecode": np.ones(N), "gammatune": 1.05 * _noise(0.02, 1), "specdecode_twin": np.full(N, 1.08)})
    floor = noise_floor_table(df)
    overall = floor.data[floor.data["scope"] == "mean over γ"].iloc[0]
    assert overall["excludes_one"] and abs(overall["band"] - math.log(1.08)) < 1e-9
    assert floor.display["95 % CI"].str.endswith(AA_FLAG).all()
    line = noise_floor_lines(floor)[0]
    assert "EXCLUDES 1" in line and "A/A band ±8.0 %" in line

    table = speedup_table(df)
    assert not _gammatune(table)["resolved"] and _gammatune(table)["aa_excludes_one"]
    assert table.display[table.display["Source"] == AA_ROW]["p"].iloc[0] == f"±8.0 %{AA_FLAG}"
    assert "the twin's interval excludes 1" in table.caption and f"p ±8.0 %{AA_FLAG}" in table.caption

    quiet = noise_floor_table(_frame({"specdecode": np.ones(N), "specdecode_twin": _noise(0.05, 3)}))
    assert not quiet.data["excludes_one"].any() and "EXCLUDES" not in noise_floor_lines(quiet)[0]
