#!/usr/bin/env python
"""What interleaving costs: the same jobs decoded one after another (``run_job``, the basic launcher's
path) and interleaved (``runners.jobs.interleave.InterleavedSweep``), alternating S I S I ... in one
process, so the host's drift reaches both alike (a script, not a test).

    PYTHONPATH=. python scripts/bench_interleave.py                       # default pair, 3 jobs, 4 prompts
    PYTHONPATH=. python scripts/bench_interleave.py --repeats 4 -- gamma=4 task.n_prompts=6

Per block it sums the jobs' decode time (the records' ``wall_ms``: what every figure divides by) and
the block's wall time (with warm-ups, probes and, interleaved, the paired AR decodes), then prints,
for each adjacent S/I pair, interleaved ÷ sequential decode time; the median and the spread of those
ratios is the overhead, and a median inside the spread is no difference. It also prints the model
cache's loads against the distinct weights (interleaving must load each model once) and checks that
both ways decode the same tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

JOBS = [["method=specdecode", "gamma=2"], ["method=specdecode", "gamma=4"], ["method=gammatune", "gamma=4"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="S/I block pairs (default 3)")
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("overrides", nargs="*", help="after --: overrides for every job (pair=..., threads=2 ...)")
    args = p.parse_args(argv)

    from omegaconf import OmegaConf

    from runners.jobs.interleave import InterleavedSweep
    from runners.jobs.job import run_job
    from specbench.config import compose, register_resolvers
    from specbench.models.cache import MODEL_CACHE
    from specbench.record_io import read_records

    register_resolvers()
    common = [f"task.n_prompts={args.n_prompts}", f"max_new_tokens={args.max_new_tokens}", "overwrite=true",
              *args.overrides]

    def jobs(folder: Path) -> list[tuple[dict, Path]]:
        out = []
        for cell in JOBS:
            cfg = OmegaConf.to_container(compose([*cell, *common, f"results_dir={folder}"]), resolve=True)
            out.append((cfg, folder / ",".join(cell)))
        return out

    def decode_ms(folder: Path) -> tuple[float, dict[str, list]]:
        total, tokens = 0.0, {}
        for _, job_dir in jobs(folder):
            records = read_records(job_dir / "records.jsonl")
            total += sum(r["wall_ms"] for r in records)
            tokens[job_dir.name] = [r["output_ids"] for r in records]
        return total, tokens

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_interleave_") as tmp:
        for rep in range(args.repeats):
            for mode in ("sequential", "interleaved"):
                folder = Path(tmp) / f"{mode}{rep}"
                t0 = time.perf_counter()
                if mode == "sequential":
                    for cfg, job_dir in jobs(folder):
                        run_job(cfg, job_dir, progress=False)
                else:
                    InterleavedSweep(jobs(folder), folder, seed=rep, progress=False).run()
                wall = (time.perf_counter() - t0) * 1000.0
                ms, tokens = decode_ms(folder)
                rows.append({"rep": rep, "mode": mode, "decode_ms": ms, "wall_ms": wall, "tokens": tokens})
                print(f"  block {rep} {mode:<11} decode {ms / 1000:7.2f} s   wall {wall / 1000:7.2f} s", flush=True)
    ratios, wall_ratios = [], []
    for rep in range(args.repeats):
        s, i = rows[2 * rep], rows[2 * rep + 1]
        ratios.append(i["decode_ms"] / s["decode_ms"])
        wall_ratios.append(i["wall_ms"] / s["wall_ms"])
    same = all(r["tokens"] == rows[0]["tokens"] for r in rows)
    stats = MODEL_CACHE.stats()
    print()
    print(f"interleaved ÷ sequential decode time, per S/I pair: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"  median {statistics.median(ratios):.3f}, spread {min(ratios):.3f}-{max(ratios):.3f} "
          f"({args.repeats} pairs, {len(JOBS)} jobs x {args.n_prompts} prompts x {args.max_new_tokens} tokens)")
    print(f"interleaved ÷ sequential block wall time (warm-ups, probes, paired AR decodes): "
          f"median {statistics.median(wall_ratios):.3f}, spread {min(wall_ratios):.3f}-{max(wall_ratios):.3f}")
    print(f"model loads: {stats['loads']} for {len(stats['load_counts'])} distinct weights "
          f"({json.dumps(stats['load_counts'])}); same tokens both ways: {same}")
    return 0 if same and stats["loads"] == len(stats["load_counts"]) else 1


if __name__ == "__main__":
    sys.exit(main())
