"""How the speculative loop runs the target on a block of tokens: ``VerifyForward``.

``VerifyForward(model)(cache, feed, keep)`` feeds ``feed`` (token ids) on ``cache`` and
returns the logits of the last ``keep`` fed positions, ``[keep, vocab]``. The default is
one plain ``model(input_ids, cache, logits_to_keep=keep)`` call (``kv.cache_arg``: the cache's keyword). Two options,
both lossless (they change which kernels compute the same function, not the function):

* **shape-aware kernels** (``fast_linear``): the block runs through a private copy of the model whose
  ``nn.Linear`` layers compute ``x·Wᵀ`` as ``(W·xᵀ)ᵀ`` for a few rows, or on oneDNN's reordered weights
  (``runners.engine.fast_linear``: the copies, which one is fastest on this host, and the probe of what each block
  length costs).
* **shape-aware verification** (``buckets``: ``{n: (m, r)}``): a block of ``n`` tokens is
  padded to ``m ≥ n`` tokens (copies of its last token) and the LM head is applied to
  ``r`` rows (``n ≤ r ≤ m``: the last ``keep`` real positions plus ``r − n`` padded ones),
  because on some CPUs a forward of ``m`` tokens is cheaper than one of ``n < m`` (kernels
  differ by shape; Gemma-3-270M, 2 threads, plain kernels: 3 tokens cost more than 8).
  Attention is causal, so the real positions never see the padding; their logits are the only
  ones returned, and the loop's cache crop (``crop_to(cache, len(ids) − 1)``) drops the padded
  positions with the rejected ones (after a padded prefill, a crop to the prompt's length). Only blocks whose ``n`` is in the table are padded.

``runners.engine.fast_linear.probe_costs`` measures, with the kernels the engine will use, the decoder body feeding
``m = 1..k_max`` tokens and the LM head on ``r = 1..k_max`` rows; ``choose_buckets`` keeps,
for each ``n``, the cheapest ``(m, r)`` when it beats ``(n, n)`` by a margin. ``engine_forward``
builds a ``VerifyForward`` from the typed ``engine`` config (``specbench.config.EngineConfig``, validated
at the job's boundary); ``engine_options`` gives ``SpeculativeRunner``'s keyword arguments.

* **block-invariant forwards** (``width``, ``engine.width``; ``runners.engine.invariant``): after the prefill every
  forward feeds exactly ``width`` tokens (padded, a longer block in pieces), the LM head on all of them, on a static
  cache, and the padded positions are rolled back here; the loop and the target alone then compute a position's
  logits to the same bits. It supersedes the bucket map (every block has one shape).

The target alone every speedup divides by steps on ``step_forward(model, engine)`` (the baseline rule): the
fastest 1-token step among the kernels the loop of ``engine`` uses — its executor on one token (with
``fast_linear`` on, the transposed copy, whose single row is the first of two: ``linear_kernels.SINGLE_ROW``, or the
``onednn`` one) and,
where the engine pads blocks, a step padded to ``m ≤ PROBE_K_MAX`` tokens — measured by the same probe, whatever
the bucket map and whatever γ, so every job of a sweep divides by one target alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from runners.engine.fast_linear import fast_executor, fast_scope, probed_costs
from runners.engine.graphs import forward_logits
from runners.engine.invariant import resolve_width
from runners.engine.kv import cache_len, crop_to, is_static
from runners.engine.linear_kernels import TransposedLinear
from specbench.config import EngineConfig
from specbench.models import model_device
from specbench.registry import ConfigError

Buckets = dict[int, tuple[int, int]]


class VerifyForward:
    """The target's forward of a block (module docstring). ``executor``: the module that runs
    blocks (a ``kernel_copy`` of ``model``); default ``model``. ``width``: block-invariant forwards of that many
    tokens (the bucket map then unused)."""

    def __init__(self, model: Any, buckets: Mapping[int, tuple[int, int]] | None = None,
                 executor: Any | None = None, scope: str | None = None, width: int | None = None) -> None:
        self.model = model
        self.width = int(width) if width else None
        if self.width is not None and self.width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        self.executor = executor if executor is not None else model
        self.scope = scope if executor is not None else None
        #: the fewest rows the executor's layers transpose (None: no transposed layers)
        self.min_rows = min((m.min_rows for m in self.executor.modules() if isinstance(m, TransposedLinear)),
                            default=None) if self.scope is not None else None
        self.device = model_device(model)
        self.buckets: Buckets = {int(n): (int(m), int(r)) for n, (m, r) in (buckets or {}).items()}
        for n, (m, r) in self.buckets.items():
            if not n <= r <= m:
                raise ValueError(f"bucket {n} -> (m={m}, r={r}) needs n <= r <= m")

    def __call__(self, cache: Any, feed: list[int], keep: int) -> torch.Tensor:
        if self.width is not None:
            return self._fixed(cache, feed, keep)
        n = len(feed)
        m, r = self.buckets.get(n, (n, keep))
        r = max(r, keep)
        if m > n:
            feed = feed + [feed[-1]] * (m - n)
        rows: int | torch.Tensor = r if m == n else torch.arange(n - r, n, device=self.device)
        logits = forward_logits(self.executor, cache, feed, rows, self.device)[0]  # a captured cache: a graph
        return logits[r - keep:] if r > keep else logits

    def _fixed(self, cache: Any, feed: list[int], keep: int) -> torch.Tensor:
        """Block-invariant forwards (module docstring): the prefill (an empty cache) in one forward of the prompt
        (padded to ``width`` when shorter, the head on its last ``keep`` real rows: the same call in both loops);
        every later block in pieces of ``width`` tokens, each padded to ``width`` with the head on all of them. The
        cache is left at the real tokens' end."""
        if not is_static(cache):
            raise RuntimeError("engine.width runs on a static cache (runners.engine.kv.use_static); this one is not")
        width, n = int(self.width), len(feed)
        start = cache_len(cache)
        pieces = [feed] if start == 0 else [feed[i:i + width] for i in range(0, n, width)]
        out = []
        for piece in pieces:
            real = len(piece)
            padded = piece + [piece[-1]] * (width - real)
            if start == 0:
                rows: int | torch.Tensor = keep if real >= width else torch.arange(real - keep, real, device=self.device)
                out.append(forward_logits(self.executor, cache, padded, rows, self.device)[0])
            else:
                out.append(forward_logits(self.executor, cache, padded, width, self.device)[0, :real])
            start += real
            if cache_len(cache) > start:
                crop_to(cache, start)
        logits = out[0] if len(out) == 1 else torch.cat(out)
        return logits[len(logits) - keep:] if len(logits) > keep else logits

    def pads(self, n: int) -> bool:
        """Whether a block of ``n`` tokens is padded (its extra positions must be cropped from the cache; block-
        invariant forwards roll their padding back themselves)."""
        return self.width is None and self.buckets.get(n, (n, n))[0] > n

    def describe(self) -> dict[str, Any]:
        """What the loop's blocks run on: the fast-linear scope, the bucket map, the width where set, and with a scope
        the fewest rows its layers transpose (``min_rows``; 1: a single row as the first of two, ``single_row``)."""
        out: dict[str, Any] = {"fast_linear": self.scope or False,
                               "buckets": {str(n): list(mr) for n, mr in sorted(self.buckets.items())}}
        if self.width is not None:
            out["width"] = self.width
        return {**out, **self._rows()}

    def _rows(self) -> dict[str, Any]:
        """``min_rows`` (and ``single_row`` at 1) of a forward with transposed layers; nothing without them (no scope,
        or ``onednn``, whose layers take every row count)."""
        if self.min_rows is None:  # set only with a scope whose copy has transposed layers
            return {}
        # a single row as the first of two (``linear_kernels.SINGLE_ROW``): another kernel than the one
        # row of the same min_rows before, so an AR reference timed then never serves as one now (its cache key)
        return {"min_rows": self.min_rows, **({"single_row": "first of two"} if self.min_rows == 1 else {})}

    def describe_step(self) -> dict[str, Any]:
        """What a 1-token step runs on (``step_forward``): the fast-linear scope, its padding ``[m, r]`` (None:
        unpadded) and, with a scope, the fewest rows its layers transpose (``min_rows``: 1 = a step's single row
        too, as the first of two equal rows, ``single_row``; 2 = a step's row through ``F.linear``)."""
        out: dict[str, Any] = {"fast_linear": self.scope or False,
                               "step": list(self.buckets[1]) if 1 in self.buckets else None}
        if self.width is not None:
            out["width"] = self.width
        return {**out, **self._rows()}


#: the relative gain a probed padding must show over the unpadded block to be taken: the noise of a probe must not
#: pick it
MIN_GAIN = 0.05


#: the longest block any probe measures: the loop's (``bucket_k_max`` null: ``max(9, γ + 1)``, at most this) and
#: the target alone's step (``step_forward``: this, whatever γ)
PROBE_K_MAX = 17


def choose_buckets(body_ms: Mapping[int, float], head_ms: Mapping[int, float], n_max: int | None = None,
                   min_gain: float = MIN_GAIN) -> Buckets:
    """For each block length ``n``: the ``(m, r)`` with ``n ≤ r ≤ m`` minimising
    ``body_ms[m] + head_ms[r]``, kept only when it is at least ``min_gain`` (relative)
    cheaper than ``(n, n)`` (the noise of a probe must not pick a padding)."""
    ks = sorted(set(body_ms) & set(head_ms))
    out: Buckets = {}
    for n in ks if n_max is None else [k for k in ks if k <= n_max]:
        plain = body_ms[n] + head_ms[n]
        best, best_ms = (n, n), plain
        for m in (k for k in ks if k >= n):
            for r in (k for k in ks if n <= k <= m):
                cost = body_ms[m] + head_ms[r]
                if cost < best_ms:
                    best, best_ms = (m, r), cost
        if best != (n, n) and best_ms < (1.0 - min_gain) * plain:
            out[n] = best
    return out


def pads_blocks(model: Any, engine: EngineConfig | None) -> bool:
    """Whether the loop of ``engine`` may pad its blocks: ``verify_buckets`` a mapping, ``probe``, or ``auto`` on
    a CPU model."""
    spec = (engine or EngineConfig()).verify_buckets
    return isinstance(spec, Mapping) or spec == "probe" or (spec == "auto" and model_device(model).type == "cpu")


def engine_forward(model: Any, engine: EngineConfig | None, gamma: int = 8) -> VerifyForward:
    """A ``VerifyForward`` from the typed ``engine`` config (``specbench.config.EngineConfig``):

    * ``fast_linear``: ``false`` / ``head`` / ``all`` / ``onednn`` / ``auto`` (for CPU models the fastest measured,
      ``fast_linear.chosen_kernels``; off on GPU; where ``kernel_copy`` does not fit the model, a log line and plain
      forwards);
    * ``verify_buckets``: ``false`` / ``auto`` (CPU: probe once per process and model, see
      ``probe_costs`` and ``choose_buckets``; GPU: off) / ``probe`` (probe on any device) /
      a mapping ``{n: (m, r)}``;
    * ``bucket_k_max``: longest block probed (default ``max(9, gamma + 1)``, at most ``PROBE_K_MAX``).

    The target alone compared with this loop steps on ``step_forward(model, engine)``, which takes no γ.
    """
    engine = engine or EngineConfig()
    scope = fast_scope(model, engine)
    executor = fast_executor(model, scope, min_rows=1) if scope is not None else None
    width = resolve_width(model, engine)
    if width is not None:  # one shape for every block: no bucket map
        return VerifyForward(model, {}, executor, scope if executor is not None else None, width=width)
    spec = engine.verify_buckets
    buckets: Buckets = {}
    if isinstance(spec, Mapping):
        buckets = {int(n): (int(v[0]), int(v[1])) for n, v in spec.items()}
    elif pads_blocks(model, engine):
        k_max = int(engine.bucket_k_max or min(PROBE_K_MAX, max(9, int(gamma) + 1)))
        buckets = choose_buckets(*probed_costs(model, executor, scope if executor is not None else None, k_max))
    return VerifyForward(model, buckets, executor, scope if executor is not None else None)


def step_forward(model: Any, engine: EngineConfig | None) -> VerifyForward:
    """The target alone's forward (a 1-token step; its prefill on the same executor), the one every speedup of our
    loop under ``engine`` divides by (the baseline rule): the fastest step the
    loop's kernels allow, offered every kernel the loop uses whatever its bucket map: the loop's executor (the
    model, or with ``fast_linear`` on its transposed copy, which takes ``(W·xᵀ)ᵀ`` from one row, the single row
    computed as the first of two equal rows: ``linear_kernels.SINGLE_ROW``) on the 1-token block and, where the loop
    may pad blocks (``pads_blocks``), the same step padded to ``m`` tokens with the LM head on ``r`` rows,
    ``1 ≤ r ≤ m ≤ k`` (``choose_buckets`` of its 1-token block; ``k``: ``bucket_k_max``, null: ``PROBE_K_MAX``, the
    longest block the loop's probe ever measures). Chosen from the executor's ``probe_costs`` table up to ``k``. It
    takes no γ and no bucket map, and its probes are shared by the sweep's jobs (``runners.jobs.kernels``): every job
    of a sweep with one engine config divides by the same target alone. (Earlier the loop's copy kept
    ``F.linear`` for one row and this step was offered a second copy that transposed it; since the loop's copy
    computes one row as the first of two, one copy serves both. With ``fast_linear=auto`` the step's kernels are
    ``auto``'s own choice for a step (``fast_linear.chosen_kernels(step=True)``: the loop's, unless another copy ``auto``
    weighs runs a 1-token forward measurably faster), so the baseline is not denied a kernel the engine has; under
    ``width`` the loop's, which block-invariance needs.)"""
    engine = engine or EngineConfig()
    width = resolve_width(model, engine)
    # block-invariant forwards need the loop's own kernels; otherwise ``auto`` offers the step every kernel it weighs
    scope = fast_scope(model, engine, step=width is None)
    loop = fast_executor(model, scope, min_rows=1) if scope is not None else None
    scope = scope if loop is not None else None
    if width is not None:  # block-invariant: the loop's executor at the loop's one width, nothing else
        return VerifyForward(model, {}, loop, scope, width=width)
    k = int(engine.bucket_k_max or PROBE_K_MAX) if pads_blocks(model, engine) else 1
    if loop is None and k == 1:
        return VerifyForward(model)
    m, r = choose_buckets(*probed_costs(model, loop, scope, k), n_max=1).get(1, (1, 1))
    return VerifyForward(model, {1: (m, r)} if (m, r) != (1, 1) else {}, loop, scope)


def engine_options(model: Any, engine: EngineConfig | None, gamma: int = 8,
                   forward: VerifyForward | None = None) -> dict[str, Any]:
    """``SpeculativeRunner`` keyword arguments from the typed ``engine`` config: ``forward``
    (``engine_forward``, unless the caller built it) and ``fused_prefill`` (``auto``: on for a CPU model, off on GPU)."""
    engine = engine or EngineConfig()
    forward = forward if forward is not None else engine_forward(model, engine, gamma)
    fused = engine.fused_prefill
    if fused == "auto":
        fused = model_device(model).type == "cpu" and forward.width is None  # block-invariant: never fused
    elif fused and forward.width is not None:
        raise ConfigError("engine.width (on for this half-precision target: engine.width=auto) feeds the prefill "
                          "alone; engine.fused_prefill=true fuses the first round into it: set one of them")
    return {"forward": forward, "fused_prefill": bool(fused)}
