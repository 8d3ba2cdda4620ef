#!/usr/bin/env python
"""The batch-1 speed of two checkouts, side by side: ``scripts/bench_vs_hf.py`` run in each, alternately.

    .venv/bin/python scripts/bench_before_after.py --before /tmp/before --after . --pairs 3
    .venv/bin/python scripts/bench_before_after.py --before /tmp/before --after . -- --gamma 4 --n-prompts 5

A change that must not move the loop's speed (issue 42: the round's rules written once, one runner contract) is
checked by timing the code before it and after it on the same host, interleaved: ``--pairs`` pairs of runs, each
pair ``before, after`` or ``after, before`` in alternation (A B B A ...), every run one process of
``bench_vs_hf.py --json`` in its checkout (its own warm-ups, the same models, prompts and arguments; the
arguments after ``--`` are passed on). Each run measures every engine of ``bench_vs_hf.py`` (``ours``,
``plain``, ``hf``, ``ar``) back to back on every prompt, so the figure that matters here is within a run:
``ours ÷ ar`` and ``plain ÷ ar`` (our loop over the target alone, both timed in the same minutes). Printed per
engine: pooled tokens/s of every run, after ÷ before of the medians, and of each pair (its min and max: the
spread); and the same for the within-run ratios. A difference inside the spread of the pairs is no difference.
Exit status 1 when a run fails or any run's outputs differ from the target alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ENGINES = ("ours", "plain", "hf", "ar")


def run_bench(checkout: Path, python: str, args: Sequence[str], out: Path) -> dict:
    """One ``bench_vs_hf.py --json`` run in ``checkout`` (its own code first on the path); its JSON."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [python, str(checkout / "scripts" / "bench_vs_hf.py"), "--json", str(out), *args]
    proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not out.exists():
        raise RuntimeError(f"bench_vs_hf.py failed in {checkout} (exit {proc.returncode}): "
                           f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no output'}")
    return json.loads(out.read_text())


def figures(result: dict) -> dict[str, float]:
    """Pooled tokens/s per engine and the within-run ratios to the target alone."""
    engines = result["engines"]
    out = {e: float(engines[e]["tokens_per_s"]) for e in ENGINES if e in engines}
    for e in ("ours", "plain", "hf"):
        if e in out and "ar" in out:
            out[f"{e}/ar"] = out[e] / out["ar"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if "--" in argv:
        passed = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="checkout of the code before the change")
    ap.add_argument("--after", default=".", help="checkout of the code after it (default: this one)")
    ap.add_argument("--pairs", type=int, default=3, help="pairs of runs, alternating their order (default 3)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter (its environment) both run under")
    ap.add_argument("--json", default=None, help="also write every run's figures to this JSON file")
    ap.add_argument("--keep", default=None, help="keep every run's own bench_vs_hf.py JSON in this folder "
                    "(<side><pair>.json: its engine options, probed tables and per-prompt figures)")
    args = ap.parse_args(argv)
    sides = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    for name, path in sides.items():
        if not (path / "scripts" / "bench_vs_hf.py").exists():
            ap.error(f"--{name} {path}: no scripts/bench_vs_hf.py there")
    if args.pairs < 1:
        ap.error("--pairs must be >= 1")
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    identical = True
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(args.pairs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for side in order:
                result = run_bench(sides[side], args.python, passed, folder / f"{side}{i}.json")
                identical &= bool(result.get("identical"))
                runs[side].append(figures(result))
                shown = ", ".join(f"{k} {v:.3f}" for k, v in runs[side][-1].items())
                print(f"pair {i + 1}, {side:<6}: {shown}", flush=True)
    print()
    print(f"{'figure':<10}{'before (median)':>17}{'after (median)':>16}{'after/before':>14}{'pairs min':>11}"
          f"{'pairs max':>11}")
    for key in runs["before"][0]:
        b = [r[key] for r in runs["before"]]
        a = [r[key] for r in runs["after"]]
        per_pair = [x / y for x, y in zip(a, b)]
        print(f"{key:<10}{statistics.median(b):>17.3f}{statistics.median(a):>16.3f}"
              f"{statistics.median(a) / statistics.median(b):>14.3f}{min(per_pair):>11.3f}{max(per_pair):>11.3f}")
    print(f"\noutputs identical to the target alone in every run: {'yes' if identical else 'NO'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"sides": {k: str(v) for k, v in sides.items()}, "passed": passed,
                                               "runs": runs, "identical": identical}, indent=2))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
