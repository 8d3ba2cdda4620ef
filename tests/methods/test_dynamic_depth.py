"""Dynamic Depth Decoding's stop (``methods/dynamic_depth.py``): it fires exactly where the round's product of draft
confidences first falls below τ, restarts every round, judges the prefix where the per-token stops judge one token,
never fires without features, and in the real loop decodes exactly the target's own tokens while cutting rounds
where (and only where) the rule says."""

from __future__ import annotations

import math

import pytest

from methods.base import DraftStep
from methods.max_confidence import MaxConfidence
from methods.policies import build_policy
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.registry import ConfigError

from helpers import tiny


def stops(policy, confidences) -> list[bool]:
    return [policy.stop_drafting(DraftStep(k, confidence=c)) for k, c in enumerate(confidences, start=1)]


def test_it_stops_exactly_where_the_paths_product_crosses_the_floor():
    ddd = build_policy("dynamic_depth", 8, {"threshold": 0.25})
    assert stops(ddd, [0.5, 0.5]) == [False, False]  # 0.25 is not below 0.25
    assert stops(ddd, [0.5, 0.4999]) == [False, True]
    assert stops(ddd, [0.9, 0.9, 0.9, 0.3]) == [False, False, False, True]  # 0.729, then 0.2187: the 4th crosses


def test_each_round_starts_a_new_path_and_features_missing_never_stop():
    ddd = build_policy("dynamic_depth", 8, {"threshold": 0.5})
    assert stops(ddd, [0.6, 0.6]) == [False, True]  # 0.36
    assert stops(ddd, [0.9]) == [False]  # a new round: the sum restarted at position 1
    assert stops(ddd, [0.0]) == [True]  # a zero probability ends the path
    assert not ddd.stop_drafting(DraftStep(1)) and ddd.needs == {"confidence"} and ddd.next_gamma() == 8


def test_it_judges_the_prefix_where_a_per_token_stop_judges_one_token():
    confidences = [0.8, 0.8, 0.8]
    assert stops(MaxConfidence(8, threshold=0.6), confidences) == [False, False, False]
    assert stops(build_policy("dynamic_depth", 8, {"threshold": 0.6}), confidences) == [False, False, True]


@pytest.mark.parametrize("threshold", [0, -0.1, 1.5, "0.3"])
def test_a_floor_that_is_no_probability_is_refused(threshold):
    with pytest.raises(ConfigError, match="threshold"):
        build_policy("dynamic_depth", 4, {"threshold": threshold})


def test_in_the_loop_it_is_lossless_and_cuts_rounds_only_where_the_rule_says():
    pair = tiny.tiny_pair(("the quick brown fox", "one two three four"), draft="noisy", noise=0.3, sharpen=20.0)
    tau, gamma, new = 0.6, 6, 40
    cut_rounds = 0
    for prompt in pair.prompts:
        alone = AutoregressiveRunner(pair.target, []).generate(prompt, new).tokens
        policy = build_policy("dynamic_depth", gamma, {"threshold": tau})
        out = SpeculativeRunner(pair.target, ModelDrafter(pair.draft, []), policy, []).generate(prompt, new)
        assert out.tokens == alone  # the target verifies: its own greedy output
        rounds = out.rounds
        for i, (drafted, confs) in enumerate(zip(rounds.drafted, rounds.confidences, strict=True)):
            assert len(confs) == drafted
            assert math.prod(confs[:-1]) >= tau - 1e-5  # it never stopped before the product crossed τ
            if drafted < rounds.gamma[i] and i < len(rounds.drafted) - 1:  # cut by the rule (not the budget)
                assert math.prod(confs) < tau + 1e-5
                cut_rounds += 1
    assert cut_rounds >= 3  # the fixture makes the rule fire
