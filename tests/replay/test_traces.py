"""Traces for the γ-policy lab (issue 14; ``runners.replay.trace``, ``trace_build``, ``trace_lookup``): default
traces never refuse a policy, version-1 traces are refused with the command that rebuilds them, prompt lookup
traces replay real runs exactly, a trace reuses another pair's target output, and JSON keeps every feature."""

from __future__ import annotations

import itertools
import json

import pytest

from methods.base import COSTS, FixedGamma, policy_needs
from methods.policies import build_policy
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.engine.speculative import SpeculativeRunner
from runners.replay.grid import MethodSpec, load_method
from runners.replay.replay import replay_job
from runners.replay.trace import Trace, read_traces, write_traces
from runners.replay.trace_build import build_trace
from runners.replay.trace_lookup import LookupTrace, build_lookup_trace

from helpers.policy_lab import latency_json


def test_default_traces_never_refuse_a_policy(noisy_pair):
    _, target, draft, prompts = noisy_pair
    traces = [build_trace(target, draft, ids, 30, [], prompt_id=str(i)) for i, ids in enumerate(prompts)]
    assert all(tr.gamma_max == 29 for tr in traces)
    for gamma in (29, 100):  # any γ: a round drafts at most remaining − 1 tokens, and the trace holds them
        reps = replay_job(traces, FixedGamma(gamma))
        assert max(d for r in reps for d in r.rounds.drafted) > 20
    replay_job(traces, build_policy("hf_heuristic", 60, {"transient": False}))  # γ = 39 was refused with 32
    for name in ("banditspec", "smartspec", "cost_aware", "tapout"):
        replay_job(traces, build_policy(name, 24, {"transient": False}))


def test_old_traces_are_refused_with_the_command_that_rebuilds_them(noisy_pair, tmp_path):
    _, target, draft, prompts = noisy_pair
    tr = build_trace(target, draft, prompts[0], 8, [])
    assert tr.draft_entropy is not None and len(tr.draft_margin) == tr.n - 1
    obj = tr.to_json()
    obj["trace_version"] = 1
    (tmp_path / "trace.jsonl").write_text(json.dumps(obj) + "\n")
    with pytest.raises(ValueError, match=r"older than .*python -m runners.replay trace"):
        read_traces(tmp_path / "trace.jsonl")


@pytest.mark.slow
def test_lookup_traces_replay_real_runs_exactly(noisy_pair, tmp_path):
    _, target, _, prompts = noisy_pair
    drafter = PromptLookupDrafter(eos_token_ids=[])
    traces = [build_lookup_trace(target, drafter, ids, 36, [], prompt_id=str(i)) for i, ids in enumerate(prompts)]
    write_traces(tmp_path / "trace.jsonl", traces)
    back = read_traces(tmp_path / "trace.jsonl")
    assert all(isinstance(t, LookupTrace) and t.proposals == s.proposals for t, s in zip(back, traces))
    assert sum(t.agreements.count(0) < len(t.agreements) for t in traces) >= 2  # the lookups do match
    lat = latency_json(tmp_path, {k: 10.0 + k for k in range(1, 40)}, 0.0)
    methods = ["specdecode", "hf_heuristic", "gammatune", "smartspec", "cost_aware", "banditspec"]
    drafted = 0
    for name, gamma in itertools.product(methods, (1, 4, 12)):
        spec = load_method(name)
        if COSTS in policy_needs(spec.build(gamma)):
            spec = MethodSpec(name, spec.policy, {**spec.params, "latency": lat})
        real_policy, policy = spec.build(gamma), spec.build(gamma)
        reps = replay_job(back, policy)
        for ids, rep in zip(prompts, reps):
            out = SpeculativeRunner(target, drafter, real_policy, []).generate(ids, 36)
            assert (out.rounds.gamma, out.rounds.drafted, out.rounds.accepted) == (
                rep.rounds.gamma, rep.rounds.drafted, rep.rounds.accepted), (name, gamma)
            assert out.tokens == rep.trace.tokens
            drafted += sum(out.rounds.drafted)
    assert drafted > 0


def test_a_trace_can_reuse_another_pairs_target_output(noisy_pair):
    _, target, draft, prompts = noisy_pair
    model = build_trace(target, draft, prompts[0], 20, [])
    lookup = build_lookup_trace(None, PromptLookupDrafter(), prompts[0], 20, [], reuse=model)  # no target needed
    assert lookup.tokens == model.tokens and lookup.ar_wall_ms == model.ar_wall_ms
    again = build_trace(None, draft, prompts[0], 20, [], reuse=lookup)
    assert again.draft_next == model.draft_next and again.tails.keys() == model.tails.keys()
    with pytest.raises(ValueError, match="another prompt"):
        build_trace(None, draft, prompts[1], 20, [], reuse=model)


def test_trace_json_keeps_every_feature_bit_exact(noisy_pair, tmp_path):
    _, target, draft, prompts = noisy_pair
    tr = build_trace(target, draft, prompts[3], 20, [])
    write_traces(tmp_path / "t.jsonl", [tr])
    (back,) = read_traces(tmp_path / "t.jsonl")
    assert isinstance(back, Trace) and back.draft_entropy == tr.draft_entropy and back.draft_margin == tr.draft_margin
    assert back.tail_features == tr.tail_features and tr.tail_features.keys() == tr.tails.keys()
