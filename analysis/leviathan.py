"""Leviathan et al.'s (2023, Sec. 3.4, Thm. 3.8) predicted speedup beside the measured one, from the
measured α and the calibrated cost ratio ``c``: for the cross-vocabulary jobs ("a drafter
that pays"; table ``hetero_prediction``) and for every fixed-γ cell of real runs and of the replay
(table ``leviathan_prediction``). One definition of each figure:

* α: ``specbench.records.leviathan_alpha`` (accepted / (accepted + rounds ending in a rejection)),
  over a group's round traces (cross-vocabulary) or over a fixed-γ cell's rounds that drafted the
  full γ (``leviathan_frame``);
* c = T_target / T_draft of the pair, as the GammaTune paper's eq. (1) (the inverse of Leviathan et
  al.'s own ``c``), from a calibration file of ``python -m runners.replay calibrate --pair NAME``
  (``<dir>/<pair>.json``: ``meta.c``, else the one-token forwards at the reference context; read by
  ``specbench.latency.LatencyModel.c_from_json``, the file's one reader; ``calibration_c``); none
  found: the prediction is left empty;
* predicted: ``specbench.records.leviathan_speedup(α, γ, c, f)`` = ``(1 − α^(γ+1)) / ((1 − α)(f/c + 1))``,
  f = γ for a fixed-γ cell, the drafter's model forwards per round (``draft_forwards``; SLEM drafts in
  its own tokens, SLRS spends one per node of ψ's tree) for a cross-vocabulary group, with γ̄ = drafted
  tokens per round. It leaves out what the loop spends besides forwards (text sync and
  re-tokenization on cross-vocabulary pairs, verification) and the extra cost of verifying γ + 1
  tokens: measured / predicted shows how much that is;
* measured: cross-vocabulary, tokens/s of the group over AR's tokens/s for the same target, task
  and temperature (AR over every temperature when not run at this one), as the heterogeneous
  table; fixed γ, the pooled speedup over the target alone (real records: ``ar_wall_ms`` / wall;
  replay rows: the latency model's prediction).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.artefacts import REPLAY, SETTING, artefact
from analysis.metrics import (
    POOLINGS,
    check_pooling,
    fmt_mean_std,
    fmt_num,
    fmt_ratio,
    throughput,
    throughput_by,
)
from analysis.render import Table
from specbench.latency import LatencyModel
from specbench.records import leviathan_alpha, leviathan_speedup
from specbench.timed_on import TimedOn

KEYS = ["pair", "draft", "target", "task", "temperature", "hetero", "method", "gamma_init"]


def calibration_c(obj: dict[str, Any]) -> float | None:
    """``c = T_target / T_draft`` (the GammaTune paper's eq. 1) of a calibration file's contents
    (``specbench.latency.LatencyModel.to_json``), read by ``specbench.latency.LatencyModel.c_from_json``:
    ``meta.c`` (a paper cost model), else the one-token forwards at the reference context; ``inf`` for a
    drafter without a model (prompt lookup: its measured forward is 0 ms); None when the file has no
    target step; ``ValueError`` on another ``latency_version``. The one definition of ``c`` in analysis
    (both tables of this module use it)."""
    return LatencyModel.c_from_json(obj)


def load_calibrations(folder: str | Path | None) -> dict[str, float]:
    """``{pair: c}`` from the calibration files (``*.json`` with a ``latency_version``) in ``folder``; each also as
    ``{pair}@{device}`` (the device it was timed on, ``specbench.timed_on``), the name ``analysis.frame`` gives a
    pair whose records ran on several device kinds, so such a pair is predicted only by a file timed on its own."""
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
            meta = obj.get("meta") if isinstance(obj.get("meta"), dict) else {}
            pair = str(meta.get("pair") or path.stem)
            out[pair] = c
            device = TimedOn.of_meta(meta).device
            if device:
                out[f"{pair}@{device}"] = c
    return out


def load_cost_ratios(root: str | os.PathLike) -> dict[str, float]:
    """``{pair: c}`` from every ``latency/<pair>.json`` at or under ``root`` (each ``latency`` folder read by
    ``load_calibrations``)."""
    out: dict[str, float] = {}
    for folder in sorted({p.parent for p in Path(root).rglob("*.json") if p.parent.name == "latency"}):
        out.update(load_calibrations(folder))
    return out


# ---------------------------------------------------------------------- cross-vocabulary jobs

@artefact("tables/hetero_prediction", "cross-vocabulary prediction table", scope=SETTING,
          needs=("records", "calibrations", "pooling"),
          about="cross-vocabulary speedups over AR beside Leviathan et al.'s prediction from α, γ̄, f̄ and c")
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
        "Leviathan": data["predicted_speedup"].map(fmt_mean_std),
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


# ---------------------------------------------------------------------- fixed γ

def leviathan_frame(df: pd.DataFrame, c_by_pair: Mapping[str, float], method: str = "specdecode") -> pd.DataFrame:
    rows = []
    fixed = df[(df["method"] == method) & df["gamma_init"].notna()]
    keys = [k for k in ("pair", "task", "source") if k in fixed] + ["gamma_init"]
    for key, group in fixed.groupby(keys, dropna=False, sort=True):
        ident = dict(zip(keys, key))
        gamma = int(ident["gamma_init"])
        # the rounds that drafted the full γ (a replay cell keeps only those: runners.replay.grid.cells)
        full = [(d, a) for _, r in group.iterrows()
                for d, a in zip(r.get("drafted_trace") or [], r.get("accepted_trace") or []) if d == gamma]
        alpha = leviathan_alpha([a for _, a in full], [d for d, _ in full]) if full else None
        alpha = math.nan if alpha is None else alpha
        c = c_by_pair.get(str(ident.get("pair")), math.nan)
        wall, ar_wall = group["wall_ms"].sum(), group["ar_wall_ms"].sum() if "ar_wall_ms" in group else math.nan
        measured = ar_wall / wall if wall > 0 and ar_wall and ar_wall > 0 else math.nan
        predicted = leviathan_speedup(alpha, gamma, c) if math.isfinite(alpha) and c > 0 else math.nan
        rows.append({**ident, "gamma": gamma, "alpha": alpha, "c": c, "leviathan_speedup": predicted,
                     "measured_speedup": measured, "rounds_full": len(full),
                     "acceptance_rate": group["accepted"].sum() / group["drafted"].sum() if group["drafted"].sum()
                     else math.nan})
    return pd.DataFrame(rows)


def leviathan_table(df: pd.DataFrame, c_by_pair: Mapping[str, float], name: str = "leviathan_prediction") -> Table | None:
    """Leviathan et al.'s predicted speedup beside every measured fixed-γ speedup (module docstring)."""
    if df is None or df.empty or "method" not in df or not c_by_pair:
        return None
    data = leviathan_frame(df, c_by_pair)
    if data.empty:
        return None
    display = pd.DataFrame({
        **{k: data[k] for k in ("pair", "task", "source") if k in data},
        "γ": data["gamma"], "α (measured)": [fmt_ratio(v) for v in data["alpha"]], "c (measured)": [fmt_ratio(v) for v in data["c"]],
        "speedup, Leviathan et al.": [fmt_ratio(v, digits=2) for v in data["leviathan_speedup"]],
        "speedup, measured": [fmt_ratio(v, digits=2) for v in data["measured_speedup"]],
        "measured ÷ predicted": [fmt_ratio(m / p, digits=2) if p and math.isfinite(p) else ""
                                 for m, p in zip(data["measured_speedup"], data["leviathan_speedup"])],
    })
    caption = ("Leviathan et al. (2023, Thm. 3.8) predict a fixed-γ speedup of (1 − α^(γ+1)) / ((1 − α)(γc + 1)), "
               "written here with the GammaTune paper's c = T_target / T_draft (eq. 1; Leviathan et al.'s c is its "
               "inverse), so (1 − α^(γ+1)) / ((1 − α)(γ/c + 1)); α = accepted / (accepted + rounds ending in a "
               "rejection), c from the pair's calibration (one-token forwards). Measured: pooled speedup over the target alone (source replay: predicted by "
               "the calibrated latency model, which charges a k-token verification its measured cost; source real: "
               "wall clock). The prediction assumes verifying γ+1 tokens costs one target step.")
    return Table(name, caption, display, data)


@artefact("tables/leviathan_prediction", "Leviathan et al. prediction", scope=REPLAY,
          needs=("replay", "records", "cost_ratios"),
          about="Leviathan et al.'s predicted speedup beside every fixed-γ speedup, replayed and measured")
def leviathan_of_runs(replay: pd.DataFrame | None, records: pd.DataFrame | None,
                      cost_ratios: Mapping[str, float]) -> Table | None:
    """``leviathan_table`` of the replay rows and the records together (each row says its ``source``)."""
    frames = [f for f in (replay, records) if f is not None and not f.empty]
    return leviathan_table(pd.concat(frames, ignore_index=True), cost_ratios) if frames else None
