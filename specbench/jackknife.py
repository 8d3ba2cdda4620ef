"""The house's 95 % interval, defined once: Tukey's t-calibrated jackknife over delete-one replicates of clusters
within strata, taken on the log scale for a positive statistic (why this one, and its references:
``analysis.uncertainty``'s module docstring). ``analysis.uncertainty`` builds paired replicates over a frame and
calls ``interval``; a job's summary (``specbench.summary``) calls ``pooled_ratio`` on its own prompt turns, so a job
prints the interval the tables would give its records. Plain Python: a job has a few dozen clusters."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from functools import lru_cache

LEVEL = 0.95


@lru_cache(maxsize=512)
def t_quantile(df: int, level: float = LEVEL) -> float:
    """Student's t quantile ``t`` with ``P(|T| ≤ t) = level`` for integer ``df`` ≥ 1, by bisection on
    the closed form of the two-sided t probability (Abramowitz & Stegun 1964, 26.7.3 and 26.7.4); no
    SciPy, which the package does not depend on."""
    if df < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"t quantile needs df >= 1 and 0 < level < 1, got df={df}, level={level}")
    lo, hi = 0.0, 1.0
    while _t_two_sided(hi, df) < level:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _t_two_sided(mid, df) < level else (lo, mid)
    return (lo + hi) / 2.0


def _t_two_sided(t: float, df: int) -> float:
    """``P(|T| ≤ t)`` for Student's t with ``df`` degrees of freedom (A&S 26.7.3 / 26.7.4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, total, term = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 0:
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * c2
            total += term
        return math.sin(theta) * total
    for k in range(1, (df - 1) // 2):
        term *= (2 * k) / (2 * k + 1) * c2
        total += term
    return 2.0 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))


def degrees_of_freedom(strata: Sequence[Hashable]) -> int:
    """The t quantile's degrees of freedom: the replicates (clusters) less the strata."""
    return len(strata) - len(set(strata))


def variance(values: Sequence[float], strata: Sequence[Hashable]) -> float:
    """The stratified jackknife variance of replicate values, ``Σ_h (n_h − 1)/n_h · Σ_c (θ_(h,c) − θ̄_h)²``
    (``strata[i]``: the stratum of the cluster replicate ``i`` leaves out)."""
    groups: dict[Hashable, list[float]] = {}
    for value, stratum in zip(values, strata, strict=True):
        groups.setdefault(stratum, []).append(float(value))
    total = 0.0
    for mine in groups.values():
        mean = sum(mine) / len(mine)
        total += (len(mine) - 1) / len(mine) * sum((v - mean) ** 2 for v in mine)
    return total


def interval(point: float, draws: Sequence[float], strata: Sequence[Hashable] | None = None, log: bool = False,
             level: float = LEVEL) -> tuple[float, float]:
    """``θ̂ ± t(df, level) · se`` from the replicates ``draws`` (``strata``: one per replicate; None: one stratum), on
    the log scale when ``log`` and every value is positive; NaNs when a value is not finite or df < 1."""
    draws = [float(d) for d in draws]
    strata = [0] * len(draws) if strata is None else list(strata)
    df = degrees_of_freedom(strata)
    if not math.isfinite(point) or not all(math.isfinite(d) for d in draws) or df < 1:
        return math.nan, math.nan
    log = log and point > 0 and all(d > 0 for d in draws)
    centre, values = (math.log(point), [math.log(d) for d in draws]) if log else (point, draws)
    half = t_quantile(df, level) * math.sqrt(variance(values, strata))
    lo, hi = (math.exp(centre - half), math.exp(centre + half)) if log else (centre - half, centre + half)
    return min(lo, point), max(hi, point)  # exp(log(x)) may miss x by a rounding


def joined(n_units: int, links: Iterable[tuple[Hashable, int]]) -> list[int]:
    """Each unit's cluster code (0..k−1, in the order of the units' first members): units that share a key of
    ``links`` (``(key, unit)`` pairs: a batch they were decoded in) are one cluster, by union-find."""
    parent = list(range(n_units))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[Hashable, int] = {}
    for key, unit in links:
        parent[root(unit)] = root(first.setdefault(key, unit))
    roots = [root(i) for i in range(n_units)]
    codes = {r: i for i, r in enumerate(dict.fromkeys(roots))}
    return [codes[r] for r in roots]


def pooled_ratio(num_a: Sequence[float], den_a: Sequence[float], num_b: Sequence[float], den_b: Sequence[float],
                 cluster_strata: Sequence[Hashable] | None = None,
                 level: float = LEVEL) -> tuple[float, tuple[float, float], list[tuple[int, float]]]:
    """``(Σ num_a / Σ den_a) / (Σ num_b / Σ den_b)`` over clusters (per-cluster sums: a speedup, tokens over time on
    both sides), its interval (log scale) and the replicates as ``(cluster left out, value)``. Replicate (h, c) leaves
    out cluster c of stratum h and weighs the rest of h by ``n_h / (n_h − 1)`` (a stratum of one cluster gives none):
    each of its sums is ``Σ + (w − 1) Σ_h − w x_c``, so a job of many turns costs one pass."""
    sides = (num_a, den_a, num_b, den_b)
    strata = [0] * len(num_a) if cluster_strata is None else list(cluster_strata)
    totals = [float(sum(side)) for side in sides]

    def ratio(sums: Sequence[float]) -> float:
        return (sums[0] / sums[1]) / (sums[2] / sums[3]) if all(x > 0 for x in sums) else math.nan

    members: dict[Hashable, list[int]] = {}
    for c, stratum in enumerate(strata):
        members.setdefault(stratum, []).append(c)
    draws, codes = [], []
    for stratum in sorted(members, key=str):
        mine = members[stratum]
        if len(mine) < 2:
            continue
        weight = len(mine) / (len(mine) - 1)
        within = [sum(side[c] for c in mine) for side in sides]
        for left in mine:
            sums = [total + (weight - 1.0) * part - weight * side[left]
                    for total, part, side in zip(totals, within, sides, strict=True)]
            draws.append((left, ratio(sums)))
            codes.append(stratum)
    point = ratio(totals)
    return point, interval(point, [d for _, d in draws], codes, log=True, level=level), draws
