"""The job aggregates of ``summary.json``: ``aggregate`` over one job's records (``specbench.records``), written by
``runners.jobs.record`` beside the records. Throughput is pooled over the records' ``throughput_ms`` (a batched row:
its share of the batch's wall), the AR side likewise, and the speedup is the one over the other; beside it the
figures one slow turn cannot move (``speedup_figures``: the rule ``OUTLIER_RULE``, the house's interval, the median
of per-turn ratios).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specbench.jackknife import joined, pooled_ratio
from specbench.records import leviathan_alpha, pooled_tokens_per_s, throughput_ms

#: a side of a turn slower than this share of the job's median rate is an outlier (``speedup_figures``)
SLOW_SHARE = 0.5
OUTLIER_RULE = ("a turn whose target alone ran below 1/2 of the job's median target-alone tokens/s is charged at "
                "the median of the other turns; one whose time per verification is over 2x the job's median is left "
                "out, with its target alone")


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
        out.update(speedup_figures(records))
        if all(r.get("ar_fastest_wall_ms") for r in records):
            out.update(fastest_figures(records))
    return out


def fastest_figures(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Under ``engine.width`` (every record has ``ar_fastest_wall_ms``): the speedup over the fastest target alone of
    the target's dtype, the plain step timed beside each reference. The headline of such a job (its reference, the
    target alone at the width, is slower: ``speedup`` divides by it, a second figure). Pooled as ``speedup``, with
    the house's interval over ``turn_clusters`` and the median of the records' ratios; ``fastest_same_outputs``: how
    many of the plain step's outputs equal the reference's (it rounds otherwise)."""
    cluster, strata, names = turn_clusters(records)
    sides = [_per_cluster(cluster, len(names), [float(r[k]) for r in records])
             for k in ("new_tokens", "ar_fastest_tokens", "ar_fastest_wall_ms")]
    sides.insert(1, _per_cluster(cluster, len(names), [throughput_ms(r) or 0.0 for r in records]))
    point, bounds, _ = pooled_ratio(*sides, strata)
    return {"ar_fastest_tokens_per_s": _finite(pooled_tokens_per_s(sides[2], sides[3])),
            "speedup_fastest": _finite(point), "speedup_fastest_interval": _interval(bounds),
            "speedup_fastest_median": _median(r.get("speedup_fastest") for r in records),
            "fastest_same_outputs": sum(bool(r.get("ar_fastest_same")) for r in records)}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _median(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if _finite(x) is not None]
    return statistics.median(vals) if vals else None


def turn_clusters(records: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[str], list[str]]:
    """What the house's interval leaves out together (``analysis.uncertainty``: a prompt turn with its repeats; turns
    decoded in one batch are one cluster): each record's cluster, each cluster's stratum (its task) and its label."""
    units = [(r.get("task"), r.get("prompt_id"), r.get("turn")) for r in records]
    index = {u: i for i, u in enumerate(dict.fromkeys(units))}
    of_unit = joined(len(index), ((r["batch_index"], index[u]) for r, u in zip(records, units, strict=True)
                                            if r.get("batch_index") is not None))
    cluster = [of_unit[index[u]] for u in units]
    n_clusters = max(of_unit, default=-1) + 1
    members: dict[int, list[tuple]] = {}
    for c, u in zip(cluster, units, strict=True):
        if u not in members.setdefault(c, []):
            members[c].append(u)
    strata = ["+".join(sorted({str(u[0]) for u in members[c]})) for c in range(n_clusters)]
    labels = [f"{members[c][0][1]} turn {members[c][0][2]}"
              + (f" (and {len(members[c]) - 1} more in its batch)" if len(members[c]) > 1 else "")
              for c in range(n_clusters)]
    return cluster, strata, labels


def _outlier(r: Mapping[str, Any], label: str, side: str, share: float, handled: str) -> dict[str, Any]:
    return {"label": label, "prompt_id": r.get("prompt_id"), "turn": r.get("turn"), "repeat": r.get("repeat"),
            "side": side, "share_of_median": share, "handled": handled}


def apply_outlier_rule(records: Sequence[Mapping[str, Any]]) -> tuple[list[bool], list[float], list[dict[str, Any]]]:
    """``OUTLIER_RULE`` over a job's records (all with an AR reference): per record whether it is kept and its target
    alone's time as charged (``throughput_ms``, or the median rate's where its own was slow), and the records it
    handled. The target alone's rate barely depends on the prompt, so the others' median stands for a slow one; the
    loop's rate does (acceptance), so the rule gauges it by its time per verification (our loop at batch 1) and leaves
    a slow one out, its target alone with it, as it does a slow turn of a job that is its own reference (``ar``)."""
    ar_tokens = [r["ar_tokens_per_s"] * r["ar_wall_ms"] / 1000.0 for r in records]
    ar_wall = [throughput_ms(r, ar=True) or 0.0 for r in records]
    ar_rate = [t * 1000.0 / w if w > 0 else math.nan for t, w in zip(ar_tokens, ar_wall, strict=True)]
    verify = [r["verify_ms"] / r["rounds"] if r.get("verify_ms") and r.get("rounds") and (r.get("batch_size") or 1) <= 1
              and r.get("ar_source") != "self" else None for r in records]
    ar_median, verify_median = _median(ar_rate), _median(verify)
    slow_ar = [ar_median is not None and math.isfinite(x) and x < SLOW_SHARE * ar_median for x in ar_rate]
    slow_verify = [v is not None and verify_median is not None and v * SLOW_SHARE > verify_median for v in verify]
    others = _median(x for x, slow in zip(ar_rate, slow_ar, strict=True) if not slow)
    repeats = any(r.get("repeat") for r in records)
    kept, charged, handled = [True] * len(records), list(ar_wall), []
    for i, r in enumerate(records):
        label = f"{r.get('prompt_id')} turn {r.get('turn')}" + (f" repeat {r.get('repeat')}" if repeats else "")
        if slow_verify[i] or (slow_ar[i] and r.get("ar_source") == "self"):
            kept[i] = False
            side, share = ("verification", verify_median / verify[i]) if slow_verify[i] else \
                ("target alone", ar_rate[i] / ar_median)
            handled.append(_outlier(r, label, side, share, "left out"))
        elif slow_ar[i] and others:
            charged[i] = ar_tokens[i] * 1000.0 / others
            handled.append(_outlier(r, label, "target alone", ar_rate[i] / ar_median, "charged at the median"))
    return kept, charged, handled


def _interval(bounds: tuple[float, float]) -> list[float] | None:
    return None if not all(math.isfinite(b) for b in bounds) else list(bounds)


def _per_cluster(cluster: Sequence[int], n: int, side: Sequence[float],
                 only: Sequence[bool] | None = None) -> list[float]:
    """``side`` summed per cluster (``turn_clusters``), the records ``only`` leaves out not counted."""
    out = [0.0] * n
    for i, value in enumerate(side):
        if only is None or only[i]:
            out[cluster[i]] += value
    return out


def speedup_figures(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The speedup's figures one slow turn cannot move, for records that all have an AR reference (the pooled
    ``speedup`` divides summed walls, so one stalled baseline can double it):

    - ``speedup_interval``: the pooled speedup's 95 % interval (``specbench.jackknife.pooled_ratio`` over
      ``turn_clusters``, as ``analysis.uncertainty`` gives the job's records); ``speedup_turns``: its clusters;
    - ``speedup_median``: the median of the records' ratios (each record: a timing of a prompt turn);
    - ``speedup_outliers``: ``OUTLIER_RULE`` and the records it handled (``apply_outlier_rule``);
    - ``speedup_robust`` (the headline a job prints), its interval and ``ar_tokens_per_s_robust``: the pooled
      figures after the rule; ``speedup_without_one``: the least ``speedup_robust`` with one cluster left out, and
      which (a win that rests on one turn)."""
    tokens = [float(r["new_tokens"]) for r in records]
    wall = [throughput_ms(r) or 0.0 for r in records]
    ar_tokens = [r["ar_tokens_per_s"] * r["ar_wall_ms"] / 1000.0 for r in records]
    ar_wall = [throughput_ms(r, ar=True) or 0.0 for r in records]
    kept, charged, handled = apply_outlier_rule(records)
    cluster, strata, names = turn_clusters(records)

    def per_cluster(side: Sequence[float], only: Sequence[bool] | None = None) -> list[float]:
        return _per_cluster(cluster, len(names), side, only)

    point, bounds, _ = pooled_ratio(*(per_cluster(side) for side in (tokens, wall, ar_tokens, ar_wall)), strata)
    sides = [per_cluster(side, kept) for side in (tokens, wall, ar_tokens, charged)]
    present = [c for c in range(len(names)) if sides[1][c] > 0]  # not every record of it left out
    sides = [[side[c] for c in present] for side in sides]
    robust, robust_bounds, _ = pooled_ratio(*sides, [strata[c] for c in present])

    def without(k: int) -> float:
        t, w, at, aw = (sum(side) - side[k] for side in sides)
        return (t / w) / (at / aw) if min(t, w, at, aw) > 0 else math.inf

    least = min(range(len(present)), key=without) if len(present) > 1 else None
    ratios = [(t / w) / (at / aw) if min(t, w, at, aw) > 0 else None
              for t, w, at, aw in zip(tokens, wall, ar_tokens, ar_wall, strict=True)]
    return {
        "speedup_interval": _interval(bounds),
        "speedup_turns": len(names),
        "speedup_median": _median(ratios),
        "speedup_outliers": {"rule": OUTLIER_RULE, "turns": handled},
        "speedup_robust": _finite(robust),
        "speedup_robust_interval": _interval(robust_bounds),
        "ar_tokens_per_s_robust": _finite(pooled_tokens_per_s(sides[2], sides[3])),
        "speedup_without_one": None if least is None else {"turn": names[present[least]],
                                                           "speedup": _finite(without(least))},
    }


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
    # the target alone after the outlier rule (``speedup_figures``): one stalled baseline turn must not cheapen c
    ar_tps = agg.get("ar_tokens_per_s_robust") or agg.get("ar_tokens_per_s")
    forwards, draft_s = agg.get("draft_forwards"), agg.get("draft_s")
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
