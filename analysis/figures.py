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
    throughput_by,
)


def _cells(df: pd.DataFrame, pooling: str) -> pd.DataFrame:
    return throughput_by(df[df["pair"].notna() & df["method"].notna()], ["pair", "method", "gamma_init"], pooling)


def plot_throughput(df: pd.DataFrame, pooling: str = "pooled") -> Figure | None:
    """GammaTune Figure 1: average tokens/s per method and pair; bar = mean over
    initial γ of each job's throughput, error bar = sample std (ddof=1) across γ."""
    check_pooling(pooling)
    cells = _cells(df, pooling)
    if cells.empty:
        return None
    pairs = sorted(cells["pair"].unique())
    methods = ordered_methods(cells["method"].unique())
    width = 0.8 / len(methods)
    fig = Figure(figsize=(max(6.0, 1.6 * len(pairs) + 2), 4.0))
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(pairs))
    for i, method in enumerate(methods):
        stats = [mean_std(cells[(cells["pair"] == p) & (cells["method"] == method)]["tokens_per_s"]) for p in pairs]
        means = [s[0] for s in stats]
        errs = [s[1] for s in stats]  # NaN (a single γ, AR) draws no error bar
        ax.bar(x + (i - (len(methods) - 1) / 2) * width, means, width, yerr=errs, capsize=2, label=method_label(method))
    ax.set_xticks(x)
    ax.set_xticklabels(pairs, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.set_title("Average throughput (error bars: std across initial γ)", fontsize=10)
    ax.legend(fontsize=7, ncol=min(len(methods), 4))
    ax.text(0.0, -0.3, POOLINGS[pooling], transform=ax.transAxes, fontsize=7, va="top")
    return fig


def plot_sensitivity(df: pd.DataFrame, pooling: str = "pooled") -> Figure | None:
    """Tokens/s against initial γ: one panel per pair, one curve per method; a
    method without an initial γ (AR) is a dashed horizontal line."""
    check_pooling(pooling)
    cells = _cells(df, pooling)
    if cells.empty or cells["gamma_init"].notna().sum() == 0:
        return None
    pairs = sorted(cells["pair"].unique())
    ncols = min(len(pairs), 2)
    nrows = math.ceil(len(pairs) / ncols)
    fig = Figure(figsize=(5.0 * ncols, 3.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, pair in zip(axes, pairs, strict=False):
        sub = cells[cells["pair"] == pair]
        for method in ordered_methods(sub["method"].unique()):
            rows = sub[sub["method"] == method].sort_values("gamma_init")
            if rows["gamma_init"].isna().all():
                ax.axhline(rows["tokens_per_s"].mean(), ls="--", lw=1, color="gray", label=method_label(method))
            else:
                rows = rows[rows["gamma_init"].notna()]
                ax.plot(rows["gamma_init"], rows["tokens_per_s"], marker="o", ms=3, label=method_label(method))
        ax.set_title(pair, fontsize=9)
        ax.set_xticks(sorted(sub["gamma_init"].dropna().unique()))
        ax.set_xlabel("initial γ")
        ax.set_ylabel("tokens/s")
        ax.legend(fontsize=7)
    for ax in axes[len(pairs):]:
        ax.set_visible(False)
    fig.suptitle(f"Sensitivity to the initial γ ({POOLINGS[pooling]})", fontsize=9)
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
