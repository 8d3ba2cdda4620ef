"""The γ-policy lab's artefacts: every γ policy replayed on greedy traces and ranked
against the oracle (the conditional acceptance per position of a round: ``analysis.acceptance``).

Inputs: replay rows (``replay.jsonl``, the output of ``python -m runners.replay grid`` and of the
policy lab; one row per prompt turn, or one per cell — the sums of a cell's rows, ``prompt_id =
"*"``: both give the same pooled numbers; this module only reads them) and, for real runs, records
(``specbench.records``). Every throughput of a replay row is *predicted* by the latency model the
replay used, not measured. Definitions:

* throughput of a cell (pair × task × ``max_new_tokens`` × method × initial γ): **pooled**
  predicted tokens/s, ``Σ new_tokens / Σ wall_ms/1000`` over its prompt turns;
* references (``REFERENCES``): ``oracle``, the best throughput any γ policy can reach on the traces
  under that model (a dynamic program over the drafted prefix lengths); ``oracle_agreement``:
  drafting exactly the agreement run each round; ``best_fixed_task``: the one fixed γ best for all
  the prompts; ``best_fixed_prompt``: each prompt its own best fixed γ;
* ``oracle_fractions``: ``x_oracle = tokens_per_s / oracle``, ``x_best_fixed = tokens_per_s /
  best_fixed_task``, ``x_best_fixed_prompt = tokens_per_s / best_fixed_prompt`` (same pair, task, length);
* ``replay_table``: per method, the mean ± sample std (ddof=1) of those fractions across initial γ,
  their minimum, and the initial γ with the best throughput;
* **the comparison rule** (``policy_comparison``: the one rule every leaderboard, README and docs
  block compares policies by): a policy at its **best initial γ** (the γ of the grid with the highest pooled
  throughput) over the best fixed γ in hindsight (``best_fixed_task``), with the **sample size** (prompt turns)
  and a **95 % t-calibrated jackknife interval over prompt turns** (delete one turn; the best initial γ chosen
  again in every replicate, so the interval carries the choice; the reference's γ is the hindsight's, chosen on
  all the turns); beside it the policy's **mean over initial γ** of the same ratio, with its interval. A policy
  **beats** the best fixed γ only when the interval at its best initial γ lies above 1, **trails** it when it
  lies below, else **ties** (``VERDICTS``);
* ``leaderboard``: per pair × task × ``max_new_tokens`` and method, that rule's columns, then the fractions
  averaged over the initial γ with their sample std (ddof=1), the spread (max − min of ``× oracle``) and the
  worst initial γ (the γ with the lowest throughput, and its ``× best fixed γ``). Rows are sorted by
  ``× best fixed γ`` at the best initial γ; references first;

Batch sizes (``runners.replay.batched``): a row may carry ``batch_size`` (none: 1) and
``gamma_mode``; every cell, reference and fraction is per batch size (a policy at B against the references
at the same B), a cell's throughput is over all its rows (``Σ new_tokens / Σ throughput_ms``,
``specbench.records.throughput_ms``: each batch's wall once; a row without a share, its own wall), a
shared-γ policy is named ``METHOD (shared γ)``. With a batch size other than 1 the tables gain a ``B``
column (with batch 1 only they are as before); the artefacts against B are ``analysis.policy_lab_batch``. At B > 1 the oracle is not a bound (``runners.replay.batched``): × oracle may exceed 1.

Leviathan et al.'s prediction beside the replayed and measured fixed-γ speedups is
``analysis.leviathan``; GammaTune Table 2 across η and δ from replayed rows, ``analysis.gammatune.knob_sweep``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.artefacts import REPLAY, artefact
from analysis.metrics import fmt_ratio
from analysis.render import Table
from analysis.uncertainty import Estimate, fmt_ci
from specbench.record_io import read_records
from specbench.records import REPLAY_FILE, THROUGHPUT_FIELDS, pooled_tokens_per_s, throughput_ms

REFERENCES = ("oracle", "oracle_agreement", "best_fixed_task", "best_fixed_prompt")
GROUP = ["pair", "task", "max_new_tokens"]
#: the batch size (``runners.replay.batched``; 1 for rows without one) is a dimension of every cell
BATCH = "batch_size"
SHARED = " (shared γ)"
#: the rule's verdicts (module docstring, "the comparison rule"): the interval at the best initial γ above 1,
#: containing 1, below 1
VERDICTS = ("beats", "ties", "trails")
#: what names one prompt turn of a replay row (the jackknife's cluster)
TURN = ["prompt_id", "turn"]
RULE_NOTE = ("Rule (analysis.policy_lab, 'the comparison rule'): a policy at its best initial γ over the best fixed γ "
             "in hindsight, pooled over the n prompt turns, with its 95 % t-calibrated jackknife interval over prompt "
             "turns (the best initial γ chosen again in every replicate); it beats the best fixed γ only when the "
             "interval lies above 1, trails it when below, else ties; beside it the mean over initial γ with its "
             "interval.")


# ---------------------------------------------------------------------- replay rows and the oracle table

def find_replay_files(root: str | os.PathLike) -> list[Path]:
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(root.rglob(REPLAY_FILE)) if root.is_dir() else []


def load_replay(root: str | os.PathLike) -> pd.DataFrame:
    """Every ``replay.jsonl`` row at or under ``root`` (a torn last line is skipped)."""
    rows = [{**row, "replay_file": str(path)} for path in find_replay_files(root) for row in read_records(path)]
    return pd.DataFrame(rows)


def _time(group: pd.DataFrame, ar: bool = False) -> list[float]:
    """Each row's (or cell's) time its throughput divides by, ``specbench.records.throughput_ms``: its share of its
    batch's wall, else its own wall (a row decoded alone); ``ar``: the AR side's; NaN where there is none. Only the
    fields it reads are handed to it (``THROUGHPUT_FIELDS``: a row of every column made this the lab's hot spot)."""
    rows = group[[c for c in THROUGHPUT_FIELDS if c in group.columns]].to_dict("records")
    times = (throughput_ms(row, ar=ar) for row in rows)
    return [math.nan if t is None else t for t in times]


def _pooled(group: pd.DataFrame) -> float:
    return pooled_tokens_per_s(group["new_tokens"], _time(group))


def with_batch(df: pd.DataFrame) -> pd.DataFrame:
    """Replay rows with their batch size (1 where a row has none) and a shared-γ policy's rows named
    ``METHOD (shared γ)`` (the references are per row whatever the mode)."""
    df = df.copy()
    df[BATCH] = df[BATCH].fillna(1).astype(int) if BATCH in df else 1
    if "gamma_mode" in df:
        shared = (df["gamma_mode"] == "shared") & ~df["method"].isin(REFERENCES)
        df.loc[shared, "method"] = df.loc[shared, "method"] + SHARED
    return df


def several_batch_sizes(df: pd.DataFrame | None) -> bool:
    """Whether the rows hold a batch size other than 1 (then tables show it, and the figure against B is made)."""
    return df is not None and not df.empty and BATCH in df and bool((df[BATCH].fillna(1) != 1).any())


def oracle_fractions(df: pd.DataFrame) -> pd.DataFrame | None:
    """One row per pair × task × ``max_new_tokens`` × batch size × method × initial γ: pooled predicted
    tokens/s over all rows (``Σ new_tokens / Σ throughput_ms``: each batch's wall once; a row decoded alone,
    its wall) and its fractions of the references at the same batch size (module docstring). None without
    timed rows."""
    if df is None or df.empty or "wall_ms" not in df or df["wall_ms"].isna().all():
        return None
    df = with_batch(df[df["wall_ms"].notna()])
    for col in GROUP:
        if col not in df:
            df[col] = None
    # a reference (oracle, best fixed γ in hindsight) is one cell whatever γ its prompts used
    df["gamma_key"] = [-1 if m in REFERENCES or g is None or (isinstance(g, float) and math.isnan(g)) else int(g)
                       for m, g in zip(df["method"], df["gamma_init"])]
    # per cell, summed with one groupby (a loop over the cells was the lab's hot spot: 4 × 10⁴ small frames on
    # results/committed/policy_lab_batch); ``pooled_tokens_per_s``: a time summed over a NaN is NaN (the ``_nan`` counts)
    df = df.assign(_t=_time(df), _ar_t=_time(df, ar=True), _tok=df["new_tokens"].astype(float),
                   _gamma=df["gamma_init"].astype(float), _ar_missing=df["ar_wall_ms"].isna() if "ar_wall_ms" in df else True)
    df = df.assign(_t_nan=df["_t"].isna(), _ar_t_nan=df["_ar_t"].isna())
    grouped = df.groupby(GROUP + [BATCH, "method", "gamma_key"], dropna=False, sort=False)
    sums = grouped[["_tok", "_t", "_ar_t", "accepted", "drafted", "rounds", "_t_nan", "_ar_t_nan", "_ar_missing"]].sum()
    used = [int(g) if n == 1 else None  # the initial γ a reference's prompts used: one, or none named
            for n, g in zip(grouped["_gamma"].nunique(), grouped["_gamma"].first())]
    seconds = sums["_t"].where(sums["_t_nan"] == 0) / 1000.0
    ar_seconds = sums["_ar_t"].where(sums["_ar_t_nan"] + sums["_ar_missing"] == 0) / 1000.0
    out = sums.index.to_frame(index=False)
    out["gamma_init"] = [int(g) if g >= 0 else u for g, u in zip(out.pop("gamma_key"), used)]
    out["tokens_per_s"] = (sums["_tok"] / seconds).where(seconds > 0).to_numpy()
    out["prompts"] = grouped.size().to_numpy()
    accepted, drafted, rounds = (sums[c].to_numpy(float) for c in ("accepted", "drafted", "rounds"))
    with np.errstate(divide="ignore", invalid="ignore"):
        out["acceptance_rate"] = np.where(drafted != 0, accepted / drafted, math.nan)
        out["mean_accepted_per_round"] = np.where(rounds != 0, accepted / rounds, math.nan)
    out["ar_tokens_per_s"] = (sums["_tok"] / ar_seconds).where(ar_seconds > 0).to_numpy()
    keys = GROUP + [BATCH]
    refs = {}
    for key, group in out.groupby(keys, dropna=False, sort=False):
        for ref in REFERENCES:
            hit = group[group["method"] == ref]
            refs[(*key, ref)] = float(hit["tokens_per_s"].iloc[0]) if len(hit) else math.nan
    row_keys = list(zip(*(out[g].tolist() for g in keys)))
    for ref, col in (("oracle", "x_oracle"), ("oracle_agreement", "x_oracle_agreement"),
                     ("best_fixed_task", "x_best_fixed"), ("best_fixed_prompt", "x_best_fixed_prompt")):
        out[col] = [tps / refs.get((*k, ref), math.nan) for tps, k in zip(out["tokens_per_s"], row_keys)]
    out["speedup_vs_ar"] = out["tokens_per_s"] / out["ar_tokens_per_s"]
    return out


def replay_summary(fractions: pd.DataFrame) -> pd.DataFrame:
    """Per pair × task × length × method: mean / std / min of the fractions across initial γ."""
    rows = []
    for key, group in fractions.groupby(GROUP + [BATCH, "method"], dropna=False, sort=False):
        *ident, method = key
        best = group.loc[group["tokens_per_s"].idxmax()]
        rows.append({
            **dict(zip(GROUP + [BATCH], ident)), "method": method, "n_gammas": int(group["gamma_init"].notna().sum()),
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


@artefact("tables/replay_oracle", "replay oracle table", scope=REPLAY, needs=("replay",), terminal=True,
          about="every replayed method's predicted throughput as a fraction of the oracle and of the best fixed γ")
def replay_table_from_frame(df: pd.DataFrame) -> Table | None:
    fractions = oracle_fractions(df)
    if fractions is None or fractions.empty:
        return None
    summary = replay_summary(fractions)
    order = {m: i for i, m in enumerate(REFERENCES)}
    summary["_ref"] = summary["method"].map(lambda m: order.get(m, -1))
    summary = summary.sort_values(GROUP + [BATCH, "_ref", "method"], kind="stable").drop(columns="_ref")
    display = pd.DataFrame({
        "pair": summary["pair"], "task": summary["task"], "max new": summary["max_new_tokens"],
        **({"B": summary[BATCH]} if several_batch_sizes(summary) else {}), "method": summary["method"],
        "× oracle (mean ± std over γ)": [fmt_ratio(m, s) for m, s in zip(summary["x_oracle_mean"], summary["x_oracle_std"])],
        "× oracle (worst γ)": [fmt_ratio(v) for v in summary["x_oracle_min"]],
        "× best fixed γ": [fmt_ratio(m, s) for m, s in zip(summary["x_best_fixed_mean"], summary["x_best_fixed_std"])],
        "× best fixed γ per prompt": [fmt_ratio(v) for v in summary["x_best_fixed_prompt_mean"]],
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


# ---------------------------------------------------------------------- the comparison rule

def _turn_sums(group: pd.DataFrame) -> pd.DataFrame:
    """Per prompt turn of a cell: its new tokens and the time its throughput divides by (columns ``_tok`` and
    ``_t``, ``_time``, computed once for the frame by ``policy_comparison``)."""
    return group.groupby(TURN, dropna=False, sort=True)[["_tok", "_t"]].sum()


def _cells_on_turns(sums: pd.DataFrame, turns: pd.Index) -> Iterator[tuple[tuple[Any, Any], np.ndarray]]:
    """Each ``(method, gamma_init)`` cell of ``sums`` (indexed by method, γ and the ``TURN`` columns), sorted, with its
    ``[_tok, _t]`` on ``turns`` (``len(turns) × 2``, NaN where the cell lacks a turn; its turns outside ``turns``
    left out): what ``sub.droplevel([0, 1]).reindex(turns)`` gives, placed with one ``get_indexer`` for the whole
    frame (a reindex per cell was the rule's hot spot: 4432 cells on ``results/committed/policy_lab_batch``)."""
    at = turns.get_indexer(sums.index.droplevel([0, 1]))
    values = sums[["_tok", "_t"]].to_numpy(float)
    for cell, rows in sorted(sums.groupby(level=[0, 1], sort=True).indices.items()):
        aligned = np.full((len(turns), 2), np.nan)
        keep = at[rows] >= 0
        aligned[at[rows][keep]] = values[rows][keep]
        yield cell, aligned


def _pooled_draws(aligned: np.ndarray) -> tuple[float, np.ndarray]:
    """Pooled tokens/s over the turns of ``aligned`` (per turn ``[_tok, _t]``, NaN where a cell lacks the turn:
    ``_cells_on_turns``) and its delete-one-turn replicates."""
    tok, t = aligned[:, 0], aligned[:, 1]
    total_tok, total_t = np.nansum(tok), np.nansum(t)
    point = total_tok / total_t * 1000.0 if not np.isnan(aligned).any() and total_t > 0 else math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = (total_tok - tok) / (total_t - t) * 1000.0
    return point, draws


def policy_comparison(df: pd.DataFrame) -> pd.DataFrame | None:
    """The comparison rule (module docstring) for every policy of the replay rows: one row per pair × task ×
    ``max_new_tokens`` × batch size × method (references left out) with ``prompts``, ``best_gamma_init``,
    ``x_best_fixed_at_best`` and its ``_lo`` / ``_hi``, ``verdict`` (``VERDICTS``), ``x_best_fixed_mean_over_gamma``
    and its ``_lo`` / ``_hi``, ``n_gammas``. None without timed rows or without a ``best_fixed_task`` reference.
    Rows that sum a cell (``prompt_id`` "*") have no turns to leave out: no interval, no verdict, ``prompts`` NaN.
    At B > 1 a turn's row carries its share of its batch's wall (``_time``): a replicate leaves that share out, not
    the whole batch."""
    if df is None or df.empty or "wall_ms" not in df or df["wall_ms"].isna().all():
        return None
    df = with_batch(df[df["wall_ms"].notna()])
    for col in [*GROUP, *TURN]:
        if col not in df:
            df[col] = None
    df = df.assign(_t=_time(df), _tok=df["new_tokens"].astype(float))
    rows = []
    for key, group in df.groupby(GROUP + [BATCH], dropna=False, sort=False):
        ref_rows = group[group["method"] == "best_fixed_task"]
        if ref_rows.empty:
            continue
        ref = _turn_sums(ref_rows)
        turns = ref.index
        ref_point, ref_draws = _pooled_draws(ref[["_tok", "_t"]].to_numpy(float))  # on its own turns
        summed = set(group["prompt_id"].astype(str)) == {"*"}  # a cell's summed row: turns not told apart
        policies = group[~group["method"].isin(REFERENCES) & group["gamma_init"].notna()]
        sums = policies.groupby(["method", "gamma_init", *TURN], dropna=False, sort=True)[["_tok", "_t"]].sum()
        by_method: dict[str, dict[int, tuple[float, np.ndarray]]] = {}
        for (method, gamma), sub in _cells_on_turns(sums, turns):
            by_method.setdefault(method, {})[int(gamma)] = _pooled_draws(sub)
        for method, cells in by_method.items():
            cells = {g: c for g, c in cells.items() if np.isfinite(c[0])}
            if not cells:
                continue
            gammas = sorted(cells)
            points = np.array([cells[g][0] for g in gammas])
            draws = np.vstack([cells[g][1] for g in gammas])  # gammas × replicates
            best = gammas[int(np.argmax(points))]
            with np.errstate(invalid="ignore", divide="ignore"):
                # a replicate's best γ: the largest of its cells (NaN where a cell lacks a turn: no interval)
                best_draws = np.where(np.isnan(draws).any(axis=0), np.nan, draws.max(axis=0, initial=-np.inf))
                at_best = Estimate(float(points.max() / ref_point), best_draws / ref_draws, log=True)
                ratios = Estimate(float(np.mean(points / ref_point)), np.mean(draws / ref_draws, axis=0), log=True)
            lo, hi = at_best.interval()
            mlo, mhi = ratios.interval()
            verdict = ("" if not np.isfinite(lo) else VERDICTS[0] if lo > 1.0 else VERDICTS[2] if hi < 1.0
                       else VERDICTS[1])  # "": one prompt turn (a cell's summed row), no interval
            rows.append({**dict(zip(GROUP + [BATCH], key)), "method": method,
                         "prompts": math.nan if summed else len(turns),
                         "n_gammas": len(gammas), "best_gamma_init": best, "x_best_fixed_at_best": at_best.point,
                         "x_best_fixed_at_best_lo": lo, "x_best_fixed_at_best_hi": hi, "verdict": verdict,
                         "x_best_fixed_mean_over_gamma": ratios.point, "x_best_fixed_mean_over_gamma_lo": mlo,
                         "x_best_fixed_mean_over_gamma_hi": mhi})
    return pd.DataFrame(rows) if rows else None


# ---------------------------------------------------------------------- the leaderboard

def leaderboard_frame(fractions: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for key, group in fractions.groupby(GROUP + [BATCH, "method"], dropna=False, sort=False):
        *ident, method = key
        worst = group.loc[group["tokens_per_s"].idxmin()]
        rows.append({
            **dict(zip(GROUP + [BATCH], ident)), "method": method, "reference": method in REFERENCES,
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
    out = out.sort_values(GROUP + [BATCH, "_ref", "x_best_fixed_mean"], ascending=[True] * (len(GROUP) + 1) + [True, False],
                          kind="stable").drop(columns="_ref")
    return out.reset_index(drop=True)


@artefact("tables/policy_leaderboard", "policy leaderboard", scope=REPLAY, needs=("replay",),
          about="the γ-policy leaderboard under the comparison rule: each policy at its best initial γ over the best "
                "fixed γ with a jackknife interval over prompt turns, its mean over γ, × oracle, spread, worst γ")
def leaderboard(df: pd.DataFrame) -> Table | None:
    """The leaderboard of replay rows (module docstring): the comparison rule's columns (``policy_comparison``)
    first, then the fractions over initial γ; None without timed rows."""
    fractions = oracle_fractions(df)
    if fractions is None or fractions.empty:
        return None
    board = leaderboard_frame(fractions)
    rule = policy_comparison(df)
    keys = GROUP + [BATCH, "method"]
    if rule is not None:
        board = board.merge(rule, on=keys, how="left")
        order = {m: i for i, m in enumerate(REFERENCES)}
        board["_ref"] = [order.get(m, len(order)) for m in board["method"]]
        board = board.sort_values(GROUP + [BATCH, "_ref", "x_best_fixed_at_best", "x_best_fixed_mean"],
                                  ascending=[True] * (len(GROUP) + 2) + [False, False], kind="stable",
                                  na_position="first").drop(columns="_ref").reset_index(drop=True)

    def gamma_text(g: object) -> str:
        return "" if g is None or (isinstance(g, float) and math.isnan(g)) else str(int(g))

    def ruled(column: str) -> list[str]:
        if rule is None:
            return [""] * len(board)
        return ["" if not np.isfinite(v) else f"{v:.3f} {fmt_ci((lo, hi), 3)}".rstrip() for v, lo, hi in
                zip(board[column], board[f"{column}_lo"], board[f"{column}_hi"], strict=True)]

    display = pd.DataFrame({
        "pair": board["pair"], "task": board["task"], **({"B": board[BATCH]} if several_batch_sizes(board) else {}),
        "method": board["method"],
        "best initial γ": [gamma_text(g) for g in (board["best_gamma_init"] if rule is not None else [None] * len(board))],
        "× best fixed γ at its best initial γ [95 % CI]": ruled("x_best_fixed_at_best"),
        "verdict": board["verdict"].fillna("") if rule is not None else [""] * len(board),
        "× best fixed γ, mean over initial γ [95 % CI]": ruled("x_best_fixed_mean_over_gamma"),
        "prompt turns": [("" if pd.isna(n) else str(int(n))) for n in
                         (board["prompts"] if rule is not None else [math.nan] * len(board))],
        "× oracle (mean ± std over γ)": [fmt_ratio(m, s) for m, s in zip(board["x_oracle_mean"], board["x_oracle_std"])],
        "spread": [fmt_ratio(v) for v in board["x_oracle_spread"]],
        "× best fixed γ (task, mean ± std over γ)": [fmt_ratio(m, s) for m, s in
                                                     zip(board["x_best_fixed_mean"], board["x_best_fixed_std"])],
        "× best fixed γ (per prompt)": [fmt_ratio(v) for v in board["x_best_fixed_prompt_mean"]],
        "worst initial γ (× best fixed)": [
            "" if r["reference"] else f"{gamma_text(r['worst_gamma'])} ({r['worst_x_best_fixed']:.3f})"
            for _, r in board.iterrows()],
        "speedup vs AR": [fmt_ratio(v, digits=2) for v in board["speedup_vs_ar_mean"]],
    })
    caption = ("Policy leaderboard (replay of greedy traces under the pair's calibrated latency model; predicted "
               "pooled tokens/s). " + RULE_NOTE + " Then: fractions of the oracle (exact DP: the best any γ policy can "
               "do on these traces), of the best fixed γ in hindsight for the whole task and per prompt; mean ± "
               "sample std (ddof=1) over the initial γ; spread = max − min of × oracle across initial γ; worst initial "
               "γ = the one with the lowest throughput. Adaptive policies restart at every prompt turn (the project's "
               "default); carry-over variants are marked *_carryover or transient=false.")
    if several_batch_sizes(board):
        caption += (" B: the batch size (runners.replay.batched: B prompt turns decoded together; throughput over all "
                    "rows, Σ tokens / Σ batch walls; every fraction and the speedup vs AR at the same B). At B > 1 the "
                    "oracle is each row's own exact schedule under the costs at B rows, replayed together: not a bound "
                    "(× oracle may exceed 1). '(shared γ)': one γ per round for the whole batch.")
    return Table("policy_leaderboard", caption, display, board)


@artefact("figures/policy_leaderboard", "policy leaderboard figure", scope=REPLAY, needs=("replay",),
          about="the leaderboard as bars per pair × task: × best fixed γ, its std, the worst initial γ, the oracle")
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
    board = board[board[BATCH] == board[BATCH].min()]  # the smallest batch size; against B: plot_batch_sizes
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
