"""How sure a comparison is: 95 % confidence intervals by a paired, t-calibrated jackknife over clusters
of prompt turns, and when a ranking is resolved. The one definition every table and figure uses
(``Jackknife``, ``Estimate.interval``, ``resolve``; the interval's formula itself is ``specbench.jackknife``'s,
which a job's summary uses on its own turns); the comparison tables weigh their cells with it
(``analysis.comparison``), and docs/pages/analysis.md ("Reading the tables") tells a reader how to read the result.

* **unit**: a prompt turn, ``(task, prompt_id, turn)``, with every record of it: all its repeats
  (``repeat``), in every cell (pair × method × initial γ, AR included). Under ``pooling="question"``
  (Spec-Bench's speed.py: a mean over questions) the unit is the question ``(task, prompt_id)`` with all
  its turns.
* **cluster** (what is left out together, ``clusters``): a unit, except that units decoded in one batch
  are one cluster. At batch size B > 1 every row of a batch carries the batch's throughput (its share of
  the batch's wall, ``specbench.records.throughput_ms``), so the rows of a batch are one observation, not
  B: two units are in one cluster when records of them share a batch (the same ``batch_index`` in the
  same job, ``job_dir``; ``runners.jobs.batch``) in any cell, and clusters are the connected groups
  this makes. At batch 1 (no ``batch_index``) every unit is its own cluster.
* **strata**: the tasks (``task``): clusters are left out within their task, as the earlier bootstrap
  drew within it. A task of a single cluster gives no replicate (no spread to measure there).
* **paired jackknife**: replicate (h, c) leaves out cluster c of stratum h and weighs the other clusters
  of h by n_h / (n_h − 1) (the delete-one jackknife of stratified samples, "JKn": Wolter 2007,
  *Introduction to Variance Estimation*, 2nd ed., ch. 4; Rust & Rao 1996, *Stat. Methods Med. Res.*
  5:283), and the *same* replicate weighs every cell of the frame. So a ratio or a difference of two
  cells (a method over SpecDecode at the same γ, the mean of those across γ, a twin over its original)
  is computed on the same prompt turns in every replicate: the prompts' own spread, which both cells
  share, cancels, as it does in the point estimate.
* **a cell's throughput in a replicate**: the pooling's formula (``analysis.metrics.throughput``) with
  each unit weighed as the replicate says: ``pooled`` Σ new tokens / Σ wall time; ``mean`` Σ per-record
  tokens/s / number of records; ``question`` the weighted mean over questions of each question's pooled
  tokens/s. With every weight 1 it is ``throughput``: the point estimate (``Estimate.point``).
* a statistic built from cells (a speedup, a mean across γ, a cell of GammaTune Table 2, a ratio or a
  difference of two of them) is built replicate by replicate (``Estimate``'s arithmetic, ``mean_of``).
* **CI** (``Estimate.interval``): Tukey's jackknife interval (Tukey 1958, "Bias and confidence in
  not-quite large samples", *Ann. Math. Statist.* 29:614; Quenouille 1956, *Biometrika* 43:353):
  ``θ̂ ± t(df, 0.975) · se``, with the jackknife variance ``se² = Σ_h (n_h − 1)/n_h · Σ_c (θ_(h,c) −
  θ̄_h)²`` (the jackknife estimate of standard error, Efron & Tibshirani 1993, *An Introduction to the
  Bootstrap*, ch. 11, summed over strata as in Wolter 2007, ch. 4) and ``df = Σ_h (n_h − 1)``, the
  clusters less the strata (Rust & Rao 1996; Korn & Graubard 1999, *Analysis of Health Surveys*, on the
  degrees of freedom of replicate variances). A positive statistic (a throughput, a ratio of
  throughputs, a mean of such: ``Estimate.log``) is taken on the log scale, ``θ`` = its log, and the
  bounds exponentiated back: ratios of pooled throughputs are skewed and their log is not. A
  difference is taken as it is. NaN when a replicate has no value (a cell all of whose records are in
  one cluster) or df < 1.

  Why this one: for a mean the jackknife variance is exactly s²/n and the interval is Student's, exact
  under normality at any n. The percentile bootstrap it replaces had no small-sample
  correction (its spread is √((n−1)/n) of s/√n, cut at normal quantiles, not t's) and read the A/A twin
  of ``mini_gammatune_table2`` (7 prompt turns, true ratio 1) as 1.031 [1.003, 1.060]. On simulated
  paired records with a known ratio (``tests/analysis/test_interval_coverage.py``, a Table 2 cell) it
  covered the true ratio in 85.9 % of datasets at n = 7 and 92.5 % at n = 30; this interval 94.3 % at
  both. BCa (Efron 1987, *JASA* 82:171) keeps the percentile's normal quantiles and, in a prototype of
  that simulation, covered less than the percentile interval at n = 7; the studentized bootstrap
  covered no better than this interval and was wider, at n × more work.
* **resolved** (``resolve``): two positive estimates are resolved when the 95 % CI of their paired
  ratio ``a / b`` (replicate by replicate, log scale) lies wholly outside the A/A band ``[e^−band,
  e^band]``: ``|log|`` of its nearer bound ``> band`` on the far side of 1 (with ``band`` = 0, where no
  A/A twin ran: the CI excludes 1). Other estimates: the CI of their difference excludes 0. In a ranking
  by point estimate, a row is marked ``UNRESOLVED_MARK`` when it is not resolved from a row ranked next
  to it (just above or just below). Paired ratios rather than overlapping marginal intervals: cells
  timed on the same prompts share the prompts' spread, which cancels in their ratio, so its interval is
  narrower; and two 95 % intervals that overlap are not a 95 % test of a difference.
* **the A/A band** (``analysis.noise_floor.aa_bands``, per pair: the twin's ratio to the method it copies,
  mean over γ, the statistic the tables compare): the larger of its 95 % CI's half-width on the log
  scale (how far from 1 an A/A comparison of these cells reads by chance) and ``|log|`` of its point
  (how far this sweep's twin did read). A ratio whose interval reaches into the band could be what
  relabelling a method alone produces, so it is never marked resolved: not only its point, every value
  its CI admits must lie beyond the band (a minimal-effect test, the mirror of an equivalence test). On
  the committed 7-turn recipes this is what keeps a run from resolving an order that its re-run with
  another seed reverses (``mini_gammatune_table2``, ``_b``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.metrics import check_pooling, per_group, time_ms
from specbench import jackknife
from specbench.jackknife import LEVEL
from specbench.jackknife import t_quantile as t_quantile  # re-exported (analysis.noise_floor, the tests)

UNRESOLVED_MARK = " ≈"
CI_ROW = "95 % CI"  # the Source of a table's row of intervals under the row of point estimates


@dataclass(frozen=True, eq=False)
class Design:
    """The replicates of a jackknife: the stratum of the cluster each one leaves out (module docstring)."""

    strata: np.ndarray  # one stratum code per replicate

    @classmethod
    def single(cls, n: int) -> Design:
        """``n`` replicates of one stratum: a plain delete-one jackknife over ``n`` clusters."""
        return cls(np.zeros(n, dtype=int))

    @property
    def df(self) -> int:
        """Degrees of freedom of the t quantile: the clusters less the strata (module docstring)."""
        return jackknife.degrees_of_freedom(self.strata.tolist())

    def variance(self, values: np.ndarray) -> float:
        """The stratified jackknife variance of replicate values (module docstring, CI)."""
        return jackknife.variance(np.asarray(values, dtype=float).tolist(), self.strata.tolist())


@dataclass(frozen=True)
class Estimate:
    """A statistic: its point estimate and its jackknife replicates (``draws``, one per left-out
    cluster), aligned replicate by replicate with every other ``Estimate`` of the same ``Jackknife``
    (so arithmetic keeps the pairing). ``design``: the replicates' strata (None: one stratum);
    ``log``: a positive statistic, whose interval is taken on the log scale (module docstring)."""

    point: float
    draws: np.ndarray
    design: Design | None = field(default=None, compare=False)
    log: bool = False

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """The t-calibrated jackknife CI (module docstring); NaNs when the point or a replicate is not
        finite, or with fewer than two clusters. A ``log`` estimate with a value ≤ 0 is taken as it is."""
        design = self.design if self.design is not None else Design.single(self.draws.size)
        return jackknife.interval(self.point, self.draws.tolist(), design.strata.tolist(), self.log, level)

    def _combine(self, other: Estimate | float, op: np.ufunc, log: bool) -> Estimate:
        with np.errstate(divide="ignore", invalid="ignore"):
            if isinstance(other, Estimate):
                design = self.design if self.design is not None else other.design
                return Estimate(float(op(self.point, other.point)), op(self.draws, other.draws), design,
                                log and self.log and other.log)
            return Estimate(float(op(self.point, other)), op(self.draws, other), self.design,
                            log and self.log and bool(other > 0))

    def __truediv__(self, other: Estimate | float) -> Estimate:
        return self._combine(other, np.divide, log=True)

    def __sub__(self, other: Estimate | float) -> Estimate:
        return self._combine(other, np.subtract, log=False)


def mean_of(estimates: Iterable[Estimate]) -> Estimate:
    """The mean of the estimates whose point is finite (as ``analysis.metrics.mean_std`` drops the
    others), replicate by replicate (a replicate in which one of them has no value has none); ``log``
    when all of them are."""
    given = list(estimates)
    kept = [e for e in given if np.isfinite(e.point)]
    if not kept:
        first = given[0] if given else None
        return Estimate(math.nan, np.full(first.draws.size if first else 0, math.nan), first.design if first else None)
    draws = np.vstack([e.draws for e in kept]).mean(axis=0)
    design = next((e.design for e in kept if e.design is not None), None)
    return Estimate(float(np.mean([e.point for e in kept])), draws, design, all(e.log for e in kept))


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(None, index=df.index, dtype=object)


def _numbers(df: pd.DataFrame, name: str) -> np.ndarray:
    """A number column of the typed frame (``analysis.frame``: declared numbers are numeric, null NaN) as floats;
    all NaN where the frame lacks it."""
    return df[name].to_numpy(dtype=float) if name in df.columns else np.full(len(df), math.nan)


def unit_keys(df: pd.DataFrame, pooling: str = "pooled") -> list[str]:
    """The unit of each record (module docstring) as a string ``task/prompt_id/turn``
    (``task/prompt_id`` under ``question`` pooling)."""
    task, prompt = _column(df, "task"), _column(df, "prompt_id")
    if pooling == "question":
        return [f"{t}\x1f{p}" for t, p in zip(task, prompt, strict=True)]
    turn = _numbers(df, "turn")
    return [f"{t}\x1f{p}\x1f{'' if n != n else f'{n:g}'}" for t, p, n in zip(task, prompt, turn, strict=True)]


JOB_KEYS = ("pair", "method", "gamma_init", "temperature", "task")  # a job, where the frame has no job_dir


def _batch_keys(df: pd.DataFrame) -> list[tuple | None]:
    """Per record, the batch it was decoded in, ``(job, batch_index)``; None at batch 1 (module docstring)."""
    index = _numbers(df, "batch_index")
    jobs = (_column(df, "job_dir").astype(str) if "job_dir" in df.columns
            else ["\x1f".join(map(str, job)) for job in zip(*(_column(df, k) for k in JOB_KEYS), strict=True)])
    return [None if b != b else (job, int(b)) for job, b in zip(jobs, index, strict=True)]


def clusters(df: pd.DataFrame, units: Mapping[str, int], pooling: str = "pooled") -> np.ndarray:
    """The cluster of every unit (codes 0..k−1, by ``units``' order): units joined by a shared batch
    (module docstring), by union-find over the records' batches (``specbench.jackknife.joined``)."""
    links = ((key, units[unit]) for key, unit in zip(_batch_keys(df), unit_keys(df, pooling), strict=True)
             if key is not None)
    return np.array(jackknife.joined(len(units), links), dtype=int)


class Jackknife:
    """One paired jackknife of a frame's clusters (module docstring): ``estimate`` gives the throughput
    of any subset of the frame's records, point and replicates."""

    def __init__(self, df: pd.DataFrame, pooling: str = "pooled") -> None:
        self.pooling = check_pooling(pooling)
        units = sorted(set(unit_keys(df, pooling)))
        self.index = {u: i for i, u in enumerate(units)}
        self.cluster = clusters(df, self.index, pooling)
        self.n_clusters = int(self.cluster.max()) + 1 if units else 0
        strata = {}  # cluster -> its task(s)
        for unit, c in zip(units, self.cluster, strict=True):
            strata.setdefault(int(c), set()).add(unit.split("\x1f", 1)[0])
        names = ["+".join(sorted(strata[c])) for c in range(self.n_clusters)]
        rows, codes = [], []
        for code, stratum in enumerate(sorted(set(names))):
            members = [c for c in range(self.n_clusters) if names[c] == stratum]
            if len(members) < 2:
                continue  # one cluster: nothing to leave out (module docstring, strata)
            in_stratum = np.isin(self.cluster, members)
            for c in members:
                w = np.where(in_stratum, len(members) / (len(members) - 1), 1.0)
                rows.append(np.where(self.cluster == c, 0.0, w))
                codes.append(code)
        self.weights = np.vstack(rows) if rows else np.zeros((0, len(units)))
        self.design = Design(np.array(codes, dtype=int))

    def note(self) -> str:
        """The captions' sentence on the intervals (module docstring)."""
        return (f"95 % t-calibrated jackknife CI over prompt turns (Tukey 1958; analysis.uncertainty): paired, "
                "every replicate leaves out the same cluster in every cell (a prompt turn with its repeats; at "
                "batch size > 1 the turns decoded in one batch; under question pooling a question); log scale; "
                f"{self.n_clusters} clusters, t with {self.design.df} df")

    def _codes(self, rows: pd.DataFrame) -> np.ndarray:
        keys = unit_keys(rows, self.pooling)
        missing = set(keys) - set(self.index)
        if missing:
            raise ValueError(f"records of prompt turns this jackknife was not built on: {sorted(missing)[:3]}")
        return np.array([self.index[k] for k in keys], dtype=int)

    def estimate(self, rows: pd.DataFrame, ar: bool = False) -> Estimate:
        """Throughput of ``rows`` (a subset of the frame) under the pooling, point and replicates.
        ``ar``: of the records' own AR reference instead (``ar_tokens_per_s`` and ``ar_wall_ms``, the
        AR decode each record's ``speedup`` divides by); NaN unless every record has one."""
        n_units = len(self.index)
        empty = Estimate(math.nan, np.full(self.design.strata.size, math.nan), self.design, True)
        if rows.empty:
            return empty
        if ar:
            rate, raw = _numbers(rows, "ar_tokens_per_s"), _numbers(rows, "ar_wall_ms")
            if not (np.isfinite(rate).all() and np.isfinite(raw).all()):
                return empty
            tokens = rate * raw / 1000.0
            wall = time_ms(rows, "ar_wall_ms").to_numpy(dtype=float)
        else:
            rate, tokens, raw = (_numbers(rows, c) for c in ("tokens_per_s", "new_tokens", "wall_ms"))
            wall = time_ms(rows).to_numpy(dtype=float)
        shared = np.isfinite(wall) & (wall > 0) & (wall != raw)  # a batched row: its share of the batch's time
        rate = np.where(shared, tokens * 1000.0 / np.where(shared, wall, 1.0), rate)
        codes = self._codes(rows)
        if self.pooling == "mean":
            ok = np.isfinite(rate)
            num = np.bincount(codes[ok], weights=rate[ok], minlength=n_units)
            den = np.bincount(codes[ok], minlength=n_units).astype(float)
        else:
            ok = np.isfinite(tokens) & np.isfinite(wall)
            num = np.bincount(codes[ok], weights=tokens[ok] * 1000.0, minlength=n_units)
            den = np.bincount(codes[ok], weights=wall[ok], minlength=n_units)
            if self.pooling == "question":  # each question's pooled tokens/s, then their mean
                timed = den > 0
                num = np.where(timed, num / np.where(timed, den, 1.0), 0.0)
                den = timed.astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            point = num.sum() / den.sum() if den.sum() > 0 else math.nan
            draws = (self.weights @ num) / (self.weights @ den)
        return Estimate(float(point), np.where(np.isfinite(draws), draws, math.nan), self.design, True)

    def cells(self, df: pd.DataFrame, keys: Iterable[str], ar: bool = False) -> pd.DataFrame:
        """One row per group of ``keys`` of ``df`` (null keys kept, sorted): the keys, ``estimate``
        (``estimate`` of the group's records) and ``n_records``."""
        return per_group(df, list(keys), estimate=lambda g: self.estimate(g, ar))


Bootstrap = Jackknife  # the name the tables used earlier (a percentile bootstrap then)


def contrast(a: Estimate, b: Estimate) -> Estimate:
    """What ``differ`` tests: the paired ratio ``a / b`` of two positive estimates, else ``a − b``."""
    return a / b if a.log and b.log else a - b


def differ(a: Estimate, b: Estimate, level: float = LEVEL, band: float = 0.0) -> bool:
    """Whether ``a`` and ``b`` are resolved (module docstring): the CI of their paired ratio lies beyond
    the A/A band, ``log lo > band`` or ``log hi < −band`` (positive estimates; ``band`` on the log scale,
    0: the CI excludes 1), else the CI of their difference excludes 0."""
    c = contrast(a, b)
    lo, hi = c.interval(level)
    if not np.isfinite(lo):
        return False
    if c.log and lo > 0:
        return bool(math.log(lo) > band or math.log(hi) < -band)
    if band > 0:
        raise ValueError("an A/A band (log scale) applies to positive estimates only")
    return bool(lo > 0 or hi < 0)


@dataclass(frozen=True)
class Ranked:
    rank: int  # 1 = the largest point estimate
    resolved: bool  # resolved from every neighbour in the ranking (module docstring)


def resolve(estimates: Mapping[Hashable, Estimate], level: float = LEVEL,
            band: float = 0.0) -> dict[Hashable, Ranked]:
    """Rank the estimates with a finite point (largest first) and say which are resolved from both
    neighbours (module docstring; ``band``: the A/A band, log scale, 0 without a twin); the others are
    left out."""
    order = sorted((k for k, e in estimates.items() if np.isfinite(e.point)), key=lambda k: -estimates[k].point)
    apart = [differ(estimates[a], estimates[b], level, band) for a, b in zip(order, order[1:])]
    return {k: Ranked(i + 1, (i == 0 or apart[i - 1]) and (i == len(apart) or apart[i]))
            for i, k in enumerate(order)}


def fmt_ci(interval: tuple[float, float], digits: int = 2, suffix: str = "") -> str:
    """``"[1.08, 1.19]"`` (``suffix`` after each bound); ``""`` when either bound is NaN."""
    lo, hi = interval
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return ""
    return f"[{lo:.{digits}f}{suffix}, {hi:.{digits}f}{suffix}]"


def mark(ranked: Ranked | None) -> str:
    """``UNRESOLVED_MARK`` for a ranked row not resolved from a neighbour, else ``""``."""
    return UNRESOLVED_MARK if ranked is not None and not ranked.resolved else ""
