"""A grid: methods × initial γ replayed on one job's traces, as rows, with the oracles and the best
fixed γ in hindsight; and its one writer (``write_grid``), used by ``python -m runners.replay grid``
and by the policy lab (``python -m runners.replay lab replay``).

Best fixed γ in hindsight: the fixed-γ replay (``policy=fixed``) for every γ in
``1..max(--gammas)``; per prompt (each prompt its own best γ) and per task (one γ for all the
prompts of the trace, best pooled throughput).

Rows (``result_row``; ``python -m runners.replay grid`` writes them to ``replay.jsonl`` and ``replay.csv``):
one row per method × initial γ × prompt turn, with ``specbench.records`` field names: pair, method, gamma_init, prompt_id, new_tokens, rounds,
drafted, accepted, acceptance_rate, gamma_trace, drafted_trace, accepted_trace, the per-position
counts (drafted_per_pos, compared_per_pos, accepted_per_pos), and *predicted*
ttft_ms, tpot_ms, wall_ms, tokens_per_s, ar_tokens_per_s, speedup; plus ``source = "replay"``),
and ``meta.json`` into ``--out`` (default ``<DIR>/replay``); ``python -m analysis`` renders the
oracle table from them (``analysis.replay_table``). Oracle rows have ``method`` ``oracle`` / ``oracle_agreement``; best fixed γ
rows ``best_fixed_prompt`` / ``best_fixed_task``.

Cells (``cells``; the policy lab writes them, small enough to commit): one row per pair × task × length ×
method × initial γ, the sums of its prompt turns' rows (``prompt_id = "*"``, ``prompts``: how many), with the
per-position counts summed, ``plain_rounds``, and only the rounds that drafted the full initial γ kept in
``drafted_trace`` / ``accepted_trace`` (enough for Leviathan et al.'s α); ``analysis`` reads rows and cells
alike (its leaderboard is the same from either). ``write_grid`` writes either shape into one folder.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from methods.base import GammaPolicy
from runners.replay.oracle import AGREEMENT_ORACLE, ORACLE, agreement_oracle, oracle
from runners.replay.replay import ReplayResult, replay_job
from runners.replay.trace import Trace, TraceTooShort
from specbench.latency import LatencyModel
from specbench.paths import CONF_DIR
from specbench.records import REPLAY_FILE, per_position, pooled_tokens_per_s, write_json_atomic

PAPER_METHODS = ("specdecode", "hf_heuristic", "hf_heuristic_carryover", "assistant_threshold", "gammatune",
                 "gammatune_plus")
PAPER_GAMMAS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24)
BEST_FIXED_PROMPT = "best_fixed_prompt"
BEST_FIXED_TASK = "best_fixed_task"


def parse_ints(text: str) -> list[int]:
    """``"1-8,12,16"`` -> ``[1, .., 8, 12, 16]`` (initial γ, cache lengths, prompt lengths)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-")
            out += list(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


@dataclass(frozen=True)
class MethodSpec:
    """A method as a job would run it: the ``method`` label, its policy and parameters."""

    label: str
    policy: str
    params: Mapping[str, Any]

    def build(self, gamma: int) -> GammaPolicy:
        from methods.registry import build_policy

        return build_policy(self.policy, gamma, dict(self.params))


def _parse_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def load_method(spec: str, conf_dir: str | os.PathLike | None = None) -> MethodSpec:
    """``NAME`` (``conf/method/NAME.yaml``, or a registered policy name) or
    ``NAME:key=value,key=value`` (parameters overridden; the label is the whole string)."""
    from methods.registry import POLICIES
    from specbench.registry import ConfigError

    name, _, rest = spec.partition(":")
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"method {spec!r}: {item!r} is not key=value")
        overrides[key.strip()] = _parse_value(value)
    path = Path(conf_dir or CONF_DIR / "method") / f"{name}.yaml"
    if path.exists():
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        from specbench.config import MethodConfig

        method = MethodConfig.from_mapping(cfg)
        if method.runner != "speculative":
            raise ConfigError(f"method {name!r} is not our speculative loop; it cannot be replayed")
        return MethodSpec(spec, str(method.policy), {**method.params, **overrides})
    if name in POLICIES:
        return MethodSpec(spec, name, overrides)
    raise ConfigError(f"unknown method {name!r} (no {path} and no such policy)")


def result_row(res: ReplayResult, method: str, gamma_init: int | None, latency: LatencyModel | None) -> dict[str, Any]:
    """A records-like row (``specbench.records`` field names where they apply; times are predicted)."""
    tr = res.trace
    rounds = len(res.accepted_trace)
    drafted, accepted = sum(res.drafted_trace), sum(res.accepted_trace)
    row: dict[str, Any] = {
        "pair": tr.pair, "target": tr.target, "draft": tr.draft, "method": method, "task": tr.task,
        "category": tr.category, "prompt_id": tr.prompt_id, "turn": tr.turn, "gamma_init": gamma_init,
        "temperature": 0.0, "prompt_tokens": tr.prompt_tokens, "new_tokens": res.new_tokens,
        "stop_reason": res.stop_reason, "max_new_tokens": tr.max_new_tokens,
        "rounds": rounds, "drafted": drafted, "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_accepted_per_round": accepted / rounds if rounds else None,
        "gamma_trace": res.gamma_trace, "drafted_trace": res.drafted_trace, "accepted_trace": res.accepted_trace,
        **per_position(res.drafted_trace, res.accepted_trace),
        "ttft_ms": res.ttft_ms, "wall_ms": res.wall_ms, "tpot_ms": None, "tokens_per_s": res.tokens_per_s,
        "ar_wall_ms": None, "ar_tokens_per_s": None, "speedup": None, "source": "replay", "predicted": True,
    }
    if latency is not None and res.wall_ms:
        if res.new_tokens >= 2:
            row["tpot_ms"] = (res.wall_ms - res.ttft_ms) / (res.new_tokens - 1)
        ar = latency.ar_wall_ms(tr.prompt_tokens, res.new_tokens)
        row["ar_wall_ms"] = ar
        row["ar_tokens_per_s"] = res.new_tokens / (ar / 1000.0) if ar > 0 else None
        if row["ar_tokens_per_s"]:
            row["speedup"] = row["tokens_per_s"] / row["ar_tokens_per_s"]
    return row


def _pooled(results: Sequence[ReplayResult]) -> float:
    return pooled_tokens_per_s([r.new_tokens for r in results], [r.wall_ms for r in results])


def replay_grid(traces: Sequence[Trace], methods: Sequence[MethodSpec], gammas: Sequence[int],
                latency: LatencyModel | None, max_new_tokens: int | None = None,
                errors: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows for every method × initial γ over one job's traces (in order), plus, with a latency
    model, the oracles and the best fixed γ in hindsight (``1..max(gammas)``)."""
    errors = errors if errors is not None else []
    rows: list[dict[str, Any]] = []
    for method in methods:
        for gamma in gammas:
            try:
                results = replay_job(traces, method.build(gamma), latency, max_new_tokens)
            except (TraceTooShort, ValueError) as exc:
                errors.append(f"{method.label} γ={gamma}: {exc}")
                continue
            rows += [result_row(r, method.label, gamma, latency) for r in results]
    if latency is None or not traces:
        return rows
    rows += [result_row(oracle(tr, latency, max_new_tokens), ORACLE, None, latency) for tr in traces]
    rows += [result_row(agreement_oracle(tr, latency, max_new_tokens), AGREEMENT_ORACLE, None, latency)
             for tr in traces]
    fixed = MethodSpec("fixed", "fixed", {})
    by_gamma: dict[int, list[ReplayResult]] = {}
    for gamma in range(1, max(gammas) + 1):
        try:
            by_gamma[gamma] = replay_job(traces, fixed.build(gamma), latency, max_new_tokens)
        except TraceTooShort as exc:
            errors.append(f"best fixed γ: γ={gamma} left out: {exc}")
    if by_gamma:
        best_task = max(by_gamma, key=lambda g: (_pooled(by_gamma[g]), -g))
        rows += [result_row(r, BEST_FIXED_TASK, best_task, latency) for r in by_gamma[best_task]]
        for i in range(len(traces)):
            g = min(by_gamma, key=lambda g: (by_gamma[g][i].wall_ms, g))
            rows.append(result_row(by_gamma[g][i], BEST_FIXED_PROMPT, g, latency))
    return rows


# ---------------------------------------------------------------------- cells and the writer

SUM_FIELDS = ("new_tokens", "rounds", "drafted", "accepted", "wall_ms", "ttft_ms", "ar_wall_ms")
LIST_FIELDS = ("drafted_per_pos", "compared_per_pos", "accepted_per_pos")
#: the list columns ``replay.csv`` holds as JSON text
LIST_COLUMNS = ("gamma_trace", "drafted_trace", "accepted_trace", *LIST_FIELDS)
FULL_FILE = "replay_full.jsonl"


def cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pair × task × length × method × initial γ: the sums of its prompt turns (module docstring)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["pair"], r["task"], r["max_new_tokens"], r["method"], r["gamma_init"])].append(r)
    out = []
    for (pair, task, m, method, gamma), group in groups.items():
        cell: dict[str, Any] = {"pair": pair, "task": task, "max_new_tokens": m, "method": method, "gamma_init": gamma,
                                "prompt_id": "*", "prompts": len(group), "source": "replay", "predicted": True,
                                "target": group[0].get("target"), "draft": group[0].get("draft")}
        for f in SUM_FIELDS:
            values = [r.get(f) for r in group]
            cell[f] = sum(values) if all(v is not None for v in values) else None
        for f in LIST_FIELDS:
            width = max(len(r.get(f) or []) for r in group)
            cell[f] = [sum((r.get(f) or [])[j] if j < len(r.get(f) or []) else 0 for r in group) for j in range(width)]
        # rounds that drafted the full initial γ (Leviathan et al.'s α) and plain steps
        full = [(d, a) for r in group for d, a in zip(r["drafted_trace"], r["accepted_trace"])]
        cell["plain_rounds"] = sum(1 for d, _ in full if d == 0)
        if gamma is not None:
            fulls = [(d, a) for d, a in full if d == gamma]
            cell["drafted_trace"] = [gamma] * len(fulls)  # only the full rounds: enough for the α fit
            cell["accepted_trace"] = [a for _, a in fulls]
        cell["acceptance_rate"] = cell["accepted"] / cell["drafted"] if cell.get("drafted") else None
        cell["tokens_per_s"] = pooled_tokens_per_s([cell["new_tokens"]], [cell["wall_ms"]]) if cell.get("wall_ms") else None
        cell["ar_tokens_per_s"] = (pooled_tokens_per_s([cell["new_tokens"]], [cell["ar_wall_ms"]])
                                   if cell.get("ar_wall_ms") else None)
        cell["speedup"] = (cell["tokens_per_s"] / cell["ar_tokens_per_s"]) if cell.get("ar_tokens_per_s") else None
        out.append(cell)
    return out


def trace_summary(traces: Iterable[Trace]) -> list[dict[str, Any]]:
    """Per prompt turn: tokens, agreement, the target's own measured speed while tracing."""
    out = []
    for tr in traces:
        agree = tr.agreements
        out.append({
            "pair": tr.pair, "task": tr.task, "prompt_id": tr.prompt_id, "turn": tr.turn, "category": tr.category,
            "kind": getattr(tr, "kind", "model"), "prompt_tokens": tr.prompt_tokens, "new_tokens": tr.n,
            "stop_reason": tr.stop_reason, "mean_agreement": sum(agree) / len(agree) if agree else 0.0,
            "share_a_t_zero": agree.count(0) / len(agree) if agree else 0.0, "near_ties": tr.near_ties,
            "ar_tokens_per_s_measured": pooled_tokens_per_s([tr.n], [tr.ar_wall_ms]) if tr.ar_wall_ms else None,
        })
    return out


def _write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, allow_nan=False) + "\n")


def write_grid(folder: str | os.PathLike, rows: list[dict[str, Any]], meta: Mapping[str, Any], *,
               as_cells: bool = False, full: bool = False, traces: Sequence[Trace] | None = None) -> Path:
    """A grid's folder, the one writer of replayed rows: ``replay.jsonl`` (read by ``analysis``) holds the
    rows (one per method × initial γ × prompt turn; ``replay.csv``: the same, flat, lists as JSON) or, with
    ``as_cells``, the cells (one per method × initial γ; ``full``: the rows too, in ``replay_full.jsonl``);
    ``trace_summary.csv`` per prompt turn of ``traces`` when given; ``meta.json`` (what was replayed)."""
    import pandas as pd

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    if as_cells:
        _write_jsonl(out / REPLAY_FILE, cells(rows))
        if full:
            _write_jsonl(out / FULL_FILE, rows)
    else:
        _write_jsonl(out / REPLAY_FILE, rows)
        flat = pd.DataFrame(rows)
        for col in LIST_COLUMNS:
            if col in flat:
                flat[col] = flat[col].map(json.dumps)
        flat.to_csv(out / "replay.csv", index=False)
    if traces is not None:
        pd.DataFrame(trace_summary(traces)).to_csv(out / "trace_summary.csv", index=False)
    write_json_atomic(out / "meta.json", dict(meta))
    return out
