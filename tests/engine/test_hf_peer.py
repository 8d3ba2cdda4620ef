"""Our engine against transformers' assisted generation (runners.engine.hf_assisted), on tiny seeded models.

Greedy, same pair, same γ rule. Two comparisons:

* **direct**: ``HFAssistedRunner.generate(prompt, N)`` vs ``SpeculativeRunner.generate(prompt, N)``:
  identical tokens (both equal the target's own greedy decoding). The per-round traces are
  *not* comparable here, by construction: transformers has no separate prefill; its first
  round drafts from the prompt and the target verifies prompt + draft in one forward, while
  our engine's prefill emits the first token ``t0`` and its rounds start from prompt + t0.
  The rounds are shifted by one token, so accept counts (and the heuristic's γ path) differ.
* **aligned**: transformers given ``prompt + [t0]`` and ``N - 1`` new tokens starts its rounds
  exactly where ours do. Then tokens, γ, drafted and accepted counts are identical round for
  round (budget cap ``min(γ, remaining - 1)``, the final ``d = 0`` round, the heuristic's
  ``+2 / -1`` and the γ carried to the next prompt included).

A round whose *drafted* EOS is accepted: transformers reports one match fewer (the EOS counts as
the target's own token); our loop passes ``eos_accepted`` so ``HFHeuristic`` does the same
(``test_drafted_eos_carried_gamma_matches_transformers``).
"""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from methods.policies import build_policy
from runners.drafters.model import ModelDrafter
from runners.engine.hf_assisted import HFAssistedRunner, HFSettings, hf_settings
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.config import MethodConfig
from specbench.registry import ConfigError

from helpers import tiny

N = 24
TEXTS = ("the quick brown fox", "def add(a, b):")
SPECDECODE = {"name": "specdecode", "policy": "fixed"}
HEURISTIC = {"name": "hf_heuristic", "policy": "hf_heuristic", "transient": False}


@pytest.fixture(scope="module")
def pair():
    _, target, draft, prompts = tiny.tiny_pair(TEXTS, draft="noisy", noise=0.15)  # a partially accepting draft
    return target, draft, prompts


def _policy(method: dict, gamma: int):
    """The job's policy for a method config (its knobs are the keys besides name and policy)."""
    return build_policy(method["policy"], gamma, {k: v for k, v in method.items() if k not in ("name", "policy")})


def ours(target, draft, policy, eos=()):
    return SpeculativeRunner(target, ModelDrafter(draft, eos), policy, list(eos))


def assert_same_rounds(o, h):
    assert h.rounds.gamma == o.rounds.gamma
    assert h.rounds.drafted == o.rounds.drafted
    assert h.rounds.accepted == o.rounds.accepted


@pytest.mark.parametrize("gamma", [1, 3, 5, 8])
def test_specdecode_identical(pair, gamma):
    target, draft, prompts = pair
    for ids in prompts:
        ref = AutoregressiveRunner(target, []).generate(ids, N)
        o = ours(target, draft, build_policy("fixed", gamma)).generate(ids, N)
        hf = HFAssistedRunner(target, draft, _policy(SPECDECODE, gamma), [])
        direct = hf.generate(ids, N)
        assert o.tokens == direct.tokens == ref.tokens
        # direct: transformers' rounds cover every new token (no prefill token); its first
        # round drafts from the prompt with the same budget rule
        assert sum(direct.rounds.accepted) + len(direct.rounds.accepted) == N
        assert direct.rounds.drafted[0] == min(gamma, N - 1)
        assert set(direct.rounds.gamma) == {gamma}
        assert 0 < direct.ttft_ms <= direct.wall_ms
        # ours: the prefill emits one token, then the rounds
        assert 1 + sum(o.rounds.accepted) + len(o.rounds.accepted) == N
        aligned = hf.generate(ids + o.tokens[:1], N - 1)
        assert aligned.tokens == o.tokens[1:]
        assert_same_rounds(o, aligned)
        assert sum(o.rounds.accepted) > 0 and sum(o.rounds.accepted) < sum(o.rounds.drafted)


@pytest.mark.parametrize("transient", [False, True])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_hf_heuristic_identical_over_two_prompts(pair, gamma, transient):
    target, draft, prompts = pair
    method = {**HEURISTIC, "transient": transient}
    policy = _policy(method, gamma)
    runner = ours(target, draft, policy)
    hf = HFAssistedRunner(target, draft, _policy(method, gamma), [])
    direct = HFAssistedRunner(target, draft, _policy(method, gamma), [])
    assert hf.settings.schedule == ("heuristic_transient" if transient else "heuristic")
    carried_before = gamma
    for ids in prompts:
        o = runner.generate(ids, N)
        assert direct.generate(ids, N).tokens == o.tokens
        aligned = hf.generate(ids + o.tokens[:1], N - 1)
        assert aligned.tokens == o.tokens[1:]
        assert_same_rounds(o, aligned)
        if transient:
            assert o.rounds.gamma[0] == gamma and hf.carried_gamma == gamma
        else:
            # γ carried from the previous prompt (transformers writes it back to the assistant's config)
            assert aligned.rounds.gamma[0] == carried_before
            assert hf.carried_gamma == policy.gamma
            carried_before = hf.carried_gamma
    if not transient:
        assert hf.carried_gamma != gamma  # the carry was actually exercised
        hf.reset()
        assert hf.carried_gamma == gamma


@pytest.mark.parametrize("adaptive", [False, True])
def test_assistant_threshold_identical(pair, adaptive):
    target, draft, prompts = pair
    probe = ours(target, draft, build_policy("assistant_threshold", 4, {"threshold": 0.0})).generate(prompts[1], N)
    conf = sorted(c for r in probe.rounds.confidences for c in r)
    tau = conf[len(conf) // 2]  # the median: a mix of stops and continues
    method = {"name": "assistant_threshold", "policy": "assistant_threshold", "threshold": tau,
              "adaptive_threshold": adaptive}
    for gamma in (3, 6):
        policy = _policy(method, gamma)
        o = ours(target, draft, policy).generate(prompts[1], N)
        hf = HFAssistedRunner(target, draft, _policy(method, gamma), [])
        aligned = hf.generate(prompts[1] + o.tokens[:1], N - 1)
        assert aligned.tokens == o.tokens[1:]
        assert_same_rounds(o, aligned)
        assert any(d < min(gamma, N) for d in o.rounds.drafted[:-1])  # the stop fired
        assert hf.last_generator_class == ("AssistedCandidateGenerator" if adaptive else "_FixedThresholdGenerator")
        if adaptive:
            assert policy.state()["roc_fits"] > 0


def _eos_case(pair):
    """An EOS id, prompt and γ where a round ends on an accepted *drafted* EOS."""
    target, _, prompts = pair
    draft = tiny.noisy_copy(target, 0.1)
    for ids in prompts:
        free = AutoregressiveRunner(target, []).generate(ids, N).tokens
        for k in range(6, N):
            if free[k] in free[:k]:
                continue
            eos = [free[k]]
            for gamma in (2, 3, 4):
                o = ours(target, draft, _policy(HEURISTIC, gamma), eos).generate(ids, N)
                if o.stop_reason == "eos" and o.rounds.drafted[-1] == o.rounds.accepted[-1] >= 1:
                    return draft, ids, eos, gamma
    raise AssertionError("no prompt/EOS with an accepted drafted EOS in the tiny pair")


def test_drafted_eos_counts(pair):
    """transformers crops the valid tokens at the EOS and recomputes ``n_matches = len(valid) - 1``,
    so an accepted drafted EOS is reported as the target's token; the runner's accepted_trace
    counts it as accepted (our records' definition) and matches our engine."""
    target, _, _ = pair
    draft, ids, eos, gamma = _eos_case(pair)
    o = ours(target, draft, _policy(HEURISTIC, gamma), eos).generate(ids, N)
    hf = HFAssistedRunner(target, draft, _policy(HEURISTIC, gamma), eos)
    aligned = hf.generate(ids + o.tokens[:1], N - 1)
    assert aligned.tokens == o.tokens[1:] and aligned.stop_reason == "eos"
    assert_same_rounds(o, aligned)
    assert hf.last_num_matches[:-1] == aligned.rounds.accepted[:-1]
    assert hf.last_num_matches[-1] == aligned.rounds.accepted[-1] - 1  # transformers' count
    # so transformers' heuristic treats that round as a partial acceptance: -1, not +2
    assert hf.carried_gamma == max(1, aligned.rounds.gamma[-1] - 1)


def test_drafted_eos_carried_gamma_matches_transformers(pair):
    target, _, _ = pair
    draft, ids, eos, gamma = _eos_case(pair)
    policy = _policy(HEURISTIC, gamma)
    o = ours(target, draft, policy, eos).generate(ids, N)
    hf = HFAssistedRunner(target, draft, _policy(HEURISTIC, gamma), eos)
    hf.generate(ids + o.tokens[:1], N - 1)
    assert policy.gamma == hf.carried_gamma


def test_generation_config_restored(pair, monkeypatch):
    target, draft, prompts = pair
    before = draft.generation_config.to_dict()
    config_object = draft.generation_config
    hf = HFAssistedRunner(target, draft, _policy(HEURISTIC, 3), [])
    out = hf.generate(prompts[0], N)
    assert out.rounds.gamma[-1] != 3 and hf.carried_gamma != 3  # transformers did write γ back
    assert draft.generation_config is config_object
    assert draft.generation_config.to_dict() == before
    assert "_get_candidate_generator" not in vars(target)
    # also when generate() raises half-way
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(target, "forward", boom)
    with pytest.raises(RuntimeError, match="boom"):
        hf.generate(prompts[0], N)
    assert draft.generation_config.to_dict() == before
    assert "_get_candidate_generator" not in vars(target)


def test_sampling_runs_and_leaves_global_rng(pair):
    target, draft, prompts = pair
    hf = HFAssistedRunner(target, draft, _policy(SPECDECODE, 3), [], sampling=0.8)
    state = torch.get_rng_state()
    a = hf.generate(prompts[0], N, torch.Generator().manual_seed(5))
    b = hf.generate(prompts[0], N, torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state)
    assert a.tokens == b.tokens and len(a.tokens) == N
    assert sum(a.rounds.accepted) + len(a.rounds.accepted) == N


def test_sampling_processors_reach_transformers(pair):
    """The job's warpers go to generate() for target and assistant alike; off = 0 / 1.0, never None
    (None would let the checkpoint's own top_k = 50 in)."""
    from runners.engine.verify import Sampling

    target, draft, _ = pair
    kwargs = HFAssistedRunner(target, draft, _policy(SPECDECODE, 3), [], Sampling(0.8, top_k=5, top_p=0.9))._generate_kwargs(7)
    assert (kwargs["temperature"], kwargs["top_k"], kwargs["top_p"], kwargs["typical_p"]) == (0.8, 5, 0.9, 1.0)
    plain = HFAssistedRunner(target, draft, _policy(SPECDECODE, 3), [], 0.8)._generate_kwargs(7)
    assert (plain["top_k"], plain["top_p"], plain["typical_p"]) == (0, 1.0, 1.0)


def test_settings_and_refusals(pair, root):
    target, draft, _ = pair
    assert hf_settings(_policy(SPECDECODE, 4)) == HFSettings("constant", 0.0)
    assert hf_settings(_policy({**HEURISTIC, "transient": True}, 4)).schedule == "heuristic_transient"
    expected = {
        "hf_native_specdecode": HFSettings("constant", 0.0),
        "hf_native_heuristic": HFSettings("heuristic_transient", 0.0),  # restarts per prompt, as hf_heuristic
        "hf_native_heuristic_carryover": HFSettings("heuristic", 0.0),
        "hf_native_assistant_threshold": HFSettings("constant", 0.4, True),
    }
    for name, settings in expected.items():
        cfg = MethodConfig.from_mapping(OmegaConf.to_container(OmegaConf.load(root / "conf" / "method" / f"{name}.yaml")))
        assert cfg.name == name and cfg.runner == "hf"
        assert hf_settings(build_policy(cfg.policy, 4, cfg.params)) == settings  # what job.prepare checks
    with pytest.raises(ConfigError, match="not a transformers schedule"):
        HFAssistedRunner(target, draft, _policy({"name": "gammatune", "policy": "gammatune"}, 4), [])
    with pytest.raises(ConfigError, match="persist_threshold"):
        hf_settings(_policy({"name": "t", "policy": "assistant_threshold", "persist_threshold": True}, 4))
    other = tiny.tiny_model(len(tiny.tiny_tokenizer()) + 5, seed=3, layers=1)
    with pytest.raises(ConfigError, match="vocabulary"):
        HFAssistedRunner(target, other, _policy(SPECDECODE, 4), [])
