"""Which kernels compute the target's forwards on this host, and what they cost: the engine's measurements.

* **shape-aware kernels** (``engine.fast_linear``): a block runs through a private copy of the model
  (``runners.engine.linear_kernels.kernel_copy``: the transposed product for a few rows, ``head`` / ``all``, or
  oneDNN's matmul on reordered weights, ``onednn``). The batched engine takes a copy of its own (``batch_kernels``:
  up to ``BATCH_MAX_ROWS`` rows; the ``onednn`` copy is shared). ``fast_scope`` resolves the option (``auto``: the
  fastest of the plain forward and the copies, measured on the host, ``chosen_kernels``).
* **the probe** (``probe_costs``): with the kernels the engine will use, the decoder body feeding
  ``m = 1..k_max`` tokens and the LM head on ``r = 1..k_max`` rows, the fastest of a few timings; measured once per
  model, kernels and threads (``probed_costs``), and shared between the jobs of a sweep (``measurements``,
  ``seed_measurements``; ``runners.jobs.kernels``).

How a block is run with them (padding, the target alone's step) is ``runners.engine.verify_forward``.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from runners.engine.kv import cache_arg, crop_to, new_cache
from runners.engine.linear_kernels import ONEDNN, SCOPES, kernel_copy, onednn_available, packed_bytes
from specbench.config import EngineConfig
from specbench.models import model_device
from specbench.registry import ConfigError

log = logging.getLogger("specbench")


def _fastest_ms(fn: Callable[[], Any], sync: Callable[[], None], warmup: int, repeats: int) -> float:
    """The fastest of ``repeats`` timings: other processes on the machine only ever add time."""
    return _fastest_each({0: fn}, sync, warmup, repeats)[0]


def _fastest_each(fns: Mapping[Any, Callable[[], Any]], sync: Callable[[], None], warmup: int,
                  repeats: int) -> dict[Any, float]:
    """The fastest of ``repeats`` timings of each of ``fns``, in ms, timed in rounds (every callable once a round, in
    an order rotating from round to round) after ``warmup`` untimed calls of each: a slow spell of the host (another
    process, a frequency drop) then reaches a few samples of every callable, not all the samples of one, whose
    fastest would be read as its cost."""
    keys = list(fns)
    for key in keys:
        for _ in range(warmup):
            fns[key]()
    samples: dict[Any, list[float]] = {key: [] for key in keys}
    for r in range(repeats):
        shift = r % len(keys) if keys else 0
        for key in keys[shift:] + keys[:shift]:
            sync()
            t0 = time.perf_counter()
            fns[key]()
            sync()
            samples[key].append((time.perf_counter() - t0) * 1000.0)
    return {key: min(values) for key, values in samples.items()}


def probe_costs(executor: Any, k_max: int, context: int = 128, warmup: int = 1,
                repeats: int = 5) -> tuple[dict[int, float], dict[int, float]]:
    """``(body_ms[m], head_ms[r])`` for ``m, r = 1..k_max``: the decoder body of ``executor`` (the
    module that will run the blocks) feeding ``m`` tokens on a cache of ``context`` tokens, and its
    LM head on ``r`` rows. The fastest of ``repeats`` after ``warmup`` (a busy machine adds noise
    of one sign only; the table is a property of the kernels), every item timed once a round (``_fastest_each``), so
    a slow spell of the host cannot take all of one length's samples and move the bucket map."""
    device = model_device(executor)
    decoder = executor.get_decoder() if hasattr(executor, "get_decoder") else executor.model
    head = executor.get_output_embeddings()
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    fns: dict[tuple[str, int], Callable[[], Any]] = {}
    with torch.inference_mode():
        cache = new_cache(executor)
        decoder(input_ids=torch.arange(10, 10 + context, device=device)[None], **cache_arg(decoder, cache),
                use_cache=True)
        width = int(head.weight.shape[1])
        for m in range(1, k_max + 1):
            inp = torch.arange(20, 20 + m, device=device)[None]

            def step(inp: torch.Tensor = inp) -> None:
                decoder(input_ids=inp, **cache_arg(decoder, cache), use_cache=True)
                crop_to(cache, context)

            h = torch.randn(1, m, width, device=device, dtype=head.weight.dtype)
            fns[("body", m)], fns[("head", m)] = step, (lambda h=h: head(h))
        fastest = _fastest_each(fns, sync, warmup, repeats)
    return ({m: fastest[("body", m)] for m in range(1, k_max + 1)},
            {m: fastest[("head", m)] for m in range(1, k_max + 1)})


#: per model, for as long as the model lives (keyed by the model object, not its ``id``: a model evicted from
#: ``specbench.models.cache`` and freed takes its entries with it, and a new model that reuses its ``id`` never
#: gets them): its transposed copies by ``(scope, min_rows, max_rows)``, its probes by ``(kernels, k_max,
#: threads)`` (``kernels``: None for the model itself, else the copy's scope)
_EXECUTORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fast_executor(model: Any, scope: str, max_rows: int = 16, min_rows: int = 2) -> Any | None:
    """``kernel_copy(model, scope, max_rows=max_rows, min_rows=min_rows)``, built once per model (for its
    lifetime); one ``onednn`` copy whatever the rows (it takes them all: the batched engine and the loop share it,
    and its reordered weights are made once)."""
    built = _EXECUTORS.setdefault(model, {})
    key = (scope, 0, 0) if scope == ONEDNN else (scope, int(min_rows), int(max_rows))
    if key not in built:
        built[key] = kernel_copy(model, scope, max_rows=max_rows, min_rows=min_rows)
    return built[key]


def probed_costs(model: Any, executor: Any | None, kernels: str | None, k_max: int) -> tuple[dict[int, float], dict[int, float]]:
    """``probe_costs`` of ``executor`` (None: ``model`` itself) up to ``k_max``, measured once per model, ``kernels``
    label (``_PROBED``), ``k_max`` and torch's threads, or seeded by another job of the sweep (``seed_measurements``);
    the first ``k_max`` rows of a longer probe of the same kernels when one was made."""
    probed = _PROBED.setdefault(model, {})
    threads = torch.get_num_threads()
    key = (kernels, int(k_max), threads)
    if key not in probed:
        # a longer probe of the same kernels holds this one's rows (each length is timed on its own): sliced, not
        # measured again (the target alone's step probes up to PROBE_K_MAX, the loop's blocks up to max(9, γ + 1))
        longer = min((k for (label, k, t) in probed if label == kernels and t == threads and k >= int(k_max)),
                     default=None)
        if longer is not None:
            body, head = probed[(kernels, longer, threads)]
            return ({m: v for m, v in body.items() if m <= int(k_max)},
                    {r: v for r, v in head.items() if r <= int(k_max)})
        probed[key] = probe_costs(executor if executor is not None else model, k_max)
    return probed[key]


#: per model (for its lifetime): the kernels ``auto`` chose on this machine (``chosen_kernels``): ``(loop, step)``,
#: each a scope or None (plain)
_CHOSEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: the blocks ``chosen_kernels`` times: an autoregressive step and verifications of γ = 1..7
PAY_BLOCKS = (1, 2, 4, 6, 8)


def _block_ms(runs: Any, cache: Any, context: int, k: int, warmup: bool = False) -> float:
    """One forward of ``k`` tokens by ``runs`` on ``cache`` (cropped back to ``context`` after it), in ms; one
    untimed forward first when ``warmup``."""
    device = model_device(runs)
    inp = torch.arange(20, 20 + k, device=device)[None]

    def step() -> None:
        runs(input_ids=inp, **cache_arg(runs, cache), use_cache=True, logits_to_keep=k)
        crop_to(cache, context)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    return _fastest_ms(step, sync, int(warmup), 1)


#: ``onednn`` is a candidate of ``auto`` only while its reordered weights (``packed_bytes``) take at most this share
#: of the memory free now (``specbench.resources.free_bytes``): a second copy of a large target's linear layers
#: must not push the job into swap. ``engine.fast_linear=onednn`` asked for by name is built regardless.
ONEDNN_MEMORY_SHARE = 0.5


def _candidates(model: Any) -> dict[str, Any]:
    """The copies ``chosen_kernels`` times against ``model``: the transposed copy the loop runs (``all``, one row as
    the first of two) and, where oneDNN is here and its weights fit (``ONEDNN_MEMORY_SHARE``), the ``onednn`` one."""
    from specbench.resources import free_bytes

    out = {"all": fast_executor(model, "all", min_rows=1)}
    if onednn_available():
        free, extra = free_bytes("cpu"), packed_bytes(model)
        if free is None or extra <= ONEDNN_MEMORY_SHARE * free:
            out[ONEDNN] = fast_executor(model, ONEDNN)
        else:
            log.info("engine.fast_linear=auto: onednn not tried (its weights %.1f GB, %.1f GB free)",
                     extra / 1e9, free / 1e9)
    return {scope: executor for scope, executor in out.items() if executor is not None}


#: rounds of the 1-token forward ``chosen_kernels`` times (``repeats`` for the longer blocks): the target alone's
#: kernels, the baseline rule's, are decided on it. On a 2-core Intel Xeon without AMX (2026-11-28) three rounds
#: put the target alone on oneDNN's step while over a whole run its plain step decoded 1.07× faster
#: (``results/committed/vs_hf_xeon``: ``ar-plain`` 16.58 tokens/s against ``ar`` 15.51, 8 of 10 prompts faster), and
#: two probes of the same host the same hour chose differently (``make_run_xeon_avx512``: plain;
#: ``make_run_draft_compile_xeon``: oneDNN); the fastest of more rounds sits nearer each kernel's own cost. Six
#: probes of that host, quiet, alternating 9 and 3 rounds, all chose plain (1 token: 45.7–50.8 ms against
#: oneDNN's 50.7–58.1): the extra rounds guard the noisy moments, about 1 s of probing there.
STEP_REPEATS = 9


def chosen_kernels(model: Any, step: bool = False, blocks: tuple[int, ...] = PAY_BLOCKS, context: int = 64,
                   repeats: int = 3, margin: float = 0.03) -> str | None:
    """The kernels ``engine.fast_linear=auto`` runs ``model`` on, measured on this machine: the plain forward and
    each of ``_candidates`` (the transposed copy ``all``, oneDNN's ``onednn``) run one forward of each of ``blocks``
    tokens on a cache of ``context`` tokens, the kernels alternating (the fastest of ``repeats`` each, of
    ``STEP_REPEATS`` for the 1-token forward: another
    process only ever adds time). The loop's kernels: the copy with the least sum over the blocks, taken when that
    sum is at least ``margin`` below the plain one, else None (plain). ``step``: the target alone's kernels (the
    baseline rule: it is offered every kernel ``auto`` weighs, not only the loop's), the loop's unless another's
    1-token forward is at least ``margin`` faster. Measured once per model (for its lifetime).

    Why measure: on a 2-core AMD EPYC the transposed copy paid (Gemma-3-270M's LM head: 2 rows
    through ``(W·xᵀ)ᵀ`` 25.6 ms against 64.9 ms for one row of ``F.linear``) and on a 2-core
    Intel Xeon with AVX-512 it lost (2 rows: ``F.linear`` 24.6 ms, ``(W·xᵀ)ᵀ`` 59.8 ms, 2026-11-26,
    ``scripts/bench_linear_rows.py``); oneDNN's reordered weights beat both on the EPYC (``PackedLinear``), unmeasured
    elsewhere. The same option can speed the loop up on one host and slow it down on another, so ``auto``
    decides on the host it runs on."""
    if model not in _CHOSEN:
        _CHOSEN[model] = _choose(model, blocks, context, repeats, margin)
    return _CHOSEN[model][1 if step else 0]


def _choose(model: Any, blocks: tuple[int, ...], context: int, repeats: int,
            margin: float) -> tuple[str | None, str | None]:
    """``(loop, step)`` kernels of ``chosen_kernels`` (its docstring), measured now."""
    candidates = _candidates(model)
    if not candidates:
        return None, None
    device = model_device(model)
    runs = {None: model, **candidates}
    fastest: dict[int, dict[str | None, float]] = {}
    with torch.inference_mode():
        cache = new_cache(model)
        model(input_ids=torch.arange(10, 10 + context, device=device)[None], **cache_arg(model, cache), use_cache=True,
              logits_to_keep=1)
        for k in blocks:  # alternating: a drift of the host reaches every kernel alike
            samples: dict[str | None, list[float]] = {scope: [] for scope in runs}
            for r in range(max(repeats, STEP_REPEATS) if k == 1 else repeats):
                for scope, executor in runs.items():
                    samples[scope].append(_block_ms(executor, cache, context, k, warmup=r == 0))
            fastest[k] = {scope: min(values) for scope, values in samples.items()}
    total = {scope: sum(by_scope[scope] for by_scope in fastest.values()) for scope in runs}
    best = min(candidates, key=lambda scope: total[scope])
    loop = best if total[best] < (1.0 - margin) * total[None] else None
    step = loop
    if 1 in fastest:
        quickest = min(runs, key=lambda scope: fastest[1][scope])
        if fastest[1][quickest] < (1.0 - margin) * fastest[1][loop]:
            step = quickest
    log.info("engine.fast_linear=auto: %s, the target alone's step %s (%s, blocks %s; 1 token: %s)", loop or "plain",
             step or "plain", ", ".join(f"{scope or 'plain'} {ms:.1f} ms" for scope, ms in total.items()),
             list(blocks), ", ".join(f"{scope or 'plain'} {ms:.1f} ms" for scope, ms in fastest.get(1, {}).items()))
    built = _EXECUTORS.get(model, {})
    for key in [key for key in built if key[0] in candidates and key[0] not in (loop, step)]:
        del built[key]  # a copy not taken holds no memory (the oneDNN one's reordered weights: the linear layers' size)
    return loop, step


def measurements(model: Any) -> dict[str, Any]:
    """What this process measured of ``model``'s kernels, as JSON: ``fast_linear`` and ``fast_linear_step``, the
    kernels ``auto`` chose for the loop and for the target alone's step (``chosen_kernels``: a scope, false for the
    plain forward, None: not measured) and the bucket probes (``"<scope>|<k_max>|<threads>"`` →
    ``[body_ms, head_ms]``). ``runners.jobs.kernels`` shares them between the jobs of a sweep, so that every job runs
    the kernels the first one chose."""
    probes = {f"{scope}|{k}|{threads}": [{str(m): v for m, v in body.items()}, {str(r): v for r, v in head.items()}]
              for (scope, k, threads), (body, head) in _PROBED.get(model, {}).items()}
    loop, step = _CHOSEN.get(model, (None, None))
    measured = model in _CHOSEN
    return {"fast_linear": (loop or False) if measured else None,
            "fast_linear_step": (step or False) if measured else None, "probes": probes}


def seed_measurements(model: Any, data: Mapping[str, Any]) -> None:
    """Take ``measurements`` made elsewhere (another job of the sweep) as ``model``'s own: what is seeded is not
    measured again in this process."""
    loop = data.get("fast_linear")
    if loop is None and isinstance(data.get("transposed_pays"), bool):  # written before ``onednn``
        loop = "all" if data["transposed_pays"] else False
    step = data.get("fast_linear_step", loop)  # a file without it: the step took the loop's kernels
    if all(v is False or v in SCOPES for v in (loop, step)) and model not in _CHOSEN:
        _CHOSEN[model] = (loop or None, step or None)
    probed = _PROBED.setdefault(model, {})
    for key, (body, head) in (data.get("probes") or {}).items():
        scope, k, threads = key.split("|")
        probed.setdefault((None if scope == "None" else scope, int(k), int(threads)),
                          ({int(m): float(v) for m, v in body.items()}, {int(r): float(v) for r, v in head.items()}))


def fast_scope(model: Any, engine: EngineConfig | None, step: bool = False) -> str | None:
    """``engine.fast_linear`` resolved for ``model``: ``head`` / ``all`` / ``onednn``, or None (off). ``auto``: on a
    CPU model, the kernels measured fastest on this machine (``chosen_kernels``; ``step``: for the target alone's
    step), else off; off on GPU, where the option is unmeasured. ``onednn`` asked for where it cannot run (a GPU
    model, a torch without oneDNN) is refused in one line (``ConfigError``), not run as something else."""
    scope = (engine or EngineConfig()).fast_linear
    if scope == "auto":
        scope = chosen_kernels(model, step=step) if model_device(model).type == "cpu" else False
    elif scope == ONEDNN and (model_device(model).type != "cpu" or not onednn_available()):
        where = model_device(model)
        raise ConfigError(f"engine.fast_linear=onednn runs oneDNN's CPU kernels, but the target runs on {where}"
                          if where.type != "cpu" else "engine.fast_linear=onednn: this torch has no oneDNN "
                          "(torch.backends.mkldnn); engine.fast_linear=auto takes the fastest kernels it has")
    return scope if scope in SCOPES else None


@dataclass(frozen=True)
class BatchKernels:
    """Which kernels the target's batched forwards run on: ``executor`` (a ``kernel_copy``
    of the target, ``engine.fast_linear``: the same function, ``x·Wᵀ`` computed as ``(W·xᵀ)ᵀ`` for a few rows)
    or, None, the target itself; ``scope`` names it in the job's summary. The speculative loop and the target
    alone at the same B take the same kernels, so their ratio compares like with like."""

    executor: Any | None = None
    scope: str | None = None

    def describe(self) -> dict[str, Any]:
        """The job summary's ``engine`` of a batched job: the only engine option it takes."""
        return {"fast_linear": self.scope or False, "buckets": {}, "fused_prefill": False}


#: the most rows the batched engine's transposed layers take: B rows of an autoregressive step, B × (γ + 1)
#: of a verification, B of a prefill's LM head. Measured on a 2-core AVX2 EPYC (2026-11-26,
#: ``scripts/bench_linear_rows.py``, results/committed/policy_lab_batch/bench/linear_rows.log): on Gemma-3-270M's
#: LM head ``F.linear`` takes 1.03–6.1× the time of ``(W·xᵀ)ᵀ`` from 2 to 96 rows; on its MLP layers 1.0–1.9×,
#: but for 8 and 12 rows of the up projection (0.82–0.88).
BATCH_MAX_ROWS = 64


def batch_kernels(model: Any, engine: EngineConfig | None) -> BatchKernels:
    """The kernels of the batched engine (``BatchKernels``) from the typed ``engine``
    config: ``fast_linear`` as ``fast_scope`` resolves it, transposing up to ``BATCH_MAX_ROWS`` rows; the
    batch-1 options (``verify_buckets``, ``fused_prefill``) do not apply there."""
    scope = fast_scope(model, engine)
    executor = fast_executor(model, scope, BATCH_MAX_ROWS) if scope is not None else None
    return BatchKernels(executor, scope if executor is not None else None)
