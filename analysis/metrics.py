"""The few numbers every table and figure shares: throughput of a cell of records,
speedups against a baseline, and mean ± std across initial γ.

Conventions (stated in every caption that uses them):

* throughput of a set of records, ``pooling="pooled"``: total new tokens / total
  wall seconds (``specbench.records.pooled_tokens_per_s``: long answers weigh more);
  ``pooling="mean"``: the mean of per-record ``tokens_per_s``;
  ``pooling="question"``: Spec-Bench's ``evaluation/speed.py`` (``speed``): per question, the
  new tokens of all its turns over the wall time of all its turns; then the mean over questions;
* std across initial γ is the *sample* std (``ddof=1``; NaN for a single γ);
* a speedup is a ratio of timings from different jobs, so it is only meaningful when those jobs
  ran under the same conditions: ``shared_device_mismatch`` is true when any record involved
  shared its device with other jobs (``device_jobs > 1``, written by ``runners.jobs.device_share``)
  and the records do not all share it with the very same jobs; tables mark such cells with
  ``SHARED_MARK`` and say why in their caption (``SHARED_NOTE``). Records of sequential sweeps, of
  one-job-per-GPU sweeps and of older schemas (no ``device_jobs``) are never flagged.
* ``hmean``: the harmonic mean (``scipy.stats.hmean``, as hf-bench's
  ``summarize_results.py: get_df_summary_of_results``), used only under hf-bench's definitions.

Method keys: a record's ``method`` with a variant tag for every knob that is not at the method's
default, as the record itself says (``method_key``: the job writes it into each record,
``specbench.config.method.method_key``, from the method's YAML as it ran; ``analysis.frame`` reads it):
``gammatune[eta=0.5]``, ``gammatune[carryover]`` (``transient: false``: γ carried over between prompts),
``gammatune[expand=drafted]``, the cross-vocabulary algorithm's knobs off their defaults, and the engine options
that were on (``specdecode[fast_linear=all,fused_prefill]``, from ``analysis.frame.engine_tag``); ``method_label``
reads them ``GammaTune (η = 0.5)``, ``GammaTune (carry-over)``, ``SpecDecode (fast_linear=all, fused_prefill)``. So
no table pools two settings of one method under one row. The name before the tags is the records' own
(``display_names``: the method YAML's ``display`` as the job ran it), so a method added with a YAML file is named by
that file alone.

An A/A twin (``specbench.config.method.aa_twin_of``: ``specdecode_twin`` does exactly SpecDecode's work
under another label) reads ``SpecDecode (A/A twin)`` and sorts right after its original
(``aa_original``); it is never a method row of a comparison table nor a baseline, only the
noise floor's numerator (``analysis.noise_floor``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.settings import tag_label
from specbench.config.method import aa_twin_of, yaml_display
from specbench.drafter_kinds import cross_vocabulary_kinds
from specbench.records import pooled_tokens_per_s, throughput_ms

DDOF = 1
POOLINGS = {
    "pooled": "tokens/s pooled over prompts: total new tokens / total wall time",
    "mean": "tokens/s averaged over prompts: mean of per-prompt tokens/s",
    "question": "tokens/s per question (all its turns' new tokens / their wall time), averaged over questions "
                "(Spec-Bench's speed.py)",
}
STD_NOTE = "sample std (ddof=1) across initial γ"

#: the papers' order of rows (a method not listed sorts after them, alphabetically): presentation only; how a row
#: is *named* is the records' (``display_names``)
PAPER_ORDER = ("ar", "ar_offloaded", "hf_native_ar", "hf_native_ar_offloaded", "specdecode", "hf_heuristic",
               "hf_heuristic_carryover", "assistant_threshold", "gammatune", "gammatune_plus", "sd", "hf_sd")


def paper_order() -> list[str]:
    """``PAPER_ORDER`` with the cross-vocabulary algorithms after ``sd`` (their declarations, in the order of their
    modules: ``specbench.drafter_kinds.cross_vocabulary_kinds``; no list of them here)."""
    at = PAPER_ORDER.index("sd") + 1
    return [*PAPER_ORDER[:at], *cross_vocabulary_kinds(), *PAPER_ORDER[at:]]
#: the names of the rows ``analysis.hetero`` composes, which no YAML file names (``sd``: one vocabulary; ``hf_sd``:
#: transformers' SD, the paper's rows)
COMPOSED_NAMES = {"sd": "SD", "hf_sd": "SD (HF)"}


def base_method(method: Any) -> str | None:
    """A method key without its variant tags (``gammatune[eta=0.5]`` -> ``gammatune``)."""
    return method.partition("[")[0] if isinstance(method, str) else None


def aa_original(method: Any) -> str | None:
    """The method key an A/A twin's key copies, variant tags kept (``specdecode_twin[fused_prefill]``
    -> ``specdecode[fused_prefill]``); None for any other method."""
    if not isinstance(method, str):
        return None
    base, bracket, tags = method.partition("[")
    original = aa_twin_of(base)
    return original + bracket + tags if original else None


def is_aa_twin(methods: pd.Series) -> pd.Series:
    """Which of the method keys are A/A twins (``aa_original``)."""
    return methods.map(lambda m: aa_original(m) is not None).astype(bool)


def display_names(df: pd.DataFrame | None) -> dict[str, str]:
    """How the records name what ran, as their YAML files did when they ran (the job writes ``method_display`` and
    ``hetero_display``, ``specbench.config.method``): method name (no variant tags) -> display name, rule -> display
    name; where records of one name disagree (a display renamed between runs), the most frequent, ties by
    alphabet. A name no record gives is ``method_label``'s to find."""
    names: dict[str, str] = {}
    if df is None:
        return names
    for key, column in (("method", "method_display"), ("hetero", "hetero_display")):
        if key not in df.columns or column not in df.columns:
            continue
        keys = df[key].map(base_method) if key == "method" else df[key]
        counts: dict[str, Counter] = {}
        for name, display in zip(keys, df[column], strict=True):
            if isinstance(name, str) and isinstance(display, str) and display:
                counts.setdefault(name, Counter())[display] += 1
        for name, seen in counts.items():
            most = max(seen.values())
            names.setdefault(name, sorted(d for d, n in seen.items() if n == most)[0])
    return names


def method_label(method: str, names: Mapping[str, str] | None = None) -> str:
    """The display name of a method key: the records' own names (``names``, from ``display_names``), else a composed
    row's (``COMPOSED_NAMES``), else the YAML's as a job would write it today (``specbench.config.method.yaml_display``:
    for a hand-made row; every committed record names itself), else the key; ``slem+gammatune`` (a
    cross-vocabulary algorithm under a γ policy) reads ``SLEM + GammaTune``; a variant tag reads ``GammaTune
    (carry-over)``, ``GammaTune (η = 0.5)`` (``analysis.settings.tag_label``); an A/A twin without a name of its own
    ``SpecDecode (A/A twin)``."""
    if not isinstance(method, str):
        return str(method)
    base, _, tags = method.partition("[")
    if tags:
        tagged = ", ".join(tag_label(t) for t in tags.rstrip("]").split(","))
        return f"{method_label(base, names)} ({tagged})"
    named = (names or {}).get(method) or COMPOSED_NAMES.get(method) or yaml_display(method)
    if named:
        return named
    original = aa_twin_of(base)
    if original:
        return f"{method_label(original, names)} (A/A twin)"
    if "+" in method:
        return " + ".join(method_label(part, names) for part in method.split("+"))
    return method


def method_labels(df: pd.DataFrame | None) -> Callable[[str], str]:
    """``method_label`` with the names of the records in ``df`` (``display_names``): what a table or figure of those
    records calls to name its rows."""
    names = display_names(df)
    return lambda method: method_label(method, names)


def ordered_methods(methods: Iterable[str]) -> list[str]:
    """Known methods in the papers' order (a variant, and an A/A twin, right after its method), then
    any others alphabetically."""
    known = paper_order()
    present = {str(m) for m in methods if m is not None}
    rank = {m: i for i, m in enumerate(known)}

    def order(m: str) -> tuple:
        base = (aa_original(m) or m).partition("[")[0]
        return (rank.get(base, len(known)), base if base not in rank else "", m)

    return sorted(present, key=order)


def check_pooling(pooling: str) -> str:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {sorted(POOLINGS)}, got {pooling!r}")
    return pooling


def time_ms(records: pd.DataFrame, column: str = "wall_ms") -> pd.Series:
    """The time each record's tokens divide by in a throughput (``specbench.records.throughput_ms``, the one
    definition): its ``wall_ms`` (``column="ar_wall_ms"``: its AR reference's), or for a row decoded in a batch
    its share of the batch's wall, so that pooled tokens/s over a batched job is its throughput over all rows."""
    wall = records[column].astype(float)  # a number column of the typed frame (analysis.frame)
    if "batch_share_ms" not in records or records["batch_share_ms"].isna().all():
        return wall
    ar = column == "ar_wall_ms"
    cols = [c for c in (column, "batch_share_ms", "ar_batch_wall_ms", "ar_batch_tokens", "batch_tokens", "new_tokens")
            if c in records]
    values = [throughput_ms({k: (None if pd.isna(v) else v) for k, v in row.items()}, ar=ar)
              for row in records[cols].to_dict("records")]
    return pd.Series([math.nan if v is None else v for v in values], index=records.index, dtype=float)


def throughput(records: pd.DataFrame, pooling: str = "pooled") -> float:
    """Tokens/s of a set of records (module doc); NaN when it cannot be computed."""
    check_pooling(pooling)
    if records.empty:
        return math.nan
    time = time_ms(records)
    if pooling == "mean":
        batched = time.ne(records["wall_ms"])
        rates = records["tokens_per_s"].where(~batched, records["new_tokens"] / (time / 1000.0))
        return float(rates.mean())
    if pooling == "question":
        keys = [k for k in ("task", "prompt_id") if k in records.columns]
        rates = [pooled_tokens_per_s(g["new_tokens"], time.loc[g.index])
                 for _, g in records.groupby(keys, dropna=False, sort=False)]
        rates = [r for r in rates if np.isfinite(r)]
        return float(np.mean(rates)) if rates else math.nan
    return pooled_tokens_per_s(records["new_tokens"], time)


def hmean(values: Iterable[float]) -> float:
    """Harmonic mean of the finite positive values (NaN when none): hf-bench's average of TPOT and
    of tokens/s (``scipy.stats.hmean`` over an example's group)."""
    arr = np.array([v for v in values if v is not None and np.isfinite(v) and v > 0], dtype=float)
    return float(len(arr) / np.sum(1.0 / arr)) if arr.size else math.nan


def is_ar(df: pd.DataFrame) -> pd.Series:
    """Records of autoregressive decoding (any KV cache): ``ar_cache`` set, or method ``ar`` (any variant)."""
    cache = df["ar_cache"] if "ar_cache" in df.columns else pd.Series(None, index=df.index)
    return cache.notna() | (df["method"].map(base_method) == "ar")


def per_group(df: pd.DataFrame, keys: Sequence[str], **columns: Callable[[pd.DataFrame], Any]) -> pd.DataFrame:
    """One row per group of ``keys`` (null keys kept, sorted): the keys, each of ``columns`` (a
    function of the group's records) and ``n_records``."""
    keys = list(keys)
    if df.empty:
        return pd.DataFrame(columns=[*keys, *columns, "n_records"])
    rows = []
    for values, group in df.groupby(keys, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        rows.append({**dict(zip(keys, values, strict=True)), **{name: fn(group) for name, fn in columns.items()},
                     "n_records": len(group)})
    return pd.DataFrame(rows)


def throughput_by(df: pd.DataFrame, keys: Sequence[str], pooling: str = "pooled") -> pd.DataFrame:
    """One row per group of ``keys`` (null keys kept): ``tokens_per_s`` and ``n_records``."""
    return per_group(df, keys, tokens_per_s=lambda g: throughput(g, pooling))


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, sample std with ddof=1, n) of the finite values; std is NaN when n < 2."""
    arr = np.array([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if arr.size == 0:
        return math.nan, math.nan, 0
    std = float(arr.std(ddof=DDOF)) if arr.size > DDOF else math.nan
    return float(arr.mean()), std, int(arr.size)


def gamma_speedups(
    df: pd.DataFrame,
    pooling: str = "pooled",
    baseline: str = "specdecode",
    scope: Sequence[str] = ("pair",),
) -> pd.DataFrame:
    """Throughput of every (scope..., method, gamma_init) cell divided by the
    baseline's throughput *averaged over its initial γ* within the same scope
    (GammaTune Table 2). Columns: scope..., method, gamma_init, tokens_per_s,
    n_records, baseline_tokens_per_s, speedup (NaN where the scope has no baseline)."""
    scope = list(scope)
    cells = throughput_by(df, [*scope, "method", "gamma_init"], pooling)
    if cells.empty:
        return cells.assign(baseline_tokens_per_s=[], speedup=[])
    base = cells[cells["method"] == baseline].groupby(scope, dropna=False)["tokens_per_s"].mean()
    base = base.rename("baseline_tokens_per_s").reset_index()
    out = cells.merge(base, on=scope, how="left")
    out["speedup"] = out["tokens_per_s"] / out["baseline_tokens_per_s"]
    return out


SHARED_MARK = " †"
SHARED_NOTE = (
    "† not comparable: the jobs behind this speedup ran beside other jobs on the same device, with "
    "different neighbours (records' device_jobs > 1, device_neighbours); re-run them sequentially or one "
    "job per GPU."
)


def _signature(device_jobs: Any, device_id: Any, neighbours: Any, job_dir: Any) -> Any:
    if device_jobs is None or not np.isfinite(device_jobs) or device_jobs <= 1:
        return "alone"
    own = str(job_dir).rstrip("/").rsplit("/", 1)[-1] if job_dir is not None else ""
    names = set(neighbours) if isinstance(neighbours, list | tuple) else set()
    return (str(device_id), tuple(sorted(names | {own})))


def shared_device_mismatch(records: pd.DataFrame) -> bool:
    """Whether a speedup computed from these records mixes device-sharing conditions (module doc)."""
    if records.empty or "device_jobs" not in records:
        return False
    jobs = records["device_jobs"]  # the typed frame's numbers (analysis.frame)
    if not (jobs > 1).any():
        return False
    cols = [records.get(c, pd.Series([None] * len(records), index=records.index))
            for c in ("device_id", "device_neighbours", "job_dir")]
    sigs = {_signature(j, d, n, p) for j, d, n, p in zip(jobs, *cols, strict=True)}
    return len(sigs) > 1


def _absent(value: Any, blank_inf: bool) -> bool:
    if value is None:
        return True
    return bool(not np.isfinite(value) if blank_inf else np.isnan(value))


def fmt_mean_std(mean: float, std: float | None = None, suffix: str = "×", digits: int = 2,
                 blank_inf: bool = True) -> str:
    """The one number formatter of the tables: ``"1.23 ± 0.04×"``; ``"1.23×"`` without a std (None or
    NaN); ``""`` without a mean. ``blank_inf``: ±inf reads as no number (the records' tables); ``False``:
    it is printed (``"inf"``; the replay's tables, where a reference of 0 tokens/s makes a fraction
    infinite), and only None and NaN are blank."""
    if _absent(mean, blank_inf):
        return ""
    if _absent(std, blank_inf):
        return f"{mean:.{digits}f}{suffix}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}{suffix}"


def fmt_ratio(mean: float, std: float | None = None, digits: int = 3) -> str:
    """``fmt_mean_std`` for the replay's and the predictions' tables: no suffix, three digits, an infinite
    value shown (a reference of 0 tokens/s, prompt lookup's infinite ``c``)."""
    return fmt_mean_std(mean, std, suffix="", digits=digits, blank_inf=False)


def fmt_num(value: float, digits: int = 1) -> str:
    """A number alone (``fmt_mean_std`` without std or suffix): ``""`` when it is not finite."""
    return fmt_mean_std(value, None, "", digits)
