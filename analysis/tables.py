"""GammaTune's tables from a records frame: model latency (Table 1), speedup over
SpecDecode across initial γ (Table 2), acceptance / mean γ per method, and the
per-round trace of one prompt (Figure 2a and the appendix).

Each function is pure (frame in, ``Table`` out) and returns ``None`` when its
inputs are absent; definitions are in the docstrings and repeated in captions.
"""

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
    aa_original,
    check_pooling,
    fmt_mean_std,
    fmt_num,
    gamma_speedups,
    is_aa_twin,
    is_ar,
    mean_std,
    method_label,
    ordered_methods,
    shared_device_mismatch,
    throughput,
)
from analysis.paper import gammatune_table1, gammatune_table2, model_key
from analysis.render import Table
from analysis.uncertainty import (
    CI_ROW,
    Bootstrap,
    BootstrapSpec,
    Estimate,
    fmt_ci,
    mark,
    mean_of,
    resolve,
    resolved_note,
    unit_keys,
)


def ar_tpot_ms(records: pd.DataFrame, pooling: str = "pooled") -> float:
    """Milliseconds per output token after the first (TPOT, prefill excluded) of a set of records:
    ``pooled``: Σ (wall − TTFT) / Σ (new tokens − 1); ``mean``: the mean of per-record ``tpot_ms``;
    ``question``: the pooled value per question (all its turns), averaged over questions. Records
    with fewer than two new tokens have no TPOT and are left out."""
    check_pooling(pooling)
    rows = records[records["new_tokens"] >= 2]
    if rows.empty:
        return math.nan
    if pooling == "mean":
        return float(rows["tpot_ms"].mean())

    def pooled(g: pd.DataFrame) -> float:
        return float((g["wall_ms"] - g["ttft_ms"]).sum() / (g["new_tokens"] - 1).sum())

    if pooling == "question":
        keys = [k for k in ("task", "prompt_id") if k in rows.columns]
        return float(np.mean([pooled(g) for _, g in rows.groupby(keys, dropna=False, sort=False)]))
    return pooled(rows)


def latency_table(df: pd.DataFrame, pooling: str = "pooled", paper: pd.DataFrame | None = None) -> Table | None:
    """GammaTune Table 1: milliseconds per token of each model decoding alone, **excluding the
    prefill** (our reading: the paper's Table 1 does not say; README, Protocols): the TPOT of autoregressive decoding (``ar_tpot_ms``), per model (``target``), its
    weight quantization and its KV cache. Every model of the table (targets and drafts) is timed as
    the target of an AR job (recipe ``gammatune_table1``: ``pair=target-only model@pair.target=...``).
    ``paper``: GammaTune Table 1 matched by ``analysis.paper.model_key`` (quantization suffixes
    ignored, so both the int8 and the int4 70B rows face the paper's int4 number)."""
    check_pooling(pooling)
    ar = df[is_ar(df) & df["target"].notna()]
    if ar.empty:
        return None
    published = gammatune_table1(paper) if paper is not None else None
    ar = ar.assign(_quant=ar["target_quant"].fillna("—"), _cache=ar["ar_cache"].fillna("dynamic"))
    rows = []
    for (target, quant, cache), group in ar.groupby(["target", "_quant", "_cache"], sort=True):
        tps = throughput(group, pooling)
        row: dict[str, Any] = {
            "model": target,
            "quant": quant,
            "cache": cache,
            "ms_per_token": ar_tpot_ms(group, pooling),
            "tokens_per_s": tps,
            "ttft_ms": float(group["ttft_ms"].mean()),
            "n_records": len(group),
            "paper_model": "",
            "paper_ms_per_token": math.nan,
            "paper_note": "",
        }
        if published is not None:
            hit = published[published["target_key"] == model_key(target)]
            if not hit.empty:
                row["paper_model"] = hit["target"].iloc[0]
                row["paper_ms_per_token"] = float(hit["ms_per_token"].iloc[0])
                note = hit["note"].iloc[0]
                row["paper_note"] = note if isinstance(note, str) else ""
        rows.append(row)
    data = pd.DataFrame(rows)
    display = pd.DataFrame({
        "Model": data["model"],
        "Quant": data["quant"],
        "KV cache": data["cache"],
        "ms/token (measured)": data["ms_per_token"].map(lambda v: fmt_num(v, 2)),
        "ms/token (paper)": data["paper_ms_per_token"].map(lambda v: fmt_num(v, 2)),
        "Paper model": data["paper_model"],
        "tokens/s": data["tokens_per_s"].map(lambda v: fmt_num(v, 1)),
        "TTFT (ms)": data["ttft_ms"].map(lambda v: fmt_num(v, 1)),
        "n": data["n_records"],
    })
    tpot_how = {"pooled": "Σ (wall − TTFT) / Σ (new tokens − 1) over prompts",
                "mean": "mean of per-prompt TPOT",
                "question": "Σ (wall − TTFT) / Σ (new tokens − 1) per question, averaged over questions"}[pooling]
    caption = (
        "Model latency (GammaTune Table 1): milliseconds per output token of each model decoding alone "
        f"(autoregressive), excluding the prefill (our reading: the paper does not say): TPOT = {tpot_how}. tokens/s = {POOLINGS[pooling]} (prefill "
        "included). 'measured': this results folder; 'paper': GammaTune Table 1 as published (one H100; its "
        "Llama-3.1-70B row is int4 per the table's footnote, int8 per its Sec. 5), matched by model name without "
        "organisation, -instruct/-vX and quantization suffixes."
    )
    return Table("gammatune_table1_latency", caption, display, data)


def _average(rows: pd.DataFrame) -> tuple[float, float]:
    """The paper's Average column: the mean of the pair means ± the square root of the mean of the
    pair variances (sqrt(mean(std²))). That reproduces all five of GammaTune Table 2's Average stds
    from its pair stds at two decimals (0.23, 0.12, 0.06, 0.05, 0.03); the mean of the stds gives
    0.11 for HFHeuristic (``tests/test_analysis.py``)."""
    means = rows["mean"].dropna()
    stds = rows["std"].dropna()
    return (float(means.mean()) if len(means) else math.nan,
            float(np.sqrt((stds ** 2).mean())) if len(stds) else math.nan)


def table2_estimates(cells: pd.DataFrame, baseline: str) -> dict[tuple[str, str], Estimate]:
    """GammaTune Table 2's cells replicate by replicate (``speedup_table``'s definition) from the
    per-(pair, method, γ) throughput estimates of one ``Bootstrap`` (``Bootstrap.cells``): per pair,
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


def speedup_table(
    df: pd.DataFrame,
    pooling: str = "pooled",
    baseline: str = "specdecode",
    paper: pd.DataFrame | None = None,
    boot: BootstrapSpec | None = None,
) -> Table | None:
    """GammaTune Table 2: speedup over SpecDecode, mean ± std across initial γ.

    Per pair: ``T(method, γ)`` = throughput of that job's records (``pooling``);
    ``B`` = mean over γ of ``T(baseline, γ)``; cell = mean ± sample std (ddof=1)
    over γ of ``T(method, γ) / B`` (so the baseline's own row is 1.00 ± its
    sensitivity to γ). AR, when present, is one cell (no γ, no std). Average
    column = mean of the pair means ± sqrt of the mean of the pair variances
    (``_average``: reproduces the paper's Average column from its pair columns).
    Pairs without baseline records are left out.

    Under every measured row, a ``95 % CI`` row: each cell's paired bootstrap CI over prompt turns
    (``analysis.uncertainty``; ``table2_estimates``), marked ``≈`` when the method is not resolved
    from its neighbour in that column's ranking (``resolve``). A/A twins (``aa_original``) are no
    rows here (their ratio to their original is the noise floor, ``analysis.drift``), and never the
    baseline."""
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
    bootstrap = Bootstrap(df, pooling, boot)
    estimates = table2_estimates(bootstrap.cells(rows_df[rows_df["pair"].isin(pairs)], ["pair", "method", "gamma_init"]),
                                 baseline)
    ranks = {p: resolve({m: e for (q, m), e in estimates.items() if q == p}) for p in [*pairs, "average"]}

    def uncertainty(pair: str, method: str) -> dict[str, Any]:
        lo, hi = estimates[(pair, method)].interval() if (pair, method) in estimates else (math.nan, math.nan)
        ranked = ranks[pair].get(method)
        return {"ci_lo": lo, "ci_hi": hi, "rank": ranked.rank if ranked else None,
                "resolved": ranked.resolved if ranked else None}

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
    data["n_gamma"] = data["n_gamma"].astype("Int64")
    data["rank"] = data["rank"].astype("Int64")
    display_rows = []
    for method in ordered_methods(data["method"].unique()):
        for source in ("measured", "paper"):
            rows = data[(data["method"] == method) & (data["source"] == source)]
            if rows.empty:
                continue
            cells = {p: rows[rows["pair"] == p] for p in [*pairs, "average"]}
            row = {"Method": method_label(method), "Source": source}
            ci_row = {"Method": "", "Source": CI_ROW}
            for p, cell in cells.items():
                column = "Average" if p == "average" else p
                shared = p != "average" and source == "measured" and not cell.empty and bool(cell["shared_device"].iloc[0])
                row[column] = (fmt_mean_std(cell["mean"].iloc[0], cell["std"].iloc[0]) + (SHARED_MARK if shared else "")
                               if not cell.empty else "")
                ci_row[column] = (fmt_ci(estimates[(p, method)].interval()) + mark(ranks[p].get(method))
                                  if (p, method) in estimates else "")
            display_rows.append(row)
            if source == "measured":
                display_rows.append(ci_row)
    display = pd.DataFrame(display_rows)
    caption = (
        f"Speedup over {method_label(baseline)} (GammaTune Table 2). Per pair, the throughput of each initial γ "
        f"divided by {method_label(baseline)}'s throughput averaged over all its initial γ; cell = mean ± "
        f"{STD_NOTE}. Throughput = {POOLINGS[pooling]}. Average = mean of the pair means ± sqrt(mean of the "
        "pair variances), over the pairs shown for 'measured' rows and over the paper's four pairs for 'paper' "
        "rows (the paper's own Average column, which that formula reproduces). "
        "'measured': this results folder; 'paper': GammaTune Table 2 as published (SpecBench, one H100). "
        f"± : {STD_NOTE} (the paper's spread). [lo, hi] (rows '{CI_ROW}'): {bootstrap.spec.note()}, of the same "
        f"cell, replicate by replicate (Average: the mean of the pair cells); {method_label(baseline)}'s own cell "
        "is 1 in every replicate, the other intervals carry its uncertainty. "
        + resolved_note("within the column, by the cell's point estimate")
    )
    if len(rows_df) < len(df):
        caption += " A/A twins are not rows here: their ratio to the method they copy is the noise floor (noise_floor)."
    if "shared_device" in data and data["shared_device"].fillna(False).astype(bool).any():
        caption += " " + SHARED_NOTE
    return Table("gammatune_table2_speedup", caption, display, data)


def throughput_table(df: pd.DataFrame, pooling: str = "pooled", boot: BootstrapSpec | None = None) -> Table | None:
    """GammaTune Figure 1 as a table, with speedup over AR and the uncertainty of both.

    Per pair and method (A/A twins left out): ``Tok/s`` = mean over initial γ of each γ's throughput
    (``pooling``; a single cell for AR); ``Speedup vs AR`` = mean over γ of ``T(method, γ) /
    A(method, γ)``, with ``A`` the AR reference of the same records: their own (``ar_tokens_per_s``
    and ``ar_wall_ms``, the AR decode each record's ``speedup`` divides by: ``ar_source`` paired,
    decoded, cache or self), pooled the same way over the same prompt turns, when every record of the
    cell has one; else the throughput of the pair's AR job (``method`` ar); else empty. Each with its
    paired bootstrap CI (``analysis.uncertainty``) and ``≈`` when not resolved from its neighbour in
    the pair's ranking (by Tok/s; by speedup). ``data``: one row per (pair, method) (``scope`` "mean
    over γ") and per (pair, method, γ) (``scope`` "γ"). None when only AR ran."""
    check_pooling(pooling)
    rows_df = df[df["pair"].notna() & df["method"].notna() & ~is_aa_twin(df["method"])]
    if rows_df.empty or is_ar(rows_df).all():
        return None
    bootstrap = Bootstrap(df, pooling, boot)
    keys = ["pair", "method", "gamma_init"]
    ar_jobs = rows_df[rows_df["method"] == "ar"]
    long = []
    for values, group in rows_df.groupby(keys, dropna=False, sort=True):
        pair, method, gamma = values
        own = bootstrap.estimate(group, ar=True)
        sources = sorted(set(group["ar_source"].dropna().astype(str))) if "ar_source" in group else []
        if not np.isfinite(own.point) and not ar_jobs[ar_jobs["pair"] == pair].empty:
            own, sources = bootstrap.estimate(ar_jobs[ar_jobs["pair"] == pair]), ["AR job"]
        tokens = bootstrap.estimate(group)
        long.append({"pair": pair, "method": method, "gamma_init": gamma, "scope": "γ",
                     "tokens": tokens, "speedup": tokens / own,
                     "ar_reference": " ".join(sources) if np.isfinite(own.point) else "",
                     "n_turns": len(set(unit_keys(group, pooling))), "n_records": len(group)})
    per_gamma = pd.DataFrame(long)
    for (pair, method), group in per_gamma.groupby(["pair", "method"], sort=True):
        records = rows_df[(rows_df["pair"] == pair) & (rows_df["method"] == method)]
        long.append({"pair": pair, "method": method, "gamma_init": math.nan, "scope": "mean over γ",
                     "tokens": mean_of(group["tokens"]), "speedup": mean_of(group["speedup"]),
                     "ar_reference": " ".join(sorted({s for v in group["ar_reference"] for s in v.split(" ") if s})),
                     "n_gamma": int(group["gamma_init"].notna().sum()),
                     "n_turns": len(set(unit_keys(records, pooling))), "n_records": len(records)})
    data = pd.DataFrame(long)
    means = data[data["scope"] == "mean over γ"]
    for stat in ("tokens", "speedup"):
        ranked = {}
        for pair, rows in means.groupby("pair", sort=True):
            ranked.update({(pair, k): v for k, v in resolve(dict(zip(rows["method"], rows[stat], strict=True))).items()})
        column = "tokens_per_s" if stat == "tokens" else "speedup_vs_ar"
        data[column] = [e.point for e in data[stat]]
        bounds = [e.interval() for e in data[stat]]
        data[f"{column}_lo"], data[f"{column}_hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
        found = [ranked.get((p, m)) if scope != "γ" else None
                 for p, m, scope in zip(data["pair"], data["method"], data["scope"], strict=True)]
        data[f"{column}_rank"] = pd.array([r.rank if r else None for r in found], dtype="Int64")
        data[f"{column}_resolved"] = [r.resolved if r else None for r in found]
        data[f"_{stat}_mark"] = [mark(r) for r in found]
    order = {m: i for i, m in enumerate(ordered_methods(data["method"]))}
    data = data.sort_values(["pair", "method", "scope", "gamma_init"], key=lambda s: s.map(order) if s.name == "method"
                            else s, na_position="first").reset_index(drop=True)
    shown = data[data["scope"] == "mean over γ"]
    display = pd.DataFrame({
        "Pair": shown["pair"], "Method": shown["method"].map(method_label),
        "Tok/s": [fmt_num(e.point, 1) for e in shown["tokens"]],
        "Tok/s 95 % CI": [fmt_ci(e.interval(), 1) + m for e, m in zip(shown["tokens"], shown["_tokens_mark"], strict=True)],
        "Speedup vs AR": [fmt_num(e.point, 2) + "×" if np.isfinite(e.point) else "" for e in shown["speedup"]],
        "Speedup 95 % CI": [fmt_ci(e.interval(), 2, "×") + m for e, m in zip(shown["speedup"], shown["_speedup_mark"],
                                                                             strict=True)],
        "AR reference": shown["ar_reference"], "γ values": shown["n_gamma"].astype("Int64"),
        "Prompt turns": shown["n_turns"], "n": shown["n_records"],
    })
    caption = (
        f"Throughput and speedup over AR per method (GammaTune Figure 1 as a table). Tok/s = mean over initial γ "
        f"of each γ's throughput, {POOLINGS[pooling]}. Speedup vs AR = mean over initial γ of that throughput ÷ the "
        "AR reference's, pooled the same way over the same prompt turns: the AR decodes the records' own speedup "
        "divides by (column AR reference = their ar_source: paired = timed in the same interleaved round as the "
        "record; decoded / cache = timed once per prompt turn, by this job or another; self = the AR job itself), "
        "else the pair's AR job ('AR job'). "
        f"[lo, hi]: {bootstrap.spec.note()}. "
        + resolved_note("within the pair, by Tok/s for the Tok/s interval and by speedup for the speedup's")
        + " A/A twins are not rows here (noise_floor)."
    )
    data = data.drop(columns=["tokens", "speedup", "_tokens_mark", "_speedup_mark"])
    return Table("gammatune_throughput", caption, display.reset_index(drop=True), data)


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
        "Pair": data["pair"], "Method": data["method"].map(method_label),
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
    method, round (1-based), gamma, drafted, accepted; the choices made)."""
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
    for method in ordered_methods(spec["method"].unique()):
        record = spec[spec["method"] == method].iloc[0]
        drafted = record["drafted_trace"] or [math.nan] * len(record["accepted_trace"])
        gammas = record["gamma_trace"] or [math.nan] * len(record["accepted_trace"])
        for i, (g, d, a) in enumerate(zip(gammas, drafted, record["accepted_trace"], strict=False), start=1):
            rows.append({"pair": pair, "method": method, "gamma_init": record["gamma_init"], "prompt_id": prompt_id,
                         "turn": turn, "round": i, "gamma": g, "drafted": d, "accepted": a})
    meta = {"pair": pair, "gamma_init": gamma_init, "prompt_id": prompt_id, "turn": turn}
    return pd.DataFrame(rows, columns=["pair", "method", "gamma_init", "prompt_id", "turn", "round", "gamma",
                                       "drafted", "accepted"]), meta


def trace_table(trace: pd.DataFrame, meta: dict[str, Any]) -> Table | None:
    """The trace as a table: one row per round, γ and accepted per method."""
    if trace.empty:
        return None
    display = pd.DataFrame({"Round": sorted(trace["round"].unique())})
    for method in ordered_methods(trace["method"].unique()):
        block = trace[trace["method"] == method].set_index("round")
        label = method_label(method)
        display[f"{label} γ"] = display["Round"].map(block["gamma"]).map(lambda v: fmt_num(v, 0))
        display[f"{label} accepted"] = display["Round"].map(block["accepted"]).map(lambda v: fmt_num(v, 0))
    caption = (
        f"Per-round trace (GammaTune Figure 2a): pair {meta['pair']}, initial γ {fmt_num(meta['gamma_init'], 0)}, "
        f"prompt {meta['prompt_id']} turn {meta['turn']}: the γ each method chose for the round and the draft "
        "tokens the target accepted (bonus/correction token not counted)."
    )
    return Table("gammatune_fig2a_trace", caption, display, trace)
