"""The job aggregates of ``summary.json``: ``aggregate`` over one job's records (``specbench.records``), written by
``runners.jobs.record`` beside the records. Throughput is pooled over the records' ``throughput_ms`` (a batched row:
its share of the batch's wall), the AR side likewise, and the speedup is the one over the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class MeasuredCosts:
    """What a speculative job's own aggregates say its parts cost, in target steps (``measured_costs``): the job's
    printed ``costs`` line (``runners.jobs.report.cost_line``) and the claims that quote it read them here."""

    c: float  #: the target alone's time per token ÷ a draft forward (``specbench.records.leviathan_speedup``'s c)
    v: float  #: a verification (its mean block) in target steps; 1 when the records have no breakdown
    alpha: float  #: Leviathan's acceptance (``leviathan_alpha``)
    v_measured: bool  #: whether ``v`` was measured (the time breakdown) or taken as 1
    #: the job's own drafting, per round: draft forwards and drafted tokens (None: unknown)
    forwards: float | None = None
    drafted: float | None = None

    def expected(self, gamma: float, forwards: float | None = None) -> float:
        """Leviathan's expected speedup at these costs: (1 − α^(γ+1)) / (1 − α) tokens per round costing f/c + v
        target steps, ``f`` the draft forwards per round (default γ: one forward per drafted token)."""
        f = gamma if forwards is None else forwards
        tokens = gamma + 1.0 if self.alpha >= 1.0 else (1.0 - self.alpha ** (gamma + 1)) / (1.0 - self.alpha)
        return tokens / (f / self.c + self.v)

    def as_drafted(self) -> float | None:
        """``expected`` at the job's own drafting: its mean drafted tokens per round for its mean draft forwards per
        round (a hybrid's lookup round drafts with no forward, a capped model drafts fewer tokens than γ; the
        i.i.d. model at the mean γ, a first-order reading); None when the job's rounds are unknown."""
        if self.forwards is None or not self.drafted:
            return None
        return self.expected(self.drafted, self.forwards)

    def best(self, gammas: range = range(1, 17)) -> tuple[int, float]:
        """The best fixed γ of ``gammas`` under ``expected``, and that speedup."""
        gamma = max(gammas, key=self.expected)
        return gamma, self.expected(gamma)


def measured_costs(summary: Mapping[str, Any]) -> MeasuredCosts | None:
    """The costs a speculative job measured (``MeasuredCosts``): ``c`` from its draft time per draft forward and the
    target alone's time per token (prefill included), ``v`` from its verify time per round; None for a job that
    drafted with no draft forward (AR, prompt lookup) or measured no target alone or no acceptance."""
    agg = summary.get("aggregates") or {}
    ar_tps, forwards, draft_s = agg.get("ar_tokens_per_s"), agg.get("draft_forwards"), agg.get("draft_s")
    alpha, verify_s = agg.get("leviathan_alpha"), agg.get("verify_s")
    accepted, per_round = agg.get("accepted"), agg.get("mean_accepted_per_round")
    if not ar_tps or not forwards or not draft_s or alpha is None:
        return None
    step_ms = 1000.0 / ar_tps
    c = step_ms / (1000.0 * draft_s / forwards)
    rounds = accepted / per_round if accepted and per_round else None
    drafting = {"forwards": forwards / rounds, "drafted": agg["drafted"] / rounds} if rounds and agg.get("drafted") \
        else {}
    if verify_s and rounds:
        return MeasuredCosts(c, 1000.0 * verify_s / rounds / step_ms, alpha, True, **drafting)
    return MeasuredCosts(c, 1.0, alpha, False, **drafting)
