"""A comparison table's uncertainty, weighed once: the one pipeline the comparison tables run
(``analysis.gammatune.table2``, ``analysis.gammatune.throughput``, ``analysis.hetero``), so a table is its layout.

Typed cells in: ``{key: Estimate}`` (``analysis.uncertainty``), each key a tuple whose first item is the **column**
its cell is ranked within (a pair, Table 2's Average, a target × dataset × temperature) and whose rest says which row
(a method; a method, a scope and an initial γ). Out, per cell, a ``Weighed``: the estimate, its 95 % interval, its
rank in its column and whether it is resolved from its neighbours there under the column's A/A band
(``analysis.noise_floor.aa_bands``; ``analysis.uncertainty.resolve``), the method whose work it did (such a cell is shown,
never ranked: ``analysis.noise_floor.same_work``), and the modeled value of the same statistic (``analysis.modeled``) with
whether it lies inside the interval. ``modeled_data`` makes the modeled values: the same table of the modeled records.

How to read all this is written once, in ``docs/pages/analysis.md`` ("Reading the tables"): a caption names that
section (``METHOD_LINK``) and says only what is specific to its table; ``notes`` writes the sentences a comparison
table's caption shares (the intervals' clusters, the A/A bands, same work, the modeled count).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from analysis.modeled import OUTSIDE_MARK, agreement, inside
from analysis.noise_floor import AA_FLAG, SAME_WORK_MARK, AABand
from analysis.render import Table
from analysis.uncertainty import UNRESOLVED_MARK, Estimate, Jackknife, Ranked, mark, resolve

#: where the tables' method is written (a repository path and its section, as captions name files)
METHOD_LINK = "docs/pages/analysis.md#reading-the-tables"

Key = tuple  # (column, *row): a cell of a comparison table


@dataclass(frozen=True)
class Weighed:
    """One cell after the pipeline (module docstring)."""

    estimate: Estimate
    interval: tuple[float, float]
    ranked: Ranked | None = None
    gate: AABand | None = None  # the A/A gate of the cell's column, None without a twin
    same_work_as: str | None = None
    modeled: float = math.nan  # the same statistic of the modeled records; NaN when not modeled

    @property
    def rank(self) -> int | None:
        return self.ranked.rank if self.ranked else None

    @property
    def resolved(self) -> bool | None:
        return self.ranked.resolved if self.ranked else None

    @property
    def mark(self) -> str:
        """``≈`` when the cell is ranked and not resolved from a neighbour (``analysis.uncertainty.mark``)."""
        return mark(self.ranked)

    @property
    def modeled_inside(self) -> bool | None:
        """Whether the modeled value lies in the measured interval (``analysis.modeled.inside``; None: no test)."""
        return inside(self.modeled, self.interval)


def weigh(cells: Mapping[Key, Estimate], gates: Mapping[Hashable, AABand | None] | None = None,
          copies: Mapping[Key, str] | None = None, modeled: Mapping[Key, float] | None = None,
          ranked: Callable[[Key], bool] = lambda key: True) -> dict[Key, Weighed]:
    """Every cell weighed (module docstring): its interval; its rank among the cells of its column (``key[0]``)
    that ``ranked`` admits and that did no other method's work (``copies``: key → the method it copies), gated by
    the column's band (``gates``, by column; none: a band of 0); ``modeled``: key → the modeled value."""
    gates, copies, modeled = gates or {}, copies or {}, modeled or {}
    columns: dict[Hashable, dict[Key, Estimate]] = {}
    for key, estimate in cells.items():
        if ranked(key) and key not in copies:
            columns.setdefault(key[0], {})[key] = estimate
    ranks: dict[Key, Ranked] = {}
    for column, estimates in columns.items():
        gate = gates.get(column)
        ranks.update(resolve(estimates, band=gate.band if gate else 0.0))
    return {key: Weighed(estimate, estimate.interval(), ranks.get(key), gates.get(key[0]), copies.get(key),
                         modeled.get(key, math.nan))
            for key, estimate in cells.items()}


def modeled_data(frame: pd.DataFrame | None, make: Callable[[pd.DataFrame], Table | None]) -> pd.DataFrame | None:
    """``make``'s table of the modeled records (``frame``: ``analysis.modeled.modeled_frame`` of the measured ones):
    its ``data``, the modeled overlay's values; None when no record is modeled or they make no table."""
    table = make(frame) if frame is not None else None
    return table.data if table is not None else None


def bands_note(gates: Mapping[str, AABand | None]) -> str:
    """``A/A band (…): pair ±6.1 %; Average ±3.0 % ≠ 1.`` for the columns with a twin; "" without one."""
    shown = {name: gate for name, gate in gates.items() if gate is not None}
    if not shown:
        return ""
    flagged = f" ({AA_FLAG.strip()}: the twin's interval excludes 1)" if any(g.flagged for g in shown.values()) else ""
    return f"A/A band (noise_floor){flagged}: " + "; ".join(f"{n} {g.text()}" for n, g in shown.items()) + "."


def notes(jackknife: Jackknife, ranking: str, gates: Mapping[str, AABand | None] | None = None,
          same_work: bool = False, modeled: Iterable[Weighed] | None = None) -> str:
    """The sentences a comparison table's caption shares (module docstring): the link to the method, the
    intervals' clusters, how ``ranking`` ranks rows (≈), the columns' A/A bands, the same-work mark and the modeled
    overlay's count (``modeled``: the cells it was tested on; None: no overlay)."""
    design = jackknife.design
    text = (f"[lo, hi]: 95 % paired jackknife CI over prompt turns ({jackknife.n_clusters} clusters, t with {design.df}"
            f" df);{UNRESOLVED_MARK}: not resolved from a neighbour ranked {ranking}")
    parts = [text + f". How to read them: {METHOD_LINK}."]
    if gates and (bands := bands_note(gates)):
        parts.append(bands)
    if same_work:
        parts.append(f"{SAME_WORK_MARK} X: did X's work in every record (not ranked).")
    if modeled is not None:
        count = agreement([w.modeled_inside for w in modeled])
        parts.append(f"'modeled': the same statistic of the modeled walls ({OUTSIDE_MARK.strip()}: outside the "
                     "measured CI)" + (f"; {count}" if count else "") + ".")
    return " ".join(parts)
