"""``python -m analysis``: a results folder (or a W&B project) in, the papers' tables and figures out.

    python -m analysis RESULTS_DIR [--out DIR] [--pooling pooled|mean|question] [--min-new-tokens 128]
                       [--drift-threshold 0.10]
    python -m analysis --wandb ENTITY/PROJECT [--out DIR]
    python -m analysis RESULTS_DIR --print-only        # the speedup table(s) to stdout, nothing written
    python -m analysis RESULTS_DIR --tables-only       # every table, no figure drawn
    python -m analysis RESULTS_DIR [RESULTS_DIR ...] [--out DIR]   # several folders as one (e.g. both temperatures)
    python -m analysis --list                          # every artefact: its name, what it is, what it reads

Writes ``DIR/tables/<name>.{md,tex,csv,data.csv}`` and ``DIR/figures/<name>.{png,pdf}``
(default ``DIR``: ``RESULTS_DIR/analysis``; for several folders ``<parent of the first>/<name1>+<name2>/analysis``;
for ``--wandb``: ``results/wandb/ENTITY_PROJECT/analysis``)
and prints the Markdown speedup table(s). The artefacts are those of ``analysis.artefacts`` (each
registered where it is defined, made scope by scope); one whose inputs are absent is skipped with a
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

Uncertainty (``analysis.uncertainty``): every compared number carries a 95 % paired, t-calibrated
jackknife CI over prompt turns (clusters of them at batch size > 1; deterministic: no replicates or seed
to set), and a ranking whose neighbours are not resolved (the CI of their paired ratio contains 1 or,
where an A/A twin ran, reaches into the pair's A/A band) is marked ``≈``. Drift
and noise floor (``analysis.drift``, ``analysis.noise_floor``): the terminal gets the sweep's host drift from ``host_probe_ms``
(cells whose probe is more than ``--drift-threshold`` (default 0.10) off their target's median are
named; table ``drift``), a drift-normalised Table 2 under its own name
(``gammatune_table2_speedup_drift_normalised``, never in place of the measured one), and, when a
scenario holds an A/A twin (``specdecode_twin``), the noise floor (table ``noise_floor``).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.artefacts import REPLAY, SCENARIO, SETTING, SWEEP, Artefact, Inputs, artefacts, get, listing
from analysis.drift import DRIFT_THRESHOLD, drift_normalised, drift_summary
from analysis.frame import DuplicateRecords, complete_only, load_records, scenarios, split_runs
from analysis.hetero import PAPER_MIN_NEW_TOKENS
from analysis.leviathan import load_calibrations, load_cost_ratios
from analysis.metrics import POOLINGS
from analysis.paper import load_paper_numbers
from analysis.policy_lab import load_replay
from analysis.render import Table, save_figure, to_markdown, write_table
from analysis.settings import setting_partitions


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
    p.add_argument("--tables-only", action="store_true",
                   help="write the tables and draw no figure (drawing them is about half of the time)")
    p.add_argument("--drift-threshold", type=float, default=DRIFT_THRESHOLD, metavar="SHARE",
                   help="name the cells whose median host_probe_ms differs from their target's sweep median by more "
                        f"than this share (default {DRIFT_THRESHOLD})")
    p.add_argument("--list", action="store_true",
                   help="list every artefact (name, what it is, what it reads) and exit; needs no results folder")
    p.add_argument("--latency", help="folder of calibration files <pair>.json (python -m runners.replay calibrate) for "
                                     "the Leviathan prediction of the cross-vocabulary table (default: RESULTS_DIR/latency)")
    return p


class Report:
    """Makes registered artefacts (``analysis.artefacts``), writes what they return, and notes what was
    skipped or failed."""

    def __init__(self, out: Path | None, figures: bool = True) -> None:
        self.out, self.figures, self.written, self.failed = out, figures, [], []
        self.headlines: list[Table] = []  # printed first (the speedup tables)
        self.lines: list[str] = []  # printed after them (noise floor, drift)

    def note(self, text: str) -> None:
        print(f"note: {text}", file=sys.stderr)

    def make(self, artefact: Artefact, inputs: Inputs, tag: str = "") -> Any:
        """``artefact`` of ``inputs``: None when it does not apply (silently), when its inputs are
        absent (a note) or when it fails (reported; the others are still made)."""
        label = artefact.label + tag
        if artefact.kind == "figure" and not self.figures:  # --tables-only
            return None
        try:
            if not artefact.applies(inputs):
                return None
            result = artefact.build(inputs)
            if result is None:
                self.note(f"{label}: skipped (its inputs are not in these records)")
                return None
            if artefact.kind == "table":
                if result.name != artefact.name:
                    raise ValueError(f"{artefact.key} returned a table named {result.name!r}")
                result.name += inputs.suffix
                if inputs.suffix:
                    result.caption += f" Scenario: {inputs.suffix.lstrip('-')}."
            if self.out is not None:
                self.written += (write_table(result, self.out / "tables") if artefact.kind == "table"
                                 else save_figure(result, self.out / "figures", artefact.name + inputs.suffix))
            lines = artefact.lines(result, inputs) if artefact.lines is not None else []
        except Exception:
            self.failed.append(label)
            print(f"error: {label} failed:\n{traceback.format_exc()}", file=sys.stderr)
            return None
        if artefact.headline:
            self.headlines.append(result)
        self.lines += lines
        return result


def options(args: argparse.Namespace) -> Inputs:
    """The inputs every scope shares: the CLI's options and the papers' numbers."""
    return Inputs(paper=None if args.no_paper else load_paper_numbers(), pooling=args.pooling, baseline=args.baseline,
                  drift_threshold=getattr(args, "drift_threshold", DRIFT_THRESHOLD),
                  min_new_tokens=args.min_new_tokens, trace_pair=args.trace_pair, trace_gamma=args.trace_gamma,
                  trace_prompt=args.trace_prompt)


def analyse(df: pd.DataFrame, out: Path | None, args: argparse.Namespace) -> Report:
    """Every registered artefact of ``df`` (already filtered) into ``out`` (``None``: only those whose
    result reaches the terminal, ``terminal``), scope by scope (``analysis.artefacts``)."""
    report = Report(out, figures=not getattr(args, "tables_only", False))
    shared = options(args)
    same_vocab = df[df["hetero"].isna()]  # GammaTune's artefacts compare γ policies on one vocabulary
    normalised = drift_normalised(same_vocab)  # one probe reference per target over the whole sweep
    in_scenario = sorted(artefacts(SCENARIO), key=lambda a: not a.terminal)  # what the terminal shows first
    for suffix, sub in scenarios(same_vocab):
        inputs = replace(shared, records=sub, suffix=suffix,
                         normalised=None if normalised is None else normalised.loc[sub.index])
        for artefact in in_scenario:
            if out is not None or artefact.terminal:
                report.make(artefact, inputs, suffix or " (all records)")
    report.lines += drift_summary(df, shared.drift_threshold)
    if out is None:
        return report
    for artefact in artefacts(SWEEP):
        report.make(artefact, replace(shared, records=df))
    latency = getattr(args, "latency", None) or next(
        (Path(d) / "latency" for d in _folders(args) if (Path(d) / "latency").is_dir()), None)
    calibrations = load_calibrations(latency)
    for suffix, part in setting_partitions(df):
        inputs = replace(shared, records=part, suffix=suffix, calibrations=calibrations)
        for artefact in artefacts(SETTING):
            report.make(artefact, inputs, suffix)
    folders = _folders(args)
    if len(folders) == 1:  # the replay artefacts are made for a single folder only
        replay_artefacts(report, replace(shared, records=df), Path(folders[0]))
    return report


def replay_artefacts(report: Report, inputs: Inputs, root: Path) -> None:
    """The artefacts of the replay rows under ``root`` (the γ-policy lab's, Leviathan et al.'s
    prediction, Table 2 across η and δ) and of its records (``inputs.records``; None: rows only)."""
    inputs = replace(inputs, replay=load_replay(root), cost_ratios=load_cost_ratios(root))
    for artefact in artefacts(REPLAY):
        report.make(artefact, inputs)


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
    # a pair run on the CPU in one folder and on a GPU in another is two pairs, in two dtypes too (``split_runs``)
    return split_runs(pd.concat(frames, ignore_index=True)) if frames else load_records(roots[0])


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


def replay_only(results_dir: Path, out: Path | None, args: argparse.Namespace) -> int | None:
    """A folder of replay rows (``python -m runners.replay grid``) and no records: the oracle table to
    the terminal and, unless ``--print-only``, every replay artefact (``replay_artefacts``); the exit
    status, or ``None`` without replay rows."""
    rows = load_replay(results_dir)
    if rows.empty:
        return None
    report = Report(out, figures=not getattr(args, "tables_only", False))
    inputs = replace(options(args), replay=rows)
    oracle = get("tables/replay_oracle")
    table = report.make(oracle, inputs)
    if out is not None:
        inputs = replace(inputs, cost_ratios=load_cost_ratios(results_dir))
        for artefact in artefacts(REPLAY):
            if artefact is not oracle:
                report.make(artefact, inputs)
        print(f"wrote {len(report.written)} files under {out}", file=sys.stderr)
    if table is not None:
        print(to_markdown(table.display, table.caption))
    return 1 if report.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print(listing())
        return 0
    try:
        df, out = load(args, parser)
    except DuplicateRecords as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = args.wandb or " ".join(_folders(args))
    if df.empty:
        if len(_folders(args)) == 1:
            status = replay_only(Path(_folders(args)[0]), out, args)
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
    report = analyse(df, out, args)
    for table in report.headlines:
        print(f"## {table.name}\n")
        print(to_markdown(table.display, table.caption))
    if not report.headlines:
        print("(no speedup table: these records hold no baseline runs)")
    for line in report.lines:
        print(line)
    if out is not None:
        print(f"wrote {len(report.written)} files under {out}", file=sys.stderr)
    return 1 if report.failed else 0
