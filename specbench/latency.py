"""Latency model of the speculative loop: the core type, and the one reader of the latency file.

The GammaTune paper's cost model (Sec. 3) is ``cost = T_target·calls_target + T_draft·calls_draft``
with ``c = T_target / T_draft`` and one target call verifying γ tokens for the price of
one. This module keeps that structure but measures each term, because on a CPU (or a
saturated GPU) verifying ``k`` tokens is *not* free and the context length matters:

* ``ForwardCost.forward_ms(k, context)``: one forward of a model feeding ``k`` tokens on a
  KV cache that already holds ``context`` tokens.
  - ``context == 0`` (prefill): ``prefill_affine = (a, b)`` → ``a + b·k``;
  - otherwise ``step_ms[k]`` (a table measured at ``ref_context``; ``step_affine = (a, b)``,
    fitted on it, for ``k`` beyond the table) ``+ context_ms_per_token · (context − ref_context)``;
  - never below 0.
* ``LatencyModel``: ``target`` and ``draft`` ``ForwardCost`` plus ``round_overhead_ms`` (the
  loop's own time per speculative round: tensors, verification, cache crops) and
  ``ar_overhead_ms`` (the same per autoregressive step).

The rounds are charged by one rule (``round_parts``, ``seen_after``), exactly as
``runners.engine.speculative`` runs them: the target's prefill of the prompt (= TTFT); per round,
the target's forward of ``d + 1`` tokens at context ``P + t − 1``; the draft's ``d`` forwards — the
first feeds every token of the sequence the draft's cache has not seen (its prefill in the first
drafting round, then 1–3 tokens of catch-up), the others one token each —; and
``round_overhead_ms``. ``runners.replay`` charges its replayed rounds with it, and a real job's
record its own rounds (``predict_wall_ms``, ``runners.jobs.predict``).

The file is ``LatencyModel.to_json()`` (``latency_version`` ``LATENCY_VERSION``), written by
``python -m runners.replay calibrate --pair NAME`` (``runners.replay.latency``: the calibration on
this machine). This module is its one reader: ``LatencyModel.from_json`` / ``load``; the paper's
``c`` of a file is ``LatencyModel.c_from_json``; ``methods.costs.CostModel`` and
``analysis.leviathan`` read the file through it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LATENCY_VERSION = 1


def check_version(obj: Mapping[str, Any]) -> None:
    """The one check of the file's format: ``ValueError`` unless ``latency_version`` is ``LATENCY_VERSION``."""
    if obj.get("latency_version") != LATENCY_VERSION:
        raise ValueError(f"latency_version {obj.get('latency_version')!r} is not {LATENCY_VERSION} "
                         "(recalibrate: python -m runners.replay calibrate)")


def fit_affine(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y = a + b·x`` (``b = 0`` for a single distinct x)."""
    n = len(xs)
    if n == 0:
        raise ValueError("nothing to fit")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def isotonic(ys: Sequence[float]) -> list[float]:
    """The nondecreasing sequence closest to ``ys`` in least squares (pool adjacent violators):
    unlike a running maximum it does not carry one noisy high median to every later ``k``."""
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([float(y), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return out


@dataclass
class ForwardCost:
    """Milliseconds of one forward of one model (module docstring)."""

    step_ms: dict[int, float] = field(default_factory=dict)
    step_affine: tuple[float, float] = (0.0, 0.0)
    context_ms_per_token: float = 0.0
    ref_context: int = 0
    prefill_affine: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        self.step_ms = {int(k): float(v) for k, v in self.step_ms.items()}
        self.step_affine = (float(self.step_affine[0]), float(self.step_affine[1]))
        self.prefill_affine = (float(self.prefill_affine[0]), float(self.prefill_affine[1]))
        for name, value in (("context_ms_per_token", self.context_ms_per_token),
                            *(("step_ms", v) for v in self.step_ms.values())):
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite")

    def forward_ms(self, k: int, context: int) -> float:
        if k < 1:
            raise ValueError("a forward feeds at least one token")
        if context <= 0:
            a, b = self.prefill_affine
            return max(0.0, a + b * k)
        base = self.step_ms.get(k)
        if base is None:
            a, b = self.step_affine
            base = a + b * k
        return max(0.0, base + self.context_ms_per_token * (context - self.ref_context))

    @classmethod
    def affine(cls, fixed_ms: float, per_token_ms: float = 0.0, per_context_ms: float = 0.0,
               prefill: tuple[float, float] | None = None) -> ForwardCost:
        """``fixed + per_token·k + per_context·context``; prefill ``a + b·k`` (default: the same line)."""
        return cls({}, (fixed_ms, per_token_ms), per_context_ms, 0, prefill or (fixed_ms, per_token_ms))

    def to_json(self) -> dict[str, Any]:
        return {
            "step_ms": {str(k): v for k, v in sorted(self.step_ms.items())},
            "step_affine": list(self.step_affine),
            "context_ms_per_token": self.context_ms_per_token,
            "ref_context": self.ref_context,
            "prefill_affine": list(self.prefill_affine),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ForwardCost:
        return cls(
            step_ms={int(k): float(v) for k, v in (obj.get("step_ms") or {}).items()},
            step_affine=tuple(obj.get("step_affine") or (0.0, 0.0)),
            context_ms_per_token=float(obj.get("context_ms_per_token") or 0.0),
            ref_context=int(obj.get("ref_context") or 0),
            prefill_affine=tuple(obj.get("prefill_affine") or (0.0, 0.0)),
        )


@dataclass
class LatencyModel:
    """Costs of the speculative loop's parts (module docstring)."""

    target: ForwardCost
    draft: ForwardCost
    round_overhead_ms: float = 0.0
    ar_overhead_ms: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    # the loop's parts
    def target_prefill_ms(self, prompt_tokens: int) -> float:
        return self.target.forward_ms(prompt_tokens, 0)

    def verify_ms(self, k: int, context: int) -> float:
        return self.target.forward_ms(k, context)

    def draft_ms(self, k: int, context: int) -> float:
        return self.draft.forward_ms(k, context)

    def ar_wall_ms(self, prompt_tokens: int, new_tokens: int) -> float:
        """The target alone (``AutoregressiveRunner``): prefill, then one token per forward."""
        ms = self.target_prefill_ms(prompt_tokens)
        for t in range(1, new_tokens):
            ms += self.verify_ms(1, prompt_tokens + t - 1) + self.ar_overhead_ms
        return ms

    @property
    def c(self) -> float:
        """The paper's ``c = T_target / T_draft`` for one token at the reference context."""
        d = self.draft.forward_ms(1, max(1, self.draft.ref_context))
        return self.target.forward_ms(1, max(1, self.target.ref_context)) / d if d > 0 else math.inf

    # constructors
    @classmethod
    def affine(cls, target: tuple[float, float], draft: tuple[float, float], round_overhead_ms: float = 0.0,
               ar_overhead_ms: float = 0.0, context: tuple[float, float] = (0.0, 0.0),
               target_prefill: tuple[float, float] | None = None,
               draft_prefill: tuple[float, float] | None = None) -> LatencyModel:
        """``T(k) = fixed + per_token·k (+ per_context·context)`` for each model."""
        return cls(ForwardCost.affine(*target, context[0], target_prefill),
                   ForwardCost.affine(*draft, context[1], draft_prefill),
                   round_overhead_ms, ar_overhead_ms, {"kind": "affine"})

    @classmethod
    def paper(cls, c: float) -> LatencyModel:
        """GammaTune Sec. 3: the target verifies any number of tokens in ``c`` units, a draft
        token costs 1 unit (1 "ms"), nothing else costs anything."""
        if not c > 0:
            raise ValueError("c must be > 0")
        return cls(ForwardCost.affine(c, 0.0), ForwardCost.affine(1.0, 0.0, prefill=(1.0, 0.0)),
                   meta={"kind": "paper", "c": c})

    # files
    def to_json(self) -> dict[str, Any]:
        return {
            "latency_version": LATENCY_VERSION,
            "target": self.target.to_json(),
            "draft": self.draft.to_json(),
            "round_overhead_ms": self.round_overhead_ms,
            "ar_overhead_ms": self.ar_overhead_ms,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> LatencyModel:
        """The model of a file's contents (``ValueError`` on another ``latency_version``: ``check_version``)."""
        check_version(obj)
        return cls(ForwardCost.from_json(obj["target"]), ForwardCost.from_json(obj["draft"]),
                   float(obj.get("round_overhead_ms") or 0.0), float(obj.get("ar_overhead_ms") or 0.0),
                   dict(obj.get("meta") or {}))

    def save(self, path: str | os.PathLike) -> Path:
        from specbench.records import write_json_atomic

        write_json_atomic(path, self.to_json())
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> LatencyModel:
        return cls.from_json(json.loads(Path(path).read_text()))

    @classmethod
    def c_from_json(cls, obj: Mapping[str, Any]) -> float | None:
        """The paper's ``c = T_target / T_draft`` as a file states it: ``meta.c`` (a paper cost model),
        else the one-token forwards of the two ``step_ms`` tables (at the reference context); ``inf`` for
        a drafter whose forward costs 0 ms (prompt lookup); None when either table has no one-token step,
        or the target's is not > 0. ``ValueError`` on another ``latency_version`` (``check_version``)."""
        check_version(obj)
        c = (obj.get("meta") or {}).get("c")
        if isinstance(c, int | float) and math.isfinite(c) and c > 0:
            return float(c)
        try:
            model = cls.from_json(obj)
        except (KeyError, TypeError, ValueError):
            return None
        t, d = model.target.step_ms.get(1), model.draft.step_ms.get(1)
        if t is None or d is None or not t > 0:
            return None
        return t / d if d > 0 else math.inf


# ---------------------------------------------------------------------- the rounds' charges

def draft_forwards_ms(lat: LatencyModel, p: int, t: int, seen: int, proposed: int) -> float:
    """Predicted ms of the draft's ``proposed`` forwards in a round at position ``t`` (prompt ``p``), its
    cache holding ``seen`` tokens: the first feeds the ``p + t − seen`` tokens it has not seen, the others
    one each. ``t = 0``, ``seen = 0``: the draft's prefill of the prompt, then ``proposed − 1`` steps (a
    fused first round)."""
    draft = 0.0
    if proposed >= 1:
        draft += lat.draft_ms(p + t - seen, seen)
        for i in range(1, proposed):
            draft += lat.draft_ms(1, p + t + i - 1)
    return draft


def round_parts(lat: LatencyModel, p: int, t: int, seen: int, d: int, proposed: int | None = None,
                draft_model: bool = True) -> tuple[float, float]:
    """Predicted ``(draft ms, verify ms)`` of a round at position ``t`` drafting ``proposed`` tokens
    (default ``d``) and verifying ``d`` of them, the draft's cache holding ``seen``; the round costs
    their sum plus ``round_overhead_ms``. ``draft_model=False``: the drafter costs nothing."""
    proposed = d if proposed is None else proposed
    draft = draft_forwards_ms(lat, p, t, seen, proposed) if draft_model else 0.0
    return draft, lat.verify_ms(d + 1, p + t - 1)


def round_ms(lat: LatencyModel, p: int, t: int, seen: int, d: int, proposed: int | None = None) -> float:
    """Predicted ms of a round at position ``t`` verifying ``d`` drafted tokens (of ``proposed``, default
    ``d``), the draft's cache holding ``seen``."""
    draft, verify = round_parts(lat, p, t, seen, d, proposed)
    return verify + lat.round_overhead_ms + draft


def seen_after(p: int, t: int, seen: int, d: int, accepted: int, new_t: int) -> int:
    """``ModelDrafter``'s cache length after ``commit``: it fed ``ids + y_1..y_{d-1}`` (``d``: tokens
    *proposed*, verified or not) and keeps the common prefix with the new sequence (at most its
    length − 1)."""
    if d == 0:
        return min(seen, p + new_t - 1)
    return min(p + t + min(accepted, d - 1), p + new_t - 1)


def predict_wall_ms(latency: LatencyModel, prompt_tokens: int, new_tokens: int, drafted_trace: Sequence[int],
                    accepted_trace: Sequence[int], draft_model: bool = True,
                    fused_prefill: bool = False) -> tuple[float, float]:
    """``(ttft_ms, wall_ms)`` the latency model predicts for a generation's *own* rounds (a record's
    ``drafted_trace`` / ``accepted_trace``), charged as ``replay`` charges them. ``draft_model=False``:
    the drafter costs nothing (prompt lookup). ``fused_prefill``: the first round is verified in the
    prefill forward (``prompt + d`` tokens) after the draft's prefill and ``d − 1`` draft steps, and
    ends the TTFT. ``method=ar`` records: empty traces, one plain step per token after the first."""
    parts = predict_parts_ms(latency, prompt_tokens, new_tokens, drafted_trace, accepted_trace, draft_model,
                             fused_prefill)
    return parts["ttft_ms"], sum(parts.values())


def predict_parts_ms(latency: LatencyModel, prompt_tokens: int, new_tokens: int, drafted_trace: Sequence[int],
                     accepted_trace: Sequence[int], draft_model: bool = True,
                     fused_prefill: bool = False) -> dict[str, float]:
    """``predict_wall_ms`` by part, the record's fields: ``ttft_ms`` (the prefill, and a fused first
    round), then the rounds' ``verify_ms`` (the target's forwards), ``draft_ms`` and ``overhead_ms``."""
    p, n = int(prompt_tokens), int(new_tokens)
    if not drafted_trace:  # autoregressive: prefill, then n - 1 steps
        ttft = latency.target_prefill_ms(p)
        return {"ttft_ms": ttft, "verify_ms": latency.ar_wall_ms(p, n) - ttft, "draft_ms": 0.0, "overhead_ms": 0.0}
    rounds = list(zip(drafted_trace, accepted_trace))
    if fused_prefill:
        d, a = rounds.pop(0)
        ttft = latency.target_prefill_ms(p + d) + latency.round_overhead_ms
        if draft_model:
            ttft += draft_forwards_ms(latency, p, 0, 0, d)
        t = min(a + 1, n)
        seen = p + min(a, d - 1) if d >= 1 else 0
    else:
        ttft, t, seen = latency.target_prefill_ms(p), 1, 0
    out = {"ttft_ms": ttft, "verify_ms": 0.0, "draft_ms": 0.0, "overhead_ms": 0.0}
    for d, a in rounds:
        new_t = min(t + a + 1, n)
        draft, verify = round_parts(latency, p, t, seen, d, draft_model=draft_model)
        out["verify_ms"] += verify
        out["overhead_ms"] += latency.round_overhead_ms
        out["draft_ms"] += draft
        seen = seen_after(p, t, seen, d, a, new_t)
        t = new_t
    return out
