"""What a row of a table *is*: the settings that make two runs different runs, so that no table
pools them.

Two kinds of setting (issue 28, item 1):

* **method knobs** make a row's identity. A job writes it into every record it makes
  (``method_key``, ``specbench.config.method.method_key``: every knob off its default in the method's
  YAML *at run time* and the cross-vocabulary algorithm's knobs off theirs, ``gammatune[eta=0.5]``),
  so a default changed later relabels no result. ``analysis.frame`` reads that key; this module reads no
  ``conf/``. A record written before the key existed is keyed by the same rule
  (``specbench.config.method.variant_tags``) from its own ``method``, ``method_params`` and the job's
  ``hetero`` node, against ``LEGACY_METHOD_DEFAULTS`` / ``LEGACY_HETERO_DEFAULTS``: a frozen copy of the
  defaults those records ran under (``conf/method`` and ``conf/hetero`` as they stood when the key was
  introduced, issue 42), never today's files. A knob at its default tags nothing; the two legacy spellings
  (``carryover``, ``expand=X``) and the rule for a method without defaults are
  ``specbench.config.method``'s. A tag reads as a label by ``tag_label`` (``GammaTune (η = 0.5)``).
* **scenario settings** change *what is measured* (the workload or the sampling law), so every
  artefact that compares rows is made once per value (``scenario_keys``): task, temperature, the
  sampling processors in force (``top_k`` / ``top_p`` / ``typical_p``; they only act when the
  temperature is above 0, so at temperature 0 they are read as off), the prompt format and
  ``max_new_tokens``. The cross-vocabulary rule that ran (``hetero``) is part of the row itself
  (the heterogeneous tables' rows, ``analysis.hetero.rule_method``; GammaTune's artefacts use
  one-vocabulary records only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from specbench.config.method import fmt_value, variant_tags

ENGINE_KEYS = ("fast_linear", "verify_buckets", "fused_prefill")  # ``analysis.frame.engine_tag``'s items
KNOB_SYMBOLS = {"eta": "η", "delta": "δ", "gamma_min": "γ_min", "gamma_max": "γ_max", "threshold": "τ",
                "lookbehind": "look-behind"}
LEGACY_LABELS = {"carryover": "carry-over", "expand=drafted": "expand on A = d", "expand=gamma": "expand on A = γ",
                 "batch_gamma=shared": "shared γ"}
PROCESSORS = ("top_k", "top_p", "typical_p")
#: the batch size is a scenario (AR at B is the baseline of every method at B); a shared γ is a variant of the
#: method (``analysis.frame``: tag ``batch_gamma=shared``), so an AR job at B stays in its methods' scenario
SCENARIO_KEYS = ("task", "temperature", *PROCESSORS, "prompt_format", "max_new_tokens", "batch_size")

_GAMMATUNE = {"eta": 0.25, "delta": 2, "gamma_min": 1, "gamma_max": 32, "transient": True, "expand_on": "gamma"}
_THRESHOLD = {"threshold": 0.4, "adaptive_threshold": False, "persist_threshold": False}
_BANDIT = {"arms": [1, 2, 3, 4, 5, 6, 7, 8], "c": 1.0, "horizon": 200, "seed": 0, "transient": True, "latency": None}
#: the knobs' defaults of records without ``method_key`` (module docstring): frozen, never edited to follow
#: ``conf/method`` (a record written since carries its own key)
LEGACY_METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    "adaedl": {"entropy_scale": 0.2, "threshold": 0.7},
    "ar": {"cache": "dynamic"},
    "ar_offloaded": {"cache": "offloaded"},
    "assistant_threshold": _THRESHOLD,
    "banditspec": {"algorithm": "ucb", **_BANDIT},
    "banditspec_exp3": {"algorithm": "exp3", **_BANDIT},
    "cost_aware": {"feature": "confidence", "gamma_max": 32, "prior_weight": 2.0, "rho_prior_rounds": 4.0,
                   "alpha_prior": 0.6, "peek": True, "decay": 0.98, "probe": 8, "transient": True, "latency": None,
                   "adapt_costs": False},
    "gammatune": _GAMMATUNE,
    "gammatune_plus": {**_GAMMATUNE, **_THRESHOLD},
    "hf_heuristic": {"transient": True},
    "hf_heuristic_carryover": {"transient": False},
    "hf_native_ar": {"cache": "dynamic", "loop": "transformers"},
    "hf_native_ar_offloaded": {"cache": "offloaded", "loop": "transformers"},
    "hf_native_assistant_threshold": {**_THRESHOLD, "adaptive_threshold": True},
    "hf_native_heuristic": {"transient": True},
    "hf_native_heuristic_carryover": {"transient": False},
    "hf_native_specdecode": {},
    "logit_margin": {"threshold": 0.3},
    "max_confidence": {"threshold": 0.5},
    "smartspec": {"k_max": 8, "alpha_prior": 0.6, "window": 8, "probe": 4, "transient": True, "latency": None},
    "specdecode": {},
    "specdecode_twin": {},
    "svip": {"threshold": 0.5},
    "tapout": {"algorithm": "ucb", **_BANDIT, "arms": None},
}
LEGACY_HETERO_DEFAULTS: dict[str, dict[str, Any]] = {
    "auto": {"lookbehind": 10, "slem_gamma": None, "tli_processors": None},
    "none": {"lookbehind": 10},
    "slem": {"lookbehind": 10, "slem_gamma": None},
    "slrs": {"lookbehind": 10, "max_nodes": 32, "max_lookahead": None, "draft_top_k": 8},
    "tli": {"lookbehind": 10, "tli_processors": None},
    "union": {"lookbehind": 10},
}


#: how tables named what ran before records carried ``method_display`` / ``hetero_display`` (issue 42): frozen, never
#: edited to follow the YAML files' ``display`` (a record written since carries its own); also the names of the rows
#: ``analysis.hetero`` composes (``sd``: one vocabulary; ``hf_sd``: transformers' SD), which are no YAML file
LEGACY_DISPLAY: dict[str, str] = {
    "ar": "AR",
    "ar_offloaded": "AR (offloaded cache)",
    "hf_native_ar": "AR (transformers generate)",
    "hf_native_ar_offloaded": "AR (transformers generate, offloaded cache)",
    "specdecode": "SpecDecode",
    "hf_heuristic": "HFHeuristic",
    "hf_heuristic_carryover": "HFHeuristic (carry-over)",
    "assistant_threshold": "AssistantThreshold",
    "gammatune": "GammaTune",
    "gammatune_plus": "GammaTune+",
    "sd": "SD",
    "slem": "SLEM",
    "tli": "TLI",
    "slrs": "SLRS",
    "union": "Union",
    "hf_sd": "SD (HF)",
}


def method_defaults(name: str) -> dict[str, Any] | None:
    """The knobs' defaults a record of ``name`` without ``method_key`` ran under (``LEGACY_METHOD_DEFAULTS``), in
    the YAML's order; None for a method that had no YAML file."""
    defaults = LEGACY_METHOD_DEFAULTS.get(name)
    return None if defaults is None else dict(defaults)


def hetero_defaults(name: str) -> dict[str, Any] | None:
    """The cross-vocabulary algorithm's defaults of records without ``method_key`` (``LEGACY_HETERO_DEFAULTS``)."""
    defaults = LEGACY_HETERO_DEFAULTS.get(name)
    return None if defaults is None else dict(defaults)


def method_tags(method: str, params: Mapping[str, Any] | None, hetero: str | None = None,
                hetero_params: Mapping[str, Any] | None = None) -> list[str]:
    """The variant tags of a record without ``method_key`` (module docstring): its method's knobs off the frozen
    defaults, then (for a record that ran a cross-vocabulary algorithm) the algorithm's knobs off theirs."""
    name = str(hetero_params.get("name") or hetero) if isinstance(hetero_params, Mapping) else None
    knobs = hetero_defaults(name) if name else None
    return variant_tags(method, params, method_defaults(method), hetero, hetero_params, knobs)

def tag_label(tag: str) -> str:
    """A tag as a label reads it: ``eta=0.5`` -> ``η = 0.5``, ``carryover`` -> ``carry-over``; the
    engine's options as they are (``fast_linear=all``)."""
    if tag in LEGACY_LABELS:
        return LEGACY_LABELS[tag]
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
    greedy = pd.to_numeric(df["temperature"], errors="coerce").fillna(0) == 0 if "temperature" in df else None
    for key in keys:
        col = df[key] if key in df.columns else pd.Series(None, index=df.index, dtype=object)
        values = [None if _blank(v) else v for v in col]
        if key in PROCESSORS and greedy is not None:
            values = [None if g else v for v, g in zip(values, greedy, strict=True)]
        if key == "batch_size":  # records from before batches ran at batch size 1
            values = [1 if v is None else int(v) for v in values]
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


def setting_partitions(df: pd.DataFrame, keys: Sequence[str] = ("prompt_format", "max_new_tokens"),
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

