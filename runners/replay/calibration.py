"""Calibration of the latency model on this machine.

The model itself — ``ForwardCost``, ``LatencyModel``, the rule charging a round, and the one reader
of the file — is the core type ``specbench.latency`` (its module docstring has the definitions);
this module measures its terms.

Calibration (``python -m runners.replay calibrate --pair NAME``): ``calibrate(time_forward)``
takes any function ``time_forward(model, k, context) -> ms`` (one timing sample), times
``k = 1..k_max`` at ``ref_context`` and a few contexts and prompt lengths, with warm-up
runs, takes the median of the repeats, and fits the affine parts by least squares. The ``k``
table is kept as measured: on CPUs it is genuinely *not* monotone (Gemma-3-270M fp32, 2
threads: 3 tokens ~173 ms but 4 tokens ~119 ms — matmul kernels differ by shape), so a
nondecreasing fit (``monotone=True``: isotonic regression) is only an option.
At batch sizes (``--batch-sizes 1 2 4 8``): every one of those forwards is also timed with ``b`` rows
(``time_forward(model, k, context, b)``), the sweeps running over every batch size × ``k`` together
(``calibrate_forwards``), and the file gains a ``BatchCosts`` per batch size above 1
(``specbench.latency``); the default, batch 1 only, takes exactly the samples it took before.
``ModelTimer`` is the real ``time_forward`` (a cache prefilled to ``context`` tokens,
one forward of ``k`` tokens, cropped back; the logits kept as the loops keep them: all ``k``
for the target's verification, the last one for a prefill and for the draft): the papers' regime, transformers'
eager loop. ``GraphTimer`` times the same forwards in the production regime (a static cache, each forward captured
in a CUDA graph and replayed). ``measure_overheads`` runs the real loops
once with forward hooks and attributes what the forwards do not explain to the loop.
The JSON file is ``LatencyModel.to_json()``; ``timed_here`` says what its forwards ran on (``meta``: torch threads,
the target's device type and dtype, the plain forward at batch 1, ``specbench.timed_on.TimedOn``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

# the model's names, re-exported for callers of this module (defined in specbench.latency)
from runners.engine.graphs import capture_graph
from specbench.latency import BatchCosts, ForwardCost, LatencyModel
from specbench.sweep_costs import fit_affine
from specbench.timed_on import TimedOn

__all__ = ["BatchCosts", "ForwardCost", "GraphTimer", "capture_graph", "LatencyModel", "ModelTimer", "TimeForward", "calibrate",
           "calibrate_forwards", "calibrate_model", "fit_affine", "interleaved_medians", "isotonic",
           "measure_overheads", "timed_here"]


# ---------------------------------------------------------------------- calibration

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



#: ``(model, k, context[, batch]) -> ms``: one timing sample (``batch`` only above 1)
TimeForward = Callable[..., float]


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


def _sample(time_forward: TimeForward, model: str, k: int, context: int, batch: int) -> float:
    """One timing sample; a batch above 1 is passed as a fourth argument (batch 1: the three of old)."""
    return time_forward(model, k, context) if batch == 1 else time_forward(model, k, context, batch)


def calibrate_forwards(time_forward: TimeForward, model: str, k_max: int, ref_context: int, contexts: Iterable[int],
                       prefill_lengths: Iterable[int], warmup: int = 2, repeats: int = 5, monotone: bool = False,
                       batch_sizes: Sequence[int] = (1,),
                       batch_k_max: int | None = None) -> tuple[dict[int, ForwardCost], dict[int, dict[str, Any]]]:
    """One model's ``ForwardCost`` at every batch size, from timing samples (``interleaved_medians``: sweeps
    over every batch size × ``k``, then over batch size × context, then batch size × prefill length, so that
    a drifting host biases every batch size alike); also the medians measured, per batch size. ``k`` runs to
    ``k_max`` at batch 1 and to ``batch_k_max`` (default ``k_max``) above. ``batch_sizes=(1,)``: exactly the
    samples, in the order, of a batch-1 calibration."""
    sizes, prefill_lengths = sorted({int(b) for b in batch_sizes} | {1}), list(prefill_lengths)
    kmax = {b: k_max if b == 1 else (batch_k_max or k_max) for b in sizes}
    table = interleaved_medians(lambda key: _sample(time_forward, model, key[1], ref_context, key[0]),
                                [(b, k) for b in sizes for k in range(1, kmax[b] + 1)], warmup, repeats)
    ctx_points = sorted({int(c) for c in contexts} | {ref_context})
    ctx = interleaved_medians(lambda key: _sample(time_forward, model, 1, key[1], key[0]),
                              [(b, c) for b in sizes for c in ctx_points if c != ref_context], warmup, repeats)
    prefill = interleaved_medians(lambda key: _sample(time_forward, model, key[1], 0, key[0]),
                                  [(b, p) for b in sizes for p in prefill_lengths], warmup, repeats)
    costs, raws = {}, {}
    for b in sizes:
        raw = {k: table[(b, k)] for k in range(1, kmax[b] + 1)}
        steps = dict(zip(raw, isotonic(list(raw.values())))) if monotone else dict(raw)  # a dip is noise
        step_affine = fit_affine(list(steps), list(steps.values()))
        by_ctx = {c: (raw[1] if c == ref_context else ctx[(b, c)]) for c in ctx_points}
        slope = fit_affine(list(by_ctx), list(by_ctx.values()))[1] if len(by_ctx) > 1 else 0.0
        by_len = {p: prefill[(b, p)] for p in prefill_lengths}
        costs[b] = ForwardCost(steps, step_affine, max(0.0, slope), ref_context, fit_affine(list(by_len), list(by_len.values())))
        raws[b] = {"step_raw_ms": raw, "context_ms": by_ctx, "prefill_ms": by_len}
    return costs, raws


def calibrate_model(time_forward: TimeForward, model: str, k_max: int, ref_context: int, contexts: Iterable[int],
                    prefill_lengths: Iterable[int], warmup: int = 2, repeats: int = 5,
                    monotone: bool = False) -> tuple[ForwardCost, dict[str, Any]]:
    """One model's batch-1 ``ForwardCost`` (``calibrate_forwards`` at batch 1) and the medians measured."""
    costs, raws = calibrate_forwards(time_forward, model, k_max, ref_context, contexts, list(prefill_lengths), warmup,
                                     repeats, monotone)
    return costs[1], raws[1]


def calibrate(time_forward: TimeForward, k_max: int = 33, draft_k_max: int = 4, ref_context: int = 128,
              contexts: Iterable[int] = (32, 512), prefill_lengths: Iterable[int] = (16, 64, 128, 256),
              warmup: int = 2, repeats: int = 5, monotone: bool = False, batch_sizes: Sequence[int] = (1,),
              batch_k_max: int | None = None) -> LatencyModel:
    """A ``LatencyModel`` from ``time_forward(model, k, context[, batch]) -> ms`` (``model``: ``"target"`` or
    ``"draft"``; ``batch``, the rows of the forward, passed only above 1): the target at ``k = 1..k_max`` (a
    verification of ``γ`` tokens feeds ``γ + 1``), the draft at ``k = 1..draft_k_max`` (one drafted token, or
    a catch-up), each at ``ref_context``; ``k = 1`` at ``contexts`` for the per-context slope; prefills of
    ``prefill_lengths`` tokens; all of it at every batch size of ``batch_sizes`` (1 always; the target's
    ``k`` to ``batch_k_max`` above 1), each model's sweeps interleaved over the batch sizes
    (``calibrate_forwards``). Overheads are not measured here (``measure_overheads``)."""
    contexts, prefill_lengths = list(contexts), list(prefill_lengths)
    target, t_raw = calibrate_forwards(time_forward, "target", k_max, ref_context, contexts, prefill_lengths,
                                       warmup, repeats, monotone, batch_sizes, batch_k_max)
    draft, d_raw = calibrate_forwards(time_forward, "draft", draft_k_max, ref_context, contexts, prefill_lengths,
                                      warmup, repeats, monotone, batch_sizes, draft_k_max)
    samples: dict[str, Any] = {"target": _jsonable(t_raw[1]), "draft": _jsonable(d_raw[1])}
    batches = {b: BatchCosts(target[b], draft[b]) for b in sorted(target) if b > 1}
    if batches:
        samples["batch"] = {str(b): {"target": _jsonable(t_raw[b]), "draft": _jsonable(d_raw[b])} for b in batches}
    meta = {"kind": "calibrated", "sampling": "interleaved", "warmup": warmup, "repeats": repeats, "monotone": monotone,
            **({"batch_sizes": sorted(target)} if batches else {}), "samples": samples}
    return LatencyModel(target[1], draft[1], 0.0, 0.0, meta, batches)


def timed_here(target: Any, dtype: str | None = None, batch_fast_linear: str | bool | None = None) -> TimedOn:
    """What ``ModelTimer`` times ``target``'s forwards on in this process: torch's CPU threads now
    (``torch.get_num_threads()``), the target's device type, ``dtype`` (its model node's; ``auto`` or None: the
    loaded weights' dtype), the plain forward at batch 1, and ``batch_fast_linear`` above it (None: no batch
    tables)."""
    import torch

    from specbench.models import model_device

    if not dtype or dtype == "auto":
        dtype = str(next(target.parameters()).dtype)
    return TimedOn(threads=torch.get_num_threads(), device=model_device(target), dtype=dtype, fast_linear=False,
                   batch_fast_linear=batch_fast_linear)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    return obj


class ModelTimer:
    """The real ``time_forward``: ``(model, k, context[, batch]) -> ms`` on the pair's models (CPU wall time;
    CUDA synchronised; ``batch`` rows, each its own tokens, in one forward). Feeds tokens from ``token_pool`` (cycled): one pool for every model, or one
    per model name (a draft with another tokenizer reads its own ids)."""

    def __init__(self, models: Mapping[str, Any], token_pool: Sequence[int] | Mapping[str, Sequence[int]],
                 batch_models: Mapping[str, Any] | None = None) -> None:
        self.models = dict(models)
        #: what runs a model's forwards of more than one row, as the batched engine runs them (the target's
        #: ``runners.engine.fast_linear.batch_kernels`` executor); absent: the model itself
        self.batch_models = dict(batch_models or {})
        pools = token_pool if isinstance(token_pool, Mapping) else {name: token_pool for name in self.models}
        self.pools = {name: list(pools.get(name) or []) for name in self.models}
        for name, pool in self.pools.items():
            if not pool:
                raise ValueError(f"token_pool of {name!r} is empty")
        self._caches: dict[tuple, Any] = {}

    def _tokens(self, name: str, start: int, k: int) -> list[int]:
        pool = self.pools[name]
        return [pool[(start + i) % len(pool)] for i in range(k)]

    def _sync(self, model: Any) -> None:
        import torch

        if next(model.parameters()).device.type == "cuda":
            torch.cuda.synchronize()

    def __call__(self, name: str, k: int, context: int, batch: int = 1) -> float:
        import torch

        from runners.engine.kv import cache_arg, crop_to, new_cache

        rows = int(batch)
        model = self.batch_models.get(name, self.models[name]) if rows > 1 else self.models[name]
        device = next(model.parameters()).device
        # batch 1 as the one-sequence loop calls the model; more rows as the batched engine does: each row
        # its own tokens, a 2-D attention mask of the valid columns and explicit positions

        def ids(start: int, n: int) -> Any:
            return torch.tensor([self._tokens(name, start + 7 * r, n) for r in range(rows)], device=device)

        def masked(columns: int, first: int, n: int) -> dict[str, Any]:
            if rows == 1:
                return {}
            return {"attention_mask": torch.ones(rows, columns, dtype=torch.long, device=device),
                    "position_ids": torch.arange(first, first + n, device=device).expand(rows, n)}

        with torch.inference_mode():
            if context <= 0:
                cache = new_cache(model)
            else:
                key = (name, context) if rows == 1 else (name, context, rows)
                cache = self._caches.get(key)
                if cache is None:
                    cache = new_cache(model)
                    model(input_ids=ids(0, context), **cache_arg(model, cache), use_cache=True, logits_to_keep=1,
                          **masked(context, 0, context))
                    self._caches[key] = cache
            inp = ids(context, k)
            extra = masked(max(0, context) + k, max(0, context), k)
            # as the loops ask: the target's verification keeps the logits of every fed token; a prefill
            # and the draft's forwards keep the last one (the LM head is a large part of a small model)
            keep = k if name == "target" and context > 0 else 1
            self._sync(model)
            t0 = time.perf_counter()
            model(input_ids=inp, **cache_arg(model, cache), use_cache=True, logits_to_keep=keep, **extra)
            self._sync(model)
            ms = (time.perf_counter() - t0) * 1000.0
            if context > 0:
                crop_to(cache, context)
        return ms


class GraphTimer:
    """``time_forward`` in the production regime: a static KV cache (``runners.engine.kv.new_static_cache``, one per
    model, context and row count, prefilled once) and each ``(model, k, context, rows)`` forward captured once in a
    CUDA graph and replayed (``torch.cuda.CUDAGraph``, after warm-ups on a side stream as ``torch.cuda.graphs``
    asks), the cache rewound to ``context`` before every call (``runners.engine.kv.rewind``): what a serving
    engine's captured decode costs, without the eager loop's kernel launches. ``capture=False`` (the default off
    CUDA) runs the same static-cache forward eagerly: the CPU's check of everything but the capture. Rows above one
    are fed without padding or an explicit mask (every row the same length: the causal mask the static cache
    builds), unlike ``ModelTimer``'s batched-engine shape. A prefill (``context <= 0``) is timed eagerly on a
    dynamic cache (``ModelTimer``): compute-bound, and one per request. ``graphs`` counts the captures."""

    def __init__(self, models: Mapping[str, Any], token_pool: Sequence[int] | Mapping[str, Sequence[int]],
                 k_max: int, capture: bool | None = None, warmup: int = 2) -> None:
        self.eager = ModelTimer(models, token_pool)
        self.models, self.k_max, self.warmup = self.eager.models, int(k_max), int(warmup)
        if capture is None:
            capture = all(next(m.parameters()).device.type == "cuda" for m in self.models.values())
        self.capture = bool(capture)
        self._caches: dict[tuple, Any] = {}
        self._runs: dict[tuple, Callable[[], Any]] = {}
        self.graphs = 0

    def _cache(self, name: str, context: int, rows: int) -> Any:
        import torch

        from runners.engine.kv import cache_arg, new_static_cache

        key = (name, context, rows)
        if key not in self._caches:
            model = self.models[name]
            cache = new_static_cache(model, context + self.k_max + 1)
            ids = torch.tensor([self.eager._tokens(name, 7 * r, context) for r in range(rows)],
                               device=next(model.parameters()).device)
            with torch.inference_mode():
                model(input_ids=ids, **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
            self._caches[key] = cache
        return self._caches[key]

    def _run(self, name: str, k: int, context: int, rows: int) -> Callable[[], Any]:
        """The timed call of one key: the graph's replay, or the eager static forward; either rewinds first."""
        import torch

        from runners.engine.kv import cache_arg, rewind

        key = (name, k, context, rows)
        if key in self._runs:
            return self._runs[key]
        if k > self.k_max:
            raise ValueError(f"GraphTimer: k = {k} above its k_max = {self.k_max}")
        model, cache = self.models[name], self._cache(name, context, rows)
        inp = torch.tensor([self.eager._tokens(name, context + 7 * r, k) for r in range(rows)],
                           device=next(model.parameters()).device)
        keep = k if name == "target" else 1  # as ModelTimer: the verification keeps every fed token's logits

        def forward() -> Any:
            return model(input_ids=inp, **cache_arg(model, cache), use_cache=True, logits_to_keep=keep).logits

        if not self.capture:
            def run() -> Any:
                rewind(cache, context)
                return forward()
        else:
            graph, out = capture_graph(forward, self.warmup, before=lambda: rewind(cache, context))
            self.graphs += 1

            def run() -> Any:
                rewind(cache, context)
                graph.replay()
                return out
        self._runs[key] = run
        return run

    def __call__(self, name: str, k: int, context: int, batch: int = 1) -> float:
        import torch

        if context <= 0:
            return self.eager(name, k, context, batch)
        run = self._run(name, int(k), int(context), int(batch))
        model = self.models[name]
        with torch.inference_mode():
            self.eager._sync(model)
            t0 = time.perf_counter()
            run()
            self.eager._sync(model)
        return (time.perf_counter() - t0) * 1000.0

    def logits(self, name: str, k: int, context: int, batch: int = 1) -> Any:
        """The logits one timed call computes (a copy): what a test compares with the eager loop's."""
        import torch

        with torch.inference_mode():
            return self._run(name, int(k), int(context), int(batch))().clone()


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
    from runners.engine.factory import build_runner

    eos = list(eos)
    make = drafter or (lambda: ModelDrafter(draft, eos))
    clocks = {"target": _ForwardClock(target)}
    if draft is not None:
        clocks["draft"] = _ForwardClock(draft)
    try:
        spec, ar, loop, round_ms = [], [], [], []
        for i in range(repeats + 1):
            runner = build_runner("speculative", target, eos, drafter=make(), policy=FixedGamma(gamma))
            for c in clocks.values():
                c.reset()
            gen = runner.generate(list(prompt_ids), new_tokens)
            rounds = len(gen.rounds)
            forwards = sum(c.total_ms for c in clocks.values())
            if i and rounds:  # the prefill forward is in both the wall time and the forwards
                spec.append(max(0.0, (gen.wall_ms - forwards) / rounds))
                loop.append(gen.phase_ms.get("overhead", 0.0) / rounds)
                round_ms.append((gen.wall_ms - gen.ttft_ms) / rounds)
            for c in clocks.values():
                c.reset()
            gen = build_runner("ar", target, eos).generate(list(prompt_ids), new_tokens)
            if i and len(gen.tokens) > 1:
                ar.append(max(0.0, (gen.wall_ms - clocks["target"].total_ms) / (len(gen.tokens) - 1)))
    finally:
        for c in clocks.values():
            c.close()
    return {"round_overhead_ms": statistics.median(spec) if spec else 0.0,
            "ar_overhead_ms": statistics.median(ar) if ar else 0.0,
            "loop_overhead_ms": statistics.median(loop) if loop else 0.0,
            "round_ms": statistics.median(round_ms) if round_ms else 0.0}
