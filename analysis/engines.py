"""The engines table and figure: each backend's target alone and methods side by side on the same weights.

Rows of one target, pair and task (the records' ``target``, ``pair``, ``task``, temperature and ``max_new_tokens``:
the interleaved launcher decodes a pair's jobs side by side): a row per backend × method × initial γ with pooled tokens/s, the speedup over *its own* target alone (each record's
paired reference: the same backend, build and flags, decoded beside it: the baseline rule) and over the fastest
target alone of *any* backend on these weights (the ``ar`` cell with the highest pooled tokens/s), acceptance,
TTFT, TPOT and how many outputs equal their target alone's. Every ratio carries the house's paired jackknife CI
(``analysis.uncertainty``); where an A/A twin ran (``specdecode_twin``) its row divides the twin by its original,
whose interval should contain 1 (the house's gate on the noise). ``backend`` of records written before the
backends is ``torch``.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.artefacts import SWEEP, artefact
from analysis.metrics import aa_original, fmt_num, is_ar, method_labels
from analysis.render import Table
from analysis.uncertainty import Jackknife, fmt_ci

KEYS = ["backend", "method", "gamma_init"]
#: a table's rows share these: the interleaved launcher decodes a pair's jobs side by side, pairs one after another
GROUPS = ["target", "pair", "task", "temperature", "max_new_tokens"]


def _backend(df: pd.DataFrame) -> pd.Series:
    col = df["backend"] if "backend" in df.columns else pd.Series(None, index=df.index, dtype=object)
    return col.where(col.notna(), "torch").astype(str)


def has_backends(df: pd.DataFrame | None) -> bool:
    return df is not None and not df.empty and _backend(df).nunique() > 1


def engine_cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per group (``GROUPS``) and cell (``KEYS``): the estimates behind the table (module docstring)."""
    df = df.assign(backend=_backend(df))
    rows = []
    for group, part in df.groupby(GROUPS, dropna=False, sort=True):
        jk = Jackknife(part)
        ar_cells = part[is_ar(part)]
        alone = {b: jk.estimate(g) for b, g in ar_cells.groupby("backend")}
        fastest = max(alone, key=lambda b: alone[b].point) if alone else None
        cells = dict(iter(part.groupby(KEYS, dropna=False, sort=True)))
        for key, cell in cells.items():
            row = _cell(dict(zip(GROUPS, group, strict=True)), dict(zip(KEYS, key, strict=True)), cell, jk,
                        alone.get(fastest) if fastest else None, fastest)
            original = cells.get((key[0], aa_original(key[1]), key[2]))  # an A/A twin: over its original, paired
            if original is not None:
                ratio = jk.estimate(cell) / jk.estimate(original)
                row["aa_ratio"], row["aa_ci"] = ratio.point, ratio.interval()
            rows.append(row)
    return pd.DataFrame(rows)


def _cell(group: dict, key: dict, cell: pd.DataFrame, jk: Jackknife, fastest_alone, fastest: str | None) -> dict:
    est = jk.estimate(cell)
    own = est / jk.estimate(cell, ar=True)
    over = est / fastest_alone if fastest_alone is not None else None
    lossless = cell["lossless"] if "lossless" in cell.columns else pd.Series(dtype=object)
    checked = lossless.dropna()
    drafted = pd.to_numeric(cell.get("drafted"), errors="coerce").sum() if "drafted" in cell else 0
    accepted = pd.to_numeric(cell.get("accepted"), errors="coerce").sum() if "accepted" in cell else 0
    tpot = pd.to_numeric(cell.get("tpot_ms"), errors="coerce")
    return {**group, **key, "tokens_per_s": est.point, "tokens_per_s_ci": est.interval(),
            "speedup_own": own.point, "speedup_own_ci": own.interval(),
            "speedup_fastest": over.point if over is not None else math.nan,
            "speedup_fastest_ci": over.interval() if over is not None else (math.nan, math.nan),
            "fastest_alone": fastest, "acceptance": accepted / drafted if drafted else math.nan,
            "ttft_ms": float(pd.to_numeric(cell["ttft_ms"], errors="coerce").median()),
            "tpot_ms": float(tpot.median()) if tpot is not None else math.nan,
            "lossless": int(checked.astype(bool).sum()), "checked": int(checked.size), "n_records": len(cell),
            "aa_ratio": math.nan, "aa_ci": (math.nan, math.nan)}


@artefact("tables/engines", "engines table", scope=SWEEP, needs=("records",), when=lambda i: has_backends(i.records),
          about="each backend's target alone and methods side by side on the same weights: tokens/s, speedup over "
                "its own target alone and over the fastest target alone of any backend, with 95 % CIs")
def engines_table(df: pd.DataFrame) -> Table | None:
    """The engines table (module docstring); None unless the records hold more than one backend."""
    if not has_backends(df):
        return None
    cells = engine_cells(df)
    label = method_labels(df)
    display = pd.DataFrame({
        "Target": cells["target"], "Task": cells["task"], "Backend": cells["backend"], "Pair": cells["pair"],
        "Method": cells["method"].map(label),
        "γ": cells["gamma_init"].map(lambda g: fmt_num(g, 0) if pd.notna(g) else "—"),  # null: the target alone
        "tokens/s": [f"{fmt_num(v, 2)} {fmt_ci(ci)}" for v, ci in zip(cells["tokens_per_s"], cells["tokens_per_s_ci"],
                                                                     strict=True)],
        "× own target alone": [f"{fmt_num(v, 3)} {fmt_ci(ci, 3)}" for v, ci in
                               zip(cells["speedup_own"], cells["speedup_own_ci"], strict=True)],
        "× fastest target alone": [f"{fmt_num(v, 3)} {fmt_ci(ci, 3)} ({f})" for v, ci, f in
                                   zip(cells["speedup_fastest"], cells["speedup_fastest_ci"], cells["fastest_alone"],
                                       strict=True)],
        "A/A": ["" if math.isnan(v) else f"{fmt_num(v, 3)} {fmt_ci(ci, 3)}" for v, ci in
                zip(cells["aa_ratio"], cells["aa_ci"], strict=True)],
        "acceptance": cells["acceptance"].map(lambda v: fmt_num(v, 3) if not math.isnan(v) else "—"),
        "TTFT (ms)": cells["ttft_ms"].map(lambda v: fmt_num(v, 1)),
        "TPOT (ms)": cells["tpot_ms"].map(lambda v: fmt_num(v, 1)),
        "lossless": [f"{a}/{b}" if b else "—" for a, b in zip(cells["lossless"], cells["checked"], strict=True)],
    })
    caption = ("Engines side by side on the same weights: pooled tokens/s; × own target alone = over each record's "
               "paired reference on the same backend (its target alone, the same build and flags); × fastest target "
               "alone = over the fastest backend's ar cell (named) on the same prompt turns; A/A = an identical twin "
               "job over its original (its interval should contain 1); TTFT and TPOT medians; lossless = outputs "
               f"token for token equal to the same backend's target alone. {Jackknife(df).note()}.")
    return Table("engines", caption, display, cells)


@artefact("figures/engines", "engines figure", scope=SWEEP, needs=("records",), when=lambda i: has_backends(i.records),
          about="tokens/s of each backend's target alone and methods, with 95 % CIs, one panel per target and task")
def engines_figure(df: pd.DataFrame):
    """Bars of pooled tokens/s per cell with their CIs, grouped by backend (one panel per target and task)."""
    if not has_backends(df):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = engine_cells(df)
    groups = list(cells.groupby(GROUPS, dropna=False, sort=True))
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 3.2 * len(groups)), squeeze=False)
    label = method_labels(df)
    for ax, (group, part) in zip(axes[:, 0], groups, strict=True):
        names = [f"{b}\n{label(m)}" + ("" if pd.isna(g) else f" γ={int(g)}") + f"\n{p.split('_', 1)[-1]}"
                 for b, m, g, p in zip(part["backend"], part["method"], part["gamma_init"], part["pair"], strict=True)]
        lo = [v - ci[0] for v, ci in zip(part["tokens_per_s"], part["tokens_per_s_ci"], strict=True)]
        hi = [ci[1] - v for v, ci in zip(part["tokens_per_s"], part["tokens_per_s_ci"], strict=True)]
        colors = ["tab:blue" if b == "torch" else "tab:orange" for b in part["backend"]]
        ax.bar(range(len(part)), part["tokens_per_s"], yerr=[lo, hi], color=colors, capsize=3)
        ax.set_xticks(range(len(part)), names, fontsize=7)
        ax.set_ylabel("tokens/s (pooled)")
        ax.set_title(f"{group[0]}, {group[1]}: blue ours (torch), orange llama.cpp", fontsize=9)
    fig.tight_layout()
    return fig
