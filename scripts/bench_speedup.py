#!/usr/bin/env python
"""Speedup over the target alone of offline drafters, side by side in one run (a script, not a test).

    .venv/bin/python scripts/bench_speedup.py --task specbench --data-files ../shared/data/spec_bench/question.jsonl \\
        --per-category 1                                    # 13 Spec-Bench questions (first turn), 64 tokens
    .venv/bin/python scripts/bench_speedup.py --configs int8:5 lookup:8 hybrid:6 --plain
    .venv/bin/python scripts/bench_speedup.py --n-prompts 4   # embedded prompts

Target: Gemma-3-270M fp32 (``pypi:gemma3-270m``), greedy. Each ``--configs`` entry is
``DRAFTER:GAMMA`` with DRAFTER one of

* ``int8``: the target's int8-dynamic copy (``ModelDrafter``; pair ``gemma3-270m_gemma3-270m-int8``);
* ``lookup``: prompt lookup with the settings of ``conf/pair/gemma3-270m_prompt-lookup.yaml``;
* ``hybrid``: prompt lookup, else the int8 copy (``runners.drafters.hybrid``), with the settings of
  ``conf/pair/gemma3-270m_hybrid-lookup-int8.yaml``;

run by our loop with ``FixedGamma(GAMMA)`` and the engine options of ``--engine`` (the keys of
``conf/config.yaml``'s ``engine`` node, validated as a job validates them, ``specbench.config.EngineConfig``;
default: the lossless levers on: ``fast_linear=all``, ``verify_buckets=auto`` (probed once, printed),
``fused_prefill=true``); ``--plain`` adds every config once more without them. For every prompt
the target alone (``AutoregressiveRunner``) and every config run back to back in an order that
rotates from prompt to prompt. The target alone runs on the kernels of the configs it is compared with
(issue 40's baseline rule: ``ar`` on ``--engine``'s, ``ar plain`` on the plain ones with ``--plain``), and,
when no variant is plain, once more on the plain kernels (``ar plain kernels``: the baseline before that
rule). Printed per config: pooled speedup over the target alone on its own kernels (total AR time / total
time for the same tokens), the median and min/max of per-prompt speedups, acceptance, tokens per round,
the pooled speedup over the fastest target alone and over the plain one, and whether every output equals
the target's own, token for token (exit status 1 if not).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent

DRAFTERS = ("int8", "lookup", "hybrid")
PAIRS = {"lookup": "gemma3-270m_prompt-lookup", "hybrid": "gemma3-270m_hybrid-lookup-int8"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=["int8:5", "lookup:8", "hybrid:6"], help="DRAFTER:GAMMA ...")
    p.add_argument("--task", default="embedded")
    p.add_argument("--data-files", default=None)
    p.add_argument("--n-prompts", type=int, default=None)
    p.add_argument("--per-category", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engine", default="fast_linear=all,verify_buckets=auto,fused_prefill=true",
                   help="engine options of every config (comma-separated key=value; '' = plain)")
    p.add_argument("--plain", action="store_true", help="also run every config without engine options")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    configs = []
    for item in args.configs:
        name, _, gamma = item.partition(":")
        if name not in DRAFTERS or not gamma.isdigit() or int(gamma) < 1:
            p.error(f"bad config {item!r}: DRAFTER:GAMMA with DRAFTER in {DRAFTERS}")
        configs.append((name, int(gamma)))
    args.configs = configs
    from specbench.config import EngineConfig
    from specbench.registry import ConfigError

    engine: dict[str, Any] = {}
    for kv in filter(None, args.engine.split(",")):
        key, _, value = kv.partition("=")
        engine[key] = int(value) if value.isdigit() else {"true": True, "false": False}.get(value, value)
    try:
        args.engine = EngineConfig.from_mapping(engine)
    except ConfigError as exc:
        p.error(f"--engine: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from methods.base import FixedGamma
    from runners.drafters import DrafterContext, build_drafter
    from runners.engine.factory import build_runner
    from runners.engine.verify_forward import engine_options, step_forward
    from specbench.config import EngineConfig, JobConfig, compose
    from specbench.models import logits_width
    from specbench.models.cache import load_pair

    sys.path.insert(0, str(SCRIPTS))
    from bench_vs_hf import load_prompts, print_load_and_identity

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    configs = {name: dataclasses.replace(JobConfig.from_mapping(compose([f"pair={pair}"])), cache_dir=args.cache_dir)
               for name, pair in (("int8", "gemma3-270m_gemma3-270m-int8"), *PAIRS.items())}
    target_spec = configs["int8"].pair.target
    base = load_pair(configs["int8"], with_draft=False)
    target, tok, eos = base.target, base.tokenizer, base.eos
    prompts = load_prompts(tok, args.task, args.data_files, args.n_prompts, args.per_category)

    def drafter(name: str) -> Any:
        """A fresh drafter of the pair's own kind and options, as a job builds it."""
        pair = configs[name].pair
        assert pair.target == target_spec, f"{pair.name}: another target"
        model = load_pair(configs[name]).draft  # the pair's draft model (None: prompt lookup)
        ctx = DrafterContext(target_tokenizer=tok, eos_token_ids=eos, target_vocab_size=logits_width(target),
                             draft_model=model, draft_tokenizer=tok if model is not None else None,
                             options=pair.draft.options)
        return build_drafter(pair.draft.kind, ctx)

    runners: dict[str, Any] = {}
    engine_info: dict[str, Any] = {}
    variants = [("", args.engine)] + ([(" plain", EngineConfig())] if args.plain and args.engine.any else [])
    for suffix, engine in variants:
        # the baseline rule (issues 40, 50): the target alone on the fastest step the engine's kernels allow
        # (``step_forward``: the transposed copy at one row too, a padded step where the engine pads; no γ)
        step = step_forward(target, engine)
        runners[f"ar{suffix}"] = build_runner("ar", target, eos, forward=step)
        engine_info[f"ar{suffix}"] = step.describe_step()
        for name, gamma in args.configs:
            opts = engine_options(target, engine, gamma)
            engine_info[f"{name}:{gamma}{suffix}"] = {**opts["forward"].describe(), "fused_prefill": opts["fused_prefill"]}
            runners[f"{name}:{gamma}{suffix}"] = build_runner("speculative", target, eos, drafter=drafter(name),
                                                              policy=FixedGamma(gamma), engine=opts)
    plain_ar = [n for n in runners if n.startswith("ar") and runners[n].describe() == {"fast_linear": False, "step": None}]
    if not plain_ar:  # the rule before issue 40, for comparison: plain one-row steps whatever the loop ran
        runners["ar plain kernels"] = build_runner("ar", target, eos)
        engine_info["ar plain kernels"] = runners["ar plain kernels"].describe()
    print(f"target gemma3-270m fp32, greedy, task={args.task} prompts={len(prompts)} max_new_tokens={args.max_new_tokens} "
          f"repeats={args.repeats} threads={args.threads} (set-up {time.perf_counter() - t0:.1f} s)")
    for key, info in engine_info.items():
        print(f"  {key}: {info}")
    for runner in runners.values():  # warm-up
        runner.generate(prompts[0][1], 16)

    names = list(runners)

    def base_of(name: str) -> str:
        """The target alone a config divides by: the one on its own kernels (``ar`` or ``ar plain``)."""
        return "ar plain" if name.endswith(" plain") else "ar" if not name.startswith("ar") else name
    stats: dict[str, dict[str, list]] = {n: {"s": [], "tok": [], "acc": [], "drafted": [], "rounds": []} for n in names}
    per_prompt: dict[str, dict[str, float]] = {n: {} for n in names}
    fastest: dict[str, dict[str, float]] = {n: {} for n in names}  # the fastest repeat per prompt
    identical = True
    loads = []
    k = 0
    for _ in range(args.repeats):
        for pid, ids in prompts:
            order = names[k % len(names):] + names[: k % len(names)]
            k += 1
            loads.append(os.getloadavg()[0])
            outs = {}
            for n in order:
                gen = runners[n].generate(ids, args.max_new_tokens)
                outs[n] = gen.tokens
                st = stats[n]
                st["s"].append(gen.wall_ms / 1000.0)
                st["tok"].append(len(gen.tokens))
                st["acc"].append(sum(gen.rounds.accepted))
                st["drafted"].append(sum(gen.rounds.drafted))
                st["rounds"].append(len(gen.rounds))
                per_prompt[n][pid] = per_prompt[n].get(pid, 0.0) + gen.wall_ms
                fastest[n][pid] = min(fastest[n].get(pid, float("inf")), gen.wall_ms)
            same = all(outs[n] == outs["ar"] for n in names)
            identical &= same
            print(f"{pid[:28]:<30}" + " ".join(f"{n}={per_prompt[base_of(n)][pid] / per_prompt[n][pid]:.2f}x"
                                               for n in names if not n.startswith("ar"))
                  + ("" if same else "  OUTPUT DIFFERS"), flush=True)
    print()
    ars = [n for n in names if n.startswith("ar")]
    fastest_ar = min(ars, key=lambda n: sum(stats[n]["s"]))
    header = (f"{'config':<22}{'tok/s':>8}{'pooled':>8}{'median':>8}{'min':>7}{'max':>7}{'acc':>7}{'tok/rd':>8}"
              f"{'vs fastest AR':>15}{'vs plain AR':>13}")
    print(header + "   (speedups over the target alone on the same kernels, same prompts and tokens; then over the "
                   f"fastest target alone, {fastest_ar!r}, and over the plain one, the rule before issue 40)")
    print("-" * len(header))
    plain = next(n for n in ars if runners[n].describe() == {"fast_linear": False, "step": None})
    result: dict[str, Any] = {}
    for n in names:
        st = stats[n]
        base = base_of(n)
        speedups = [per_prompt[base][p] / per_prompt[n][p] for p in per_prompt[n]]
        drafted, rounds = sum(st["drafted"]), sum(st["rounds"])
        row = {"baseline": base, "tokens_per_s": sum(st["tok"]) / sum(st["s"]),
               "pooled_speedup": sum(stats[base]["s"]) / sum(st["s"]),
               "median_speedup": statistics.median(speedups), "min_speedup": min(speedups), "max_speedup": max(speedups),
               "pooled_speedup_vs_fastest_ar": sum(stats[fastest_ar]["s"]) / sum(st["s"]),
               "pooled_speedup_vs_plain_ar": sum(stats[plain]["s"]) / sum(st["s"]),
               "acceptance": sum(st["acc"]) / drafted if drafted else None,
               "tokens_per_round": (sum(st["acc"]) + rounds) / rounds if rounds else None}
        if args.repeats > 1:  # other processes only ever add time: the fastest repeat per prompt
            best = [fastest[base][p] / fastest[n][p] for p in fastest[n]]
            row.update(median_speedup_fastest=statistics.median(best),
                       pooled_speedup_fastest=sum(fastest[base].values()) / sum(fastest[n].values()))
        result[n] = row
        acc = f"{row['acceptance']:.3f}" if row["acceptance"] is not None else "-"
        tpr = f"{row['tokens_per_round']:.2f}" if row["tokens_per_round"] is not None else "-"
        print(f"{n:<22}{row['tokens_per_s']:>8.2f}{row['pooled_speedup']:>8.3f}{row['median_speedup']:>8.3f}"
              f"{row['min_speedup']:>7.2f}{row['max_speedup']:>7.2f}{acc:>7}{tpr:>8}"
              f"{row['pooled_speedup_vs_fastest_ar']:>15.3f}{row['pooled_speedup_vs_plain_ar']:>13.3f}")
    if args.repeats > 1:
        print(f"from the fastest of {args.repeats} repeats per prompt: " + ", ".join(
            f"{n} median {result[n]['median_speedup_fastest']:.3f} pooled {result[n]['pooled_speedup_fastest']:.3f}"
            for n in names if not n.startswith("ar")))
    print_load_and_identity(loads, identical, "every config, prompt and repeat")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"task": args.task, "n_prompts": len(prompts), "engine": engine_info,
                                               "max_new_tokens": args.max_new_tokens, "identical": identical,
                                               "load_average": loads, "configs": result}, indent=2, default=str))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
