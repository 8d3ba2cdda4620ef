"""Verification rules: which drafted tokens the target accepts, and the token it adds.

Both rules are lossless (primer, Sec. 2; Leviathan et al. 2023, Alg. 1; Chen et al. 2023):

* ``verify_greedy`` (temperature 0): accept the longest prefix of the draft that
  matches the target's argmax at each position, then append the target's own
  argmax at the first mismatch (or after the last draft token: the bonus).
* ``verify_sampling`` (temperature > 0): accept draft token ``x_i`` with
  probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first rejection sample the
  replacement from ``normalize(max(0, p_i - q_i))``; if all are accepted sample
  a bonus token from ``p_d``. A deterministic draft (``q=None``) is a one-hot
  ``q``: accept with probability ``p_i(x_i)``, else sample from ``p_i`` with
  ``x_i`` removed.
"""

from __future__ import annotations

import torch


def probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax at ``temperature`` in float32 (rows = positions)."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(p: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(p, 1, generator=generator).item())


_NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16)


def greedy_token(logits: torch.Tensor) -> int:
    """``int(logits.argmax())`` of one row (the first index of the maximum, as torch).

    On CPU through numpy: torch's argmax over a 262144-wide row costs ~0.3 ms here and over a
    ``[6, 262144]`` block ~8 ms (a slow reduction path), numpy's ~0.03 ms per row."""
    if logits.device.type == "cpu" and logits.dtype in _NUMPY_DTYPES:
        return int(logits.numpy().argmax())
    return int(logits.argmax())


def verify_greedy(draft: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """``(accepted, next_token)``. ``target_logits``: ``[len(draft) + 1, V]``.

    On CPU the target's argmax is taken row by row and only up to the first mismatch
    (``greedy_token``); elsewhere in one batched argmax (one device sync)."""
    if target_logits.device.type == "cpu" and target_logits.dtype in _NUMPY_DTYPES:
        accepted = 0
        while True:
            pred = greedy_token(target_logits[accepted])
            if accepted < len(draft) and draft[accepted] == pred:
                accepted += 1
                continue
            return accepted, pred
    preds = target_logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(draft) and draft[accepted] == preds[accepted]:
        accepted += 1
    return accepted, preds[accepted]


def verify_sampling(
    draft: list[int],
    q: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """``(accepted, next_token)`` by speculative sampling. ``q``: ``[len(draft), V]`` or None."""
    p = probs(target_logits, temperature)
    vocab = p.shape[-1]
    if q is not None and q.shape[-1] != vocab:  # padded vocabularies of different sizes
        q = q[:, :vocab] if q.shape[-1] > vocab else torch.nn.functional.pad(q, (0, vocab - q.shape[-1]))
    for i, x in enumerate(draft):
        px = float(p[i, x]) if x < vocab else 0.0  # the target never emits ids beyond its vocabulary
        qx = float(q[i, x]) if q is not None and x < vocab else 1.0
        u = float(torch.rand((), generator=generator))
        if qx > 0 and u < px / qx:  # u in [0, 1): accepted with probability min(1, p/q)
            continue
        if q is not None:
            residual = torch.clamp(p[i] - q[i], min=0.0)
        else:
            residual = p[i].clone()
            if x < vocab:
                residual[x] = 0.0
        total = float(residual.sum())
        if total <= 0.0:  # p == q up to rounding: any sample from p is exact
            residual = p[i]
        return i, sample(residual / residual.sum(), generator)
    return len(draft), sample(p[len(draft)], generator)
