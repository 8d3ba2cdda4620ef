"""The oracle table: every method's predicted throughput as a fraction of the oracle and of the
best fixed γ in hindsight, from the outputs of ``python -m runners.replay grid`` (``replay.jsonl``).

Definitions (see ``runners.replay``; this module only reads its rows):

* throughput of a cell (pair × task × ``max_new_tokens`` × method × initial γ): **pooled**
  predicted tokens/s, ``Σ new_tokens / Σ wall_ms/1000`` over its prompt turns — every
  number here is *predicted* by the latency model the replay used, not measured;
* ``oracle``: the best throughput any γ policy can reach on the traces under that model
  (a dynamic program over the drafted prefix lengths); ``oracle_agreement``: drafting
  exactly the agreement run each round; ``best_fixed_task``: the one fixed γ best for all
  the prompts; ``best_fixed_prompt``: each prompt its own best fixed γ;
* ``x_oracle = tokens_per_s / oracle``, ``x_best_fixed = tokens_per_s / best_fixed_task``,
  ``x_best_fixed_prompt = tokens_per_s / best_fixed_prompt`` (same pair, task, length);
* the summary table gives, per method, the mean ± sample std (ddof=1) of those fractions
  across initial γ, their minimum, and the initial γ with the best throughput.

Imports pandas, ``specbench.records`` (the file name and the pooled throughput) and ``analysis.render``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from analysis.render import Table
from specbench.records import REPLAY_FILE, pooled_tokens_per_s

REFERENCES = ("oracle", "oracle_agreement", "best_fixed_task", "best_fixed_prompt")
GROUP = ["pair", "task", "max_new_tokens"]


def find_replay_files(root: str | os.PathLike) -> list[Path]:
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(root.rglob(REPLAY_FILE)) if root.is_dir() else []


def load_replay(root: str | os.PathLike) -> pd.DataFrame:
    """Every ``replay.jsonl`` row at or under ``root`` (a torn last line is skipped)."""
    rows = []
    for path in find_replay_files(root):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.endswith("\n") and line.strip():
                    row = json.loads(line)
                    row["replay_file"] = str(path)
                    rows.append(row)
    return pd.DataFrame(rows)


def _pooled(group: pd.DataFrame) -> float:
    return pooled_tokens_per_s(group["new_tokens"], group["wall_ms"])


def oracle_fractions(df: pd.DataFrame) -> pd.DataFrame | None:
    """One row per pair × task × ``max_new_tokens`` × method × initial γ: pooled predicted tokens/s
    and its fractions of the references (module docstring). None without timed rows."""
    if df is None or df.empty or "wall_ms" not in df or df["wall_ms"].isna().all():
        return None
    df = df[df["wall_ms"].notna()].copy()
    for col in GROUP:
        if col not in df:
            df[col] = None
    # a reference (oracle, best fixed γ in hindsight) is one cell whatever γ its prompts used
    df["gamma_key"] = [-1 if m in REFERENCES or g is None or (isinstance(g, float) and math.isnan(g)) else int(g)
                       for m, g in zip(df["method"], df["gamma_init"])]
    rows = []
    for key, group in df.groupby(GROUP + ["method", "gamma_key"], dropna=False, sort=False):
        *ident, method, gamma = key
        used = group["gamma_init"].dropna().unique()
        rows.append({
            **dict(zip(GROUP, ident)), "method": method,
            "gamma_init": gamma if gamma >= 0 else (int(used[0]) if len(used) == 1 else None),
            "tokens_per_s": _pooled(group), "prompts": len(group),
            "acceptance_rate": (group["accepted"].sum() / group["drafted"].sum()) if group["drafted"].sum() else math.nan,
            "mean_accepted_per_round": group["accepted"].sum() / group["rounds"].sum() if group["rounds"].sum() else math.nan,
            "ar_tokens_per_s": _pooled(group.assign(wall_ms=group["ar_wall_ms"])) if "ar_wall_ms" in group
            and group["ar_wall_ms"].notna().all() else math.nan,
        })
    out = pd.DataFrame(rows)
    refs = {}
    for key, group in out.groupby(GROUP, dropna=False, sort=False):
        for ref in REFERENCES:
            hit = group[group["method"] == ref]
            refs[(*key, ref)] = float(hit["tokens_per_s"].iloc[0]) if len(hit) else math.nan
    for ref, col in (("oracle", "x_oracle"), ("oracle_agreement", "x_oracle_agreement"),
                     ("best_fixed_task", "x_best_fixed"), ("best_fixed_prompt", "x_best_fixed_prompt")):
        out[col] = [r.tokens_per_s / refs.get((*[r[g] for g in GROUP], ref), math.nan)
                    for _, r in out.iterrows()]
    out["speedup_vs_ar"] = out["tokens_per_s"] / out["ar_tokens_per_s"]
    return out


def _fmt(mean: float, std: float | None = None) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.3f}"
    return f"{mean:.3f} ± {std:.3f}"


def replay_summary(fractions: pd.DataFrame) -> pd.DataFrame:
    """Per pair × task × length × method: mean / std / min of the fractions across initial γ."""
    rows = []
    for key, group in fractions.groupby(GROUP + ["method"], dropna=False, sort=False):
        *ident, method = key
        best = group.loc[group["tokens_per_s"].idxmax()]
        rows.append({
            **dict(zip(GROUP, ident)), "method": method, "n_gammas": int(group["gamma_init"].notna().sum()),
            "tokens_per_s_mean": float(group["tokens_per_s"].mean()),
            "x_oracle_mean": float(group["x_oracle"].mean()), "x_oracle_std": float(group["x_oracle"].std(ddof=1)),
            "x_oracle_min": float(group["x_oracle"].min()),
            "x_best_fixed_mean": float(group["x_best_fixed"].mean()),
            "x_best_fixed_std": float(group["x_best_fixed"].std(ddof=1)),
            "x_best_fixed_prompt_mean": float(group["x_best_fixed_prompt"].mean()),
            "best_gamma_init": best["gamma_init"],
            "acceptance_rate_mean": float(group["acceptance_rate"].mean()),
        })
    return pd.DataFrame(rows)


def replay_table_from_frame(df: pd.DataFrame) -> Table | None:
    fractions = oracle_fractions(df)
    if fractions is None or fractions.empty:
        return None
    summary = replay_summary(fractions)
    order = {m: i for i, m in enumerate(REFERENCES)}
    summary["_ref"] = summary["method"].map(lambda m: order.get(m, -1))
    summary = summary.sort_values(GROUP + ["_ref", "method"], kind="stable").drop(columns="_ref")
    display = pd.DataFrame({
        "pair": summary["pair"], "task": summary["task"], "max new": summary["max_new_tokens"],
        "method": summary["method"],
        "× oracle (mean ± std over γ)": [_fmt(m, s) for m, s in zip(summary["x_oracle_mean"], summary["x_oracle_std"])],
        "× oracle (worst γ)": [_fmt(v) for v in summary["x_oracle_min"]],
        "× best fixed γ": [_fmt(m, s) for m, s in zip(summary["x_best_fixed_mean"], summary["x_best_fixed_std"])],
        "× best fixed γ per prompt": [_fmt(v) for v in summary["x_best_fixed_prompt_mean"]],
        "tokens/s (mean over γ)": [f"{v:.2f}" for v in summary["tokens_per_s_mean"]],
        "best initial γ": ["" if g is None or (isinstance(g, float) and math.isnan(g)) else str(int(g))
                           for g in summary["best_gamma_init"]],
    })
    caption = ("Predicted throughput (pooled tokens/s over prompts, from greedy traces and a latency model; "
               "runners.replay) as a fraction of the oracle (the best any γ policy can do on the traces) and of "
               "the best fixed γ in hindsight (one γ per task; per prompt). Mean ± sample std (ddof=1) across "
               "initial γ. Reference rows: oracle, oracle_agreement (draft exactly the agreement run), "
               "best_fixed_task, best_fixed_prompt.")
    return Table("replay_oracle", caption, display.reset_index(drop=True), fractions)


def replay_table(results_dir: str | os.PathLike | None) -> Table | None:
    """The oracle table of the replay outputs under ``results_dir`` (None when there are none)."""
    if not results_dir:
        return None
    return replay_table_from_frame(load_replay(results_dir))
