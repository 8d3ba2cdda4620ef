"""Forward costs of llama.cpp, timed by its own ``llama-bench`` (built with the server): a forward of ``k`` tokens on
a KV cache of ``context`` tokens is llama-bench's prompt test ``-p k -d context`` (``avg_ns``, over ``-r`` runs after
its warm-up run; ``tools/llama-bench/llama-bench.cpp``, ``test_prompt`` after the depth's prefill). ``forward_table``
times every point one model needs in one run of llama-bench per depth; ``runners.replay.calibrate_pair`` turns the
table into a latency file, so the replay lab ranks γ policies under llama.cpp's costs as well as ours.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

from runners.engine.llamacpp.binary import Build


def forward_table(build: Build, model: str | Path, points: Iterable[tuple[int, int]], threads: int = 2,
                  repeats: int = 5) -> dict[tuple[int, int], float]:
    """``{(k, context): ms}`` for every point, from llama-bench's JSON (one run per context)."""
    by_context: dict[int, set[int]] = {}
    for k, context in points:
        by_context.setdefault(int(context), set()).add(int(k))
    bench = build.bin / "llama-bench"
    out: dict[tuple[int, int], float] = {}
    for context, ks in sorted(by_context.items()):
        cmd = [str(bench), "-m", str(model), "-p", ",".join(map(str, sorted(ks))), "-n", "0", "-d", str(context),
               "-r", str(int(repeats)), "-t", str(int(threads)), "-o", "json"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"llama-bench failed ({done.returncode}): {done.stderr[-1500:]}")
        for row in json.loads(done.stdout):
            out[(int(row["n_prompt"]), int(row["n_depth"]))] = float(row["avg_ns"]) / 1e6
    missing = [p for p in ((k, c) for c, ks in by_context.items() for k in ks) if p not in out]
    if missing:
        raise RuntimeError(f"llama-bench gave no time for {missing[:3]}")
    return out
