#!/usr/bin/env python
"""How much of a sweep is decoding: model loads per sweep (against the distinct model weights it
names), AR reference decodes per sweep (against the distinct prompt turns), and sweep wall time
against the sum of its jobs' decode times (a script, not a test).

    python scripts/bench_sweep.py                      # embedded default pair, 2x2 grid
    python scripts/bench_sweep.py -- method=ar,specdecode,gammatune gamma=1,4 task.n_prompts=3

Everything after ``--`` is passed to ``run.py -m``. Runs in a fresh results folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specbench.paths import REPO_ROOT as ROOT

DEFAULT = ["method=specdecode,gammatune", "gamma=2,4", "task.n_prompts=2", "max_new_tokens=32"]


def distinct_weights(summaries: list[dict]) -> set[tuple]:
    """Model weights the sweep's jobs name (a draft that is a transform of its target shares them)."""
    out = set()
    for s in summaries:
        config = s.get("config") or {}
        pair = config.get("pair") or {}
        ar_only = ((config.get("method") or {}).get("runner")) == "ar"
        for side in ("target",) if ar_only else ("target", "draft"):
            node = pair.get(side) or {}
            if node.get("path") and node.get("kind", "model") in ("model", "hybrid"):
                out.add(tuple(node.get(k) for k in ("path", "gguf_file", "dtype", "quant", "device", "revision")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="run.py overrides (default: %(default)s)", default=DEFAULT)
    ap.add_argument("--results-dir", default=None)
    args = ap.parse_args()
    out = Path(args.results_dir or tempfile.mkdtemp(prefix="specbench-sweep-"))
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", *args.overrides, f"results_dir={out}"]
    print("running:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT)
    wall = time.perf_counter() - t0
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]
    records = [json.loads(line) for p in sorted(out.glob("*/records.jsonl")) for line in p.read_text().splitlines()]
    decode = sum(r["wall_ms"] for r in records) / 1000.0
    # one AR reference per (pair, prompt turn), cached across jobs: count each once
    refs = {(r["pair"], r["prompt_id"], r["turn"]): r["ar_wall_ms"] for r in records if r.get("ar_wall_ms")}
    reference = sum(refs.values()) / 1000.0
    loads = max((s["model_cache"]["loads"] for s in summaries), default=0)
    distinct = distinct_weights(summaries)
    ar_decodes = max(((s.get("ar_reference") or {}).get("decodes", 0) for s in summaries), default=0)
    turns = {(r["pair"], r["prompt_id"], r["turn"]) for r in records}
    load_s = sum(s.get("load_s") or 0.0 for s in summaries)
    print(f"\njobs                 {len(summaries)} ({sum(s['status'] == 'complete' for s in summaries)} complete)")
    print(f"model loads          {loads} from disk for the whole sweep, {len(distinct)} distinct model weights "
          f"({loads / max(1, len(distinct)):.1f} per distinct model; a job-by-job harness: {len(summaries)} jobs x 2 "
          f"models = {len(summaries) * 2}; a draft that is a transform of the target is derived in memory)")
    print(f"AR reference decodes {ar_decodes} for {len(turns)} distinct prompt turns x pairs "
          f"(verify_lossless; each decoded once per process and shared by every job)")
    print(f"job set-up time      {load_s:.1f} s in all (loads + transforms, first job pays them)")
    print(f"sweep wall time      {wall:.1f} s (process start, imports and warm-ups included)")
    print(f"decode time (timed)  {decode:.1f} s = {decode / wall:.2f} of the sweep's wall time")
    print(f"AR reference decode  {reference:.1f} s (verify_lossless; once per prompt turn, shared by all jobs)")
    print(f"decode + reference   {(decode + reference) / wall:.2f} of the sweep's wall time")
    print(f"results              {out}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
