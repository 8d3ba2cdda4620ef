#!/usr/bin/env python
"""Throughput of our engine against transformers' assisted generation, side by side.

    .venv/bin/python scripts/bench_vs_hf.py                       # embedded pair and task, γ=5, 64 tokens
    .venv/bin/python scripts/bench_vs_hf.py --gamma 4 --repeats 3 --json results/bench_vs_hf.json
    .venv/bin/python scripts/bench_vs_hf.py --pair gemma3-270m_smollm2-135m   # conf/pair/NAME.yaml (same vocab only)
    .venv/bin/python scripts/bench_vs_hf.py --task specbench --data-files ../shared/data/spec_bench/question.jsonl \
        --per-category 1                                          # Spec-Bench questions (first turn), 13 categories
    .venv/bin/python scripts/bench_vs_hf.py --variants all        # also each engine option turned off, one at a time

One process, one run, same models (loaded once through ``MODEL_CACHE``), same
prompts (the first turn of each prompt of the embedded task, formatted as a job
formats it), greedy, a fixed γ:

* ``ours``: ``SpeculativeRunner`` + ``ModelDrafter`` + ``FixedGamma(γ)`` (method=specdecode) on the engine as a
  user gets it: the ``engine`` config a job composes (``conf/config.yaml``: ``fast_linear``, ``verify_buckets``,
  ``fused_prefill`` and ``width`` ``auto``, resolved on this host as a job resolves them,
  ``verify_forward.engine_options``), with ``--engine KEY=VALUE`` overrides; what it resolved to is printed;
* ``plain``: the same loop with no engine option (the engine before issue 16);
* with ``--variants all`` also ``ours-<option>``: each option that is on turned off in turn. (The drafter computes
  the draft's softmax confidence only when the policy reads it — ``ModelDrafter.propose`` with ``policy.needs``,
  issue 14 — so ``FixedGamma`` pays nothing for it.)
* ``hf``:   ``target.generate(assistant_model=draft)`` via ``HFAssistedRunner`` with
  schedule "constant", ``num_assistant_tokens=γ``, confidence threshold 0 (method=hf_native_specdecode);
* ``ar``:   the target alone (``AutoregressiveRunner``) on ``verify_forward.step_forward`` of the same engine config:
  the fastest lossless step our engine allows, the baseline rule's (issues 40, 50); every ``/ar`` divides by it;
* ``ar-plain``: the target alone on plain forwards (transformers' kernels, our loop). Where it decodes faster than
  ``ar`` over the run (the probe's few timings misled it), the speedups are also printed over it (``fastest_alone``).

The probed tables and the choices they made are printed and written to ``--json`` (``engine_options``), so two
runs that differ can be told apart by what they chose.

Each engine is warmed up first (untimed). Then, for every repeat and prompt, all engines
run back to back in an order that rotates from one (prompt, repeat) to the next, so slow
drift of the machine (other jobs, thermal) falls on every engine alike. Printed: per prompt
tokens/s of every engine; per engine the pooled tokens/s, its ratio to hf and to
ar, the median of per-prompt ratios, where our loop's time went (draft / verify / overhead
per round, ``Generation.phase_ms``), and whether every output is identical token for token
(to each other and to the target alone).

Read the numbers knowing that (runners/engine/hf_assisted.py): transformers has no separate
prefill, so its rounds are shifted by one token against ours (acceptance differs a
little for that reason alone) and its TTFT includes the first draft block and its
verification; ours is the target's prefill (or the same first round with ``fused_prefill``). Timings are only meaningful on a quiet
machine (``--threads`` torch threads, default 2). Exit status 1 when any output differs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the engine options ``--variants all`` turns off one at a time (``specbench.config.EngineConfig``)
LEVERS = ("fast_linear", "verify_buckets", "fused_prefill", "width")


@dataclass
class Tally:
    """Sums over the timed runs of one engine (one prompt, or all prompts)."""

    tokens: int = 0
    seconds: float = 0.0
    ttft_ms: list[float] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0

    def add(self, gen: Any) -> None:
        self.tokens += len(gen.tokens)
        self.seconds += gen.wall_ms / 1000.0
        self.ttft_ms.append(gen.ttft_ms)
        self.drafted += sum(gen.rounds.drafted)
        self.accepted += sum(gen.rounds.accepted)
        self.rounds += len(gen.rounds)

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def as_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "seconds": self.seconds,
            "tokens_per_s": self.tps,
            "ttft_ms_median": statistics.median(self.ttft_ms) if self.ttft_ms else None,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "rounds": self.rounds,
            "acceptance_rate": self.acceptance,
        }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pair", default="gemma3-270m_gemma3-270m-int8",
                   help="conf/pair/NAME.yaml (default: Gemma-3-270M fp32 / its int8-dynamic copy)")
    p.add_argument("--gamma", type=int, default=5, help="fixed speculation length (default 5)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--task", default="embedded", help="embedded (default) or specbench (needs --data-files offline)")
    p.add_argument("--data-files", default=None, help="local question file of the task (e.g. Spec-Bench's question.jsonl)")
    p.add_argument("--n-prompts", type=int, default=None, help="first N prompts of the task (default: all)")
    p.add_argument("--per-category", type=int, default=None, help="at most N prompts of each category (before --n-prompts)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of every prompt and engine (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up generations per engine (default 1)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="an engine option of 'ours' and 'ar' over the config's (e.g. fast_linear=head; repeatable)")
    p.add_argument("--variants", choices=("basic", "all"), default="basic",
                   help="basic: ours, plain, hf, ar, ar-plain; all: also each engine option on turned off in turn")
    p.add_argument("--cache-dir", default=None, help="converted GGUF models (default: ~/.cache/specbench)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    if args.gamma < 1 or args.max_new_tokens < 1 or args.repeats < 1 or args.threads < 1:
        p.error("--gamma, --max-new-tokens, --repeats and --threads must be >= 1")
    bad = [o for o in args.engine if "=" not in o]
    if bad:
        p.error(f"--engine takes KEY=VALUE, got {bad[0]!r}")
    return args


def load_bench_pair(name: str | None, cache_dir: str | None) -> tuple[str, Any, Any, Any]:
    """(label, target, draft, tokenizer) of ``conf/pair/NAME.yaml`` (``specbench.models.cache.load_pair``)."""
    import dataclasses

    from specbench.config import JobConfig, compose
    from specbench.models.cache import load_pair
    from specbench.registry import ConfigError

    config = JobConfig.from_mapping(compose([f"pair={name}"] if name else []))
    pair = config.pair
    if pair.draft is None or pair.draft.model is None:
        raise ConfigError(f"pair {pair.name!r} has no draft model (transformers' peer needs one)")
    if not pair.same_tokenizer:
        raise ConfigError(f"pair {pair.name!r}: the draft has another tokenizer; this benchmark needs one vocabulary")
    loaded = load_pair(dataclasses.replace(config, cache_dir=cache_dir))
    return pair.name, loaded.target, loaded.draft, loaded.tokenizer


def print_load_and_identity(loads: list[float], identical: bool, over: str) -> None:
    """The last lines of a side-by-side benchmark's report (``bench_speedup``, ``bench_batch``): the 1-min load
    average while it timed, and whether every output equalled the target's own greedy decoding (``over``: what
    was compared, e.g. "every config, prompt and repeat")."""
    print(f"\n1-min load average during the timed runs: min {min(loads):.2f}, median {statistics.median(loads):.2f}, "
          f"max {max(loads):.2f} ({os.cpu_count()} CPUs)")
    print(f"outputs identical to the target's own greedy decoding ({over}): {'yes' if identical else 'NO'}")


def load_prompts(tokenizer: Any, task: str = "embedded", data_files: str | None = None, n: int | None = None,
                 per_category: int | None = None) -> list[tuple[str, list[int]]]:
    """The first turn of each prompt of a task (``conf/task/TASK.yaml`` with ``data_files`` and the
    selection), formatted and encoded as a job does (``specbench.tasks.encode_turn``)."""
    from specbench.config import JobConfig, compose
    from specbench.tasks import encode_turn, load_task

    overrides = [f"task={task}"]
    if data_files:
        overrides.append(f"task.data_files={data_files}")
    if n:
        overrides.append(f"task.n_prompts={n}")
    if per_category:
        overrides.append(f"task.per_category={per_category}")
    config = JobConfig.from_mapping(compose(overrides))
    out = []
    for prompt in load_task(config.task):
        out.append((f"{prompt.category}:{prompt.prompt_id}" if task != "embedded" else prompt.prompt_id,
                    encode_turn(tokenizer, [], prompt.turns[0], config.task.prompt_format)[0]))
    return out


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def engine_config(overrides: list[str]) -> Any:
    """The typed ``engine`` config a job composes (``conf/config.yaml``: the options ``auto``, as a user gets the
    engine), with ``--engine`` overrides (``KEY=VALUE``, the keys of ``engine``)."""
    from specbench.config import JobConfig, compose
    from specbench.registry import ConfigError

    config = JobConfig.from_mapping(compose([f"engine.{o}" for o in overrides]))
    if config.engine.dtype != "model":
        raise ConfigError("engine.dtype: this benchmark runs the pair's own dtype (transformers' loop runs it too); "
                          "compare a bfloat16 target in a job sweep (engine.dtype=model,auto)")
    return config.engine


def build_engines(args: argparse.Namespace, target: Any, draft: Any, eos: list[int]) -> tuple[dict[str, Any], dict]:
    """The engines to interleave and what they run on (module docstring): ``ours`` and the target alone ``ar`` on
    the engine config a job composes (``engine_config``), the target alone on ``step_forward`` (the fastest step that
    config allows: the baseline rule); ``plain`` and ``ar-plain`` on no engine option; ``hf`` transformers' loop."""
    from dataclasses import replace

    from methods.base import FixedGamma
    from runners.drafters.model import ModelDrafter
    from runners.engine.factory import build_runner
    from runners.engine.fast_linear import measurements
    from runners.engine.graphs import use_graphs
    from runners.engine.invariant import use_invariant
    from runners.engine.verify_forward import VerifyForward, engine_options, step_forward

    gamma = args.gamma
    engine = engine_config(args.engine)
    use_graphs(engine.graphs, (target, draft), args.max_new_tokens)
    use_invariant(target, engine, args.max_new_tokens)
    t0 = time.perf_counter()
    step = step_forward(target, engine)  # first: its probe holds the loop's shorter one (as a job builds them)
    options = engine_options(target, engine, gamma)
    info: dict[str, Any] = {"engine_config": {k: getattr(engine, k) for k in LEVERS},
                            "ours": {**options["forward"].describe(), "fused_prefill": options["fused_prefill"]},
                            "ar": step.describe_step(), "probe_s": time.perf_counter() - t0,
                            "measurements": measurements(target)}

    def ours(opts: dict[str, Any], drafter: Any = None) -> Any:
        return build_runner("speculative", target, eos, drafter=drafter or ModelDrafter(draft, eos),
                            policy=FixedGamma(gamma), engine=opts)

    engines: dict[str, Any] = {
        "ours": ours(options),
        "plain": ours({"forward": VerifyForward(target), "fused_prefill": False}),
        "hf": build_runner("hf", target, eos, draft_model=draft, policy=FixedGamma(gamma)),
        "ar": build_runner("ar", target, eos, forward=step),
        "ar-plain": build_runner("ar", target, eos),
    }
    if args.variants == "all":  # each option of the engine off in turn, the others as composed
        for lever in LEVERS:
            if getattr(engine, lever) not in (False, None):
                off = replace(engine, **{lever: False})
                engines[f"ours-{lever}"] = ours(engine_options(target, off, gamma))
    return engines, info


#: the targets alone a run times, both lossless and on kernels our engine allows (``build_engines``)
ALONE = ("ar", "ar-plain")


def fastest_alone(tokens_per_s: dict[str, float]) -> str:
    """The target alone (``ALONE``) that decoded fastest in this run: the baseline rule divides by the fastest lossless
    target alone our engine allows. ``ar`` runs on the step the engine's probe chose from a few one-token timings; on a
    noisy host the plain step can decode faster over a whole run (a 2-core Intel Xeon without AMX, 2026-11-28:
    ``ar-plain`` 16.58 tokens/s against ``ar`` 15.51, ``results/committed/vs_hf_xeon``)."""
    return max((e for e in ALONE if e in tokens_per_s), key=lambda e: tokens_per_s[e])


def _ratio_median(per_prompt: dict, a: str, b: str) -> float:
    return statistics.median(t[a].tps / t[b].tps for t in per_prompt.values())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers

    from specbench.models import eos_ids

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # transformers' internal per-round notices

    t0 = time.perf_counter()
    label, target, draft, tokenizer = load_bench_pair(args.pair, args.cache_dir)
    load_s = time.perf_counter() - t0
    eos = eos_ids(target, tokenizer)
    prompts = load_prompts(tokenizer, args.task, args.data_files, args.n_prompts, args.per_category)
    gamma, n_new = args.gamma, args.max_new_tokens
    runners, info = build_engines(args, target, draft, eos)
    engines = tuple(runners)
    print(f"pair: {label}   (loaded in {load_s:.1f} s)")
    print(
        f"task={args.task} prompts={len(prompts)} gamma={gamma} max_new_tokens={n_new} repeats={args.repeats} "
        f"warmup={args.warmup} threads={args.threads} greedy | torch {torch.__version__} transformers "
        f"{transformers.__version__} python {platform.python_version()} | eos={eos} | load {os.getloadavg()[0]:.2f}"
    )
    print(f"engine config: {info['engine_config']} (probed in {info['probe_s']:.1f} s)")
    print(f"  ours runs on:  {info['ours']}")
    print(f"  ar steps on:   {info['ar']} (the fastest step that config allows: every speedup here divides by it)")
    for key, (body, head) in info["measurements"]["probes"].items():
        print(f"  probe {key} (kernels|k_max|threads): body ms " + " ".join(f"{k}:{v:.0f}" for k, v in body.items())
              + " | head ms " + " ".join(f"{k}:{v:.0f}" for k, v in head.items()))

    for _ in range(args.warmup):  # untimed: allocations, kernels, lazy imports
        for runner in runners.values():
            runner.generate(prompts[0][1], min(16, n_new))

    per_prompt: dict[str, dict[str, Tally]] = {pid: {e: Tally() for e in engines} for pid, _ in prompts}
    outputs: dict[str, dict[str, list[list[int]]]] = {pid: {e: [] for e in engines} for pid, _ in prompts}
    phases: dict[str, dict[str, float]] = {e: {} for e in engines}
    walls: dict[str, dict[str, list[float]]] = {pid: {e: [] for e in engines} for pid, _ in prompts}
    loads: list[float] = []
    k = 0
    for _ in range(args.repeats):
        for pid, ids in prompts:
            order = engines[k % len(engines):] + engines[: k % len(engines)]  # rotate who goes first
            k += 1
            loads.append(os.getloadavg()[0])
            for engine in order:
                gen = runners[engine].generate(ids, n_new)
                per_prompt[pid][engine].add(gen)
                outputs[pid][engine].append(gen.tokens)
                walls[pid][engine].append(gen.wall_ms)
                for phase, ms in gen.phase_ms.items():
                    phases[engine][phase] = phases[engine].get(phase, 0.0) + ms

    total = {e: Tally() for e in engines}
    for pid, _ in prompts:
        for e in engines:
            t = per_prompt[pid][e]
            for name in ("tokens", "seconds", "drafted", "accepted", "rounds"):
                setattr(total[e], name, getattr(total[e], name) + getattr(t, name))
            total[e].ttft_ms.extend(t.ttft_ms)
    shown = [e for e in ("ours", "plain", "hf", "ar", "ar-plain") if e in engines]
    header = f"{'prompt':<24}{'tok':>5}" + "".join(f"{e + ' t/s':>12}" for e in shown) + f"{'ours/hf':>9}{'plain/hf':>9}  identical"
    print()
    print(header)
    print("-" * len(header))
    rows = []
    identical_all = True
    for pid, _ in prompts:
        t = per_prompt[pid]
        outs = outputs[pid]
        same = {e: outs[e] == outs["ar"] for e in engines}
        identical = all(same.values())
        identical_all &= identical
        ident = "yes" if identical else "NO: " + ",".join(e for e, ok in same.items() if not ok)
        print(f"{pid[:23]:<24}{len(outs['ours'][0]):>5}" + "".join(f"{t[e].tps:>12.1f}" for e in shown)
              + f"{t['ours'].tps / t['hf'].tps:>9.3f}{t['plain'].tps / t['hf'].tps:>9.3f}  {ident}")
        rows.append({"prompt_id": pid, "identical": identical, **{e: t[e].as_dict() for e in engines}})
    print()
    head2 = (f"{'engine':<22}{'tok/s':>8}{'/hf':>8}{'/hf med':>9}{'/ar':>8}{'acc':>7}{'rounds':>8}"
             f"{'draft/rd':>10}{'verify/rd':>10}{'ovh/rd':>8}{'ovh %':>7}{'TTFT':>8}")
    print(head2 + "   (per-round times in ms; ovh % of the time after the first token)")
    print("-" * len(head2))
    summary: dict[str, Any] = {}
    for e in engines:
        tt = total[e]
        ph = phases[e]
        rounds = tt.rounds or None
        after = sum(ph.values())
        row = {
            "tokens_per_s": tt.tps, "ratio_hf": tt.tps / total["hf"].tps, "ratio_ar": tt.tps / total["ar"].tps,
            "ratio_hf_median": _ratio_median(per_prompt, e, "hf"), "acceptance": tt.acceptance, "rounds": tt.rounds,
            "draft_ms_per_round": ph.get("draft", 0.0) / rounds if rounds and ph else None,
            "verify_ms_per_round": ph.get("verify", 0.0) / rounds if rounds and ph else None,
            "overhead_ms_per_round": ph.get("overhead", 0.0) / rounds if rounds and ph else None,
            "overhead_share": ph.get("overhead", 0.0) / after if after else None,
            "ttft_ms_median": statistics.median(tt.ttft_ms),
        }
        summary[e] = row
        print(f"{e:<22}{tt.tps:>8.2f}{row['ratio_hf']:>8.3f}{row['ratio_hf_median']:>9.3f}{row['ratio_ar']:>8.3f}"
              f"{fmt(tt.acceptance, '.3f'):>7}{tt.rounds:>8}{fmt(row['draft_ms_per_round']):>10}"
              f"{fmt(row['verify_ms_per_round']):>10}{fmt(row['overhead_ms_per_round'], '.2f'):>8}"
              f"{fmt(100 * row['overhead_share'] if row['overhead_share'] is not None else None, '.2f'):>7}"
              f"{row['ttft_ms_median']:>8.1f}")
    print()
    print(f"throughput ours/hf: {summary['ours']['ratio_hf']:.3f} pooled (total tokens / total time), median of "
          f"per-prompt ratios {summary['ours']['ratio_hf_median']:.3f}; plain/hf {summary['plain']['ratio_hf']:.3f}")
    for e in engines:
        if e.startswith("ours-") or e.startswith("ours+"):
            print(f"  {e}: {summary[e]['ratio_hf']:.3f} x hf  (ours / {e} = {total['ours'].tps / total[e].tps:.3f})")
    if args.repeats > 1:  # the fastest of the repeats per prompt: other processes only ever add time
        best = {e: sum(min(walls[pid][e]) for pid, _ in prompts) for e in engines}
        print(f"from the fastest of {args.repeats} repeats per prompt and engine: " + ", ".join(
            f"{e}/hf {best['hf'] / best[e]:.3f}" for e in engines if e not in ("hf", "ar")) + f"; ours/ar {best['ar'] / best['ours']:.3f}")
        for e in engines:
            summary[e]["ratio_hf_fastest"] = best["hf"] / best[e]
            summary[e]["ratio_ar_fastest"] = best["ar"] / best[e]
    print(f"speedup over AR: ours {summary['ours']['ratio_ar']:.3f}x, plain {summary['plain']['ratio_ar']:.3f}x, "
          f"hf {summary['hf']['ratio_ar']:.3f}x")
    alone = fastest_alone({e: total[e].tps for e in engines})
    for e in engines:
        summary[e]["ratio_fastest_alone"] = total[e].tps / total[alone].tps
    if alone != "ar":
        print(f"the target alone decoded faster on plain forwards than on the probe's step ({alone} "
              f"{total[alone].tps:.2f} tok/s, ar {total['ar'].tps:.2f}): over the fastest target alone, ours "
              f"{summary['ours']['ratio_fastest_alone']:.3f}x, plain {summary['plain']['ratio_fastest_alone']:.3f}x, "
              f"hf {summary['hf']['ratio_fastest_alone']:.3f}x")
    print(f"1-min load average during the timed runs: min {min(loads):.2f}, median {statistics.median(loads):.2f}, "
          f"max {max(loads):.2f} ({os.cpu_count()} CPUs)")
    print(f"outputs identical token for token (every engine = ar, every prompt and repeat): "
          f"{'yes' if identical_all else 'NO'}")
    print("note: hf has no separate prefill (its rounds are shifted by one token against plain; its TTFT includes "
          "the first draft block), see runners/engine/hf_assisted.py")

    if args.json:
        result = {
            "pair": label, "task": args.task, "n_prompts": len(prompts), "gamma": gamma, "max_new_tokens": n_new,
            "repeats": args.repeats, "warmup": args.warmup, "threads": args.threads, "engine": args.engine,
            "torch": torch.__version__, "transformers": transformers.__version__, "identical": identical_all,
            "load_average": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
            "engine_options": {k: v for k, v in info.items()}, "engines": summary, "fastest_alone": alone,
            "overall": {e: total[e].as_dict() for e in engines}, "prompts": rows,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
        print(f"wrote {args.json}")
    return 0 if identical_all else 1


if __name__ == "__main__":
    sys.exit(main())
