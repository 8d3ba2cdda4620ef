"""GammaTune's figures from a records frame (matplotlib, Agg backend).

Each function returns a ``Figure`` (or ``None`` when its inputs are absent);
``analysis.render.save_figure`` writes it as PNG and PDF.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.metrics import (
    POOLINGS,
    check_pooling,
    mean_std,
    method_label,
    ordered_methods,
)
from analysis.uncertainty import Bootstrap, BootstrapSpec, mean_of


def _cells(df: pd.DataFrame, pooling: str, boot: BootstrapSpec | None) -> pd.DataFrame:
    """Per (pair, method, γ): ``tokens_per_s`` and its paired bootstrap ``estimate`` (``analysis.uncertainty``)."""
    cells = Bootstrap(df, pooling, boot).cells(df[df["pair"].notna() & df["method"].notna()],
                                               ["pair", "method", "gamma_init"])
    return cells.assign(tokens_per_s=[e.point for e in cells["estimate"]])


def _error(point: float, interval: tuple[float, float]) -> tuple[float, float]:
    """Matplotlib's asymmetric error bar (below, above) of an interval; 0 where it is not finite."""
    lo, hi = interval
    return (point - lo if np.isfinite(lo) else 0.0, hi - point if np.isfinite(hi) else 0.0)


def plot_throughput(df: pd.DataFrame, pooling: str = "pooled", boot: BootstrapSpec | None = None) -> Figure | None:
    """GammaTune Figure 1: average tokens/s per method and pair; bar = mean over initial γ of each
    job's throughput (``analysis.tables.throughput_table``'s Tok/s); black error bar = its 95 % paired
    bootstrap CI over prompt turns (``analysis.uncertainty``); grey band = sample std (ddof=1) across
    γ (the paper's error bar). An A/A twin is drawn beside its original, labelled ``(A/A twin)``."""
    check_pooling(pooling)
    cells = _cells(df, pooling, boot)
    if cells.empty:
        return None
    pairs = sorted(cells["pair"].unique())
    methods = ordered_methods(cells["method"].unique())
    width = 0.8 / len(methods)
    fig = Figure(figsize=(max(6.0, 1.6 * len(pairs) + 2), 4.0))
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(pairs))
    for i, method in enumerate(methods):
        per_pair = [cells[(cells["pair"] == p) & (cells["method"] == method)] for p in pairs]
        means = [mean_of(rows["estimate"]) for rows in per_pair]
        points = [m.point for m in means]
        stds = [mean_std(rows["tokens_per_s"])[1] for rows in per_pair]  # NaN (a single γ, AR): no band
        ci = np.array([_error(m.point, m.interval()) if np.isfinite(m.point) else (0.0, 0.0) for m in means]).T
        at = x + (i - (len(methods) - 1) / 2) * width
        ax.bar(at, points, width, yerr=stds, error_kw={"ecolor": "0.6", "elinewidth": 4, "alpha": 0.6},
               label=method_label(method))
        ax.errorbar(at, points, yerr=ci, fmt="none", ecolor="black", elinewidth=1, capsize=2)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)  # room for the legend above the error bars
    ax.set_xticks(x)
    ax.set_xticklabels(pairs, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.set_title("Average throughput (black: 95 % bootstrap CI over prompt turns; grey: std across initial γ)",
                 fontsize=9)
    ax.legend(fontsize=7, ncol=min(len(methods), 4))
    ax.text(0.0, -0.3, POOLINGS[pooling], transform=ax.transAxes, fontsize=7, va="top")
    return fig


def plot_sensitivity(df: pd.DataFrame, pooling: str = "pooled", boot: BootstrapSpec | None = None) -> Figure | None:
    """Tokens/s against initial γ: one panel per pair, one curve per method, each point with its 95 %
    paired bootstrap CI over prompt turns (``analysis.uncertainty``); a method without an initial γ
    (AR) is a dashed horizontal line in a band (its CI)."""
    check_pooling(pooling)
    cells = _cells(df, pooling, boot)
    if cells.empty or cells["gamma_init"].notna().sum() == 0:
        return None
    pairs = sorted(cells["pair"].unique())
    ncols = min(len(pairs), 2)
    nrows = math.ceil(len(pairs) / ncols)
    fig = Figure(figsize=(5.0 * ncols, 3.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, pair in zip(axes, pairs, strict=False):
        sub = cells[cells["pair"] == pair]
        methods = ordered_methods(sub["method"].unique())
        gammas = sub["gamma_init"].dropna()
        dodge = 0.01 * (gammas.max() - gammas.min() or 1.0)  # side by side, so the error bars do not hide each other
        for i, method in enumerate(methods):
            rows = sub[sub["method"] == method].sort_values("gamma_init")
            if rows["gamma_init"].isna().all():
                level = mean_of(rows["estimate"])
                ax.axhline(level.point, ls="--", lw=1, color="gray", label=method_label(method))
                lo, hi = level.interval()
                if np.isfinite(lo):
                    ax.axhspan(lo, hi, color="gray", alpha=0.15, lw=0)
            else:
                rows = rows[rows["gamma_init"].notna()]
                ci = np.array([_error(e.point, e.interval()) for e in rows["estimate"]]).T
                at = rows["gamma_init"] + (i - (len(methods) - 1) / 2) * dodge
                ax.errorbar(at, rows["tokens_per_s"], yerr=ci, marker="o", ms=3, capsize=1.5, lw=1, elinewidth=0.8,
                            label=method_label(method))
        ax.set_title(pair, fontsize=9)
        ax.set_xticks(sorted(sub["gamma_init"].dropna().unique()))
        ax.set_xlabel("initial γ")
        ax.set_ylabel("tokens/s")
        ax.legend(fontsize=7)
    for ax in axes[len(pairs):]:
        ax.set_visible(False)
    fig.suptitle(f"Sensitivity to the initial γ ({POOLINGS[pooling]}; error bars: 95 % bootstrap CI over prompt "
                 "turns)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_trace(trace: pd.DataFrame, meta: dict | None = None) -> Figure | None:
    """GammaTune Figure 2a: accepted draft tokens per round (top) and the γ chosen
    per round (bottom) for one prompt, one line per method (``tables.trace_frame``)."""
    if trace.empty:
        return None
    fig = Figure(figsize=(8.0, 5.0))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for method in ordered_methods(trace["method"].unique()):
        rows = trace[trace["method"] == method]
        top.plot(rows["round"], rows["accepted"], drawstyle="steps-mid", marker=".", ms=3, label=method_label(method))
        bottom.plot(rows["round"], rows["gamma"], drawstyle="steps-mid", marker=".", ms=3, label=method_label(method))
    for ax in (top, bottom):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    top.set_ylabel("accepted tokens")
    bottom.set_ylabel("γ")
    bottom.set_xlabel("round")
    top.legend(fontsize=7)
    if meta:
        gamma = meta.get("gamma_init")
        gamma = "—" if gamma is None or gamma != gamma else f"{gamma:g}"
        top.set_title(f"{meta.get('pair')} · initial γ {gamma} · prompt {meta.get('prompt_id')} "
                      f"(turn {meta.get('turn')})", fontsize=9)
    fig.tight_layout()
    return fig
