"""Speedups over autoregressive decoding: the heterogeneous-vocabularies paper's
main tables (Section 5, Appendix D) and a per-category breakdown for SpecBench."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics import (
    POOLINGS,
    SHARED_MARK,
    SHARED_NOTE,
    STD_NOTE,
    check_pooling,
    fmt_num,
    mean_std,
    method_label,
    ordered_methods,
    shared_device_mismatch,
    throughput,
    throughput_by,
)
from analysis.paper import dataset_key, hetero_rows, model_key
from analysis.render import Table

HETERO_KEYS = ["target", "task", "temperature", "method", "draft", "gamma_init"]


def rule_method(method: str, hetero: str | None) -> str:
    """The row label of the heterogeneous table, from what ran: the cross-vocabulary algorithm
    (``slem``), followed by the γ policy's method when it is not the fixed γ (``slem+gammatune``)."""
    if not isinstance(hetero, str) or not hetero:
        return method
    return hetero if method == "specdecode" else f"{hetero}+{method}"


def _ar_baselines(df: pd.DataFrame, pooling: str) -> tuple[dict, dict]:
    """AR tokens/s per (target, task, temperature) and per (target, task)."""
    ar = df[df["method"] == "ar"]
    exact = {(r["target"], r["task"], r["temperature"]): r["tokens_per_s"]
             for r in throughput_by(ar, ["target", "task", "temperature"], pooling).to_dict("records")}
    loose = {(r["target"], r["task"]): r["tokens_per_s"]
             for r in throughput_by(ar, ["target", "task"], pooling).to_dict("records")}
    return exact, loose


def hetero_table(df: pd.DataFrame, pooling: str = "pooled", paper: pd.DataFrame | None = None) -> Table | None:
    """Heterogeneous-vocabularies Section 5 / Appendix D: per target, dataset (task),
    temperature, method, drafter and initial γ: TTFT (ms) = mean per-prompt
    ``ttft_ms``; TPOT (ms) = mean per-prompt ``tpot_ms``; tokens/s as ``pooling``
    says; speedup = tokens/s over AR's tokens/s for the same target and task (at
    the same temperature when AR was run at it, else AR over all temperatures).
    Only (target, task) groups with AR records are shown. ``paper``: the paper's
    rows for the same target, dataset and temperature follow the measured ones."""
    check_pooling(pooling)
    data = df[df["target"].notna()]
    data = data.assign(method=[rule_method(m, h) for m, h in zip(data["method"], data["hetero"], strict=True)])
    with_ar = set(map(tuple, data.loc[data["method"] == "ar", ["target", "task"]].drop_duplicates().values))
    data = data[[(t, k) in with_ar for t, k in zip(data["target"], data["task"], strict=True)]]
    data = data.assign(draft=[None if m == "ar" else d for m, d in zip(data["method"], data["draft"], strict=True)])
    if data.empty or (data["method"] != "ar").sum() == 0:
        return None
    exact, loose = _ar_baselines(data, pooling)
    measured = []
    for values, group in data.groupby(HETERO_KEYS, dropna=False, sort=True):
        row = dict(zip(HETERO_KEYS, values, strict=True))
        tps = throughput(group, pooling)
        ar = exact.get((row["target"], row["task"], row["temperature"]), loose.get((row["target"], row["task"])))
        devices = group["device"].dropna()
        ar_rows = data[(data["method"] == "ar") & (data["target"] == row["target"]) & (data["task"] == row["task"])]
        row.update(source="measured", hardware=str(devices.iloc[0]) if len(devices) else "",
                   ttft_ms=float(group["ttft_ms"].mean()), tpot_ms=float(group["tpot_ms"].mean()),
                   tokens_per_s=tps, speedup=tps / ar if ar else math.nan, n_records=len(group),
                   shared_device=row["method"] != "ar" and shared_device_mismatch(pd.concat([group, ar_rows])))
        measured.append(row)
    measured = pd.DataFrame(measured)
    order = {m: i for i, m in enumerate(ordered_methods(measured["method"]))}
    measured["_m"] = measured["method"].map(order)
    measured = measured.sort_values(["target", "task", "temperature", "_m", "draft", "gamma_init"],
                                    na_position="first").drop(columns="_m")
    published = hetero_rows(paper) if paper is not None else None
    blocks = []
    for (target, task, temp), group in measured.groupby(["target", "task", "temperature"], sort=False, dropna=False):
        blocks.append(group)
        if published is None:
            continue
        hit = published[(published["target_key"] == model_key(target)) & (published["dataset_key"] == dataset_key(task))
                        & np.isclose(published["temperature"].astype(float), float(temp))]
        if not hit.empty:
            blocks.append(pd.DataFrame({
                "target": target, "task": task, "temperature": temp, "method": hit["method"].values,
                "draft": hit["drafter"].values, "gamma_init": math.nan, "source": "paper",
                "hardware": hit["hardware"].values, "ttft_ms": hit["ttft_ms"].values, "tpot_ms": hit["tpot_ms"].values,
                "tokens_per_s": hit["tokens_per_s"].values, "speedup": hit["speedup"].values, "n_records": math.nan,
                "paper_label": (hit["method_label"] + " / " + hit["target"] + " / " + hit["dataset"]).values,
            }))
    table = pd.concat(blocks, ignore_index=True)
    display = pd.DataFrame({
        "Target": table["target"], "Dataset": table["task"], "T": table["temperature"].map(lambda v: fmt_num(v, 1)),
        "Method": table["method"].map(method_label),
        "Drafter": [d if (m != "ar" and isinstance(d, str) and d) else "—" for m, d in zip(table["method"], table["draft"], strict=True)],
        "γ": table["gamma_init"].map(lambda v: fmt_num(v, 0)), "Source": table["source"], "Hardware": table["hardware"],
        "TTFT (ms)": table["ttft_ms"].map(lambda v: fmt_num(v, 1)), "TPOT (ms)": table["tpot_ms"].map(lambda v: fmt_num(v, 1)),
        "Tok/s": table["tokens_per_s"].map(lambda v: fmt_num(v, 1)),
        "Speedup": [fmt_num(v, 2) + "×" + (SHARED_MARK if shared is True else "") if np.isfinite(v) else ""
                    for v, shared in zip(table["speedup"], table.get("shared_device", [None] * len(table)), strict=True)],
        "n": table["n_records"].map(lambda v: fmt_num(v, 0)),
    })
    caption = (
        "Speedup over autoregressive decoding (heterogeneous-vocabularies paper, Sec. 5 and Appendix D). "
        "TTFT and TPOT: means over prompts; Tok/s = " + POOLINGS[pooling] + "; speedup = Tok/s over AR's Tok/s for the "
        "same target and dataset (same temperature when available). 'measured': this results folder; 'paper': "
        "Appendix D as published for the same target, dataset and temperature (its own hardware; SD (HF) = "
        "Hugging Face Transformers' standard speculative decoding)."
    )
    if "shared_device" in table and (table["shared_device"] == True).any():  # noqa: E712 - NaN for paper rows
        caption += " " + SHARED_NOTE
    return Table("hetero_speedup", caption, display, table)


def category_table(df: pd.DataFrame, pooling: str = "pooled") -> Table | None:
    """Per-category speedup (SpecBench): per (pair, task, method) and category, the
    mean over initial γ of ``T(method, γ, category) / B(category)``.

    ``B`` = AR's throughput on the same target, task and category when AR records
    exist for that target and task; otherwise SpecDecode's throughput averaged
    over its initial γ for the same pair, task and category (the GammaTune
    Table 2 baseline); pairs with neither are left out. Column ``All`` = every
    category pooled. Tasks with a single category are skipped."""
    check_pooling(pooling)
    data = df[df["category"].notna()]
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
            spec_cat = group[group["method"] != "ar"]
            spec_cat = spec_cat if cat is None else spec_cat[spec_cat["category"] == cat]
            base = throughput_by(base_cat, ["gamma_init"], pooling)["tokens_per_s"].mean()
            cells = throughput_by(spec_cat, ["method", "gamma_init"], pooling)
            for method, per_gamma in cells.groupby("method"):
                mean, std, n = mean_std(per_gamma["tokens_per_s"] / base)
                shared = shared_device_mismatch(pd.concat([spec_cat[spec_cat["method"] == method], base_cat]))
                long.append({"pair": pair, "task": task, "method": method, "baseline": "ar" if use_ar else "specdecode",
                             "category": "All" if cat is None else cat, "speedup": mean, "std": std, "n_gamma": n,
                             "shared_device": shared})
    if not long:
        return None
    data_long = pd.DataFrame(long)
    cats = sorted(c for c in data_long["category"].unique() if c != "All") + ["All"]
    data_long["cell"] = [fmt_num(v, 2) + "×" + (SHARED_MARK if shared else "") if np.isfinite(v) else ""
                         for v, shared in zip(data_long["speedup"], data_long["shared_device"], strict=True)]
    wide = data_long.pivot_table(index=["pair", "task", "method", "baseline"], columns="category", values="cell",
                                 aggfunc="first").reset_index()
    order = {m: i for i, m in enumerate(ordered_methods(wide["method"]))}
    wide = wide.sort_values(["pair", "task", "method"], key=lambda s: s.map(order) if s.name == "method" else s)
    display = pd.DataFrame({"Pair": wide["pair"], "Task": wide["task"], "Method": wide["method"].map(method_label),
                            "Baseline": wide["baseline"].map(method_label)})
    for cat in cats:
        display[cat] = wide[cat].fillna("") if cat in wide else ""
    caption = (
        "Speedup per category: mean over initial γ of the method's throughput in that category over the "
        "baseline's (AR on the same target and task when it was run, else SpecDecode averaged over its "
        f"initial γ for the same pair); throughput = {POOLINGS[pooling]}. All = every category pooled. "
        f"The {STD_NOTE} is in the .data.csv."
    )
    if data_long["shared_device"].any():
        caption += " " + SHARED_NOTE
    return Table("category_speedup", caption, display, data_long)
