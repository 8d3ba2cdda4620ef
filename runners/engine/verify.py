"""Verification rules, and the one place where logits become probabilities and samples.

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

**Sampling processors** (``Sampling``): ``p`` and ``q`` are the *processed* distributions:
temperature, then top-k, top-p and typical-p, in the order and with the exact code of
transformers' ``GenerationMixin._get_logits_processor`` (``TopKLogitsWarper``,
``TopPLogitsWarper``, ``TypicalLogitsWarper``, ``min_tokens_to_keep=1``). ``probs`` is the only
function that turns logits into probabilities, and every drafter and runner calls it with the
same ``Sampling``, so the target and the draft are processed identically (as transformers
processes the assistant with the main call's processors). Speculative sampling is exact for
any ``q``, so the output follows the processed target distribution whatever the draft does
(``tests/engine/test_sampling.py`` enumerates it exactly on a toy vocabulary).

``Sampling`` is one frozen value (``temperature``, ``top_k``, ``top_p``, ``typical_p``) that travels
under the name ``sampling`` through the runners, ``Drafter.propose`` and verification;
``sampling.greedy`` (temperature 0) picks the rule. Entry points that a user calls with a bare
temperature (the runners' ``sampling`` argument, ``probs``) accept a float (``Sampling.of``).

**Random numbers on the right device.** ``torch.multinomial`` and ``torch.rand`` need a
generator on the device of the tensor they sample (a CPU generator cannot sample CUDA
probabilities). ``DeviceGenerators(seed)`` holds one ``torch.Generator`` per device, created
on first use; ``sample``/``bernoulli`` pick the one on the device of the probabilities they
are given — the target's logits device (the last shard under ``device_map``) for
verification, the draft's for drafting. A bare ``torch.Generator`` on another device than
the tensor is refused with a one-line ``ValueError``, before torch is called.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch

# --------------------------------------------------------------------------- sampling processors


@dataclass(frozen=True)
class Sampling:
    """How the next token is drawn: ``temperature`` (0: greedy, argmaxes; > 0: sampling) and the
    logits warpers applied after it.

    ``top_k`` (``None``/0: off), ``top_p`` (``None``/1.0: off), ``typical_p`` (``None``/1.0: off):
    transformers' meaning and order; the "off" values are stored as ``None``. ``Sampling.of(x)``
    turns a bare temperature into one with no warpers. The warpers only act when sampling (greedy
    decoding takes argmaxes of the raw logits).
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    typical_p: float | None = None

    def __post_init__(self) -> None:
        top_k, top_p, typical_p = self.top_k, self.top_p, self.typical_p
        t = float(self.temperature)
        if not t >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 0):
            raise ValueError(f"top_k must be an integer >= 0 (0: off), got {top_k!r}")
        for name, value in (("top_p", top_p), ("typical_p", typical_p)):
            if value is not None and not 0.0 < float(value) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1] (1: off), got {value!r}")
        object.__setattr__(self, "temperature", t)
        object.__setattr__(self, "top_k", int(top_k) if top_k else None)
        object.__setattr__(self, "top_p", float(top_p) if top_p is not None and float(top_p) < 1.0 else None)
        object.__setattr__(self, "typical_p",
                           float(typical_p) if typical_p is not None and float(typical_p) < 1.0 else None)

    @classmethod
    def of(cls, sampling: Sampling | float) -> Sampling:
        """``sampling`` itself, or a bare temperature as a ``Sampling`` with no warpers."""
        return sampling if isinstance(sampling, Sampling) else cls(sampling)

    @property
    def greedy(self) -> bool:
        """Temperature 0: every token is an argmax (``verify_greedy``); else speculative sampling."""
        return self.temperature == 0.0

    @property
    def warped(self) -> bool:
        """Whether any warper besides the temperature is on."""
        return bool(self.top_k or self.top_p or self.typical_p)

    def settings(self) -> dict[str, Any]:
        """What a record stores: the temperature and the warpers (``None`` = off)."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "typical_p": self.typical_p}

    def warp(self, scores: torch.Tensor) -> torch.Tensor:
        """transformers' warpers on temperature-scaled float32 ``scores`` (rows = positions)."""
        if not self.warped:
            return scores
        from transformers.generation.logits_process import (
            TopKLogitsWarper,
            TopPLogitsWarper,
            TypicalLogitsWarper,
        )

        rows = scores if scores.dim() == 2 else scores.unsqueeze(0)
        if self.top_k:
            rows = TopKLogitsWarper(top_k=min(self.top_k, rows.shape[-1]), min_tokens_to_keep=1)(None, rows)
        if self.top_p:
            rows = TopPLogitsWarper(top_p=self.top_p, min_tokens_to_keep=1)(None, rows)
        if self.typical_p:
            rows = TypicalLogitsWarper(mass=self.typical_p, min_tokens_to_keep=1)(None, rows)
        return rows if scores.dim() == 2 else rows[0]

    def __repr__(self) -> str:
        warpers = "".join(f", {k}={v}" for k, v in self.settings().items() if k != "temperature" and v is not None)
        return f"Sampling(temperature={self.temperature:g}{warpers})"


def probs(logits: torch.Tensor, sampling: Sampling | float) -> torch.Tensor:
    """The processed distribution (rows = positions), float32: softmax of the warped
    ``logits / temperature`` (module docstring). ``sampling``: a ``Sampling`` or a bare temperature
    (no warpers); its temperature must be > 0."""
    sampling = Sampling.of(sampling)
    if sampling.greedy:
        raise ValueError("probs needs a temperature > 0 (greedy decoding takes argmaxes)")
    return torch.softmax(sampling.warp(logits.float() / sampling.temperature), dim=-1)


# --------------------------------------------------------------------------- random numbers


def device_seed(seed: int, device: torch.device | str) -> int:
    """The seed of ``device``'s generator: ``seed`` itself on the CPU (so CPU runs draw exactly
    as one ``torch.Generator().manual_seed(seed)``), else a 63-bit hash of (seed, device), so two
    accelerators (a target and a draft on ``cuda:0`` and ``cuda:1``) never share a stream."""
    device = torch.device(device)
    if device.type == "cpu":
        return int(seed)
    digest = hashlib.sha256(f"{int(seed)}:{device}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class DeviceGenerators:
    """One ``torch.Generator`` per device, all derived from one seed (``device_seed``), created on
    first use. Pass it wherever a ``torch.Generator`` was expected by ``sample``/``bernoulli``."""

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._by_device: dict[str, torch.Generator] = {}

    def initial_seed(self) -> int:
        return self.seed

    def on(self, device: torch.device | str) -> torch.Generator:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        key = str(device)
        if key not in self._by_device:
            self._by_device[key] = torch.Generator(device=device).manual_seed(device_seed(self.seed, device))
        return self._by_device[key]

    def __repr__(self) -> str:
        return f"DeviceGenerators(seed={self.seed}, devices={sorted(self._by_device)})"


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index


def generator_on(generator: Any, device: torch.device | str) -> torch.Generator | None:
    """The generator to draw on ``device`` with: ``None`` stays ``None`` (torch's global RNG),
    ``DeviceGenerators`` gives its generator for ``device``, a ``torch.Generator`` must already
    be there (``ValueError`` otherwise: a clear message instead of torch's error deep in a loop)."""
    if generator is None:
        return None
    device = torch.device(device)
    if isinstance(generator, DeviceGenerators):
        return generator.on(device)
    if not _same_device(generator.device, device):
        raise ValueError(
            f"a torch.Generator on {generator.device} cannot sample tensors on {device}; "
            "use runners.engine.verify.DeviceGenerators(seed), which keeps one generator per device"
        )
    return generator


def sample(p: torch.Tensor, generator: Any) -> int:
    """One index drawn from the probabilities ``p`` (1-D), on ``p``'s device."""
    return int(torch.multinomial(p, 1, generator=generator_on(generator, p.device)).item())


def bernoulli(prob: float, generator: Any, device: torch.device | str = "cpu") -> bool:
    """True with probability ``min(1, prob)``: ``u < prob`` for ``u ~ U[0, 1)`` drawn on ``device``."""
    u = float(torch.rand((), generator=generator_on(generator, device), device=device))
    return u < prob


# --------------------------------------------------------------------------- verification


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
    sampling: Sampling | float,
    generator: Any,
) -> tuple[int, int]:
    """``(accepted, next_token)`` by speculative sampling. ``q``: ``[len(draft), V]`` or None (moved
    to the target's device when the draft sits elsewhere); ``sampling`` (temperature > 0) applies its
    warpers to the target's logits, exactly as the draft applied them to its own."""
    p = probs(target_logits, sampling)
    vocab = p.shape[-1]
    if q is not None:
        q = q.to(p.device)
        if q.shape[-1] != vocab:  # padded vocabularies of different sizes
            q = q[:, :vocab] if q.shape[-1] > vocab else torch.nn.functional.pad(q, (0, vocab - q.shape[-1]))
    for i, x in enumerate(draft):
        px = float(p[i, x]) if x < vocab else 0.0  # the target never emits ids beyond its vocabulary
        qx = float(q[i, x]) if q is not None and x < vocab else 1.0
        if bernoulli(px / qx if qx > 0 else 0.0, generator, p.device):  # accepted with probability min(1, p/q)
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
