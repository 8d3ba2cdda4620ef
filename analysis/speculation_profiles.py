"""``speculation_profile.json`` per cell, and the two means of the acceptance length side by side (issue 41, item 6).

    python -m analysis.speculation_profiles PATH [--out DIR]

PATH: a results folder (every ``records.jsonl`` under it: job folders), a replay folder (every
``replay_full.jsonl`` under it: the lab's per-prompt-turn rows, e.g. of traces imported from SpecDecode-Bench or
vLLM), or both. One cell per pair × task × method × initial γ (and ``source``: records or replay); per cell, each
prompt turn (record or row) is a *request* and its rounds that drafted something are its steps
(``specbench.speculation_profile``, where every definition is). Writes ``DIR/<cell>.json`` (default
``PATH/analysis/speculation_profiles``), prints one line per cell — steps, the per-step mean acceptance length,
the per-request mean, the per-request percentiles, whether the profile's check ``AL = 1 + Σ marginal`` (±0.02)
passed — and a ``warning:`` line for every two cells of one pair × task × γ whose two means rank them in opposite
orders (vLLM issue 42508). Exit status 2, with one line, when PATH holds neither.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.record_io import read_records
from specbench.speculation_profile import PERCENTILES, profile, rank_disagreements, steps_of

REPLAY_ROWS = "replay_full.jsonl"


def _rows(path: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    """``(source, row)`` of every record and replayed prompt-turn row under ``path``."""
    for f in sorted(path.rglob("records.jsonl")):
        for r in read_records(f):
            yield "records", r
    for f in sorted(path.rglob(REPLAY_ROWS)):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield "replay", json.loads(line)


def cells(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[tuple, list[Mapping[str, Any]]]:
    """Rows grouped by ``(source, pair, task, method, gamma_init)``: those with rounds (speculative ones)."""
    out: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for source, r in rows:
        if r.get("drafted_trace") is None or r.get("hetero") or not r.get("drafted_trace"):
            continue
        out[(source, r.get("pair"), r.get("task"), r.get("method"), r.get("gamma_init"))].append(r)
    return dict(out)


def cell_profile(key: tuple, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cell's ``speculation_profile.json`` payload (``specbench.speculation_profile.profile``)."""
    source, pair, task, method, gamma = key
    requests = [steps_of(r["drafted_trace"], r["accepted_trace"]) for r in rows]
    by_category: dict[str, list] = defaultdict(list)
    for r, steps in zip(rows, requests, strict=True):
        by_category[str(r.get("category") or "")].append(steps)
    return profile(requests, method=method, target=rows[0].get("target"), draft=rows[0].get("draft"),
                   per_category=by_category if len(by_category) > 1 else None,
                   conditions={"source": source, "pair": pair, "task": task, "gamma_init": gamma,
                               "engine": "specbench" if source == "records" else "specbench replay"})


def _name(key: tuple) -> str:
    source, pair, task, method, gamma = key
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", f"{source}__{pair}__{task}__{method}__g{gamma}")


def report(profiles: Mapping[tuple, Mapping[str, Any]]) -> list[str]:
    """The command's lines (module docstring)."""
    lines = [f"cell | steps | AL per step | AL per request | {' '.join(f'p{q}' for q in PERCENTILES)} | check"]
    for key, p in sorted(profiles.items(), key=lambda kv: tuple(map(str, kv[0]))):
        pct = p["acceptance_length_percentiles"] or {}
        check = p["validation"]["mean_consistency"]
        lines.append(f"{_name(key)} | {p['steps']} | {p['mean_accept_length']} | {p['mean_accept_length_per_request']} | "
                     f"{' '.join(str(pct.get(f'p{q}')) for q in PERCENTILES)} | "
                     f"{'passed' if check['passed'] else 'FAILED'} (|Δ| {check['abs_delta']})")
    groups: dict[tuple, dict[str, tuple[float, float]]] = defaultdict(dict)
    for (source, pair, task, method, gamma), p in profiles.items():
        if p["steps"]:
            groups[(source, pair, task, gamma)][str(method)] = (p["mean_accept_length"],
                                                                p["mean_accept_length_per_request"])
    for (source, pair, task, gamma), means in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        for a, b in rank_disagreements(means):
            lines.append(f"warning: {pair} / {task} / γ {gamma} ({source}): the per-step mean acceptance length ranks "
                         f"{a} {'above' if means[a][0] > means[b][0] else 'below'} {b} "
                         f"({means[a][0]:.3f} vs {means[b][0]:.3f}), the per-request mean the other way "
                         f"({means[a][1]:.3f} vs {means[b][1]:.3f}): say which mean a comparison uses")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.speculation_profiles", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path, help="a results folder (records.jsonl) or a replay folder (replay_full.jsonl)")
    ap.add_argument("--out", type=Path, help="where the profiles go (default: PATH/analysis/speculation_profiles)")
    args = ap.parse_args(argv)
    if not args.path.is_dir():
        print(f"error: {args.path} is not a folder", file=sys.stderr)
        return 2
    found = cells(_rows(args.path))
    if not found:
        print(f"error: {args.path} holds no speculative record or replayed row with rounds (records.jsonl, "
              f"{REPLAY_ROWS})", file=sys.stderr)
        return 2
    out = args.out or args.path / "analysis" / "speculation_profiles"
    out.mkdir(parents=True, exist_ok=True)
    profiles = {key: cell_profile(key, rows) for key, rows in found.items()}
    for key, p in profiles.items():
        (out / f"{_name(key)}.json").write_text(json.dumps(p, indent=1) + "\n", encoding="utf-8")
    print("\n".join(report(profiles)))
    print(f"{len(profiles)} profiles in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
