"""GammaTune Table 2 across a policy's knobs, from replayed rows: how η and δ move the cells and
their "± std across initial γ".

Input: the rows of ``python -m runners.replay grid`` (``replay.jsonl``, read by
``analysis.policy_lab.load_replay``) whose methods are named as the replay names them,
``NAME`` (``conf/method/NAME.yaml``) or ``NAME:key=value,...`` (those knobs overridden). Each row
is a record (``runners.replay.grid.result_row``): its own ``method_key`` (the identity a real run of those knobs
gets, ``specbench.config.method.method_key``: ``gammatune[eta=0.5]``) and its own ``method_params`` (every knob it
ran with, the YAML's as they were that day and the label's overrides), and Table 2's cells are computed by the
very function that computes the measured Table 2 (``analysis.gammatune.table2.speedup_table``: per pair, throughput
of each initial γ pooled over the prompt turns ÷ SpecDecode's throughput averaged over its initial γ; mean ± sample
std, ddof = 1, across initial γ). Every throughput here is *predicted* by the replay's latency model: no timing, so
the table moves only with the policy's rounds.

``knob_sweep_table`` lays the cells out with one row per combination of the swept knobs, each read from the rows'
own ``method_params`` (never from today's ``conf/method``: a default changed after the rows were written relabels
none of them; only a hand-made row that states none is read as today's replay would write it), one column per
pair × method, and the Average of the pairs (mean of the pair means ± sqrt of the mean of the pair variances, as
Table 2).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from analysis.artefacts import REPLAY, artefact
from analysis.gammatune.table2 import _average, speedup_table
from analysis.metrics import STD_NOTE, fmt_mean_std, method_labels
from analysis.policy_lab import REFERENCES
from analysis.render import Table
from analysis.settings import KNOB_SYMBOLS
from specbench.config.method import method_defaults

SWEPT = ("gammatune", "gammatune_plus")


def parse_label(label: str) -> tuple[str, dict[str, Any]]:
    """``gammatune:eta=0.5,delta=1`` -> (``gammatune``, ``{"eta": 0.5, "delta": 1}``) (the replay's
    ``runners.replay.grid.load_method`` spelling; values read as YAML)."""
    name, _, rest = str(label).partition(":")
    params = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        params[key.strip()] = yaml.safe_load(value)
    return name, params


def replay_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Replay rows (policies only: no oracle or best-fixed-γ rows) as a records frame
    (``analysis.frame.rows_to_frame``), each method keyed by its own ``method_key`` and carrying its own
    ``method_params`` (a hand-made row without them: what today's replay would write, the YAML's knobs and the
    label's overrides)."""
    from analysis.frame import rows_to_frame

    if rows is None or rows.empty or "method" not in rows:
        return rows_to_frame([])
    kept = rows[~rows["method"].isin(REFERENCES) & rows["wall_ms"].notna()]
    records = []
    for row in kept.to_dict("records"):
        name, overrides = parse_label(row["method"])
        own = row.get("method_params")
        params = dict(own) if isinstance(own, Mapping) else {**(method_defaults(name) or {}), **overrides}
        records.append({**row, "method": name, "method_params": params,
                        "turn": row.get("turn"), "temperature": row.get("temperature", 0.0)})
    return rows_to_frame(records)


def knobs_by_key(frame: pd.DataFrame, knobs: Sequence[str]) -> dict[str, tuple[Any, ...] | None]:
    """Each method key's values of ``knobs``, read from its rows' ``method_params`` (``replay_frame``; None for a knob
    a row does not state); None for a key whose rows disagree on them (two runs under one key: no cell of this
    sweep)."""
    seen: dict[str, set[tuple]] = {}
    for key, params in zip(frame["method"], frame["method_params"], strict=True):
        params = params if isinstance(params, Mapping) else {}
        seen.setdefault(key, set()).add(tuple(_hashable(params.get(k)) for k in knobs))
    return {key: next(iter(values)) if len(values) == 1 else None for key, values in seen.items()}


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _knobs_of(method_key: str, own: tuple[Any, ...] | None, knobs: Sequence[str]) -> tuple[Any, ...] | None:
    """The values of ``knobs`` of a method key (``own``: read from its rows, ``knobs_by_key``); None when another
    knob is off its default (its tags) or its rows disagree: not a cell of this sweep."""
    _, _, tags = method_key.partition("[")
    other = [t for t in (tags.rstrip("]").split(",") if tags else []) if t.split("=", 1)[0] not in knobs]
    return None if other else own


def knob_sweep_table(
    frame: pd.DataFrame,
    methods: Sequence[str] = SWEPT,
    knobs: Sequence[str] = ("eta", "delta"),
    pooling: str = "pooled",
    baseline: str = "specdecode",
    note: str = "",
) -> Table | None:
    """The sweep's Table 2 (module docstring); None when the frame holds no baseline or no swept
    method."""
    if frame.empty or not (frame["method"] == baseline).any():
        return None
    table = speedup_table(frame, pooling, baseline, None)  # its CIs are not shown
    if table is None:
        return None
    cells = table.data[(table.data["source"] == "measured") & (table.data["pair"] != "average")]
    own = knobs_by_key(frame, knobs)
    long = []
    for rec in cells.to_dict("records"):
        base = rec["method"].partition("[")[0]
        if base not in methods:
            continue
        values = _knobs_of(rec["method"], own.get(rec["method"]), knobs)
        if values is None:
            continue
        long.append({**dict(zip(knobs, values, strict=True)), "method": base, "method_key": rec["method"],
                     "pair": rec["pair"], "mean": rec["mean"], "std": rec["std"], "n_gamma": rec["n_gamma"],
                     "gammas": rec["gammas"]})
    if not long:
        return None
    data = pd.DataFrame(long)
    pairs = sorted(data["pair"].unique())
    averages = []
    for key, group in data.groupby([*knobs, "method"], sort=False, dropna=False):
        mean, std = _average(group)
        averages.append({**dict(zip([*knobs, "method"], key, strict=True)), "pair": "average", "mean": mean,
                         "std": std, "n_gamma": pd.NA, "gammas": ""})
    data = pd.concat([data, pd.DataFrame(averages)], ignore_index=True)
    combos = sorted({tuple(r) for r in data[list(knobs)].itertuples(index=False)},
                    key=lambda t: tuple((v is None, v if v is not None else 0) for v in t))
    display_rows = []
    label = method_labels(frame)
    for combo in combos:
        row = {KNOB_SYMBOLS.get(k, k): _fmt_knob(v) for k, v in zip(knobs, combo, strict=True)}
        for pair, method in itertools.product([*pairs, "average"], methods):
            hit = data[(data["pair"] == pair) & (data["method"] == method)
                       & _matches(data, knobs, combo)]
            column = f"{'Average' if pair == 'average' else pair} · {label(method)}"
            row[column] = fmt_mean_std(hit["mean"].iloc[0], hit["std"].iloc[0]) if len(hit) else ""
        display_rows.append(row)
    defaults = own.get(methods[0]) or (None,) * len(knobs)  # what the untagged rows ran with: that day's defaults
    default_combo = ", ".join(f"{KNOB_SYMBOLS.get(k, k)} = {_fmt_knob(v)}" for k, v in zip(knobs, defaults,
                                                                                         strict=True))
    caption = (
        f"GammaTune Table 2 across {', '.join(KNOB_SYMBOLS.get(k, k) for k in knobs)}, replayed: speedup over "
        f"{label(baseline)} per pair, the throughput of each initial γ divided by {label(baseline)}'s "
        f"averaged over its initial γ; cell = mean ± {STD_NOTE} (the paper's ± column). Average = mean of the pair "
        "means ± sqrt(mean of the pair variances). Throughput = predicted tokens/s pooled over the prompt turns "
        "(runners.replay: the policy's rounds replayed on greedy traces, each round charged by a calibrated "
        f"latency table; no timing). Defaults (the recipes' settings): {default_combo}. {note}".rstrip()
    )
    return Table("gammatune_table2_knob_sweep", caption, pd.DataFrame(display_rows), data)


def _fmt_knob(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


def _matches(data: pd.DataFrame, knobs: Sequence[str], combo: tuple) -> pd.Series:
    mask = pd.Series(True, index=data.index)
    for k, v in zip(knobs, combo, strict=True):
        mask &= data[k].map(lambda x, v=v: _equal(x, v))
    return mask


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), abs_tol=1e-12)
    return a == b


@artefact("tables/gammatune_table2_knob_sweep", "GammaTune Table 2 across η and δ (replay)", scope=REPLAY,
          needs=("replay",), about="GammaTune Table 2 across a policy's knobs (η, δ), from replayed rows")
def sweep_from_replay(rows: pd.DataFrame, knobs: Sequence[str] = ("eta", "delta"),
                      meta: Mapping[str, Any] | None = None) -> Table | None:
    """``knob_sweep_table`` of replay rows, or None when they sweep none of ``knobs`` of GammaTune."""
    if rows is None or rows.empty or "method" not in rows:
        return None
    swept = {k for m in rows["method"].unique() for k in parse_label(m)[1]}
    if not swept & set(knobs):
        return None
    if meta is None and "replay_file" in rows:
        meta = {}
        for file in sorted(set(rows["replay_file"].dropna())):
            path = Path(file).parent / "meta.json"
            try:
                found = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            meta.setdefault("latency", {}).update(found.get("latency") or {})
    pairs = sorted((meta or {}).get("latency") or {})
    note = (f"Each pair's rounds are charged by its own calibrated latency table (the replay's meta.json: "
            f"{', '.join(pairs)}).") if pairs else ""
    return knob_sweep_table(replay_frame(rows), knobs=knobs, note=note)
