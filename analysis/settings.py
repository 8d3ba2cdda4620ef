"""What a row of a table *is*: the settings that make two runs different runs, so that no table
pools them.

Two kinds of setting (issue 28, item 1):

* **method knobs** make a row's identity. A record carries the knobs it ran with
  (``method_params``, ``specbench.records``); their defaults are read from one place, the method's
  own ``conf/method/<name>.yaml`` (``method_defaults``). Every knob whose value differs from that
  default becomes a variant tag of the method key (``gammatune[eta=0.5]``) and of its label
  (``GammaTune (η = 0.5)``); a knob at its default tags nothing, so a sweep at the defaults reads
  as before. Two legacy spellings are kept: ``transient: false`` (where the default is true) reads
  ``carryover``, and ``expand_on: X`` reads ``expand=X``. A method without a YAML file (an older
  name, a policy run by its registry name) has no known defaults: only those two legacy tags apply.
  The cross-vocabulary algorithm's knobs (``conf/hetero/<name>.yaml``: ``lookbehind``, SLRS's
  bounds, ...) tag the speculative rows that ran one (``hetero_params``), by the same rule.
* **scenario settings** change *what is measured* (the workload or the sampling law), so every
  artefact that compares rows is made once per value (``scenario_keys``): task, temperature, the
  sampling processors in force (``top_k`` / ``top_p`` / ``typical_p``; they only act when the
  temperature is above 0, so at temperature 0 they are read as off), the prompt format and
  ``max_new_tokens``. The cross-vocabulary rule that ran (``hetero``) is part of the row itself
  (the heterogeneous tables' rows, ``analysis.hetero.rule_method``; GammaTune's artefacts use
  one-vocabulary records only).

Imports ``specbench.paths`` (where ``conf/`` is) and PyYAML.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from specbench.paths import CONF_DIR

NOT_KNOBS = ("name", "runner", "policy")
ENGINE_KEYS = ("fast_linear", "verify_buckets", "fused_prefill")  # ``analysis.frame.engine_tag``'s items
KNOB_SYMBOLS = {"eta": "η", "delta": "δ", "gamma_min": "γ_min", "gamma_max": "γ_max", "threshold": "τ",
                "lookbehind": "look-behind"}
LEGACY_LABELS = {"carryover": "carry-over", "expand=drafted": "expand on A = d", "expand=gamma": "expand on A = γ",
                 "batch_gamma=shared": "shared γ"}
PROCESSORS = ("top_k", "top_p", "typical_p")
#: the batch size is a scenario (AR at B is the baseline of every method at B); a shared γ is a variant of the
#: method (``analysis.frame``: tag ``batch_gamma=shared``), so an AR job at B stays in its methods' scenario
SCENARIO_KEYS = ("task", "temperature", *PROCESSORS, "prompt_format", "max_new_tokens", "batch_size")


@cache
def _yaml_knobs(folder: str, name: str) -> tuple[tuple[str, Any], ...] | None:
    import yaml

    path = Path(folder) / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        return None
    node = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(node, Mapping):
        return None
    return tuple((str(k), v) for k, v in node.items() if k not in NOT_KNOBS)


def method_defaults(name: str, conf_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The knobs of ``conf/method/<name>.yaml`` (``name``/``runner``/``policy`` left out), in the
    file's order; None when there is no such file."""
    knobs = _yaml_knobs(str(Path(conf_dir or CONF_DIR) / "method"), name)
    return None if knobs is None else dict(knobs)


def hetero_defaults(name: str, conf_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The knobs of ``conf/hetero/<name>.yaml`` (``name`` left out); None when there is no such file."""
    knobs = _yaml_knobs(str(Path(conf_dir or CONF_DIR) / "hetero"), name)
    return None if knobs is None else dict(knobs)


def fmt_value(value: Any) -> str:
    """A knob's value as a tag can hold it (no ``,``, ``[`` or ``]``): ``0.5``, ``true``, lists
    joined by ``/``, a path by its file name."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "/".join(fmt_value(v) for v in value)
    if isinstance(value, Mapping):
        return "/".join(f"{k}:{fmt_value(v)}" for k, v in sorted(value.items()))
    text = str(value)
    if "/" in text or "\\" in text:
        text = Path(text).name
    return text.replace(",", ";").replace("[", "(").replace("]", ")")


def knob_tag(key: str, value: Any, default: Any) -> str:
    """The tag of a knob that differs from its default (module docstring)."""
    if key == "transient" and value is False and default is not False:
        return "carryover"
    if key == "expand_on":
        return f"expand={fmt_value(value)}"
    return f"{key}={fmt_value(value)}"


def differing_knobs(params: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """``(key, value, default)`` of every knob of ``params`` that is not at its default, in the
    defaults' order, then any knob the defaults do not know (alphabetically). With no defaults
    (``None``), only the two legacy tags' knobs: ``transient: false`` and ``expand_on: drafted``."""
    if defaults is None:
        legacy = [("transient", False, True), ("expand_on", "drafted", "gamma")]
        return [(k, v, d) for k, v, d in legacy if k in params and params[k] == v]
    known = [(k, params[k], d) for k, d in defaults.items() if k in params and not _same(params[k], d)]
    extra = [(k, params[k], None) for k in sorted(params) if k not in defaults and k not in NOT_KNOBS]
    return known + extra


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default or (isinstance(value, bool) and isinstance(default, bool) and value == default)
    if isinstance(value, int | float) and isinstance(default, int | float):
        return math.isclose(float(value), float(default), rel_tol=0, abs_tol=1e-12)
    if isinstance(value, list | tuple) and isinstance(default, list | tuple):
        return len(value) == len(default) and all(_same(a, b) for a, b in zip(value, default, strict=True))
    return value == default


def method_tags(method: str, params: Mapping[str, Any] | None, hetero: str | None = None,
                hetero_params: Mapping[str, Any] | None = None) -> list[str]:
    """The variant tags of a record (module docstring): its method's knobs off their defaults, then
    (for a record that ran a cross-vocabulary algorithm) the algorithm's knobs off theirs."""
    tags = [knob_tag(k, v, d) for k, v, d in differing_knobs(params or {}, method_defaults(method))]
    if tags and "carryover" in tags and "carryover" in method:
        tags.remove("carryover")  # hf_heuristic_carryover's name already says it
    if isinstance(hetero, str) and hetero and isinstance(hetero_params, Mapping):
        name = str(hetero_params.get("name") or hetero)
        knobs = {k: v for k, v in hetero_params.items() if k != "name"}
        defaults = hetero_defaults(name)
        if defaults is not None:
            tags += [knob_tag(k, v, d) for k, v, d in differing_knobs(knobs, defaults)]
    return tags


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

