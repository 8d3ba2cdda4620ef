"""What GammaTune's policies do round by round: acceptance and mean γ per method (GammaTune
Appendix A) and the per-round trace of one prompt (GammaTune Figure 2a, as a table and a figure).

Pure: a records frame in, a ``Table`` or a matplotlib ``Figure`` out, ``None`` when the inputs are
absent; definitions are in the docstrings and repeated in captions.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.artefacts import SCENARIO, artefact
from analysis.metrics import fmt_num, method_labels, ordered_methods
from analysis.render import Table


@artefact("tables/acceptance", "acceptance table", scope=SCENARIO, needs=("records",),
          about="GammaTune Appendix A: acceptance rate, mean γ and accepted per round, per pair and method")
def acceptance_table(df: pd.DataFrame) -> Table | None:
    """Acceptance rate and mean γ per pair and method, pooled over every round of
    every prompt and initial γ: acceptance = Σ accepted / Σ drafted (the target's
    bonus/correction token is not counted, ``specbench.records``); mean γ = mean
    of the per-round ``gamma_trace``; accepted/round = Σ accepted / Σ rounds."""
    spec = df[(df["method"] != "ar") & df["drafted"].notna()]
    if spec.empty:
        return None
    rows = []
    for (pair, method), group in spec.groupby(["pair", "method"], sort=True):
        drafted, accepted, rounds = group["drafted"].sum(), group["accepted"].sum(), group["rounds"].sum()
        gammas = [g for trace in group["gamma_trace"] for g in trace]
        rows.append({
            "pair": pair, "method": method,
            "acceptance_rate": accepted / drafted if drafted else math.nan,
            "mean_gamma": float(np.mean(gammas)) if gammas else math.nan,
            "mean_accepted_per_round": accepted / rounds if rounds else math.nan,
            "rounds": int(rounds), "n_gamma_init": int(group["gamma_init"].nunique()), "n_records": len(group),
        })
    data = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(ordered_methods(data["method"]))}
    data = data.sort_values(["pair", "method"], key=lambda s: s.map(order) if s.name == "method" else s)
    display = pd.DataFrame({
        "Pair": data["pair"], "Method": data["method"].map(method_labels(df)),
        "Acceptance rate": data["acceptance_rate"].map(lambda v: fmt_num(v, 3)),
        "Mean γ": data["mean_gamma"].map(lambda v: fmt_num(v, 2)),
        "Accepted/round": data["mean_accepted_per_round"].map(lambda v: fmt_num(v, 2)),
        "Rounds": data["rounds"], "Initial γ values": data["n_gamma_init"], "n": data["n_records"],
    })
    caption = (
        "Acceptance and speculation length per method (GammaTune Appendix A), pooled over all rounds of all "
        "prompts and initial γ: acceptance rate = Σ accepted / Σ drafted (the target's own bonus/correction "
        "token is not counted); mean γ = mean of the γ chosen per round; accepted/round = Σ accepted / Σ rounds."
    )
    return Table("acceptance", caption, display, data)


def _most_common_gamma(rows: pd.DataFrame) -> float | None:
    counts = rows["gamma_init"].dropna().value_counts()
    if counts.empty:
        return None
    top = counts[counts == counts.max()]
    return float(min(top.index))


def trace_frame(
    df: pd.DataFrame,
    pair: str | None = None,
    gamma_init: float | None = None,
    prompt_id: str | None = None,
    turn: int | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-round γ / drafted / accepted of one prompt, one block per method.

    Defaults: the first pair (sorted), the initial γ run by most jobs of it
    (ties: the smallest; methods without an initial γ are always included), the
    first prompt in record order and its first turn. Returns (long frame with
    method, its display name (label), round (1-based), gamma, drafted, accepted; the choices made)."""
    spec = df[df["accepted_trace"].map(len) > 0]
    if pair is None and not spec.empty:
        pair = sorted(spec["pair"].dropna().unique())[0]
    spec = spec[spec["pair"] == pair]
    if gamma_init is None:
        gamma_init = _most_common_gamma(spec)
    if gamma_init is not None:
        spec = spec[(spec["gamma_init"] == gamma_init) | spec["gamma_init"].isna()]
    if prompt_id is None and not spec.empty:
        prompt_id = spec["prompt_id"].iloc[0]
    spec = spec[spec["prompt_id"] == str(prompt_id)]
    if turn is None and not spec.empty:
        turn = int(spec["turn"].min())
    spec = spec[spec["turn"] == turn]
    rows = []
    label = method_labels(df)
    for method in ordered_methods(spec["method"].unique()):
        record = spec[spec["method"] == method].iloc[0]
        drafted = record["drafted_trace"] or [math.nan] * len(record["accepted_trace"])
        gammas = record["gamma_trace"] or [math.nan] * len(record["accepted_trace"])
        for i, (g, d, a) in enumerate(zip(gammas, drafted, record["accepted_trace"], strict=False), start=1):
            rows.append({"pair": pair, "method": method, "label": label(method), "gamma_init": record["gamma_init"],
                         "prompt_id": prompt_id,
                         "turn": turn, "round": i, "gamma": g, "drafted": d, "accepted": a})
    meta = {"pair": pair, "gamma_init": gamma_init, "prompt_id": prompt_id, "turn": turn}
    return pd.DataFrame(rows, columns=["pair", "method", "label", "gamma_init", "prompt_id", "turn", "round", "gamma",
                                       "drafted", "accepted"]), meta


def trace_table(trace: pd.DataFrame, meta: dict[str, Any]) -> Table | None:
    """The trace as a table: one row per round, γ and accepted per method."""
    if trace.empty:
        return None
    display = pd.DataFrame({"Round": sorted(trace["round"].unique())})
    for method in ordered_methods(trace["method"].unique()):
        block = trace[trace["method"] == method].set_index("round")
        label = block["label"].iloc[0]
        display[f"{label} γ"] = display["Round"].map(block["gamma"]).map(lambda v: fmt_num(v, 0))
        display[f"{label} accepted"] = display["Round"].map(block["accepted"]).map(lambda v: fmt_num(v, 0))
    caption = (
        f"Per-round trace (GammaTune Figure 2a): pair {meta['pair']}, initial γ {fmt_num(meta['gamma_init'], 0)}, "
        f"prompt {meta['prompt_id']} turn {meta['turn']}: the γ each method chose for the round and the draft "
        "tokens the target accepted (bonus/correction token not counted)."
    )
    return Table("gammatune_fig2a_trace", caption, display, trace.drop(columns="label"))


def plot_trace(trace: pd.DataFrame, meta: dict | None = None) -> Figure | None:
    """GammaTune Figure 2a: accepted draft tokens per round (top) and the γ chosen
    per round (bottom) for one prompt, one line per method (``trace_frame``)."""
    if trace.empty:
        return None
    fig = Figure(figsize=(8.0, 5.0))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for method in ordered_methods(trace["method"].unique()):
        rows = trace[trace["method"] == method]
        top.plot(rows["round"], rows["accepted"], drawstyle="steps-mid", marker=".", ms=3, label=rows["label"].iloc[0])
        bottom.plot(rows["round"], rows["gamma"], drawstyle="steps-mid", marker=".", ms=3, label=rows["label"].iloc[0])
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


@artefact("figures/gammatune_fig2a_trace", "trace figure", scope=SCENARIO,
          needs=("records", "trace_pair", "trace_gamma", "trace_prompt"),
          about="GammaTune Figure 2a: accepted tokens and γ per round of one prompt, one line per method")
def trace_figure(records: pd.DataFrame, pair: str | None = None, gamma_init: float | None = None,
                 prompt_id: str | None = None) -> Figure | None:
    """``plot_trace`` of ``trace_frame`` (its defaults: the first pair, the most common initial γ, the first prompt)."""
    return plot_trace(*trace_frame(records, pair, gamma_init, prompt_id))


@artefact("tables/gammatune_fig2a_trace", "trace table", scope=SCENARIO,
          needs=("records", "trace_pair", "trace_gamma", "trace_prompt"),
          about="GammaTune Figure 2a as a table: γ and accepted tokens per round of one prompt, per method")
def trace_of(records: pd.DataFrame, pair: str | None = None, gamma_init: float | None = None,
             prompt_id: str | None = None) -> Table | None:
    """``trace_table`` of ``trace_frame`` (the same prompt as ``trace_figure``)."""
    return trace_table(*trace_frame(records, pair, gamma_init, prompt_id))
