"""Issue 41: SpecDecode-Bench's acceptance data as the lab's traces, its cost model as the lab's latency model.

The fixture is written here in their schema (``id``, ``prompt_token_ids``, ``generated_token_ids``,
``acc_eagle.acc_len``, ``acc_ngram.acc_len``); none of their data is used. Hand computations follow their
``predictor.py`` (``Llama8BH100``, seconds) and ``simulator.py`` (``simulate_sd_batch``) at commit 2fdccbd.
"""

from __future__ import annotations

import json
import random

import pytest

from methods.policies import build_policy
from runners.replay.commands import main as cli_main
from runners.replay.import_specdecode_bench import (
    PLACEHOLDER,
    REJECTED,
    capped_rounds,
    import_traces,
    no_match_positions,
    not_replayable,
)
from runners.replay.oracle import AgreementOracle
from runners.replay.replay import replay, replay_rows
from runners.replay.specdecode_bench import latency_model
from runners.replay.trace import read_traces
from specbench.latency import LatencyModel, ar_batch_ms
from specbench.round_costs import round_parts

# their coefficients, in seconds, typed from predictor.py: Llama8BH100 (not imported from the module under test)
T_KV, T_COMPUTE, T_FIXED = 3.92645679e-08, 2.10103129e-05, 5.88590713e-03
E_KV, E_SPEC, E_FIXED = 2.37768493e-09, 8.41429603e-07, 2.13526175e-03
NGRAM, OVERHEAD = 0.005875, 1.20683946e-03

REQUESTS = [
    # 7 positions, ids of the same length: the output's ids are kept
    {"id": "a", "prompt_token_ids": [1, 2, 3, 4], "generated_token_ids": [10, 11, 12, 13, 14, 15, 16],
     "acc_eagle": {"acc_len": [3, 1, 2, 1, 1, 4, 1]}, "acc_ngram": {"acc_len": [1, 1, 3, 1, 2, 1, 1]}},
    # EAGLE's acc_len of another length than the ids: placeholders
    {"id": "b", "prompt_token_ids": [1, 2], "generated_token_ids": [20, 21, 22],
     "acc_eagle": {"acc_len": [5, 4, 3, 2, 1]}, "acc_ngram": {"acc_len": [1, 2, 1]}},
    # nothing profiled: their load_data drops it
    {"id": "c", "prompt_token_ids": [1], "generated_token_ids": [],
     "acc_eagle": {"acc_len": []}, "acc_ngram": {"acc_len": []}},
]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "combined_cnn.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    return path


def test_import_keeps_their_positions_and_cap(data):
    traces, meta = import_traces(data, "eagle")
    assert [tr.prompt_id for tr in traces] == ["a", "b"]
    a, b = traces
    assert meta["gamma_max"] == 4 and a.gamma_max == 4  # the largest acc_len (5) - 1
    assert a.tokens == [10, 11, 12, 13, 14, 15, 16] and b.tokens == [PLACEHOLDER] * 5
    assert a.eos == () and a.n == 7 and a.prompt_tokens == 4
    # a_t = acc_len[t-1] - 1, at most the proposal: min(K, N - 1 - t)
    assert a.agreements == [2, 0, 1, 0, 0, 0]  # acc_len 4 at t = 6 = N - 1: no round drafts there (budget 0)
    assert b.agreements == [3, 2, 1, 0]  # acc_len 5, 4, 3, 2 cut to the 3, 2, 1, 0 tokens left to draft
    assert a.proposals[1] == [REJECTED] * 4 and a.proposals[0] == [11, 12, REJECTED, REJECTED]
    assert meta["cut"]["requests_without_acc_len"] == 1 and meta["cut"]["tokens_placeholder"] == 1
    assert meta["source"]["repository"] == "SpecDecode-Bench/simulator" and len(meta["source"]["sha256"]) == 64


def test_cap_rule_caps_and_counts(data):
    traces, meta = import_traces(data, "eagle", draft_length=2)
    b = traces[1]
    assert b.gamma_max == 2 and meta["cut"]["values_above_cap"] == 3  # b: 5 and 4 at t = 1, 2; a: 4 at t = 6
    res = replay(b, build_policy("fixed", 5, {}))
    # t=1: budget min(5, 3) = 3 > 2, drafts 2, accepts 2 -> t=4; t=4: budget 0, a plain step
    assert res.rounds.drafted == [2, 0] and res.rounds.accepted == [2, 0]
    assert capped_rounds(res, 2) == 1
    assert capped_rounds(replay(b, build_policy("fixed", 2, {})), 2) == 0


def test_ngram_no_match_draws_are_stored_as_empty_proposals(data):
    traces, meta = import_traces(data, "ngram", seed=7)
    expected = no_match_positions([1, 1, 3, 1, 2, 1, 1], 0.4, random.Random(7))  # cnn: their p = 0.4
    a = traces[0]
    assert {t for t in range(1, a.n) if not a.proposals[t - 1] and t < a.n - 1} == expected - {a.n - 1}
    assert meta["no_match"]["p"] == pytest.approx(0.6)
    none, _ = import_traces(data, "ngram", no_match_p=0.0)
    assert all(none[0].proposals[t - 1] for t in range(1, none[0].n - 1))


def test_policies_needing_features_are_listed():
    listed = not_replayable(["specdecode", "hf_heuristic", "gammatune", "gammatune_plus", "adaedl", "banditspec"])
    assert set(listed) == {"gammatune_plus", "adaedl"}
    assert "confidence" in listed["gammatune_plus"] and "entropy" in listed["adaedl"]


def _target_ms(kv: int, batched: int) -> float:
    return (kv * T_KV + batched * T_COMPUTE + T_FIXED) * 1e3


def test_cost_table_charges_their_formulas():
    eagle, ngram = latency_model("eagle"), latency_model("ngram")
    p, t, d = 100, 5, 3  # their kv after t tokens: p + t; input_len d + 1
    draft, verify = round_parts(eagle, p, t, 0, d)
    assert verify == pytest.approx(_target_ms(p + t, d + 1), rel=1e-12)
    assert draft == pytest.approx(((p + t) * E_KV + (d + 1) * E_SPEC + E_FIXED) * 1e3, rel=1e-12)
    draft, verify = round_parts(ngram, p, t, 0, d)
    assert draft == pytest.approx(NGRAM * _target_ms(p + t, d + 1), rel=1e-12)
    # a round that drafts nothing: their EAGLE step still calls predict_draft_time with 1 spec token
    # (simulate_sd_batch); the zero-charge variant bills it as a plain target step; n-gram bills 0 (input_len 1)
    assert round_parts(eagle, p, t, 0, 0) == (pytest.approx(((p + t) * E_KV + 1 * E_SPEC + E_FIXED) * 1e3, rel=1e-12),
                                              pytest.approx(_target_ms(p + t, 1)))
    assert round_parts(latency_model("eagle", free_empty_rounds=True), p, t, 0, 0) == (
        0.0, pytest.approx(_target_ms(p + t, 1)))
    assert round_parts(ngram, p, t, 0, 0)[0] == 0.0
    assert eagle.round_overhead_ms == eagle.ar_overhead_ms == pytest.approx(OVERHEAD * 1e3)
    # AR: prefill + overhead, then per step kv = p + s: simulate_org_batch
    n = 4
    ar = (_target_ms(0, p) + OVERHEAD * 1e3) + sum(_target_ms(p + s, 1) + OVERHEAD * 1e3 for s in range(1, n))
    assert eagle.ar_wall_ms(p, n) == pytest.approx(ar, rel=1e-12)
    # 24 duplicated rows (between the tables at 16 and 32): kv and batched tokens summed over rows
    b = 24
    assert eagle.verify_ms(d + 1, p + t - 1, b) == pytest.approx(_target_ms(b * (p + t), b * (d + 1)), rel=1e-12)
    assert eagle.draft_ms(d + 1, p + t - 1, b) == pytest.approx(
        (b * (p + t) * E_KV + (d + 1) * E_SPEC + E_FIXED) * 1e3, rel=1e-12)
    prefill, walls = ar_batch_ms(eagle, [p] * b, [n] * b)
    assert prefill == pytest.approx(_target_ms(0, b * p) + OVERHEAD * 1e3, rel=1e-12)


def test_latency_file_keeps_the_draft_rule(tmp_path):
    model = latency_model("ngram")
    back = LatencyModel.load(model.save(tmp_path / "ngram.json"))
    assert (back.draft_rule, back.draft_share) == ("share", NGRAM)
    assert back.at_batch(8).draft_rule == "share"
    eagle = LatencyModel.load(latency_model("eagle").save(tmp_path / "eagle.json"))
    assert (eagle.draft_rule, eagle.at_batch(8).draft_rule) == ("per_step", "per_step")
    assert "draft_rule" not in LatencyModel.paper(2.0).to_json()
    with pytest.raises(ValueError, match="draft_rule"):
        LatencyModel(model.target, model.draft, draft_rule="per_token")


def _their_sd_ms(p: int, acc_len: list[int], k: int | None, free_empty_rounds: bool = False) -> float:
    """``simulate_sd_batch`` at batch 1, EAGLE, by hand, with the lab's budget at the end (``min(k, N - 1 - t)``
    drafted: the one rule the lab charges otherwise, ``scripts/specdecode_bench_conformance.py``): every step
    bills ``predict_draft_time`` of its ``input_len`` spec tokens, 1 when it drafts nothing;
    ``free_empty_rounds``: such a step billed no draft (the lab's zero-charge variant)."""
    n, cur = len(acc_len), 1
    total = _target_ms(0, p) + OVERHEAD * 1e3
    while cur < n:
        drafted = min(k, n - 1 - cur) if k is not None else min(acc_len[cur - 1] - 1, n - 1 - cur)
        draft = ((p + cur) * E_KV + (drafted + 1) * E_SPEC + E_FIXED) * 1e3
        if free_empty_rounds and drafted == 0:
            draft = 0.0
        total += _target_ms(p + cur, drafted + 1) + draft + OVERHEAD * 1e3
        cur += min(acc_len[cur - 1], drafted + 1)
    return total


@pytest.mark.parametrize("k", [1, 2, 3, None])
def test_fixed_k_and_oracle_replay_equal_a_hand_simulation(data, k):
    traces, _ = import_traces(data, "eagle")
    lat = latency_model("eagle")
    for tr, req in zip(traces, REQUESTS):
        policy = AgreementOracle(tr) if k is None else build_policy("fixed", k, {})
        res = replay(tr, policy, lat)
        assert res.wall_ms == pytest.approx(_their_sd_ms(len(req["prompt_token_ids"]), req["acc_eagle"]["acc_len"], k),
                                            rel=1e-12)
        free = replay(tr, AgreementOracle(tr) if k is None else build_policy("fixed", k, {}),
                      latency_model("eagle", free_empty_rounds=True))
        assert free.wall_ms == pytest.approx(_their_sd_ms(len(req["prompt_token_ids"]), req["acc_eagle"]["acc_len"], k,
                                                          free_empty_rounds=True), rel=1e-12)
        # their duplicated batch: every row's latency as alone, at the costs of b rows
        rows = replay_rows([tr] * 3, [AgreementOracle(tr) if k is None else build_policy("fixed", k, {})
                                      for _ in range(3)], lat).rows
        assert len({r.wall_ms for r in rows}) == 1 and rows[0].rounds.drafted == res.rounds.drafted


def test_cli_imports_and_refuses_another_schema(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(["import", "specdecode-bench", str(data), "--proposer", "ngram", "--out", str(out),
                     "--commit", "2fdccbd"]) == 0
    traces = read_traces(out / "trace.jsonl")
    assert [tr.prompt_id for tr in traces] == ["a", "b"] and traces[0].gamma_max == 2
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source"]["commit"] == "2fdccbd" and "gammatune_plus" in meta["not_replayable"]
    assert LatencyModel.load(out / "latency" / "specdecode-bench_llama3.1-8b_ngram.json").draft_rule == "share"
    assert "not replayable: gammatune_plus" in capsys.readouterr().err
    bad = tmp_path / "combined_cnn.jsonl"
    bad.write_text(json.dumps({"id": "x", "prompt_token_ids": [1]}) + "\n")
    assert cli_main(["import", "specdecode-bench", str(bad), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no generated_token_ids, acc_eagle" in err
