"""The policy interface in the loop (issue 14, the γ-policy lab): the drafter computes only the features a policy
asks for (``needs``; ``runners.engine.features``) and hands it typed, positioned steps; γ = 0 is a plain target
step; a peek drafts one token and verifies none, in real runs and in the replay alike."""

from __future__ import annotations

import pytest
import torch

from methods.base import COSTS, DraftStep, FixedGamma, RoundOutcome
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.replay.oracle import PEEK, ScriptedPolicy
from runners.replay.replay import replay
from runners.replay.trace_build import build_trace
from specbench.latency import LatencyModel


class _Recorder(FixedGamma):
    def __init__(self, gamma, needs):
        super().__init__(gamma)
        self.needs = frozenset(needs)
        self.steps: list[DraftStep] = []
        self.outcomes: list[RoundOutcome] = []

    def stop_drafting(self, s):
        self.steps.append(s)
        return False

    def observe(self, outcome):
        self.outcomes.append(outcome)


def test_features_are_computed_only_when_asked(noisy_pair, monkeypatch):
    from runners.engine import features

    _, target, draft, prompts = noisy_pair
    with monkeypatch.context() as m:  # no feature asked: no softmax at all
        m.setattr(torch, "softmax", lambda *a, **k: (_ for _ in ()).throw(AssertionError("softmax computed")))
        assert features.draft_features(torch.zeros(5), 1, ()) == {}
    for needs in ((), ("entropy",), ("confidence", "margin"), ("confidence", "entropy", "margin", COSTS)):
        policy = _Recorder(4, needs)
        out = SpeculativeRunner(target, ModelDrafter(draft, []), policy, []).generate(prompts[0], 24)
        assert out.tokens == AutoregressiveRunner(target, []).generate(prompts[0], 24).tokens
        assert policy.steps and all(s.budget >= s.position >= 1 for s in policy.steps)
        for name in ("confidence", "entropy", "margin"):
            assert all((getattr(s, name) is not None) == (name in needs) for s in policy.steps), (needs, name)
        assert bool(out.rounds.confidences[0]) == ("confidence" in needs)  # records hold what was computed
        timed = [o.round_ms is not None for o in policy.outcomes]
        assert all(timed) if COSTS in needs else not any(timed)
        for o in policy.outcomes:
            assert len(o.steps) == o.drafted and [s.position for s in o.steps] == list(range(1, o.drafted + 1))
            if COSTS in needs:
                assert 0 < o.draft_ms + o.verify_ms <= o.round_ms
    s = policy.steps[0]
    assert 0 < s.confidence <= 1 and s.entropy >= 0 and 0 <= s.margin <= s.confidence


def test_gamma_zero_is_a_plain_target_step(noisy_pair):
    _, target, draft, prompts = noisy_pair
    policy = ScriptedPolicy([0, 0, 3, 0, 5] + [2] * 40)
    out = SpeculativeRunner(target, ModelDrafter(draft, []), policy, []).generate(prompts[1], 30)
    assert out.tokens == AutoregressiveRunner(target, []).generate(prompts[1], 30).tokens
    assert out.rounds.gamma[:5] == [0, 0, 3, 0, 5] and out.rounds.drafted[0] == out.rounds.drafted[1] == 0
    assert out.rounds.accepted[0] == 0


def test_a_peek_drafts_one_token_and_verifies_none_in_real_runs_and_replay(noisy_pair):
    _, target, draft, prompts = noisy_pair
    script = [PEEK, 3, PEEK, 0, 2, PEEK] * 10
    out = SpeculativeRunner(target, ModelDrafter(draft, []), ScriptedPolicy(script), []).generate(prompts[2], 30)
    assert out.tokens == AutoregressiveRunner(target, []).generate(prompts[2], 30).tokens
    assert out.rounds.drafted[:4] == [0, out.rounds.drafted[1], 0, 0] and out.rounds.discarded[:4] == [1, 0, 1, 0]
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.5), round_overhead_ms=0.25)
    tr = build_trace(target, draft, prompts[2], 30, [])
    rep = replay(tr, ScriptedPolicy(script), lat)
    assert (rep.rounds.drafted, rep.rounds.accepted, rep.rounds.discarded) == (
        out.rounds.drafted, out.rounds.accepted, out.rounds.discarded)
    # a peek costs its draft forward and a one-token verification
    assert rep.round_ms[0] == pytest.approx(lat.draft_ms(tr.prompt_tokens + 1, 0) + lat.verify_ms(1, tr.prompt_tokens)
                                            + 0.25)
