#!/usr/bin/env python
"""``F.linear(x, W)`` against ``torch.mm(W, xᵀ)ᵀ`` (``engine.fast_linear``'s ``TransposedLinear``) for a few rows
of ``x``, side by side (a script, not a test; the evidence behind ``runners.engine.fast_linear.BATCH_MAX_ROWS``).

    .venv/bin/python scripts/bench_linear_rows.py
    .venv/bin/python scripts/bench_linear_rows.py --rows 1 2 4 8 16 32 64 128 --repeats 7

The shapes are Gemma-3-270M's (the default target): its LM head (262,144 × 640) and its MLP's up and down
projections (2,048 × 640, 640 × 2,048), random fp32 weights (a kernel's path depends on the shapes, not the
values). For each repeat every (shape, rows, kernel) is timed once, in one sweep, the kernels alternating
(interleaved: a drifting host biases both alike); printed per shape and row count: the median ms of each
kernel over the repeats, ``F.linear ÷ mm`` (> 1: the transposed product is faster) with its min–max over
the repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

SHAPES = {"lm head 262144x640": (262144, 640), "mlp up 2048x640": (2048, 640), "mlp down 640x2048": (640, 2048)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    weights = {name: torch.randn(o, i) * 0.02 for name, (o, i) in SHAPES.items()}
    inputs = {(name, r): torch.randn(r, w.shape[1]) for name, w in weights.items() for r in args.rows}
    kernels = {"F.linear": lambda x, w: torch.nn.functional.linear(x, w), "mm": lambda x, w: torch.mm(w, x.t()).t()}
    samples: dict[tuple[str, int, str], list[float]] = {}
    with torch.inference_mode():
        for rep in range(args.repeats + 1):  # the first sweep warms up and is discarded
            for (name, r), x in inputs.items():
                w = weights[name]
                calls = 3 if w.shape[0] > 100_000 else 50
                order = list(kernels) if rep % 2 == 0 else list(reversed(kernels))
                for k in order:
                    t = time.perf_counter()
                    for _ in range(calls):
                        kernels[k](x, w)
                    if rep:
                        samples.setdefault((name, r, k), []).append((time.perf_counter() - t) / calls * 1e3)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.repeats} repeats (interleaved), "
          f"load average {os.getloadavg()[0]:.2f}")
    for name in weights:
        print(name)
        for r in args.rows:
            a, b = samples[(name, r, "F.linear")], samples[(name, r, "mm")]
            ratios = [x / y for x, y in zip(a, b)]
            print(f"  rows {r:4d}: F.linear {statistics.median(a):9.3f} ms   mm(W,xT) {statistics.median(b):9.3f} ms   "
                  f"F.linear / mm {statistics.median(ratios):5.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
