"""Exact output laws on toy models, for the sampling-exactness tests (``tests/engine/test_sampling.py``,
``tests/drafters/test_hetero_tli_order.py``): every random decision of the loop goes through an enumerating
chooser (``methods.hetero.sampling.enumerate_outcomes``), so a generation's law is computed, not
sampled; ``processed_law`` is the target's own law under a ``Sampling`` to compare it with."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import torch

import runners.engine.verify as verify
from methods.hetero.sampling import bernoulli as chooser_bernoulli
from methods.hetero.sampling import enumerate_outcomes
from runners.engine.verify import Sampling, probs


class _Current:
    chooser = None


def _choice(p: torch.Tensor, generator=None) -> int:
    w = p.double()
    return _Current.chooser.choice((w / w.sum()).tolist())


def _bernoulli(prob: float, generator=None, device="cpu") -> bool:
    return chooser_bernoulli(_Current.chooser, prob)


def enumerated_law(monkeypatch: Any, modules: Iterable[ModuleType]) -> Callable[[Callable[[], Any]], dict]:
    """Route ``sample`` of each of ``modules`` and ``verify.bernoulli`` through the enumerating chooser;
    returns ``law(make_tokens)``: the exact law of ``tuple(make_tokens())``."""
    for module in modules:
        monkeypatch.setattr(module, "sample", _choice)
    monkeypatch.setattr(verify, "bernoulli", _bernoulli)

    def law(make_tokens: Callable[[], Any]) -> dict:
        def run(chooser):
            _Current.chooser = chooser
            return tuple(make_tokens())

        return enumerate_outcomes(run)

    return law


def processed_law(model: Any, prompt: list[int], length: int, sampling: Sampling) -> dict:
    """The target's own law of ``length`` new tokens, every position processed by ``sampling``."""
    vocab = model.config.vocab_size
    out = {}
    with torch.inference_mode():
        for seq in itertools.product(range(vocab), repeat=length):
            logits = model(torch.tensor([prompt + list(seq)], device=next(model.parameters()).device)).logits[0, len(prompt) - 1: len(prompt) - 1 + length]
            p = probs(logits, sampling).double()
            out[seq] = math.prod(float(p[i, s]) for i, s in enumerate(seq))
    return {k: v for k, v in out.items() if v > 0}
