"""Real runs against their replay: are the replayed rounds the real ones, and how far is the predicted
throughput from the measured one? ``python -m runners.replay lab compare``, two ways:

    lab compare --real DIR --traces DIR --latency DIR --out DIR      # finished jobs of python run.py
    lab compare --live [--pair NAME] [--runs METHOD:GAMMA ...]       # a pair loaded here, real loop and replay

From job folders (this module): finds every job under ``--real`` (``summary.json`` + ``records.jsonl`` of
``python run.py``), replays the job's own method config at its initial γ on the traces of its pair × task ×
length (a batched job, whose records carry ``batch_size`` > 1: on its own batches, ``batched_row``), and writes
``real_vs_replay.csv`` / ``.md``: measured and replayed pooled tokens/s (over all rows) and their ratio,
acceptance rates, the share of prompt turns whose rounds are identical, the host's drift (the target alone,
measured ÷ predicted) and the cost table's error on the job's own rounds (verification and draft forwards);
with ``specdecode`` jobs, ``real_vs_best_fixed.csv`` / ``.md`` (each method's real tokens/s over the best
fixed γ measured for real). A job whose pair's latency file was timed on other torch threads, another device
or dtype, or (a batched job) other kernels than the job ran on is refused in one line naming both and the
calibrate command that fixes it (``summary_timed_on``, ``specbench.timed_on.check_timed_on``).

``--live`` (``runners.replay.compare_live``): traces a pair's first prompts, runs the real
``SpeculativeRunner`` like a job does for every ``METHOD:GAMMA``, replays the same, and prints whether the
rounds are equal and the measured against the predicted throughput (exit 1 when some run's rounds differ).
Timings are only meaningful on a quiet machine: run it when nothing else uses the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runners.replay.grid import MethodSpec
from runners.replay.replay import replay_job
from runners.replay.trace import find_trace_files, read_traces
from specbench.drafter_kinds import draft_cost
from specbench.markdown import to_markdown
from specbench.records import pooled_tokens_per_s
from specbench.rounds import Rounds, pooled_acceptance
from specbench.timed_on import TimedOn, check_timed_on


def _schedule(record: dict[str, Any]) -> list[tuple[int, int, int]] | None:
    """A record's ``(γ, drafted, accepted)`` per round; None when its traces do not make one (an old record
    without ``gamma_trace``): it then counts as not identical."""
    try:
        return Rounds.of(record).schedule
    except ValueError:
        return None


def add_compare_parser(sub: Any) -> argparse.ArgumentParser:
    c = sub.add_parser("compare", help="real runs against their replay (job folders, or --live on a pair)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--real", help="folder of finished jobs (python run.py)")
    c.add_argument("--traces", help="folder of the jobs' traces")
    c.add_argument("--latency", help="folder of <pair>.json (python -m runners.replay calibrate); --live: one json "
                                     "(default: a quick calibration)")
    c.add_argument("--out", help="output folder of the tables")
    live = c.add_argument_group("--live: the real loop and the replay side by side on a pair loaded here")
    live.add_argument("--live", action="store_true")
    live.add_argument("--pair", default="gemma3-270m_gemma3-270m-int8")
    live.add_argument("--task", default="embedded")
    live.add_argument("--n-prompts", type=int, default=2)
    live.add_argument("--max-new-tokens", type=int, default=32)
    live.add_argument("--gamma-max", type=int, default=32)
    live.add_argument("--trace-mode", choices=("sequential", "batched"), default="sequential")
    live.add_argument("--runs", nargs="+", default=["specdecode:2", "specdecode:5", "hf_heuristic:5", "gammatune_plus:5"],
                      help="METHOD:GAMMA (METHOD as for runners.replay grid, e.g. gammatune_plus:threshold=0.3:4)")
    live.add_argument("--threads", type=int, default=2)
    live.add_argument("--single-token-catchup", action="store_true",
                      help="diagnosis: the real runs' drafter feeds its catch-up tokens one per forward, as the trace "
                           "does (an int8-dynamic draft is then replayed exactly; see runners.replay.trace_build)")
    return c


def method_label(name: str, params: dict[str, Any]) -> str:
    """The lab's label of a job's method config (as in ``runners.replay.lab.LAB_METHODS``), read from the
    config: the carry-over variant ``:transient=false``, a cost-reading policy on costs learnt online
    ``latency=none`` or on its table corrected online ``adapt_costs=true``
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
    keys = ["pair", "task"] + (["batch_size"] if "batch_size" in df else [])  # per batch size: its own best
    best = (df[df["method"] == "specdecode"].groupby(keys)["real_tokens_per_s"].max()
            .rename("best_fixed_real_tokens_per_s"))
    if best.empty:
        return best.to_frame()
    per = (df.groupby(keys + ["method_config"])
           .agg(gammas=("gamma_init", lambda g: ",".join(map(str, sorted(g)))),
                real_tokens_per_s=("real_tokens_per_s", "mean"),
                real_over_replayed=("real_over_replayed", "mean"))
           .reset_index().merge(best.reset_index(), on=keys))
    per["x_best_fixed_real"] = per["real_tokens_per_s"] / per["best_fixed_real_tokens_per_s"]
    return per


def summary_timed_on(summary: Mapping[str, Any], config: Any, batched: bool) -> TimedOn:
    """What a finished job ran its forwards on, from its ``summary.json``: ``threads`` (the config's, else its
    provenance's ``torch_threads``: torch's own choice, recorded), the target's device type (unstated under a
    ``device_map``) and dtype, and for a batched job the kernels of its rows (``engine.fast_linear``; plain when
    the summary names none). Batch 1's kernels are not compared: the replay charges the plain forward, and the
    table's ``verify_real_over_predicted`` shows what the engine's options save."""
    provenance = summary.get("provenance") or {}
    ran = ((summary.get("engine") or {}).get("fast_linear") or False) if batched else None
    return TimedOn.of_job(config.threads or provenance.get("torch_threads"), config.pair.target, ran)


def compare_rows(real: str | Path, traces_dir: str | Path, latency_dir: str | Path) -> list[dict[str, Any]]:
    """One row per complete speculative job under ``real`` whose pair × task × length was traced; a job whose
    pair's latency file was timed on other threads, device, dtype or (batched) kernels than the job ran on is
    refused in one line (``specbench.timed_on.check_timed_on``, ``summary_timed_on``)."""
    from specbench.config import JobConfig
    from specbench.latency import LatencyModel
    from specbench.record_io import read_records
    from specbench.round_costs import predict_parts_ms

    traces_by_key: dict[tuple, list] = {}
    for path in find_trace_files(traces_dir):
        trs = read_traces(path)
        if trs:
            traces_by_key[(trs[0].pair, trs[0].task, trs[0].max_new_tokens)] = trs
    rows = []
    latencies: dict[str, LatencyModel] = {}  # one file read per pair
    for summary_path in sorted(Path(real).rglob("summary.json")):
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
        lat_path = Path(latency_dir) / f"{key[0]}.json"
        if key[0] not in latencies:
            latencies[key[0]] = LatencyModel.load(lat_path)
        latency = latencies[key[0]]
        batched = any(int(r.get("batch_size") or 1) > 1 for r in records)
        check_timed_on(latency, summary_timed_on(summary, config, batched), f"job {summary_path.parent.name}",
                       lat_path, key[0])
        spec = MethodSpec(method.name, str(method.policy), dict(method.params))
        ident = {"pair": key[0], "task": key[1], "method": method.name, "job": summary_path.parent.name,
                 "method_config": method_label(method.name, method.params), "gamma_init": config.gamma,
                 "prompts": len(records)}
        if batched:
            rows.append({**ident, **batched_row(records, traces, spec.build, config.gamma, latency,
                                                summary_path.parent.name)})
            continue
        reps = replay_job(chosen, spec.build(config.gamma), latency)
        same = sum(_schedule(r) == p.rounds.schedule for r, p in zip(records, reps))
        real_tps = pooled_tokens_per_s([r["new_tokens"] for r in records], [r["wall_ms"] for r in records])
        rep_wall = sum(p.wall_ms for p in reps)
        rep_tps = pooled_tokens_per_s([p.new_tokens for p in reps], [p.wall_ms for p in reps])
        ar = [r for r in records if r.get("ar_wall_ms")]
        # the cost table against the engine's own clock on the job's *real* rounds (no drift correction:
        # compare with ar_real_over_predicted): the target's verification forwards, the drafter's forwards
        parts = [predict_parts_ms(latency, r["prompt_tokens"], r["new_tokens"], r["drafted_trace"], r["accepted_trace"],
                                  draft_model=draft_cost(config.drafter) == "forward") for r in records]
        cost_ratios = {}
        for part in ("verify", "draft"):
            measured, predicted = sum(r.get(f"{part}_ms") or 0.0 for r in records), sum(q[f"{part}_ms"] for q in parts)
            cost_ratios[f"{part}_real_over_predicted"] = measured / predicted if measured and predicted else None
        rows.append({
            **ident, "batch_size": 1, "gamma_mode": None, "batches": len(records), "batch_wall_real_over_replayed": None,
            "prefill_real_over_replayed": None, "rounds_real_over_replayed": None,
            "real_tokens_per_s": real_tps, "replayed_tokens_per_s": rep_tps, "real_over_replayed": real_tps / rep_tps,
            "real_speedup": (sum(r["ar_wall_ms"] for r in ar) / sum(r["wall_ms"] for r in ar)) if ar else None,
            "replayed_speedup": sum(latency.ar_wall_ms(p.trace.prompt_tokens, p.new_tokens) for p in reps) / rep_wall,
            # the host's speed at run time against the calibration's: the target alone (the job's AR
            # reference), measured ÷ predicted wall time (> 1: the host ran slower than when calibrated)
            "ar_real_over_predicted": (sum(r["ar_wall_ms"] for r in ar) / sum(
                latency.ar_wall_ms(r["prompt_tokens"], r["new_tokens"]) for r in ar)) if ar else None,
            **cost_ratios,
            "real_acceptance": sum(r["accepted"] for r in records) / max(1, sum(r["drafted"] for r in records)),
            "replayed_acceptance": pooled_acceptance([p.rounds for p in reps]),
            "identical_rounds_share": same / len(records),
            "lossless_all": all(r.get("lossless") is not False for r in records),
        })
    return rows


BATCH_FIELDS = ("batch_size", "batch_index", "batch_rows", "batch_wall_ms", "batch_tokens", "batch_share_ms",
                "gamma_mode")


def batched_row(records: list[dict[str, Any]], traces: list, build: Any, gamma: int, latency: Any,
                job: str) -> dict[str, Any]:
    """A batched job (records carrying ``BATCH_FIELDS``; a row's ``wall_ms`` from its batch's start to its
    finish, ``ttft_ms`` the batch's prefill, ``ar_wall_ms`` — when present — the row's wall decoded by the
    target alone at the same batch size) against its replay on *its own* batches (``batch_index``; the rows of
    a batch in the job's prompt order, as the engine forms them), in its ``gamma_mode``: throughput over all
    rows (``Σ tokens / Σ batch walls``, each batch once), real ÷ replayed, the batches' walls, per-row latency,
    the target alone at that batch size (``specbench.latency.ar_batch_ms``), identical rounds, and where a gap
    lies (the batches' prefills and their rounds, each real ÷ replayed). The per-record
    forward times (``verify_ms``, ``draft_ms``) are not compared at batch sizes above 1."""
    from runners.replay.batched import pooled_batches, replay_groups
    from specbench.latency import ar_batch_ms

    missing = sorted({f for r in records for f in ("batch_index", "batch_rows", "batch_wall_ms") if r.get(f) is None})
    if missing:
        raise ValueError(f"{job}: batched records without {', '.join(missing)} (the fields of {', '.join(BATCH_FIELDS)})")
    order = {(t.prompt_id, t.turn): i for i, t in enumerate(traces)}
    batches: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if (r["prompt_id"], r["turn"]) in order:
            batches.setdefault(int(r["batch_index"]), []).append(r)
    groups = [sorted(batches[i], key=lambda r: order[(r["prompt_id"], r["turn"])]) for i in sorted(batches)]
    for index, group in zip(sorted(batches), groups):
        if any(int(r["batch_rows"]) != len(group) for r in group):
            raise ValueError(f"{job}: batch {index} has {len(group)} records of its prompts, batch_rows says "
                             f"{group[0]['batch_rows']}")
    mode = str(groups[0][0].get("gamma_mode") or "per_row")
    reps = replay_groups([[traces[order[(r["prompt_id"], r["turn"])]] for r in g] for g in groups],
                         lambda: build(gamma), latency, mode)
    real_walls = [float(g[0]["batch_wall_ms"]) for g in groups]
    tokens = [sum(r["new_tokens"] for r in g) for g in groups]
    real_tps = pooled_tokens_per_s(tokens, real_walls)
    rep_tps = pooled_batches(reps)
    pairs = [(r, p) for g, b in zip(groups, reps) for r, p in zip(g, b.rows)]
    same = sum(_schedule(r) == p.rounds.schedule for r, p in pairs)
    ar_pred = [max(ar_batch_ms(latency, [r["prompt_tokens"] for r in g], [r["new_tokens"] for r in g])[1]) for g in groups]
    ar_real = [max(r["ar_wall_ms"] for r in g) for g in groups] if all(r.get("ar_wall_ms") for r in records) else None
    rep_walls = [b.wall_ms for b in reps]
    return {
        "batch_size": max(int(r["batch_size"]) for r in records), "gamma_mode": mode, "batches": len(groups),
        "real_tokens_per_s": real_tps, "replayed_tokens_per_s": rep_tps, "real_over_replayed": real_tps / rep_tps,
        "batch_wall_real_over_replayed": sum(real_walls) / sum(rep_walls),
        # where a gap lies: the batches' prefills (one per batch) and their rounds after it
        "prefill_real_over_replayed": sum(float(g[0]["ttft_ms"]) for g in groups) / sum(b.ttft_ms for b in reps),
        "rounds_real_over_replayed": sum(w - float(g[0]["ttft_ms"]) for w, g in zip(real_walls, groups))
        / sum(sum(b.round_ms) for b in reps),
        "real_row_wall_ms_mean": sum(r["wall_ms"] for r, _ in pairs) / len(pairs),
        "replayed_row_wall_ms_mean": sum(p.wall_ms for _, p in pairs) / len(pairs),
        "real_speedup": sum(ar_real) / sum(real_walls) if ar_real else None,
        "replayed_speedup": sum(ar_pred) / sum(rep_walls),
        "ar_real_over_predicted": sum(ar_real) / sum(ar_pred) if ar_real else None,
        "verify_real_over_predicted": None, "draft_real_over_predicted": None,
        "real_acceptance": sum(r["accepted"] for r in records) / max(1, sum(r["drafted"] for r in records)),
        "replayed_acceptance": pooled_acceptance([p.rounds for _, p in pairs]),
        "identical_rounds_share": same / len(pairs),
        "lossless_all": all(r.get("lossless") is not False for r in records),
    }


def compare_main(args: argparse.Namespace) -> int:
    if getattr(args, "live", False):
        from runners.replay.compare_live import live_main

        return live_main(args)
    missing = [f"--{k}" for k in ("real", "traces", "latency", "out") if not getattr(args, k, None)]
    if missing:
        print(f"error: compare needs {', '.join(missing)} (or --live)", file=sys.stderr)
        return 2
    import pandas as pd

    rows = compare_rows(args.real, args.traces, args.latency)
    if not rows:
        print("no comparable jobs", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
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
    show = df[["pair", "task", "method_config", "gamma_init", "batch_size", "gamma_mode", "real_tokens_per_s", "replayed_tokens_per_s",
               "real_over_replayed", "prefill_real_over_replayed", "rounds_real_over_replayed", "ar_real_over_predicted", "real_speedup", "replayed_speedup",
               "speedup_real_over_replayed", "verify_real_over_predicted", "draft_real_over_predicted", "real_acceptance", "replayed_acceptance", "identical_rounds_share"]].round(3)
    text = to_markdown(show, "Real runs (python run.py, measured) against the replay of the same method config and "
                             "initial γ on the same prompts (predicted by the calibrated latency model).")
    (out / "real_vs_replay.md").write_text(text)
    print(text)
    return 0
