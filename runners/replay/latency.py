"""Latency model of the speculative loop, and its calibration on this machine.

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

``runners.replay`` charges, exactly as ``runners.engine.speculative`` runs them: the target's
prefill of the prompt (= TTFT); per round, the target's forward of ``d + 1`` tokens at
context ``P + t − 1``; the draft's ``d`` forwards — the first feeds every token of the
sequence the draft's cache has not seen (its prefill in the first drafting round, then
1–3 tokens of catch-up), the others one token each —; and ``round_overhead_ms``.

Calibration (``python -m runners.replay calibrate --pair NAME``): ``calibrate(time_forward)``
takes any function ``time_forward(model, k, context) -> ms`` (one timing sample), times
``k = 1..k_max`` at ``ref_context`` and a few contexts and prompt lengths, with warm-up
runs, takes the median of the repeats, and fits the affine parts by least squares. The ``k``
table is kept as measured: on CPUs it is genuinely *not* monotone (Gemma-3-270M fp32, 2
threads: 3 tokens ~173 ms but 4 tokens ~119 ms — matmul kernels differ by shape), so a
nondecreasing fit (``monotone=True``: isotonic regression) is only an option.
``ModelTimer`` is the real ``time_forward`` (a cache prefilled to ``context`` tokens,
one forward of ``k`` tokens, cropped back; the logits kept as the loops keep them: all ``k``
for the target's verification, the last one for a prefill and for the draft). ``measure_overheads`` runs the real loops
once with forward hooks and attributes what the forwards do not explain to the loop.
The JSON file is ``LatencyModel.to_json()``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LATENCY_VERSION = 1


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
        if obj.get("latency_version") != LATENCY_VERSION:
            raise ValueError(f"latency_version {obj.get('latency_version')!r} is not {LATENCY_VERSION}")
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


# ---------------------------------------------------------------------- calibration

TimeForward = Callable[[str, int, int], float]


def interleaved_medians(sample: Callable[[Any], float], keys: Iterable[Any], warmup: int,
                        repeats: int) -> dict[Any, float]:
    """The median of ``repeats`` samples of every key, taken in sweeps over the keys (``warmup`` sweeps
    first, discarded), not key after key: a host whose speed drifts over minutes (a shared machine, a
    CPU's clocks) then biases every key alike instead of making the later keys dearer — measured here,
    a 2-core host drifted 10–25 % within an hour, enough to reorder ``V(k)`` across ``k`` when each
    ``k`` was timed in its own block."""
    keys = list(keys)
    for _ in range(warmup):
        for key in keys:
            sample(key)
    samples: dict[Any, list[float]] = {key: [] for key in keys}
    for _ in range(max(1, repeats)):
        for key in keys:
            samples[key].append(sample(key))
    return {key: statistics.median(values) for key, values in samples.items()}


def calibrate_model(time_forward: TimeForward, model: str, k_max: int, ref_context: int, contexts: Iterable[int],
                    prefill_lengths: Iterable[int], warmup: int = 2, repeats: int = 5,
                    monotone: bool = False) -> tuple[ForwardCost, dict[str, Any]]:
    """One model's ``ForwardCost`` from timing samples (``interleaved_medians``: sweeps over ``k``, over
    the contexts, over the prefill lengths); also returns the medians measured."""
    table = interleaved_medians(lambda k: time_forward(model, k, ref_context), range(1, k_max + 1), warmup, repeats)
    raw = dict(table)
    if monotone:  # one more token never costs less: a median that dips is noise
        table = dict(zip(table, isotonic(list(table.values()))))
    step_affine = fit_affine(list(table), list(table.values()))
    ctx_points = sorted({int(c) for c in contexts} | {ref_context})
    ctx = interleaved_medians(lambda c: time_forward(model, 1, c), [c for c in ctx_points if c != ref_context],
                              warmup, repeats)
    ctx = {c: (raw[1] if c == ref_context else ctx[c]) for c in ctx_points}
    slope = fit_affine(list(ctx), list(ctx.values()))[1] if len(ctx) > 1 else 0.0
    prefill = interleaved_medians(lambda p: time_forward(model, p, 0), prefill_lengths, warmup, repeats)
    prefill_affine = fit_affine(list(prefill), list(prefill.values()))
    cost = ForwardCost(table, step_affine, max(0.0, slope), ref_context, prefill_affine)
    return cost, {"step_raw_ms": raw, "context_ms": ctx, "prefill_ms": prefill}


def calibrate(time_forward: TimeForward, k_max: int = 33, draft_k_max: int = 4, ref_context: int = 128,
              contexts: Iterable[int] = (32, 512), prefill_lengths: Iterable[int] = (16, 64, 128, 256),
              warmup: int = 2, repeats: int = 5, monotone: bool = False) -> LatencyModel:
    """A ``LatencyModel`` from ``time_forward(model, k, context) -> ms`` (``model``: ``"target"`` or
    ``"draft"``): the target at ``k = 1..k_max`` (a verification of ``γ`` tokens feeds ``γ + 1``), the
    draft at ``k = 1..draft_k_max`` (one drafted token, or a catch-up), each at ``ref_context``;
    ``k = 1`` at ``contexts`` for the per-context slope; prefills of ``prefill_lengths`` tokens.
    Overheads are not measured here (``measure_overheads``)."""
    contexts, prefill_lengths = list(contexts), list(prefill_lengths)
    target, t_raw = calibrate_model(time_forward, "target", k_max, ref_context, contexts, prefill_lengths,
                                    warmup, repeats, monotone)
    draft, d_raw = calibrate_model(time_forward, "draft", draft_k_max, ref_context, contexts, prefill_lengths,
                                   warmup, repeats, monotone)
    meta = {"kind": "calibrated", "sampling": "interleaved", "warmup": warmup, "repeats": repeats, "monotone": monotone,
            "samples": {"target": _jsonable(t_raw), "draft": _jsonable(d_raw)}}
    return LatencyModel(target, draft, 0.0, 0.0, meta)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    return obj


class ModelTimer:
    """The real ``time_forward``: ``(model, k, context) -> ms`` on the pair's models (CPU wall time;
    CUDA synchronised). Feeds tokens from ``token_pool`` (cycled): one pool for every model, or one
    per model name (a draft with another tokenizer reads its own ids)."""

    def __init__(self, models: Mapping[str, Any], token_pool: Sequence[int] | Mapping[str, Sequence[int]]) -> None:
        self.models = dict(models)
        pools = token_pool if isinstance(token_pool, Mapping) else {name: token_pool for name in self.models}
        self.pools = {name: list(pools.get(name) or []) for name in self.models}
        for name, pool in self.pools.items():
            if not pool:
                raise ValueError(f"token_pool of {name!r} is empty")
        self._caches: dict[tuple[str, int], Any] = {}

    def _tokens(self, name: str, start: int, k: int) -> list[int]:
        pool = self.pools[name]
        return [pool[(start + i) % len(pool)] for i in range(k)]

    def _sync(self, model: Any) -> None:
        import torch

        if next(model.parameters()).device.type == "cuda":
            torch.cuda.synchronize()

    def __call__(self, name: str, k: int, context: int) -> float:
        import torch

        from runners.engine.kv import cache_arg, crop_to, new_cache

        model = self.models[name]
        device = next(model.parameters()).device
        with torch.inference_mode():
            if context <= 0:
                cache = new_cache(model)
            else:
                cache = self._caches.get((name, context))
                if cache is None:
                    cache = new_cache(model)
                    model(input_ids=torch.tensor([self._tokens(name, 0, context)], device=device), **cache_arg(model, cache),
                          use_cache=True, logits_to_keep=1)
                    self._caches[(name, context)] = cache
            inp = torch.tensor([self._tokens(name, context, k)], device=device)
            # as the loops ask: the target's verification keeps the logits of every fed token; a prefill
            # and the draft's forwards keep the last one (the LM head is a large part of a small model)
            keep = k if name == "target" and context > 0 else 1
            self._sync(model)
            t0 = time.perf_counter()
            model(input_ids=inp, **cache_arg(model, cache), use_cache=True, logits_to_keep=keep)
            self._sync(model)
            ms = (time.perf_counter() - t0) * 1000.0
            if context > 0:
                crop_to(cache, context)
        return ms


class _ForwardClock:
    """Sums the wall time of a module's forwards (hooks on the top module)."""

    def __init__(self, model: Any) -> None:
        self.total_ms = 0.0
        self.calls = 0
        self._t0 = 0.0
        self._handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def _pre(self, *args: Any) -> None:
        self._t0 = time.perf_counter()

    def _post(self, *args: Any) -> None:
        self.total_ms += (time.perf_counter() - self._t0) * 1000.0
        self.calls += 1

    def reset(self) -> None:
        self.total_ms, self.calls = 0.0, 0

    def close(self) -> None:
        for h in self._handles:
            h.remove()


def measure_overheads(target: Any, draft: Any, eos: Iterable[int], prompt_ids: Sequence[int], new_tokens: int = 32,
                      gamma: int = 4, repeats: int = 3, drafter: Callable[[], Any] | None = None) -> dict[str, float]:
    """The loops' own time: ``(wall − TTFT − Σ forwards after the prefill) / rounds`` for
    ``SpeculativeRunner`` (fixed γ) and ``/ (new_tokens − 1)`` for ``AutoregressiveRunner``;
    medians over ``repeats`` (after one warm-up each). ``drafter``: a factory of the drafter to run
    (default: a same-vocabulary ``ModelDrafter`` of ``draft``); a cross-vocabulary drafter's own work
    (text sync, re-tokenization, vocabulary mapping) is then part of the round overhead. Also the
    harness's own share as the time breakdown sees it: ``loop_overhead_ms`` (the ``overhead`` phase
    per round: acceptance, cache crops, policy, bookkeeping; the drafter's non-forward work is in its
    ``draft`` phase) and ``round_ms`` (``(wall − TTFT) / rounds``). A drafter without a model (prompt lookup, ``draft=None``): its whole
    time is part of the round overhead."""
    from methods.base import FixedGamma
    from runners.drafters.model import ModelDrafter
    from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner

    eos = list(eos)
    make = drafter or (lambda: ModelDrafter(draft, eos))
    clocks = {"target": _ForwardClock(target)}
    if draft is not None:
        clocks["draft"] = _ForwardClock(draft)
    try:
        spec, ar, loop, round_ms = [], [], [], []
        for i in range(repeats + 1):
            runner = SpeculativeRunner(target, make(), FixedGamma(gamma), eos)
            for c in clocks.values():
                c.reset()
            gen = runner.generate(list(prompt_ids), new_tokens)
            rounds = len(gen.accepted_trace)
            forwards = sum(c.total_ms for c in clocks.values())
            if i and rounds:  # the prefill forward is in both the wall time and the forwards
                spec.append(max(0.0, (gen.wall_ms - forwards) / rounds))
                loop.append(gen.phase_ms.get("overhead", 0.0) / rounds)
                round_ms.append((gen.wall_ms - gen.ttft_ms) / rounds)
            for c in clocks.values():
                c.reset()
            gen = AutoregressiveRunner(target, eos).generate(list(prompt_ids), new_tokens)
            if i and len(gen.tokens) > 1:
                ar.append(max(0.0, (gen.wall_ms - clocks["target"].total_ms) / (len(gen.tokens) - 1)))
    finally:
        for c in clocks.values():
            c.close()
    return {"round_overhead_ms": statistics.median(spec) if spec else 0.0,
            "ar_overhead_ms": statistics.median(ar) if ar else 0.0,
            "loop_overhead_ms": statistics.median(loop) if loop else 0.0,
            "round_ms": statistics.median(round_ms) if round_ms else 0.0}
