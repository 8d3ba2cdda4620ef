"""A grid: methods × initial γ replayed on one job's traces, as rows, with the oracles and the best
fixed γ in hindsight; and its one writer (``write_grid``), used by ``python -m runners.replay grid``
and by the policy lab (``python -m runners.replay lab replay``).

Best fixed γ in hindsight: the fixed-γ replay (``policy=fixed``) for every γ in
``1..max(--gammas)``; per prompt (each prompt its own best γ) and per task (one γ for all the
prompts of the trace, best pooled throughput).

Rows (``result_row``; ``python -m runners.replay grid`` writes them to ``replay.jsonl`` and ``replay.csv``):
one row per method × initial γ × prompt turn, each a record (``specbench.records.Record``'s fields, filled by its
builders) with its source: pair, method (the replay's label, ``NAME`` or ``NAME:key=value``), ``method_key`` (its
identity as a job run with those overrides writes it, ``MethodSpec.key``), ``method_params`` (every knob it ran with:
the YAML's and the overrides, ``MethodSpec.params``), gamma_init, prompt_id, new_tokens, the
replay's ``specbench.rounds.Rounds`` serialised as a job's record serialises its own; *predicted* ttft_ms,
tpot_ms, wall_ms, tokens_per_s, ar_tokens_per_s, speedup; plus ``source = "replay"``, ``predicted`` and the
trace's ``max_new_tokens``), and ``meta.json`` into ``--out`` (default ``<DIR>/replay``); ``python -m analysis``
renders the oracle table from them (``analysis.replay_table``). Oracle rows have ``method`` ``oracle`` /
``oracle_agreement``; best fixed γ rows ``best_fixed_prompt`` / ``best_fixed_task``.

At a batch size (``replay_grid(..., batch_size, gamma_mode)``; ``runners.replay.batched``) every row also
carries a record's batch fields (``specbench.records.batch_fields``: ``batch_size``, ``gamma_mode`` (None on
reference rows), ``batch_index``, ``batch_rows``, ``batch_wall_ms``, ``batch_tokens``, ``batch_share_ms``) and the
target alone on the same batch (``ar_wall_ms``: the row's, ``ar_batch_wall_ms``, ``ar_batch_tokens``);
``wall_ms``, ``tokens_per_s`` and ``speedup`` are the row's latency view (batch start → its finish), the
throughput over all rows divides by ``specbench.records.throughput_ms``. Batch 1: the rows of ``replay_job``,
``batch_share_ms = wall_ms``. The best fixed γ at ``B``: per task the γ of the best throughput over all rows; per
prompt, each row plays the γ under which it finished first when the whole batch played that γ, and the rows are
replayed together.

Cells (``cells``; the policy lab writes them, small enough to commit): one row per pair × task × length ×
batch size × γ mode × method × initial γ, the sums of its prompt turns' rows (``prompt_id = "*"``, ``prompts``:
how many), with the per-position counts summed, ``batch_share_ms`` and ``ar_share_ms`` the sums of the rows'
``throughput_ms`` (a cell is no record: ``ar_share_ms`` is its own column), ``plain_rounds``, and only the rounds
that drafted the full initial γ kept in ``drafted_trace`` / ``accepted_trace`` (enough for Leviathan et al.'s α);
``analysis`` reads rows and cells alike (its leaderboard is the same from either). ``write_grid`` writes either
shape into one folder.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from methods.base import GammaPolicy
from runners.replay.batched import (
    agreement_oracle_batches,
    ar_batches,
    batch_indices,
    check_batching,
    oracle_batches,
    pooled_batches,
    replay_each_batched,
    replay_job_batched,
    rows_of,
)
from runners.replay.oracle import AGREEMENT_ORACLE, ORACLE
from runners.replay.replay import BatchReplay, ReplayResult
from runners.replay.trace import Trace, TraceTooShort
from specbench.config.method import method_key, parse_spelling
from specbench.latency import LatencyModel
from specbench.paths import CONF_DIR
from specbench.record_io import write_json_atomic, write_jsonl
from specbench.records import REPLAY_FILE, batch_fields, pooled_tokens_per_s, throughput_ms, timing_fields
from specbench.rounds import TRACE_FIELDS

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
    display: str | None = None  # the method YAML's ``display`` (``MethodConfig.display``), as a job's record names it

    def build(self, gamma: int) -> GammaPolicy:
        from methods.policies import build_policy

        return build_policy(self.policy, gamma, dict(self.params))

    @property
    def key(self) -> str:
        """The method's identity as a job run with the label's overrides writes it
        (``specbench.config.method.method_key``): ``gammatune:eta=0.5`` is ``gammatune`` with ``method.eta=0.5``,
        ``gammatune[eta=0.5]``."""
        name, overrides = parse_spelling(self.label)
        return method_key(name, overrides)


def load_method(spec: str, conf_dir: str | os.PathLike | None = None) -> MethodSpec:
    """``NAME`` (``conf/method/NAME.yaml``, or a registered policy name) or
    ``NAME:key=value,key=value`` (parameters overridden; the label is the whole string)."""
    from methods.policies import POLICIES
    from specbench.registry import ConfigError

    name, overrides = parse_spelling(spec)
    path = Path(conf_dir or CONF_DIR / "method") / f"{name}.yaml"
    if path.exists():
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        from specbench.config import MethodConfig

        method = MethodConfig.from_mapping(cfg)
        if method.runner != "speculative":
            raise ConfigError(f"method {name!r} is not our speculative loop; it cannot be replayed")
        return MethodSpec(spec, str(method.policy), {**method.params, **overrides}, method.display)
    if name in POLICIES:
        return MethodSpec(spec, name, overrides)
    raise ConfigError(f"unknown method {name!r} (no {path} and no such policy)")


def result_row(res: ReplayResult, method: str, gamma_init: int | None, latency: LatencyModel | None,
               batch: Mapping[str, Any] | None = None, key: str | None = None,
               display: str | None = None, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A replayed row: a record (``specbench.records.Record``'s fields, filled by its builders; times predicted)
    with its source (``source = "replay"``, ``predicted``, the trace's ``max_new_tokens``). ``key``: the method's
    identity (``MethodSpec.key``; None for the references), ``display`` its name (``MethodSpec.display``), ``params``
    every knob it ran with (``MethodSpec.params``: the record's ``method_params``; empty for the references). ``batch``: the row's batch (``batch_fields``), its AR
    wall at that batch size (``ar_wall_ms``) among them; None: a row decoded alone (batch 1)."""
    tr = res.trace
    row: dict[str, Any] = {
        "pair": tr.pair, "target": tr.target, "draft": tr.draft, "method": method, "method_key": key,
        "method_display": display, "method_params": dict(params or {}), "task": tr.task,
        "category": tr.category, "prompt_id": tr.prompt_id, "turn": tr.turn, "gamma_init": gamma_init,
        "temperature": 0.0, "prompt_tokens": tr.prompt_tokens, "new_tokens": res.new_tokens,
        "stop_reason": res.stop_reason, "max_new_tokens": tr.max_new_tokens,
        **res.rounds.fields(),  # serialised as a job's record serialises its rounds
        "ttft_ms": res.ttft_ms, "wall_ms": res.wall_ms, "tpot_ms": None, "tokens_per_s": res.tokens_per_s,
        "ar_wall_ms": None, "ar_tokens_per_s": None, "speedup": None, "source": "replay", "predicted": True,
    }
    if batch is None:  # alone: the batch fields a record at batch 1 would have, its share its own wall
        batch = {"batch_size": 1, "batch_rows": 1, "batch_wall_ms": res.wall_ms, "batch_tokens": res.new_tokens,
                 "batch_share_ms": res.wall_ms}
        if latency is not None and res.wall_ms:
            batch = {**batch, "ar_wall_ms": latency.ar_wall_ms(tr.prompt_tokens, res.new_tokens)}
    row.update(batch)
    if latency is not None and res.wall_ms:
        row.update(timing_fields(res.wall_ms, res.ttft_ms, res.new_tokens))
        ar = row["ar_wall_ms"]
        row["ar_tokens_per_s"] = res.new_tokens / (ar / 1000.0) if ar and ar > 0 else None
        if row["ar_tokens_per_s"]:
            row["speedup"] = row["tokens_per_s"] / row["ar_tokens_per_s"]
    return row


def job_batch_fields(batches: Sequence[BatchReplay], batch_size: int, gamma_mode: str | None,
                     ar: Sequence[tuple[float, list[float]]] | None) -> list[dict[str, Any]]:
    """Per row of a job replayed at a batch size, in order: a record's batch fields (``specbench.records.batch_fields``,
    as a job's row gets them: ``batch_share_ms`` is the row's share of its batch's wall, the shares of a job sum to
    its batches' walls, so ``Σ new tokens / Σ shares`` is the throughput over all rows) and, with ``ar``
    (``runners.replay.batched.ar_batches``), the target alone on the same batch: ``ar_wall_ms`` (the row's),
    ``ar_batch_wall_ms`` and ``ar_batch_tokens`` (it decodes the rows' own tokens: the same traces; none at batch 1,
    as a record at batch 1 has none: the AR side is then the row's own ``ar_wall_ms``)."""
    out = []
    for index, batch in enumerate(batches):
        rows, tokens = len(batch.rows), batch.new_tokens
        walls = ar[index][1] if ar is not None else None
        paired = bool(walls) and batch_size > 1
        for i in range(rows):
            fields = batch_fields(batch_size, index, rows, batch.wall_ms, tokens, batch.rows[i].new_tokens, gamma_mode,
                                  max(walls) if paired else None, tokens if paired else None)
            if walls:
                fields["ar_wall_ms"] = walls[i]
            out.append(fields)
    return out


def job_rows(batches: Sequence[BatchReplay], method: str, gammas: int | Sequence[int | None] | None,
             latency: LatencyModel | None, gamma_mode: str | None, ar: Sequence | None,
             batch_size: int, key: str | None = None, display: str | None = None,
             params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``result_row`` of every row of a job replayed at ``batch_size`` (``gammas``: one initial γ, or one per row;
    ``key``: the method's identity, ``MethodSpec.key``; ``display``: its name, ``MethodSpec.display``; ``params``: its
    knobs, ``MethodSpec.params``)."""
    results = rows_of(batches)
    per_row = gammas if isinstance(gammas, list) else [gammas] * len(results)
    fields = job_batch_fields(batches, batch_size, gamma_mode, ar)
    return [result_row(r, method, g, latency, f, key, display, params) for r, g, f in zip(results, per_row, fields)]


def replay_grid(traces: Sequence[Trace], methods: Sequence[MethodSpec], gammas: Sequence[int],
                latency: LatencyModel | None, max_new_tokens: int | None = None,
                errors: list[str] | None = None, batch_size: int = 1, gamma_mode: str = "per_row") -> list[dict[str, Any]]:
    """Rows for every method × initial γ over one job's traces (in order), decoded ``batch_size`` at a time
    in ``gamma_mode`` (``runners.replay.batched``), plus, with a latency model, the oracles and the best
    fixed γ in hindsight (``1..max(gammas)``) at that batch size (reference rows: ``gamma_mode`` None).
    Batch 1: every row as ``replay_job`` replays it."""
    batch_size, gamma_mode = check_batching(batch_size, gamma_mode, latency)
    errors = errors if errors is not None else []
    rows: list[dict[str, Any]] = []
    ar = ar_batches(traces, latency, batch_size, max_new_tokens) if latency is not None and traces else None
    for method in methods:
        for gamma in gammas:
            try:
                batches = replay_job_batched(traces, partial(method.build, gamma), latency, batch_size, gamma_mode,
                                             max_new_tokens)
            except (TraceTooShort, ValueError) as exc:
                errors.append(f"{method.label} γ={gamma}: {exc}")
                continue
            rows += job_rows(batches, method.label, gamma, latency, gamma_mode, ar, batch_size, method.key,
                             method.display, method.params)
    if latency is None or not traces:
        return rows
    if any(getattr(tr, "chooses_source", False) for tr in traces):
        errors.append("oracle: not computed for the hybrid drafter's traces (the oracle chooses among one proposer's "
                      "drafts; the hybrid switches proposer by its own rule): the best fixed γ rows are the reference")
    else:
        rows += job_rows(oracle_batches(traces, latency, batch_size, max_new_tokens), ORACLE, None, latency, None, ar,
                         batch_size)
        rows += job_rows(agreement_oracle_batches(traces, latency, batch_size, max_new_tokens), AGREEMENT_ORACLE,
                         None, latency, None, ar, batch_size)
    fixed = MethodSpec("fixed", "fixed", {})
    by_gamma: dict[int, list[BatchReplay]] = {}
    for gamma in range(1, max(gammas) + 1):
        try:
            by_gamma[gamma] = replay_job_batched(traces, partial(fixed.build, gamma), latency, batch_size,
                                                 "per_row", max_new_tokens)
        except TraceTooShort as exc:
            errors.append(f"best fixed γ: γ={gamma} left out: {exc}")
    if by_gamma:
        best_task = max(by_gamma, key=lambda g: (pooled_batches(by_gamma[g]), -g))
        rows += job_rows(by_gamma[best_task], BEST_FIXED_TASK, best_task, latency, None, ar, batch_size)
        order = [i for group in batch_indices(traces, batch_size) for i in group]  # rows_of's order, as trace indices
        walls: dict[int, list[float]] = {}
        for g, b in by_gamma.items():
            walls[g] = [0.0] * len(traces)
            for i, r in zip(order, rows_of(b)):
                walls[g][i] = r.wall_ms
        own = [min(by_gamma, key=lambda g: (walls[g][i], g)) for i in range(len(traces))]
        batches = replay_each_batched(traces, [fixed.build(g) for g in own], latency, batch_size, max_new_tokens)
        rows += job_rows(batches, BEST_FIXED_PROMPT, [own[i] for i in order], latency, None, ar, batch_size)
    return rows


# ---------------------------------------------------------------------- cells and the writer

SUM_FIELDS = ("new_tokens", "rounds", "drafted", "accepted", "wall_ms", "ttft_ms", "ar_wall_ms")
LIST_FIELDS = ("drafted_per_pos", "compared_per_pos", "accepted_per_pos")
#: the list columns ``replay.csv`` holds as JSON text
LIST_COLUMNS = (*TRACE_FIELDS, *LIST_FIELDS)
FULL_FILE = "replay_full.jsonl"


def cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pair × task × length × method × initial γ: the sums of its prompt turns (module docstring)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["pair"], r["task"], r["max_new_tokens"], r.get("batch_size", 1), r.get("gamma_mode"), r["method"],
                r["gamma_init"])].append(r)
    out = []
    for (pair, task, m, batch_size, mode, method, gamma), group in groups.items():
        cell: dict[str, Any] = {"pair": pair, "task": task, "max_new_tokens": m, "batch_size": batch_size,
                                "gamma_mode": mode, "method": method, "gamma_init": gamma,
                                "prompt_id": "*", "prompts": len(group), "source": "replay", "predicted": True,
                                "target": group[0].get("target"), "draft": group[0].get("draft"),
                                "method_key": group[0].get("method_key"),
                                "method_display": group[0].get("method_display"),
                                "method_params": group[0].get("method_params")}
        for f in SUM_FIELDS:
            values = [r.get(f) for r in group]
            cell[f] = sum(values) if all(v is not None for v in values) else None
        # what the throughput over all rows divides by (``specbench.records.throughput_ms``): each row's share of
        # its batch's wall (its own wall at batch 1), and the AR side's; a cell states the AR sum as ``ar_share_ms``
        for f, ar in (("batch_share_ms", False), ("ar_share_ms", True)):
            values = [throughput_ms(r, ar=ar) for r in group]
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
        time, ar_time = throughput_ms(cell), throughput_ms(cell, ar=True)
        cell["tokens_per_s"] = pooled_tokens_per_s([cell["new_tokens"]], [time]) if time else None
        cell["ar_tokens_per_s"] = pooled_tokens_per_s([cell["new_tokens"]], [ar_time]) if ar_time else None
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
        write_jsonl(out / REPLAY_FILE, cells(rows))
        if full:
            write_jsonl(out / FULL_FILE, rows)
    else:
        write_jsonl(out / REPLAY_FILE, rows)
        flat = pd.DataFrame(rows)
        for col in LIST_COLUMNS:
            if col in flat:
                flat[col] = flat[col].map(json.dumps)
        flat.to_csv(out / "replay.csv", index=False)
    if traces is not None:
        pd.DataFrame(trace_summary(traces)).to_csv(out / "trace_summary.csv", index=False)
    write_json_atomic(out / "meta.json", dict(meta))
    return out
