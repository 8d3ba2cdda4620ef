"""Draft features a γ policy may ask for (``methods.base.FEATURES``), computed once, one way.

``draft_features(logits, token, needs, probs=None)`` returns the features named in ``needs``
for one drafted token, from the distribution it was drawn from:

* ``confidence`` = ``p(token)``: for a greedy draft ``float(softmax(logits.float())[token])``,
  bit for bit what ``ModelDrafter`` has always passed to ``stop_drafting`` (and what
  ``runners.trace`` stores); at temperature > 0 the probability under the processed
  distribution ``probs`` it was sampled from;
* ``entropy`` = ``−Σ_v p(v) log p(v)`` in nats (``torch.special.entr``; ``0·log 0 = 0``);
* ``margin`` = ``p(top-1) − p(top-2)``.

Nothing is computed when ``needs`` names no feature (no softmax at all); ``ALL`` computes
every feature (what traces store, so a replay can serve any policy).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from methods.base import FEATURES

ALL = FEATURES


def draft_features(logits: Any, token: int, needs: Iterable[str], probs: Any = None) -> dict[str, float]:
    """``{feature: value}`` for the features in ``needs`` (module docstring)."""
    wanted = FEATURES.intersection(needs)
    if not wanted:
        return {}
    import torch

    p = probs if probs is not None else torch.softmax(logits.float(), dim=-1)
    out: dict[str, float] = {}
    if "confidence" in wanted:
        out["confidence"] = float(p[token])
    if "entropy" in wanted:
        out["entropy"] = float(torch.special.entr(p.float()).sum())
    if "margin" in wanted:
        top2 = torch.topk(p.float(), 2).values if p.shape[-1] > 1 else None
        out["margin"] = float(top2[0] - top2[1]) if top2 is not None else 1.0
    return out
