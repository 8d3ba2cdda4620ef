"""Leviathan et al.'s prediction beside the lab's leaderboard (``analysis.leviathan``): the records' one
definition with c = T_target / T_draft (GammaTune eq. 1), from the latency files' costs."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest


def test_one_leviathan_prediction_with_the_gammatune_c(tmp_path):
    """The leaderboard's prediction is records' one definition with c = T_target / T_draft (GammaTune eq. 1)."""
    from analysis.leviathan import leviathan_frame, load_cost_ratios
    from specbench.records import leviathan_speedup

    assert leviathan_speedup(0.8, 4, 10.0) == pytest.approx((1 - 0.8**5) / 0.2 / 1.4)  # the primer's 3.36 / 1.4
    assert leviathan_speedup(1.0, 3, math.inf) == 4.0  # a drafter that costs nothing: tokens per round
    lat = tmp_path / "latency"
    lat.mkdir()
    model = {"latency_version": 1, "meta": {"pair": "p"},
             "target": {"step_ms": {"1": 50.0}}, "draft": {"step_ms": {"1": 5.0}}}
    (lat / "p.json").write_text(json.dumps(model))
    (lat / "lookup.json").write_text(json.dumps({**model, "meta": {"pair": "lookup"}, "draft": {"step_ms": {"1": 0.0}}}))
    costs = load_cost_ratios(tmp_path)
    assert costs == {"p": 10.0, "lookup": math.inf}
    df = pd.DataFrame([{"pair": pair, "task": "t", "method": "specdecode", "gamma_init": 4, "wall_ms": 10.0,
                        "ar_wall_ms": 20.0, "accepted": 7, "drafted": 12, "drafted_trace": [4, 4, 4, 2],
                        "accepted_trace": [4, 1, 2, 2]} for pair in ("p", "lookup")])
    frame = leviathan_frame(df, costs).set_index("pair")
    alpha = 7 / (7 + 2)  # full rounds only: 7 accepted, 2 rounds ending in a rejection
    assert frame.loc["p", "alpha"] == pytest.approx(alpha)
    assert frame.loc["p", "leviathan_speedup"] == pytest.approx((1 - alpha**5) / (1 - alpha) / (4 / 10 + 1))
    assert frame.loc["lookup", "leviathan_speedup"] == pytest.approx((1 - alpha**5) / (1 - alpha))
