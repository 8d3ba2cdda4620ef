"""Random choices behind one interface, so one algorithm can be *sampled* or *enumerated exactly*.

An algorithm takes a ``Chooser`` and calls ``chooser.choice(probs)`` (and ``bernoulli``)
for every random decision. ``TorchChooser`` samples with a ``torch.Generator``;
``enumerate_outcomes(fn)`` runs ``fn`` on every branch of its decisions and returns
each outcome with its exact probability (a product of float64 branch probabilities),
so tests check losslessness to 1e-9 with no sampling noise, on the same code path
that samples.

``verify_token`` is standard speculative sampling at one position (Leviathan et al.
2023, Alg. 1; Chen et al. 2023): accept ``x ~ q`` with probability ``min(1, p(x)/q(x))``,
else resample from ``normalize(max(0, p - q))``. It is the rule of
``runners.verify.verify_sampling``, written over plain sequences for toy vocabularies.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, TypeVar

import torch

T = TypeVar("T", bound=Hashable)


class Chooser(Protocol):
    def choice(self, probs: Sequence[float]) -> int:
        """An index drawn with probability ``probs[i]`` (``probs`` sums to 1)."""
        ...


def bernoulli(chooser: Chooser, prob: float) -> bool:
    prob = min(1.0, max(0.0, float(prob)))
    return chooser.choice([1.0 - prob, prob]) == 1


def normalize(weights: Sequence[float]) -> list[float]:
    total = float(sum(weights))
    if not total > 0.0:
        raise ValueError("cannot normalize weights that sum to zero")
    return [float(w) / total for w in weights]


class TorchChooser:
    """Samples with ``torch.multinomial`` (a ``torch.Generator`` for reproducibility)."""

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator

    def choice(self, probs: Sequence[float]) -> int:
        t = torch.as_tensor(probs, dtype=torch.float64)
        return int(torch.multinomial(t, 1, generator=self.generator).item())


class _Branch(Exception):
    def __init__(self, probs: list[float]) -> None:
        self.probs = probs


class _Replay:
    """Replays a fixed prefix of choices; the first choice past it raises ``_Branch``."""

    def __init__(self, prefix: list[int]) -> None:
        self.prefix = prefix
        self.pos = 0

    def choice(self, probs: Sequence[float]) -> int:
        if self.pos < len(self.prefix):
            i = self.prefix[self.pos]
            self.pos += 1
            return i
        raise _Branch([float(p) for p in probs])


def enumerate_outcomes(fn: Callable[[Chooser], T], max_runs: int = 200_000) -> dict[T, float]:
    """Every outcome of ``fn`` with its exact probability (branches of probability 0 pruned).

    ``fn`` must be deterministic given its choices (it is re-run once per branch).
    """
    out: dict[T, float] = {}
    stack: list[tuple[list[int], float]] = [([], 1.0)]
    runs = 0
    while stack:
        prefix, prob = stack.pop()
        runs += 1
        if runs > max_runs:
            raise RuntimeError(f"more than max_runs={max_runs} branches to enumerate")
        try:
            result = fn(_Replay(prefix))
        except _Branch as branch:
            total = sum(branch.probs)
            if abs(total - 1.0) > 1e-9:
                raise ValueError(f"choice probabilities sum to {total}, not 1") from None
            for i, p in enumerate(branch.probs):
                if p > 0.0:
                    stack.append((prefix + [i], prob * p))
            continue
        out[result] = out.get(result, 0.0) + prob
    return out


def acceptance_probability(p: Sequence[float], q: Sequence[float]) -> float:
    """``sum_x min(p(x), q(x))``: the chance speculative sampling accepts ``x ~ q`` (Leviathan et al.)."""
    return float(sum(min(float(a), float(b)) for a, b in zip(p, q, strict=True)))


def residual(p: Sequence[float], q: Sequence[float]) -> list[float]:
    """``normalize(max(0, p - q))`` (the target's distribution at a rejection)."""
    return normalize([max(0.0, float(a) - float(b)) for a, b in zip(p, q, strict=True)])


def verify_token(p: Sequence[float], q: Sequence[float], x: int, chooser: Chooser) -> tuple[bool, int]:
    """Standard speculative sampling of one drafted token ``x ~ q`` against target ``p``.

    Returns ``(accepted, token)``: ``(True, x)`` or ``(False, y)`` with ``y`` from the residual.
    """
    px, qx = float(p[x]), float(q[x])
    if qx <= 0.0:
        raise ValueError(f"token {x} was proposed with q(x) = 0")
    if bernoulli(chooser, min(1.0, px / qx)):
        return True, x
    return False, chooser.choice(residual(p, q))
