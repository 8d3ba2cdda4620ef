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

The rounds are charged by one rule (``specbench.round_costs``: ``round_parts``, ``seen_after``), exactly as
``runners.engine.speculative`` runs them: the target's prefill of the prompt (= TTFT); per round,
the target's forward of ``d + 1`` tokens at context ``P + t − 1``; the draft's ``d`` forwards — the
first feeds every token of the sequence the draft's cache has not seen (its prefill in the first
drafting round, then 1–3 tokens of catch-up), the others one token each —; and
``round_overhead_ms``. ``runners.replay`` charges its replayed rounds with it, and a real job's
record its own rounds (``predict_wall_ms``, ``runners.jobs.predict``).

Batches: ``BatchCosts`` (both models' ``ForwardCost`` and the overheads) per measured batch
size; batch 1 is the top-level fields, bit for bit, the others ``batches[b]``; ``costs_at(b)`` interpolates
linearly between the nearest measured sizes (``ForwardCost.lerp``) and refuses, in one line naming the
command that measures it, a ``b`` above the largest (any ``b > 1`` of a file without batch tables).
``verify_ms`` / ``draft_ms`` / ``target_prefill_ms`` take ``batch`` (default 1); ``at_batch(b)`` is a
batch-1-shaped view at ``b`` rows. A batched round is charged by ``batch_round_parts``, the target alone
at batch ``b`` by ``ar_batch_ms`` (one row: ``round_parts``, ``ar_wall_ms``, bit for bit).

The file is ``LatencyModel.to_json()`` (``latency_version`` ``LATENCY_VERSION``), written by
``python -m runners.replay calibrate --pair NAME`` (``runners.replay.calibration``: the calibration on
this machine). This module is its one reader: ``LatencyModel.from_json`` / ``load``; the paper's
``c`` of a file is ``LatencyModel.c_from_json``; ``methods.costs.CostModel`` and
``analysis.leviathan`` read the file through it. The batch tables are one optional key, ``batch``
(``{"2": BatchCosts.to_json(), ...}``): a reader that ignores it reads batch 1 exactly, so the version
did not change, and a version-1 file without it reads as a batch-1 model.

An engine's fitted cost may bill its draft once per round instead: ``draft_rule``, ``batch_round_parts``
(``per_step``: once per engine step, a step that proposes nothing included; ``per_round``: the same, but nothing
for a round that proposes nothing; ``share``: a share of the verification).

What the forwards were timed on is ``specbench.timed_on`` (``TimedOn``, read by
``LatencyModel.timed_on``; the one comparison, ``check_timed_on``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbench.timed_on import TimedOn

LATENCY_VERSION = 1
DRAFT_RULES = ("forwards", "per_round", "per_step", "share")


def check_version(obj: Mapping[str, Any]) -> None:
    """The one check of the file's format: ``ValueError`` unless ``latency_version`` is ``LATENCY_VERSION``."""
    if obj.get("latency_version") != LATENCY_VERSION:
        raise ValueError(f"latency_version {obj.get('latency_version')!r} is not {LATENCY_VERSION} "
                         "(recalibrate: python -m runners.replay calibrate)")


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
        return max(0.0, self.step_at_ref_ms(k) + self.context_ms_per_token * (context - self.ref_context))

    def step_at_ref_ms(self, k: int) -> float:
        """The ``k``-token step at ``ref_context`` (the table, else ``step_affine``), unclamped."""
        base = self.step_ms.get(k)
        return self.step_affine[0] + self.step_affine[1] * k if base is None else base

    @classmethod
    def lerp(cls, lo: ForwardCost, hi: ForwardCost, w: float) -> ForwardCost:
        """``(1 − w)·lo + w·hi``, parameter by parameter, expressed at ``lo.ref_context`` (``hi``'s table is
        moved there along its own context slope), so that ``forward_ms`` of the result is the same blend of
        the two forwards wherever neither is clamped at 0. The table holds every ``k`` of either."""
        ref = lo.ref_context

        def blend(x: float, y: float) -> float:
            return (1.0 - w) * x + w * y

        shift = hi.context_ms_per_token * (ref - hi.ref_context)
        keys = sorted(set(lo.step_ms) | set(hi.step_ms))
        return cls({k: blend(lo.step_at_ref_ms(k), hi.step_at_ref_ms(k) + shift) for k in keys},
                   (blend(lo.step_affine[0], hi.step_affine[0] + shift), blend(lo.step_affine[1], hi.step_affine[1])),
                   blend(lo.context_ms_per_token, hi.context_ms_per_token), ref,
                   (blend(lo.prefill_affine[0], hi.prefill_affine[0]), blend(lo.prefill_affine[1], hi.prefill_affine[1])))

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


def check_batch_size(batch: Any) -> int:
    """``batch`` as an int >= 1, else a one-line ``ValueError``."""
    if isinstance(batch, bool) or not isinstance(batch, int | float) or batch != int(batch) or batch < 1:
        raise ValueError(f"batch size must be an integer >= 1, got {batch!r}")
    return int(batch)


@dataclass
class BatchCosts:
    """The loop's parts at one batch size: one forward of ``b`` rows of each model, the loop's own time
    per speculative round and per autoregressive step (module docstring)."""

    target: ForwardCost
    draft: ForwardCost
    round_overhead_ms: float = 0.0
    ar_overhead_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.to_json(), "draft": self.draft.to_json(),
                "round_overhead_ms": self.round_overhead_ms, "ar_overhead_ms": self.ar_overhead_ms}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BatchCosts:
        return cls(ForwardCost.from_json(obj["target"]), ForwardCost.from_json(obj["draft"]),
                   float(obj.get("round_overhead_ms") or 0.0), float(obj.get("ar_overhead_ms") or 0.0))


@dataclass
class LatencyModel:
    """Costs of the speculative loop's parts (module docstring); ``batches``: the costs at each measured
    batch size above 1 (batch 1 is the top-level fields); ``draft_rule`` (``DRAFT_RULES``; in the file when not
    ``forwards``), ``draft_share``: how a round's draft is charged (``batch_round_parts``)."""

    target: ForwardCost
    draft: ForwardCost
    round_overhead_ms: float = 0.0
    ar_overhead_ms: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    batches: dict[int, BatchCosts] = field(default_factory=dict)
    draft_rule: str = "forwards"
    draft_share: float = 0.0
    _at: dict[int, BatchCosts] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.batches = {check_batch_size(int(b)): c for b, c in self.batches.items()}
        if 1 in self.batches:
            raise ValueError("batch 1 is the model's top-level costs, not an entry of batches")
        if self.draft_rule not in DRAFT_RULES:
            raise ValueError(f"draft_rule {self.draft_rule!r} is not one of {', '.join(DRAFT_RULES)}")

    @property
    def batch_sizes(self) -> list[int]:
        """The measured batch sizes (1 first)."""
        return [1, *sorted(self.batches)]

    def costs_at(self, batch: int) -> BatchCosts:
        """The costs at ``batch`` rows, measured or interpolated (module docstring)."""
        b = check_batch_size(batch)
        if b == 1:
            return BatchCosts(self.target, self.draft, self.round_overhead_ms, self.ar_overhead_ms)
        hit = self.batches.get(b) or self._at.get(b)
        if hit is not None:
            return hit
        sizes = self.batch_sizes
        if b > sizes[-1]:
            pair = self.meta.get("pair") or "NAME"
            have = "no batch tables (batch 1 only)" if len(sizes) == 1 else f"batch sizes {sizes}"
            raise ValueError(f"batch {b} asked of a latency model with {have}: recalibrate with python -m "
                             f"runners.replay calibrate --pair {pair} --batch-sizes {' '.join(map(str, sorted({*sizes, 2, 4, 8, b})))}")
        lo, hi = max(s for s in sizes if s < b), min(s for s in sizes if s > b)
        w = (b - lo) / (hi - lo)
        a, c = self.costs_at(lo), self.costs_at(hi)
        out = BatchCosts(ForwardCost.lerp(a.target, c.target, w), ForwardCost.lerp(a.draft, c.draft, w),
                         (1 - w) * a.round_overhead_ms + w * c.round_overhead_ms,
                         (1 - w) * a.ar_overhead_ms + w * c.ar_overhead_ms)
        self._at[b] = out
        return out

    def at_batch(self, batch: int) -> LatencyModel:
        """A batch-1-shaped model whose costs are those at ``batch`` rows (``self`` for batch 1)."""
        if check_batch_size(batch) == 1:
            return self
        c = self.costs_at(batch)
        return LatencyModel(c.target, c.draft, c.round_overhead_ms, c.ar_overhead_ms, {**self.meta, "batch_size": batch},
                            draft_rule=self.draft_rule, draft_share=self.draft_share)

    # the loop's parts (batch: rows in the forward; 1 = the top-level costs, bit for bit)
    def _model(self, name: str, batch: int) -> ForwardCost:
        return getattr(self, name) if batch == 1 else getattr(self.costs_at(batch), name)

    def target_prefill_ms(self, prompt_tokens: int, batch: int = 1) -> float:
        return self._model("target", batch).forward_ms(prompt_tokens, 0)

    def verify_ms(self, k: int, context: int, batch: int = 1) -> float:
        return self._model("target", batch).forward_ms(k, context)

    def draft_ms(self, k: int, context: int, batch: int = 1) -> float:
        return self._model("draft", batch).forward_ms(k, context)

    def round_overhead_at(self, batch: int = 1) -> float:
        return self.round_overhead_ms if batch == 1 else self.costs_at(batch).round_overhead_ms

    def ar_overhead_at(self, batch: int = 1) -> float:
        return self.ar_overhead_ms if batch == 1 else self.costs_at(batch).ar_overhead_ms

    def ar_wall_ms(self, prompt_tokens: int, new_tokens: int) -> float:
        """The target alone (``AutoregressiveRunner``): prefill, then one token per forward."""
        return ar_batch_ms(self, [prompt_tokens], [new_tokens])[1][0]

    @property
    def timed_on(self) -> TimedOn:
        """What the file's forwards were timed on, as its ``meta`` says (``TimedOn.of_meta``)."""
        return TimedOn.of_meta(self.meta, batches=bool(self.batches))

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
            **({"batch": {str(b): c.to_json() for b, c in sorted(self.batches.items())}} if self.batches else {}),
            **({"draft_rule": self.draft_rule, "draft_share": self.draft_share} if self.draft_rule != "forwards" else {}),
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> LatencyModel:
        """The model of a file's contents (``ValueError`` on another ``latency_version``: ``check_version``)."""
        check_version(obj)
        return cls(ForwardCost.from_json(obj["target"]), ForwardCost.from_json(obj["draft"]),
                   float(obj.get("round_overhead_ms") or 0.0), float(obj.get("ar_overhead_ms") or 0.0),
                   dict(obj.get("meta") or {}),
                   {int(b): BatchCosts.from_json(c) for b, c in (obj.get("batch") or {}).items()},
                   str(obj.get("draft_rule") or "forwards"), float(obj.get("draft_share") or 0.0))

    def save(self, path: str | os.PathLike) -> Path:
        from specbench.record_io import write_json_atomic

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


# ---------------------------------------------------------------------- the target alone

def ar_batch_ms(lat: LatencyModel, prompt_tokens: Sequence[int], new_tokens: Sequence[int]) -> tuple[float, list[float]]:
    """The target alone at batch ``b = len(prompt_tokens)``: ``(prefill ms, each row's wall ms)``. One
    prefill of ``b`` rows × the longest prompt (left-padded; every row's TTFT), then step ``s = 1, 2, ..``:
    one forward of the rows still decoding × 1 token at context = the longest of them, ``max (p + s − 1)``,
    plus ``ar_overhead_at(rows)``; a row leaves after its ``n − 1`` steps, its wall ends there (the batch's:
    the longest). One row: ``ar_wall_ms``, bit for bit."""
    ps, ns = [int(p) for p in prompt_tokens], [int(n) for n in new_tokens]
    prefill = lat.target_prefill_ms(max(ps), len(ps))
    walls = [prefill] * len(ps)
    ms = prefill
    for s in range(1, max(ns)):
        active = [i for i, n in enumerate(ns) if s < n]
        b = len(active)
        ms += lat.verify_ms(1, max(ps[i] + s - 1 for i in active), b) + lat.ar_overhead_at(b)
        for i in active:
            walls[i] = ms
    return prefill, walls
