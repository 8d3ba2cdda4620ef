"""Where the time goes: the per-record breakdown (``specbench.records``: ``ttft_ms``, ``draft_ms``,
``verify_ms``, ``overhead_ms``, ``predicted_wall_ms``) as a table and a stacked-bar figure per
pair × method (× cross-vocabulary rule, task, temperature, initial γ), and how the latency a user sees is spread
over the prompt turns (``latency_percentiles_table``: TTFT and TPOT percentiles, as serving benchmarks report them).

Every cell pools its records: totals over the records, then per generated token (ms/token) and as
shares of the time after the first token (``wall − TTFT``). The overhead per round is the total
overhead over the total number of speculative rounds (the harness's own cost; the target of issue
16 is ≤ 1 % of a round). The predicted wall time (the pair's calibrated latency model charged with
the records' own rounds) is shown beside the measured one when every record of the cell has it.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.artefacts import SETTING, artefact
from analysis.metrics import fmt_mean_std, fmt_num, method_labels, ordered_methods
from analysis.render import Table

#: the percentiles of the latency table (vLLM's serving benchmark reports the median and p99 by default)
PERCENTILES = (50, 90, 99)
KEYS = ["pair", "method", "hetero", "task", "temperature", "gamma_init"]
PARTS = ("ttft", "draft", "verify", "overhead")


def breakdown_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (``KEYS``) of the records that carry a breakdown; empty when none do."""
    data = df[df["overhead_ms"].notna() & df["pair"].notna() & df["method"].notna()] if "overhead_ms" in df else df[:0]
    if "hetero" not in data:
        data = data.assign(hetero=None)
    rows: list[dict[str, Any]] = []
    for values, group in data.groupby(KEYS, dropna=False, sort=True):
        row: dict[str, Any] = dict(zip(KEYS, values, strict=True))
        tokens = float(group["new_tokens"].sum())
        after = float((group["wall_ms"] - group["ttft_ms"]).sum())
        sums = {p: float(group[f"{p}_ms"].sum()) for p in PARTS}
        rounds = float(group["rounds"].fillna(0).sum())
        predicted = group["predicted_wall_ms"]
        row.update(
            n_records=len(group), new_tokens=int(tokens), rounds=int(rounds),
            wall_s=float(group["wall_ms"].sum()) / 1000.0,
            **{f"{p}_ms_per_token": sums[p] / tokens if tokens else math.nan for p in PARTS},
            **{f"{p}_share": sums[p] / after if after > 0 else math.nan for p in ("draft", "verify", "overhead")},
            unaccounted_ms=after - sums["draft"] - sums["verify"] - sums["overhead"],
            overhead_ms_per_round=sums["overhead"] / rounds if rounds else math.nan,
            round_ms=after / rounds if rounds else math.nan,
            predicted_wall_s=float(predicted.sum()) / 1000.0 if predicted.notna().all() else math.nan,
        )
        row["measured_over_predicted"] = row["wall_s"] / row["predicted_wall_s"] if row["predicted_wall_s"] else math.nan
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    order = {m: i for i, m in enumerate(ordered_methods(out["method"]))}
    out["_m"] = out["method"].map(order)
    return out.sort_values(["pair", "task", "temperature", "_m", "gamma_init"], na_position="first").drop(columns="_m")


def _pct(v: float) -> str:
    return fmt_mean_std(100.0 * v, None, " %", 1)


@artefact("tables/time_breakdown", "time breakdown table", scope=SETTING, needs=("records",),
          about="where the time goes per cell: TTFT, draft, verify, overhead per token and as shares; predicted wall")
def time_breakdown_table(df: pd.DataFrame) -> Table | None:
    """The breakdown per pair × method × task × temperature × initial γ (module docstring)."""
    data = breakdown_frame(df)
    if data.empty:
        return None
    display = pd.DataFrame({
        "Pair": data["pair"], "Method": data["method"].map(method_labels(df)),
        "Hetero": data["hetero"].map(lambda v: v if isinstance(v, str) else ""), "Task": data["task"],
        "T": data["temperature"].map(lambda v: fmt_num(v, 1)), "γ": data["gamma_init"].map(lambda v: fmt_num(v, 0)),
        "n": data["n_records"],
        "TTFT ms/tok": data["ttft_ms_per_token"].map(lambda v: fmt_num(v, 2)),
        "draft ms/tok": data["draft_ms_per_token"].map(lambda v: fmt_num(v, 2)),
        "verify ms/tok": data["verify_ms_per_token"].map(lambda v: fmt_num(v, 2)),
        "overhead ms/tok": data["overhead_ms_per_token"].map(lambda v: fmt_num(v, 2)),
        "draft": data["draft_share"].map(_pct), "verify": data["verify_share"].map(_pct),
        "overhead": data["overhead_share"].map(_pct),
        "overhead ms/round": data["overhead_ms_per_round"].map(lambda v: fmt_num(v, 2)),
        "round ms": data["round_ms"].map(lambda v: fmt_num(v, 1)),
        "wall s": data["wall_s"].map(lambda v: fmt_num(v, 2)),
        "predicted s": data["predicted_wall_s"].map(lambda v: fmt_num(v, 2)),
    })
    caption = (
        "Where the time goes, per cell (records pooled). ms/tok: milliseconds per generated token spent in the "
        "target's prefill (TTFT), the drafter, the target's verification forwards and everything else (overhead: "
        "acceptance, cache crops, policy, bookkeeping); draft / verify / overhead %: shares of the time after the "
        "first token; overhead ms/round and round ms: per speculative round; wall s: measured; predicted s: the "
        "pair's calibrated latency model charged with the same rounds (blank without one)."
    )
    return Table("time_breakdown", caption, display, data.reset_index(drop=True))


@artefact("figures/time_breakdown", "time breakdown figure", scope=SETTING, needs=("records",),
          about="where the time goes: stacked bars of ms per generated token (TTFT, draft, verify, overhead) per cell")
def plot_time_breakdown(df: pd.DataFrame) -> Figure | None:
    """Stacked horizontal bars, one per cell: ms per generated token in TTFT, draft, verify, overhead."""
    data = breakdown_frame(df)
    if data.empty:
        return None
    label = method_labels(df)
    labels = [
        f"{r.pair} · {label(r.method)}" + (f" · {r.hetero}" if isinstance(r.hetero, str) else "")
        + (f" · γ={int(r.gamma_init)}" if np.isfinite(r.gamma_init) else "")
        + (f" · {r.task}" if data["task"].nunique() > 1 else "")
        for r in data.itertuples()
    ]
    fig = Figure(figsize=(8.0, 0.9 + 0.38 * len(data)))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(data))
    left = np.zeros(len(data))
    colors = {"ttft": "#9e9e9e", "draft": "#4c72b0", "verify": "#dd8452", "overhead": "#c44e52"}
    for part in PARTS:
        width = data[f"{part}_ms_per_token"].to_numpy(dtype=float)
        ax.barh(y, width, left=left, color=colors[part], label="TTFT" if part == "ttft" else part)
        left += np.nan_to_num(width)
    predicted = data["predicted_wall_s"] * 1000.0 / data["new_tokens"]
    if predicted.notna().any():
        ax.scatter(predicted, y, marker="|", s=200, color="black", label="predicted (latency model)", zorder=3)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per generated token")
    ax.set_title("Where the time goes (records pooled per cell)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return fig


@artefact("tables/latency_percentiles", "latency percentiles table", scope=SETTING, needs=("records",),
          about="TTFT and TPOT per cell over its prompt turns: mean and 50th / 90th / 99th percentiles (ms)")
def latency_percentiles_table(df: pd.DataFrame) -> Table | None:
    """TTFT and TPOT (``specbench.records``: ``ttft_ms``, ``tpot_ms``) per pair × method × task × temperature ×
    initial γ: the mean and ``PERCENTILES`` over the cell's records (one per prompt turn), as vLLM's serving
    benchmark reports a run (``benchmarks/benchmark_serving.py: calculate_metrics``: ``np.mean`` and
    ``np.percentile``, linear interpolation between order statistics; a turn of one new token has no TPOT and
    counts for TTFT only, as there). A tail percentile of few turns is an interpolation between the largest ones:
    read it with ``n``."""
    data = df[df["pair"].notna() & df["method"].notna()] if {"pair", "method", "ttft_ms"} <= set(df) else df[:0]
    if data.empty:
        return None
    if "hetero" not in data:
        data = data.assign(hetero=None)
    rows: list[dict[str, Any]] = []
    for values, group in data.groupby(KEYS, dropna=False, sort=True):
        row: dict[str, Any] = {**dict(zip(KEYS, values, strict=True)), "n_records": len(group)}
        for metric in ("ttft_ms", "tpot_ms"):
            x = group[metric].dropna().to_numpy(dtype=float) if metric in group else np.array([])
            row[f"mean_{metric}"] = float(x.mean()) if len(x) else math.nan
            row.update({f"p{p}_{metric}": float(np.percentile(x, p)) if len(x) else math.nan for p in PERCENTILES})
        rows.append(row)
    out = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(ordered_methods(out["method"]))}
    out = out.assign(_m=out["method"].map(order)).sort_values(
        ["pair", "task", "temperature", "_m", "gamma_init"], na_position="first").drop(columns="_m")
    display = pd.DataFrame({
        "Pair": out["pair"], "Method": out["method"].map(method_labels(df)),
        "Hetero": out["hetero"].map(lambda v: v if isinstance(v, str) else ""), "Task": out["task"],
        "T": out["temperature"].map(lambda v: fmt_num(v, 1)), "γ": out["gamma_init"].map(lambda v: fmt_num(v, 0)),
        "n": out["n_records"],
        **{f"{name} {stat}": out[f"{stat}_{metric}"].map(lambda v: fmt_num(v, 1))
           for name, metric in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"))
           for stat in ("mean", *(f"p{p}" for p in PERCENTILES))},
    })
    caption = ("Latency per cell over its prompt turns, in ms: time to first token (TTFT) and time per output token "
               "after it (TPOT), mean and percentiles (numpy's linear interpolation, as vLLM's serving benchmark).")
    return Table("latency_percentiles", caption, display, out.reset_index(drop=True))
