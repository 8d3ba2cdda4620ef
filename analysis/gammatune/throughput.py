"""GammaTune Figure 1 (throughput per method and pair, as a table with speedup over AR and as a bar
chart) and the sensitivity of throughput to the initial γ (a figure), each number with its 95 %
paired jackknife CI over prompt turns (``analysis.uncertainty``).

Pure: a records frame in, a ``Table`` or a matplotlib ``Figure`` (Agg backend; ``analysis.render.
save_figure`` writes PNG and PDF) out, ``None`` when the inputs are absent.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.artefacts import SCENARIO, artefact
from analysis.comparison import modeled_data, notes, weigh
from analysis.metrics import (
    POOLINGS,
    check_pooling,
    fmt_mean_std,
    fmt_num,
    is_aa_twin,
    is_ar,
    mean_std,
    method_labels,
    ordered_methods,
)
from analysis.modeled import OUTSIDE_MARK, modeled_frame
from analysis.noise_floor import SAME_WORK_MARK, aa_bands, same_work
from analysis.render import Table
from analysis.uncertainty import Jackknife, fmt_ci, mean_of, unit_keys


@artefact("tables/gammatune_throughput", "throughput table", scope=SCENARIO,
          needs=("records", "pooling"),
          about="GammaTune Figure 1 as a table: tokens/s and speedup over AR per pair and method, 95 % CIs")
def throughput_table(df: pd.DataFrame, pooling: str = "pooled", modeled: bool = True) -> Table | None:
    """GammaTune Figure 1 as a table, with speedup over AR and the uncertainty of both.

    Per pair and method (A/A twins left out): ``Tok/s`` = mean over initial γ of each γ's throughput
    (``pooling``; a single cell for AR); ``Speedup vs AR`` = mean over γ of ``T(method, γ) /
    A(method, γ)``, with ``A`` the AR reference of the same records: their own (``ar_tokens_per_s``
    and ``ar_wall_ms``, the AR decode each record's ``speedup`` divides by: ``ar_source`` paired,
    decoded, cache or self), pooled the same way over the same prompt turns, when every record of the
    cell has one; else the throughput of the pair's AR job (``method`` ar); else empty. Both weighed by
    ``analysis.comparison.weigh`` (interval; ``≈`` in the pair's ranking by Tok/s, by speedup; the pair's A/A
    gate, ``aa_band`` in ``data``). ``data``: one row per (pair, method) (``scope`` "mean over γ") and per (pair,
    method, γ) (``scope`` "γ"). None when only AR ran.

    Where the records carry modeled walls (``analysis.modeled``), a column ``Speedup modeled``: the same speedup of
    the modeled records (``modeled=False`` computes it), ``✗`` when outside the measured speedup's 95 % CI;
    ``data``: ``modeled_speedup_vs_ar``, ``modeled_inside``."""
    check_pooling(pooling)
    rows_df = df[df["pair"].notna() & df["method"].notna() & ~is_aa_twin(df["method"])]
    if rows_df.empty or is_ar(rows_df).all():
        return None
    jackknife = Jackknife(df, pooling)
    bands = aa_bands(df, pooling, jackknife)
    copies = same_work(rows_df)  # (pair, method) -> the method whose work it did: shown, never ranked
    data = _cells_over_gamma(rows_df, jackknife, pooling)
    model = modeled_data(modeled_frame(df) if modeled else None,
                         lambda records: throughput_table(records, pooling, modeled=False))
    keys = [(p, m, sc, g if np.isfinite(g) else None) for p, m, sc, g in
            zip(data["pair"], data["method"], data["scope"], data["gamma_init"], strict=True)]
    overlay = (dict(zip([(p, m, sc, g if np.isfinite(g) else None) for p, m, sc, g in
                         zip(model["pair"], model["method"], model["scope"], model["gamma_init"], strict=True)],
                        model["speedup_vs_ar"], strict=True)) if model is not None else None)
    weighed = {}
    for stat in ("tokens", "speedup"):
        weighed[stat] = cells = weigh(dict(zip(keys, data[stat], strict=True)), bands,
                                      {k: copies[k[:2]] for k in keys if k[:2] in copies},
                                      overlay if stat == "speedup" else None, ranked=lambda key: key[2] != "γ")
        column = "tokens_per_s" if stat == "tokens" else "speedup_vs_ar"
        data[column] = [cells[k].estimate.point for k in keys]
        data[f"{column}_lo"], data[f"{column}_hi"] = [cells[k].interval[0] for k in keys], [cells[k].interval[1]
                                                                                             for k in keys]
        data[f"{column}_rank"] = pd.array([cells[k].rank for k in keys], dtype="Int64")
        data[f"{column}_resolved"] = [cells[k].resolved for k in keys]
        data[f"_{stat}_mark"] = [cells[k].mark for k in keys]
    data["aa_band"] = [bands[p].band if p in bands else math.nan for p in data["pair"]]
    data["same_work_as"] = [copies.get((p, m)) for p, m in zip(data["pair"], data["method"], strict=True)]
    if model is not None:
        data["modeled_speedup_vs_ar"] = [weighed["speedup"][k].modeled for k in keys]
        data["modeled_inside"] = [weighed["speedup"][k].modeled_inside for k in keys]
    order = {m: i for i, m in enumerate(ordered_methods(data["method"]))}
    data = data.sort_values(["pair", "method", "scope", "gamma_init"], key=lambda s: s.map(order) if s.name == "method"
                            else s, na_position="first").reset_index(drop=True)
    label = method_labels(df)
    caption = (
        f"Throughput and speedup over AR per method (GammaTune Figure 1 as a table), {POOLINGS[pooling]}: Tok/s = "
        "mean over initial γ of each γ's throughput; Speedup vs AR = mean over initial γ of that throughput ÷ the AR "
        "reference's on the same prompt turns (column AR reference: the records' own ar_source, else the pair's AR "
        "job). A/A twins are not rows here (noise_floor). "
        + notes(jackknife, "within the pair (by Tok/s; by speedup)", dict(sorted(bands.items())), bool(copies),
                [weighed["speedup"][k] for k in keys if k[2] != "γ"] if model is not None else None)
    )
    display = _throughput_display(data[data["scope"] == "mean over γ"], model is not None, label)
    data = data.drop(columns=["tokens", "speedup", "_tokens_mark", "_speedup_mark"])
    return Table("gammatune_throughput", caption, display.reset_index(drop=True), data)


def _cells_over_gamma(rows_df: pd.DataFrame, jackknife: Jackknife, pooling: str) -> pd.DataFrame:
    """``throughput_table``'s typed cells: per (pair, method, γ) and per (pair, method) over γ, the Tok/s and
    speedup ``Estimate``s (``tokens``, ``speedup``), the AR reference they divide by and the counts."""
    ar_jobs = rows_df[rows_df["method"] == "ar"]
    long = []
    for (pair, method, gamma), group in rows_df.groupby(["pair", "method", "gamma_init"], dropna=False, sort=True):
        own = jackknife.estimate(group, ar=True)
        sources = sorted(set(group["ar_source"].dropna().astype(str))) if "ar_source" in group else []
        if not np.isfinite(own.point) and not ar_jobs[ar_jobs["pair"] == pair].empty:
            own, sources = jackknife.estimate(ar_jobs[ar_jobs["pair"] == pair]), ["AR job"]
        tokens = jackknife.estimate(group)
        long.append({"pair": pair, "method": method, "gamma_init": gamma, "scope": "γ",
                     "tokens": tokens, "speedup": tokens / own,
                     "ar_reference": " ".join(sources) if np.isfinite(own.point) else "",
                     "n_turns": len(set(unit_keys(group, pooling))), "n_records": len(group)})
    per_gamma = pd.DataFrame(long)
    for (pair, method), group in per_gamma.groupby(["pair", "method"], sort=True):
        records = rows_df[(rows_df["pair"] == pair) & (rows_df["method"] == method)]
        long.append({"pair": pair, "method": method, "gamma_init": math.nan, "scope": "mean over γ",
                     "tokens": mean_of(group["tokens"]), "speedup": mean_of(group["speedup"]),
                     "ar_reference": " ".join(sorted({s for v in group["ar_reference"] for s in v.split(" ") if s})),
                     "n_gamma": int(group["gamma_init"].notna().sum()),
                     "n_turns": len(set(unit_keys(records, pooling))), "n_records": len(records)})
    return pd.DataFrame(long)


def _throughput_display(shown: pd.DataFrame, modeled: bool, label: Callable[[str], str]) -> pd.DataFrame:
    """The reader's frame of ``throughput_table``: its mean-over-γ rows (``shown``)."""
    return pd.DataFrame({
        "Pair": shown["pair"],
        "Method": [label(m) + (f" ({SAME_WORK_MARK} {label(o)})" if isinstance(o, str) else "")
                   for m, o in zip(shown["method"], shown["same_work_as"], strict=True)],
        "Tok/s": [fmt_num(e.point, 1) for e in shown["tokens"]],
        "Tok/s 95 % CI": [fmt_ci(e.interval(), 1) + m for e, m in zip(shown["tokens"], shown["_tokens_mark"], strict=True)],
        "Speedup vs AR": [fmt_mean_std(e.point) for e in shown["speedup"]],
        "Speedup 95 % CI": [fmt_ci(e.interval(), 2, "×") + m for e, m in zip(shown["speedup"], shown["_speedup_mark"],
                                                                             strict=True)],
        **({"Speedup modeled": [fmt_mean_std(v) + (OUTSIDE_MARK if f is False else "") if np.isfinite(v) else ""
                                for v, f in zip(shown["modeled_speedup_vs_ar"], shown["modeled_inside"], strict=True)]}
           if modeled else {}),
        "AR reference": shown["ar_reference"], "γ values": shown["n_gamma"].astype("Int64"),
        "Prompt turns": shown["n_turns"], "n": shown["n_records"],
    })


def _cells(df: pd.DataFrame, pooling: str) -> pd.DataFrame:
    """Per (pair, method, γ): ``tokens_per_s`` and its paired jackknife ``estimate`` (``analysis.uncertainty``)."""
    cells = Jackknife(df, pooling).cells(df[df["pair"].notna() & df["method"].notna()],
                                         ["pair", "method", "gamma_init"])
    return cells.assign(tokens_per_s=[e.point for e in cells["estimate"]])


def _error(point: float, interval: tuple[float, float]) -> tuple[float, float]:
    """Matplotlib's asymmetric error bar (below, above) of an interval; 0 where it is not finite."""
    lo, hi = interval
    return (point - lo if np.isfinite(lo) else 0.0, hi - point if np.isfinite(hi) else 0.0)


@artefact("figures/gammatune_fig1_throughput", "throughput figure", scope=SCENARIO,
          needs=("records", "pooling"),
          about="GammaTune Figure 1: average tokens/s per method and pair (95 % CI; std across initial γ)")
def plot_throughput(df: pd.DataFrame, pooling: str = "pooled") -> Figure | None:
    """GammaTune Figure 1: average tokens/s per method and pair; bar = mean over initial γ of each
    job's throughput (``throughput_table``'s Tok/s); black error bar = its 95 % paired
    jackknife CI over prompt turns (``analysis.uncertainty``); grey band = sample std (ddof=1) across
    γ (the paper's error bar). An A/A twin is drawn beside its original, labelled ``(A/A twin)``."""
    check_pooling(pooling)
    cells = _cells(df, pooling)
    if cells.empty:
        return None
    pairs = sorted(cells["pair"].unique())
    methods = ordered_methods(cells["method"].unique())
    label = method_labels(df)
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
               label=label(method))
        ax.errorbar(at, points, yerr=ci, fmt="none", ecolor="black", elinewidth=1, capsize=2)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)  # room for the legend above the error bars
    ax.set_xticks(x)
    ax.set_xticklabels(pairs, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.set_title("Average throughput (black: 95 % jackknife CI over prompt turns; grey: std across initial γ)",
                 fontsize=9)
    ax.legend(fontsize=7, ncol=min(len(methods), 4))
    ax.text(0.0, -0.3, POOLINGS[pooling], transform=ax.transAxes, fontsize=7, va="top")
    return fig


@artefact("figures/gammatune_sensitivity", "sensitivity figure", scope=SCENARIO,
          needs=("records", "pooling"),
          about="tokens/s against the initial γ, one panel per pair, one curve per method (95 % CIs)")
def plot_sensitivity(df: pd.DataFrame, pooling: str = "pooled") -> Figure | None:
    """Tokens/s against initial γ: one panel per pair, one curve per method, each point with its 95 %
    paired jackknife CI over prompt turns (``analysis.uncertainty``); a method without an initial γ
    (AR) is a dashed horizontal line in a band (its CI)."""
    check_pooling(pooling)
    cells = _cells(df, pooling)
    if cells.empty or cells["gamma_init"].notna().sum() == 0:
        return None
    pairs = sorted(cells["pair"].unique())
    label = method_labels(df)
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
                ax.axhline(level.point, ls="--", lw=1, color="gray", label=label(method))
                lo, hi = level.interval()
                if np.isfinite(lo):
                    ax.axhspan(lo, hi, color="gray", alpha=0.15, lw=0)
            else:
                rows = rows[rows["gamma_init"].notna()]
                ci = np.array([_error(e.point, e.interval()) for e in rows["estimate"]]).T
                at = rows["gamma_init"] + (i - (len(methods) - 1) / 2) * dodge
                ax.errorbar(at, rows["tokens_per_s"], yerr=ci, marker="o", ms=3, capsize=1.5, lw=1, elinewidth=0.8,
                            label=label(method))
        ax.set_title(pair, fontsize=9)
        ax.set_xticks(sorted(sub["gamma_init"].dropna().unique()))
        ax.set_xlabel("initial γ")
        ax.set_ylabel("tokens/s")
        ax.legend(fontsize=7)
    for ax in axes[len(pairs):]:
        ax.set_visible(False)
    fig.suptitle(f"Sensitivity to the initial γ ({POOLINGS[pooling]}; error bars: 95 % jackknife CI over prompt "
                 "turns)", fontsize=9)
    fig.tight_layout()
    return fig
