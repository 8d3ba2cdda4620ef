#!/usr/bin/env python
"""What each lever of the compiled draft (``engine.draft_compile``, ``runners.engine.compiled_draft``) saves, side by
side in one process (a script, not a test).

    .venv/bin/python scripts/bench_compiled_draft.py                        # the default pair's draft, 9 rounds
    .venv/bin/python scripts/bench_compiled_draft.py --rounds 11 --steps 40 --json out.json [--reverse]

The draft as ``scripts/bench_engine_costs.py`` times it (the pair's draft, its LM head restricted to the
``--head-rows`` most frequent tokens of ``--token-map``, one token fed on a static cache holding ``--context``
tokens), compiled three times (``CompiledStep``'s levers):

* ``neither``: every int8 product its own call, transformers' attention (``repeat_kv`` under dynamo);
* ``groups``: the sibling projections as one product per group (``_GroupPart``, ``_OneCallPerGroup``);
* ``groups + attention``: also the grouped key/value heads read in place (``_sdpa_gqa``).

A job runs ``neither`` (``runners.engine.compiled_draft``'s docstring says why). Each variant's graphs sit on a code
object of their own (``_own_frame``), yet the order they were compiled in can still move a ratio: ``--reverse``
compiles them the other way round; quote a lever's ratio where both orders agree.

Each round times ``--steps`` one-token steps of every variant, the order rotating from round to round, after one
untimed run of each (``bench_engine_costs.measure``: a drifting host biases every variant alike); printed: each variant's median step over the rounds with its min–max, and the
ratios of the levers (each round's ratio, their median and min–max). Before timing, the three variants' logits are
compared with each other (bit for bit: the levers change no number) and with the eager draft's (float rounding:
inductor's fused kernels). Run on a quiet machine; say the CPU and the date with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

#: the variants, by name: (groups, attention), ``CompiledStep``'s levers
VARIANTS = {"neither": (False, False), "groups": (True, False), "groups + attention": (True, True)}
#: the ratios printed: (numerator, denominator)
RATIOS = (("groups", "neither"), ("groups + attention", "groups"), ("groups + attention", "neither"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default=None, help="conf/pair/NAME (default: the config's default pair)")
    p.add_argument("--head-rows", type=int, default=32768, help="the draft's LM head rows (0: the whole head)")
    p.add_argument("--token-map", default="package:gemma3", help="which rows (specbench.models.hot_vocab)")
    p.add_argument("--context", type=int, default=128, help="tokens in the cache the steps read")
    p.add_argument("--headroom", type=int, default=64, help="the static cache's positions beyond the context (the "
                   "compiled step attends over all of them, masked; bench_engine_costs.py's 64)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=40, help="one-token steps timed per variant and round")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", choices=list(VARIANTS), default=None, help="compile and time this variant alone (for a "
                   "comparison between processes, each with one compiled step)")
    p.add_argument("--reverse", action="store_true", help="compile the variants in the reverse order (a ratio that "
                   "changes with the order measures the order, not the lever)")
    p.add_argument("--json", default=None, help="also write the figures here")
    return p.parse_args(argv)


def timed_step(step: Any, model: Any, context: int, headroom: int, steps: int) -> tuple[Any, Any]:
    """``(run, logits)``: ``run()`` feeds ``steps`` one-token steps through ``step`` on a static cache of ``model``
    (``headroom`` positions beyond its prefill) prefilled eagerly with ``context`` tokens, the cache cropped back
    after each; ``logits()`` one step's logits."""
    import torch

    from runners.engine.kv import PositionCache, cache_arg, crop_to

    with torch.inference_mode():  # the cache's tensors made as a job's are (dynamo guards on inference tensors)
        cache = PositionCache(model, headroom)
        model(input_ids=torch.arange(10, 10 + context)[None], **cache_arg(model, cache), use_cache=True,
              logits_to_keep=1)

    def logits() -> Any:
        with torch.inference_mode():
            out = step(cache, [20], context)
            crop_to(cache, context)
        return out

    def run() -> None:
        with torch.inference_mode():
            for _ in range(steps):
                step(cache, [20], context)
                crop_to(cache, context)

    return run, logits


def eager_logits(model: Any, context: int) -> Any:
    """The eager draft's logits for the same step (its own cache, ``bench_engine_costs._prefilled``)."""
    import torch
    from bench_engine_costs import _prefilled

    from runners.engine.kv import cache_arg

    cache = _prefilled(model, context)
    with torch.inference_mode():
        return model(input_ids=torch.tensor([[20]]), **cache_arg(model, cache), use_cache=True,
                     logits_to_keep=1).logits


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from bench_engine_costs import cpu_flags, cut_head, measure
    from bench_vs_hf import load_bench_pair

    from runners.engine.compiled_draft import CompiledStep, check_compilable

    label, _, draft, _ = load_bench_pair(args.pair, None)
    model = cut_head(draft, args.head_rows, args.token_map) if args.head_rows else draft
    check_compilable(model)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = f"head {args.head_rows} rows" if args.head_rows else "whole head"
    print(f"{label}'s draft ({head}): {cpu_flags()}, {args.threads} torch threads, torch {torch.__version__}, {when}; "
          f"context {args.context} (+{args.headroom} static), {args.rounds} rounds of {args.steps} steps (interleaved)")
    runs, logits, compile_s = {}, {}, {}
    variants = {args.only: VARIANTS[args.only]} if args.only else VARIANTS
    if args.reverse:
        variants = dict(reversed(list(variants.items())))
    for name, (groups, attention) in variants.items():
        step = CompiledStep(model, groups=groups, attention=attention)
        step.warm_up()
        compile_s[name] = step.compile_s
        runs[name], one = timed_step(step, model, args.context, args.headroom, args.steps)
        logits[name] = one()
    print("  compiled before the rounds: " + ", ".join(f"{n} in {s:.1f} s" for n, s in compile_s.items()))
    first = next(iter(logits.values()))
    identical = all(torch.equal(first, other) for other in logits.values())
    eager = eager_logits(model, args.context)
    finite = torch.isfinite(eager)  # a restricted head's other rows are -inf
    drift = float((first[finite] - eager[finite]).abs().max())
    print(f"  logits of the variants identical bit for bit: {'yes' if identical else 'NO'}; "
          f"against the eager draft's: max |difference| {drift:.2e}")
    samples = {name: [ms / args.steps for ms in values] for name, values in measure(runs, args.rounds).items()}
    for name in samples:
        v = samples[name]
        print(f"  {name:<20} {statistics.median(v):7.2f} ms a step ({min(v):.2f}–{max(v):.2f})")
    ratios = {}
    for top, bottom in RATIOS if not args.only else ():
        per_round = [a / b for a, b in zip(samples[top], samples[bottom], strict=True)]
        ratios[f"{top} / {bottom}"] = per_round
        print(f"  {top} / {bottom}: {statistics.median(per_round):.3f} ({min(per_round):.3f}–{max(per_round):.3f}; "
              f"{sum(x < 1 for x in per_round)} of {len(per_round)} rounds below 1)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "pair": label, "cpu": cpu_flags(), "threads": args.threads, "torch": torch.__version__, "when": when,
            "context": args.context, "headroom": args.headroom, "head_rows": args.head_rows, "rounds": args.rounds,
            "steps": args.steps,
            "compile_s": compile_s, "identical": identical, "eager_max_abs_difference": drift,
            "step_ms": samples, "ratios": ratios}, indent=1) + "\n", encoding="utf-8")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
