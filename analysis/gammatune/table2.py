"""GammaTune Table 2: speedup over SpecDecode across initial γ (mean ± sample std across initial γ,
with each cell's 95 % paired jackknife CI), and the same table from drift-normalised records.

Definitions in ``speedup_table``'s docstring, for a reader in docs/pages/analysis.md ("Reading the tables"), which
the caption links; the Average column is ``_average`` (it reproduces the paper's from its pair columns). The cells'
uncertainty is weighed by ``analysis.comparison``; this module is the table's estimates and layout. Pure: a records
frame in, a ``Table`` out, ``None`` when the records hold no baseline.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.artefacts import SCENARIO, artefact
from analysis.comparison import Weighed, modeled_data, notes, weigh
from analysis.drift import DRIFT_NORMALISED_NOTE
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
from analysis.modeled import MODELED_ROW, OUTSIDE_MARK, modeled_frame, paired_agreement
from analysis.noise_floor import SAME_WORK_MARK, AABand, aa_bands, average_band, same_work
from analysis.paper import gammatune_table2
from analysis.render import Table
from analysis.uncertainty import CI_ROW, Estimate, Jackknife, fmt_ci, mean_of

AA_ROW = "A/A band"  # the Source of the row that shows each column's A/A gate (analysis.noise_floor, "A/A gate")


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

    Under every measured row, a ``95 % CI`` row and, where records are modeled, a ``modeled`` row: the cells of
    ``table2_estimates`` weighed by ``analysis.comparison.weigh`` (interval, ``≈``, the column's A/A gate:
    ``analysis.noise_floor.aa_bands``, the Average column's ``average_band``, shown in a last row ``A/A band``,
    ``AA_ROW``), a cell that did another method's work shown ``≡ <original>`` and not ranked. A/A twins
    (``aa_original``) are no method rows here (their ratio to their original is the noise floor) and never the
    baseline. ``data``: one row per (pair, method, source) with ``ci_lo``, ``ci_hi``, ``rank``, ``resolved``,
    ``aa_band``, ``aa_excludes_one``, ``same_work_as`` and the modeled and paired columns (``_paired``)."""
    check_pooling(pooling)
    if aa_original(baseline):
        raise ValueError(f"{baseline} is an A/A twin: it measures the noise floor and is never a baseline")
    rows_df = df[~is_aa_twin(df["method"])]
    per_gamma = gamma_speedups(rows_df, pooling, baseline, scope=("pair",))
    per_gamma = per_gamma[per_gamma["speedup"].notna()] if not per_gamma.empty else per_gamma
    if per_gamma.empty:
        return None
    pairs = sorted(per_gamma["pair"].unique())
    jackknife = Jackknife(df, pooling)
    estimates = table2_estimates(jackknife.cells(rows_df[rows_df["pair"].isin(pairs)], ["pair", "method", "gamma_init"]),
                                 baseline)
    bands = {p: b for p, b in aa_bands(df, pooling, jackknife).items() if p in pairs}
    gates: dict[str, AABand | None] = {**{p: bands.get(p) for p in pairs}, "average": average_band(bands, pairs)}
    copies = {key: original for key, original in same_work(rows_df).items() if key[0] in pairs}
    frame = modeled_frame(df) if modeled else None  # the modeled records, once: the modeled row and the paired check
    model = modeled_data(frame, lambda records: speedup_table(records, pooling, baseline, None, modeled=False))
    model = model[model["source"] == "measured"].set_index(["pair", "method"]) if model is not None else None
    cells = weigh(estimates, gates, copies, model["mean"].to_dict() if model is not None else None)
    data = _data(df, per_gamma, pairs, cells, baseline, pooling, paper)
    paired = _paired(frame, pairs, jackknife, baseline, estimates) if model is not None else {}
    _modeled_columns(data, cells, model, paired)
    data["n_gamma"] = data["n_gamma"].astype("Int64")
    data["rank"] = data["rank"].astype("Int64")
    label = method_labels(df)
    display = _display(data, pairs, cells, gates if bands else None, model is not None, label)
    caption = (
        f"Speedup over {label(baseline)} (GammaTune Table 2), {POOLINGS[pooling]}: per pair, each initial γ's "
        f"throughput ÷ {label(baseline)}'s mean over its initial γ; cell = mean ± {STD_NOTE}; Average = mean of the "
        "pair means ± sqrt(mean of the pair variances), as the paper's. 'paper': as published (SpecBench, one H100). "
        + notes(jackknife, "within the column", {_column(p): g for p, g in gates.items()} if bands else None, bool(copies),
                list(cells.values()) if model is not None else None)
    )
    if len(rows_df) < len(df):
        caption += " A/A twins are not rows here (noise_floor)."
    if data["shared_device"].fillna(False).astype(bool).any():
        caption += " " + SHARED_NOTE
    if paired:
        measured = data[(data["source"] == "measured") & (data["pair"] != "average")]
        caption += (" Paired check: " + paired_agreement(
            list(zip(measured["measured_over_modeled_lo"], measured["measured_over_modeled_hi"], strict=True)),
            list(measured["same_work_as"].notna())) + ".")
    return Table("gammatune_table2_speedup", caption, display, data)


def _modeled_columns(data: pd.DataFrame, cells: dict[tuple, Weighed], model: pd.DataFrame | None,
                     paired: dict[tuple[str, str], Estimate]) -> None:
    """``speedup_table``'s ``data`` gets, on its measured rows, the paired check (``measured_over_modeled``,
    ``_lo``, ``_hi``: ``_paired``) and the modeled overlay (``modeled_mean``, ``modeled_std``, ``modeled_inside``)."""
    if paired:
        measured = data["source"] == "measured"
        found = [paired.get((p, m)) if ok else None for p, m, ok in zip(data["pair"], data["method"], measured,
                                                                         strict=True)]
        data["measured_over_modeled"] = [f.point if f else math.nan for f in found]
        bounds = [f.interval() if f else (math.nan, math.nan) for f in found]
        data["measured_over_modeled_lo"], data["measured_over_modeled_hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
    if model is not None:
        found = [cells.get((p, m)) if ok else None for p, m, ok in zip(data["pair"], data["method"],
                                                                        data["source"] == "measured", strict=True)]
        data["modeled_mean"] = [f.modeled if f else math.nan for f in found]
        data["modeled_std"] = [model["std"].get((p, m), math.nan) if f else math.nan
                               for p, m, f in zip(data["pair"], data["method"], found, strict=True)]
        data["modeled_inside"] = [f.modeled_inside if f else None for f in found]


def _data(df: pd.DataFrame, per_gamma: pd.DataFrame, pairs: list[str], cells: dict[tuple, Weighed], baseline: str,
          pooling: str, paper: pd.DataFrame | None) -> pd.DataFrame:
    """``speedup_table``'s ``data`` before its modeled columns: the measured cells, their Average, the paper's."""

    def uncertainty(pair: str, method: str) -> dict[str, Any]:
        cell = cells.get((pair, method))
        lo, hi = cell.interval if cell else (math.nan, math.nan)
        gate = cell.gate if cell else None
        return {"ci_lo": lo, "ci_hi": hi, "rank": cell.rank if cell else None,
                "resolved": cell.resolved if cell else None, "aa_band": gate.band if gate else math.nan,
                "aa_excludes_one": gate.flagged if gate else None, "same_work_as": cell.same_work_as if cell else None}

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
    for method in ordered_methods(per_gamma["method"].unique()):
        mean, std = _average(measured[measured["method"] == method])
        long.append({"method": method, "pair": "average", "source": "measured", "mean": mean, "std": std,
                     "pooling": pooling, **uncertainty("average", method)})
    published = gammatune_table2(paper) if paper is not None else pd.DataFrame(columns=["pair"])
    published = published[published["pair"].isin(pairs)]
    if not published.empty and baseline == "specdecode":
        full = gammatune_table2(paper)
        shown = pd.concat([published, full[(full["pair"] == "average") & full["method"].isin(published["method"])]])
        long += [{**rec, "source": "paper"} for rec in shown.to_dict("records")]
    return pd.DataFrame(long)


def _display(data: pd.DataFrame, pairs: list[str], cells: dict[tuple, Weighed], gates: dict | None, modeled: bool,
             label: Any) -> pd.DataFrame:
    """The reader's frame of ``speedup_table``: per method a measured row, its CI row (and modeled row), the
    paper's row; a last ``A/A band`` row when a twin ran (``gates``)."""
    columns = {p: _column(p) for p in [*pairs, "average"]}
    rows = []
    for method in ordered_methods(data["method"].unique()):
        for source in ("measured", "paper"):
            mine = data[(data["method"] == method) & (data["source"] == source)]
            if mine.empty:
                continue
            found = {p: mine[mine["pair"] == p] for p in columns}
            row = {"Method": label(method), "Source": source}
            for p, cell in found.items():
                shared = p != "average" and source == "measured" and not cell.empty and bool(cell["shared_device"].iloc[0])
                row[columns[p]] = (fmt_mean_std(cell["mean"].iloc[0], cell["std"].iloc[0]) + (SHARED_MARK if shared else "")
                                   if not cell.empty else "")
            rows.append(row)
            if source == "measured":
                rows.append({"Method": "", "Source": CI_ROW, **{columns[p]: _ci_cell(cells.get((p, method)), label)
                                                                for p in columns}})
                if modeled:
                    rows.append({"Method": "", "Source": MODELED_ROW, **{columns[p]: _modeled_cell(cell)
                                                                         for p, cell in found.items()}})
    if gates:
        rows.append({"Method": "", "Source": AA_ROW, **{columns[p]: gate.text() if gate else ""
                                                        for p, gate in gates.items()}})
    return pd.DataFrame(rows)


def _column(pair: str) -> str:
    return "Average" if pair == "average" else pair


def _ci_cell(cell: Weighed | None, label: Any) -> str:
    if cell is None:
        return ""
    return fmt_ci(cell.interval) + (f" {SAME_WORK_MARK} {label(cell.same_work_as)}" if cell.same_work_as else cell.mark)


def _paired(frame: pd.DataFrame | None, pairs: list[str], jackknife: Jackknife, baseline: str,
            measured: dict[tuple[str, str], Estimate]) -> dict[tuple[str, str], Estimate]:
    """Per (pair, method) cell: measured ÷ modeled (docs/pages/analysis.md, "modeled"), both from the one jackknife
    of the measured records (``frame``, the modeled records, holds the same prompt turns), so their replicates pair
    up."""
    if frame is None:
        return {}
    frame = frame[frame["pair"].isin(pairs) & ~is_aa_twin(frame["method"])]
    if frame.empty:
        return {}
    try:
        model = table2_estimates(jackknife.cells(frame, ["pair", "method", "gamma_init"]), baseline)
    except ValueError:  # modeled rows of turns the measured jackknife does not hold: no pairing
        return {}
    return {key: measured[key] / model[key] for key in measured if key in model and key[0] != "average"}


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
