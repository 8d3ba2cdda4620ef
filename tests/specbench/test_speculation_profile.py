"""Issue 41, item 6: SPEED-Bench's ``speculation_profile.json`` from our rounds, the per-request percentiles, and the
two means of the acceptance length that can rank methods differently (``specbench.speculation_profile``,
``python -m analysis.speculation_profiles``). Hand-computed examples."""

from __future__ import annotations

import json

import pytest

from analysis.speculation_profiles import main
from specbench.speculation_profile import (
    mean_lengths,
    percentile,
    profile,
    rank_disagreements,
    steps_of,
)

FOUR = [(3, 3), (3, 1), (3, 0), (3, 2)]  # one request, K = 3, acceptance lengths 4, 2, 1, 3


def test_marginal_conditional_and_the_al_identity_by_hand():
    p = profile([FOUR])
    assert p["num_speculative_tokens"] == 3 and p["steps"] == 4 and p["requests"] == 1
    assert p["marginal_accept_rates"] == [0.75, 0.5, 0.25]  # a >= 1, 2, 3 of 4 steps
    assert p["conditional_accept_rates"] == [0.75, pytest.approx(2 / 3, abs=1e-6), 0.5]  # 3/4, 2/3, 1/2
    assert p["mean_accept_length"] == 2.5 and p["acceptance_length_histogram"] == {"1": 1, "2": 1, "3": 1, "4": 1}
    check = p["validation"]["mean_consistency"]
    assert check["implied_mean_accept_length"] == 2.5 and check["passed"] and check["abs_delta"] == 0
    assert p["validation"]["marginal_monotonicity"]["passed"]
    assert p["schema_version"] == "1.0" and p["verification_method"] == "longest_prefix"


def test_an_adaptive_gamma_conditions_on_the_steps_that_drafted_the_position():
    # the second step drafted 1 token: position 2 is conditioned on the first step only
    p = profile([[(2, 2), (1, 1)]])
    assert p["marginal_accept_rates"] == [1.0, 0.5]
    assert p["conditional_accept_rates"] == [1.0, 1.0]  # not marginal[1] / marginal[0] = 0.5
    assert p["mean_accept_length"] == 2.5 and p["validation"]["mean_consistency"]["passed"]


def test_k_below_the_longest_draft_is_refused_and_plain_rounds_are_no_steps():
    with pytest.raises(ValueError, match="below the longest draft"):
        profile([FOUR], k=2)
    assert steps_of([2, 0, 3], [1, 0, 3]) == [(2, 1), (3, 3)]
    with pytest.raises(ValueError, match="accepted 3 of 2"):
        steps_of([2], [3])
    assert profile([[]])["measured"] is False


def test_the_two_means_and_their_rank_disagreement():
    a = [[(4, 4)], [(4, 0)] * 9]  # per step (5 + 9) / 10 = 1.4; per request (5 + 1) / 2 = 3
    b = [[(4, 1)] * 5, [(4, 1)] * 5]  # 2 and 2
    assert mean_lengths(a)[:2] == (1.4, 3.0) and mean_lengths(b)[:2] == (2.0, 2.0)
    cells = {"a": mean_lengths(a)[:2], "b": mean_lengths(b)[:2], "c": (2.5, 2.5)}
    assert rank_disagreements(cells) == [("a", "b"), ("a", "c")]
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([1, 2, 3, 4], 10) == pytest.approx(1.3)
    assert profile(a)["acceptance_length_percentiles"]["p50"] == 3.0


def _job(folder, method, requests):
    folder.mkdir(parents=True)
    rows = [{"pair": "p", "task": "t", "method": method, "gamma_init": 4, "category": "c", "prompt_id": str(i),
             "turn": 1, "drafted_trace": [d for d, _ in steps], "accepted_trace": [a for _, a in steps]}
            for i, steps in enumerate(requests)]
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_command_writes_a_profile_per_cell_and_warns_on_opposite_rankings(tmp_path, capsys):
    _job(tmp_path / "r" / "a", "m_a", [[(4, 4)], [(4, 0)] * 9])
    _job(tmp_path / "r" / "b", "m_b", [[(4, 1)] * 5, [(4, 1)] * 5])
    assert main([str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    files = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert files == ["records__p__t__m_a__g4.json", "records__p__t__m_b__g4.json"]
    p = json.loads((tmp_path / "o" / files[0]).read_text())
    assert p["mean_accept_length"] == 1.4 and p["mean_accept_length_per_request"] == 3.0
    assert "warning: p / t / γ 4 (records)" in out and "m_a below m_b" in out
    assert "passed" in out
    assert main([str(tmp_path / "empty_missing")]) == 2
