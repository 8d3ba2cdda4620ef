#!/usr/bin/env python
"""Issue 52's table, measured side by side on this host: what the target's verification and the draft's step cost,
in fp32 and bf16, and what Leviathan's bound makes of those costs (a script, not a test).

    .venv/bin/python scripts/bench_engine_costs.py                       # the default pair, 5 repeats, γ = 5
    .venv/bin/python scripts/bench_engine_costs.py --repeats 9 --check-tokens 48 --json out.json

Measured, every repeat once per item, the items in an order that rotates from one repeat to the next (interleaved:
a drifting host biases every item alike); printed as the median over the repeats with the min–max:

* the LM head (the target's ``get_output_embeddings``) on 1, 2, γ + 1 (a verification's) and 8 rows: fp32 ``F.linear``, fp32
  ``mm(W, xᵀ)ᵀ`` (``engine.fast_linear=all``'s kernel), fp32 oneDNN on the reordered weight (``onednn``'s, where this
  torch has oneDNN) and bf16 ``F.linear``;
* the whole target forward of 1 token (a step of the target alone) and of γ + 1 tokens (a verification), on a KV cache
  of ``--context`` tokens cropped back after each forward, in the pair's dtype and in a bf16 copy;
* the target as our engine runs it (``runners.engine.verify_forward``, ``engine.fast_linear`` and ``verify_buckets``
  ``auto``): the fp32 target alone's step (``step_forward``: the fastest step the engine allows, the one every speedup
  divides by) and its verification of γ + 1 tokens (``engine_forward``); where ``auto`` took other kernels than the
  transposed copy (``onednn``), the same step and verification on the transposed copy (``fast_linear=all``, its
  buckets probed: the engine before ``onednn``); and the bf16 copy with block-invariant
  forwards (``engine.width``, ``--width`` tokens on a static cache, ``runners.engine.invariant``): its step and its
  verification, both one forward of the width;
* the draft's 1-token forward (the pair's draft: Gemma-3-270M int8 by default), and the same with its LM head
  restricted to the ``--head-rows`` most frequent tokens of ``--token-map`` (FR-Spec, Zhao et al. 2025; the draft
  ``pair.draft.hot_vocab`` builds, ``specbench.models.hot_vocab``); each also compiled, as ``engine.draft_compile``
  runs it (``runners.engine.compiled_draft``, on a static cache; ``--no-compile`` leaves these out).

After the timed items, what they are read against (not interleaved: a reading, not a comparison): this host's
best fp32 GEMM rate and its read bandwidth over the LM head (``host_floors``), so the head on ``r`` rows has a floor
(reading it, or computing it: ``head_floor_ms``) that its faster kernel is quoted against; and, under
``torch.profiler``, where one step of the draft, of the fp32 target and of the bf16 target at the width spends its
time (``step_breakdown``: the linear layers' kernels and the other kernels, profiled, and the rest of its timed
median: Python and dispatch between them).

Then the ratios the issue asks for: verification of γ + 1 tokens ÷ one step (fp32, bf16), the draft step ÷ the target
step; and Leviathan et al.'s expected speedup at those costs (``specbench.records.leviathan_speedup``, which charges a
verification one step) beside the same bound charging the measured verification ``v`` target steps:
``E[tokens] / (γ·d + v)``, ``E[tokens] = (1 − α^(γ+1)) / (1 − α)``, at ``--alpha`` (default 0.8).

``--check-tokens N``: greedy decoding of N tokens of each embedded prompt by the bf16 copy alone and by our loop with
that copy as the target (γ fixed): whether a bf16 target stays lossless against itself (a k-token verification can
round differently from k one-token steps). ``--where-bf16-differs``: where that rounding comes from, without timing
anything: on each embedded prompt, the bf16 copy's last hidden state and logits for 5 greedy tokens fed as one block
against the same 5 fed one step at a time, and the LM head on the block's rows at once against row by row.
``--invariance``: no timing either; for 32 greedy tokens of each embedded prompt, how many logit rows (bit for bit)
and argmaxes differ between the target alone's steps and blocks of 3, 5, 8 and 11 tokens, through the product's
``VerifyForward``: plain on the dynamic cache, plain on a static one, padded to the width on the dynamic cache
(a bucket map), and block-invariant (``width``, static), in bf16 and fp32. ``--check-tokens`` also checks the bf16
target at the width. Run on a quiet machine; say the CPU and the date with every figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pair", default=None, help="conf/pair/NAME.yaml (default: the config's pair)")
    p.add_argument("--gamma", type=int, default=5, help="drafted tokens per round: a verification feeds γ + 1")
    p.add_argument("--context", type=int, default=128, help="KV cache length the forwards run on")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--alpha", type=float, default=0.8, help="acceptance probability for Leviathan's bound")
    p.add_argument("--check-tokens", type=int, default=0, help="check a bf16 target's losslessness on N tokens")
    p.add_argument("--head-rows", type=int, default=32768, help="the draft's LM head cut to this many rows (FR-Spec)")
    p.add_argument("--token-map", default="package:gemma3", help="which rows (specbench.models.hot_vocab; '' = the "
                   "first ones)")
    p.add_argument("--where-bf16-differs", action="store_true", help="only locate a bf16 block's rounding (no timing)")
    p.add_argument("--width", type=int, default=8, help="engine.width of the block-invariant items")
    p.add_argument("--invariance", action="store_true", help="only count the logit rows block shapes move (no timing)")
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled draft's items "
                   "(engine.draft_compile: each compiles for tens of seconds first)")
    p.add_argument("--json", help="write the medians and ratios here")
    return p.parse_args(argv)


def cpu_flags() -> str:
    """The CPU's model name and the flags that decide these kernels (AMX, AVX-512 BF16 / VNNI, AVX2)."""
    from specbench.provenance import cpu_name

    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return cpu_name()
    name = cpu_name()
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    wanted = [f for f in ("amx_tile", "amx_bf16", "avx512_bf16", "avx512_vnni", "avx512f", "avx2") if f in flags]
    return f"{name} ({' '.join(wanted) or 'none of amx/avx512/avx2'})"


def _prefilled(model: Any, context: int) -> Any:
    """A new cache of ``model`` (its cache kind) holding ``context`` tokens."""
    import torch

    from runners.engine.kv import cache_arg, new_cache
    from specbench.models import model_device

    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=torch.arange(10, 10 + context, device=model_device(model))[None], **cache_arg(model, cache),
              use_cache=True, logits_to_keep=1)
    return cache


def forward_item(model: Any, k: int, context: int) -> Any:
    """A callable that runs ``model`` on ``k`` tokens over a cache of ``context`` tokens, then crops the cache back."""
    import torch

    from runners.engine.kv import cache_arg, crop_to
    from specbench.models import model_device

    cache = _prefilled(model, context)
    ids = torch.arange(20, 20 + k, device=model_device(model))[None]

    def run() -> None:
        with torch.inference_mode():
            model(input_ids=ids, **cache_arg(model, cache), use_cache=True, logits_to_keep=k)
        crop_to(cache, context)

    return run


def compiled_draft_item(model: Any, context: int) -> Any:
    """A callable that runs ``model``'s one-token step as ``engine.draft_compile=true`` runs it
    (``runners.engine.compiled_draft``: compiled, on a static cache of ``context`` tokens), then rewinds the cache.
    Built after the eager items of ``model``: from here on its caches are static."""
    import torch

    from runners.engine.compiled_draft import use_compiled
    from runners.engine.graphs import forward_logits
    from runners.engine.kv import crop_to
    from specbench.models import model_device

    use_compiled(model, True, headroom=64)  # compiles now (tens of seconds on 2 cores), untimed
    device = model_device(model)
    cache = _prefilled(model, context)

    def run() -> None:
        with torch.inference_mode():
            forward_logits(model, cache, [20], 1, device)
        crop_to(cache, context)

    return run


def engine_item(forward: Any, k: int, context: int) -> Any:
    """A callable that runs our engine's ``VerifyForward`` on ``k`` tokens over a cache of ``context`` tokens (its
    model's cache kind: static after ``kv.use_static``), then sets the cache back to ``context``."""
    import torch

    from runners.engine.kv import crop_to, new_cache

    cache = new_cache(forward.model)
    with torch.inference_mode():
        forward(cache, list(range(10, 10 + context)), 1)
    feed = list(range(20, 20 + k))

    def run() -> None:
        with torch.inference_mode():
            forward(cache, feed, k)
        crop_to(cache, context)

    return run


def invariance(models: dict[str, Any], tokenizer: Any, width: int, n: int = 32,
               sizes: tuple[int, ...] = (3, 5, 8, 11)) -> list[str]:
    """One line per (dtype, way of running the target): over ``n`` greedy tokens of each embedded prompt (the target
    alone's, each way its own), the logit rows and the argmaxes that differ between 1-token steps and blocks of each
    of ``sizes`` (module docstring)."""
    import torch
    from bench_vs_hf import load_prompts

    from runners.engine.kv import crop_to, new_cache, use_static
    from runners.engine.verify_forward import VerifyForward

    prompts = [ids for _, ids in load_prompts(tokenizer)]
    ways = {"plain, dynamic cache": (None, {}, False), "plain, static cache": (None, {}, True),
            f"padded to {width}, dynamic cache": (None, {k: (width, k) for k in range(1, width + 1)}, False),
            f"width {width}, static cache": (width, {}, True)}
    lines = []
    for dtype, model in models.items():
        for way, (w, buckets, static) in ways.items():
            use_static(model, 64 + n + width if static else None)
            forward = VerifyForward(model, buckets, width=w)
            rows = moved = argmax = 0
            for ids in prompts:
                with torch.inference_mode():
                    cache = new_cache(model)
                    steps = [forward(cache, list(ids), 1)[-1]]
                    seq = [int(steps[-1].argmax())]
                    for _ in range(n):
                        steps.append(forward(cache, [seq[-1]], 1)[-1])
                        if forward.pads(1):
                            crop_to(cache, len(ids) + len(seq))
                        seq.append(int(steps[-1].argmax()))
                    for size in sizes:
                        cache = new_cache(model)
                        got = [forward(cache, list(ids), 1)[-1]]
                        for i in range(0, n, size):
                            block = seq[i:min(i + size, n)]  # the n tokens the steps fed
                            got.extend(forward(cache, block, len(block)))
                            if forward.pads(len(block)):
                                crop_to(cache, len(ids) + i + len(block))
                        rows += len(got)
                        moved += sum(int(not torch.equal(a, b)) for a, b in zip(steps, got, strict=True))
                        argmax += sum(int(int(a.argmax()) != int(b.argmax())) for a, b in zip(steps, got, strict=True))
            use_static(model, None)
            lines.append(f"{dtype}, {way}: {moved} of {rows} logit rows differ between steps and blocks of "
                         f"{', '.join(map(str, sizes))} tokens; argmax at {argmax}")
    return lines


def head_item(weight: Any, rows: int, kernel: str) -> Any:
    """A callable applying the LM head ``weight`` to ``rows`` rows with ``kernel`` (``linear``, ``mm`` or ``onednn``:
    ``runners.engine.linear_kernels.PackedLinear``, its weight reordered once here)."""
    import torch

    x = torch.randn(rows, weight.shape[1], dtype=weight.dtype)
    if kernel == "onednn":
        from runners.engine.linear_kernels import PackedLinear

        linear = torch.nn.Linear(1, 1, bias=False)
        linear.weight = torch.nn.Parameter(weight, requires_grad=False)
        packed = PackedLinear(linear)
        return lambda: packed(x)
    if kernel == "mm":
        return lambda: torch.mm(weight, x.t()).t()
    return lambda: torch.nn.functional.linear(x, weight)


def cut_head(model: Any, rows: int, token_map: str | None) -> Any:
    """The draft as ``pair.draft.hot_vocab=rows`` builds it (``specbench.models.hot_vocab.restrict_head``): its LM
    head restricted to the ``rows`` most frequent tokens of ``token_map``, or to the first ``rows`` ids without one
    (the cost is the same: which rows are kept changes no timing)."""
    from specbench.models.hot_vocab import load_token_map, restrict_head

    ids = load_token_map(token_map).top(rows) if token_map else tuple(range(rows))
    return restrict_head(model, ids)


def measure(items: dict[str, Any], repeats: int) -> dict[str, list[float]]:
    """Each item timed once per repeat, after one untimed call, in an order rotating from repeat to repeat."""
    names = list(items)
    for fn in items.values():
        fn()
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            t0 = time.perf_counter()
            items[name]()
            out[name].append((time.perf_counter() - t0) * 1000.0)
    return out


def host_floors(head: Any, repeats: int = 5) -> dict[str, float]:
    """What this host's 2 threads can do at best, to read the head's timings against: the peak fp32 GEMM rate
    (``torch.mm`` of two 2048 × 2048 matrices, GFLOP/s) and the read bandwidth (one sum over the LM head's weight,
    GB/s), each the fastest of ``repeats``. The head on ``r`` rows then costs at least
    ``max(bytes / bandwidth, 2 · vocab · hidden · r / peak)``."""
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    w = head.float()

    def fastest(fn: Any) -> float:
        fn()
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best

    gemm_s = fastest(lambda: torch.mm(a, b))
    read_s = fastest(lambda: w.sum())
    return {"gemm_gflops": 2 * 2048 ** 3 / gemm_s / 1e9, "read_gbps": w.numel() * w.element_size() / read_s / 1e9}


def head_floor_ms(head: Any, rows: int, floors: dict[str, float]) -> float:
    """The fp32 LM head's least cost on ``rows`` rows on this host (``host_floors``): reading it, or computing it."""
    vocab, hidden = head.shape
    read_ms = vocab * hidden * 4 / floors["read_gbps"] / 1e6
    return max(read_ms, 2 * vocab * hidden * rows / floors["gemm_gflops"] / 1e6)


#: the kernels ``step_breakdown`` counts as the linear layers' (fp32 / bf16 ``nn.Linear``, int8-dynamic ``Linear``,
#: oneDNN's on reordered weights: ``engine.fast_linear=onednn``)
LINEAR_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "quantized::linear_dynamic", "aten::linear",
              "mkldnn::_linear_pointwise")


def step_breakdown(run: Any, wall_ms: float, steps: int = 10) -> dict[str, float]:
    """Where one forward of ``run`` (an item's callable) spends its ``wall_ms`` (its timed median): the linear
    layers' kernels (``LINEAR_OPS``) and the other kernels (norms, attention, rotary, masks), their self times per
    call under ``torch.profiler``, and the rest of the timed wall, Python and dispatch between the kernels. (The
    profiler's own cost falls between kernels, which is why the wall is the unprofiled one.)"""
    from torch.profiler import ProfilerActivity, profile

    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            run()
    events = prof.key_averages()
    linear = sum(e.self_cpu_time_total for e in events if e.key in LINEAR_OPS) / 1000.0 / steps
    kernels = sum(e.self_cpu_time_total for e in events) / 1000.0 / steps
    return {"wall_ms": wall_ms, "linear_ms": linear, "other_kernels_ms": kernels - linear,
            "between_kernels_ms": max(wall_ms - kernels, 0.0)}


def leviathan_bounds(alpha: float, gamma: int, d: float, v: float) -> tuple[float, float]:
    """Leviathan's speedup with a verification charged one step (``specbench.records.leviathan_speedup``, c = 1/d),
    and the same charging it ``v`` steps."""
    from specbench.records import leviathan_speedup

    tokens = gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)
    return leviathan_speedup(alpha, gamma, 1.0 / d), tokens / (gamma * d + v)


def check_lossless(target: Any, draft: Any, tokenizer: Any, eos: list[int], gamma: int, n: int,
                   width: int | None = None) -> tuple[int, int]:
    """(prompts whose loop output equals the bf16 target's own greedy decoding, prompts checked); ``width``: both
    on block-invariant forwards of that width (``engine.width``, a static cache), as a job builds them."""
    from bench_vs_hf import load_prompts

    from methods.base import FixedGamma
    from runners.drafters.model import ModelDrafter
    from runners.engine.factory import build_runner
    from runners.engine.invariant import use_invariant
    from runners.engine.kv import use_static
    from runners.engine.verify_forward import engine_options, step_forward
    from specbench.config import EngineConfig

    engine = EngineConfig(width=width or False)
    use_invariant(target, engine, n)
    step, options = step_forward(target, engine), engine_options(target, engine, gamma)
    same = 0
    prompts = [ids for _, ids in load_prompts(tokenizer)]
    for ids in prompts:
        alone = build_runner("ar", target, eos, forward=step).generate(list(ids), n).tokens
        loop = build_runner("speculative", target, eos, drafter=ModelDrafter(draft, eos),
                            policy=FixedGamma(gamma), engine=options).generate(list(ids), n).tokens
        same += int(alone == loop)
    use_static(target, None)
    return same, len(prompts)


def where_bf16_differs(target16: Any, tokenizer: Any, k: int = 5) -> str:
    """One line: over the embedded prompts' first ``k`` greedy tokens, at how many positions the bf16 model's last
    hidden state differs between a ``k``-token block and ``k`` one-token steps, whether its LM head gives other rows
    on the block than row by row, and at how many the argmax differs."""
    import torch
    from bench_vs_hf import load_prompts

    from runners.engine.kv import cache_arg, new_cache

    hidden = head = argmax = n = 0
    for _, ids in load_prompts(tokenizer):
        with torch.inference_mode():
            stepped = new_cache(target16)
            out = target16(input_ids=torch.tensor([ids]), **cache_arg(target16, stepped), use_cache=True,
                           logits_to_keep=1)
            fed, states, logits = [int(out.logits[0, -1].argmax())], [], []
            for _ in range(k):
                o = target16.model(input_ids=torch.tensor([[fed[-1]]]), **cache_arg(target16, stepped), use_cache=True)
                states.append(o.last_hidden_state[0, -1])
                logits.append(target16.lm_head(states[-1][None])[0])
                fed.append(int(logits[-1].argmax()))
            block = new_cache(target16)
            target16(input_ids=torch.tensor([ids]), **cache_arg(target16, block), use_cache=True, logits_to_keep=1)
            h = target16.model(input_ids=torch.tensor([fed[:k]]), **cache_arg(target16, block),
                               use_cache=True).last_hidden_state[0]
            at_once = target16.lm_head(h)
            for i in range(k):
                n += 1
                hidden += int(not torch.equal(h[i], states[i]))
                head += int(not torch.equal(at_once[i], target16.lm_head(h[i][None])[0]))
                argmax += int(int(at_once[i].argmax()) != int(logits[i].argmax()))
    return (f"bf16, a {k}-token block against {k} one-token steps over {n} positions: the last hidden state differs at "
            f"{hidden}, the LM head on the block's rows against row by row at {head}, the argmax at {argmax}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from bench_vs_hf import load_bench_pair

    label, target, draft, tokenizer = load_bench_pair(args.pair, None)
    target16 = copy.deepcopy(target).to(torch.bfloat16)
    if args.invariance:
        print(f"{label}: {cpu_flags()}, {args.threads} torch threads, torch {torch.__version__}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        for line in invariance({"bf16": target16, "fp32": target}, tokenizer, args.width):
            print(f"  {line}")
        return 0
    from runners.engine.kv import use_static
    from runners.engine.linear_kernels import onednn_available
    from runners.engine.verify_forward import VerifyForward, engine_forward, step_forward
    from specbench.config import EngineConfig

    engine = EngineConfig(fast_linear="auto", verify_buckets="auto")  # the config's defaults: what a job runs
    transposed = EngineConfig(fast_linear="all", verify_buckets="auto")  # the engine before onednn (issue 52)
    onednn = onednn_available()
    fp32_step, fp32_verify = step_forward(target, engine), engine_forward(target, engine, args.gamma)
    target16_static = copy.deepcopy(target16)
    use_static(target16_static, args.context + 64)
    fixed = VerifyForward(target16_static, width=args.width)
    if args.where_bf16_differs:
        print(f"{label}: {cpu_flags()}, {args.threads} torch threads, torch {torch.__version__}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(f"  {where_bf16_differs(target16, tokenizer)}")
        return 0
    head = target.get_output_embeddings().weight.detach()
    head16 = head.to(torch.bfloat16)
    k = args.gamma + 1
    items: dict[str, Any] = {}
    for rows in sorted({1, 2, k, 8}):
        items[f"head fp32 F.linear {rows} rows"] = head_item(head, rows, "linear")
        items[f"head fp32 mm(W,xT)T {rows} rows"] = head_item(head, rows, "mm")
        if onednn:
            items[f"head fp32 oneDNN {rows} rows"] = head_item(head, rows, "onednn")
        items[f"head bf16 F.linear {rows} rows"] = head_item(head16, rows, "linear")
    items["target fp32 1 token"] = forward_item(target, 1, args.context)
    items[f"target fp32 {k} tokens"] = forward_item(target, k, args.context)
    items["target bf16 1 token"] = forward_item(target16, 1, args.context)
    items[f"target bf16 {k} tokens"] = forward_item(target16, k, args.context)
    items["target fp32 1 token, engine step"] = engine_item(fp32_step, 1, args.context)
    items[f"target fp32 {k} tokens, engine"] = engine_item(fp32_verify, k, args.context)
    if fp32_step.scope != "all":  # the engine before onednn: the transposed copy, its buckets probed
        items["target fp32 1 token, transposed copy"] = engine_item(step_forward(target, transposed), 1, args.context)
        items[f"target fp32 {k} tokens, transposed copy"] = engine_item(
            engine_forward(target, transposed, args.gamma), k, args.context)
    items[f"target bf16 1 token, width {args.width}"] = engine_item(fixed, 1, args.context)
    items[f"target bf16 {k} tokens, width {args.width}"] = engine_item(fixed, k, args.context)
    items["draft 1 token"] = forward_item(draft, 1, args.context)
    hot_draft = cut_head(draft, args.head_rows, args.token_map)
    items[f"draft 1 token, head {args.head_rows} rows"] = forward_item(hot_draft, 1, args.context)
    if not args.no_compile:  # engine.draft_compile: the same two steps compiled (after their eager items)
        items["draft 1 token, compiled"] = compiled_draft_item(draft, args.context)
        items[f"draft 1 token, head {args.head_rows} rows, compiled"] = compiled_draft_item(hot_draft, args.context)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{label}: {cpu_flags()}, {args.threads} torch threads, torch {torch.__version__}, {when}; context "
          f"{args.context}, γ = {args.gamma}, {args.repeats} repeats (interleaved)")
    compile_s = {}
    if not args.no_compile:  # the compilations the compiled items' warm-ups took (untimed, before the repeats)
        from runners.engine.compiled_draft import compiled_step

        compile_s = {"draft": compiled_step(draft).compile_s, f"draft, head {args.head_rows} rows":
                     compiled_step(hot_draft).compile_s}
        print("  compiled before the repeats: " + ", ".join(f"{name} in {sec:.1f} s" for name, sec in compile_s.items())
              + f" (inductor's cache: {os.environ.get('TORCHINDUCTOR_CACHE_DIR') or 'its default folder'})")
    times = measure(items, args.repeats)
    med = {n: statistics.median(v) for n, v in times.items()}
    width = max(map(len, med))
    for name, values in times.items():
        print(f"  {name:{width}s}  {med[name]:8.2f} ms  ({min(values):.2f}–{max(values):.2f})")
    ratios = {
        f"verify {k} / step, fp32": med[f"target fp32 {k} tokens"] / med["target fp32 1 token"],
        f"verify {k} / step, bf16": med[f"target bf16 {k} tokens"] / med["target bf16 1 token"],
        f"verify {k} / step, fp32 on the engine": med[f"target fp32 {k} tokens, engine"]
        / med["target fp32 1 token, engine step"],
        f"verify {k} / step, bf16 width {args.width}": med[f"target bf16 {k} tokens, width {args.width}"]
        / med[f"target bf16 1 token, width {args.width}"],
        "bf16 step / fp32 step": med["target bf16 1 token"] / med["target fp32 1 token"],
        f"bf16 width {args.width} step / fp32 engine step": med[f"target bf16 1 token, width {args.width}"]
        / med["target fp32 1 token, engine step"],
        "draft step / target step, fp32 engine step": med["draft 1 token"] / med["target fp32 1 token, engine step"],
        **({"engine step / the transposed copy's step": med["target fp32 1 token, engine step"]
            / med["target fp32 1 token, transposed copy"],
            f"verify {k} / step, fp32 on the transposed copy": med[f"target fp32 {k} tokens, transposed copy"]
            / med["target fp32 1 token, transposed copy"]}
           if "target fp32 1 token, transposed copy" in med else {}),
        **({"draft step compiled / target step, fp32 engine step": med["draft 1 token, compiled"]
            / med["target fp32 1 token, engine step"],
            "draft step compiled / draft step": med["draft 1 token, compiled"] / med["draft 1 token"],
            f"draft step, head {args.head_rows} rows, compiled / target step, fp32 engine step":
            med[f"draft 1 token, head {args.head_rows} rows, compiled"] / med["target fp32 1 token, engine step"],
            f"draft step, head {args.head_rows} rows, compiled / the same eager":
            med[f"draft 1 token, head {args.head_rows} rows, compiled"] / med[f"draft 1 token, head {args.head_rows} rows"]}
           if "draft 1 token, compiled" in med else {}),
        f"draft step / target step, bf16 width {args.width}": med["draft 1 token"]
        / med[f"target bf16 1 token, width {args.width}"],
        "draft step / target step, fp32 target": med["draft 1 token"] / med["target fp32 1 token"],
        "draft step / target step, bf16 target": med["draft 1 token"] / med["target bf16 1 token"],
        f"draft step, head {args.head_rows} rows / target step, fp32 target":
            med[f"draft 1 token, head {args.head_rows} rows"] / med["target fp32 1 token"],
    }
    for name, value in ratios.items():
        print(f"  {name}: {value:.3f}")
    bounds = {}
    for dtype, d_key, v_key in (("fp32", "draft step / target step, fp32 target", f"verify {k} / step, fp32"),
                                ("bf16", "draft step / target step, bf16 target", f"verify {k} / step, bf16"),
                                ("fp32 on the engine", "draft step / target step, fp32 engine step",
                                 f"verify {k} / step, fp32 on the engine"),
                                (f"bf16 width {args.width}", f"draft step / target step, bf16 width {args.width}",
                                 f"verify {k} / step, bf16 width {args.width}")):
        d, v = ratios[d_key], ratios[v_key]
        free, charged = leviathan_bounds(args.alpha, args.gamma, d, v)
        bounds[dtype] = {"verify_free": free, "verify_charged": charged}
        print(f"  Leviathan's bound at α = {args.alpha}, γ = {args.gamma}, {dtype} target: {free:.2f}× with a free "
              f"verification, {charged:.2f}× charging it {v:.2f} steps")
    floors = host_floors(head)
    print(f"  this host at best: fp32 GEMM {floors['gemm_gflops']:.0f} GFLOP/s (2048³ torch.mm), reading the LM head "
          f"{floors['read_gbps']:.1f} GB/s (one sum over it)")
    for rows in sorted({1, 2, k, 8}):
        best = min(med[f"head fp32 {kernel} {rows} rows"] for kernel in ("F.linear", "mm(W,xT)T", "oneDNN")
                   if f"head fp32 {kernel} {rows} rows" in med)
        floor = head_floor_ms(head, rows, floors)
        print(f"  head fp32 on {rows} rows: {best:.1f} ms on its faster kernel, at least {floor:.1f} ms on this host "
              f"({best / floor:.2f}× the floor)")
    floors["head_floor_ms"] = {rows: head_floor_ms(head, rows, floors) for rows in sorted({1, 2, k, 8})}
    breakdown = {name: step_breakdown(items[name], med[name])
                 for name in ("draft 1 token", f"draft 1 token, head {args.head_rows} rows",
                              "draft 1 token, compiled", "target fp32 1 token, engine step",
                              f"target bf16 1 token, width {args.width}") if name in items}
    for name, b in breakdown.items():
        print(f"  {name}: {b['wall_ms']:.1f} ms a call: linear layers {b['linear_ms']:.1f} ms "
              f"({100 * b['linear_ms'] / b['wall_ms']:.0f} %), other kernels {b['other_kernels_ms']:.1f} ms, between "
              f"kernels (Python) {b['between_kernels_ms']:.1f} ms")
    checked = None
    if args.check_tokens:
        same, n = check_lossless(target16, draft, tokenizer, [tokenizer.eos_token_id], args.gamma, args.check_tokens)
        same_w, _ = check_lossless(target16, draft, tokenizer, [tokenizer.eos_token_id], args.gamma,
                                   args.check_tokens, width=args.width)
        checked = {"same": same, "prompts": n, "tokens": args.check_tokens, "same_at_width": same_w,
                   "width": args.width}
        print(f"  bf16 target, our loop against the bf16 target alone ({args.check_tokens} tokens): {same} of {n} "
              f"prompts identical; at width {args.width} (static cache): {same_w} of {n}")
    if args.json:
        Path(args.json).write_text(json.dumps({"pair": label, "cpu": cpu_flags(), "threads": args.threads, "when": when,
                                               "median_ms": med, "ms": times, "ratios": ratios, "bounds": bounds,
                                               "floors": floors, "breakdown": breakdown,
                                               "bf16_lossless": checked, "compile_s": compile_s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
