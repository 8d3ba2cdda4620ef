"""Measured speedups of the cross-vocabulary jobs beside Leviathan et al.'s prediction from the
measured α and the calibrated cost ratio ``c`` (issue 15: "a drafter that pays").

* measured speedup: tokens/s of the group over AR's tokens/s for the same target, task and
  temperature (AR over every temperature when not run at this one), as the heterogeneous table;
* α: ``specbench.records.leviathan_alpha`` over the group's round traces; γ̄ = drafted tokens per
  round; f̄ = the drafter's model forwards per round (``draft_forwards``; SLEM drafts in its own
  tokens, SLRS spends one per node of ψ's tree);
* c = T_target / T_draft of the pair, from a calibration file of
  ``python -m runners.replay calibrate --pair NAME`` (``<dir>/<pair>.json``: ``meta.c``, else the
  one-token forwards at the reference context; read by ``specbench.latency.LatencyModel.c_from_json``,
  the file's one reader); none found: the prediction is left empty;
* predicted: ``specbench.records.leviathan_speedup(α, γ̄, c, f̄)``. It leaves out what the loop
  spends besides forwards (text sync and re-tokenization on these pairs, verification) and the extra
  cost of verifying γ + 1 tokens: measured / predicted shows how much that is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.metrics import POOLINGS, check_pooling, fmt_num, throughput, throughput_by
from analysis.render import Table
from specbench.latency import LatencyModel
from specbench.records import leviathan_alpha, leviathan_speedup

KEYS = ["pair", "draft", "target", "task", "temperature", "hetero", "method", "gamma_init"]


def calibration_c(obj: dict[str, Any]) -> float | None:
    """``c = T_target / T_draft`` (the GammaTune paper's eq. 1) of a calibration file's contents
    (``specbench.latency.LatencyModel.to_json``), read by ``specbench.latency.LatencyModel.c_from_json``:
    ``meta.c`` (a paper cost model), else the one-token forwards at the reference context; ``inf`` for a
    drafter without a model (prompt lookup: its measured forward is 0 ms); None when the file has no
    target step; ``ValueError`` on another ``latency_version``. The one definition of ``c`` in analysis
    (``analysis.leaderboard`` uses it too)."""
    return LatencyModel.c_from_json(obj)


def load_calibrations(folder: str | Path | None) -> dict[str, float]:
    """``{pair: c}`` from the calibration files (``*.json`` with a ``latency_version``) in ``folder``."""
    out: dict[str, float] = {}
    if folder is None or not Path(folder).is_dir():
        return out
    for path in sorted(Path(folder).glob("*.json")):
        try:
            obj = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(obj, dict) or "latency_version" not in obj:
            continue
        try:
            c = calibration_c(obj)
        except ValueError:  # another latency_version: not a file this code can read
            continue
        if c is not None:
            out[str((obj.get("meta") or {}).get("pair") or path.stem)] = c
    return out


def prediction_table(df: pd.DataFrame, calibrations: dict[str, float], pooling: str = "pooled") -> Table | None:
    """One row per cross-vocabulary job group (``KEYS``) with an AR baseline (module docstring)."""
    check_pooling(pooling)
    spec = df[df["hetero"].notna() & (df["method"] != "ar")]
    ar = df[df["method"] == "ar"]
    if spec.empty or ar.empty:
        return None
    exact = {(r["target"], r["task"], r["temperature"]): r["tokens_per_s"]
             for r in throughput_by(ar, ["target", "task", "temperature"], pooling).to_dict("records")}
    loose = {(r["target"], r["task"]): r["tokens_per_s"] for r in throughput_by(ar, ["target", "task"], pooling).to_dict("records")}
    rows = []
    for values, group in spec.groupby(KEYS, dropna=False, sort=True):
        row = dict(zip(KEYS, values, strict=True))
        base = exact.get((row["target"], row["task"], row["temperature"]), loose.get((row["target"], row["task"])))
        if not base:
            continue
        rounds = float(group["rounds"].sum())
        alpha = leviathan_alpha([a for t in group["accepted_trace"] for a in t], [d for t in group["drafted_trace"] for d in t])
        gamma = float(group["drafted"].sum()) / rounds if rounds else math.nan
        forwards = group["draft_forwards"].dropna()
        f = float(forwards.sum()) / rounds if rounds and len(forwards) == len(group) else gamma
        c = calibrations.get(row["pair"])
        measured = throughput(group, pooling) / base
        predicted = leviathan_speedup(alpha, gamma, c, f) if (alpha is not None and c and rounds) else math.nan
        fallback = group["fallback_rounds"].dropna()
        row.update(tokens_per_s=throughput(group, pooling), ar_tokens_per_s=base, speedup=measured,
                   acceptance_rate=float(group["accepted"].sum()) / float(group["drafted"].sum())
                   if group["drafted"].sum() else math.nan,
                   alpha=alpha if alpha is not None else math.nan, gamma_per_round=gamma, forwards_per_round=f,
                   c=c if c else math.nan, predicted_speedup=predicted,
                   measured_over_predicted=measured / predicted if predicted and math.isfinite(predicted) else math.nan,
                   fallback_rounds=float(fallback.sum()) if len(fallback) else math.nan, n_records=len(group))
        rows.append(row)
    if not rows:
        return None
    data = pd.DataFrame(rows)
    display = pd.DataFrame({
        "Pair": data["pair"], "Dataset": data["task"], "T": data["temperature"].map(lambda v: fmt_num(v, 1)),
        "Rule": data["hetero"], "Method": data["method"], "γ": data["gamma_init"].map(lambda v: fmt_num(v, 0)),
        "Tok/s": data["tokens_per_s"].map(lambda v: fmt_num(v, 1)),
        "Speedup": data["speedup"].map(lambda v: fmt_num(v, 2) + "×"),
        "acceptance": data["acceptance_rate"].map(lambda v: fmt_num(v, 3)),
        "α": data["alpha"].map(lambda v: fmt_num(v, 3)), "γ̄": data["gamma_per_round"].map(lambda v: fmt_num(v, 2)),
        "forwards/round": data["forwards_per_round"].map(lambda v: fmt_num(v, 2)),
        "c": data["c"].map(lambda v: fmt_num(v, 2)),
        "Leviathan": data["predicted_speedup"].map(lambda v: fmt_num(v, 2) + "×" if math.isfinite(v) else ""),
        "measured/predicted": data["measured_over_predicted"].map(lambda v: fmt_num(v, 2) if math.isfinite(v) else ""),
        "fallback rounds": data["fallback_rounds"].map(lambda v: fmt_num(v, 0) if math.isfinite(v) else ""),
        "n": data["n_records"],
    })
    caption = (
        "Cross-vocabulary speedups over AR beside Leviathan et al.'s prediction (1 - α^(γ̄+1)) / ((1 - α)(f̄/c + 1)). "
        "Tok/s = " + POOLINGS[pooling] + "; acceptance = accepted / drafted; α = accepted / (accepted + rounds "
        "ending in a rejection); γ̄ = drafted per round; f̄ = draft forwards per round; c = T_target / T_draft "
        "from the pair's calibration (python -m runners.replay calibrate). The prediction leaves out the loop's "
        "own work (text sync, re-tokenization, verification cost beyond one token)."
    )
    return Table("hetero_prediction", caption, display, data)
