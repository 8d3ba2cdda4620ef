"""How sure a comparison is: 95 % confidence intervals by a paired bootstrap over prompt turns, and
when a ranking is resolved. The one definition every table and figure uses (``Bootstrap``,
``resolve``); captions quote ``BootstrapSpec.note`` and ``resolved_note``.

* **unit** (what is resampled): a prompt turn, ``(task, prompt_id, turn)``, with every record of it:
  all its repeats (``repeat``), in every cell (pair × method × initial γ, AR included). Under
  ``pooling="question"`` (Spec-Bench's speed.py: a mean over questions) the unit is the question
  ``(task, prompt_id)`` with all its turns.
* **paired bootstrap**: a replicate draws, within each task, as many units as the task has, with
  replacement, and the *same* draw weighs every cell of the frame. So a ratio or a difference of two
  cells (a method over SpecDecode at the same γ, the mean of those across γ, a twin over its
  original) is computed on the same prompt turns in every replicate: the prompts' own spread, which
  both cells share, cancels, as it does in the point estimate. ``BootstrapSpec``: the number of
  replicates (default ``N_BOOT``) and the seed (default ``SEED``): the output is deterministic.
* **a cell's throughput in a replicate**: the pooling's formula (``analysis.metrics.throughput``)
  with each unit counted as often as it was drawn: ``pooled`` Σ new tokens / Σ wall time; ``mean``
  Σ per-record tokens/s / number of records; ``question`` the mean over the drawn questions of each
  question's pooled tokens/s. With every unit drawn once it is ``throughput``; that is the point
  estimate (``Estimate.point``).
* a statistic built from cells (a speedup, a mean across γ, a cell of GammaTune Table 2, a
  difference) is built replicate by replicate (``Estimate``'s arithmetic, ``mean_of``).
* **CI** (``Estimate.interval``): the percentile interval, the 2.5th and 97.5th percentiles of the
  finite replicates (a replicate that drew none of a cell's prompt turns, possible only for a cell
  that lacks some of the frame's turns, has no value for it).
* **resolved** (``resolve``): two estimates are resolved when the 95 % CI of their paired
  difference (replicate by replicate) excludes 0. In a ranking by point estimate, a row is marked
  ``UNRESOLVED_MARK`` when it is not resolved from a row ranked next to it (just above or just
  below). Paired differences rather than overlapping marginal intervals: cells timed on the same
  prompts share the prompts' spread, which cancels in their difference, so its interval is
  narrower; and two 95 % intervals that overlap are not a 95 % test of a difference.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.metrics import check_pooling, per_group, time_ms

N_BOOT = 2000
SEED = 0
LEVEL = 0.95
UNRESOLVED_MARK = " ≈"


def resolved_note(ranking: str = "by point estimate") -> str:
    """The caption's sentence for ``UNRESOLVED_MARK``; ``ranking`` says which rows rank together and by what."""
    return (f"≈: not resolved from a row ranked next to it, just above or below ({ranking}): the 95 % CI of "
            "their paired bootstrap difference contains 0 (paired differences, not overlapping intervals: cells "
            "timed on the same prompt turns share the prompts' spread, which cancels in a difference).")


@dataclass(frozen=True)
class BootstrapSpec:
    """How many replicates and which seed (module docstring)."""

    n: int = N_BOOT
    seed: int = SEED

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"the bootstrap needs at least one replicate, got {self.n}")

    def note(self) -> str:
        return ("95 % bootstrap CI over prompt turns (paired: every replicate resamples the same prompt turns, "
                f"repeats kept together, for every cell; percentile interval; {self.n} replicates, seed {self.seed})")


CI_ROW = "95 % CI"  # the Source of a table's row of intervals under the row of point estimates


@dataclass(frozen=True)
class Estimate:
    """A statistic: its point estimate and its bootstrap replicates (``draws``), aligned replicate by
    replicate with every other ``Estimate`` of the same ``Bootstrap`` (so arithmetic keeps the pairing)."""

    point: float
    draws: np.ndarray

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """The percentile CI (module docstring); NaNs when the point or every replicate is not finite."""
        finite = self.draws[np.isfinite(self.draws)]
        if not np.isfinite(self.point) or finite.size == 0:
            return math.nan, math.nan
        tail = (1.0 - level) / 2.0 * 100.0
        lo, hi = np.percentile(finite, [tail, 100.0 - tail])
        return float(lo), float(hi)

    def _combine(self, other: Estimate | float, op: np.ufunc) -> Estimate:
        with np.errstate(divide="ignore", invalid="ignore"):
            if isinstance(other, Estimate):
                return Estimate(float(op(self.point, other.point)), op(self.draws, other.draws))
            return Estimate(float(op(self.point, other)), op(self.draws, other))

    def __truediv__(self, other: Estimate | float) -> Estimate:
        return self._combine(other, np.divide)

    def __sub__(self, other: Estimate | float) -> Estimate:
        return self._combine(other, np.subtract)


def mean_of(estimates: Iterable[Estimate]) -> Estimate:
    """The mean of the estimates whose point is finite (as ``analysis.metrics.mean_std`` drops the
    others), replicate by replicate (a replicate's non-finite values left out)."""
    given = list(estimates)
    kept = [e for e in given if np.isfinite(e.point)]
    if not kept:
        return Estimate(math.nan, np.full(len(given[0].draws) if given else 0, math.nan))
    draws = np.vstack([e.draws for e in kept])
    finite = np.isfinite(draws)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(finite, draws, 0.0).sum(axis=0) / finite.sum(axis=0)
    return Estimate(float(np.mean([e.point for e in kept])), mean)


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(None, index=df.index, dtype=object)


def unit_keys(df: pd.DataFrame, pooling: str = "pooled") -> list[str]:
    """The bootstrap unit of each record (module docstring) as a string ``task/prompt_id/turn``
    (``task/prompt_id`` under ``question`` pooling)."""
    task, prompt = _column(df, "task"), _column(df, "prompt_id")
    if pooling == "question":
        return [f"{t}\x1f{p}" for t, p in zip(task, prompt, strict=True)]
    turn = pd.to_numeric(_column(df, "turn"), errors="coerce")
    return [f"{t}\x1f{p}\x1f{'' if n != n else f'{n:g}'}" for t, p, n in zip(task, prompt, turn, strict=True)]


class Bootstrap:
    """One paired resampling of a frame's units (module docstring): ``estimate`` gives the
    throughput of any subset of the frame's records, replicate by replicate."""

    def __init__(self, df: pd.DataFrame, pooling: str = "pooled", spec: BootstrapSpec | None = None) -> None:
        self.pooling = check_pooling(pooling)
        self.spec = spec or BootstrapSpec()
        units = sorted(set(unit_keys(df, pooling)))
        self.index = {u: i for i, u in enumerate(units)}
        strata = np.array([u.split("\x1f", 1)[0] for u in units], dtype=object)
        rng = np.random.default_rng(self.spec.seed)
        self.weights = np.zeros((self.spec.n, len(units)))
        rows = np.arange(self.spec.n)[:, None]
        for stratum in sorted(set(strata)):
            members = np.flatnonzero(strata == stratum)
            drawn = members[rng.integers(0, members.size, size=(self.spec.n, members.size))]
            np.add.at(self.weights, (np.broadcast_to(rows, drawn.shape), drawn), 1.0)

    def _codes(self, rows: pd.DataFrame) -> np.ndarray:
        keys = unit_keys(rows, self.pooling)
        missing = set(keys) - set(self.index)
        if missing:
            raise ValueError(f"records of prompt turns this bootstrap was not built on: {sorted(missing)[:3]}")
        return np.array([self.index[k] for k in keys], dtype=int)

    def estimate(self, rows: pd.DataFrame, ar: bool = False) -> Estimate:
        """Throughput of ``rows`` (a subset of the frame) under the pooling, point and replicates.
        ``ar``: of the records' own AR reference instead (``ar_tokens_per_s`` and ``ar_wall_ms``, the
        AR decode each record's ``speedup`` divides by); NaN unless every record has one."""
        n_units = len(self.index)
        empty = Estimate(math.nan, np.full(self.spec.n, math.nan))
        if rows.empty:
            return empty
        if ar:
            rate = pd.to_numeric(_column(rows, "ar_tokens_per_s"), errors="coerce").to_numpy(dtype=float)
            raw = pd.to_numeric(_column(rows, "ar_wall_ms"), errors="coerce").to_numpy(dtype=float)
            if not (np.isfinite(rate).all() and np.isfinite(raw).all()):
                return empty
            tokens = rate * raw / 1000.0
            wall = time_ms(rows, "ar_wall_ms").to_numpy(dtype=float)
        else:
            rate = pd.to_numeric(rows["tokens_per_s"], errors="coerce").to_numpy(dtype=float)
            tokens = pd.to_numeric(rows["new_tokens"], errors="coerce").to_numpy(dtype=float)
            raw = pd.to_numeric(rows["wall_ms"], errors="coerce").to_numpy(dtype=float)
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
        return Estimate(float(point), np.where(np.isfinite(draws), draws, math.nan))


    def cells(self, df: pd.DataFrame, keys: Iterable[str], ar: bool = False) -> pd.DataFrame:
        """One row per group of ``keys`` of ``df`` (null keys kept, sorted): the keys, ``estimate``
        (``estimate`` of the group's records) and ``n_records``."""
        return per_group(df, list(keys), estimate=lambda g: self.estimate(g, ar))


def differ(a: Estimate, b: Estimate, level: float = LEVEL) -> bool:
    """Whether ``a`` and ``b`` are resolved: the CI of their paired difference excludes 0."""
    lo, hi = (a - b).interval(level)
    return bool(np.isfinite(lo) and (lo > 0 or hi < 0))


@dataclass(frozen=True)
class Ranked:
    rank: int  # 1 = the largest point estimate
    resolved: bool  # resolved from every neighbour in the ranking (module docstring)


def resolve(estimates: Mapping[Hashable, Estimate], level: float = LEVEL) -> dict[Hashable, Ranked]:
    """Rank the estimates with a finite point (largest first) and say which are resolved from both
    neighbours (module docstring); the others are left out."""
    order = sorted((k for k, e in estimates.items() if np.isfinite(e.point)), key=lambda k: -estimates[k].point)
    apart = [differ(estimates[a], estimates[b], level) for a, b in zip(order, order[1:])]
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
