"""Acceptance per position of a round, of replayed rows and of real runs' records.

``per_position_table``: the conditional acceptance of position ``j`` of a round,
``Σ accepted_per_pos[j] / Σ compared_per_pos[j]`` (NeMo's per-position acceptance; the counts of
``specbench.records``, written by ``specbench.rounds.Rounds.fields``), pooled over a method's prompts and
initial γ (per pair, task, length and, with several, batch size: ``analysis.policy_lab``'s cells); the
counts are recomputed from ``drafted_trace`` / ``accepted_trace`` when a row lacks them. The policy lab's
references (oracle, best fixed γ) are left out of the replayed table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from analysis.artefacts import REPLAY, artefact
from analysis.metrics import fmt_ratio, is_ar
from analysis.policy_lab import BATCH, GROUP, REFERENCES, several_batch_sizes, with_batch
from analysis.render import Table
from specbench.rounds import per_position

POSITIONS = 8


def _pp_lists(row: Mapping) -> tuple[list[int], list[int]]:
    comp, acc = row.get("compared_per_pos"), row.get("accepted_per_pos")
    if isinstance(comp, list) and isinstance(acc, list) and (comp or not row.get("drafted_trace")):
        return comp, acc
    pp = per_position(list(row.get("drafted_trace") or []), list(row.get("accepted_trace") or []))
    return pp["compared_per_pos"], pp["accepted_per_pos"]


def per_position_frame(df: pd.DataFrame, positions: int = POSITIONS) -> pd.DataFrame:
    rows = []
    several = several_batch_sizes(df)
    if several:  # a shared γ changes the rounds with B: one row per batch size
        df = with_batch(df)
    keys = [k for k in GROUP if k in df] + ([BATCH] if several else []) + ["method"]
    for key, group in df.groupby(keys, dropna=False, sort=False):
        comp, acc = np.zeros(positions), np.zeros(positions)
        for _, r in group.iterrows():
            c, a = _pp_lists(r)
            for j in range(min(positions, len(c))):
                comp[j] += c[j]
                acc[j] += a[j] if j < len(a) else 0
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))),
                     **{f"alpha_{j + 1}": (acc[j] / comp[j] if comp[j] else math.nan) for j in range(positions)},
                     **{f"compared_{j + 1}": int(comp[j]) for j in range(positions)}})
    return pd.DataFrame(rows)


@artefact("tables/acceptance_per_position", "acceptance per position (replay)", scope=REPLAY, needs=("replay",),
          about="conditional acceptance of each position of a round (NeMo's), per replayed method")
def per_position_table(df: pd.DataFrame, positions: int = POSITIONS, name: str = "acceptance_per_position",
                       methods: Iterable[str] | None = None) -> Table | None:
    """Conditional acceptance per position in the round (module docstring)."""
    if df is None or df.empty or "method" not in df:
        return None
    df = df[~df["method"].isin(REFERENCES)] if methods is None else df[df["method"].isin(list(methods))]
    if df.empty:
        return None
    data = per_position_frame(df, positions)
    shown = [c for c in ("pair", "task", BATCH, "method") if c in data]
    display = data[shown].copy()
    for j in range(1, positions + 1):
        display[f"α{j}"] = [fmt_ratio(v, digits=2) for v in data[f"alpha_{j}"]]
    caption = ("Conditional acceptance of position j of a round: Σ accepted_per_pos[j] / Σ compared_per_pos[j] "
               "(a position is compared when it was drafted and every earlier one accepted; NeMo's per-position "
               "acceptance), pooled over prompts and initial γ.")
    return Table(name, caption, display, data)


@artefact("tables/acceptance_per_position_real", "acceptance per position (real runs)", scope=REPLAY,
          needs=("records",), when=lambda inputs: inputs.records is not None and not inputs.records.empty,
          about="conditional acceptance of each position of a round, per method of the real (speculative) runs")
def per_position_of_runs(records: pd.DataFrame) -> Table | None:
    """``per_position_table`` of the records of speculative runs (AR left out), named ``..._real``."""
    return per_position_table(records[~is_ar(records)], name="acceptance_per_position_real")
