"""GammaTune Table 1: milliseconds per output token of each model decoding alone (the TPOT of
autoregressive decoding, prefill excluded), beside the paper's.

Pure: a records frame in, a ``Table`` out, ``None`` without AR records.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.artefacts import SETTING, artefact
from analysis.metrics import POOLINGS, check_pooling, fmt_num, is_ar, throughput
from analysis.paper import gammatune_table1, model_key
from analysis.render import Table


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


@artefact("tables/gammatune_table1_latency", "model latency table", scope=SETTING,
          needs=("records", "pooling", "paper"),
          about="GammaTune Table 1: ms per output token of each model decoding alone (AR TPOT), beside the paper")
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
