"""The hybrid drafter (prompt lookup, else the draft model) on tiny seeded models."""

from __future__ import annotations

import pytest
import torch

from methods.base import FixedGamma
from runners.drafters import DRAFTERS, DrafterContext, build_drafter, check_drafter
from runners.drafters.hybrid import HybridDrafter
from runners.drafters.model import ModelDrafter
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.registry import ConfigError

from helpers import tiny


@pytest.fixture(scope="module")
def pair():
    tok = tiny.tiny_tokenizer()
    target = tiny.tiny_model(len(tok), seed=1, layers=2)
    draft = tiny.tiny_model(len(tok), seed=2, layers=1)
    prompts = [tok.encode(t) for t in ("one two three four one two three four one two", "the quick brown fox",
                                       "a cat sat on the mat and the dog sat on the")]
    return target, draft, prompts


def _hybrid(draft, **kw) -> HybridDrafter:
    return HybridDrafter(ModelDrafter(draft, []), PromptLookupDrafter(max_ngram_size=3, min_ngram_size=1), **kw)


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_outputs_stay_the_targets_and_both_sources_are_used(pair, gamma):
    target, draft, prompts = pair
    lookups = models = 0
    for ids in prompts:
        ref = AutoregressiveRunner(target, []).generate(ids, 40).tokens
        hybrid = _hybrid(draft)
        out = SpeculativeRunner(target, hybrid, FixedGamma(gamma), []).generate(ids, 40)
        assert out.tokens == ref
        assert hybrid.model.seq == (ids + out.tokens)[: len(hybrid.model.seq)]  # the model's cache follows the sequence
        lookups += hybrid.lookup_rounds
        models += hybrid.model_rounds
    assert lookups > 0 and models > 0


class _ReadsConfidence(FixedGamma):
    """A fixed γ that asks for the draft's confidences, so model rounds carry them (lookup rounds have none)."""

    needs = frozenset({"confidence"})


def test_model_rounds_are_capped_and_lookup_rounds_are_not(pair):
    target, draft, prompts = pair
    hybrid = _hybrid(draft, max_model_tokens=2)
    out = SpeculativeRunner(target, hybrid, _ReadsConfidence(6), []).generate(prompts[0], 40)
    with_confidences = [d for d, c in zip(out.rounds.drafted, out.rounds.confidences) if c]  # model rounds
    assert with_confidences and max(with_confidences) <= 2
    assert hybrid.lookup_rounds > 0 and max(out.rounds.drafted) > 2
    assert out.draft_forwards == sum(with_confidences)  # lookup rounds cost no draft-model forward


def test_min_lookup_tokens_sends_short_matches_to_the_model(pair):
    target, draft, prompts = pair
    always_model = _hybrid(draft, min_lookup_tokens=10**6)
    SpeculativeRunner(target, always_model, FixedGamma(3), []).generate(prompts[0], 20)
    assert always_model.lookup_rounds == 0 and always_model.model_rounds > 0


def test_sampling_runs_and_respects_the_budget(pair):
    target, draft, prompts = pair
    gen = torch.Generator().manual_seed(0)
    out = SpeculativeRunner(target, _hybrid(draft), FixedGamma(4), [], sampling=0.8).generate(prompts[0], 24, gen)
    assert len(out.tokens) == 24


def test_registered_and_built_from_a_pair_node(pair):
    _, draft, _ = pair
    assert "hybrid" in DRAFTERS
    options = {"max_ngram_size": 3, "min_ngram_size": 2, "match": "last", "min_lookup_tokens": 2,
               "max_model_tokens": 4}
    check_drafter("hybrid", options)
    ctx = DrafterContext(target_tokenizer=None, eos_token_ids=[0], target_vocab_size=0, draft_model=draft,
                         options=options)
    drafter = build_drafter("hybrid", ctx)
    assert isinstance(drafter, HybridDrafter)
    assert (drafter.lookup.min_ngram_size, drafter.lookup.match, drafter.min_lookup_tokens, drafter.max_model_tokens) == (
        2, "last", 2, 4)
    with pytest.raises(ConfigError, match="draft model"):
        build_drafter("hybrid", DrafterContext(None, [0], 0, options=options))
    with pytest.raises(ValueError):
        _hybrid(draft, min_lookup_tokens=0)


@pytest.mark.parametrize("options, key", [
    ({"min_lookup_tokens": 0}, "min_lookup_tokens"),
    ({"max_model_tokens": "many"}, "max_model_tokens"),
    ({"min_ngram_size": 4, "max_ngram_size": 2}, "min_ngram_size"),
    ({"lookahead": 3}, "lookahead"),
])
def test_bad_hybrid_options_fail_before_any_model_loads(options, key):
    with pytest.raises(ConfigError, match=key):
        check_drafter("hybrid", options)


def test_the_hybrid_pair_is_typed_and_prepared():
    from runners.jobs.build import prepare
    from specbench.config import JobConfig

    from helpers import compose

    config = JobConfig.from_mapping(compose("pair=gemma3-270m_hybrid-lookup-int8"))
    draft = config.pair.draft
    assert draft.kind == "hybrid" and config.drafter == "hybrid"
    assert draft.model is not None and draft.model.transform == "int8_dynamic"
    assert draft.options["match"] == "last" and draft.options["min_ngram_size"] == 2
    prepare(config)  # options checked, prompts loaded; no model
    with pytest.raises(ConfigError, match="min_lookup_tokens"):
        prepare(compose("pair=gemma3-270m_hybrid-lookup-int8", "pair.draft.min_lookup_tokens=0"))
    with pytest.raises(ConfigError, match="transformers"):
        prepare(compose("pair=gemma3-270m_hybrid-lookup-int8", "method=hf_native_specdecode"))
