"""The machinery of the registered claims (``analysis.claims``): a claim is a sentence of a page, verbatim, and a
check over the committed files; ``claim`` registers one, ``problems`` runs them all, ``allowances`` tells
``analysis.docs`` which figures a check stands behind. The claims themselves are written in ``analysis.claims``,
``analysis.claims_engine`` and ``analysis.claims_gpu``, beside the pages they check."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = Path("results") / "committed"

Check = Callable[[Path], "str | None"]


@dataclass(frozen=True)
class Claim:
    """One registered sentence: the page (``doc``, repository-relative), its text (whitespace-insensitive), the
    committed files its check reads (``sources``), the measured-looking fragments it may hold outside a block
    (``figures``) and the check."""

    name: str
    doc: str
    text: str
    sources: tuple[str, ...]
    check: Check
    figures: tuple[str, ...] = ()


CLAIMS: list[Claim] = []


def claim(doc: str, text: str, *sources: str, figures: tuple[str, ...] = ()) -> Callable[[Check], Check]:
    """Register the decorated check as the claim ``text`` of ``doc`` (module docstring)."""

    def register(check: Check) -> Check:
        CLAIMS.append(Claim(check.__name__, doc, text, tuple(sources), check, figures))
        return check

    return register


def _normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def problems(root: Path = ROOT) -> list[str]:
    """One line per claim that does not hold, whose sentence is not (any more) in its page, or whose source is
    missing; empty when every claim stands."""
    found = []
    for c in CLAIMS:
        page = root / c.doc
        if not page.is_file() or _normalised(c.text) not in _normalised(page.read_text(encoding="utf-8")):
            found.append(f"{c.doc}: claim {c.name}: its sentence is not in the page (edit the registration with it): "
                         f"{c.text[:80]}…")
            continue
        missing = [s for s in c.sources if not (root / s).exists()]
        if missing:
            found.append(f"{c.doc}: claim {c.name}: missing {', '.join(missing)}")
            continue
        why = c.check(root)
        if why:
            found.append(f"{c.doc}: claim {c.name} no longer holds: {why}")
    return found


def allowances() -> tuple[tuple[str, str], ...]:
    """The registered claims' figures, as ``analysis.docs`` allowances (fragment, why)."""
    return tuple((f, f"a registered claim ({c.name}, analysis.claims) checks it against {', '.join(c.sources)}")
                 for c in CLAIMS for f in c.figures)


# ------------------------------------------------------------------------------------------- helpers

def table_md(path: Path) -> pd.DataFrame:
    """The first Markdown table of a committed file as strings (header row, then rows)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.lstrip().startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return pd.DataFrame(cells[2:], columns=cells[0])


def rounds_to(value: float, stated: float, digits: int) -> bool:
    """Whether ``value`` rounds to ``stated`` at ``digits`` decimals (the figure as the sentence writes it)."""
    return math.isfinite(value) and abs(round(value, digits) - stated) < 10 ** -(digits + 3)


def job_files(folder: Path) -> list[str]:
    """The records and summaries of a committed folder's jobs (what ``load_records`` reads), relative to the repo."""
    return sorted(str(p.relative_to(ROOT)) for name in ("records.jsonl", "summary.json")
                  for p in (ROOT / folder).glob(f"*/{name}"))


def interval_side(lo: float, hi: float, value: float = 1.0) -> str:
    """Where an interval ``[lo, hi]`` lies against ``value``: ``above`` (lo > value), ``below`` (hi < value) or
    ``contains``. A comparative claim is checked by this, never by a point estimate."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "unknown"
    return "above" if lo > value else "below" if hi < value else "contains"


def off_interval(got: tuple[float, float, float], want: tuple[float, float, float], digits: int = 3) -> str | None:
    """None when a measured (point, lo, hi) rounds to the stated one at ``digits`` places, else what was measured."""
    if all(rounds_to(g, w, digits) for g, w in zip(got, want, strict=True)):
        return None
    return f"{got[0]:.{digits}f} [{got[1]:.{digits}f}, {got[2]:.{digits}f}]"


def first_off(got: dict, stated: dict) -> str | None:
    """The first of ``stated`` (key → ((point, lo, hi), digits)) that ``got`` (key → (point, lo, hi)) does not round to,
    as ``key: measured``; None when every one holds."""
    for key, (want, digits) in stated.items():
        off = off_interval(got[key], want, digits)
        if off is not None:
            return f"{key}: {off}"
    return None


def complete_records(folder: Path) -> pd.DataFrame:
    """The complete jobs' records of a committed folder (``analysis.frame``), as the tables read them."""
    from analysis.frame import complete_only, load_records

    return complete_only(load_records(folder))


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Spearman's ρ of two aligned series: Pearson's correlation of their ranks (ties: average ranks)."""
    return float(x.rank().corr(y.rank()))


def family_resolved(root: Path, folder: Path, pairs: tuple[str, ...]) -> dict[str, tuple[str, list[str], list[str]]]:
    """Per pair of ``pairs``, Table 2's leader and the methods resolved from both neighbours, at 95 % (the table's
    mark) and at the family-wise level of the run's ranking steps (Bonferroni, ``analysis.noise_floor.family_level``:
    the rule the noise floor applies to the run's A/A pairs), recomputed from the run's records."""
    from analysis.gammatune.table2 import table2_estimates
    from analysis.metrics import is_aa_twin
    from analysis.noise_floor import aa_bands, family_level, same_work
    from analysis.uncertainty import LEVEL, Jackknife, resolve

    df = complete_records(root / folder)
    rows = df[~is_aa_twin(df["method"])]
    jackknife = Jackknife(df, "pooled")
    estimates = table2_estimates(jackknife.cells(rows[rows["pair"].isin(pairs)], ["pair", "method", "gamma_init"]),
                                 "specdecode")
    bands, copies = aa_bands(df, "pooled", jackknife), same_work(rows)
    columns = {p: {k: e for k, e in estimates.items() if k[0] == p and k not in copies} for p in pairs}
    family = family_level(sum(len(c) - 1 for c in columns.values()))
    out = {}
    for pair, cells in columns.items():
        band = bands[pair].band if pair in bands else 0.0
        each, whole = resolve(cells, LEVEL, band), resolve(cells, family, band)
        leader = min(each, key=lambda k: each[k].rank)[1]
        out[pair] = (leader, sorted(k[1] for k, r in each.items() if r.resolved),
                     sorted(k[1] for k, r in whole.items() if r.resolved))
    return out
