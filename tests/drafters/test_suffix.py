"""Suffix decoding (``runners.drafters.suffix``): the rule against its definition counted by brute force, the
drafter lossless in our loop, replayed exactly by the lab, and usable as ``pair=gemma3-270m_suffix``."""

from __future__ import annotations

import itertools
import random

import pytest

from methods.base import FixedGamma
from runners.drafters.suffix import SuffixDrafter, SuffixTree
from runners.engine.base import Drafter
from specbench.registry import ConfigError


def _count(seq: list[int], w: list[int]) -> int:
    return sum(seq[i : i + len(w)] == w for i in range(len(seq) - len(w) + 1))


def _continuations(seq: list[int], w: list[int]) -> list[int]:
    """The tokens that follow ``w`` in ``seq``, in order of first occurrence."""
    seen: list[int] = []
    for i in range(len(seq) - len(w)):
        if seq[i : i + len(w)] == w and seq[i + len(w)] not in seen:
            seen.append(seq[i + len(w)])
    return seen


def _brute_force(seq: list[int], depth: int, max_spec: int, factor: float, min_prob: float) -> tuple[list[int], float]:
    """The module docstring's rule, from occurrence counts found by scanning ``seq`` (no tree)."""
    pattern = seq[-depth:]
    best: tuple[list[int], float] = ([], 0.0)
    for start in range(len(pattern)):
        w = pattern[start:]
        if not _count(seq, w):
            continue
        limit = max(0, min(max_spec, int(len(w) * factor + 1e-6)))
        tokens: list[int] = []
        score, prob = 0.0, 1.0
        while len(tokens) < limit and len(w) < depth:
            nexts = _continuations(seq, w)
            if not nexts:
                break
            top = max(nexts, key=lambda t, w=w: (_count(seq, [*w, t]), -nexts.index(t)))
            prob *= _count(seq, [*w, top]) / _count(seq, w)
            if prob < min_prob:
                break
            tokens.append(top)
            score += prob
            w = [*w, top]
        if score > best[1]:
            best = (tokens, score)
    return best


def test_the_tree_proposes_what_counting_occurrences_defines():
    rng = random.Random(0)
    checked = 0
    for _ in range(120):
        depth, vocab = rng.choice([2, 3, 6, 24]), rng.choice([2, 3, 8])
        seq = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))]
        tree = SuffixTree(depth)
        tree.extend(seq)
        for max_spec, factor, min_prob in ((24, 1.0, 0.1), (4, 2.0, 0.0), (3, 0.5, 0.3)):
            tokens, score = tree.speculate(seq, max_spec, factor, 0.0, min_prob)
            want_tokens, want_score = _brute_force(seq, depth, max_spec, factor, min_prob)
            assert tokens == want_tokens and score == pytest.approx(want_score), (seq, depth, max_spec)
            checked += bool(tokens)
    assert checked > 100  # real proposals were compared


def test_the_most_frequent_continuation_of_the_longest_match_wins():
    # "1 2" occurred 3 times (once at the end, with nothing after it): 3 follows once, 4 once: p = 1/3 each, the
    # first seen (3) taken; the match "1 2" (2 tokens, factor 1) allows 2 tokens: 3 then 1 (p stays 1/3)
    tree = SuffixTree(4)
    tree.extend([1, 2, 3, 1, 2, 4, 1, 2])
    assert tree.speculate([1, 2], 10, 1.0, 0.0, 0.1) == ([3, 1], pytest.approx(2 / 3))
    assert tree.speculate([1, 2], 10, 1.0, 0.0, 0.5) == ([], 0.0)  # 1/3 < min_token_prob: nothing
    assert tree.speculate([1, 2], 10, 3.0, 0.0, 0.1)[0] == [3, 1, 2]  # a larger spec factor: up to the tree's depth


def test_the_drafter_is_deterministic_and_never_asks_the_policy():
    class NoAsk(FixedGamma):
        def stop_drafting(self, step) -> bool:  # pragma: no cover - must not be called
            raise AssertionError("suffix decoding has no probabilities to show a policy")

    d = SuffixDrafter(eos_token_ids=[0])
    assert isinstance(d, Drafter) and d.name == "suffix"
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 2, 5, 6]
    d.begin(prompt)
    draft = d.propose([*prompt, 7], 10, NoAsk(4), 0.0, None)
    assert draft.tokens == [8, 9, 5] and draft.q is None and draft.confidences == []
    assert d.lookup([*prompt, 7], 2) == [8, 9]  # cut to the round's budget
    assert SuffixDrafter(eos_token_ids=[9]).lookup([*prompt, 7], 10) == [8, 9]  # cut after an EOS, kept
    assert d.lookup([1, 2, 3], 5) == []  # another sequence: its own trees, and nothing matches


def test_a_smaller_budget_proposes_a_prefix_of_a_larger_ones():
    rng = random.Random(1)
    for _ in range(100):
        seq = [rng.randrange(4) for _ in range(rng.randrange(2, 50))]
        d = SuffixDrafter(max_tree_depth=rng.choice([3, 8, 24]), max_spec_factor=rng.choice([0.5, 1.0, 2.0]))
        d.begin(seq[: len(seq) // 2])
        full = d.lookup(seq, 30)
        assert all(d.lookup(seq, k) == full[:k] for k in range(31))


@pytest.mark.parametrize(("options", "key"), [
    ({"max_tree_depth": 0}, "max_tree_depth"), ({"max_spec_tokens": 0}, "max_spec_tokens"),
    ({"max_spec_factor": -1.0}, "max_spec_factor"), ({"min_token_prob": 1.5}, "min_token_prob"),
    ({"depth": 3}, "depth")])
def test_bad_options_fail_before_any_model_loads(options, key):
    from runners.drafters import check_drafter

    with pytest.raises(ConfigError, match=key):
        check_drafter("suffix", options)


@pytest.mark.slow
def test_lossless_and_replayed_exactly_by_the_lab(noisy_pair):
    from methods.policies import build_policy
    from runners.engine.speculative import SpeculativeRunner
    from runners.replay.grid import load_method
    from runners.replay.replay import replay
    from runners.replay.trace_lookup import build_lookup_trace

    _, target, _, prompts = noisy_pair
    drafter = SuffixDrafter(max_spec_factor=2.0, min_token_prob=0.0)
    drafted = 0
    for ids in prompts:
        trace = build_lookup_trace(target, drafter, ids, 36, [])
        for name, gamma in itertools.product(("specdecode", "hf_heuristic", "gammatune"), (1, 4, 12)):
            policy = build_policy(load_method(name).policy, gamma)
            out = SpeculativeRunner(target, drafter, policy, []).generate(ids, 36)
            assert out.tokens == trace.tokens  # the target's own greedy output: lossless
            rep = replay(trace, build_policy(load_method(name).policy, gamma))
            assert (out.rounds.gamma, out.rounds.drafted, out.rounds.accepted) == (
                rep.rounds.gamma, rep.rounds.drafted, rep.rounds.accepted), (name, gamma)
            drafted += sum(out.rounds.accepted)
    assert drafted > 0  # the drafts were accepted, not only verified


def test_the_pair_is_typed_prepared_and_declared():
    from runners.jobs.build import prepare
    from runners.replay.commands import traceable
    from specbench.config import JobConfig
    from specbench.speculation_profile import speculation_method

    from helpers import compose

    config = JobConfig.from_mapping(compose("pair=gemma3-270m_suffix", "method=specdecode"))
    assert config.drafter == "suffix" and config.pair.draft.model is None
    assert traceable(config) is None and speculation_method("suffix") == "suffix"
    defaults = SuffixDrafter()  # the pair file states the class's defaults (vLLM's)
    assert {k: v for k, v in config.pair.draft.options.items() if k != "name"} == {
        "max_tree_depth": defaults.max_tree_depth, "max_spec_tokens": None, "max_spec_factor": defaults.max_spec_factor,
        "max_spec_offset": defaults.max_spec_offset, "min_token_prob": defaults.min_token_prob}
    prepare(config)  # options checked, prompts loaded; no model
    with pytest.raises(ConfigError, match="min_token_prob"):
        prepare(compose("pair=gemma3-270m_suffix", "pair.draft.min_token_prob=2"))
    with pytest.raises(ConfigError, match="transformers"):
        prepare(compose("pair=gemma3-270m_suffix", "method=hf_native_specdecode"))
