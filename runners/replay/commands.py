"""The simulator's one command line: ``python -m runners.replay trace | calibrate | grid | lab | import | export``.

    trace      [--results DIR | pair=... task=... max_new_tokens=...] [--gamma-max G] [--out DIR]
               [--reuse-target TRACE_DIR]
    calibrate  --pair NAME [OVERRIDES ...] [--threads N] [--hetero RULE] [--out results/latency/NAME.json]
               [--k-max 33] [--repeats 5] [--batch-sizes 1 2 4 8] [--batch-k-max K] [--fast-linear auto] ...
    grid       RESULTS_OR_TRACE_DIR [--methods specdecode hf_heuristic ...] [--gammas 1,2,...,24]
               (--latency calib.json|DIR | --cost-ratio C) [--out DIR] [--max-new-tokens M]
               [--batch-sizes 1 2 4 8] [--gamma-mode per_row|shared]
    lab        questions | traces | replay | confirm | compare ...   (the γ-policy lab: runners.replay.lab)
    import     specdecode-bench PATH [--proposer eagle|ngram] --out DIR [--draft-length K]   (a peer's acceptance
               data as traces: runners.replay.import_specdecode_bench)
               vllm PATH --out DIR [--pair NAME] [--task NAME]   (vLLM's per-request metrics at
               --per-request-spec-decode-metrics detailed: runners.replay.import_vllm)
               aiperf PATH --out DIR [--stats-only]   (AIPerf's per-request SpecDecodeAcceptanceRecord, SGLang's and
               TensorRT-LLM's payloads; histograms only with --stats-only: runners.replay.import_aiperf)
    export     vllm RECORDS --out FILE [--level detailed|summary]   (a run's records as vLLM's per-request metrics:
               runners.replay.export_vllm)
               aiperf RECORDS --out FILE   (a run's records as AIPerf's profile_export.jsonl:
               runners.replay.export_aiperf)

``trace`` builds greedy traces (``runners.replay.trace``; ``runners.replay.trace_lookup`` for a
prompt lookup pair) for a composed config, or for every traceable (pair, task, ``max_new_tokens``) of
the greedy jobs under a results folder; rollouts are ``max_new_tokens − 1`` long by default, so replay
never refuses a policy; ``--reuse-target`` takes the target's greedy outputs from another pair's traces
(same target, task and length) instead of decoding again. ``calibrate`` measures a pair's latency
model on what a job of the pair would run (``runners.replay.calibrate_pair``); ``grid`` replays
methods × initial γ and writes rows (``runners.replay.grid.write_grid``: ``replay.jsonl``, ``replay.csv``,
``meta.json``); ``lab`` is the γ-policy lab (``runners.replay.lab``, its grid ``conf/experiment/policy_lab.yaml``).
The simulator writes rows; ``python -m analysis`` renders them (the oracle table, the lab's leaderboard).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.replay import (
    calibrate_pair,
    export_aiperf,
    export_vllm,
    import_aiperf,
    import_specdecode_bench,
    import_vllm,
    lab,
)
from runners.replay.batched import check_batching
from runners.replay.grid import PAPER_GAMMAS, PAPER_METHODS, load_method, replay_grid, write_grid
from runners.replay.grid import parse_ints as _ints
from runners.replay.trace import (
    DEFAULT_GAMMA_MAX,
    META_FILE,
    TRACE_FILE,
    HybridTrace,
    find_trace_files,
    hybrid_of,
    read_traces,
    write_traces,
)
from runners.replay.trace_base import TRACE_VERSION
from runners.replay.trace_build import build_trace
from runners.replay.trace_lookup import LookupTrace
from specbench.config import JobConfig, compose
from specbench.drafter_kinds import drafter_kind
from specbench.latency import LatencyModel
from specbench.record_io import write_json_atomic
from specbench.registry import ConfigError

# ---------------------------------------------------------------------- jobs → traces


def trace_key(config: JobConfig) -> dict[str, Any]:
    """What a trace depends on: the pair, the task and ``max_new_tokens`` (not the method or γ)."""
    return {"pair": config.resolved.get("pair"), "task": config.resolved.get("task"),
            "max_new_tokens": config.max_new_tokens}


def trace_dirname(config: JobConfig) -> str:
    key = trace_key(config)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:8]
    name = f"{config.pair.name}__{config.task.name}__m{config.max_new_tokens}__{digest}"
    return name.replace("/", "_").replace(" ", "_")


def traceable(config: JobConfig) -> str | None:
    """Why a job's config cannot be traced (None when it can)."""
    draft = config.pair.draft
    if not config.greedy:
        return "temperature > 0 (traces are for greedy decoding)"
    if draft is None:
        return "the pair has no draft"
    if drafter_kind(draft.kind).trace is None:  # its declaration (specbench.drafter_kinds)
        return f"draft kind {draft.kind!r} declares no trace kind: the lab cannot replay it"
    if not config.pair.same_tokenizer or config.hetero_rule is not None:
        return "the draft has another tokenizer"
    if config.method.runner == "hf":
        return f"method runner {config.method.runner!r}"
    return None


def _as_ar(config: Mapping[str, Any]) -> JobConfig:
    """A config's job with the target decoding alone (what a trace decodes)."""
    return JobConfig.from_mapping({**config, "method": {"name": "ar", "runner": "ar"}})


def configs_from_results(results_dir: str | os.PathLike) -> dict[str, JobConfig]:
    """Distinct traceable ``(pair, task, max_new_tokens)`` configs of the jobs under ``results_dir``."""
    out: dict[str, JobConfig] = {}
    for path in sorted(Path(results_dir).rglob("summary.json")):
        try:
            raw = json.loads(path.read_text()).get("config") or {}
            config = JobConfig.from_mapping(raw)
        except (OSError, ValueError):
            continue  # unreadable, or a config of an older schema
        if traceable(config) is None:
            out.setdefault(trace_dirname(config), _as_ar(raw))
    return out


def trace_config(config: JobConfig, out_dir: str | os.PathLike, gamma_max: int | None = DEFAULT_GAMMA_MAX,
                 mode: str = "sequential", progress: bool = True,
                 reuse_target: str | os.PathLike | None = None) -> Path:
    """Build (or resume) the trace of a config's pair × task × ``max_new_tokens`` into ``out_dir``
    (``gamma_max=None``: ``max_new_tokens − 1``; a prompt lookup pair gets ``LookupTrace`` lines).
    ``reuse_target``: a trace file or folder of another pair with the same target, task and length,
    whose target outputs are taken instead of decoding again (the draft's side is still computed)."""
    import numpy as np
    import torch

    from specbench.models.cache import load_pair
    from specbench.provenance import provenance
    from specbench.tasks import encode_turn, load_task

    why = traceable(config)
    if why:
        raise ValueError(f"cannot trace this config: {why}")
    prompts = load_task(config.task)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if config.threads:
        torch.set_num_threads(config.threads)
    pair = config.pair
    loaded = load_pair(config)
    target, tokenizer, eos = loaded.target, loaded.tokenizer, loaded.eos
    if gamma_max is None:
        gamma_max = max(1, config.max_new_tokens - 1)
    from runners.drafters import DRAFTERS, DrafterContext, build_drafter
    from runners.replay.trace_lookup import build_lookup_trace
    from specbench.models import logits_width

    trace_kind, kind, options = drafter_kind(pair.draft.kind).trace, pair.draft.kind, pair.draft.options  # declared
    lookup, draft, hybrid = trace_kind == LookupTrace.kind, loaded.draft, None
    if lookup:  # a deterministic proposer: its proposal at every position (it has no model)
        draft = build_drafter(kind, DrafterContext(tokenizer, eos, logits_width(target), options=options))
    elif trace_kind == HybridTrace.kind:  # the model's rollouts, then the lookup's proposals on the same output
        hybrid = DRAFTERS.get(kind).trace_parts(options, eos)
    path = out / TRACE_FILE
    reused = {tr.key: tr for f in find_trace_files(reuse_target) for tr in read_traces(f)} if reuse_target else {}
    done = {tr.key: tr for tr in read_traces(path)} if path.exists() else {}
    if done:
        write_traces(path, done.values())  # drop a torn line before appending
    meta = {
        "trace_version": TRACE_VERSION, **trace_key(config), "gamma_max": int(gamma_max), "mode": mode, "eos": eos,
        "provenance": provenance(pair.target.device),
    }
    write_json_atomic(out / META_FILE, {**meta, "status": "running"})
    t0 = time.perf_counter()
    names = {"pair": pair.name, "task": config.task.name, "target": pair.target.name or "", "draft": pair.draft.name}
    n_turns = sum(len(p.turns) for p in prompts)
    k = 0
    for prompt in prompts:
        history: list[tuple[str, str]] = []
        for turn, user in enumerate(prompt.turns, start=1):
            k += 1
            prev = done.get((prompt.prompt_id, turn))
            if prev is None:
                ids, _ = encode_turn(tokenizer, history, user, config.task.prompt_format)
                build = build_lookup_trace if lookup else build_trace
                prev = build(target, draft, ids, config.max_new_tokens, eos, gamma_max, mode,
                             prompt_id=prompt.prompt_id, turn=turn, category=prompt.category,
                             reuse=reused.get((prompt.prompt_id, turn)), **names)
                if hybrid is not None:
                    prev = hybrid_of(prev, hybrid[0], ids, hybrid[1].get("min_lookup_tokens") or 1,
                                     hybrid[1].get("max_model_tokens"))
                write_traces(path, [prev], append=True)
                if progress:
                    print(f"[trace {k}/{n_turns}] {prompt.prompt_id}/{turn}: {prev.n} tokens, "
                          f"mean a_t {np.mean(prev.agreements or [0]):.2f}", file=sys.stderr)
            history.append((user, tokenizer.decode(prev.tokens, skip_special_tokens=True)))
    write_json_atomic(out / META_FILE, {**meta, "status": "complete", "build_s": time.perf_counter() - t0})
    return path


def trace_main(args: argparse.Namespace) -> int:
    if args.results:
        configs = configs_from_results(args.results)
        if not configs:
            print(f"note: no traceable greedy job under {args.results}", file=sys.stderr)
            return 1
        base = Path(args.out) if args.out else Path(args.results) / "traces"
        for name, config in configs.items():
            print(trace_config(config, base / name, args.gamma_max, args.mode, reuse_target=args.reuse_target))
        return 0
    config = _as_ar(JobConfig.from_mapping(compose(args.overrides)).resolved)
    out = Path(args.out) if args.out else Path(config.results_dir) / "traces" / trace_dirname(config)
    print(trace_config(config, out, args.gamma_max, args.mode, reuse_target=args.reuse_target))
    return 0


# ---------------------------------------------------------------------- grid

def _latency_for(path: str | None, pair: str, cost_ratio: float | None) -> LatencyModel | None:
    if cost_ratio is not None:
        return LatencyModel.paper(cost_ratio)
    if not path:
        return None
    p = Path(path)
    if p.is_dir():
        p = p / f"{pair}.json"
    return LatencyModel.load(p)


def grid_main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    files = find_trace_files(args.dir)
    if not files:
        print(f"error: no trace.jsonl under {args.dir} (build one with `python -m runners.replay trace`)",
              file=sys.stderr)
        return 2
    check_batching(min(args.batch_sizes), args.gamma_mode)
    names = [part for m in args.methods for part in ([m] if ":" in m else m.split(",")) if part]
    methods = [load_method(m) for m in names]
    gammas = _ints(args.gammas)
    if not gammas or min(gammas) < 1:
        print("error: --gammas needs integers >= 1", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (Path(args.dir) if Path(args.dir).is_dir() else Path(args.dir).parent) / "replay"
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    latencies: dict[str, Any] = {}
    for path in files:
        traces = read_traces(path)
        if not traces:
            continue
        pair = traces[0].pair
        latency = _latency_for(args.latency, pair, args.cost_ratio)
        if latency is None:
            print("note: no --latency / --cost-ratio: rounds only, no predicted times and no oracle", file=sys.stderr)
        else:
            latencies[pair] = latency.to_json()
        for batch_size in args.batch_sizes:
            group = replay_grid(traces, methods, gammas, latency, args.max_new_tokens, errors, batch_size,
                                args.gamma_mode)
            for r in group:
                r["trace_file"] = str(path)
            rows += group
    write_grid(out, rows, {
        "traces": [str(f) for f in files], "methods": [m.label for m in methods], "gammas": gammas,
        "max_new_tokens": args.max_new_tokens, "batch_sizes": args.batch_sizes, "gamma_mode": args.gamma_mode,
        "latency": latencies, "errors": errors,
        "seconds": time.perf_counter() - t0,
    })
    for e in errors:
        print(f"note: {e}", file=sys.stderr)
    print(f"replayed {len(rows)} rows from {len(files)} trace file(s) in {time.perf_counter() - t0:.1f} s → {out}",
          file=sys.stderr)
    if latencies:
        print(f"the oracle table: python -m analysis {out}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- the parser

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runners.replay", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("trace", help="build greedy traces")
    t.add_argument("overrides", nargs="*", help="Hydra overrides (pair=..., task=..., max_new_tokens=...)")
    t.add_argument("--results", help="trace every (pair, task, max_new_tokens) of the greedy jobs under this folder")
    t.add_argument("--out", help="output folder (default: <results>/traces/<name>)")
    t.add_argument("--gamma-max", type=int, default=DEFAULT_GAMMA_MAX,
                   help="rollout length (default: max_new_tokens - 1, as long as any round can draft)")
    t.add_argument("--mode", choices=("sequential", "batched"), default="sequential")
    t.add_argument("--reuse-target", help="traces of another pair with the same target, task and max_new_tokens: "
                                          "take their target outputs instead of decoding again")
    calibrate_pair.add_parser(sub)
    g = sub.add_parser("grid", help="replay methods × initial γ on traces")
    g.add_argument("dir", help="a results folder holding traces/, a trace folder, or a trace.jsonl")
    g.add_argument("--methods", nargs="+", default=list(PAPER_METHODS),
                   help="conf/method names, or NAME:key=value,... (default: the GammaTune paper's set)")
    g.add_argument("--gammas", default=",".join(map(str, PAPER_GAMMAS)), help="initial γ, e.g. 1,2,4 or 1-24")
    g.add_argument("--latency", help="latency json (calibrate), or a folder of <pair>.json")
    g.add_argument("--cost-ratio", type=float, help="the paper's cost model with c = T_target/T_draft instead")
    g.add_argument("--max-new-tokens", type=int, help="replay shorter generations than the traces hold")
    g.add_argument("--out", help="output folder (default: <dir>/replay)")
    g.add_argument("--batch-sizes", type=int, nargs="+", default=[1],
                   help="replay the jobs B prompt turns at a time (runners.replay.batched; default: 1)")
    g.add_argument("--gamma-mode", default="per_row", help="batched γ: per_row (a policy per row) or shared")
    lab.add_parser(sub)
    sources = import_specdecode_bench.add_parser(sub)
    import_vllm.add_parser(sources)
    import_aiperf.add_parser(sources)
    export_aiperf.add_parser(export_vllm.add_parser(sub))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        if args.command == "trace":
            return trace_main(args)
        if args.command == "calibrate":
            return calibrate_pair.main(args)
        if args.command == "lab":
            return lab.run(args)
        if args.command == "import":
            return {"vllm": import_vllm, "aiperf": import_aiperf}.get(args.source, import_specdecode_bench).main(args)
        if args.command == "export":
            return (export_aiperf if args.target == "aiperf" else export_vllm).main(args)
        return grid_main(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
