#!/usr/bin/env python
"""How noisy this host is on identical work, under each torch thread count, side by side in one run
(a script, not a test).

    .venv/bin/python scripts/bench_noise.py                       # threads 1 and 2, 6 repeats, 4 prompts
    .venv/bin/python scripts/bench_noise.py --threads 1 2 4 --repeats 8 -- pair=gemma3-270m_gemma3-270m-int8

The same job (default: SpecDecode at γ = 4 on the mini recipes' int8 pair with the plain loop, 4
embedded prompts, 32 new tokens, no lossless check) runs ``--repeats`` times under every thread count, the counts alternating in an
order that flips from repeat to repeat (1 2 / 2 1 / ...), so the host's drift reaches every count
alike. Printed per thread count and prompt turn: mean TTFT and decode time with their coefficient of
variation (std / mean) over the repeats, and over each whole job; the median CV is the noise one
timed prompt turn carries on this host at that thread count, the quantity the analysis's noise
floor turns into a resolution (``analysis.noise_floor``, "resolution": σ of log A/A ratios ≈ √2 · CV).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the mini recipes' conditions: their int8 pair, the plain loop (engine options off)
JOB = ["pair=gemma3-270m_gemma3-270m-int8", "method=specdecode", "gamma=4", "verify_lossless=false",
       "engine.fast_linear=false", "engine.verify_buckets=false", "engine.fused_prefill=false"]


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts (default 1 2)")
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("overrides", nargs="*", help="after --: overrides of the job (pair=..., gamma=...)")
    args = p.parse_args(argv)
    if args.repeats < 2:
        p.error("--repeats must be at least 2 (a spread needs two timings)")

    from omegaconf import OmegaConf

    from runners.jobs.job import run_job
    from specbench.config import compose, register_resolvers
    from specbench.record_io import read_records

    register_resolvers()
    timings: dict[int, list[list[tuple[float, float]]]] = {t: [] for t in args.threads}
    with tempfile.TemporaryDirectory(prefix="bench_noise_") as tmp:
        for rep in range(args.repeats):
            order = args.threads if rep % 2 == 0 else args.threads[::-1]
            for threads in order:
                folder = Path(tmp) / f"t{threads}_{rep}"
                cfg = OmegaConf.to_container(compose([
                    *JOB, f"task.n_prompts={args.n_prompts}", f"max_new_tokens={args.max_new_tokens}",
                    f"threads={threads}", "overwrite=true", f"results_dir={folder}", *args.overrides]), resolve=True)
                run_job(cfg, folder / "job", progress=False)
                records = read_records(folder / "job" / "records.jsonl")
                timings[threads].append([(r["ttft_ms"], r["wall_ms"]) for r in records])
                print(f"repeat {rep} threads={threads}: {sum(w for _, w in timings[threads][-1]) / 1000:.1f} s", flush=True)

    print()
    print(f"{'threads':>7} {'turn':>4} {'TTFT ms':>9} {'CV':>6} {'decode ms':>10} {'CV':>6} {'max/min':>8}")
    medians = {}
    for threads in args.threads:
        runs = timings[threads]
        cvs = []
        for i in range(min(len(r) for r in runs)):
            ttft = [r[i][0] for r in runs]
            wall = [r[i][1] for r in runs]
            cvs.append(cv(wall))
            print(f"{threads:>7} {i:>4} {statistics.mean(ttft):>9.1f} {cv(ttft):>6.3f} {statistics.mean(wall):>10.1f} "
                  f"{cv(wall):>6.3f} {max(wall) / min(wall):>8.3f}")
        jobs = [sum(w for _, w in r) for r in runs]
        medians[threads] = statistics.median(cvs)
        print(f"{threads:>7} {'job':>4} {'':>9} {'':>6} {statistics.mean(jobs):>10.1f} {cv(jobs):>6.3f} "
              f"{max(jobs) / min(jobs):>8.3f}")
    print()
    for threads, median in medians.items():
        print(f"threads={threads}: median per-turn CV of the decode time {median:.3f} over {args.repeats} repeats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
