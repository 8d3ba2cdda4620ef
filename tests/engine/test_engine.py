"""The decoding loop's invariants on tiny seeded models (fast, offline)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from methods.base import FixedGamma, GammaPolicy, RoundOutcome
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import verify_sampling

from helpers import tiny

GAMMAS = [1, 2, 3, 5, 8, 16]


@pytest.fixture(scope="module")
def pair():
    return tiny.tiny_pair(("the quick brown fox", "def add(a, b):", "one two three"))


@pytest.mark.parametrize("gamma", GAMMAS)
def test_greedy_speculative_equals_target_greedy(pair, gamma):
    _, target, draft, prompts = pair
    for ids in prompts:
        ref = AutoregressiveRunner(target, eos_token_ids=[]).generate(ids, 40)
        out = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(gamma), eos_token_ids=[]).generate(ids, 40)
        assert out.tokens == ref.tokens
        assert len(out.tokens) == 40
        # traces are per round and consistent with the output length
        assert len(out.rounds.gamma) == len(out.rounds.drafted) == len(out.rounds.accepted)
        assert 1 + sum(out.rounds.accepted) + len(out.rounds.accepted) == len(out.tokens)
        assert all(0 <= a <= d <= gamma for a, d in zip(out.rounds.accepted, out.rounds.drafted))


@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_identical_draft_accepts_everything(pair, gamma):
    _, target, _, prompts = pair
    out = SpeculativeRunner(target, ModelDrafter(target, []), FixedGamma(gamma), eos_token_ids=[]).generate(prompts[0], 33)
    assert sum(out.rounds.drafted) > 0
    assert out.rounds.accepted == out.rounds.drafted
    # every round drafted exactly gamma, capped by the remaining budget minus the target's own token
    produced = 1
    for drafted, accepted in zip(out.rounds.drafted, out.rounds.accepted):
        assert drafted == min(gamma, 33 - produced - 1)
        produced += accepted + 1
    assert produced == 33


@pytest.mark.parametrize("max_new", [1, 2, 3, 7, 10])
@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_never_runs_past_max_new_tokens(pair, gamma, max_new):
    _, target, _, prompts = pair
    for draft_model in (target, pair[2]):
        out = SpeculativeRunner(target, ModelDrafter(draft_model, []), FixedGamma(gamma), []).generate(prompts[1], max_new)
        assert len(out.tokens) == max_new
        assert out.stop_reason == "max_new_tokens"


def test_eos_drafted_inside_a_block_stops_where_the_target_would(pair):
    _, target, _, prompts = pair
    ids = prompts[0]
    free = AutoregressiveRunner(target, []).generate(ids, 30).tokens
    # make the 6th new token an "EOS" that the target emits there and not before
    k = next(i for i in range(5, 30) if free[i] not in free[:i])
    eos = [free[k]]
    ref = AutoregressiveRunner(target, eos).generate(ids, 30)
    assert ref.tokens == free[: k + 1] and ref.stop_reason == "eos"
    for gamma in (1, 4, 12):
        # identical draft: the EOS is drafted inside a block and accepted
        out = SpeculativeRunner(target, ModelDrafter(target, eos), FixedGamma(gamma), eos).generate(ids, 30)
        assert out.tokens == ref.tokens and out.stop_reason == "eos"
        out = SpeculativeRunner(target, ModelDrafter(pair[2], eos), FixedGamma(gamma), eos).generate(ids, 30)
        assert out.tokens == ref.tokens


class _RecordingPolicy(GammaPolicy):
    name = "recording"

    def __init__(self, gammas):
        super().__init__(1)
        self.gammas = itertools.cycle(gammas)
        self.seen: list[RoundOutcome] = []
        self.prompts = 0

    def begin_prompt(self):
        self.prompts += 1

    def next_gamma(self):
        return next(self.gammas)

    def observe(self, outcome):
        self.seen.append(outcome)


def test_policy_is_told_every_round_and_gamma_trace_is_before_capping(pair):
    _, target, draft, prompts = pair
    policy = _RecordingPolicy([3, 1, 7])
    out = SpeculativeRunner(target, ModelDrafter(draft, []), policy, []).generate(prompts[0], 25)
    assert policy.prompts == 1
    assert [o.accepted for o in policy.seen] == out.rounds.accepted
    assert [o.drafted for o in policy.seen] == out.rounds.drafted
    assert [o.gamma for o in policy.seen] == out.rounds.gamma
    assert out.rounds.gamma[:3] == [3, 1, 7]
    assert out.tokens == AutoregressiveRunner(target, []).generate(prompts[0], 25).tokens


class _StopBelow(FixedGamma):
    needs = frozenset({"confidence"})

    def __init__(self, gamma_init, tau):
        super().__init__(gamma_init)
        self.tau = tau

    def stop_drafting(self, step):
        return step.confidence < self.tau


def test_confidence_stop_cuts_drafting_and_stays_lossless(pair):
    _, target, draft, prompts = pair
    out = SpeculativeRunner(target, ModelDrafter(draft, []), _StopBelow(8, 1.1), []).generate(prompts[0], 20)
    assert max(out.rounds.drafted) == 1  # every token is below 1.1: one token per round
    ref = AutoregressiveRunner(target, []).generate(prompts[0], 20)
    assert out.tokens == ref.tokens


# ----------------------------------------------------------------- speculative sampling is lossless

def _tv(p: dict, q: dict) -> float:
    keys = set(p) | set(q)
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in keys)


@pytest.mark.slow
def test_verify_sampling_single_step_matches_target_distribution():
    """One position, vocabulary of 6: the emitted token's law is p (20k samples, TV < 0.02)."""
    gen = torch.Generator().manual_seed(0)
    p_logits = torch.tensor([[2.0, 0.5, -1.0, 1.0, 0.0, -0.5], [0.0] * 6])
    p = torch.softmax(p_logits[0], -1)
    q = torch.softmax(torch.tensor([-1.0, 2.0, 1.0, 0.0, -2.0, 0.5]), -1)
    n = 20000
    counts = torch.zeros(6)
    for _ in range(n):
        x = int(torch.multinomial(q, 1, generator=gen))
        accepted, nxt = verify_sampling([x], q[None], p_logits, 1.0, gen)
        counts[x if accepted else nxt] += 1
    emp = counts / n
    tv = 0.5 * float((emp - p).abs().sum())
    assert tv < 0.02, (emp, p)
    # the test can fail: the draft's own law is far from p
    assert 0.5 * float((q - p).abs().sum()) > 0.2


def _exact_sequence_law(model, prompt, length, temperature):
    """P(x_1..x_length | prompt) for every sequence, by enumeration."""
    vocab = model.config.vocab_size
    law = {}
    with torch.inference_mode():
        for seq in itertools.product(range(vocab), repeat=length):
            ids = torch.tensor([prompt + list(seq)], device=model.device)
            logits = model(ids).logits[0, len(prompt) - 1 : len(prompt) - 1 + length]
            logp = torch.log_softmax(logits / temperature, -1)
            law[seq] = math.exp(sum(float(logp[i, s]) for i, s in enumerate(seq)))
    return law


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [1, 3])
def test_speculative_sampling_preserves_the_target_sequence_distribution(gamma):
    """Vocabulary 4, 3 new tokens (64 sequences): empirical law of 4000 speculative samples vs the
    target's exact law. Tolerance: TV < 0.06 (sampling noise alone is ~0.04 here); the draft's own
    law is > 0.15 away, so a sampler that ignored the target would fail."""
    vocab, length, temperature = 4, 3, 1.0
    target = tiny.tiny_model(vocab, seed=11, hidden=16, layers=1)
    draft = tiny.tiny_model(vocab, seed=12, hidden=16, layers=1)
    with torch.no_grad():  # sharpen both so they disagree clearly
        target.lm_head.weight.mul_(8.0)
        draft.lm_head.weight.mul_(8.0)
    target, draft = target.to(tiny.TEST_DEVICE), draft.to(tiny.TEST_DEVICE)  # SPECBENCH_TEST_DEVICE=cuda: on a GPU
    prompt = [1, 2]
    exact = _exact_sequence_law(target, prompt, length, temperature)
    draft_law = _exact_sequence_law(draft, prompt, length, temperature)
    assert _tv(exact, draft_law) > 0.15
    gen = torch.Generator(device=tiny.TEST_DEVICE).manual_seed(1234)
    runner = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(gamma), [], sampling=temperature)
    n = 4000
    counts: dict = {}
    for _ in range(n):
        seq = tuple(runner.generate(prompt, length, gen).tokens)
        counts[seq] = counts.get(seq, 0) + 1
    emp = {k: v / n for k, v in counts.items()}
    assert _tv(emp, exact) < 0.06
