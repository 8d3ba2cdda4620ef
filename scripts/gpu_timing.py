#!/usr/bin/env python
"""CUDA events against ``perf_counter`` on the same runs (issue 32, step 3).

    python scripts/gpu_timing.py                      # tiny seeded models (12 x 512 target, fp16) on CUDA
    python scripts/gpu_timing.py pair=gemma3-270m_gemma3-270m-int8 ...   # any job's overrides

Two checks, each on the same generations:

* **whole run**: the records' ``wall_ms`` (CUDA events, ``specbench.timing.Timer``, one synchronize at
  read time) against ``perf_counter`` around ``generate`` with ``torch.cuda.synchronize()`` before and
  after;
* **per mark**: with ``specbench.timing.SyncedTimer`` (a synchronize and a ``perf_counter`` reading at
  every mark), TTFT, TPOT and tokens/s as the records compute them, from the events and from the host
  clock.

Prints one line per prompt and the median event / wall-clock ratio of each figure; they should
agree within a few per cent. ``--device cpu`` runs the same code path on the CPU (both clocks are
then ``perf_counter``; a dry run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPTS = ["Write a short story about a robot learning to paint.",
           "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"",
           "Summarise the causes of the French Revolution in three sentences.",
           "Translate into French: the cat sat on the mat while the dog slept."]


def tpot(t: dict[str, float], n: int) -> float:
    return (t["end"] - t["first"]) / max(n - 1, 1)


def build(args: argparse.Namespace, tmp: Path):
    """(runner, tokenize, label): a job's runner from overrides, or a tiny seeded pair."""
    if args.overrides:
        from omegaconf import OmegaConf

        from runners.jobs.build import Job, prepare
        from specbench.config import compose

        cfg = OmegaConf.to_container(compose(["warmup=0", *args.overrides]), resolve=True)
        job = Job(prepare(cfg))
        return job.loop, (lambda s: job.tokenizer(s).input_ids), " ".join(args.overrides)
    import torch
    from gpu_smoke import save_model, tokenizer
    from transformers import AutoModelForCausalLM

    from methods.base import FixedGamma
    from runners.drafters.model import ModelDrafter
    from runners.engine.factory import build_runner

    tok = tokenizer("bpe")
    target = AutoModelForCausalLM.from_pretrained(save_model(tmp / "t", tok, 4, hidden=512, layers=12),
                                                  dtype=torch.float16).to(args.device).eval()
    draft = AutoModelForCausalLM.from_pretrained(save_model(tmp / "d", tok, 5, hidden=512, layers=2),
                                                 dtype=torch.float16).to(args.device).eval()
    runner = build_runner("speculative", target, [], drafter=ModelDrafter(draft, []), policy=FixedGamma(4))
    return runner, (lambda s: tok(s).input_ids), f"tiny seeded 12x512 target, 2x512 draft, fp16, gamma 4 on {args.device}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="job overrides (pair=..., method=..., ...); none: tiny models")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    import runners.engine.speculative as speculative
    from specbench.timing import SyncedTimer, Timer

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_timing: no CUDA GPU here; nothing was run", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    with tempfile.TemporaryDirectory(prefix="specbench-timing-") as tmp:
        runner, tokenize, label = build(args, Path(tmp))
        print(f"gpu_timing: {label}; {torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}", flush=True)
        ids = [tokenize(s) for s in PROMPTS]
        runner.generate(ids[0], 8)  # warm-up
        whole, ttft, tp, rate = [], [], [], []
        made: list[SyncedTimer] = []

        def synced(device):
            made.append(SyncedTimer(device))
            return made[-1]

        for r in range(args.repeats):
            for i, prompt in enumerate(ids):
                speculative.Timer = Timer  # plain: events, one synchronize
                sync()
                t0 = time.perf_counter()
                gen = runner.generate(prompt, args.tokens)
                sync()
                wall = (time.perf_counter() - t0) * 1000.0
                whole.append(gen.wall_ms / wall)
                speculative.Timer = synced  # every mark on both clocks
                gen2 = runner.generate(prompt, args.tokens)
                speculative.Timer = Timer
                ev, host = made[-1].read(), made[-1].wall_read()
                n = len(gen2.tokens)
                ttft.append(ev["first"] / host["first"])
                tp.append(tpot(ev, n) / tpot(host, n))
                rate.append((n / host["end"]) / (n / ev["end"]))
                print(f"  prompt {i} repeat {r}: wall events {gen.wall_ms:8.2f} ms, perf_counter {wall:8.2f} ms; "
                      f"synced: TTFT {ev['first']:7.2f} / {host['first']:7.2f} ms, TPOT {tpot(ev, n):6.3f} / "
                      f"{tpot(host, n):6.3f} ms, {n} tokens", flush=True)
    med = statistics.median
    print(f"events / perf_counter (median of {len(whole)}, [min, max]): whole run {med(whole):.3f} "
          f"[{min(whole):.3f}, {max(whole):.3f}]; TTFT {med(ttft):.3f} [{min(ttft):.3f}, {max(ttft):.3f}]; "
          f"TPOT {med(tp):.3f} [{min(tp):.3f}, {max(tp):.3f}]; tokens/s (host / events) {med(rate):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
