"""Issue 41 item 6 / issue 49 item 3: specdec_bench's ``speculation_profile.json`` from our records
(``specbench.speculation_profile``, ``python -m analysis.speculation_profiles``).

The golden numbers below were produced by specdec_bench's own code, run outside this repository on the inputs
written beside them (nothing of it is copied here): NVIDIA/Model-Optimizer PR #2247's
``examples/specdec_bench/specdec_bench/speculation_profile.py`` at edf879d3daf7879acdeb2dab9f54a591837da7b0
(``build_profile``) and its ``metrics/acceptance_rate.py`` (``AcceptanceRate``, which writes the profile with
``per_category = out["Category_AL"]``), with ``metrics/specbench.py`` (``SpecBench.process_final``) and
``models/vllm.py`` (``VLLMModel.run``, its ``generate`` replaced by a stream of the token counts below: the
prefill's token, then each round's) from ``main`` at a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73. Each golden case
is a ``SpecBench`` run over questions (category, turns); a turn's *emitted* list is what its rounds added to the
sequence, the EOS flag says the last token was the end id (2).
"""

from __future__ import annotations

import json
from math import prod
from pathlib import Path

import pytest

from analysis.speculation_profiles import main, requests_of
from specbench.speculation_profile import (
    Request,
    accept_length_model,
    drafted_rounds_of,
    engine_steps,
    percentile,
    prefill_token,
    profile,
    rank_disagreements,
    record_steps,
    speculation_method,
)

COMMITTED = Path(__file__).resolve().parents[2] / "results" / "committed" / "mini_gammatune_table2"


def _turn(prompt_id, turn, category, drafted, accepted, new_tokens, stop="max_new_tokens", **extra):
    return {"prompt_id": prompt_id, "turn": turn, "category": category, "drafted_trace": drafted,
            "accepted_trace": accepted, "new_tokens": new_tokens, "stop_reason": stop,
            "kernels": {"fused_prefill": False}, **extra}


# their input: coding [[1,5,3,1], [2,5]] (two turns), qa [[1,1,4,2]], qa [[5,5,5]]; K = 4, method "ngram"
PLAIN_ROUNDS = [
    _turn("p1", 1, "coding", [0, 4, 4, 2], [0, 4, 2, 0], 11),  # a round that drafted nothing emits 1 token
    _turn("p1", 2, "coding", [4, 4], [1, 4], 8),
    _turn("p2", 1, "qa", [0, 3, 4, 4], [0, 0, 3, 1], 9),
    _turn("p3", 1, "qa", [4, 4, 4], [4, 4, 4], 16),
]
# their input: a [[4,2] EOS], a [[3,1] EOS], b [[4,4,1]]; K = 3, method "draft_model"
EOS = [
    _turn("q1", 1, "a", [3, 3], [3, 3], 7, "eos"),  # EOS accepted as the 2nd draft of round 2: it emits 2, not 4
    _turn("q2", 1, "a", [3, 3], [2, 0], 5, "eos"),  # the target's own token is the EOS: that step is dropped
    _turn("q3", 1, "b", [3, 3, 3], [3, 3, 0], 10),
]
# their input: x [[5,5,1,1]]; K = 4, method "EAGLE3": no step of length 2 or 3 (a gap in the histogram)
GAP = [_turn("r1", 1, "x", [4, 4, 4, 0], [4, 4, 0, 0], 13)]


@pytest.mark.parametrize(("rows", "method", "golden"), [
    (PLAIN_ROUNDS, "ngram", {
        "conditional_accept_rates": [0.529412, 0.777778, 0.857143, 0.833333],
        "marginal_accept_rates": [0.529412, 0.411765, 0.352941, 0.294118],
        "mean_accept_length": 2.588235, "mean_accept_length_per_request": 2.725,
        "acceptance_length_histogram": {"1": 8, "2": 2, "3": 1, "4": 1, "5": 5},
        "per_category": {"coding": 2.375, "qa": 2.9}, "accept_length_model": "measured_per_k",
        "num_speculative_tokens": 4, "accept_length_by_k": {"4": 2.588235}}),
    (EOS, "draft_model", {
        "conditional_accept_rates": [0.444444, 1.0, 0.75],
        "marginal_accept_rates": [0.444444, 0.444444, 0.333333],
        "mean_accept_length": 2.222222, "mean_accept_length_per_request": 2.166667,
        "acceptance_length_histogram": {"1": 5, "3": 1, "4": 3},
        "per_category": {"a": 2, "b": 2.5}, "accept_length_model": "chain_analytic",
        "num_speculative_tokens": 3, "accept_length_by_k": {"3": 2.222222}}),
    (GAP, "EAGLE3", {
        "conditional_accept_rates": [0.4, 1.0, 1.0, 1.0], "marginal_accept_rates": [0.4, 0.4, 0.4, 0.4],
        "mean_accept_length": 2.6, "mean_accept_length_per_request": 2.6,
        "acceptance_length_histogram": {"1": 3, "5": 2}, "per_category": {"x": 2.6},
        "accept_length_model": "chain_analytic", "num_speculative_tokens": 4, "accept_length_by_k": {"4": 2.6}}),
], ids=["plain_rounds_and_turns", "eos", "histogram_gap"])
def test_the_profile_is_what_specdec_bench_computes(rows, method, golden):
    p = profile(requests_of(rows), method=method)
    for key, value in golden.items():
        assert p[key] == (pytest.approx(value, abs=1e-6) if key == "per_category" else value), key
    assert p["validation"]["mean_consistency"]["passed"] and p["validation"]["marginal_monotonicity"]["passed"]


def test_steps_count_the_prefill_and_plain_rounds_and_strip_the_final_eos():
    # prefill 1, a plain round 1, rounds accepting 4 and 2: 1 + 1 + 5 + 3 = 10 tokens
    assert engine_steps([0, 4, 2], 10, "max_new_tokens") == [1, 1, 5, 3]
    assert engine_steps([0, 4, 2], 9, "eos") == [1, 1, 5, 1]  # EOS accepted 2nd in round 3: cut to 2, stripped
    assert engine_steps([0, 4, 0], 8, "eos") == [1, 1, 5]  # the target's EOS alone: the step is dropped
    assert engine_steps([], 1, "eos") == []  # the prefill's token was the EOS
    assert engine_steps([0, 4, 2], 9, "max_new_tokens", prefill=False) == [1, 5, 3]  # a fused first round
    with pytest.raises(ValueError, match="do not fit"):
        engine_steps([0, 4, 2], 9, "max_new_tokens")  # fewer tokens than the rounds emit, without an EOS
    with pytest.raises(ValueError, match="do not fit"):
        engine_steps([0, 4, 2], 11, "max_new_tokens")
    with pytest.raises(ValueError, match="without a round"):
        engine_steps([], 2, "max_new_tokens")
    # ours leaves the prefill and the plain round out
    assert drafted_rounds_of([0, 4, 3], [0, 4, 2]) == [(4, 4), (3, 2)]
    with pytest.raises(ValueError, match="accepted 3 of 2"):
        drafted_rounds_of([2], [3])


def test_the_prefill_token_is_read_from_the_record():
    row = {"accepted_trace": [0, 4], "new_tokens": 7, "stop_reason": "max_new_tokens"}
    assert prefill_token({**row, "kernels": {"fused_prefill": False}})
    assert not prefill_token({**row, "new_tokens": 6, "kernels": {"fused_prefill": True}})
    assert record_steps({**row, "new_tokens": 6, "kernels": {"fused_prefill": True}}) == [1, 5]
    assert prefill_token({**row, "source": "replay"})
    assert prefill_token({**row, "kernels": None}) and not prefill_token({**row, "new_tokens": 6, "kernels": None})
    with pytest.raises(ValueError, match="cannot tell"):  # 6 tokens ending on an EOS: no prefill, or a cut
        prefill_token({**row, "new_tokens": 6, "stop_reason": "eos", "kernels": None})


def test_method_is_the_speculation_algorithm_and_their_rule_sets_the_accept_length_model():
    assert speculation_method("model") == "draft_model" and speculation_method("prompt_lookup") == "ngram"
    assert speculation_method("hybrid") == "hybrid_ngram_draft_model"
    assert speculation_method("model", "slem") == "cross_vocabulary_slem" and speculation_method(None) is None
    assert [accept_length_model(m) for m in ("draft_model", "EAGLE3", "ngram", "hybrid_ngram_draft_model",
                                              "cross_vocabulary_slem", None)] == [
        "chain_analytic", "chain_analytic", "measured_per_k", "measured_per_k", "measured_per_k", "measured_per_k"]


def test_ours_per_drafted_round_stands_beside_theirs():
    p = profile(requests_of(PLAIN_ROUNDS), method="ngram")
    # drafted rounds: (4,4) (4,2) (2,0) | (4,1) (4,4) | (3,0) (4,3) (4,1) | (4,4) ×3 → 11 rounds, Σ (a + 1) = 38
    assert p["drafted_rounds"] == 11 and p["drafted_round_mean_accept_length"] == pytest.approx(38 / 11, abs=1e-6)
    assert p["steps"] == 17 and p["requests"] == 3  # one request per question, its turns pooled
    # per request, ours: p1 (5+3+1+2+5)/5, p2 (1+4+2)/3, p3 5
    assert p["drafted_round_mean_accept_length_per_request"] == pytest.approx((16 / 5 + 7 / 3 + 5) / 3, abs=1e-6)
    assert p["acceptance_length_percentiles"]["p50"] == pytest.approx(19 / 8)  # requests: 9/5, 19/8, 4


def test_the_two_means_and_their_rank_disagreement():
    a = [Request([5]), Request([1] * 9)]  # per step (5 + 9) / 10 = 1.4; per request (5 + 1) / 2 = 3
    b = [Request([2] * 5), Request([2] * 5)]
    pa, pb = profile(a), profile(b)
    assert (pa["mean_accept_length"], pa["mean_accept_length_per_request"]) == (1.4, 3.0)
    cells = {"a": (1.4, 3.0), "b": (pb["mean_accept_length"], pb["mean_accept_length_per_request"]), "c": (2.5, 2.5)}
    assert rank_disagreements(cells) == [("a", "b"), ("a", "c")]
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([1, 2, 3, 4], 10) == pytest.approx(1.3)
    with pytest.raises(ValueError, match="below the longest draft"):
        profile([Request([2], [(3, 1)])], k=2)
    assert profile([Request()])["measured"] is False


def _job(folder, method, kind, rows, gamma_policy="fixed"):
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("".join(json.dumps({"pair": "p", "task": "t", "method": method,
                                                              "gamma_init": 4, **r}) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"config": {"pair": {"draft": {"kind": kind}},
                                                                "method": {"policy": gamma_policy}}}))


def test_an_adaptive_policy_s_profile_is_measured_per_k(tmp_path):
    # a draft model (chain drafting) under GammaTune: the deep rates say where it stopped drafting, not rejections
    assert accept_length_model("draft_model", adaptive=True) == "measured_per_k"
    rows = [_turn("1", 1, "c", [8, 2], [2, 1], 6)]
    _job(tmp_path / "r" / "fixed", "specdecode", "model", rows)
    _job(tmp_path / "r" / "tuned", "gammatune", "model", rows, gamma_policy="gammatune")
    assert main([str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 0
    fixed, tuned = (json.loads((tmp_path / "o" / f"records__p__t__{m}__g4.json").read_text())
                    for m in ("specdecode", "gammatune"))
    assert fixed["accept_length_model"] == "chain_analytic" and fixed["measurement_conditions"]["gamma_policy"] == "fixed"
    assert tuned["method"] == "draft_model" and tuned["accept_length_model"] == "measured_per_k"
    assert tuned["measurement_conditions"]["gamma_policy"] == "gammatune"


def test_the_command_writes_a_profile_per_cell_and_warns_on_opposite_rankings(tmp_path, capsys):
    # a: steps [1, 5] and [1] × 10: per step 16 / 12 ≈ 1.33, per request (3 + 1) / 2 = 2; b: [1, 2, 2, 2]: 1.75
    _job(tmp_path / "r" / "a", "m_a", "prompt_lookup",
         [_turn("1", 1, "c", [4], [4], 6), _turn("2", 1, "c", [4] * 9, [0] * 9, 10)])
    _job(tmp_path / "r" / "b", "m_b", "model", [_turn("1", 1, "c", [4, 4, 4], [1, 1, 1], 7)])
    assert main([str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    files = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert files == ["records__p__t__m_a__g4.json", "records__p__t__m_b__g4.json"]
    pa = json.loads((tmp_path / "o" / files[0]).read_text())
    assert pa["method"] == "ngram" and pa["accept_length_model"] == "measured_per_k"
    assert pa["measurement_conditions"]["policy"] == "m_a"
    assert pa["mean_accept_length"] == pytest.approx(16 / 12, abs=1e-6) and pa["mean_accept_length_per_request"] == 2.0
    pb = json.loads((tmp_path / "o" / files[1]).read_text())
    assert pb["method"] == "draft_model" and pb["accept_length_model"] == "chain_analytic"
    assert pb["mean_accept_length"] == 1.75 and pb["drafted_round_mean_accept_length"] == 2.0
    assert "warning: p / t / γ 4 (records)" in out and "m_a below m_b" in out and "passed" in out
    assert main([str(tmp_path / "empty_missing")]) == 2


@pytest.mark.skipif(not COMMITTED.exists(), reason="no committed results")
def test_every_committed_profile_is_theirs_joint_the_product_of_conditionals():
    files = sorted((COMMITTED / "analysis" / "speculation_profiles").glob("*.json"))
    assert len(files) == 72
    for f in files:
        p = json.loads(f.read_text())
        cond, marg = p["conditional_accept_rates"], p["marginal_accept_rates"]
        for i in range(len(marg)):
            assert prod(cond[: i + 1]) == pytest.approx(marg[i], abs=1e-5), (f.name, i)
        assert p["validation"]["mean_consistency"]["passed"], f.name
        adaptive = p["measurement_conditions"]["gamma_policy"] != "fixed"
        assert p["method"] in ("draft_model", "ngram") and p["accept_length_model"] == accept_length_model(
            p["method"], adaptive), f.name
        assert p["drafted_round_mean_accept_length"] >= p["mean_accept_length"]  # theirs adds the 1-token steps
    lookup = json.loads((COMMITTED / "analysis/speculation_profiles/"
                         "records__gemma3-270m_prompt-lookup__specbench__specdecode__g8.json").read_text())
    int8 = json.loads((COMMITTED / "analysis/speculation_profiles/"
                       "records__gemma3-270m_gemma3-270m-int8__specbench__gammatune__g8.json").read_text())
    assert (lookup["mean_accept_length"], lookup["drafted_round_mean_accept_length"]) == (2.857143, 3.849315)  # the 8-turn run of 2026-11-27 23:00 UTC
    assert (int8["mean_accept_length"], int8["drafted_round_mean_accept_length"]) == (3.950617, 4.366197)
    assert int8["accept_length_model"] == "measured_per_k"  # GammaTune: its rates end where it stopped drafting
