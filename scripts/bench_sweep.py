#!/usr/bin/env python
"""How much of a sweep is decoding, under a given launcher: model loads per sweep (against the
distinct model weights it names), AR reference decodes per sweep (against the distinct prompt
turns), and sweep wall time against the sum of its jobs' decode times (a script, not a test).

    python scripts/bench_sweep.py                                  # embedded default pair, 2x2 grid, basic launcher
    python scripts/bench_sweep.py --launcher local                 # submitit's local executor (a process per job)
    python scripts/bench_sweep.py --launcher ray -- hydra.launcher.ray.init.num_cpus=2 threads=1
    python scripts/bench_sweep.py -- method=ar,specdecode,gammatune gamma=1,4 task.n_prompts=3

Everything after ``--`` is passed to ``run.py -m``. Runs in a fresh results folder (``--results-dir``
to choose it). AR decodes are read from the records' ``ar_source`` (``runners.jobs.ar_cache``):
``self`` = an AR job's own decoding, ``decoded`` = a job decoded the reference, ``cache`` = a job
read it from the sweep's on-disk cache instead. Without that cache every job with
``verify_lossless`` decodes each of its prompt turns' reference once more (in another process than
the basic launcher's), which is the "without the cache" count.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specbench.config.pair import loads_model  # noqa: E402 - after the repository is on the path
from specbench.drafter_kinds import DEFAULT_KIND  # noqa: E402

DEFAULT = ["method=specdecode,gammatune", "gamma=2,4", "task.n_prompts=2", "max_new_tokens=32"]
LAUNCHERS = {"basic": [], "local": ["hydra/launcher=local"], "ray": ["hydra/launcher=ray"]}


def distinct_weights(summaries: list[dict]) -> set[tuple]:
    """Model weights the sweep's jobs name (a draft that is a transform of its target shares them)."""
    out = set()
    for s in summaries:
        config = s.get("config") or {}
        pair = config.get("pair") or {}
        ar_only = ((config.get("method") or {}).get("runner")) == "ar"
        for side in ("target",) if ar_only else ("target", "draft"):
            node = pair.get(side) or {}
            if node.get("path") and (side == "target" or loads_model(node.get("kind", DEFAULT_KIND))):
                out.add(tuple(node.get(k) for k in ("path", "gguf_file", "dtype", "quant", "device", "revision")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="run.py overrides (default: %(default)s)", default=DEFAULT)
    ap.add_argument("--launcher", choices=sorted(LAUNCHERS), default="basic", help="Hydra launcher (default: basic)")
    ap.add_argument("--results-dir", default=None)
    args = ap.parse_args()
    out = Path(args.results_dir or tempfile.mkdtemp(prefix="specbench-sweep-"))
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", *LAUNCHERS[args.launcher], *args.overrides, f"results_dir={out}"]
    print("running:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT)
    wall = time.perf_counter() - t0
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]
    records = [json.loads(line) for p in sorted(out.glob("*/records.jsonl")) for line in p.read_text().splitlines()]
    decode = sum(r["wall_ms"] for r in records) / 1000.0
    # AR references: decoded once per (target, prompt turn) across the sweep, the other jobs read them
    sources = Counter(r.get("ar_source") for r in records if r.get("ar_source"))
    decoded = [r for r in records if r.get("ar_source") == "decoded"]
    reference = sum(r["ar_wall_ms"] for r in decoded) / 1000.0
    verified = sum(n for src, n in sources.items() if src in ("decoded", "cache"))
    turns = {(r["pair"], r["prompt_id"], r["turn"]) for r in records if r.get("ar_source")}
    # model loads: per process (a multirun's basic launcher is one process; submitit and Ray run several)
    per_process: dict[str, int] = {}
    for s in summaries:
        cache = s.get("model_cache", {})
        key = cache.get("process", s.get("provenance", {}).get("time_utc"))
        per_process[key] = max(per_process.get(key, 0), cache.get("loads", 0))
    loads = sum(per_process.values())
    distinct = distinct_weights(summaries)
    load_s = sum(s.get("load_s") or 0.0 for s in summaries)
    shared = sum(1 for r in records if (r.get("device_jobs") or 1) > 1)
    print(f"\nlauncher             {args.launcher}")
    print(f"jobs                 {len(summaries)} ({sum(s['status'] == 'complete' for s in summaries)} complete)")
    print(f"model loads          {loads} from disk in {len(per_process)} process(es), {len(distinct)} distinct model "
          f"weights ({loads / max(1, len(distinct)):.1f} per distinct model; a job-by-job harness: {len(summaries)} "
          f"jobs x 2 models = {len(summaries) * 2}; a draft that is a transform of the target is derived in memory)")
    print(f"AR decodes           {sources.get('decoded', 0)} references decoded for the sweep, {sources.get('cache', 0)} "
          f"read from its cache, {sources.get('self', 0)} AR jobs' own decodings, for {len(turns)} distinct prompt "
          f"turns x pairs (without the cache: {verified} reference decodes)")
    print(f"job set-up time      {load_s:.1f} s in all (loads + transforms)")
    print(f"sweep wall time      {wall:.1f} s (process start, imports and warm-ups included)")
    print(f"decode time (timed)  {decode:.1f} s = {decode / wall:.2f} of the sweep's wall time")
    print(f"AR reference decode  {reference:.1f} s (verify_lossless; once per prompt turn for the whole sweep)")
    print(f"decode + reference   {(decode + reference) / wall:.2f} of the sweep's wall time")
    if shared:
        print(f"device sharing       {shared} of {len(records)} records were decoded beside other jobs on the same "
              "device (device_jobs > 1): their timings are not comparable with a sequential sweep")
    print(f"results              {out}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
