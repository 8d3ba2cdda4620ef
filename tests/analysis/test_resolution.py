"""The noise floor's resolution: the per-turn σ of an A/A pair's log-ratios, what a cell of n turns
resolves, and how many turns a ±3 % comparison needs (``analysis.noise_floor``, "resolution")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.frame import rows_to_frame
from analysis.noise_floor import (
    RESOLVE_TARGET,
    aa_turn_log_ratios,
    noise_floor_lines,
    noise_floor_table,
    resolution,
)
from analysis.uncertainty import t_quantile


def _rows(sigma: float, n: int, gammas=(2, 4), seed: int = 0) -> list[dict]:
    """SpecDecode and its twin on ``n`` prompt turns at each γ; the twin's wall time is the original's
    times exp(noise), noise ~ N(0, σ) per turn (identical work, a noisy host)."""
    rng = np.random.default_rng(seed)
    rows = []
    for gamma in gammas:
        for i in range(n):
            base = float(rng.uniform(500.0, 3000.0))
            for method, wall in (("specdecode", base), ("specdecode_twin", base * math.exp(rng.normal(0.0, sigma)))):
                rows.append({"pair": "p", "target": "t", "draft": "d", "method": method, "task": "x", "category": "c",
                             "prompt_id": f"q{i}", "turn": 1, "gamma_init": gamma, "temperature": 0.0,
                             "new_tokens": 40.0, "wall_ms": wall, "tokens_per_s": 40.0 / wall * 1000.0, "ttft_ms": 1.0})
    return rows


def test_per_turn_sigma_and_the_turns_a_comparison_needs():
    df = rows_to_frame(_rows(0.10, 200))
    turns = aa_turn_log_ratios(df)
    assert len(turns) == 400 and set(turns["twin"]) == {"specdecode_twin"}
    floor = noise_floor_table(df)
    row = floor.data[floor.data["scope"] == "mean over γ"].iloc[0]
    assert row["turn_sigma"] == pytest.approx(0.10, rel=0.1)
    assert row["turns_per_cell"] == 200
    assert row["cell_resolves"] == pytest.approx(math.expm1(t_quantile(199) * row["turn_sigma"] / math.sqrt(200)))
    assert row["turns_for_target"] == math.ceil((1.96 * row["turn_sigma"] / RESOLVE_TARGET) ** 2)  # a lower bound
    assert 35 <= row["turns_for_target"] <= 55  # (1.96 * 0.1 / 0.03)^2 = 42.7
    assert "turns × repeats" in noise_floor_lines(floor)[0] and "needs at least" in noise_floor_lines(floor)[0]
    assert "turns × repeats for ±3 % (lower bound)" in floor.display.columns
    assert floor.display["a cell resolves"].str.endswith("(200 turns × repeats)").sum() == 1


def test_a_quieter_host_resolves_more_with_the_same_turns():
    quiet = resolution(aa_turn_log_ratios(rows_to_frame(_rows(0.02, 50)))["log_ratio"], 50)
    noisy = resolution(aa_turn_log_ratios(rows_to_frame(_rows(0.15, 50)))["log_ratio"], 50)
    assert quiet[1] < noisy[1] / 4 and quiet[2] < noisy[2]
    assert all(math.isnan(v) for v in resolution(aa_turn_log_ratios(rows_to_frame(_rows(0.1, 1, gammas=(2,))))
                                                 ["log_ratio"], 1))
