"""The γ-policy lab: replay every policy on greedy traces, compare with real runs.

    python -m runners.replay lab questions --source ../shared/data/spec_bench/question.jsonl \\
        --skip 2 --per-category 2 --out results/policy_lab/tune_questions.jsonl
    python -m runners.replay lab traces [--out results/policy_lab/traces] [--pairs ...] [--tasks ...]
    python -m runners.replay lab replay --traces results/policy_lab/traces --latency results/policy_lab/latency \\
        --out results/policy_lab/replay [--methods ...] [--gammas 1-8,12,16,20,24]
    python -m runners.replay lab confirm [--real results/policy_lab/real] [--methods ...] [--gammas 2,4,6]
    python -m runners.replay lab compare --real results/policy_lab/real --traces results/policy_lab/traces \\
        --latency results/policy_lab/latency --out results/policy_lab/compare
    python -m runners.replay lab compare --live [--pair NAME] [--runs METHOD:GAMMA ...]
    python -m analysis results/policy_lab/replay        # the leaderboard, per position, Leviathan et al.

The lab's grid (pairs, tasks and their overrides, ``max_new_tokens``, the replayed methods and initial γ,
the confirmation's methods and γ) is ``conf/experiment/policy_lab.yaml`` (``LabSpec``).

``questions`` writes a Spec-Bench subset (the questions after the first ``--skip`` of each category),
used as a *tuning* set disjoint from the evaluation set (``task.per_category=2``: the first two).

``traces`` builds the greedy traces of every pair × task (``python -m runners.replay trace``); ``confirm``
runs them for real (``python run.py -m``) and then ``compare``s; it first checks each pair's latency file against
the runs' ``--threads`` and the pair's device and dtype (``check_confirm_latency``), which ``compare`` would
refuse afterwards. ``replay`` has no run to check a file against: its outputs carry the file (a copy in
``<out>/latency/``, its ``meta`` saying what it was timed on).

``replay`` replays ``--methods`` (default: the lab's: the GammaTune paper's set, the field's training-free
policies, ours) × ``--gammas`` × ``--batch-sizes`` (``replay.batch_sizes``, default ``[1]``: B prompt turns
decoded together, ``runners.replay.batched``, in ``--gamma-mode`` ``per_row`` or ``shared``; rows and cells
carry ``batch_size``; ``--batch-rule``: ``distinct`` prompt turns per batch, the default, or each turn
``duplicate``d ``B`` times, SpecDecode-Bench's rule: ``runners.replay.batched.BATCH_RULES``, in ``meta.json``) on every
``trace.jsonl`` under ``--traces`` with the pair's calibrated
latency model (``--latency DIR/<pair>.json``), plus the oracles and the best fixed γ in hindsight
(``runners.replay.grid.replay_grid``). A policy that reads costs is given that same latency file
(``latency=...``; ``:latency=none`` keeps it on costs learnt online). It writes, per pair × task, with the
grid's one writer (``runners.replay.grid.write_grid``, cells), ``<out>/<pair>__<task>/replay.jsonl`` with one
row per cell (method × initial γ: the sums of its prompt turns' rows, ``prompt_id = "*"``; small enough to
commit; ``--full`` also writes every prompt turn's row to ``replay_full.jsonl``), ``trace_summary.csv`` (per
prompt turn: tokens, agreement, the target's own measured speed) and ``meta.json``, and copies the latency
file to ``<out>/latency/``.

``compare`` (``runners.replay.compare``): real runs against their replay, from job folders, or ``--live``
on a pair loaded here (``runners.replay.compare_live``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runners.replay.batched import BATCH_RULES, check_batching, rows_for_rule
from runners.replay.compare import add_compare_parser, compare_main
from runners.replay.grid import MethodSpec, load_method, parse_ints, replay_grid, write_grid
from runners.replay.trace import find_trace_files, read_traces
from specbench.latency import LatencyModel
from specbench.paths import CONF_DIR, REPO_ROOT
from specbench.registry import ConfigError
from specbench.timed_on import TimedOn, check_timed_on

LAB_FILE = CONF_DIR / "experiment" / "policy_lab.yaml"


@dataclass(frozen=True)
class LabSpec:
    """The lab's grid (``conf/experiment/policy_lab.yaml``), validated."""

    pairs: tuple[str, ...]
    tasks: Mapping[str, tuple[str, ...]]
    max_new_tokens: int
    methods: tuple[str, ...]
    gammas: str
    batch_sizes: tuple[int, ...]
    gamma_mode: str
    confirm_methods: tuple[str, ...]
    cost_methods: tuple[str, ...]
    confirm_gammas: str
    confirm_threads: int

    def __post_init__(self) -> None:
        where = LAB_FILE.name
        if not self.pairs or not self.tasks or not self.methods:
            raise ConfigError(f"{where}: pairs, tasks and replay.methods must each name at least one")
        for name, overrides in self.tasks.items():
            bad = [o for o in overrides if not o.startswith("task") or "=" not in o]
            if bad:
                raise ConfigError(f"{where}: tasks.{name}: {bad[0]!r} is not a task override (task=... / task.KEY=...)")
        for key, text in (("replay.gammas", self.gammas), ("confirm.gammas", self.confirm_gammas)):
            if not parse_ints(text) or min(parse_ints(text)) < 1:
                raise ConfigError(f"{where}: {key} needs integers >= 1, got {text!r}")
        if self.max_new_tokens < 1 or self.confirm_threads < 1:
            raise ConfigError(f"{where}: max_new_tokens and confirm.threads must be >= 1")
        try:
            for size in self.batch_sizes or (0,):
                check_batching(size, self.gamma_mode)
        except ConfigError as exc:
            raise ConfigError(f"{where}: replay.batch_sizes / replay.gamma_mode: {exc}") from None

    @classmethod
    def load(cls, path: str | Path = LAB_FILE) -> LabSpec:
        raw = yaml.safe_load(Path(path).read_text())
        replay, confirm = raw.get("replay") or {}, raw.get("confirm") or {}
        return cls(pairs=tuple(raw["pairs"]), tasks={k: tuple(v) for k, v in raw["tasks"].items()},
                   max_new_tokens=int(raw["max_new_tokens"]), methods=tuple(replay["methods"]),
                   gammas=str(replay["gammas"]), batch_sizes=tuple(replay.get("batch_sizes") or (1,)),
                   gamma_mode=str(replay.get("gamma_mode") or "per_row"), confirm_methods=tuple(confirm["methods"]),
                   cost_methods=tuple(confirm["cost_methods"]), confirm_gammas=str(confirm["gammas"]),
                   confirm_threads=int(confirm["threads"]))


LAB = LabSpec.load()
#: the lab's replayed method labels (``runners.replay.grid.load_method``), initial γ, pairs, tasks, length
LAB_METHODS = list(LAB.methods)
GAMMAS = LAB.gammas
PAIRS = list(LAB.pairs)
TASKS = {name: list(overrides) for name, overrides in LAB.tasks.items()}
MAX_NEW_TOKENS = LAB.max_new_tokens


def method_spec(label: str, latency_file: str | None) -> MethodSpec:
    """``label``'s spec; a policy that reads costs gets ``latency_file`` unless the label says ``latency=``."""
    from methods.base import COSTS, policy_needs

    spec = load_method(label)
    params = dict(spec.params)
    if params.get("latency") in ("none", "null"):
        params["latency"] = None
    elif COSTS in policy_needs(spec.build(1)) and "latency=" not in label and latency_file:
        params["latency"] = latency_file
    return MethodSpec(label, spec.policy, params, spec.display)


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
    out = Path(args.out)
    gammas = parse_ints(args.gammas)
    for size in args.batch_sizes:
        check_batching(size, args.gamma_mode)
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
        rows = [row for size in args.batch_sizes for row in
                replay_grid(rows_for_rule(traces, size, args.batch_rule), methods, gammas, latency,
                            args.max_new_tokens, errors, size, args.gamma_mode)]
        folder = out / f"{pair}__{task}"
        (out / "latency").mkdir(parents=True, exist_ok=True)
        shutil.copy(lat_path, out / "latency" / lat_path.name)
        write_grid(folder, rows, {
            "traces": str(path), "prompt_turns": len(traces), "methods": args.methods, "gammas": gammas,
            "batch_sizes": args.batch_sizes, "batch_rule": args.batch_rule, "gamma_mode": args.gamma_mode, "latency": str(lat_path), "errors": errors, "seconds": round(time.perf_counter() - t0, 1)},
            as_cells=True, full=args.full, traces=traces)
        for e in errors:
            print(f"note: {e}", file=sys.stderr)
        print(f"{pair} / {task}: {len(traces)} turns, {len(rows)} rows in {time.perf_counter() - t0:.1f} s -> {folder}")
    return 0


def _run(cmd: list[str]) -> int:
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=REPO_ROOT).returncode


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


def check_confirm_latency(pairs: Sequence[str], latency_dir: Path, threads: int) -> None:
    """Before an hour of real runs: each pair's latency file (where there is one) must have been timed on what the
    runs will run on (``threads``, the pair's device and dtype), or ``compare`` would refuse them afterwards
    (``specbench.timed_on.check_timed_on``, one line naming the calibrate command)."""
    from specbench.config import JobConfig, compose

    for pair in pairs:
        path = latency_dir / f"{pair}.json"
        if path.is_file():
            target = JobConfig.from_mapping(compose([f"pair={pair}"])).pair.target
            check_timed_on(LatencyModel.load(path), TimedOn.of_job(threads, target), f"lab confirm (pair {pair})",
                           path, pair)


def confirm_main(args: argparse.Namespace) -> int:
    """Real runs (``python run.py -m``, ``verify_lossless=true``) of ``--methods`` × ``--gammas`` on every
    ``--pairs`` × ``--tasks`` of the traces, then ``compare`` against their replay. Timing: run it on a
    quiet machine (it measures wall time). Every method of a pair × task shares one results folder
    (job folders are named by their overrides), so the target's AR reference is decoded once per
    pair × task (``runners/jobs/ar_cache.py``), not once per method."""
    real = Path(args.real)
    try:
        check_confirm_latency(args.pairs, Path(args.latency), args.threads)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
                                           out=args.compare_out, live=False))


# ---------------------------------------------------------------------- the command line

def _add_commands(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="lab_command", required=True)
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
    r.add_argument("--batch-sizes", type=int, nargs="+", default=list(LAB.batch_sizes),
                   help="replay the jobs B prompt turns at a time (runners.replay.batched; the latency file must be "
                        "calibrated at those batch sizes: calibrate --batch-sizes)")
    r.add_argument("--batch-rule", default=BATCH_RULES[0], choices=BATCH_RULES,
                   help="what a batch holds (runners.replay.batched): distinct prompt turns (default), or each turn "
                        "duplicated B times (SpecDecode-Bench's simulate_like_experiment)")
    r.add_argument("--gamma-mode", default=LAB.gamma_mode, help="batched γ: per_row (a policy per row) or shared")
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
    f.add_argument("--methods", nargs="+", default=list(LAB.confirm_methods),
                   help="conf/method names, or NAME:key=value,... (knobs passed as method.key=value)")
    f.add_argument("--cost-methods", nargs="+", default=list(LAB.cost_methods),
                   help="methods given the pair's latency file (method.latency=...)")
    f.add_argument("--gammas", default=LAB.confirm_gammas, help="initial γ (a Hydra sweep list)")
    f.add_argument("--n-prompts", type=int, default=None,
                   help="only the first N prompts of each task's traced set (default: all of them)")
    f.add_argument("--per-category", type=int, default=None, help="Spec-Bench: the first K questions per category")
    f.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    f.add_argument("--threads", type=int, default=LAB.confirm_threads, help="torch threads of the real runs (quiet machine)")
    add_compare_parser(sub)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``lab`` as a subcommand of ``python -m runners.replay`` (``runners.replay.commands``)."""
    p = sub.add_parser("lab", help="the γ-policy lab: traces, replay, real-run confirmation, compare",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_commands(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runners.replay lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_commands(p)
    return p


def run(args: argparse.Namespace) -> int:
    commands = {"questions": questions_main, "traces": traces_main, "replay": replay_main, "confirm": confirm_main,
                "compare": compare_main}
    return commands[args.lab_command](args)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.replay lab ARGV`` (``ARGV``: the lab's own subcommand and options)."""
    return run(build_parser().parse_args(argv))
