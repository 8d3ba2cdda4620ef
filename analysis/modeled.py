"""Modeled walls beside measured ones: each record's own work charged with the per-call costs
its interleaved sweep timed (``specbench.sweep_costs``; timed by ``runners.jobs.sweep_costs``).

``attach_modeled(df, root)`` adds three columns to a records frame: ``modeled_ttft_ms``, ``modeled_wall_ms`` (the
record's rounds charged with its sweep's costs) and ``modeled_ar_wall_ms`` (its AR reference's tokens — the target
alone on the same prompt — charged the same way). A record is modeled when its sweep left a ``costs.jsonl``
(``<sweep>/.specbench/costs.jsonl``, or ``costs.jsonl`` beside an exported sweep's job folders) with samples of
its pair, and it ran our own loops greedily at batch size 1 with a same-vocabulary draft model, prompt lookup,
or no draft (the target alone); otherwise the columns are NaN (transformers' loops, the hybrid and
cross-vocabulary drafters, sampling, batches: the costs of their other work are not timed). The round overhead
the fit cannot time (the loop's own work, a prompt lookup's search) is the pair's records' measured
``overhead_ms`` (and a lookup's ``draft_ms``) per round, pooled over the sweep.

``modeled_frame(df)`` is the frame with the measured times replaced by the modeled ones (``wall_ms``,
``tokens_per_s``, ``ttft_ms``, ``ar_wall_ms``, ``ar_tokens_per_s``, ``speedup``), the modeled records only: any
table computed on it is the same statistic of the modeled walls. A modeled cell is compared with the measured
cell's 95 % interval (``inside``): outside, the model is wrong for that cell — the work does not explain the
measured speedup (a cost the per-call timing misses: kernels that change with state, cache effects, the host's
drift that the interleaving did not even out) — and the tables flag it (``OUTSIDE_MARK``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specbench.drafter_kinds import DEFAULT_KIND, DRAFT_COSTS, DRAFTER_KINDS
from specbench.jackknife import t_quantile
from specbench.latency import LatencyModel
from specbench.sweep_costs import modeled_ms, read_costs, sweep_latency

MODELED_COLUMNS = ("modeled_ttft_ms", "modeled_wall_ms", "modeled_ar_wall_ms")
MODELED_ROW = "modeled"  # the Source of a table's row of modeled values
OUTSIDE_MARK = " ✗"  # a modeled value outside the measured cell's 95 % interval


def _sweeps(root: Path) -> list[tuple[Path, Path]]:
    """``(sweep folder, costs file)`` of every sweep under ``root`` that timed its costs."""
    found = []
    for path in sorted(root.rglob("costs.jsonl")):
        sweep = path.parent.parent if path.parent.name == ".specbench" else path.parent
        found.append((sweep, path))
    return found


def drafter_of(config: Mapping[str, Any] | None) -> str | None:
    """How a job's records are modeled (module docstring), from its resolved config: ``ar`` (the target alone) or
    its drafter's declared ``draft_cost`` (``specbench.drafter_kinds``: ``forward``, a same-vocabulary draft model;
    ``free``, a deterministic proposer such as prompt lookup); None when not modeled."""
    if not isinstance(config, Mapping):
        return None
    method = config.get("method") if isinstance(config.get("method"), Mapping) else {}
    runner = method.get("runner")
    if runner not in ("speculative", "ar") or method.get("loop") == "transformers":
        return None
    if float(config.get("temperature") or 0.0) != 0.0 or int(config.get("batch_size") or 1) != 1:
        return None
    if runner == "ar":
        return "ar"
    pair = config.get("pair") if isinstance(config.get("pair"), Mapping) else {}
    draft = pair.get("draft") if isinstance(pair.get("draft"), Mapping) else {}
    kind = draft.get("kind", DEFAULT_KIND) if draft else None  # a model node names no kind
    return DRAFTER_KINDS.get(kind).draft_cost if kind in DRAFTER_KINDS else None


def _configs(root: Path, job_dirs: list[str]) -> dict[str, Mapping[str, Any] | None]:
    out: dict[str, Mapping[str, Any] | None] = {}
    for job_dir in job_dirs:
        try:
            out[job_dir] = json.loads((root / job_dir / "summary.json").read_text()).get("config")
        except (OSError, ValueError):
            out[job_dir] = None
    return out


def _overhead_ms(rows: pd.DataFrame, lookup: bool) -> float:
    """The loop's own time per round, pooled over the pair's modeled records (module docstring)."""
    rounds = rows["rounds"].sum()  # the typed frame's numbers (analysis.frame): NaN skipped
    if not rounds > 0:
        return 0.0
    spent = rows["overhead_ms"].sum()
    if lookup:
        spent += rows["draft_ms"].sum()
    return float(spent / rounds)


def _fused(record: Mapping[str, Any]) -> bool:
    kernels = record.get("kernels")
    return bool(kernels.get("fused_prefill")) if isinstance(kernels, Mapping) else False


def _ar_tokens(record: Mapping[str, Any]) -> int | None:
    rate, wall = record.get("ar_tokens_per_s"), record.get("ar_wall_ms")
    if rate is None or wall is None or not (np.isfinite(rate) and np.isfinite(wall)):
        return None
    return int(round(rate * wall / 1000.0))


def attach_modeled(df: pd.DataFrame, root: str | Path) -> pd.DataFrame:
    """``df`` (the records under ``root``, ``analysis.frame.load_records``) with ``MODELED_COLUMNS`` (module
    docstring)."""
    out = df.copy()
    for col in MODELED_COLUMNS:
        out[col] = math.nan
    root = Path(root)
    if out.empty or "job_dir" not in out:
        return out
    sweeps = _sweeps(root)
    if not sweeps:  # no interleaved sweep timed its costs here: nothing to model, no summary to read
        return out
    configs = _configs(root, sorted({str(j) for j in out["job_dir"].dropna()}))
    kinds = out["job_dir"].map(lambda j: drafter_of(configs.get(str(j)))).where(out["hetero"].isna())
    for sweep, path in sweeps:
        rel = "." if sweep == root else str(sweep.relative_to(root))
        rows = read_costs(path)
        in_sweep = out["job_dir"].map(lambda j, rel=rel: rel == "." or str(j) == rel or str(j).startswith(rel + "/"))
        for pair in sorted({str(r["pair"]) for r in rows}):
            mine = in_sweep & (out["pair"] == pair) & kinds.notna()
            if not mine.any():
                continue
            spec = out[mine & kinds.isin(DRAFT_COSTS)]
            lookup = bool((kinds[spec.index] == "free").any())  # a free proposer's search is in the overhead
            latency = sweep_latency([r for r in rows if r["pair"] == pair], _overhead_ms(spec, lookup))
            for index in out.index[mine]:
                _charge(out, index, latency, kinds[index] == "forward")
    return out


def _charge(out: pd.DataFrame, index: Any, latency: LatencyModel, draft_model: bool) -> None:
    record = out.loc[index].to_dict()
    p, n = record.get("prompt_tokens"), record.get("new_tokens")
    if p is None or n is None or not (np.isfinite(p) and np.isfinite(n)) or n < 1:
        return
    drafted, accepted = list(record.get("drafted_trace") or []), list(record.get("accepted_trace") or [])
    if len(drafted) != len(accepted):
        return
    ttft, wall = modeled_ms(latency, int(p), int(n), drafted, accepted, draft_model, _fused(record))
    out.at[index, "modeled_ttft_ms"], out.at[index, "modeled_wall_ms"] = ttft, wall
    ar_n = int(n) if not drafted else _ar_tokens(record)
    if ar_n is not None and ar_n >= 1:
        out.at[index, "modeled_ar_wall_ms"] = modeled_ms(latency, int(p), ar_n, [], [], False)[1]


def has_modeled(df: pd.DataFrame) -> bool:
    return "modeled_wall_ms" in df and bool(df["modeled_wall_ms"].notna().any())


def modeled_frame(df: pd.DataFrame) -> pd.DataFrame | None:
    """The modeled records of ``df`` with their measured times replaced by the modeled ones (module docstring);
    None when none is modeled."""
    if not has_modeled(df):
        return None
    wall = df["modeled_wall_ms"]  # the typed frame's numbers (analysis.frame) and attach_modeled's floats
    keep = wall.notna() & (wall > 0)
    out = df[keep].copy()
    wall = wall[keep]
    tokens = out["new_tokens"]
    ar_wall = out["modeled_ar_wall_ms"]
    ar_tokens = (out["ar_tokens_per_s"] * out["ar_wall_ms"] / 1000.0).round()
    out["wall_ms"] = wall
    out["ttft_ms"] = out["modeled_ttft_ms"]
    out["tokens_per_s"] = tokens * 1000.0 / wall
    out["ar_wall_ms"] = ar_wall
    out["ar_tokens_per_s"] = ar_tokens * 1000.0 / ar_wall
    out["speedup"] = out["tokens_per_s"] / out["ar_tokens_per_s"]
    return out


def inside(point: float, interval: tuple[float, float]) -> bool | None:
    """Whether a modeled ``point`` lies in a measured 95 % ``interval``: None when either is not finite, or the
    interval is a point (a baseline's own cell, 1 in every replicate: no test of the model)."""
    lo, hi = interval
    if not (np.isfinite(point) and np.isfinite(lo) and np.isfinite(hi)) or hi - lo <= 1e-9 * max(1.0, abs(hi)):
        return None
    return bool(lo <= point <= hi)


def paired_agreement(intervals: list[tuple[float, float]], same_work: list[bool] | None = None) -> str:
    """The captions' count of the paired check (measured ÷ modeled, ``docs/pages/analysis.md``): in how many cells the
    interval of measured ÷ modeled excludes 1, of the cells that have one (a degenerate interval, a baseline's own
    cell, is no test) and did no other row's work (``same_work``: such a cell's model is its original's, so it is no
    second test of the costs; left out, and the count says so)."""
    flags = same_work if same_work is not None else [False] * len(intervals)
    tested = [(lo, hi) for (lo, hi), copy in zip(intervals, flags, strict=True)
              if not copy and np.isfinite(lo) and np.isfinite(hi) and hi - lo > 1e-9]
    left = sum(bool(copy) for (lo, hi), copy in zip(intervals, flags, strict=True)
               if np.isfinite(lo) and np.isfinite(hi) and hi - lo > 1e-9)
    if not tested:
        return ""
    outside = sum(lo > 1.0 or hi < 1.0 for lo, hi in tested)
    return (f"measured ÷ modeled excludes 1 in {outside} of {len(tested)} cells"
            + (f" ({left} of identical work left out)" if left else ""))


def sign_test(below: int, n: int) -> float:
    """The two-sided exact sign test of ``below`` of ``n`` under p = 1/2: twice the smaller tail, at most 1."""
    if n < 1:
        return math.nan
    tail = sum(math.comb(n, k) for k in range(min(below, n - below) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def pooled_paired(runs: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The paired check pooled across re-runs of one grid (``runs``: run name → its Table 2 ``data``): per pair, the
    cells with an interval of measured ÷ modeled that did no other row's work, over every run; how many sit below 1;
    their geometric mean − 1 (``mean_pct``, %); a two-sided sign test of "below 1 as often as above" (``sign_p``,
    exact binomial); and the runs' own geometric means' t interval (``run_lo_pct``, ``run_hi_pct``: the runs are the
    independent replicates, the cells of one run share its prompt turns). One run's count cannot show a bias of a few
    tenths of a percent that every run shares; this can."""
    cells = []
    for run, data in runs.items():
        d = data[(data["source"] == "measured") & (data["pair"] != "average")]
        d = d[(d["measured_over_modeled_hi"] - d["measured_over_modeled_lo"] > 1e-9) & d["same_work_as"].isna()]
        cells.append(d.assign(run=run))
    frame = pd.concat(cells, ignore_index=True) if cells else pd.DataFrame()
    rows = []
    for pair, g in frame.groupby("pair", sort=True):
        logs = np.log(g["measured_over_modeled"].astype(float))
        below = int((logs < 0).sum())
        per_run = logs.groupby(g["run"]).mean()
        if len(per_run) > 1:
            half = t_quantile(len(per_run) - 1) * per_run.std(ddof=1) / math.sqrt(len(per_run))
            lo, hi = per_run.mean() - half, per_run.mean() + half
        else:
            lo = hi = math.nan
        rows.append({"pair": pair, "runs": len(per_run), "cells": len(g), "below_one": below,
                     "mean_pct": 100 * math.expm1(logs.mean()),
                     "sign_p": sign_test(below, len(g)),
                     "run_lo_pct": 100 * math.expm1(lo), "run_hi_pct": 100 * math.expm1(hi)})
    return pd.DataFrame(rows)


def agreement(flags: list[bool | None]) -> str:
    """The captions' count: ``modeled inside the measured 95 % CI in N of M cells``."""
    known = [f for f in flags if f is not None]
    return f"modeled inside the measured 95 % CI in {sum(known)} of {len(known)} cells" if known else ""


TABLE2_DATA = Path("analysis") / "tables" / "gammatune_table2_speedup.data.csv"


def main(argv: list[str] | None = None) -> int:
    """``python -m analysis.modeled RUN [RUN ...]``: the paired check pooled across re-runs (``pooled_paired``) of
    each run folder's Table 2 (``TABLE2_DATA``), one line per pair; exit status 2 when a folder has none."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m analysis.modeled", description=pooled_paired.__doc__)
    ap.add_argument("runs", nargs="+", type=Path, help="committed run folders of one grid (re-runs)")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / TABLE2_DATA).is_file()]
    if missing:
        print(f"error: no {TABLE2_DATA} in {', '.join(missing)} (run `python -m analysis <folder>` first)")
        return 2
    pooled = pooled_paired({r.name: pd.read_csv(r / TABLE2_DATA) for r in args.runs})
    for row in pooled.itertuples():
        print(f"{row.pair}: measured ÷ modeled below 1 in {row.below_one} of {row.cells} cells of {row.runs} runs "
              f"(identical work left out), geometric mean {row.mean_pct:+.2f} %, runs' 95 % CI "
              f"[{row.run_lo_pct:+.2f} %, {row.run_hi_pct:+.2f} %], sign test p = {row.sign_p:.2g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

