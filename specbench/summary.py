"""The job aggregates of ``summary.json``: ``aggregate`` over one job's records (``specbench.records``), written by
``runners.jobs.record`` beside the records. Throughput is pooled over the records' ``throughput_ms`` (a batched row:
its share of the batch's wall), the AR side likewise, and the speedup is the one over the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from specbench.records import leviathan_alpha, pooled_tokens_per_s, throughput_ms


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(vals) / len(vals) if vals else None


def aggregate(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Job-level aggregates. Throughput is given both ways:
    ``tokens_per_s`` = total new tokens / total wall time (pooled), and
    ``mean_tokens_per_s`` = mean of per-prompt rates."""
    if not records:
        return {"n_records": 0}
    total_tokens = sum(r["new_tokens"] for r in records)
    times = [throughput_ms(r) or 0.0 for r in records]  # a batched row: its share of the batch's wall
    total_s = sum(times) / 1000.0
    pooled = pooled_tokens_per_s([r["new_tokens"] for r in records], times)
    drafted = [r["drafted"] for r in records if r.get("drafted") is not None]
    accepted = [r["accepted"] for r in records if r.get("accepted") is not None]
    rounds = [r["rounds"] for r in records if r.get("rounds") is not None]
    ar = [r for r in records if r.get("ar_wall_ms") is not None and r.get("ar_tokens_per_s") is not None]
    ar_ms = [throughput_ms(r, ar=True) or 0.0 for r in ar]
    ar_tokens = [r["ar_tokens_per_s"] * r["ar_wall_ms"] / 1000.0 for r in ar]
    lossless = [r["lossless"] for r in records if r.get("lossless") is not None]
    timed = [r for r in records if r.get("overhead_ms") is not None]
    out: dict[str, Any] = {
        "n_records": len(records),
        "new_tokens": total_tokens,
        "wall_s": total_s,
        "tokens_per_s": None if math.isnan(pooled) else pooled,
        "mean_tokens_per_s": _mean(r["tokens_per_s"] for r in records),
        "ttft_ms": _mean(r["ttft_ms"] for r in records),
        "tpot_ms": _mean(r["tpot_ms"] for r in records),
        "drafted": sum(drafted) if drafted else None,
        "accepted": sum(accepted) if accepted else None,
        "acceptance_rate": sum(accepted) / sum(drafted) if drafted and sum(drafted) else None,
        "mean_accepted_per_round": sum(accepted) / sum(rounds) if rounds and sum(rounds) else None,
        "draft_forwards": sum(r["draft_forwards"] for r in records if r.get("draft_forwards") is not None) or None,
        "fallback_rounds": sum(r["fallback_rounds"] for r in records if r.get("fallback_rounds") is not None)
        if any(r.get("fallback_rounds") is not None for r in records) else None,
        "leviathan_alpha": leviathan_alpha(
            [a for r in records for a in r.get("accepted_trace") or []],
            [d for r in records for d in r.get("drafted_trace") or []],
        ),
        "lossless_checked": len(lossless),
        "lossless_all": all(lossless) if lossless else None,
    }
    alone = [r["lossless_alone"] for r in records if r.get("lossless_alone") is not None]
    if alone:  # batched rows against the target alone at batch 1
        out.update(lossless_alone_checked=len(alone), lossless_alone_all=all(alone))
    if timed:  # the breakdown of the time after the first token, over the records that have it
        after = sum(r["wall_ms"] - r["ttft_ms"] for r in timed)
        for key in ("draft", "verify", "overhead"):
            out[f"{key}_s"] = sum(r[f"{key}_ms"] for r in timed) / 1000.0
        out["overhead_share"] = out["overhead_s"] * 1000.0 / after if after > 0 else None
        n_rounds = sum(r.get("rounds") or 0 for r in timed)
        out["overhead_ms_per_round"] = out["overhead_s"] * 1000.0 / n_rounds if n_rounds else None
    predicted = [r["predicted_wall_ms"] for r in records if r.get("predicted_wall_ms") is not None]
    if predicted and len(predicted) == len(records):
        out["predicted_wall_s"] = sum(predicted) / 1000.0
    if ar_ms and len(ar_ms) == len(records):
        ar_tps = pooled_tokens_per_s(ar_tokens, ar_ms)
        out["ar_tokens_per_s"] = ar_tps
        out["speedup"] = out["tokens_per_s"] / ar_tps if out["tokens_per_s"] else None
    return out
