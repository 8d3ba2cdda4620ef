"""Issue 41, item 5: the default job's hybrid drafter in the lab. A ``HybridTrace`` (the draft model's rollouts and
the lookup's proposals on the same output) replays every policy exactly as ``SpeculativeRunner`` runs the hybrid
drafter: the same γ, drafted and accepted tokens per round, lookup rounds and model rounds alike. Tiny models."""

from __future__ import annotations

import json

import pytest

from methods.policies import build_policy
from runners.drafters.hybrid import HybridDrafter
from runners.drafters.model import ModelDrafter
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.engine.speculative import SpeculativeRunner
from runners.replay.replay import replay
from runners.replay.trace import HybridTrace, Trace, hybrid_of
from runners.replay.trace_build import build_trace
from specbench.latency import LatencyModel

from helpers import tiny

MAX_NEW = 32


@pytest.fixture(scope="module")
def pair():
    tok = tiny.tiny_tokenizer()
    target, draft = tiny.sharp_pair(len(tok))
    # repetitive prompts, so that the lookup finds matches in some rounds and not in others
    texts = ("one two three one two three one two", "the cat the cat the dog", "a b c d e f g a b c")
    return target, draft, [tok.encode(t) for t in texts]


def _hybrid(draft, eos, min_lookup, max_model):
    return HybridDrafter(ModelDrafter(draft, eos), PromptLookupDrafter(2, 1, eos), min_lookup, max_model)


@pytest.mark.parametrize("min_lookup, max_model", [(1, None), (2, 2)])
@pytest.mark.parametrize("method, gamma", [("fixed", 3), ("fixed", 6), ("gammatune", 4), ("hf_heuristic", 2),
                                           ("assistant_threshold", 5)])
def test_the_replay_of_a_hybrid_trace_equals_the_real_hybrid_drafter(pair, min_lookup, max_model, method, gamma):
    target, draft, prompts = pair
    eos: list[int] = []
    lookups = models = 0
    for ids in prompts:
        drafter = _hybrid(draft, eos, min_lookup, max_model)
        out = SpeculativeRunner(target, drafter, build_policy(method, gamma, {}), eos).generate(ids, MAX_NEW)
        trace = hybrid_of(build_trace(target, draft, ids, MAX_NEW, eos, gamma_max=None), PromptLookupDrafter(2, 1, eos),
                          ids, min_lookup, max_model)
        rep = replay(trace, build_policy(method, gamma, {}))
        assert out.tokens == trace.tokens
        assert rep.rounds.gamma == out.rounds.gamma and rep.rounds.drafted == out.rounds.drafted, (ids, method)
        assert rep.rounds.accepted == out.rounds.accepted, (ids, method)
        lookups += drafter.lookup_rounds
        models += drafter.model_rounds
    assert lookups > 0 and models > 0  # both proposers were exercised


def test_a_hybrid_trace_round_trips_and_lookup_rounds_bill_no_draft(pair):
    target, draft, prompts = pair
    ids = prompts[0]
    trace = hybrid_of(build_trace(target, draft, ids, MAX_NEW, [], gamma_max=None), PromptLookupDrafter(2, 1, []), ids)
    again = Trace.from_json(trace.to_json())
    assert isinstance(again, HybridTrace) and again.lookup == trace.lookup and again.tokens == trace.tokens
    assert again.to_json() == trace.to_json()
    # a draft forward costs 100 ms, a target forward 1 ms: the rounds' draft costs are the model rounds' only
    lat = LatencyModel.affine(target=(1.0, 0.0), draft=(100.0, 0.0))
    res = replay(trace, build_policy("fixed", 3, {}), lat)
    sources = []
    t = 1
    for a in res.rounds.accepted:
        sources.append(trace.source(t, min(3, trace.n - t - 1)))
        t = min(t + a + 1, trace.n)
    for ms, src, d in zip(res.round_ms, sources, res.rounds.drafted):
        assert (ms < 50) == (src == "lookup" or d == 0), (ms, src, d)
    assert "lookup" in sources


def test_the_trace_command_traces_a_hybrid_pair(tiny_conf, tmp_path):
    """``python -m runners.replay trace`` on a hybrid pair (the default job's kind) writes hybrid traces that a
    grid replays, with the oracle left out and said so (before: a one-line refusal, 'neither a model nor prompt
    lookup')."""
    import yaml
    from omegaconf import OmegaConf

    from runners.replay.commands import main, trace_config
    from runners.replay.trace import read_traces
    from specbench.config import JobConfig

    from helpers import compose

    node = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    node["draft"].update(kind="hybrid", max_ngram_size=2, min_ngram_size=1, min_lookup_tokens=1, max_model_tokens=None)
    cfg = OmegaConf.to_container(compose("task.n_prompts=2", "max_new_tokens=16"), resolve=True)
    cfg["pair"] = node
    path = trace_config(JobConfig.from_mapping(cfg), tmp_path / "traces", progress=False)
    traces = read_traces(path)
    assert traces and all(isinstance(tr, HybridTrace) for tr in traces)
    assert all(len(tr.lookup) == tr.n - 1 for tr in traces)
    (tmp_path / "lat.json").write_text(json.dumps(LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.0)).to_json()))
    assert main(["grid", str(tmp_path / "traces"), "--methods", "specdecode", "gammatune", "--gammas", "2,4",
                 "--latency", str(tmp_path / "lat.json"), "--out", str(tmp_path / "grid")]) == 0
