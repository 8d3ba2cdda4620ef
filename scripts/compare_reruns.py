"""Two runs of one recipe, side by side: what issue 40 asks a re-run to show.

    python scripts/compare_reruns.py results/committed/mini_gammatune_table2 results/committed/mini_gammatune_table2_b

Reads each folder's rendered analysis (``analysis/tables/gammatune_table2_speedup.data.csv`` and
``noise_floor.data.csv``; ``python -m analysis FOLDER`` writes them) and prints:

1. **A/A**: per run and column, whether the twin's interval (the Table 2 gate: its ratio to the method it copies,
   mean over γ) excludes 1, how many of the noise floor's per-γ twin intervals do (at 95 %, about 1 in 20 by
   chance), and which family-wise interval does;
2. **reversals**: every ranking step marked resolved in one run (a method resolved from its neighbour, same
   column) that the other run orders the other way;
3. **modeled vs measured, paired** (issue 50, item 4): per run, the cells whose jackknife interval of measured ÷
   modeled (``measured_over_modeled_lo``/``_hi``, over the same turns) excludes 1, and how many sit below 1 (the run
   paid something the per-call costs miss). Beside it the weak test it replaces, the modeled value inside the
   measured 95 % interval (``modeled_inside``), which shares the prompts' spread with the model and can hardly
   fail; the baseline's own cells, a point interval, are no test and are left out of both;
4. **modeled, run against run**: per cell, the two runs' modeled Table 2 means and their difference (tolerance
   ``TOLERANCE`` = 0.03), and the measured ones beside them. The two runs decode the same tokens, so their modeled
   rows differ only by each run's per-call costs: agreement says the costs were stable, not that the model is right;
5. **the A/A ledger**: every A/A interval of these runs and of the earlier ones named by ``--ledger``, counted, with
   how likely chance alone makes that many misses (``binomial_tail``); and per run whether any family-wise interval
   (``analysis.noise_floor``, "family") excludes 1.

Rows that do another row's work (``same_work_as``, e.g. AssistantThreshold on prompt lookup ≡ SpecDecode) are
never ranked, so they take no part in the reversals.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

TOLERANCE = 0.03


def _table(folder: Path, name: str) -> pd.DataFrame:
    path = folder / "analysis" / "tables" / f"{name}.data.csv"
    if not path.is_file():
        raise SystemExit(f"error: {path} is missing (run: python -m analysis {folder})")
    return pd.read_csv(path)


def _measured(folder: Path) -> pd.DataFrame:
    t = _table(folder, "gammatune_table2_speedup")
    return t[t["source"] == "measured"].set_index(["pair", "method"])


def _bool(v: object) -> bool | None:
    if isinstance(v, bool):
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return str(v).strip().lower() == "true"


def aa_lines(name: str, folder: Path) -> list[str]:
    t = _measured(folder)
    gate = t.groupby(level="pair")["aa_excludes_one"].first()
    floor = _table(folder, "noise_floor")
    per_gamma = floor[floor["scope"] == "γ"]
    out = [f"A/A {name}: Table 2 gate, twin interval excludes 1: "
           + ", ".join(f"{p} {'YES' if _bool(v) else 'no'}" for p, v in gate.items())]
    out.append(f"A/A {name}: noise floor per γ: {int(per_gamma['excludes_one'].map(_bool).sum())} of "
               f"{len(per_gamma)} twin intervals exclude 1")
    whole = floor[floor["scope"] != "γ"]
    if "family_excludes_one" in whole:
        missed = [f"{p}: {t} ÷ {o} [{lo:.3f}, {hi:.3f}]" for p, t, o, lo, hi, f in zip(
            whole["pair"], whole["twin"], whole["original"], whole["family_lo"], whole["family_hi"],
            whole["family_excludes_one"].map(_bool), strict=True) if f]
        out.append(f"A/A {name}: family-wise (Bonferroni over its {len(whole)} A/A pairs), an interval excludes 1: "
                   + ("; ".join(missed) if missed else "none"))
    return out


def binomial_tail(k: int, n: int, p: float = 0.05) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p): how often chance alone makes k misses of n 95 % intervals, or more."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def ledger_lines(folders: list[Path]) -> list[str]:
    """Section 5: every A/A interval of every run given, counted: at 95 % each, about one in twenty misses 1 by
    chance; the binomial tail says how surprising the count is (the coverage check across runs)."""
    out = []
    floors = pd.concat([_table(f, "noise_floor").assign(run=f.name) for f in folders], ignore_index=True)
    for scope, label in (("mean over γ", "mean over γ"), ("γ", "per γ")):
        rows = floors[floors["scope"] == scope]
        k, n = int(rows["excludes_one"].map(_bool).sum()), len(rows)
        where = [f"{r} {p} {t}÷{o} {v:.3f} [{lo:.3f}, {hi:.3f}]" for r, p, t, o, v, lo, hi, e in zip(
            rows["run"], rows["pair"], rows["twin"], rows["original"], rows["ratio"], rows["ci_lo"], rows["ci_hi"],
            rows["excludes_one"].map(_bool), strict=True) if e] if scope != "γ" else []
        out.append(f"A/A ledger, {label}, {len(folders)} runs: {k} of {n} intervals exclude 1 ({100 * k / max(n, 1):.1f} %;"
                   f" 95 % intervals miss 5 %: {0.05 * n:.1f} expected; P(≥ {k} by chance) = {binomial_tail(k, n):.2f})"
                   + (f": {'; '.join(where)}" if where else ""))
    return out


def reversals(a: pd.DataFrame, b: pd.DataFrame, name_a: str, name_b: str) -> list[str]:
    out = []
    for pair in sorted(set(a.index.get_level_values("pair"))):
        ra = a.loc[pair].dropna(subset=["rank"])
        if "same_work_as" in ra:
            ra = ra[ra["same_work_as"].isna()]
        ra = ra.sort_values("rank")
        if pair not in b.index.get_level_values("pair"):
            continue
        rb = b.loc[pair]
        methods = list(ra.index)
        for upper, lower in zip(methods, methods[1:]):
            if not (_bool(ra.loc[upper, "resolved"]) or _bool(ra.loc[lower, "resolved"])):
                continue  # the step between them is not resolved in this run
            if upper in rb.index and lower in rb.index and rb.loc[upper, "mean"] < rb.loc[lower, "mean"]:
                out.append(f"reversal: {pair}: {name_a} resolves {upper} > {lower} "
                           f"({ra.loc[upper, 'mean']:.3f} vs {ra.loc[lower, 'mean']:.3f}); {name_b} reads "
                           f"{rb.loc[upper, 'mean']:.3f} vs {rb.loc[lower, 'mean']:.3f}")
    return out


def paired_lines(name: str, t: pd.DataFrame) -> list[str]:
    """Section 3's paired check: the cells with an interval of measured ÷ modeled (the baseline's are a point)."""
    if "measured_over_modeled_lo" not in t:
        return [f"paired {name}: no measured ÷ modeled column (analysis before issue 50)"]
    cells = t[(t.index.get_level_values("pair") != "average")
              & (t["measured_over_modeled_hi"] - t["measured_over_modeled_lo"] > 1e-9)]
    out = cells[(cells["measured_over_modeled_lo"] > 1) | (cells["measured_over_modeled_hi"] < 1)]
    names = [f"{p}/{m} {r:.3f} [{lo:.3f}, {hi:.3f}]" for (p, m), r, lo, hi in zip(
        out.index, out["measured_over_modeled"], out["measured_over_modeled_lo"], out["measured_over_modeled_hi"],
        strict=True)]
    below = int((cells["measured_over_modeled"] < 1).sum())
    return [f"paired {name}: measured ÷ modeled excludes 1 in {len(out)} of {len(cells)} cells"
            + (f" ({', '.join(names)})" if names else "") + f"; below 1 in {below} of {len(cells)}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("--ledger", type=Path, nargs="*", default=[],
                    help="earlier runs of the recipe too: the A/A ledger counts their intervals with these two")
    args = ap.parse_args(argv)
    runs = {"run 1": args.first, "run 2": args.second}
    tables = {name: _measured(folder) for name, folder in runs.items()}
    lines = []
    for name, folder in runs.items():
        lines += aa_lines(name, folder)
    found = reversals(tables["run 1"], tables["run 2"], "run 1", "run 2")
    found += reversals(tables["run 2"], tables["run 1"], "run 2", "run 1")
    lines += found or ["reversals: none (no step resolved in one run is ordered the other way in the other)"]
    for name, t in tables.items():
        lines += paired_lines(name, t)
        if "modeled_inside" not in t:
            lines.append(f"modeled {name}: no modeled row (a sweep without per-call costs)")
            continue
        flags = [f for f in t["modeled_inside"].map(_bool) if f is not None]
        outside = [f"{p}/{m}" for (p, m), v in t["modeled_inside"].map(_bool).items() if v is False]
        lines.append(f"modeled {name} (weak test): inside the measured 95 % CI in {sum(flags)} of {len(flags)} cells "
                     f"({100 * sum(flags) / max(1, len(flags)):.0f} %)" + (f"; outside: {', '.join(outside)}" if outside else ""))
    a, b = tables["run 1"], tables["run 2"]
    if "modeled_mean" in a and "modeled_mean" in b:
        lines.append("cell | modeled run 1 | modeled run 2 | Δ | measured run 1 | measured run 2 | Δ")
        worst = 0.0
        for key in sorted(set(a.index) & set(b.index)):
            ma, mb = a.loc[key, "modeled_mean"], b.loc[key, "modeled_mean"]
            d = mb - ma
            worst = max(worst, abs(d)) if not math.isnan(d) else worst
            lines.append(f"{key[0]}/{key[1]} | {ma:.3f} | {mb:.3f} | {d:+.3f}{' **' if abs(d) > TOLERANCE else ''} | "
                         f"{a.loc[key, 'mean']:.3f} | {b.loc[key, 'mean']:.3f} | {b.loc[key, 'mean'] - a.loc[key, 'mean']:+.3f}")
        lines.append(f"largest |Δ modeled|: {worst:.3f} (tolerance {TOLERANCE})")
    lines += ledger_lines([*args.ledger, args.first, args.second])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
