"""The γ-policy lab against the batch size (``runners.replay.batched``): what moves with B.

Reads the replay rows ``analysis.policy_lab`` reads, through its ``oracle_fractions`` (every cell, reference and
fraction per batch size: a policy at B against the references at the same B). Made only when the rows hold two
batch sizes or more:

* ``batch_frame``: per pair × task × length × method × B, pooled predicted tokens/s over all rows, the speedup over
  the target alone at the same B and × best fixed γ (a policy: the mean over its initial γ; a reference: its cell);
* ``batch_table``: per pair × task × B, the best fixed γ in hindsight and its speedup over AR, the oracle's (not a
  bound above B = 1), the best policy and how many policies beat the best fixed γ;
* ``plot_batch_sizes``: the speedup over AR at the same B of the best fixed γ, each policy and the oracle, against B.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.artefacts import REPLAY, artefact
from analysis.metrics import fmt_ratio
from analysis.policy_lab import BATCH, GROUP, REFERENCES, oracle_fractions
from analysis.render import Table


def batch_frame(df: pd.DataFrame, fractions: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """Per pair × task × length × method × batch size: pooled predicted tokens/s over all rows, the speedup
    over the target alone at the same batch size and × best fixed γ (a policy: the mean over its initial γ;
    a reference: its one cell), from ``fractions`` (``oracle_fractions(df)``, computed here when not given).
    None unless the rows hold two batch sizes or more."""
    fractions = oracle_fractions(df) if fractions is None else fractions
    if fractions is None or fractions.empty or fractions[BATCH].nunique() < 2:
        return None
    return (fractions.groupby(GROUP + ["method", BATCH], dropna=False, sort=True)
            .agg(tokens_per_s=("tokens_per_s", "mean"), speedup_vs_ar=("speedup_vs_ar", "mean"),
                 x_best_fixed=("x_best_fixed", "mean"), n_gammas=("gamma_init", "count"))
            .reset_index())


@artefact("tables/policy_lab_batch", "policy lab against the batch size (table)", scope=REPLAY, needs=("replay",),
          when=lambda inputs: inputs.replay is not None and BATCH in inputs.replay
          and inputs.replay[BATCH].fillna(1).nunique() > 1,
          about="per pair × task × batch size: the best fixed γ and its speedup over AR at that B, the oracle's, "
                "the best policy's and how many policies beat the best fixed γ")
def batch_table(df: pd.DataFrame) -> Table | None:
    """What moves with the batch size, one row per pair × task × B (``batch_frame``): which fixed γ is best in
    hindsight there and its replayed speedup over the target alone at the same B, the oracle's (not a bound
    above B = 1), the policy with the highest mean × best fixed γ and that value, and how many of the
    policies beat the best fixed γ on average over their initial γ (> 1)."""
    fractions = oracle_fractions(df)
    frame = batch_frame(df, fractions)
    if frame is None:
        return None
    rows = []
    for (pair, task, batch), group in frame.groupby(["pair", "task", BATCH], sort=True):
        def cell(method: str, col: str = "speedup_vs_ar", g: pd.DataFrame = group) -> float:
            hit = g[g["method"] == method]
            return float(hit[col].iloc[0]) if len(hit) else math.nan

        fixed = fractions[(fractions["pair"] == pair) & (fractions["task"] == task) & (fractions[BATCH] == batch)
                          & (fractions["method"] == "best_fixed_task")]
        policies = group[~group["method"].isin(REFERENCES)].sort_values("x_best_fixed", ascending=False)
        best = policies.iloc[0] if len(policies) else None
        rows.append({"pair": pair, "task": task, BATCH: int(batch),
                     "best_fixed_gamma": int(fixed["gamma_init"].iloc[0]) if len(fixed) and pd.notna(
                         fixed["gamma_init"].iloc[0]) else None,
                     "best_fixed_speedup": cell("best_fixed_task"), "oracle_speedup": cell("oracle"),
                     "best_policy": best["method"] if best is not None else None,
                     "best_policy_x_best_fixed": float(best["x_best_fixed"]) if best is not None else math.nan,
                     "best_policy_speedup": float(best["speedup_vs_ar"]) if best is not None else math.nan,
                     "policies_over_best_fixed": int((policies["x_best_fixed"] > 1.0).sum()),
                     "policies": len(policies)})
    data = pd.DataFrame(rows)
    display = pd.DataFrame({
        "pair": data["pair"], "task": data["task"], "B": data[BATCH],
        "best fixed γ": ["" if g is None or pd.isna(g) else str(int(g)) for g in data["best_fixed_gamma"]],
        "its speedup vs AR at B": [fmt_ratio(v) for v in data["best_fixed_speedup"]],
        "oracle vs AR at B": [fmt_ratio(v) for v in data["oracle_speedup"]],
        "best policy": data["best_policy"],
        "its × best fixed γ": [fmt_ratio(v) for v in data["best_policy_x_best_fixed"]],
        "policies > best fixed γ": [f"{a} of {b}" for a, b in zip(data["policies_over_best_fixed"], data["policies"])],
    })
    caption = ("Replayed against the batch size B (runners.replay.batched: B consecutive prompts decoded together, "
               "turn by turn; every round charged by the pair's latency table at B rows). Speedups are over the target "
               "alone at the same B (throughput over all rows, Σ tokens / Σ batch walls). Best fixed γ: in hindsight, "
               "for the task at that B. Oracle: each row's own exact schedule under the costs at B rows, replayed "
               "together (exact at B = 1, not a bound above). Best policy: the highest × best fixed γ, mean over its "
               "initial γ; the last column counts the policies whose mean beats the best fixed γ.")
    return Table("policy_lab_batch", caption, display, data)


@artefact("figures/policy_lab_batch", "policy lab against the batch size", scope=REPLAY, needs=("replay",),
          when=lambda inputs: inputs.replay is not None and BATCH in inputs.replay
          and inputs.replay[BATCH].fillna(1).nunique() > 1,
          about="speedup over AR at the same batch size of the best fixed γ, every policy and the oracle, against B")
def plot_batch_sizes(df: pd.DataFrame):
    """One panel per pair × task: the replayed speedup over the target alone *at the same batch size*
    (throughput over all rows, each ÷ the target's at that B) against B, for the best fixed γ in hindsight
    (black), the oracle (dashed; at B > 1 each row's own schedule, not a bound) and every policy (mean over
    its initial γ; '(shared γ)': one γ per round for the batch)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    frame = batch_frame(df)
    if frame is None:
        return None
    panels = list(frame.groupby(["pair", "task"], sort=True))
    n = len(panels)
    fig = Figure(figsize=(6.5 * min(n, 2), 4.2 * ((n + 1) // 2)))
    axes = fig.subplots((n + 1) // 2, min(n, 2), squeeze=False).ravel()
    styles = {"best_fixed_task": {"color": "black", "lw": 2.0, "label": "best fixed γ (task)"},
              "oracle": {"color": "gray", "lw": 1.5, "ls": "--", "label": "oracle"}}
    for ax, ((pair, task), group) in zip(axes, panels):
        for method, line in group.groupby("method", sort=True):
            if method in REFERENCES and method not in styles:
                continue
            line = line.sort_values(BATCH)
            style = styles.get(method, {"lw": 0.8, "alpha": 0.8, "label": method})
            ax.plot(line[BATCH], line["speedup_vs_ar"], marker="o", ms=2.5, **style)
        sizes = sorted(group[BATCH].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(int(b)) for b in sizes])
        ax.axhline(1.0, color="black", lw=0.5, ls=":")
        ax.set_xlabel("batch size B", fontsize=7)
        ax.set_ylabel("speedup over the target alone at the same B (replayed)", fontsize=7)
        ax.set_title(f"{pair} — {task}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=5, loc="center left", bbox_to_anchor=(1.0, 0.5))
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
