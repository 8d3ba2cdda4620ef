"""PromptLookupDrafter: n-gram lookup in the sequence so far (no model)."""

from __future__ import annotations

import random

import pytest
import torch

from methods.base import FixedGamma
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.engine.base import Draft, Drafter


class NoAskPolicy(FixedGamma):
    """Fails if the drafter asks for a confidence stop (it has no confidences)."""

    def stop_drafting(self, step) -> bool:  # pragma: no cover - must not be called
        raise AssertionError("prompt lookup has no confidences; stop_drafting must not be asked")


def propose(drafter: PromptLookupDrafter, ids: list[int], max_tokens: int) -> Draft:
    return drafter.propose(ids, max_tokens, NoAskPolicy(4), 0.0, None)


def test_is_a_drafter_and_returns_a_deterministic_draft():
    d = PromptLookupDrafter()
    assert isinstance(d, Drafter) and d.name == "prompt_lookup"
    draft = propose(d, [1, 2, 3, 4, 1, 2], 3)
    assert draft.tokens == [3, 4, 1]
    assert draft.q is None and draft.confidences == []


def test_longer_ngram_takes_priority():
    # last 2 tokens (7, 8) occur once at the start -> 9; the 1-gram (8) alone also occurs later -> 5
    ids = [7, 8, 9, 9, 8, 5, 6, 7, 8]
    assert PromptLookupDrafter(max_ngram_size=2).lookup(ids, 2) == [9, 9]
    assert PromptLookupDrafter(max_ngram_size=1).lookup(ids, 2) == [9, 9]  # first 1-gram match: index 1
    assert PromptLookupDrafter(max_ngram_size=1, match="last").lookup(ids, 2) == [5, 6]


def test_first_match_is_the_earliest_occurrence_and_last_the_most_recent():
    ids = [1, 2, 10, 11, 1, 2, 20, 21, 1, 2]
    assert PromptLookupDrafter(match="first").lookup(ids, 2) == [10, 11]
    assert PromptLookupDrafter(match="last").lookup(ids, 2) == [20, 21]


def test_caps_at_max_tokens_and_at_the_end_of_the_sequence():
    d = PromptLookupDrafter(max_ngram_size=2)
    ids = [1, 2, 3, 4, 5, 6, 1, 2]
    assert d.lookup(ids, 3) == [3, 4, 5]
    assert d.lookup(ids, 100) == [3, 4, 5, 6, 1, 2]  # never past the sequence end
    assert propose(d, ids, 0).tokens == []


def test_overlapping_match_in_a_repetition():
    assert PromptLookupDrafter().lookup([5, 5, 5], 4) == [5]
    assert PromptLookupDrafter().lookup([1, 2, 1, 2, 1, 2], 10) == [1, 2, 1, 2]


def test_no_match_gives_an_empty_draft():
    d = PromptLookupDrafter()
    assert propose(d, [1, 2, 3, 4], 5).tokens == []
    assert propose(d, [], 5).tokens == []
    assert propose(d, [7], 5).tokens == []


def test_min_ngram_size_refuses_short_matches():
    ids = [4, 9, 1, 2, 3, 9]  # only the 1-gram (9) matches
    assert PromptLookupDrafter(max_ngram_size=3, min_ngram_size=1).lookup(ids, 2) == [1, 2]
    assert PromptLookupDrafter(max_ngram_size=3, min_ngram_size=2).lookup(ids, 2) == []


def test_stops_after_an_eos_token_and_keeps_it():
    d = PromptLookupDrafter(eos_token_ids=[0, 99])
    assert d.lookup([1, 2, 3, 99, 4, 5, 1, 2], 5) == [3, 99]
    assert d.lookup([1, 2, 0, 7, 1, 2], 5) == [0]
    assert PromptLookupDrafter(eos_token_ids=99).lookup([1, 2, 3, 99, 4, 1, 2], 5) == [3, 99]
    assert PromptLookupDrafter(eos_token_ids=None).lookup([1, 2, 3, 99, 4, 1, 2], 5) == [3, 99, 4, 1, 2]


def test_accepts_a_tensor():
    assert PromptLookupDrafter().lookup(torch.tensor([1, 2, 3, 1, 2]), 2) == [3, 1]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_ngram_size": 0},
        {"max_ngram_size": 2, "min_ngram_size": 3},
        {"min_ngram_size": 0},
        {"max_ngram_size": 2.5},
        {"max_ngram_size": True},
        {"match": "longest"},
    ],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        PromptLookupDrafter(**kwargs)


def _prompt_lookup_pair():
    from specbench.config import JobConfig

    from helpers import compose

    return JobConfig.from_mapping(compose("pair=gemma3-270m_prompt-lookup")).pair


def test_from_pair_config():
    pair = _prompt_lookup_pair()
    d = PromptLookupDrafter.from_options(pair.draft.options, eos_token_ids=[1, 106])
    assert (d.max_ngram_size, d.min_ngram_size, d.match) == (
        pair.draft.options["max_ngram_size"],
        pair.draft.options["min_ngram_size"],
        pair.draft.options["match"],
    )
    assert d.eos_token_ids == {1, 106}


def _transformers_candidates(ids: list[int], num_tokens: int, max_ngram: int, eos: list[int] | None = None):
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    gen = PromptLookupCandidateGenerator(
        eos_token_id=None if eos is None else torch.tensor(eos),
        num_output_tokens=num_tokens,
        max_matching_ngram_size=max_ngram,
        max_length=10**6,
    )
    out, _ = gen.get_candidates(torch.tensor([ids]))
    return out[0, len(ids) :].tolist()


def test_matches_transformers_prompt_lookup():
    rng = random.Random(0)
    checked = 0
    for _ in range(300):
        length = rng.randint(2, 40)
        ids = [rng.randrange(6) for _ in range(length)]  # a small vocabulary: plenty of matches
        num_tokens = rng.randint(1, 8)
        max_ngram = rng.randint(1, 4)
        ours = PromptLookupDrafter(max_ngram_size=max_ngram, min_ngram_size=1).lookup(ids, num_tokens)
        assert ours == _transformers_candidates(ids, num_tokens, max_ngram), (ids, num_tokens, max_ngram)
        checked += bool(ours)
    assert checked > 100  # the comparison saw real proposals


def test_eos_differs_from_transformers_only_by_keeping_the_eos():
    rng = random.Random(1)
    for _ in range(200):
        ids = [rng.randrange(6) for _ in range(rng.randint(2, 30))]
        ours = PromptLookupDrafter(max_ngram_size=3, eos_token_ids=[0]).lookup(ids, 6)
        theirs = _transformers_candidates(ids, 6, 3, eos=[0])
        if 0 in ours:
            assert ours[-1] == 0 and ours.count(0) == 1 and theirs == ours[:-1]
        else:
            assert ours == theirs


def test_registered_as_the_prompt_lookup_drafter():
    from runners.drafters import DrafterContext, build_drafter

    pair = _prompt_lookup_pair()
    d = build_drafter("prompt_lookup", DrafterContext(None, [1], 10, options=pair.draft.options))
    assert isinstance(d, PromptLookupDrafter) and d.eos_token_ids == {1}
