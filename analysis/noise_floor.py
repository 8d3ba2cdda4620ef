"""How much the host alone moves a comparison: the noise floor of an A/A pair (a method against its twin, or
against the method whose work it did), the A/A gate every comparison table applies, and the sample a difference needs.

* **noise floor** (``noise_floor_table``): for an A/A twin (``analysis.metrics.aa_original``) and
  the method it copies, per pair and initial γ, ``T(twin, γ) / T(original, γ)`` (throughput under
  the pooling) with its paired jackknife CI (``analysis.uncertainty``); over γ, the mean of those
  ratios (its CI replicate by replicate) and ``max |ratio − 1|``. The two do the same work, so the
  true ratio is 1: what the table shows is what the sweep's conditions alone make of a comparison. A
  row whose CI excludes 1 is flagged (``AA_FLAG``, in the table, in the comparison tables' captions and
  in the terminal's noise-floor lines): the sweep's conditions moved a ratio whose true value is 1
  (or, per row, the one-in-twenty chance of a 95 % interval).
* **A/A gate** (``aa_bands``): per pair, the twin's mean-over-γ ratio is the statistic the comparison
  tables compare (a mean over γ of one cell over another, on the same prompt turns), so it says how far
  from 1 relabelling a method alone reads. Its **band** (log scale) is the larger of its 95 % CI's
  half-width (what chance moves an A/A comparison of these cells by) and ``|log ratio|`` (what this
  sweep's twin did read): two rows of that pair are resolved only when the CI of their ratio lies wholly
  beyond ``e^±band`` (``analysis.uncertainty.resolve``). The Average column of Table 2 takes the band of
  the twin's ratio averaged over the same pairs; with several twins in a pair, the widest band.
* **same work** (``same_work``): a method whose rounds equal another method's in every record of a pair (the
  tokens emitted and, round by round, the tokens verified, accepted and drafted unverified: ``WORK_FIELDS``) did
  that method's work under another name (AssistantThreshold on a drafter without probabilities never stops a
  round early: SpecDecode's rounds; GammaTune+ likewise GammaTune's). It is a natural A/A pair: a row of the
  noise floor beside the declared twins (``aa_pairs``), part of its pair's A/A gate (the widest band), and the
  comparison tables show it as ``≡ <original>`` and never rank it against anything.
* **family** (``family_level``, the noise floor's family-wise column): a run has several A/A pairs (each twin,
  each method that did another's work), each read at 95 %; with m of them, one at least misses 1 by chance with
  probability up to ``1 − 0.95^m`` (a fifth at m = 4, a third at m = 8). Whether a *run* shows its conditions moved an A/A ratio is
  the family-wise question: each mean-over-γ interval at ``1 − 0.05/m`` (Bonferroni), all of which contain 1 with
  probability 95 % at least when only chance moves them. Across runs, the per-interval rate is the coverage check:
  about one interval in twenty should miss (``scripts/compare_reruns.py``'s ledger).
* **resolution** (``aa_turn_log_ratios``, the noise floor's last columns): per prompt turn and repeat
  that both ran at the same initial γ, ``log(tokens/s of the twin ÷ the original's)``; its standard
  deviation σ over all of them is the host's noise on one paired prompt turn. A comparison of two cells
  over n such turns × repeats then resolves a difference of about ``±t(n − 1)·σ/√n`` (95 %, the
  log-ratio of means taken as the mean of log-ratios), and ``(1.96·σ / e)²`` turns × repeats resolve ±e:
  a **lower bound** on the sample a sweep needs before a difference of that size is a result and not the
  host (it takes repeats of one turn as independent turns, the normal quantile for t's, and the host's
  noise as the only spread, where the methods' own differences vary from prompt to prompt too).

The host's drift over a sweep (``host_probe_ms``) is ``analysis.drift``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.artefacts import SCENARIO, artefact
from analysis.metrics import (
    POOLINGS,
    aa_original,
    check_pooling,
    fmt_num,
    is_aa_twin,
    is_ar,
    method_label,
    method_labels,
    ordered_methods,
)
from analysis.render import Table
from analysis.uncertainty import Estimate, Jackknife, fmt_ci, mean_of, t_quantile
from specbench.records import positions_balanced

RESOLVE_TARGET = 0.03  # the difference the resolution column sizes a sweep for (±3 %)
Z95 = 1.96
AA_FLAG = " ≠ 1"  # after a noise-floor interval that excludes 1 (module docstring)


def aa_twins(df: pd.DataFrame) -> list[str]:
    """The A/A twins of the records whose original is in the records too (sorted method keys)."""
    methods = set(df["method"].dropna())
    return sorted(m for m in methods if aa_original(m) in methods)


#: what a record's work is (module docstring, "same work"): the tokens it emitted and, round by round, the tokens
#: it verified, accepted and drafted without verifying
WORK_FIELDS = ("new_tokens", "drafted_trace", "accepted_trace", "discarded_trace")
#: the fields that name one record of a cell (a prompt turn and its repeat, at one initial γ)
RECORD_KEYS = ("gamma_init", "prompt_id", "turn", "repeat", "temperature", "task")
SAME_WORK_MARK = "≡"  # "≡ SpecDecode": the row did SpecDecode's work in every record (module docstring)


def _frozen(value: object) -> object:
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(_frozen(v) for v in value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def same_work(df: pd.DataFrame) -> dict[tuple[str, str], str]:
    """``{(pair, method): original}`` for every method that did another method's work in every record of a pair
    (module docstring, "same work"): the same records (``RECORD_KEYS``), each with the same ``WORK_FIELDS``, and at
    least one round drafted. Methods are taken in the papers' order (``ordered_methods``): the first of a group
    of identical ones is the original (SpecDecode before AssistantThreshold, GammaTune before GammaTune+).
    Declared A/A twins and AR are left out (the twins are the noise floor's already). Empty when the records
    carry no rounds."""
    keys = [k for k in RECORD_KEYS if k in df.columns]
    if not keys or any(f not in df.columns for f in WORK_FIELDS) or "pair" not in df.columns:
        return {}
    rows = df[df["pair"].notna() & df["method"].notna() & ~is_aa_twin(df["method"]) & ~is_ar(df)]
    found: dict[tuple[str, str], str] = {}
    for pair, in_pair in rows.groupby("pair", sort=True):
        work: dict[str, tuple] = {}
        for method in ordered_methods(in_pair["method"].unique()):
            mine = in_pair[in_pair["method"] == method]
            if not any(_frozen(t) for t in mine["drafted_trace"]):
                continue  # nothing drafted: no rounds to compare
            records = zip(mine[keys].itertuples(index=False, name=None),
                          mine[list(WORK_FIELDS)].itertuples(index=False, name=None), strict=True)
            work[method] = tuple(sorted(((_frozen(key), _frozen(fields)) for key, fields in records), key=repr))
        originals: list[str] = []
        for method, done in work.items():
            original = next((o for o in originals if work[o] == done), None)
            if original is None:
                originals.append(method)
            else:
                found[(str(pair), method)] = original
    return found


def aa_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Every A/A pair of the records, one row per (pair, copy): ``pair``, ``twin`` (the copy), ``original`` and
    ``kind``: "twin" (a declared A/A twin, ``aa_original``, whose original ran in that pair) or "same work"
    (``same_work``: a method that did another's work in every record)."""
    rows = []
    for twin in aa_twins(df):
        original = aa_original(twin)
        for pair in sorted(set(df.loc[df["method"] == twin, "pair"].dropna()) &
                           set(df.loc[df["method"] == original, "pair"].dropna())):
            rows.append({"pair": pair, "twin": twin, "original": original, "kind": "twin"})
    rows += [{"pair": p, "twin": m, "original": o, "kind": "same work"} for (p, m), o in same_work(df).items()]
    return pd.DataFrame(rows, columns=["pair", "twin", "original", "kind"])


def round_balance(df: pd.DataFrame) -> dict[str, tuple[str | None, int, bool]]:
    """Per pair of an interleaved sweep: ``(scheme, rounds, positions balanced)`` read off its records' ``interleave``
    (the rounds: the distinct round indices its records ran in; ``specbench.records.positions_balanced``). Pairs
    whose records carry no ``interleave`` are left out."""
    if "interleave" not in df.columns:
        return {}
    out = {}
    for pair, group in df.groupby("pair", sort=True):
        where = [w for w in group["interleave"] if isinstance(w, dict) and "round" in w]
        if not where:
            continue
        schemes = {w.get("scheme") for w in where}
        scheme = schemes.pop() if len(schemes) == 1 else None
        rounds = len({int(w["round"]) for w in where})
        out[str(pair)] = (scheme, rounds, positions_balanced(scheme, rounds))
    return out


def noise_floor_estimates(df: pd.DataFrame, pooling: str = "pooled",
                          jackknife: Jackknife | None = None) -> pd.DataFrame:
    """One row per (pair, A/A pair, initial γ) that both the copy and its original ran (``aa_pairs``: declared
    twins and same work): ``pair``, ``twin``, ``original``, ``kind``, ``gamma_init``, ``ratio`` (an ``Estimate``:
    copy ÷ original). ``jackknife``: one built on ``df`` (else built here)."""
    check_pooling(pooling)
    columns = ["pair", "twin", "original", "kind", "gamma_init", "ratio"]
    pairs = aa_pairs(df)
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    jackknife = jackknife or Jackknife(df, pooling)
    involved = set(pairs["twin"]) | set(pairs["original"])
    cells = jackknife.cells(df[df["method"].isin(involved)], ["pair", "method", "gamma_init"])
    cells["_gamma"] = cells["gamma_init"].fillna(-1.0)
    rows = []
    for pair, twin, original, kind in pairs.itertuples(index=False, name=None):
        mine = cells[(cells["method"] == twin) & (cells["pair"] == pair)]
        theirs = cells[(cells["method"] == original) & (cells["pair"] == pair)].set_index("_gamma")["estimate"]
        for gamma, gamma_key, estimate in zip(mine["gamma_init"], mine["_gamma"], mine["estimate"], strict=True):
            if gamma_key in theirs.index:
                rows.append({"pair": pair, "twin": twin, "original": original, "kind": kind, "gamma_init": gamma,
                             "ratio": estimate / theirs.loc[gamma_key]})
    return pd.DataFrame(rows, columns=columns)


def family_level(n: int, level: float = 0.95) -> float:
    """The level of each of ``n`` intervals that together contain their true values with probability ``level`` at
    least (Bonferroni: ``1 − (1 − level) / n``; module docstring, "family")."""
    return 1.0 - (1.0 - level) / max(int(n), 1)


def excludes_one(interval: tuple[float, float]) -> bool:
    """Whether an A/A interval excludes 1, the twin's true ratio (module docstring: flagged)."""
    lo, hi = interval
    return bool(np.isfinite(lo) and (lo > 1.0 or hi < 1.0))


@dataclass(frozen=True)
class AABand:
    """The A/A gate of one column of a comparison table (module docstring, "A/A gate"): the twin
    and its ratio to its original, mean over γ (averaged over pairs for an Average column)."""

    twin: str
    ratio: Estimate
    original: str | None = None  # the method the copy repeats (None: the declared twin's, ``aa_original``)

    @property
    def band(self) -> float:
        """``max(half-width of the log-scale 95 % CI, |log ratio|)`` (module docstring); without an
        interval, ``|log ratio|``; 0 without a ratio."""
        point = self.ratio.point
        deviation = abs(math.log(point)) if np.isfinite(point) and point > 0 else 0.0
        lo, hi = self.ratio.interval()
        if np.isfinite(lo) and lo > 0:
            return max((math.log(hi) - math.log(lo)) / 2.0, deviation)
        return deviation

    @property
    def flagged(self) -> bool:
        return excludes_one(self.ratio.interval())

    def text(self) -> str:
        """``"±6.1 %"`` (the band as a ratio, ``exp(band) − 1``), with ``AA_FLAG`` when the twin's CI excludes 1."""
        return f"±{100 * math.expm1(self.band):.1f} %" + (AA_FLAG if self.flagged else "")

    def describe(self, where: str, label: Callable[[str], str] = method_label) -> str:
        """One sentence for a caption or the terminal: the twin's ratio, its CI, the band, the flag (``label``: how
        the records name methods, ``analysis.metrics.method_labels``)."""
        ratio = self.ratio
        return (f"{where}: {label(self.twin)} ÷ {label(self.original or aa_original(self.twin))} = {ratio.point:.3f} "
                f"{fmt_ci(ratio.interval(), 3)}, band {self.text()}")


def aa_bands(df: pd.DataFrame, pooling: str = "pooled", jackknife: Jackknife | None = None) -> dict[str, AABand]:
    """Per pair with an A/A pair (``aa_pairs``: a declared twin and its original, or a method that did another's
    work), the gate of its comparisons (module docstring, "A/A gate"): the widest of their bands. Empty without
    one."""
    per_gamma = noise_floor_estimates(df, pooling, jackknife)
    bands: dict[str, AABand] = {}
    for (pair, twin, original), group in per_gamma.groupby(["pair", "twin", "original"], sort=True):
        candidate = AABand(twin, mean_of(group["ratio"]), original)
        if pair not in bands or candidate.band > bands[pair].band:
            bands[pair] = candidate
    return bands


def average_band(bands: dict[str, AABand], pairs: list[str]) -> AABand | None:
    """The gate of an Average column over ``pairs``: the band of the pairs' A/A ratios (each pair's widest)
    averaged over those pairs, replicate by replicate (as the column averages its pair cells); None unless every
    pair has one. Named after the first pair's A/A pair."""
    if not pairs or any(p not in bands for p in pairs):
        return None
    first = bands[pairs[0]]
    return AABand(first.twin, mean_of(bands[p].ratio for p in pairs), first.original)


def aa_turn_log_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (pair, A/A pair, initial γ, prompt turn, repeat) that a copy (``aa_pairs``) and its original
    both timed: ``pair``, ``twin``, ``gamma_init``, ``log_ratio`` (module docstring, "resolution")."""
    keys = [k for k in ("pair", *RECORD_KEYS) if k in df.columns]
    rows = []
    for pair, twin, original, _ in aa_pairs(df).itertuples(index=False, name=None):
        mine = df[(df["method"] == twin) & (df["pair"] == pair)]
        theirs = df[(df["method"] == original) & (df["pair"] == pair)]
        merged = mine.assign(_t=mine["tokens_per_s"])[keys + ["_t"]].merge(
            theirs.assign(_o=theirs["tokens_per_s"])[keys + ["_o"]], on=keys, how="inner")
        merged = merged[(merged["_t"] > 0) & (merged["_o"] > 0)]
        for pair, gamma, t, o in zip(merged["pair"], merged["gamma_init"], merged["_t"], merged["_o"], strict=True):
            rows.append({"pair": pair, "twin": twin, "gamma_init": gamma, "log_ratio": math.log(t / o)})
    return pd.DataFrame(rows, columns=["pair", "twin", "gamma_init", "log_ratio"])


def resolution(log_ratios: pd.Series, n_turns: int) -> tuple[float, float, float]:
    """(σ, the ± a cell of ``n_turns`` paired turns × repeats resolves, the turns × repeats ±``RESOLVE_TARGET``
    needs at least) from per-turn A/A log-ratios (module docstring, "resolution"); NaNs below two ratios
    (the second one below two turns)."""
    values = log_ratios.astype(float).dropna()
    if len(values) < 2 or n_turns < 1:
        return math.nan, math.nan, math.nan
    sigma = float(values.std(ddof=1))
    resolves = math.expm1(t_quantile(n_turns - 1) * sigma / math.sqrt(n_turns)) if n_turns > 1 else math.nan
    return sigma, resolves, math.ceil((Z95 * sigma / RESOLVE_TARGET) ** 2)


@artefact("tables/noise_floor", "noise floor table", scope=SCENARIO, needs=("records", "pooling"),
          when=lambda inputs: not aa_pairs(inputs.records).empty, terminal=True,
          lines=lambda table, inputs: noise_floor_lines(table, inputs.suffix),
          about="the A/A noise floor: each twin's throughput over its original's, 95 % CI, band, and the resolution")
def noise_floor_table(df: pd.DataFrame, pooling: str = "pooled") -> Table | None:
    """The noise floor (module docstring): per pair and twin, one row per initial γ and one over γ
    (``gamma_init`` NaN, ``scope`` "mean over γ", with ``max_abs_deviation`` and the A/A ``band``);
    ``excludes_one`` flags a row whose CI excludes 1. None without an A/A pair."""
    jackknife = Jackknife(df, pooling)
    per_gamma = noise_floor_estimates(df, pooling, jackknife)
    if per_gamma.empty:
        return None
    turns = aa_turn_log_ratios(df)
    balance = round_balance(df)
    rows = []
    groups = list(per_gamma.groupby(["pair", "twin"], sort=True))
    family = family_level(len(groups))
    for (pair, twin), group in groups:
        original, kind = group["original"].iloc[0], group["kind"].iloc[0]
        ratios: list[Estimate] = list(group["ratio"])
        overall = mean_of(ratios)
        deviation = max((abs(r.point - 1.0) for r in ratios if np.isfinite(r.point)), default=math.nan)
        mine = turns[(turns["pair"] == pair) & (turns["twin"] == twin)]
        n_cell = int(mine.groupby("gamma_init", dropna=False).size().median()) if len(mine) else 0
        sigma, resolves, needed = resolution(mine["log_ratio"], n_cell)
        for gamma, ratio in [*zip(group["gamma_init"], ratios, strict=True), (math.nan, overall)]:
            lo, hi = ratio.interval()
            whole = ratio is overall
            f_lo, f_hi = ratio.interval(family) if whole else (math.nan, math.nan)
            rows.append({"pair": pair, "twin": twin, "original": original, "kind": kind, "gamma_init": gamma,
                         "scope": "mean over γ" if whole else "γ", "ratio": ratio.point, "ci_lo": lo,
                         "ci_hi": hi, "excludes_one": excludes_one((lo, hi)),
                         "family_lo": f_lo, "family_hi": f_hi,
                         "family_excludes_one": excludes_one((f_lo, f_hi)) if whole else None,
                         "band": AABand(twin, ratio, original).band if whole else math.nan,
                         "max_abs_deviation": deviation if whole else math.nan,
                         "n_gamma": len(ratios) if whole else 1, "pooling": pooling,
                         "turn_sigma": sigma if whole else math.nan, "turns_per_cell": n_cell if whole else math.nan,
                         "cell_resolves": resolves if whole else math.nan,
                         "turns_for_target": needed if whole else math.nan,
                         "rounds": balance[pair][1] if pair in balance else math.nan,
                         "positions_balanced": balance[pair][2] if pair in balance else None})
    data = pd.DataFrame(rows)
    label = method_labels(df)
    target = f"±{100 * RESOLVE_TARGET:.0f} %"
    display = pd.DataFrame({
        "Pair": data["pair"],
        "A/A": [f"{label(t)} ÷ {label(o)}" + (" (same work)" if k == "same work" else "")
                for t, o, k in zip(data["twin"], data["original"], data["kind"], strict=True)],
        "γ": [fmt_num(g, 0) if s == "γ" else f"mean over {n}" for g, s, n in
              zip(data["gamma_init"], data["scope"], data["n_gamma"], strict=True)],
        "Ratio": data["ratio"].map(lambda v: fmt_num(v, 3)),
        "95 % CI": [fmt_ci((lo, hi), 3) + (AA_FLAG if flag else "") for lo, hi, flag in
                    zip(data["ci_lo"], data["ci_hi"], data["excludes_one"], strict=True)],
        f"family-wise CI ({len(groups)} A/A pairs)": [
            fmt_ci((lo, hi), 3) + (AA_FLAG if flag else "") if np.isfinite(lo) else ""
            for lo, hi, flag in zip(data["family_lo"], data["family_hi"], data["family_excludes_one"], strict=True)],
        "A/A band": [f"±{100 * math.expm1(v):.1f} %" if np.isfinite(v) else "" for v in data["band"]],
        "max |ratio − 1|": data["max_abs_deviation"].map(lambda v: fmt_num(v, 3)),
        "per-turn σ": data["turn_sigma"].map(lambda v: fmt_num(v, 3)),
        "a cell resolves": [f"±{100 * v:.1f} % ({int(n)} turns × repeats)" if np.isfinite(v) else "" for v, n in
                            zip(data["cell_resolves"], data["turns_per_cell"].fillna(0), strict=True)],
        f"turns × repeats for {target} (lower bound)": data["turns_for_target"].map(
            lambda v: "" if not np.isfinite(v) else str(int(v))),
    })
    caption = _caption(jackknife.note(), pooling, family, len(groups), target)
    unbalanced = {p: b for p, b in balance.items() if not b[2] and p in set(data["pair"])}
    if unbalanced:
        caption += (" Positions not balanced: " + "; ".join(
            f"{p}: {n} rounds ({s or 'unrecorded'} order{', an odd count: the last round unmirrored' if s == 'balanced' else ''})"
            for p, (s, n, _) in unbalanced.items())
            + " (specbench.records.positions_balanced): the decodes' mean positions differ, which an A/A pair's "
              "ratio may read.")
    return Table("noise_floor", caption, display, data)


def _caption(note: str, pooling: str, family: float, n_pairs: int, target: str) -> str:
    """The noise floor's caption (module docstring): what a row is, its intervals, the band, the resolution."""
    return (
        "Noise floor: an A/A twin does exactly the work of the method it copies under another label, so the true "
        f"ratio of their throughputs is 1. Ratio = twin's throughput ÷ the original's at the same initial γ "
        f"({POOLINGS[pooling]}); 'mean over N' = the mean of those ratios, with max |ratio − 1| over γ. "
        f"[lo, hi]: {note}. {AA_FLAG.strip()}: the interval excludes 1, the true ratio: the sweep's "
        "conditions alone moved it (or, for one row among many, the one-in-twenty chance of a 95 % interval). "
        f"Family-wise CI: the mean-over-γ interval at {100 * family:.2f} % (Bonferroni over the table's "
        f"{n_pairs} A/A pairs), so that all of them contain 1 with 95 % probability when nothing but chance moves "
        "them: at 95 % each, some A/A interval of several misses 1 more often than one time in twenty "
        "(analysis.noise_floor, 'family'). "
        "A/A band = the larger of the mean-over-γ interval's half-width and the ratio's deviation from 1 (log "
        "scale, shown as exp(band) − 1): the comparison tables mark two rows of this pair resolved only when the "
        "95 % CI of their ratio lies wholly beyond it (analysis.noise_floor, 'A/A gate'). The twin is no row of the "
        "comparison tables. '(same work)': a method whose rounds equal the other's in every record of the pair (its "
        "work under another name: analysis.noise_floor, 'same work'), a natural A/A pair, gating its pair like a twin. "
        "Per-turn σ = the standard "
        "deviation of log(twin ÷ original) over paired prompt turns × repeats (all γ); a cell of n turns × "
        f"repeats resolves about ±t(n − 1)·σ/√n; 'turns × repeats for {target}' = (1.96·σ / {RESOLVE_TARGET})², "
        "a lower bound: it takes repeats as independent turns and the host's noise as the only spread "
        "(analysis.noise_floor, 'resolution')."
    )


def noise_floor_lines(table: Table | None, tag: str = "") -> list[str]:
    """One terminal line per pair and twin of a ``noise_floor_table``, saying when its interval excludes 1."""
    if table is None:
        return []
    overall = table.data[table.data["scope"] == "mean over γ"]
    return [f"noise floor{tag} ({r['pair']}): {r['twin']} ÷ {r['original']} = {r['ratio']:.3f} "
            f"{fmt_ci((r['ci_lo'], r['ci_hi']), 3)} (mean over {r['n_gamma']} initial γ; max |ratio − 1| over γ = "
            f"{r['max_abs_deviation']:.3f}; A/A band ±{100 * math.expm1(r['band']):.1f} %)"
            + (" — EXCLUDES 1: the sweep's conditions alone moved this pair's comparisons" if r["excludes_one"] else "")
            + _resolution_note(r)
            + (f"; positions not balanced ({int(r['rounds'])} rounds)" if r.get("positions_balanced") is False else "")
            for _, r in overall.iterrows()]


def _resolution_note(row: pd.Series) -> str:
    if not np.isfinite(row.get("turns_for_target", math.nan)):
        return ""
    resolves = (f"a cell of {int(row['turns_per_cell'])} turns × repeats resolves ±{100 * row['cell_resolves']:.1f} %, "
                if np.isfinite(row["cell_resolves"]) else "")
    return (f"; per-turn σ {row['turn_sigma']:.3f}: {resolves}±{100 * RESOLVE_TARGET:.0f} % needs at least "
            f"{int(row['turns_for_target'])} turns × repeats")
