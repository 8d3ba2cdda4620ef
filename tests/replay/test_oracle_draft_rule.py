"""Issue 41: the exact oracle under a draft billed once per round (``draft_rule`` ``per_round`` / ``share``).

A round drafting ``d >= 1`` tokens costs one draft charge (EAGLE: one proposal call of ``d + 1`` spec tokens,
SpecDecode-Bench ``predictor.py: predict_draft_time``; n-gram: a share of the round's verification, 0 when the
step verifies one token, ``simulator.py: simulate_sd_batch``), the verification of ``d + 1`` tokens and the
overhead; a round drafting nothing is a plain target step. The expected minima below are computed by hand.
"""

from __future__ import annotations

import json

import pytest

from methods.policies import build_policy
from runners.replay.batched import oracle_batches
from runners.replay.import_specdecode_bench import Request, import_traces, to_trace
from runners.replay.oracle import agreement_oracle, oracle, oracle_schedule
from runners.replay.replay import replay
from runners.replay.specdecode_bench import latency_model
from specbench.latency import ForwardCost, LatencyModel

# N = 5 tokens, prompt 4; a_t = acc_len[t - 1] - 1 = 1, 0, 1, (t = 4 = N - 1: budget 0); proposals of
# min(3, N - 1 - t) tokens: 3, 2, 1, 0
TINY = Request("tiny", 4, (2, 1, 2, 1, 1), (10, 11, 12, 13, 14))


def tiny_model(rule: str, share: float = 0.0) -> LatencyModel:
    """Target ``10 + k`` ms (prefill ``10 + p``), draft ``2 + 0.5·k`` ms, 1 ms per round, no context term."""
    return LatencyModel(ForwardCost.affine(10.0, 1.0), ForwardCost.affine(2.0, 0.5), round_overhead_ms=1.0,
                        draft_rule=rule, draft_share=share)


def test_per_round_oracle_by_hand():
    """Plain step: 11 + 1 = 12. Drafting d: verify 11 + d, draft 2 + 0.5·(d + 1), overhead 1 = 14.5 + 1.5·d.
    V(4) = 12; V(3) = min(12 + 12, 16 + 0) = 16 (d = 1);
    V(2) = min(12 + 16, d=1: 16 + 16, d=2: 17.5 + 16) = 28;
    V(1) = min(12 + 28, d=1: 16 + V(3) = 32, d=2: 17.5 + V(3) = 33.5, d=3: 19 + V(3) = 35) = 32 (d = 1).
    Prefill 10 + 4 = 14: 46, rounds [1, 1]."""
    trace, lat = to_trace(TINY, 3), tiny_model("per_round")
    assert trace.agreements[:3] == [1, 0, 1]
    assert oracle_schedule(trace, lat) == (pytest.approx(46.0), [1, 1])
    res = oracle(trace, lat)
    assert res.wall_ms == pytest.approx(46.0) and res.rounds.drafted == [1, 1]
    assert res.round_ms == [16.0, 16.0]


def test_share_oracle_by_hand_never_drafts_when_the_lookup_costs_a_verification():
    """Share 1: drafting d costs 2·(11 + d) + 1 = 23 + 2·d, a plain step 12 (no draft when nothing is
    proposed).
    V(4) = 12; V(3) = min(24, 25) = 24; V(2) = 36 (t = 2 has no match: plain only); V(1) = min(12 + 36,
    d=1: 25 + 24, d=2: 27 + 24, d=3: 29 + 24) = 48: four plain steps, 14 + 48 = 62. The agreement oracle
    (d = 1 at t = 1 and t = 3) pays 14 + 25 + 25 = 64."""
    trace, lat = to_trace(TINY, 3, no_match={2}), tiny_model("share", 1.0)
    assert trace.available(2, 3) == 0
    assert oracle_schedule(trace, lat) == (pytest.approx(62.0), [0, 0, 0, 0])
    assert oracle(trace, lat).round_ms == [12.0] * 4
    assert agreement_oracle(trace, lat).wall_ms == pytest.approx(64.0)


def test_share_oracle_by_hand_drafts_when_the_lookup_is_cheap():
    """Share 0.1: drafting d costs 1.1·(11 + d) + 1 = 13.1 + 1.1·d. V(4) = 12; V(3) = min(24, 14.2) = 14.2;
    V(2) = 26.2; V(1) = min(38.2, d=1: 14.2 + 14.2, d=2: 15.3 + 14.2, d=3: 16.4 + 14.2) = 28.4 (d = 1):
    14 + 28.4 = 42.4, rounds [1, 1]; under ``forwards`` the same costs bill one draft forward per token."""
    trace = to_trace(TINY, 3)
    assert oracle_schedule(trace, tiny_model("share", 0.1)) == (pytest.approx(42.4), [1, 1])
    total, _ = oracle_schedule(trace, tiny_model("forwards"))
    assert total != pytest.approx(42.4)


@pytest.mark.parametrize("proposer", ["eagle", "ngram"])
def test_no_fixed_gamma_beats_the_oracle_on_imported_traces(tmp_path, proposer):
    """On an imported fixture at their costs: the oracle replays (its assertion holds) and beats every fixed γ
    and the agreement oracle, at batch 1, and at batch 8 (8 copies of a row: exactly its own schedule at 8
    rows' costs)."""
    rows = [{"id": str(i), "prompt_token_ids": list(range(3 + i)), "generated_token_ids": [],
             "acc_eagle": {"acc_len": acc}, "acc_ngram": {"acc_len": acc[::-1]}}
            for i, acc in enumerate([[4, 1, 1, 3, 2, 5, 1, 1, 2, 1], [1, 1, 6, 1, 1, 1, 2, 3, 1, 1, 1]])]
    path = tmp_path / "combined_cnn.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    traces, _ = import_traces(path, proposer)
    lat = latency_model(proposer)
    for tr in traces:
        best = oracle(tr, lat).wall_ms
        rivals = [replay(tr, build_policy("fixed", g, {}), lat).wall_ms for g in range(1, tr.gamma_max + 2)]
        assert best <= min([*rivals, agreement_oracle(tr, lat).wall_ms]) + 1e-9
        at8 = oracle_batches([tr] * 8, lat, 8)[0].wall_ms
        assert at8 == pytest.approx(oracle_schedule(tr, lat.at_batch(8))[0])


# a_t = 0, 0, 2: the agreement oracle drafts nothing at t = 1 and t = 2, then 2 tokens
ZEROS = Request("zeros", 4, (1, 1, 3, 1, 1, 1), (20, 21, 22, 23, 24, 25))


def test_per_step_bills_the_empty_rounds_draft_and_nothing_else():
    """SpecDecode-Bench's EAGLE billing (``per_step``: ``simulator.py: simulate_sd_batch`` calls
    ``predictor.py: predict_draft_time`` on every EAGLE step, 1 spec token when it proposes nothing) against the
    zero-charge variant (``per_round``): the same rounds, walls apart by exactly one 1-token draft forward
    (2 + 0.5·1 = 2.5 ms) per round that drafts nothing. Per round: plain 12 (+ 2.5 under per_step), d = 2:
    13 + 3.5 + 1 = 17.5; prefill 14."""
    trace = to_trace(ZEROS, 3)
    free, billed = (agreement_oracle(trace, tiny_model(rule)) for rule in ("per_round", "per_step"))
    assert free.rounds.drafted == billed.rounds.drafted == [0, 0, 2]
    assert free.wall_ms == pytest.approx(14 + 12 + 12 + 17.5)
    assert billed.wall_ms - free.wall_ms == pytest.approx(2 * 2.5)
    assert billed.round_ms == pytest.approx([14.5, 14.5, 17.5])
    # the exact oracle under per_step pays the same for a plain step and never does better than per_round's
    assert oracle(trace, tiny_model("per_step")).wall_ms >= oracle(trace, tiny_model("per_round")).wall_ms
