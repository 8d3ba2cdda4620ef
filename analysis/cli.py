"""``python -m analysis``: a results folder (or a W&B project) in, the papers' tables and figures out.

    python -m analysis RESULTS_DIR [--out DIR] [--pooling pooled|mean|question] [--min-new-tokens 128]
                       [--bootstrap 2000] [--bootstrap-seed 0] [--drift-threshold 0.10]
    python -m analysis --wandb ENTITY/PROJECT [--out DIR]
    python -m analysis RESULTS_DIR --print-only        # the speedup table(s) to stdout, nothing written
    python -m analysis RESULTS_DIR [RESULTS_DIR ...] [--out DIR]   # several folders as one (e.g. both temperatures)

Writes ``DIR/tables/<name>.{md,tex,csv,data.csv}`` and ``DIR/figures/<name>.{png,pdf}``
(default ``DIR``: ``RESULTS_DIR/analysis``; for several folders ``<parent of the first>/<name1>+<name2>/analysis``;
for ``--wandb``: ``results/wandb/ENTITY_PROJECT/analysis``)
and prints the Markdown speedup table(s). An artefact whose inputs are absent is skipped with a
note; one that fails is reported and the others are still written (exit status 1).

Several folders are read as one (their job folders named ``<folder>/<job>``): hf-bench's recipes run
each temperature as its own sweep (``hetero_slem`` at 0, ``hetero_tli`` at 1, each in its own results
folder), and hf-bench's example filter drops an example at *both* temperatures, so it must see both:
``python -m analysis results/hetero_slem results/hetero_tli``. A folder inside another is refused
(its records would count twice). The replay artefacts are made for a single folder only; the
calibrations of the prediction table come from ``--latency`` or the first folder's ``latency/``.

Settings are never pooled (``analysis.settings``): rows are split by every method knob off its
default (``GammaTune (η = 0.5)``), GammaTune's artefacts per scenario (task, temperature, sampling
processors, prompt format, ``max_new_tokens``), and the other artefacts per (prompt format,
``max_new_tokens``, sampling processors at temperature > 0) with both temperatures together.

Heterogeneous-vocabulary tables: ``hetero_speedup`` (hf-bench's definitions and example filter,
``--min-new-tokens``, beside the paper's numbers), ``hetero_speedup_unfiltered`` (the same
definitions, every example) and ``hetero_speedup_ours`` (specbench's definitions, ``--pooling``).

By default only records of jobs whose summary says ``complete`` are used (a job cut short covers
fewer prompts than its siblings); ``--include-incomplete`` uses every record found.
GammaTune artefacts (speedup table, throughput table and figure, sensitivity figure, acceptance
table, trace, noise floor) are made per (task, temperature) when the folder holds several, with a
``-<task>-t<T>`` suffix.

Uncertainty (``analysis.uncertainty``): every compared number carries a 95 % paired bootstrap CI over
prompt turns (``--bootstrap N`` replicates, default 2000, ``--bootstrap-seed``), and a ranking whose
neighbours are not resolved (the CI of their paired difference contains 0) is marked ``≈``. Drift
and noise floor (``analysis.drift``): the terminal gets the sweep's host drift from ``host_probe_ms``
(cells whose probe is more than ``--drift-threshold`` (default 0.10) off their target's median are
named; table ``drift``), a drift-normalised Table 2 under its own name
(``gammatune_table2_speedup_drift_normalised``, never in place of the measured one), and, when a
scenario holds an A/A twin (``specdecode_twin``), the noise floor (table ``noise_floor``).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.breakdowns import PAPER_MIN_NEW_TOKENS, category_table, hetero_table, hfbench_table
from analysis.drift import (
    DRIFT_NORMALISED_NOTE,
    DRIFT_THRESHOLD,
    aa_twins,
    drift_normalised,
    drift_summary,
    drift_table,
    has_probe,
    noise_floor_lines,
    noise_floor_table,
)
from analysis.figures import plot_sensitivity, plot_throughput, plot_trace
from analysis.frame import DuplicateRecords, complete_only, load_records, scenarios
from analysis.knob_sweep import sweep_from_replay
from analysis.leaderboard import (
    leaderboard,
    leviathan_table,
    load_cost_ratios,
    per_position_table,
    plot_leaderboard,
)
from analysis.metrics import POOLINGS, is_ar
from analysis.paper import load_paper_numbers
from analysis.prediction import load_calibrations, prediction_table
from analysis.render import Table, save_figure, to_markdown, write_table
from analysis.replay_table import load_replay, replay_table
from analysis.settings import setting_partitions
from analysis.tables import (
    acceptance_table,
    latency_table,
    speedup_table,
    throughput_table,
    trace_frame,
    trace_table,
)
from analysis.time_breakdown import plot_time_breakdown, time_breakdown_table
from analysis.uncertainty import N_BOOT, SEED, BootstrapSpec


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results_dir", nargs="*", metavar="RESULTS_DIR",
                   help="folder(s) holding job folders (records.jsonl at any depth); several are read as one")
    p.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs of a W&B project instead of a folder")
    p.add_argument("--out", help="output folder (default: RESULTS_DIR/analysis)")
    p.add_argument("--pooling", choices=sorted(POOLINGS), default="pooled",
                   help="throughput over prompts: pooled = total tokens / total time (default); mean = mean of "
                        "per-prompt tokens/s; question = Spec-Bench's speed.py (per question over its turns, then the mean)")
    p.add_argument("--min-new-tokens", type=int, default=PAPER_MIN_NEW_TOKENS,
                   help="hf-bench's example filter for the table beside Timor et al.'s numbers: drop examples "
                        f"shorter than this under any method (default {PAPER_MIN_NEW_TOKENS}, the paper's; 0: off)")
    p.add_argument("--baseline", default="specdecode", help="method of the speedup table's denominator (default: specdecode)")
    p.add_argument("--include-incomplete", action="store_true", help="also use records of failed / unfinished jobs")
    p.add_argument("--no-paper", action="store_true", help="leave the papers' own numbers out")
    p.add_argument("--trace-pair", help="pair of the trace (default: the first)")
    p.add_argument("--trace-gamma", type=int, help="initial γ of the trace (default: the most common)")
    p.add_argument("--trace-prompt", help="prompt id of the trace (default: the first)")
    p.add_argument("--print-only", action="store_true", help="print the speedup table(s), write nothing")
    p.add_argument("--bootstrap", type=int, default=N_BOOT, metavar="N",
                   help=f"replicates of the paired bootstrap over prompt turns behind every 95 %% CI (default {N_BOOT})")
    p.add_argument("--bootstrap-seed", type=int, default=SEED, metavar="S",
                   help=f"seed of the bootstrap (default {SEED}: the same intervals on every run)")
    p.add_argument("--drift-threshold", type=float, default=DRIFT_THRESHOLD, metavar="SHARE",
                   help="name the cells whose median host_probe_ms differs from their target's sweep median by more "
                        f"than this share (default {DRIFT_THRESHOLD})")
    p.add_argument("--latency", help="folder of calibration files <pair>.json (python -m runners.replay calibrate) for "
                                     "the Leviathan prediction of the cross-vocabulary table (default: RESULTS_DIR/latency)")
    return p


class Report:
    """Runs artefact builders, writes what they return, and notes what was skipped or failed."""

    def __init__(self, out: Path | None) -> None:
        self.out, self.written, self.failed = out, [], []
        self.lines: list[str] = []  # printed after the speedup tables (noise floor, drift)

    def note(self, text: str) -> None:
        print(f"note: {text}", file=sys.stderr)

    def run(self, label: str, build: Callable[[], Any], write: Callable[[Any], list[Path]]) -> Any:
        try:
            result = build()
            if result is None:
                self.note(f"{label}: skipped (its inputs are not in these records)")
                return None
            if self.out is not None:
                self.written += write(result)
            return result
        except Exception:
            self.failed.append(label)
            print(f"error: {label} failed:\n{traceback.format_exc()}", file=sys.stderr)
            return None

    def table(self, label: str, build: Callable[[], Table | None]) -> Table | None:
        return self.run(label, build, lambda t: write_table(t, self.out / "tables"))

    def figure(self, label: str, name: str, build: Callable[[], Any]) -> Any:
        return self.run(label, build, lambda f: save_figure(f, self.out / "figures", name))


def _drift_named(table: Table | None) -> Table | None:
    """A table computed from ``drift_normalised`` records, under its own name and saying so."""
    if table is not None:
        table.name += "_drift_normalised"
        table.caption = DRIFT_NORMALISED_NOTE + table.caption
    return table


def _renamed(table: Table | None, suffix: str) -> Table | None:
    if table is not None and suffix:
        table.name += suffix
        table.caption += f" Scenario: {suffix.lstrip('-')}."
    return table


def analyse(df: pd.DataFrame, out: Path | None, args: argparse.Namespace) -> tuple[list[Table], Report]:
    """Every artefact of ``df`` (already filtered) into ``out`` (``None``: compute only the speedup tables)."""
    report = Report(out)
    paper = None if args.no_paper else load_paper_numbers()
    boot = BootstrapSpec(getattr(args, "bootstrap", N_BOOT), getattr(args, "bootstrap_seed", SEED))
    threshold = getattr(args, "drift_threshold", DRIFT_THRESHOLD)
    speedups: list[Table] = []
    same_vocab = df[df["hetero"].isna()]  # GammaTune's artefacts compare γ policies on one vocabulary
    normalised = drift_normalised(same_vocab)  # one probe reference per target over the whole sweep
    for suffix, sub in scenarios(same_vocab):
        tag = suffix or " (all records)"
        t = report.table(f"speedup table{tag}", lambda s=sub, x=suffix: _renamed(
            speedup_table(s, args.pooling, args.baseline, paper, boot), x))
        if t is not None:
            speedups.append(t)
        if aa_twins(sub):
            floor = report.table(f"noise floor table{tag}", lambda s=sub, x=suffix: _renamed(
                noise_floor_table(s, args.pooling, boot), x))
            report.lines += noise_floor_lines(floor, suffix)
        if normalised is not None:
            n = report.table(f"drift-normalised speedup table{tag}", lambda s=normalised.loc[sub.index], x=suffix:
                             _renamed(_drift_named(speedup_table(s, args.pooling, args.baseline, None, boot)), x))
            if n is not None:
                report.lines.append(f"drift-normalised alternative (by name, not in place of the measured table): "
                                    f"{n.name}")
        if out is None:
            continue
        report.table(f"throughput table{tag}", lambda s=sub, x=suffix: _renamed(
            throughput_table(s, args.pooling, boot), x))
        report.figure(f"throughput figure{tag}", f"gammatune_fig1_throughput{suffix}",
                      lambda s=sub: plot_throughput(s, args.pooling, boot))
        report.figure(f"sensitivity figure{tag}", f"gammatune_sensitivity{suffix}",
                      lambda s=sub: plot_sensitivity(s, args.pooling, boot))
        report.table(f"acceptance table{tag}", lambda s=sub, x=suffix: _renamed(acceptance_table(s), x))
        trace, meta = trace_frame(sub, args.trace_pair, args.trace_gamma, args.trace_prompt)
        report.figure(f"trace figure{tag}", f"gammatune_fig2a_trace{suffix}", lambda t=trace, m=meta: plot_trace(t, m))
        report.table(f"trace table{tag}", lambda t=trace, m=meta, x=suffix: _renamed(trace_table(t, m), x))
    report.lines += drift_summary(df, threshold)
    if out is not None:
        if has_probe(df):
            report.table("drift table", lambda: drift_table(df, threshold))
        latency = getattr(args, "latency", None) or next(
            (Path(d) / "latency" for d in _folders(args) if (Path(d) / "latency").is_dir()), None)
        for suffix, part in setting_partitions(df):
            tag = suffix or ""
            report.table(f"model latency table{tag}", lambda p=part, x=suffix: _renamed(
                latency_table(p, args.pooling, paper), x))
            report.table(f"heterogeneous-vocabulary table (hf-bench's definitions, beside the paper){tag}",
                         lambda p=part, x=suffix: _renamed(hfbench_table(p, paper, args.min_new_tokens), x))
            if args.min_new_tokens > 0:
                report.table(f"heterogeneous-vocabulary table (hf-bench's definitions, unfiltered){tag}",
                             lambda p=part, x=suffix: _renamed(hfbench_table(p, None, 0, name="hetero_speedup_unfiltered"),
                                                               x))
            report.table(f"heterogeneous-vocabulary table (our definitions){tag}",
                         lambda p=part, x=suffix: _renamed(hetero_table(p, args.pooling, boot), x))
            report.table(f"cross-vocabulary prediction table{tag}", lambda p=part, x=suffix: _renamed(
                prediction_table(p, load_calibrations(latency), args.pooling), x))
            report.table(f"per-category table{tag}", lambda p=part, x=suffix: _renamed(category_table(p, args.pooling), x))
            report.table(f"time breakdown table{tag}", lambda p=part, x=suffix: _renamed(time_breakdown_table(p), x))
            report.figure(f"time breakdown figure{tag}", f"time_breakdown{suffix}", lambda p=part: plot_time_breakdown(p))
        folders = _folders(args)
        if len(folders) == 1:
            report.table("replay oracle table", lambda: replay_table(folders[0]))
            replay_artefacts(report, Path(folders[0]), df)
    return speedups, report


def replay_artefacts(report: Report, root: Path, records: pd.DataFrame | None = None) -> None:
    """The γ-policy lab's artefacts (``analysis.leaderboard``) from the replay rows under ``root``, and
    Leviathan et al.'s prediction beside every fixed-γ speedup, replayed and measured."""
    rows = load_replay(root)
    costs = load_cost_ratios(root)
    report.table("policy leaderboard", lambda: leaderboard(rows) if not rows.empty else None)
    report.figure("policy leaderboard figure", "policy_leaderboard",
                  lambda: plot_leaderboard(rows) if not rows.empty else None)
    report.table("acceptance per position (replay)", lambda: per_position_table(rows) if not rows.empty else None)
    report.table("GammaTune Table 2 across η and δ (replay)", lambda: sweep_from_replay(rows))
    both = pd.concat([f for f in (rows, records) if f is not None and not f.empty], ignore_index=True) \
        if (records is not None and not records.empty) or not rows.empty else pd.DataFrame()
    report.table("Leviathan et al. prediction", lambda: leviathan_table(both, costs) if not both.empty else None)
    if records is not None and not records.empty:
        report.table("acceptance per position (real runs)", lambda: per_position_table(
            records[~is_ar(records)], name="acceptance_per_position_real"))


def _folders(args: argparse.Namespace) -> list[str]:
    """The results folders given (``RESULTS_DIR ...``), as strings; empty for ``--wandb``."""
    value = getattr(args, "results_dir", None)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


def load_folders(roots: Sequence[Path]) -> pd.DataFrame:
    """The records of several results folders as one frame (``analysis.frame.load_records`` each);
    with more than one folder every ``job_dir`` is prefixed by its folder as given (``DIR/job``), so
    jobs of the same name in two folders stay two jobs. A folder inside another is refused."""
    resolved = [r.resolve() for r in roots]
    for i, a in enumerate(resolved):
        for j, b in enumerate(resolved):
            if i != j and (a == b or b in a.parents):
                raise ValueError(f"{roots[i]} is inside {roots[j]} (or the same folder): its records would count twice")
    if len(roots) == 1:
        return load_records(roots[0])
    frames = []
    for root in roots:
        df = load_records(root)
        frames.append(df.assign(job_dir=[f"{root}/{d}" for d in df["job_dir"]]))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else load_records(roots[0])


def load(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[pd.DataFrame, Path | None]:
    if args.wandb:
        from analysis.wandb_source import fetch_frame

        df = fetch_frame(args.wandb)
        default_out = Path("results") / "wandb" / args.wandb.replace("/", "_") / "analysis"
    else:
        folders = _folders(args)
        if not folders:
            parser.error("give RESULTS_DIR or --wandb ENTITY/PROJECT")
        roots = [Path(f) for f in folders]
        for root in roots:
            if not root.is_dir():
                parser.error(f"no such folder: {root}")
        try:
            df = load_folders(roots)
        except ValueError as exc:
            if isinstance(exc, DuplicateRecords):
                raise
            parser.error(str(exc))
        default_out = (roots[0] / "analysis" if len(roots) == 1
                       else roots[0].parent / "+".join(r.resolve().name for r in roots) / "analysis")
    return df, None if args.print_only else Path(args.out) if args.out else default_out


def replay_only(results_dir: Path, out: Path | None) -> int | None:
    """A folder of replay rows (``python -m runners.replay grid``) and no records: the oracle table and
    the γ-policy lab's artefacts (``replay_artefacts``); the exit status, or ``None`` without replay rows."""
    if load_replay(results_dir).empty:
        return None
    report = Report(out)
    table = report.table("replay oracle table", lambda: replay_table(results_dir))
    if out is not None:
        replay_artefacts(report, results_dir)
        print(f"wrote {len(report.written)} files under {out}", file=sys.stderr)
    if table is not None:
        print(to_markdown(table.display, table.caption))
    return 1 if report.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        df, out = load(args, parser)
    except DuplicateRecords as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = args.wandb or " ".join(_folders(args))
    if df.empty:
        if len(_folders(args)) == 1:
            status = replay_only(Path(_folders(args)[0]), out)
            if status is not None:
                return status
        print(f"note: no records found in {source}; nothing to analyse", file=sys.stderr)
        return 0
    if not args.include_incomplete:
        kept = complete_only(df)
        if len(kept) < len(df):
            dropped = df[df["job_status"] != "complete"]
            print(f"note: left out {len(dropped)} records of {dropped['job_dir'].nunique()} job(s) that are not "
                  "complete (--include-incomplete to use them)", file=sys.stderr)
        df = kept
        if df.empty:
            print("note: no complete job; nothing to analyse", file=sys.stderr)
            return 0
    speedups, report = analyse(df, out, args)
    for table in speedups:
        print(f"## {table.name}\n")
        print(to_markdown(table.display, table.caption))
    if not speedups:
        print("(no speedup table: these records hold no baseline runs)")
    for line in report.lines:
        print(line)
    if out is not None:
        print(f"wrote {len(report.written)} files under {out}", file=sys.stderr)
    return 1 if report.failed else 0
