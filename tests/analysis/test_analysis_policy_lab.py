"""The lab's leaderboard (``analysis.policy_lab``): the same from replay rows as from their cells
(``runners.replay.grid.cells``), the oracles on top, and the analysis CLI writing it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from runners.replay.trace_build import build_trace
from specbench.latency import LatencyModel

from helpers.policy_lab import lab_script


def test_leaderboard_from_cells_equals_leaderboard_from_rows(noisy_pair, tmp_path, root):
    from analysis.leviathan import leviathan_frame
    from analysis.make_artefacts import main as analysis_main
    from analysis.policy_lab import leaderboard, load_replay
    from runners.replay.grid import cells, replay_grid

    _, target, draft, prompts = noisy_pair
    traces = [build_trace(target, draft, ids, 24, [], prompt_id=str(i), pair="tiny", task="t") for i, ids in
              enumerate(prompts)]
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.3), round_overhead_ms=0.2)
    lab = lab_script(root)
    methods = [lab.method_spec(m, None) for m in ("specdecode", "hf_heuristic", "cost_aware")]
    rows = replay_grid(traces, methods, [1, 3, 6], lat)
    (tmp_path / "rows").mkdir()
    (tmp_path / "rows" / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "replay.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells(rows)))
    by_rows, by_cells = leaderboard(load_replay(tmp_path / "rows")), leaderboard(load_replay(tmp_path / "cells"))
    cols = ["method", "x_oracle_mean", "x_best_fixed_mean", "x_best_fixed_prompt_mean", "worst_gamma", "x_oracle_spread"]
    pd_rows = by_rows.data[cols].sort_values("method").reset_index(drop=True)
    pd_cells = by_cells.data[cols].sort_values("method").reset_index(drop=True)
    assert list(pd_rows["method"]) == list(pd_cells["method"])
    assert np.allclose(pd_rows.iloc[:, 1:].astype(float), pd_cells.iloc[:, 1:].astype(float), equal_nan=True)
    board = by_cells.data
    assert list(board["method"][:4]) == ["oracle", "oracle_agreement", "best_fixed_task", "best_fixed_prompt"]
    assert (board["x_oracle_mean"] <= 1 + 1e-9).all()
    spec = board[board["method"] == "specdecode"].iloc[0]
    assert spec["worst_gamma"] in (1, 3, 6) and spec["x_oracle_spread"] > 0
    lev_rows = leviathan_frame(load_replay(tmp_path / "rows"), {"tiny": 5.0})
    lev_cells = leviathan_frame(load_replay(tmp_path / "cells"), {"tiny": 5.0})
    assert np.allclose(lev_rows["alpha"], lev_cells["alpha"]) and (lev_rows["gamma"] == [1, 3, 6]).all()
    assert analysis_main([str(tmp_path / "cells"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "tables" / "policy_leaderboard.md").exists()
    assert (tmp_path / "out" / "figures" / "policy_leaderboard.png").exists()


# --------------------------------------------------------------------------- the comparison rule (issue 50, item 1)

def _rule_rows(prompt_ids=None):
    """8 prompt turns: the best fixed γ in hindsight; 'fast' 20 % faster than it at γ 2 on every turn (γ 4 slower);
    'same' within ±1 % of it, alternating; 'slow' 20 % slower at every γ."""
    rng = np.random.default_rng(0)
    walls = rng.uniform(500.0, 3000.0, 8)
    rows = []

    def add(method, gamma, factor):
        for i, w in enumerate(walls):
            f = factor(i) if callable(factor) else factor
            rows.append({"pair": "p", "task": "t", "max_new_tokens": 64, "method": method, "gamma_init": gamma,
                         "prompt_id": (prompt_ids or f"q{i}"), "turn": 1, "new_tokens": 64, "wall_ms": w * f,
                         "drafted": 10, "accepted": 5, "rounds": 5})

    add("best_fixed_task", 3, 1.0)
    add("fast", 2, 0.8)
    add("fast", 4, 1.3)
    add("same", 2, lambda i: 1.01 if i % 2 else 0.99)
    add("slow", 1, 1.25)
    add("slow", 2, 1.2)
    return pd.DataFrame(rows)


def test_the_comparison_rule_takes_each_policy_at_its_best_initial_gamma_with_an_interval():
    from analysis.policy_lab import leaderboard, policy_comparison

    rule = policy_comparison(_rule_rows()).set_index("method")
    assert rule.loc["fast", "best_gamma_init"] == 2 and rule.loc["fast", "verdict"] == "beats"
    assert rule.loc["fast", "x_best_fixed_at_best"] == pytest.approx(1 / 0.8)
    assert rule.loc["fast", "x_best_fixed_at_best_lo"] > 1.0
    assert rule.loc["fast", "x_best_fixed_mean_over_gamma"] < rule.loc["fast", "x_best_fixed_at_best"]  # γ 4 drags it
    assert rule.loc["same", "verdict"] == "ties" and rule.loc["slow", "verdict"] == "trails"
    assert rule.loc["slow", "best_gamma_init"] == 2 and set(rule["prompts"]) == {8}
    board = leaderboard(_rule_rows())
    assert list(board.data.loc[~board.data["reference"], "method"]) == ["fast", "same", "slow"]
    assert board.display.set_index("method").loc["fast", "verdict"] == "beats"


def test_summed_cell_rows_have_no_interval_and_no_verdict():
    from analysis.policy_lab import policy_comparison

    rule = policy_comparison(_rule_rows(prompt_ids="*")).set_index("method")
    assert rule["verdict"].eq("").all() and rule["prompts"].isna().all()
    assert rule.loc["fast", "x_best_fixed_at_best"] == pytest.approx(1 / 0.8)
