"""Identical work flagged (issue 50, item 3): a method whose rounds equal another's in every record of a pair
is shown as ``≡ <original>``, never ranked, and counted as a natural A/A pair in the noise floor
(``analysis.noise_floor``, "same work")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.frame import complete_only, load_records, rows_to_frame
from analysis.gammatune.table2 import speedup_table
from analysis.gammatune.throughput import throughput_table
from analysis.noise_floor import SAME_WORK_MARK, aa_bands, aa_pairs, noise_floor_table, same_work

N = 12
ROOT = Path(__file__).resolve().parents[2]


def _frame(traces: dict[str, list[list[int]]], factors: dict[str, float] | None = None, seed: int = 0) -> pd.DataFrame:
    """Methods of pair ``p`` at γ 2 and 4 over ``N`` prompt turns; ``traces[method][i]``: turn i's accepted
    trace (drafted two per round), each method's wall its turn's base wall ÷ its factor, with a little noise."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(200.0, 4000.0, N)
    rows = []
    for method, per_turn in traces.items():
        for gamma in (2, 4):
            for i in range(N):
                wall = float(base[i] / (factors or {}).get(method, 1.0) * np.exp(rng.normal(0.0, 0.01)))
                accepted = per_turn[i]
                rows.append({"pair": "p", "target": "tgt", "draft": "d", "method": method, "task": "t",
                             "category": "c", "prompt_id": f"q{i}", "turn": 1, "gamma_init": gamma,
                             "temperature": 0.0, "new_tokens": 10.0, "wall_ms": wall,
                             "tokens_per_s": 10.0 / wall * 1000.0, "ttft_ms": 1.0, "rounds": len(accepted),
                             "drafted_trace": [2] * len(accepted), "accepted_trace": accepted, "discarded_trace": []})
    return rows_to_frame(rows)


def _turns(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(rng.integers(0, 3, 4)) for _ in range(N)]


def test_a_method_that_did_anothers_work_in_every_record_is_a_copy_of_it():
    same = _turns(1)
    one_off = [list(t) for t in same]
    one_off[5] = [t + 1 for t in one_off[5]]  # one record differs: no longer the same work
    df = _frame({"specdecode": same, "assistant_threshold": same, "gammatune": _turns(2),
                 "gammatune_plus": one_off, "specdecode_twin": same})
    assert same_work(df) == {("p", "assistant_threshold"): "specdecode"}  # the first in the papers' order
    kinds = aa_pairs(df).set_index("twin")["kind"].to_dict()
    assert kinds == {"specdecode_twin": "twin", "assistant_threshold": "same work"}


def test_the_tables_show_the_copy_unranked_and_the_noise_floor_counts_it():
    same = _turns(1)
    df = _frame({"specdecode": same, "hf_heuristic": _turns(3), "assistant_threshold": same},
                factors={"hf_heuristic": 1.2, "assistant_threshold": 1.03})
    table = speedup_table(df)
    cell = table.data[(table.data["method"] == "assistant_threshold") & (table.data["pair"] == "p")].iloc[0]
    assert cell["same_work_as"] == "specdecode" and pd.isna(cell["rank"]) and cell["resolved"] is None
    ci = table.display[table.display["Source"] == "95 % CI"]["p"].tolist()
    assert sum(f"{SAME_WORK_MARK} SpecDecode" in c for c in ci) == 1
    assert f"{SAME_WORK_MARK} X" in table.caption
    ranked = table.data[(table.data["pair"] == "p") & (table.data["source"] == "measured")].dropna(subset=["rank"])
    assert sorted(ranked["method"]) == ["hf_heuristic", "specdecode"]  # ranks 1 and 2, with no gap for the copy
    assert sorted(ranked["rank"]) == [1, 2]

    rows = throughput_table(df, modeled=False)
    shown = rows.display.set_index("Method")
    assert "AssistantThreshold (≡ SpecDecode)" in shown.index
    assert not shown.loc["AssistantThreshold (≡ SpecDecode)", "Tok/s 95 % CI"].endswith("≈")

    floor = noise_floor_table(df)
    overall = floor.data[floor.data["scope"] == "mean over γ"].iloc[0]
    assert (overall["twin"], overall["original"], overall["kind"]) == ("assistant_threshold", "specdecode",
                                                                       "same work")
    assert abs(overall["ratio"] - 1.03) < 0.02  # its wall was 3 % shorter: the host's say, by construction here
    assert floor.display["A/A"].iloc[0] == "AssistantThreshold ÷ SpecDecode (same work)"
    assert aa_bands(df)["p"].original == "specdecode"


def test_without_rounds_nothing_is_a_copy():
    df = _frame({"specdecode": _turns(1), "gammatune": _turns(1)}).drop(columns=["drafted_trace"])
    assert same_work(df) == {}


@pytest.mark.parametrize("folder", ["mini_gammatune_table2", "mini_gammatune_table2_b"])
def test_the_committed_runs_prompt_lookup_rows_that_repeat_another(folder):
    """On prompt lookup (no draft probabilities) AssistantThreshold does SpecDecode's rounds and GammaTune+
    GammaTune's, in every record of both committed runs; on the int8 draft none repeats another."""
    df = complete_only(load_records(ROOT / "results" / "committed" / folder))
    assert same_work(df) == {("gemma3-270m_prompt-lookup", "assistant_threshold"): "specdecode",
                             ("gemma3-270m_prompt-lookup", "gammatune_plus"): "gammatune"}


def test_the_noise_floor_says_when_a_sweeps_positions_are_not_balanced():
    """Round balance (issue 50, item 5): 7 balanced rounds (an odd count) leave the last one unmirrored; the noise
    floor's caption and lines say so, and say nothing at 8."""
    from analysis.noise_floor import noise_floor_lines, round_balance

    for rounds, balanced in ((7, False), (8, True)):
        df = _frame({"specdecode": _turns(1), "specdecode_twin": _turns(1)})
        df["interleave"] = [{"round": int(p[1:]) % rounds, "position": 0, "size": 2, "scheme": "balanced"}
                            for p in df["prompt_id"]]
        assert round_balance(df) == {"p": ("balanced", rounds, balanced)}
        floor = noise_floor_table(df)
        assert ("Positions not balanced" in floor.caption) is not balanced
        assert ("positions not balanced (7 rounds)" in noise_floor_lines(floor)[0]) is not balanced
