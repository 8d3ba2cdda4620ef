"""Block-invariant forwards (``engine.width``) and the target's dtype (``engine.dtype``).

**Why.** A speculative loop is lossless when the target's logits at a position do not depend on how many tokens
the forward that computed them fed: the target alone computes position ``p`` in a 1-token step, the loop in a
block of γ + 1. In float32 the two differ at the 1e-6 level and no argmax moved in any committed run; in bfloat16
they differ at almost every position (a 5-token block against 5 one-token steps: 49 of 50 hidden states, Gemma-3-270M
on the 2-core EPYC, ``results/committed/engine_costs_epyc/where_bf16_differs.log``) and the greedy output moves: our
loop with the bf16 target equalled the bf16 target alone in 6 of 10 prompts over 32 tokens. The kernels pick their
reduction order by shape (the rows fed, and in attention the cache's length), so a row's sums depend on its block.

**What fixes it** — the idea of batch-invariant kernels (H. He and Thinking Machines Lab, "Defeating Nondeterminism
in LLM Inference", 2025: fixed shapes, so one reduction order per row), here with the shapes the loop controls:

* every forward of the target after the prefill feeds exactly ``width`` tokens: a 1-token step and a verification
  block are padded (copies of their last token) and a longer block goes in pieces of ``width``; the LM head runs on
  all ``width`` rows; the padded positions are rolled back after each piece;
* on a static cache (``runners.engine.kv.PositionCache``), so attention always spans the cache's whole preallocated
  length (masked), never "the tokens so far";
* the prefill is one forward of the prompt in both loops (padded to ``width`` when shorter), so both start from the
  same keys and values; the first round cannot be fused into it (``engine.fused_prefill`` stays off).

Measured (``scripts/bench_engine_costs.py --invariance``, Gemma-3-270M on the 2-core EPYC, 2026-11-28,
``results/committed/engine_costs_epyc/invariance.log``): over 32 greedy tokens of the 10 embedded prompts, with width 8
on a static cache 0 of 1320 logit rows differ, bit for bit, between the target alone's steps and blocks of 3, 5, 8 and
11 tokens, in bfloat16 and in float32; in bfloat16 1268 differ on the plain forwards (17 argmaxes), 1241 unpadded on a
static cache, 905 padded to 8 on the dynamic cache. The cost: the target alone steps on ``width`` rows, a
verification of up to ``width`` tokens costs one step (``make_run_bf16_epyc``: the target alone at width 8 ran at
0.83 of the plain bf16 one's speed).

``resolve_width`` says whether a batch-1 target runs so; ``resolve_dtype`` turns ``engine.dtype=auto`` into the
target's dtype before anything reads the config (``runners.jobs.build.prepare``): a bfloat16 target is a different
target from the float32 one, named so in every record (``pair.target.dtype``) and never pooled with it
(``analysis.run_names.split_by_dtype``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from specbench.config import DEFAULT_WIDTH, EngineConfig, JobConfig
from specbench.models import model_device, model_dtype

log = logging.getLogger("specbench")

#: the dtypes whose rounding moves a greedy output between block shapes (``engine.width=auto`` turns on for them)
HALF_DTYPES = (torch.bfloat16, torch.float16)


def resolve_width(model: Any, engine: EngineConfig | None) -> int | None:
    """``engine.width`` for ``model``'s batch-1 forwards: the width, or None (off). ``auto``: ``DEFAULT_WIDTH`` for a
    half-precision model on CPU (measured there); off for a float32 one (its rounding has not moved a greedy output)
    and on GPU (unmeasured: set a width to run it there)."""
    width = (engine or EngineConfig()).width
    if width == "auto":
        cpu = model_device(model).type == "cpu"
        return DEFAULT_WIDTH if cpu and model_dtype(model) in HALF_DTYPES else None
    return int(width) if width else None


def use_invariant(model: Any, engine: EngineConfig | None, max_new_tokens: int) -> int | None:
    """Give ``model`` the static cache block-invariant forwards need when ``resolve_width`` turns them on (whatever
    ``engine.graphs`` says: its loop, the target alone's too, then hold a ``PositionCache``), with room for a padded
    piece past the last token, so a cache never grows mid-decoding (a grown cache is a longer attention, another
    shape); the width, or None (nothing changed). Call it after ``graphs.use_graphs``, every job anew."""
    from runners.engine.graphs import static_headroom
    from runners.engine.kv import static_headroom as current_headroom
    from runners.engine.kv import use_static

    width = resolve_width(model, engine)
    if width is not None:
        headroom = static_headroom(max_new_tokens) + width
        if (current_headroom(model) or 0) < headroom:
            use_static(model, headroom)
    return width


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AMX tiles or AVX-512 BF16, as torch detects them,
    ``torch.cpu._is_amx_tile_supported`` / ``_is_avx512_bf16_supported``)."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return any(check() for check in checks if check is not None)


def dtype_choice(config: JobConfig, native: bool | None = None) -> tuple[str, str]:
    """``(dtype, why)``: the target's dtype under ``engine.dtype`` and the reason, in words. ``auto`` takes bfloat16
    for a float32 target of our batch-1 loop on a CPU with native bf16 (``native``; None: this CPU's,
    ``native_bf16``): there it costs about half a float32 step and, with ``engine.width`` on, stays lossless;
    anything else keeps the config's dtype."""
    target = config.pair.target
    if config.engine.dtype != "auto":
        return target.dtype, "engine.dtype=model"
    device = str(config.device or target.device)
    if config.method.runner == "hf" or config.batch_size != 1:
        return target.dtype, "engine.dtype=auto: transformers' loops and batch_size > 1 keep the config's dtype"
    if target.dtype != "float32" or not device.startswith("cpu") or target.quant or target.transform:
        return target.dtype, f"engine.dtype=auto: the target is {target.dtype} on {device}, kept"
    if not (native_bf16() if native is None else native):
        return target.dtype, "engine.dtype=auto: this CPU has no native bf16 (AMX or AVX-512 BF16), float32 kept"
    return "bfloat16", "engine.dtype=auto: bfloat16, native on this CPU"


def resolve_dtype(config: JobConfig, native: bool | None = None) -> JobConfig:
    """``config`` with ``pair.target.dtype`` set to what ``engine.dtype`` chooses (``dtype_choice``); the same object
    when nothing changes. The change goes through the composed mapping, so the summary's ``config`` (and W&B's)
    names the dtype the target ran in. With ``engine.dtype=auto`` the choice and its reason are logged."""
    dtype, why = dtype_choice(config, native)
    if config.engine.dtype == "auto":
        log.info("%s", why)
    if dtype == config.pair.target.dtype:
        return config
    values = dict(config.resolved)
    pair = dict(values["pair"])
    pair["target"] = {**pair["target"], "dtype": dtype}
    values["pair"] = pair
    return JobConfig.from_mapping(values)
