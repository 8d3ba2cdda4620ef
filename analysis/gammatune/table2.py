"""GammaTune Table 2: speedup over SpecDecode across initial γ (mean ± sample std across initial γ,
with each cell's 95 % paired jackknife CI), and the same table from drift-normalised records.

Definitions in ``speedup_table``'s docstring, repeated in its caption; the Average column is
``_average`` (it reproduces the paper's from its pair columns). Pure: a records frame in, a ``Table``
out, ``None`` when the records hold no baseline.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.artefacts import SCENARIO, artefact
from analysis.drift import (
    DRIFT_NORMALISED_NOTE,
    SAME_WORK_MARK,
    SAME_WORK_NOTE,
    AABand,
    aa_bands,
    average_band,
    gate_note,
    same_work,
)
from analysis.metrics import (
    POOLINGS,
    SHARED_MARK,
    SHARED_NOTE,
    STD_NOTE,
    aa_original,
    check_pooling,
    fmt_mean_std,
    gamma_speedups,
    is_aa_twin,
    mean_std,
    method_labels,
    ordered_methods,
    shared_device_mismatch,
)
from analysis.modeled import (
    MODELED_NOTE,
    MODELED_ROW,
    OUTSIDE_MARK,
    PAIRED_NOTE,
    agreement,
    inside,
    modeled_frame,
    paired_agreement,
)
from analysis.paper import gammatune_table2
from analysis.render import Table
from analysis.uncertainty import (
    CI_ROW,
    Estimate,
    Jackknife,
    fmt_ci,
    mark,
    mean_of,
    resolve,
    resolved_note,
)

AA_ROW = "A/A band"  # the Source of the row that shows each column's A/A gate (analysis.drift, "A/A gate")


def _average(rows: pd.DataFrame) -> tuple[float, float]:
    """The paper's Average column: the mean of the pair means ± the square root of the mean of the
    pair variances (sqrt(mean(std²))). That reproduces all five of GammaTune Table 2's Average stds
    from its pair stds at two decimals (0.23, 0.12, 0.06, 0.05, 0.03); the mean of the stds gives
    0.11 for HFHeuristic (``tests/analysis/test_analysis_paper.py``)."""
    means = rows["mean"].dropna()
    stds = rows["std"].dropna()
    return (float(means.mean()) if len(means) else math.nan,
            float(np.sqrt((stds ** 2).mean())) if len(stds) else math.nan)


def table2_estimates(cells: pd.DataFrame, baseline: str) -> dict[tuple[str, str], Estimate]:
    """GammaTune Table 2's cells replicate by replicate (``speedup_table``'s definition) from the
    per-(pair, method, γ) throughput estimates of one ``Jackknife`` (``Jackknife.cells``): per pair,
    ``B`` = mean over γ of the baseline's; cell = mean over γ of ``T(method, γ) / B``; pairs without
    the baseline are left out. Keyed by (pair, method), with (``"average"``, method) = the mean of
    the pair cells."""
    out: dict[tuple[str, str], Estimate] = {}
    for pair, in_pair in cells.groupby("pair", sort=True):
        base = mean_of(in_pair.loc[in_pair["method"] == baseline, "estimate"])
        if not np.isfinite(base.point):
            continue
        for method, rows in in_pair.groupby("method", sort=True):
            out[(pair, method)] = mean_of(e / base for e in rows["estimate"])
    for method in {m for _, m in out}:
        out[("average", method)] = mean_of(e for (p, m), e in out.items() if m == method and p != "average")
    return out


@artefact("tables/gammatune_table2_speedup", "speedup table", scope=SCENARIO,
          needs=("records", "pooling", "baseline", "paper"),
          about="GammaTune Table 2: speedup over SpecDecode, mean ± std across initial γ, 95 % CIs, beside the paper",
          terminal=True, headline=True)
def speedup_table(
    df: pd.DataFrame,
    pooling: str = "pooled",
    baseline: str = "specdecode",
    paper: pd.DataFrame | None = None,
    modeled: bool = True,
) -> Table | None:
    """GammaTune Table 2: speedup over SpecDecode, mean ± std across initial γ.

    Per pair: ``T(method, γ)`` = throughput of that job's records (``pooling``);
    ``B`` = mean over γ of ``T(baseline, γ)``; cell = mean ± sample std (ddof=1)
    over γ of ``T(method, γ) / B`` (so the baseline's own row is 1.00 ± its
    sensitivity to γ). AR, when present, is one cell (no γ, no std). Average
    column = mean of the pair means ± sqrt of the mean of the pair variances
    (``_average``: reproduces the paper's Average column from its pair columns).
    Pairs without baseline records are left out.

    Under every measured row, a ``95 % CI`` row: each cell's paired jackknife CI over prompt turns
    (``analysis.uncertainty``; ``table2_estimates``), marked ``≈`` when the method is not resolved
    from its neighbour in that column's ranking (``resolve``), gated by the column's A/A band where a
    twin ran (``analysis.drift.aa_bands``; the Average column: ``average_band``), shown in a last row
    ``A/A band`` (``AA_ROW``) and flagged ``≠ 1`` where the twin's interval excludes 1. A/A twins
    (``aa_original``) are no method rows here (their ratio to their original is the noise floor,
    ``analysis.drift``), and never the baseline. A cell whose method did another's work in every record of the
    pair (``analysis.drift.same_work``) shows ``≡ <original>`` in its CI row and is not ranked (``same_work_as``
    in ``data``)."""
    check_pooling(pooling)
    if aa_original(baseline):
        raise ValueError(f"{baseline} is an A/A twin: it measures the noise floor and is never a baseline")
    rows_df = df[~is_aa_twin(df["method"])]
    per_gamma = gamma_speedups(rows_df, pooling, baseline, scope=("pair",))
    per_gamma = per_gamma[per_gamma["speedup"].notna()] if not per_gamma.empty else per_gamma
    if per_gamma.empty:
        return None
    pairs = sorted(per_gamma["pair"].unique())
    methods = ordered_methods(per_gamma["method"].unique())
    jackknife = Jackknife(df, pooling)
    estimates = table2_estimates(jackknife.cells(rows_df[rows_df["pair"].isin(pairs)], ["pair", "method", "gamma_init"]),
                                 baseline)
    bands = {p: b for p, b in aa_bands(df, pooling, jackknife).items() if p in pairs}
    gates: dict[str, AABand | None] = {**{p: bands.get(p) for p in pairs}, "average": average_band(bands, pairs)}
    copies = {key: original for key, original in same_work(rows_df).items() if key[0] in pairs}  # never ranked
    ranks = {p: resolve({m: e for (q, m), e in estimates.items() if q == p and (q, m) not in copies},
                        band=gate.band if gate else 0.0)
             for p, gate in gates.items()}

    def uncertainty(pair: str, method: str) -> dict[str, Any]:
        lo, hi = estimates[(pair, method)].interval() if (pair, method) in estimates else (math.nan, math.nan)
        ranked = ranks[pair].get(method)
        gate = gates[pair]
        return {"ci_lo": lo, "ci_hi": hi, "rank": ranked.rank if ranked else None,
                "resolved": ranked.resolved if ranked else None, "aa_band": gate.band if gate else math.nan,
                "aa_excludes_one": gate.flagged if gate else None, "same_work_as": copies.get((pair, method))}

    long = []
    for (pair, method), group in per_gamma.groupby(["pair", "method"], sort=True):
        mean, std, n = mean_std(group["speedup"])
        tps_mean, tps_std, _ = mean_std(group["tokens_per_s"])
        gammas = sorted(int(g) for g in group["gamma_init"].dropna())
        involved = df[(df["pair"] == pair) & df["method"].isin([method, baseline])]
        long.append({"method": method, "pair": pair, "source": "measured", "mean": mean, "std": std,
                     "shared_device": shared_device_mismatch(involved),
                     "n_gamma": n, "gammas": " ".join(map(str, gammas)), "mean_tokens_per_s": tps_mean,
                     "std_tokens_per_s": tps_std, "baseline_tokens_per_s": group["baseline_tokens_per_s"].iloc[0],
                     "pooling": pooling, **uncertainty(pair, method)})
    measured = pd.DataFrame(long)
    for method in methods:
        mean, std = _average(measured[measured["method"] == method])
        long.append({"method": method, "pair": "average", "source": "measured", "mean": mean, "std": std,
                     "pooling": pooling, **uncertainty("average", method)})
    published = gammatune_table2(paper) if paper is not None else pd.DataFrame(columns=["pair"])
    published = published[published["pair"].isin(pairs)]
    if not published.empty and baseline == "specdecode":
        full = gammatune_table2(paper)
        shown = pd.concat([published, full[(full["pair"] == "average") & full["method"].isin(published["method"])]])
        for rec in shown.to_dict("records"):
            long.append({**rec, "source": "paper"})
    data = pd.DataFrame(long)
    frame = modeled_frame(df) if modeled else None  # the modeled records, once: the modeled row and the paired check
    model = _modeled(frame, pooling, baseline) if frame is not None else None
    paired = _paired(frame, pairs, jackknife, baseline, estimates) if model is not None else {}
    if paired:
        bounds = [paired[(p, m)].interval() if ok and (p, m) in paired else (math.nan, math.nan)
                  for p, m, ok in zip(data["pair"], data["method"], data["source"] == "measured", strict=True)]
        data["measured_over_modeled"] = [paired[(p, m)].point if ok and (p, m) in paired else math.nan for p, m, ok in
                                         zip(data["pair"], data["method"], data["source"] == "measured", strict=True)]
        data["measured_over_modeled_lo"], data["measured_over_modeled_hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
    if model is not None:
        measured_rows = data["source"] == "measured"
        found = [model.get((p, m)) if ok else None for p, m, ok in zip(data["pair"], data["method"], measured_rows,
                                                                         strict=True)]
        data["modeled_mean"] = [f[0] if f else math.nan for f in found]
        data["modeled_std"] = [f[1] if f else math.nan for f in found]
        data["modeled_inside"] = [inside(f[0], (lo, hi)) if f else None
                                  for f, lo, hi in zip(found, data["ci_lo"], data["ci_hi"], strict=True)]
    data["n_gamma"] = data["n_gamma"].astype("Int64")
    data["rank"] = data["rank"].astype("Int64")
    display_rows = []
    label = method_labels(df)
    for method in ordered_methods(data["method"].unique()):
        for source in ("measured", "paper"):
            rows = data[(data["method"] == method) & (data["source"] == source)]
            if rows.empty:
                continue
            cells = {p: rows[rows["pair"] == p] for p in [*pairs, "average"]}
            row = {"Method": label(method), "Source": source}
            ci_row = {"Method": "", "Source": CI_ROW}
            for p, cell in cells.items():
                column = "Average" if p == "average" else p
                shared = p != "average" and source == "measured" and not cell.empty and bool(cell["shared_device"].iloc[0])
                row[column] = (fmt_mean_std(cell["mean"].iloc[0], cell["std"].iloc[0]) + (SHARED_MARK if shared else "")
                               if not cell.empty else "")
                ci_row[column] = (fmt_ci(estimates[(p, method)].interval())
                                  + (f" {SAME_WORK_MARK} {label(copies[(p, method)])}" if (p, method) in copies
                                     else mark(ranks[p].get(method)))
                                  if (p, method) in estimates else "")
            display_rows.append(row)
            if source == "measured":
                display_rows.append(ci_row)
                if model is not None:
                    display_rows.append({"Method": "", "Source": MODELED_ROW, **{
                        ("Average" if p == "average" else p): _modeled_cell(cell) for p, cell in cells.items()}})
    if bands:
        display_rows.append({"Method": "", "Source": AA_ROW, **{"Average" if p == "average" else p:
                                                               gate.text() if gate else "" for p, gate in gates.items()}})
    display = pd.DataFrame(display_rows)
    caption = (
        f"Speedup over {label(baseline)} (GammaTune Table 2). Per pair, the throughput of each initial γ "
        f"divided by {label(baseline)}'s throughput averaged over all its initial γ; cell = mean ± "
        f"{STD_NOTE}. Throughput = {POOLINGS[pooling]}. Average = mean of the pair means ± sqrt(mean of the "
        "pair variances), over the pairs shown for 'measured' rows and over the paper's four pairs for 'paper' "
        "rows (the paper's own Average column, which that formula reproduces). "
        "'measured': this results folder; 'paper': GammaTune Table 2 as published (SpecBench, one H100). "
        f"± : {STD_NOTE} (the paper's spread). [lo, hi] (rows '{CI_ROW}'): {jackknife.note()}, of the same "
        f"cell, replicate by replicate (Average: the mean of the pair cells); {label(baseline)}'s own cell "
        "is 1 in every replicate, the other intervals carry its uncertainty. "
        + resolved_note("within the column, by the cell's point estimate")
    )
    if len(rows_df) < len(df):
        caption += " A/A twins are not rows here: their ratio to the method they copy is the noise floor (noise_floor)."
    if copies:
        caption += " " + SAME_WORK_NOTE
    if bands:
        caption += (f" Row '{AA_ROW}': each column's A/A band (the widest of the pair's A/A pairs; Average: those ratios averaged over the pairs). "
                    + gate_note({("Average" if p == "average" else p): gate for p, gate in gates.items()}, label))
    if "shared_device" in data and data["shared_device"].fillna(False).astype(bool).any():
        caption += " " + SHARED_NOTE
    if model is not None:
        caption += f" {MODELED_NOTE} Here: {agreement(list(data['modeled_inside']))}."
    if paired:
        cells = data[(data["source"] == "measured") & (data["pair"] != "average")]
        caption += (f" {PAIRED_NOTE} Here: " + paired_agreement(list(zip(cells["measured_over_modeled_lo"],
                                                                          cells["measured_over_modeled_hi"],
                                                                          strict=True))) + ".")
    return Table("gammatune_table2_speedup", caption, display, data)


def _paired(frame: pd.DataFrame, pairs: list[str], jackknife: Jackknife, baseline: str,
            measured: dict[tuple[str, str], Estimate]) -> dict[tuple[str, str], Estimate]:
    """Per (pair, method) cell: measured ÷ modeled (``PAIRED_NOTE``), both from the one jackknife of the measured
    records (``frame``, the modeled records, holds the same prompt turns), so their replicates pair up."""
    frame = frame[frame["pair"].isin(pairs) & ~is_aa_twin(frame["method"])]
    if frame.empty:
        return {}
    try:
        model = table2_estimates(jackknife.cells(frame, ["pair", "method", "gamma_init"]), baseline)
    except ValueError:  # modeled rows of turns the measured jackknife does not hold: no pairing
        return {}
    return {key: measured[key] / model[key] for key in measured if key in model and key[0] != "average"}


def _modeled(frame: pd.DataFrame, pooling: str, baseline: str) -> dict[tuple[str, str], tuple[float, float]] | None:
    """``(mean, std)`` of every (pair, method) cell of the table of the modeled records (``frame``,
    ``analysis.modeled.modeled_frame``), the Average column under pair ``average``; None when it makes no table."""
    table = speedup_table(frame, pooling, baseline, None, modeled=False)
    if table is None:
        return None
    rows = table.data[table.data["source"] == "measured"]
    return {(p, m): (mean, std) for p, m, mean, std in zip(rows["pair"], rows["method"], rows["mean"], rows["std"],
                                                          strict=True)}


def _modeled_cell(cell: pd.DataFrame) -> str:
    if cell.empty or "modeled_mean" not in cell or not np.isfinite(cell["modeled_mean"].iloc[0]):
        return ""
    flag = cell["modeled_inside"].iloc[0]
    return fmt_mean_std(cell["modeled_mean"].iloc[0], cell["modeled_std"].iloc[0]) + (OUTSIDE_MARK if flag is False else "")


def _drift_normalised_line(table: Table, inputs: Any) -> list[str]:
    return [f"drift-normalised alternative (by name, not in place of the measured table): {table.name}"]


@artefact("tables/gammatune_table2_speedup_drift_normalised", "drift-normalised speedup table", scope=SCENARIO,
          needs=("normalised", "pooling", "baseline"),
          about="GammaTune Table 2 from drift-normalised records (analysis.drift), beside the measured one",
          when=lambda inputs: inputs.normalised is not None, terminal=True, lines=_drift_normalised_line)
def drift_normalised_speedup_table(normalised: pd.DataFrame, pooling: str = "pooled",
                                   baseline: str = "specdecode") -> Table | None:
    """``speedup_table`` of records whose throughput is drift-normalised (``analysis.drift.drift_normalised``),
    under its own name and saying so, never in place of the measured table (and without the paper's rows)."""
    table = speedup_table(normalised, pooling, baseline, None, modeled=False)
    if table is not None:
        table.name += "_drift_normalised"
        table.caption = DRIFT_NORMALISED_NOTE + table.caption
    return table
