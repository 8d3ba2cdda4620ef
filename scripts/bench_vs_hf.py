#!/usr/bin/env python
"""Throughput of our engine against transformers' assisted generation, side by side.

    .venv/bin/python scripts/bench_vs_hf.py                       # embedded pair and task, γ=5, 64 tokens
    .venv/bin/python scripts/bench_vs_hf.py --gamma 4 --repeats 3 --json results/bench_vs_hf.json
    .venv/bin/python scripts/bench_vs_hf.py --pair gemma3-270m_smollm2-135m   # conf/pair/NAME.yaml (same vocab only)

One process, one run, same models (loaded once through ``MODEL_CACHE``), same
prompts (the first turn of each prompt of the embedded task, formatted as a job
formats it), greedy, a fixed γ:

* ``ours``: ``SpeculativeRunner`` + ``ModelDrafter`` + ``FixedGamma(γ)`` (method=specdecode);
* ``hf``:   ``target.generate(assistant_model=draft)`` via ``HFAssistedRunner`` with
  schedule "constant", ``num_assistant_tokens=γ``, confidence threshold 0 (method=hf_native_specdecode);
* ``ar``:   the target alone (``AutoregressiveRunner``), the baseline of both speedups.

Each engine is warmed up first (untimed). Then, for every repeat and prompt, the three
run back to back in an order that rotates from one (prompt, repeat) to the next
(ours/hf/ar, hf/ar/ours, ar/ours/hf, ...), so slow drift of the machine (other jobs,
thermal) falls on every engine alike. Printed: per prompt and overall tokens/s, the
ratio ours/hf, each engine's speedup over AR, acceptance (accepted/drafted draft
tokens), TTFT, and whether the outputs are identical token for token.

Read the numbers knowing that (runners/engine/hf_assisted.py): transformers has no separate
prefill, so its rounds are shifted by one token against ours (acceptance differs a
little for that reason alone) and its TTFT includes the first draft block and its
verification; ours is the target's prefill. Timings are only meaningful on a quiet
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

ENGINES = ("ours", "hf", "ar")


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
        self.drafted += sum(gen.drafted_trace)
        self.accepted += sum(gen.accepted_trace)
        self.rounds += len(gen.accepted_trace)

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
    p.add_argument("--pair", default=None, help="conf/pair/NAME.yaml (default: the embedded Gemma-3-270M fp32 / int8-dynamic pair)")
    p.add_argument("--gamma", type=int, default=5, help="fixed speculation length (default 5)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--n-prompts", type=int, default=None, help="first N prompts of the embedded task (default: all)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of every prompt and engine (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up generations per engine (default 1)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--cache-dir", default=None, help="converted GGUF models (default: ~/.cache/specbench)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    if args.gamma < 1 or args.max_new_tokens < 1 or args.repeats < 1 or args.threads < 1:
        p.error("--gamma, --max-new-tokens, --repeats and --threads must be >= 1")
    return args


def load_pair(name: str | None, cache_dir: str | None) -> tuple[str, Any, Any, Any]:
    """(label, target, draft, tokenizer) through MODEL_CACHE."""
    from specbench.config import JobConfig, compose
    from specbench.models import MODEL_CACHE
    from specbench.registry import ConfigError

    pair = JobConfig.from_mapping(compose([f"pair={name}"] if name else [])).pair
    if pair.draft is None or pair.draft.model is None:
        raise ConfigError(f"pair {pair.name!r} has no draft model (transformers' peer needs one)")
    if not pair.same_tokenizer:
        raise ConfigError(f"pair {pair.name!r}: the draft has another tokenizer; this benchmark needs one vocabulary")
    label = pair.name
    target_spec, draft_spec = pair.target, pair.draft.model
    target = MODEL_CACHE.model(target_spec, cache_dir)
    draft = MODEL_CACHE.model(draft_spec, cache_dir)
    tokenizer = MODEL_CACHE.tokenizer(target_spec, cache_dir)
    return label, target, draft, tokenizer


def load_prompts(tokenizer: Any, n: int | None) -> list[tuple[str, list[int]]]:
    """The first turn of each embedded prompt, formatted and encoded as ``runners.jobs.job`` does."""
    from specbench.tasks import add_special_tokens, format_turn, load_task

    prompts = load_task({"name": "embedded", "loader": "embedded"})
    out = []
    for prompt in prompts[:n] if n else prompts:
        text, fmt = format_turn(tokenizer, [], prompt.turns[0], "auto")
        out.append((prompt.prompt_id, tokenizer(text, add_special_tokens=add_special_tokens(fmt)).input_ids))
    return out


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers

    from methods.base import FixedGamma
    from runners.drafters.model import ModelDrafter
    from runners.engine.hf_assisted import HFAssistedRunner
    from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
    from specbench.models import eos_ids

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # transformers' internal per-round notices

    t0 = time.perf_counter()
    label, target, draft, tokenizer = load_pair(args.pair, args.cache_dir)
    load_s = time.perf_counter() - t0
    eos = eos_ids(target, tokenizer)
    prompts = load_prompts(tokenizer, args.n_prompts)
    gamma, n_new = args.gamma, args.max_new_tokens
    runners = {
        "ours": SpeculativeRunner(target, ModelDrafter(draft, eos), FixedGamma(gamma), eos, 0.0),
        "hf": HFAssistedRunner(target, draft, FixedGamma(gamma), eos, 0.0),
        "ar": AutoregressiveRunner(target, eos, 0.0),
    }
    print(f"pair: {label}   (loaded in {load_s:.1f} s)")
    print(
        f"gamma={gamma} max_new_tokens={n_new} prompts={len(prompts)} repeats={args.repeats} warmup={args.warmup} "
        f"threads={args.threads} greedy | torch {torch.__version__} transformers {transformers.__version__} "
        f"python {platform.python_version()} | eos={eos}"
    )

    for _ in range(args.warmup):  # untimed: allocations, kernels, lazy imports
        for runner in runners.values():
            runner.generate(prompts[0][1], min(16, n_new))

    per_prompt: dict[str, dict[str, Tally]] = {pid: {e: Tally() for e in ENGINES} for pid, _ in prompts}
    outputs: dict[str, dict[str, list[list[int]]]] = {pid: {e: [] for e in ENGINES} for pid, _ in prompts}
    k = 0
    for _ in range(args.repeats):
        for pid, ids in prompts:
            order = ENGINES[k % 3 :] + ENGINES[: k % 3]  # rotate who goes first
            k += 1
            for engine in order:
                gen = runners[engine].generate(ids, n_new)
                per_prompt[pid][engine].add(gen)
                outputs[pid][engine].append(gen.tokens)

    header = (
        f"{'prompt':<22}{'tok':>5}{'ours t/s':>10}{'hf t/s':>9}{'ar t/s':>9}{'ours/hf':>9}"
        f"{'ours/ar':>9}{'hf/ar':>8}{'acc ours':>10}{'acc hf':>8}  identical"
    )
    print()
    print(header)
    print("-" * len(header))
    total = {e: Tally() for e in ENGINES}
    rows = []
    identical_all = True
    for pid, _ in prompts:
        t = per_prompt[pid]
        for e in ENGINES:
            for name in ("tokens", "seconds", "drafted", "accepted", "rounds"):
                setattr(total[e], name, getattr(total[e], name) + getattr(t[e], name))
            total[e].ttft_ms.extend(t[e].ttft_ms)
        outs = outputs[pid]
        same_hf = outs["ours"] == outs["hf"]
        same_ar = outs["ours"] == outs["ar"]
        identical_all &= same_hf and same_ar
        ident = "yes" if same_hf and same_ar else f"ours=hf:{same_hf} ours=ar:{same_ar}"
        print(
            f"{pid[:21]:<22}{len(outs['ours'][0]):>5}{t['ours'].tps:>10.1f}{t['hf'].tps:>9.1f}{t['ar'].tps:>9.1f}"
            f"{t['ours'].tps / t['hf'].tps:>9.3f}{t['ours'].tps / t['ar'].tps:>9.3f}{t['hf'].tps / t['ar'].tps:>8.3f}"
            f"{fmt(t['ours'].acceptance, '.3f'):>10}{fmt(t['hf'].acceptance, '.3f'):>8}  {ident}"
        )
        rows.append({"prompt_id": pid, "identical_ours_hf": same_hf, "identical_ours_ar": same_ar,
                     **{e: t[e].as_dict() for e in ENGINES}})
    print("-" * len(header))
    ratios = [r["ours"]["tokens_per_s"] / r["hf"]["tokens_per_s"] for r in rows]
    print(
        f"{'overall':<22}{total['ours'].tokens // args.repeats:>5}{total['ours'].tps:>10.1f}{total['hf'].tps:>9.1f}"
        f"{total['ar'].tps:>9.1f}{total['ours'].tps / total['hf'].tps:>9.3f}{total['ours'].tps / total['ar'].tps:>9.3f}"
        f"{total['hf'].tps / total['ar'].tps:>8.3f}{fmt(total['ours'].acceptance, '.3f'):>10}"
        f"{fmt(total['hf'].acceptance, '.3f'):>8}  {'yes' if identical_all else 'NO'}"
    )
    print()
    print(f"throughput ours/hf: {total['ours'].tps / total['hf'].tps:.3f} (total tokens / total time); "
          f"median of per-prompt ratios {statistics.median(ratios):.3f}")
    print(f"speedup over AR: ours {total['ours'].tps / total['ar'].tps:.3f}x, hf {total['hf'].tps / total['ar'].tps:.3f}x")
    for e in ("ours", "hf"):
        tt = total[e]
        print(f"{e:>4}: acceptance {fmt(tt.acceptance, '.3f')} ({tt.accepted}/{tt.drafted}), "
              f"{tt.rounds} rounds, accepted/round {fmt(tt.accepted / tt.rounds if tt.rounds else None, '.2f')}, "
              f"median TTFT {statistics.median(tt.ttft_ms):.1f} ms")
    print(f"  ar: median TTFT {statistics.median(total['ar'].ttft_ms):.1f} ms")
    print(f"outputs identical token for token (ours = hf = ar, every prompt and repeat): {'yes' if identical_all else 'NO'}")
    print("note: hf has no separate prefill (its rounds are shifted by one token against ours; its TTFT includes "
          "the first draft block), see runners/engine/hf_assisted.py")

    if args.json:
        result = {
            "pair": label, "gamma": gamma, "max_new_tokens": n_new, "repeats": args.repeats, "warmup": args.warmup,
            "threads": args.threads, "torch": torch.__version__, "transformers": transformers.__version__,
            "identical": identical_all, "overall": {e: total[e].as_dict() for e in ENGINES},
            "ratio_ours_hf": total["ours"].tps / total["hf"].tps,
            "speedup_ours": total["ours"].tps / total["ar"].tps, "speedup_hf": total["hf"].tps / total["ar"].tps,
            "prompts": rows,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0 if identical_all else 1


if __name__ == "__main__":
    sys.exit(main())
