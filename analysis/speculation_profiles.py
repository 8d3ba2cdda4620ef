"""``speculation_profile.json`` per cell, as specdec_bench computes it, with our per-drafted-round acceptance length
beside it.

    python -m analysis.speculation_profiles PATH [--out DIR]

PATH: a results folder (every ``records.jsonl`` under it: job folders), a replay folder (every
``replay_full.jsonl`` under it: the lab's per-prompt-turn rows, e.g. of traces imported from SpecDecode-Bench or
vLLM), or both. One cell per pair × task × method × initial γ (× cross-vocabulary algorithm, when one ran; and
``source``: records or replay); per cell, the prompt turns (records or rows) of one prompt are a *request* (a
question: specdec_bench pools its turns), each turn's steps counted as specdec_bench counts them
(``specbench.speculation_profile``, where every definition is). The profile's ``method`` is the speculation
algorithm (``speculation_method``: from the job's ``summary.json``, ``config.pair.draft.kind``; unknown for a
replayed row), the method is ``measurement_conditions.policy``, its γ policy ``measurement_conditions.gamma_policy``
(``config.method.policy``); a cell whose γ policy is not ``fixed`` is ``measured_per_k`` (its deep rates record where
the policy stopped drafting: ``specbench.speculation_profile.accept_length_model``). Writes ``DIR/<cell>.json`` (default
``PATH/analysis/speculation_profiles``), prints one line per cell — steps, the per-step mean acceptance length, the
per-request mean, ours per drafted round, the per-request percentiles, whether the profile's check
``AL = 1 + Σ marginal`` (±0.02) passed — and a ``warning:`` line for every two cells of one pair × task × γ whose
two means (per step, per request) rank them in opposite orders (vLLM GitHub #42508). Exit status 2, with one line,
when PATH holds neither.
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

from specbench.drafter_kinds import DEFAULT_KIND
from specbench.record_io import read_records
from specbench.speculation_profile import (
    PERCENTILES,
    Request,
    drafted_rounds_of,
    profile,
    rank_disagreements,
    record_steps,
    speculation_method,
)

REPLAY_ROWS = "replay_full.jsonl"


Job = tuple[str | None, str | None]  # (draft kind, γ policy) of a row's job


def _job_of(job: Path) -> Job:
    """The job's ``config.pair.draft.kind`` (its ``summary.json``; ``specbench.drafter_kinds.DEFAULT_KIND`` for a draft
    node without a kind, as ``specbench.config.pair`` reads it) and ``config.method.policy``; None for what the
    summary lacks (or with no summary)."""
    try:
        config = json.loads((job / "summary.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError):
        return None, None
    draft = (config.get("pair") or {}).get("draft") if isinstance(config.get("pair"), Mapping) else None
    method = config.get("method")
    return (draft.get("kind", DEFAULT_KIND) if isinstance(draft, Mapping) else None,
            method.get("policy") if isinstance(method, Mapping) else None)


def _rows(path: Path) -> Iterable[tuple[str, dict[str, Any], Job]]:
    """``(source, row, (draft kind, γ policy))`` of every record and replayed prompt-turn row under ``path``."""
    for f in sorted(path.rglob("records.jsonl")):
        job = _job_of(f.parent)
        for r in read_records(f):
            yield "records", r, job
    for f in sorted(path.rglob(REPLAY_ROWS)):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield "replay", json.loads(line), (None, None)


def cells(rows: Iterable[tuple[str, Mapping[str, Any], Job]]) -> dict[tuple, list[tuple[Mapping, Job]]]:
    """Rows (with their job's draft kind and γ policy) grouped by ``(source, pair, task, method, gamma_init,
    hetero)``: those with rounds (speculative ones)."""
    out: dict[tuple, list[tuple[Mapping, Job]]] = defaultdict(list)
    for source, r, job in rows:
        if not r.get("drafted_trace"):
            continue
        key = (source, r.get("pair"), r.get("task"), r.get("method"), r.get("gamma_init"), r.get("hetero"))
        out[key].append((r, job))
    return dict(out)


def requests_of(rows: Sequence[Mapping[str, Any]]) -> list[Request]:
    """The cell's requests: its rows grouped by prompt (``prompt_id``), turns in order, steps pooled
    (``specbench.speculation_profile.Request``)."""
    by_prompt: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_prompt[str(r.get("prompt_id"))].append(r)
    out = []
    for _, turns in sorted(by_prompt.items()):
        turns = sorted(turns, key=lambda r: r.get("turn") or 0)
        out.append(Request([s for r in turns for s in record_steps(r)],
                           [x for r in turns for x in drafted_rounds_of(r["drafted_trace"], r["accepted_trace"])],
                           str(turns[0].get("category") or "")))
    return out


def cell_profile(key: tuple, rows: Sequence[tuple[Mapping[str, Any], Job]]) -> dict[str, Any]:
    """The cell's ``speculation_profile.json`` payload (``specbench.speculation_profile.profile``); adaptive (so
    ``measured_per_k``) unless every job of the cell ran the ``fixed`` γ policy."""
    source, pair, task, policy, gamma, hetero = key
    kinds = {kind for _, (kind, _) in rows}
    gamma_policies = {p for _, (_, p) in rows}
    gamma_policy = gamma_policies.pop() if len(gamma_policies) == 1 else None
    first = rows[0][0]
    return profile(requests_of([r for r, _ in rows]),
                   method=speculation_method(kinds.pop() if len(kinds) == 1 else None, hetero),
                   target=first.get("target"), draft=first.get("draft"),
                   conditions={"source": source, "pair": pair, "task": task, "policy": policy,
                               "gamma_policy": gamma_policy, "gamma_init": gamma,
                               "engine": "specbench" if source == "records" else "specbench replay"},
                   adaptive=gamma_policy != "fixed")


def _name(key: tuple) -> str:
    source, pair, task, method, gamma, hetero = key
    name = f"{source}__{pair}__{task}__{method}__g{gamma}" + (f"__{hetero}" if hetero else "")
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name)


def report(profiles: Mapping[tuple, Mapping[str, Any]]) -> list[str]:
    """The command's lines (module docstring)."""
    lines = [f"cell | steps | AL per step | AL per request | AL per drafted round (ours) | "
             f"{' '.join(f'p{q}' for q in PERCENTILES)} | check"]
    for key, p in sorted(profiles.items(), key=lambda kv: tuple(map(str, kv[0]))):
        pct = p["acceptance_length_percentiles"] or {}
        check = p["validation"]["mean_consistency"]
        lines.append(f"{_name(key)} | {p['steps']} | {p['mean_accept_length']} | {p['mean_accept_length_per_request']} | "
                     f"{p['drafted_round_mean_accept_length']} | "
                     f"{' '.join(str(pct.get(f'p{q}')) for q in PERCENTILES)} | "
                     f"{'passed' if check['passed'] else 'FAILED'} (|Δ| {check['abs_delta']})")
    groups: dict[tuple, dict[str, tuple[float, float]]] = defaultdict(dict)
    for (source, pair, task, method, gamma, hetero), p in profiles.items():
        if p["steps"]:
            groups[(source, pair, task, gamma)][str(method) + (f" ({hetero})" if hetero else "")] = (
                p["mean_accept_length"], p["mean_accept_length_per_request"])
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
