"""The γ-policy leaderboard (issue 14), acceptance per position, and Leviathan et al.'s prediction.

Inputs: replay rows (``replay.jsonl``, ``runners.replay`` / ``scripts/policy_lab.py``; one row per
prompt turn, or one per cell — the sums of a cell's rows, ``prompt_id = "*"``: both give the same
pooled numbers) and, for real runs, records (``specbench.records``). Definitions:

* ``leaderboard``: per pair × task × ``max_new_tokens`` and method, the fractions of
  ``analysis.replay_table.oracle_fractions`` — throughput as a fraction of the oracle, of the best
  fixed γ in hindsight for the task (``× best fixed γ``) and per prompt — averaged over the initial
  γ, with their sample std (ddof=1) across initial γ, the spread (max − min of ``× oracle``) and
  the worst initial γ (the γ with the lowest throughput, and its ``× best fixed γ``). Rows are
  sorted by ``× best fixed γ``; references (oracle, best fixed γ) first. All predicted by the
  replay's latency model.
* ``per_position_table``: the conditional acceptance of position ``j`` of a round,
  ``Σ accepted_per_pos[j] / Σ compared_per_pos[j]`` (NeMo's per-position acceptance; the counts of
  ``specbench.records``), pooled over a method's prompts and initial γ; the per-position counts
  are recomputed from ``drafted_trace`` / ``accepted_trace`` when a row lacks them.
* ``leviathan_table``: for every fixed-γ cell (``specdecode``), the speedup Leviathan et al. (2023,
  Sec. 3.4, Thm. 3.8) predict, beside the measured one (real records: ``speedup`` over the target
  alone; replay: the latency model's prediction). One definition of each figure, shared with the
  cross-vocabulary prediction table (``analysis.prediction``): ``α`` is
  ``specbench.records.leviathan_alpha`` over the cell's rounds that drafted the full γ (accepted /
  (accepted + rounds ending in a rejection)); ``c = T_target / T_draft`` as the GammaTune paper's eq. (1) (the inverse of
  Leviathan et al.'s own ``c``), from the pair's calibration (``analysis.prediction.calibration_c``);
  the prediction is ``specbench.records.leviathan_speedup(α, γ, c)`` =
  ``(1 − α^(γ+1)) / ((1 − α)(γ/c + 1))``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.prediction import load_calibrations
from analysis.render import Table
from analysis.replay_table import GROUP, REFERENCES, oracle_fractions
from specbench.records import leviathan_alpha, leviathan_speedup

POSITIONS = 8


def _fmt(mean: float, std: float | None = None, digits: int = 3) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


# ---------------------------------------------------------------------- the leaderboard

def leaderboard_frame(fractions: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for key, group in fractions.groupby(GROUP + ["method"], dropna=False, sort=False):
        *ident, method = key
        worst = group.loc[group["tokens_per_s"].idxmin()]
        rows.append({
            **dict(zip(GROUP, ident)), "method": method, "reference": method in REFERENCES,
            "n_gammas": int(group["gamma_init"].notna().sum()),
            "x_oracle_mean": float(group["x_oracle"].mean()), "x_oracle_std": float(group["x_oracle"].std(ddof=1)),
            "x_oracle_spread": float(group["x_oracle"].max() - group["x_oracle"].min()),
            "x_best_fixed_mean": float(group["x_best_fixed"].mean()),
            "x_best_fixed_std": float(group["x_best_fixed"].std(ddof=1)),
            "x_best_fixed_prompt_mean": float(group["x_best_fixed_prompt"].mean()),
            "worst_gamma": worst["gamma_init"], "worst_x_best_fixed": float(worst["x_best_fixed"]),
            "tokens_per_s_mean": float(group["tokens_per_s"].mean()),
            "speedup_vs_ar_mean": float(group["speedup_vs_ar"].mean()),
            "acceptance_rate_mean": float(group["acceptance_rate"].mean()),
        })
    out = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(REFERENCES)}
    out["_ref"] = [order.get(m, len(order)) for m in out["method"]]
    out = out.sort_values(GROUP + ["_ref", "x_best_fixed_mean"], ascending=[True] * len(GROUP) + [True, False],
                          kind="stable").drop(columns="_ref")
    return out.reset_index(drop=True)


def leaderboard(df: pd.DataFrame) -> Table | None:
    """The leaderboard of replay rows (module docstring); None without timed rows."""
    fractions = oracle_fractions(df)
    if fractions is None or fractions.empty:
        return None
    board = leaderboard_frame(fractions)

    def gamma_text(g: object) -> str:
        return "" if g is None or (isinstance(g, float) and math.isnan(g)) else str(int(g))

    display = pd.DataFrame({
        "pair": board["pair"], "task": board["task"], "method": board["method"],
        "× oracle (mean ± std over γ)": [_fmt(m, s) for m, s in zip(board["x_oracle_mean"], board["x_oracle_std"])],
        "spread": [_fmt(v) for v in board["x_oracle_spread"]],
        "× best fixed γ (task)": [_fmt(m, s) for m, s in zip(board["x_best_fixed_mean"], board["x_best_fixed_std"])],
        "× best fixed γ (per prompt)": [_fmt(v) for v in board["x_best_fixed_prompt_mean"]],
        "worst initial γ (× best fixed)": [
            "" if r["reference"] else f"{gamma_text(r['worst_gamma'])} ({r['worst_x_best_fixed']:.3f})"
            for _, r in board.iterrows()],
        "speedup vs AR": [_fmt(v, digits=2) for v in board["speedup_vs_ar_mean"]],
    })
    caption = ("Policy leaderboard (replay of greedy traces under the pair's calibrated latency model; predicted "
               "pooled tokens/s). Fractions of the oracle (exact DP: the best any γ policy can do on these traces), "
               "of the best fixed γ in hindsight for the whole task and per prompt; mean ± sample std (ddof=1) over "
               "the initial γ; spread = max − min of × oracle across initial γ; worst initial γ = the one with the "
               "lowest throughput. Adaptive policies restart at every prompt turn (issue 13's default); carry-over variants are marked *_carryover or transient=false.")
    return Table("policy_leaderboard", caption, display, board)


# ---------------------------------------------------------------------- per position

def _pp_lists(row: Mapping) -> tuple[list[int], list[int]]:
    comp, acc = row.get("compared_per_pos"), row.get("accepted_per_pos")
    if isinstance(comp, list) and isinstance(acc, list) and (comp or not row.get("drafted_trace")):
        return comp, acc
    from specbench.records import per_position

    pp = per_position(list(row.get("drafted_trace") or []), list(row.get("accepted_trace") or []))
    return pp["compared_per_pos"], pp["accepted_per_pos"]


def per_position_frame(df: pd.DataFrame, positions: int = POSITIONS) -> pd.DataFrame:
    rows = []
    keys = [k for k in GROUP if k in df] + ["method"]
    for key, group in df.groupby(keys, dropna=False, sort=False):
        comp, acc = np.zeros(positions), np.zeros(positions)
        for _, r in group.iterrows():
            c, a = _pp_lists(r)
            for j in range(min(positions, len(c))):
                comp[j] += c[j]
                acc[j] += a[j] if j < len(a) else 0
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))),
                     **{f"alpha_{j + 1}": (acc[j] / comp[j] if comp[j] else math.nan) for j in range(positions)},
                     **{f"compared_{j + 1}": int(comp[j]) for j in range(positions)}})
    return pd.DataFrame(rows)


def per_position_table(df: pd.DataFrame, positions: int = POSITIONS, name: str = "acceptance_per_position",
                       methods: Iterable[str] | None = None) -> Table | None:
    """Conditional acceptance per position in the round (module docstring)."""
    if df is None or df.empty or "method" not in df:
        return None
    df = df[~df["method"].isin(REFERENCES)] if methods is None else df[df["method"].isin(list(methods))]
    if df.empty:
        return None
    data = per_position_frame(df, positions)
    shown = [c for c in ("pair", "task", "method") if c in data]
    display = data[shown].copy()
    for j in range(1, positions + 1):
        display[f"α{j}"] = [_fmt(v, digits=2) for v in data[f"alpha_{j}"]]
    caption = ("Conditional acceptance of position j of a round: Σ accepted_per_pos[j] / Σ compared_per_pos[j] "
               "(a position is compared when it was drafted and every earlier one accepted; NeMo's per-position "
               "acceptance), pooled over prompts and initial γ.")
    return Table(name, caption, display, data)


# ---------------------------------------------------------------------- Leviathan et al.

def load_cost_ratios(root: str | os.PathLike) -> dict[str, float]:
    """``{pair: c}`` from every ``latency/<pair>.json`` at or under ``root`` (each ``latency`` folder read by
    ``analysis.prediction.load_calibrations``)."""
    out: dict[str, float] = {}
    for folder in sorted({p.parent for p in Path(root).rglob("*.json") if p.parent.name == "latency"}):
        out.update(load_calibrations(folder))
    return out


def leviathan_frame(df: pd.DataFrame, c_by_pair: Mapping[str, float], method: str = "specdecode") -> pd.DataFrame:
    rows = []
    fixed = df[(df["method"] == method) & df["gamma_init"].notna()]
    keys = [k for k in ("pair", "task", "source") if k in fixed] + ["gamma_init"]
    for key, group in fixed.groupby(keys, dropna=False, sort=True):
        ident = dict(zip(keys, key))
        gamma = int(ident["gamma_init"])
        # the rounds that drafted the full γ (a replay cell keeps only those: scripts/policy_lab.py cells)
        full = [(d, a) for _, r in group.iterrows()
                for d, a in zip(r.get("drafted_trace") or [], r.get("accepted_trace") or []) if d == gamma]
        alpha = leviathan_alpha([a for _, a in full], [d for d, _ in full]) if full else None
        alpha = math.nan if alpha is None else alpha
        c = c_by_pair.get(str(ident.get("pair")), math.nan)
        wall, ar_wall = group["wall_ms"].sum(), group["ar_wall_ms"].sum() if "ar_wall_ms" in group else math.nan
        measured = ar_wall / wall if wall > 0 and ar_wall and ar_wall > 0 else math.nan
        predicted = leviathan_speedup(alpha, gamma, c) if math.isfinite(alpha) and c > 0 else math.nan
        rows.append({**ident, "gamma": gamma, "alpha": alpha, "c": c, "leviathan_speedup": predicted,
                     "measured_speedup": measured, "rounds_full": len(full),
                     "acceptance_rate": group["accepted"].sum() / group["drafted"].sum() if group["drafted"].sum()
                     else math.nan})
    return pd.DataFrame(rows)


def leviathan_table(df: pd.DataFrame, c_by_pair: Mapping[str, float], name: str = "leviathan_prediction") -> Table | None:
    """Leviathan et al.'s predicted speedup beside every measured fixed-γ speedup (module docstring)."""
    if df is None or df.empty or "method" not in df or not c_by_pair:
        return None
    data = leviathan_frame(df, c_by_pair)
    if data.empty:
        return None
    display = pd.DataFrame({
        **{k: data[k] for k in ("pair", "task", "source") if k in data},
        "γ": data["gamma"], "α (measured)": [_fmt(v) for v in data["alpha"]], "c (measured)": [_fmt(v) for v in data["c"]],
        "speedup, Leviathan et al.": [_fmt(v, digits=2) for v in data["leviathan_speedup"]],
        "speedup, measured": [_fmt(v, digits=2) for v in data["measured_speedup"]],
        "measured ÷ predicted": [_fmt(m / p, digits=2) if p and math.isfinite(p) else ""
                                 for m, p in zip(data["measured_speedup"], data["leviathan_speedup"])],
    })
    caption = ("Leviathan et al. (2023, Thm. 3.8) predict a fixed-γ speedup of (1 − α^(γ+1)) / ((1 − α)(γc + 1)), "
               "written here with the GammaTune paper's c = T_target / T_draft (eq. 1; Leviathan et al.'s c is its "
               "inverse), so (1 − α^(γ+1)) / ((1 − α)(γ/c + 1)); α = accepted / (accepted + rounds ending in a "
               "rejection), c from the pair's calibration (one-token forwards). Measured: pooled speedup over the target alone (source replay: predicted by "
               "the calibrated latency model, which charges a k-token verification its measured cost; source real: "
               "wall clock). The prediction assumes verifying γ+1 tokens costs one target step.")
    return Table(name, caption, display, data)


# ---------------------------------------------------------------------- the figure

def plot_leaderboard(df: pd.DataFrame, top: int | None = None):
    """One panel per pair × task: each policy's × best fixed γ (bar: mean over initial γ; error bar:
    std; dot: worst initial γ); the oracle's level as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fractions = oracle_fractions(df)
    if fractions is None or fractions.empty:
        return None
    board = leaderboard_frame(fractions)
    panels = list(board.groupby(["pair", "task"], sort=True))
    n = len(panels)
    fig = Figure(figsize=(7.0 * min(n, 2), 0.26 * max(len(g) for _, g in panels) * ((n + 1) // 2) + 1.8))
    axes = fig.subplots((n + 1) // 2, min(n, 2), squeeze=False).ravel()
    for ax, ((pair, task), group) in zip(axes, panels):
        oracle = group.loc[group["method"] == "oracle", "x_best_fixed_mean"]
        group = group[~group["method"].isin(REFERENCES)].sort_values("x_best_fixed_mean")
        if top:
            group = group.tail(top)
        y = np.arange(len(group))
        ax.barh(y, group["x_best_fixed_mean"], xerr=group["x_best_fixed_std"].fillna(0), color="#8fb3d9", capsize=2)
        ax.plot(group["worst_x_best_fixed"], y, "o", color="#b03030", ms=3, label="worst initial γ")
        ax.axvline(1.0, color="black", lw=0.8, label="best fixed γ (task)")
        if len(oracle):
            ax.axvline(float(oracle.iloc[0]), color="gray", ls="--", lw=0.8, label="oracle")
        ax.set_yticks(y)
        ax.set_yticklabels(group["method"], fontsize=6)
        ax.set_xlabel("throughput ÷ best fixed γ in hindsight (task)", fontsize=7)
        ax.set_title(f"{pair} — {task}", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=6, loc="lower right")
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig
