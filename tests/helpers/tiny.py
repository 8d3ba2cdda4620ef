"""Tiny, offline, seeded models and locally trained tokenizers for tests.

Nothing here touches the network: models are built from a config with a fixed
seed; tokenizers are trained on a small built-in corpus.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import NamedTuple

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding drafts tokens with a small model and verifies them with a large one",
    "def add(a, b):\n    return a + b\n",
    "one two three four five six seven eight nine ten",
    "a cat sat on the mat and the dog sat on the log",
    "translate the sentence into french: le chat est sur le tapis",
] * 20

#: Where the exact-law tests put their toy models: ``SPECBENCH_TEST_DEVICE=cuda pytest tests/engine/test_sampling.py``
#: runs them on a GPU (issue 32); CPU by default.
TEST_DEVICE = os.environ.get("SPECBENCH_TEST_DEVICE", "cpu")


@functools.lru_cache(maxsize=8)
def tiny_tokenizer(vocab_size: int = 300, kind: str = "bpe") -> PreTrainedTokenizerFast:
    """A byte-level BPE (``kind='bpe'``) or a character-level (``kind='char'``) tokenizer."""
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<eos>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(CORPUS, trainer)
    elif kind == "char":
        chars = sorted({c for line in CORPUS for c in line})
        vocab = {"<eos>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
        tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
        tok.decoder = decoders.Fuse()
    else:
        raise ValueError(kind)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    return fast


def tiny_model(vocab_size: int, seed: int = 0, hidden: int = 32, layers: int = 2, eos_token_id: int = 0) -> LlamaForCausalLM:
    """A randomly initialised (seeded) tiny Llama, in eval mode, fp32."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        pad_token_id=eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    model.eval()
    return model


class TinyPair(NamedTuple):
    """The tests' tiny pair: a tokenizer, a seeded target and draft, and the prompts encoded."""

    tok: PreTrainedTokenizerFast
    target: LlamaForCausalLM
    draft: LlamaForCausalLM
    prompts: list[list[int]]


def noisy_copy(model: LlamaForCausalLM, scale: float, seed: int = 7, relative_to: str = "std") -> LlamaForCausalLM:
    """A draft that agrees with ``model`` often but not always: a copy with seeded Gaussian noise of ``scale``
    times each parameter's ``std`` (``relative_to="std"``) or mean absolute value (``"abs_mean"``)."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            size = p.std() if relative_to == "std" else p.abs().mean()
            p.add_(torch.randn(p.shape, generator=gen) * scale * size)
    return draft


def sharp_pair(vocab_size: int) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """A sharpened tiny target (its LM head × 50: confident, mostly deterministic choices) and a noisy copy as draft
    (``noisy_copy``, 0.2 × each parameter's mean absolute value): agreement runs of ~1-3 tokens, draft confidences
    spread over ~0.3-0.9 (the replay's exactness tests)."""
    target = tiny_model(vocab_size, seed=1, layers=2)
    with torch.no_grad():
        target.lm_head.weight.mul_(50.0)
    return target, noisy_copy(target, 0.2, seed=3, relative_to="abs_mean")


def tiny_pair(texts: tuple[str, ...] = ("the quick brown fox",), draft: str = "model", noise: float = 0.2,
              noise_seed: int = 7, relative_to: str = "std", sharpen: float | None = None) -> TinyPair:
    """The one tiny-pair factory: the BPE tokenizer, a 2-layer target (seed 1), and a draft that is either an
    independent 1-layer model (seed 2; ``draft="model"``) or a noisy copy of the target (``draft="noisy"``,
    :func:`noisy_copy`); ``sharpen`` multiplies the target's LM head first (peaked laws: agreement runs of a
    few tokens). Fresh models on every call: a test may change them."""
    tok = tiny_tokenizer()
    target = tiny_model(len(tok), seed=1, layers=2)
    if sharpen is not None:
        with torch.no_grad():
            target.lm_head.weight.mul_(sharpen)
    if draft == "model":
        drafter = tiny_model(len(tok), seed=2, layers=1)
    elif draft == "noisy":
        drafter = noisy_copy(target, noise, noise_seed, relative_to)
    else:
        raise ValueError(f"draft must be 'model' or 'noisy', got {draft!r}")
    return TinyPair(tok, target, drafter, [tok.encode(t) for t in texts])


def tiny_gemma3(seed: int) -> Gemma3ForCausalLM:
    """A tiny seeded Gemma-3 with one sliding-window layer (window 8) before a full one: the layer kinds of the
    real Gemma-3-270M, for the caches that must hold a sliding window (batched repacks, the static cache)."""
    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
                           layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
                           eos_token_id=None, bos_token_id=None, pad_token_id=0)
    return Gemma3ForCausalLM(cfg).eval()


def toy_pair(vocab: int = 5) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """A 1-layer target (seed 21) and draft (seed 22) on a toy vocabulary, their LM heads × 4 (laws far apart): the
    exact-law tests' pair (``helpers.exact_law``)."""
    target = tiny_model(vocab, seed=21, hidden=16, layers=1)
    draft = tiny_model(vocab, seed=22, hidden=16, layers=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(4.0)
        draft.lm_head.weight.mul_(4.0)
    return target, draft
