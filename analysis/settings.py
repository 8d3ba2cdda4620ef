"""What a row of a table *is*: the settings that make two runs different runs, so that no table
pools them.

Two kinds of setting:

* **method knobs** make a row's identity. A job writes it into every record it makes
  (``method_key``, ``specbench.config.method.method_key``: every knob off its default in the method's
  YAML *at run time* and the cross-vocabulary algorithm's knobs off theirs, ``gammatune[eta=0.5]``),
  beside the knobs themselves (``method_params``), so a default changed later relabels no result.
  ``analysis.frame`` reads that key; every committed record carries one (the records written before it
  existed were migrated once, ``scripts/migrate_method_identity.py``). A row without one (a hand-made
  row) is keyed as a job would key it today. A tag reads as a label by ``tag_label``
  (``GammaTune (η = 0.5)``; the two legacy spellings ``carryover`` and ``expand=X``, ``TAG_LABELS``).
* **scenario settings** change *what is measured* (the workload or the sampling law), so every
  artefact that compares rows is made once per value (``scenario_keys``): task, temperature, the
  sampling processors in force (``top_k`` / ``top_p`` / ``typical_p``; they only act when the
  temperature is above 0, so at temperature 0 they are read as off), the prompt format,
  ``max_new_tokens``, the batch size and the backend that decoded (``backend``: ours, ``torch``, for records
  written before there were others). The cross-vocabulary rule that ran (``hetero``) is part of the row itself
  (the heterogeneous tables' rows, ``analysis.hetero.rule_method``; GammaTune's artefacts use
  one-vocabulary records only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from specbench.config.method import fmt_value

ENGINE_KEYS = ("fast_linear", "verify_buckets", "fused_prefill", "graphs", "width", "draft_compile")  # ``analysis.frame``'s engine tags
KNOB_SYMBOLS = {"eta": "η", "delta": "δ", "gamma_min": "γ_min", "gamma_max": "γ_max", "threshold": "τ",
                "lookbehind": "look-behind"}
#: the labels of the tags that are no ``knob=value`` (``specbench.config.method.knob_tag``'s two spellings, and a
#: batch's shared γ, ``analysis.frame``)
TAG_LABELS = {"carryover": "carry-over", "expand=drafted": "expand on A = d", "expand=gamma": "expand on A = γ",
              "batch_gamma=shared": "shared γ"}
PROCESSORS = ("top_k", "top_p", "typical_p")
#: the batch size is a scenario (AR at B is the baseline of every method at B); a shared γ is a variant of the
#: method (``analysis.frame``: tag ``batch_gamma=shared``), so an AR job at B stays in its methods' scenario
SCENARIO_KEYS = ("task", "temperature", *PROCESSORS, "prompt_format", "max_new_tokens", "batch_size", "backend")


def tag_label(tag: str) -> str:
    """A tag as a label reads it: ``eta=0.5`` -> ``η = 0.5``, ``carryover`` -> ``carry-over``; the
    engine's options as they are (``fast_linear=all``)."""
    if tag in TAG_LABELS:
        return TAG_LABELS[tag]
    key, sep, value = tag.partition("=")
    if not sep or key in ENGINE_KEYS:
        return tag
    return f"{KNOB_SYMBOLS.get(key, key)} = {value}"


# ---------------------------------------------------------------------- scenarios


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def scenario_frame(df: pd.DataFrame, keys: Sequence[str] = SCENARIO_KEYS) -> pd.DataFrame:
    """The scenario settings of each record (``keys`` present in ``df``), nulls as ``None`` and the
    sampling processors as ``None`` at temperature 0 (they do not act there)."""
    out = pd.DataFrame(index=df.index)
    greedy = df["temperature"].fillna(0) == 0 if "temperature" in df else None  # typed (analysis.frame)
    for key in keys:
        col = df[key] if key in df.columns else pd.Series(None, index=df.index, dtype=object)
        values = [None if _blank(v) else v for v in col]
        if key in PROCESSORS and greedy is not None:
            values = [None if g else v for v, g in zip(values, greedy, strict=True)]
        if key == "batch_size":  # records from before batches ran at batch size 1
            values = [1 if v is None else int(v) for v in values]
        if key == "backend":  # records from before the backends ran on ours
            values = ["torch" if v is None else str(v) for v in values]
        out[key] = pd.Series(values, index=df.index, dtype=object)
    return out


def _order(values: Any) -> tuple:
    """A sort key for a group's values that mixes numbers, strings and the null marker."""
    values = values if isinstance(values, tuple) else (values,)
    return tuple((0, float(v), "") if isinstance(v, int | float) and not isinstance(v, bool) else (1, 0.0, str(v))
                 for v in values)


def _piece(key: str, value: Any) -> str:
    if key == "temperature":
        return f"t{value:g}" if isinstance(value, float | int) else f"t{value}"
    if key == "max_new_tokens":
        return f"m{int(value)}" if value is not None else "mnone"
    if key == "batch_size":
        return f"b{int(value)}"
    if key in PROCESSORS:
        short = {"top_k": "topk", "top_p": "topp", "typical_p": "typical"}[key]
        return f"{short}{fmt_value(value)}" if value is not None else f"no{short}"
    return fmt_value(value) if value is not None else "none"


def scenarios(df: pd.DataFrame, always: Sequence[str] = ("task", "temperature"),
              keys: Sequence[str] = SCENARIO_KEYS) -> list[tuple[str, pd.DataFrame]]:
    """Split by every scenario setting (``keys``): ``[(suffix, records)]``. The suffix is ``""``
    when the frame holds one scenario; else it names the ``always`` keys and, after them, each other
    key whose value differs between the frame's scenarios (``-spec_bench-t0``,
    ``-spec_bench-t0-m128``); it is used in artefact file names and captions."""
    if df.empty:
        return []
    settings = scenario_frame(df, keys)
    filled = settings.astype(object).where(settings.notna(), "\x00none")
    groups = sorted(filled.groupby(list(keys), sort=False, dropna=False), key=lambda kv: _order(kv[0]))
    if len(groups) == 1:
        return [("", df)]
    varying = [k for k in keys if k not in always and filled[k].nunique(dropna=False) > 1]
    shown = [*[k for k in always if k in keys], *varying]
    out = []
    for values, index in ((v, g.index) for v, g in groups):
        values = dict(zip(keys, values if isinstance(values, tuple) else (values,), strict=True))
        pieces = [_piece(k, None if values[k] == "\x00none" else values[k]) for k in shown]
        out.append(("-" + "-".join(pieces), df.loc[index]))
    return out


def setting_partitions(df: pd.DataFrame, keys: Sequence[str] = ("prompt_format", "max_new_tokens", "backend"),
                       ) -> list[tuple[str, pd.DataFrame]]:
    """Split for the artefacts that show temperatures (and tasks) side by side, as hf-bench's tables
    do (``analysis.hetero``): by ``prompt_format`` and ``max_new_tokens`` and by the sampling
    processors of the sampled records. Greedy records (no processor acts) join every partition of
    their (prompt format, ``max_new_tokens``), so both temperatures of one protocol stay in one
    table. Tasks are not split (each table shows them as a column). The suffix is ``""`` when
    nothing needs splitting, else it names the settings that differ (``-m128``, ``-topk50``)."""
    if df.empty:
        return []
    split_keys = list(keys)
    settings = scenario_frame(df, [*split_keys, *PROCESSORS])
    procs = [tuple(r) for r in settings[list(PROCESSORS)].itertuples(index=False)]
    settings["_proc"] = pd.Series([None if all(v is None for v in p) else p for p in procs], index=df.index,
                                  dtype=object)
    filled = settings[split_keys].astype(object).where(settings[split_keys].notna(), "\x00none")
    parts: list[tuple[dict[str, Any], pd.Index]] = []
    for values, group in sorted(filled.groupby(split_keys, sort=False, dropna=False), key=lambda kv: _order(kv[0])):
        values = dict(zip(split_keys, values if isinstance(values, tuple) else (values,), strict=True))
        sampled = sorted({p for p in settings.loc[group.index, "_proc"] if p is not None}, key=repr)
        if len(sampled) <= 1:
            parts.append(({**values, "_proc": sampled[0] if sampled else None}, group.index))
            continue
        for proc in sampled:
            here = settings.loc[group.index, "_proc"]
            parts.append(({**values, "_proc": proc}, group.index[[p is None or p == proc for p in here]]))
    if len(parts) == 1:
        return [("", df)]
    varying = [k for k in split_keys if len({repr(p[k]) for p, _ in parts}) > 1]
    out = []
    for values, index in parts:
        pieces = [_piece(k, None if values[k] == "\x00none" else values[k]) for k in varying]
        if len({repr(p["_proc"]) for p, _ in parts}) > 1:
            proc = values["_proc"] or (None, None, None)
            pieces += [_piece(k, v) for k, v in zip(PROCESSORS, proc, strict=True) if v is not None] or ["noproc"]
        out.append(("-" + "-".join(pieces), df.loc[index]))
    return out

