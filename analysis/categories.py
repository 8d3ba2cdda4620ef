"""Speedup, throughput and acceptance per prompt category (a record's ``category``, from its task's rows:
Spec-Bench's 13, SPEED-Bench's 11, a custom task's ``task.category_field``), per pair, task and method, with the
number of prompt turns behind each: does a method's gain hold across kinds of prompt, and how well does its
draft guess them (acceptance, SPEED-Bench's primary measure)?

Pure: a records frame in, a ``Table`` out, ``None`` when no task has several categories. The columns are
the categories the records hold, never a fixed list: a table over several tasks has the union of their
categories, a cell empty where a task has none of that category.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.artefacts import SETTING, artefact
from analysis.metrics import (
    POOLINGS,
    SHARED_MARK,
    SHARED_NOTE,
    STD_NOTE,
    check_pooling,
    fmt_num,
    is_aa_twin,
    is_ar,
    mean_std,
    method_labels,
    ordered_methods,
    shared_device_mismatch,
    throughput_by,
)
from analysis.render import Table


def _acceptance(records: pd.DataFrame) -> tuple[float, float]:
    """``(Σ accepted / Σ drafted, (Σ accepted + Σ rounds) / Σ rounds)`` of a cell's records: the acceptance rate
    (``specbench.records``: ``acceptance_rate``) and the tokens per round (the acceptance length: accepted drafts
    plus the target's own token, ``mean_accepted_per_round + 1``); NaN where nothing was drafted / no round ran."""
    total = {k: records[k].sum() if k in records else 0.0  # the typed frame's numbers (analysis.frame)
             for k in ("accepted", "drafted", "rounds")}
    rate = total["accepted"] / total["drafted"] if total["drafted"] > 0 else np.nan
    length = (total["accepted"] + total["rounds"]) / total["rounds"] if total["rounds"] > 0 else np.nan
    return float(rate), float(length)


def _turns(records: pd.DataFrame) -> int:
    """Distinct prompt turns of a cell's records (its initial γ and repeats decode the same ones)."""
    keys = [k for k in ("task", "prompt_id", "turn") if k in records]
    return int(len(records[keys].drop_duplicates())) if keys and not records.empty else 0


def _cell(speedup: float, acceptance: float, turns: int, shared: bool) -> str:
    """A category's cell: ``1.50× (acc 0.62, n 40)`` (speedup, acceptance rate, prompt turns)."""
    if not np.isfinite(speedup):
        return ""
    acc = f"acc {fmt_num(acceptance, 2)}, " if np.isfinite(acceptance) else ""
    return fmt_num(speedup, 2) + "×" + (SHARED_MARK if shared else "") + f" ({acc}n {turns})"


@artefact("tables/category_speedup", "per-category table", scope=SETTING, needs=("records", "pooling"),
          about="per-category speedup over AR (else SpecDecode), mean over initial γ, acceptance and prompt turns, "
                "for every task with several categories (Spec-Bench, SPEED-Bench, ...)")
def category_table(df: pd.DataFrame, pooling: str = "pooled") -> Table | None:
    """Per-category speedup (Spec-Bench's per-category table, for any task), throughput and acceptance: per
    (pair, task, method) and category, the mean over initial γ of ``T(method, γ, category) / B(category)``
    (``speedup``), of ``T(method, γ, category)`` (``tokens_per_s``), of the acceptance rate Σ accepted / Σ drafted
    (``acceptance``) and of the tokens per round (``tokens_per_round``, the acceptance length) of each γ's
    records, and ``n_turns``, the distinct prompt turns behind it (``n_gamma``: the initial γ averaged over).

    ``B`` = AR's throughput on the same target, task and category when AR records
    exist for that target and task; otherwise SpecDecode's throughput averaged
    over its initial γ for the same pair, task and category (the GammaTune
    Table 2 baseline); pairs with neither are left out. Column ``All`` = every
    category pooled. Tasks with a single category are skipped; A/A twins are left out. A cell reads
    ``speedup× (acc acceptance, n turns)``; the .data.csv holds every figure."""
    check_pooling(pooling)
    data = df[df["category"].notna() & ~is_aa_twin(df["method"])]
    multi = data.groupby("task")["category"].nunique()
    data = data[data["task"].isin(multi[multi > 1].index)]
    if data.empty:
        return None
    ar_tasks = set(map(tuple, data.loc[data["method"] == "ar", ["target", "task"]].drop_duplicates().values))
    long: list[dict[str, Any]] = []
    for (pair, task), group in data.groupby(["pair", "task"], sort=True):
        target = group["target"].dropna().iloc[0] if group["target"].notna().any() else None
        use_ar = (target, task) in ar_tasks
        if use_ar:
            base_rows = data[(data["method"] == "ar") & (data["target"] == target) & (data["task"] == task)]
        else:
            base_rows = group[group["method"] == "specdecode"]
        if base_rows.empty:
            continue
        cats = sorted(group["category"].unique())
        for cat in [*cats, None]:
            base_cat = base_rows if cat is None else base_rows[base_rows["category"] == cat]
            spec_cat = group[~is_ar(group)]  # no AR row, whatever its cache
            spec_cat = spec_cat if cat is None else spec_cat[spec_cat["category"] == cat]
            base = throughput_by(base_cat, ["gamma_init"], pooling)["tokens_per_s"].mean()
            cells = throughput_by(spec_cat, ["method", "gamma_init"], pooling)
            for method, per_gamma in cells.groupby("method"):
                mean, std, n = mean_std(per_gamma["tokens_per_s"] / base)
                mine = spec_cat[spec_cat["method"] == method]
                shared = shared_device_mismatch(pd.concat([mine, base_cat]))
                accept = [_acceptance(g) for _, g in mine.groupby("gamma_init", dropna=False)]
                long.append({"pair": pair, "task": task, "method": method, "baseline": "ar" if use_ar else "specdecode",
                             "category": "All" if cat is None else cat, "speedup": mean, "std": std, "n_gamma": n,
                             "shared_device": shared, "tokens_per_s": mean_std(per_gamma["tokens_per_s"])[0],
                             "acceptance": mean_std(a for a, _ in accept)[0],
                             "tokens_per_round": mean_std(t for _, t in accept)[0], "n_turns": _turns(mine)})
    if not long:
        return None
    data_long = pd.DataFrame(long)
    cats = sorted(c for c in data_long["category"].unique() if c != "All") + ["All"]
    data_long["cell"] = [_cell(v, a, n, shared) for v, a, n, shared in zip(
        data_long["speedup"], data_long["acceptance"], data_long["n_turns"], data_long["shared_device"], strict=True)]
    wide = data_long.pivot_table(index=["pair", "task", "method", "baseline"], columns="category", values="cell",
                                 aggfunc="first").reset_index()
    order = {m: i for i, m in enumerate(ordered_methods(wide["method"]))}
    wide = wide.sort_values(["pair", "task", "method"], key=lambda s: s.map(order) if s.name == "method" else s)
    label = method_labels(df)
    display = pd.DataFrame({"Pair": wide["pair"], "Task": wide["task"], "Method": wide["method"].map(label),
                            "Baseline": wide["baseline"].map(label)})
    for cat in cats:
        display[cat] = wide[cat].fillna("") if cat in wide else ""
    caption = (
        "Speedup per category: mean over initial γ of the method's throughput in that category over the "
        "baseline's (AR on the same target and task when it was run, else SpecDecode averaged over its "
        f"initial γ for the same pair); throughput = {POOLINGS[pooling]}. acc = acceptance rate (accepted / "
        "drafted tokens of each initial γ's records, mean over initial γ); n = prompt turns in the category. "
        f"All = every category pooled. The throughput, tokens per round and the {STD_NOTE} are in the .data.csv."
    )
    if data_long["shared_device"].any():
        caption += " " + SHARED_NOTE
    return Table("category_speedup", caption, display, data_long)
