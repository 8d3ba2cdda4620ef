#!/usr/bin/env python
"""The offline pairs on a GPU, in fp32, fp16 and bf16 (issue 32, step 2).

    python scripts/gpu_pairs.py [--out DIR] [--tokens 64]

For each of the three offline pairs on the GPU (``device=cuda``: Gemma-3-270M with its own copy in bf16,
with prompt lookup, and with SmolLM2-135M through SLEM) and each target dtype, one greedy job through the real
job path (``runners.jobs.job.run_job``) on 4 Spec-Bench turns with ``verify_lossless``: every output is
compared token for token with the target's own greedy decoding in the same dtype; the line reports how
many turns were equal and, where not, the first divergence (half precision can round a k-token
verification differently from k one-token steps, ``docs/pages/records.md``). Then one job per pair at
T = 1 (speculative sampling / TLI on CUDA; its exactness is the tests', ``SPECBENCH_TEST_DEVICE=cuda``).
Spec-Bench's questions: ``$SPECBENCH_QUESTIONS`` (default ``../shared/data/spec_bench/question.jsonl``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PAIRS = {"gemma3-270m_gemma3-270m-bf16": "method=specdecode",
         "gemma3-270m_prompt-lookup": "method=specdecode",
         "gemma3-270m_smollm2-135m": "method=specdecode hetero=auto"}
DEVICE = "device=cuda"  # the CPU pairs' files, moved to the GPU (specbench.config.pair.on_device)
DTYPES = ("float32", "bfloat16", "float16")


def jobs(tokens: int) -> list[tuple[str, list[str]]]:
    questions = os.environ.get("SPECBENCH_QUESTIONS", str(ROOT.parent / "shared/data/spec_bench/question.jsonl"))
    task = ["task=specbench", f"task.data_files={questions}", "task.categories=[coding,qa,math_reasoning]",
            "task.per_category=1", "task.prompt_format=vicuna_v1.1", f"max_new_tokens={tokens}", "gamma=5", "warmup=1"]
    out = []
    for pair, method in PAIRS.items():
        for dtype in DTYPES:
            cast = [f"pair.target.dtype={dtype}"] + ([f"pair.draft.dtype={dtype}"] if "smollm2" in pair else [])
            out.append((f"{pair} target {dtype} T=0", [f"pair={pair}", DEVICE, *method.split(), *cast, *task,
                                                      "temperature=0.0", "verify_lossless=true"]))
        out.append((f"{pair} target float32 T=1", [f"pair={pair}", DEVICE, *method.split(), *task, "temperature=1.0",
                                                  "top_k=50", "seed=0"]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/gpu_pairs")
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args(argv)
    import torch
    import transformers
    from omegaconf import OmegaConf

    from runners.jobs.job import run_job
    from specbench.config import compose
    from specbench.record_io import read_records

    if not torch.cuda.is_available():
        print("gpu_pairs: no CUDA GPU here; nothing was run", file=sys.stderr)
        return 2
    transformers.logging.set_verbosity_error()
    print(f"gpu_pairs on {torch.cuda.get_device_name()}: torch {torch.__version__}, transformers "
          f"{transformers.__version__}", flush=True)
    failures = 0
    for i, (label, overrides) in enumerate(jobs(args.tokens)):
        cfg = OmegaConf.to_container(compose(overrides), resolve=True)
        job_dir = Path(args.out) / f"job{i:02d}"
        t0 = time.perf_counter()
        try:
            summary = run_job(cfg, job_dir, progress=False)
            agg = summary["aggregates"]
            recs = read_records(job_dir / "records.jsonl")
            checked = [r for r in recs if r.get("lossless") is not None]
            div = [r.get("first_divergence") for r in checked if not r["lossless"]]
            speed = [r["speedup"] for r in recs if r.get("speedup")]
            line = (f"{label:62s} lossless {sum(r['lossless'] for r in checked)}/{len(checked)}"
                    f"{' first divergence at ' + str(div) if div else ''}; {agg['tokens_per_s']:6.1f} tok/s, "
                    f"speedup over AR {statistics.median(speed) if speed else float('nan'):.2f}x (median), "
                    f"acceptance {agg.get('acceptance_rate') or 0:.2f}, TTFT {agg.get('ttft_ms') or 0:.1f} ms, "
                    f"TPOT {agg.get('tpot_ms') or 0:.2f} ms ({time.perf_counter() - t0:.0f} s)")
            print(("ok   " if summary["status"] == "complete" else "FAIL ") + line, flush=True)
            failures += summary["status"] != "complete"
        except Exception as exc:  # one line per job, go on
            print(f"FAIL {label:62s} {type(exc).__name__}: {exc}", flush=True)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
