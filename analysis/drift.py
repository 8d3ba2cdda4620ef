"""How much the host alone moves a number over a sweep: the drift of its speed (``host_probe_ms``).

* **probe reference**: the median ``host_probe_ms`` over the sweep's records of the same target
  (the probe is one forward of the target on a fixed input, ``specbench.records``, so only probes
  of one target compare).
* **cell**: the records of one (job folder, pair, method, initial γ, task, temperature): a job of
  a Hydra sweep, a method × γ cell of an interleaved one. Its probe is the median of its records'.
* **drift range** (``drift_summary``): min / median / max over cells of the cell's probe, and
  max / min, per target.
* **drifted cell**: ``|cell probe / probe reference − 1| > threshold`` (``DRIFT_THRESHOLD``,
  ``--drift-threshold``): that cell ran while the host was that much faster or slower than usual.
* **drift-normalised throughput** (``drift_normalised``; a named alternative, never the default):
  per record, ``tokens_per_s × host_probe_ms / probe reference`` (and ``wall_ms × probe reference /
  host_probe_ms``, so every pooling follows): the throughput had the host run at its median speed.
  Records without a probe are kept as measured; other timings (TTFT, TPOT, the AR reference) are not
  rescaled.

The noise floor of an A/A pair (a method against its twin, or against a method whose work it did) is
``analysis.noise_floor``.
"""


from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.artefacts import SWEEP, artefact
from analysis.metrics import fmt_num, method_labels
from analysis.render import Table

DRIFT_THRESHOLD = 0.10
CELL_KEYS = ["target", "task", "temperature", "pair", "method", "gamma_init", "job_dir"]


def _probes(df: pd.DataFrame) -> pd.Series:
    column = df["host_probe_ms"] if "host_probe_ms" in df.columns else pd.Series(np.nan, index=df.index)
    return column.where(column > 0)  # the typed frame's numbers (analysis.frame)


def has_probe(df: pd.DataFrame) -> bool:
    return bool(_probes(df).notna().any())


def probe_reference(df: pd.DataFrame) -> pd.Series:
    """Per record, its target's probe reference (module docstring); NaN without a probe of that target."""
    probes = _probes(df)
    targets = df["target"].fillna("") if "target" in df.columns else pd.Series("", index=df.index)
    return probes.groupby(targets).transform("median")


def probe_cells(df: pd.DataFrame, threshold: float = DRIFT_THRESHOLD) -> pd.DataFrame:
    """One row per cell with a probe (module docstring): its keys, ``probe_ms`` (median),
    ``reference_ms``, ``share`` (probe / reference − 1), ``drifted`` and ``n_records``."""
    probed = df.assign(_probe=_probes(df), _reference=probe_reference(df))
    probed = probed[probed["_probe"].notna()]
    keys = [k for k in CELL_KEYS if k in probed.columns]
    if probed.empty:
        return pd.DataFrame(columns=[*keys, "probe_ms", "reference_ms", "share", "drifted", "n_records"])
    cells = (probed.groupby(keys, dropna=False, sort=True)
             .agg(probe_ms=("_probe", "median"), reference_ms=("_reference", "first"), n_records=("_probe", "size"))
             .reset_index())
    cells["share"] = cells["probe_ms"] / cells["reference_ms"] - 1.0
    cells["drifted"] = cells["share"].abs() > threshold
    return cells


def _cell_name(row: pd.Series, label: Callable[[str], str]) -> str:
    gamma = row.get("gamma_init")
    where = f"{row.get('pair')}/{label(row.get('method'))}"
    return where + (f" γ={float(gamma):g}" if pd.notna(gamma) else "")


def drift_summary(df: pd.DataFrame, threshold: float = DRIFT_THRESHOLD) -> list[str]:
    """Lines for the terminal: the drift range per target and the drifted cells (module docstring),
    or one line saying no record has a probe."""
    if not has_probe(df):
        return ["drift: no record has host_probe_ms (records before schema 4, or the probe was off): "
                "host drift not assessed"]
    cells = probe_cells(df, threshold)
    lines = []
    for target, rows in cells.groupby(cells["target"].fillna("—"), sort=True):
        lo, mid, hi = rows["probe_ms"].min(), rows["probe_ms"].median(), rows["probe_ms"].max()
        lines.append(f"drift ({target}): host_probe_ms per cell (job × method × γ, median of its records): "
                     f"min {lo:.2f}, median {mid:.2f}, max {hi:.2f} ms; max/min {hi / lo:.2f} "
                     f"({len(rows)} cells, reference = median of {int(rows['n_records'].sum())} records "
                     f"{rows['reference_ms'].iloc[0]:.2f} ms)")
    drifted = cells[cells["drifted"]]
    if drifted.empty:
        lines.append(f"drift: no cell's probe differs from its target's median by more than {threshold:.0%}")
    else:
        label = method_labels(df)
        named = ", ".join(f"{_cell_name(r, label)} ({r['share']:+.0%})" for _, r in drifted.iterrows())
        lines.append(f"drift: {len(drifted)} of {len(cells)} cells differ from their target's median probe by more "
                     f"than {threshold:.0%} (table drift): {named}")
    without = int(_probes(df).isna().sum())
    if without:
        lines.append(f"drift: {without} of {len(df)} records have no probe (not in these numbers)")
    return lines


@artefact("tables/drift", "drift table", scope=SWEEP, needs=("records", "drift_threshold"),
          when=lambda inputs: has_probe(inputs.records),
          about="the host's drift over the sweep: each cell's median host_probe_ms against its target's median")
def drift_table(df: pd.DataFrame, threshold: float = DRIFT_THRESHOLD) -> Table | None:
    """Every cell's probe against its target's reference (``probe_cells``); None without probes."""
    cells = probe_cells(df, threshold)
    if cells.empty:
        return None
    display = pd.DataFrame({
        "Target": cells["target"], "Pair": cells["pair"], "Method": cells["method"].map(method_labels(df)),
        "γ": cells["gamma_init"].map(lambda v: fmt_num(v, 0)), "Job": cells.get("job_dir", ""),
        "Probe (ms)": cells["probe_ms"].map(lambda v: fmt_num(v, 2)),
        "Target's median (ms)": cells["reference_ms"].map(lambda v: fmt_num(v, 2)),
        "Δ": cells["share"].map(lambda v: f"{v:+.1%}"),
        "Drifted": cells["drifted"].map(lambda v: f"> {threshold:.0%}" if v else ""),
        "n": cells["n_records"],
    })
    caption = (
        "Host drift per cell (job × method × initial γ): Probe = median host_probe_ms of the cell's records (a fixed "
        "forward of the target timed right before each generation: larger = host slower); Target's median = the "
        f"median over the sweep's records of the same target; Δ = probe / median − 1; drifted: |Δ| > {threshold:.0%} "
        "(--drift-threshold). A drifted cell ran while the host was faster or slower than usual: its throughput, and "
        "every comparison with it, carries that. The drift-normalised tables (_drift_normalised) rescale each "
        "record's throughput by its probe."
    )
    return Table("drift", caption, display, cells)


def drift_normalised(df: pd.DataFrame) -> pd.DataFrame | None:
    """The records with drift-normalised throughput (module docstring); None when no record has a probe."""
    if not has_probe(df):
        return None
    factor = (_probes(df) / probe_reference(df)).fillna(1.0)
    return df.assign(tokens_per_s=df["tokens_per_s"] * factor, wall_ms=df["wall_ms"] / factor)


DRIFT_NORMALISED_NOTE = (
    "DRIFT-NORMALISED (an alternative to the measured table of the same name without _drift_normalised): each "
    "record's throughput × its host_probe_ms / the median probe of its target over the sweep (its wall time "
    "÷ the same factor), i.e. as if the host had run at its median speed; records without a probe as measured. "
)
