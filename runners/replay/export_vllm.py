"""A run's records written as vLLM's per-request metrics.

    python -m runners.replay export vllm RECORDS --out FILE [--level detailed|summary] [--shape response|offline]

RECORDS is a ``records.jsonl`` or a folder searched for them. Each record with rounds (``specbench.rounds.Rounds``:
``gamma_trace``, ``drafted_trace``, ``accepted_trace``) becomes one JSON line shaped as a vLLM ≥ 0.29
``/v1/completions`` response of a server started with ``--per-request-spec-decode-metrics detailed``
(``runners.replay.vllm_metrics.response``, ``block``): ``usage`` from the record's ``prompt_tokens`` and
``new_tokens``, ``metrics.speculative_decoding`` from its rounds — ``per_step_drafted`` / ``per_step_accepted``
the rounds that drafted something, in order (vLLM leaves a step without drafts out: so are our rounds that
drafted nothing, counted in the summary), ``num_spec_tokens`` the largest γ the run asked or drafted. A record
whose rounds never drafted is a request with no step, written as vLLM 0.29.0 writes one (the arrays ``null``,
counted: ``without_steps``). ``--shape offline`` writes ``CompletionOutput.spec_decode_metrics`` instead, as
``dataclasses.asdict`` gives it (``vllm_metrics.dataclass_of``), beside the request's id, prompt length and
output ids. Records without rounds (``method=ar``) are skipped and counted. Our rounds stop at the output's end (an
accepted EOS ends the round), so unlike vLLM's (``runners.replay.import_vllm``: clipped) no step emits past
``completion_tokens``.

``python -m runners.replay import vllm FILE`` reads it back; a replay of the imported traces at the run's own γ
(``ScriptedPolicy`` of its ``gamma_trace``, or ``fixed`` at a fixed-γ run's γ) reproduces its rounds exactly when
every round drafted what it was allowed, ``min(γ, N − t − 1)`` (a draft model's runs of a policy that chooses γ
and never stops drafting early; a stop on confidence drafts less, and the imported trace holds ``k`` there), and
rounds that drafted nothing come only at the end (the shape has no place for one mid-generation:
``mid_generation_undrafted`` in the summary). ``tests/replay/test_vllm_export.py`` checks both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from runners.replay import vllm_metrics
from specbench.record_io import read_records, write_jsonl
from specbench.rounds import Rounds


def record_files(path: str | os.PathLike) -> list[Path]:
    """``path`` itself when a file, else every ``records.jsonl`` under it, sorted."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise ValueError(f"{path}: no such file or folder")
    return sorted(p.rglob("records.jsonl"))


#: what ``--shape`` may be: a server's response body, or the offline output
SHAPES = ("response", "offline")


def response_of(record: Mapping[str, Any], level: str = vllm_metrics.LEVEL, shape: str = "response"
                ) -> dict[str, Any] | None:
    """One record as a vLLM response, or an offline output (module docstring); None for a record without rounds."""
    if not record.get("drafted_trace"):
        return None
    rounds = Rounds.of(record)
    drafted = [d for d in rounds.drafted if d > 0]
    accepted = [a for d, a in zip(rounds.drafted, rounds.accepted, strict=True) if d > 0]
    k = max([*rounds.gamma, *rounds.drafted, 1])
    rid = f"specbench-{record.get('task')}-{record.get('prompt_id')}-{record.get('turn', 1)}"
    finish = "stop" if record.get("stop_reason") == "eos" else "length"
    if shape == "offline":
        ids = record.get("output_ids")
        out = {"request_id": rid, "prompt_tokens": int(record["prompt_tokens"])}
        if isinstance(ids, list) and len(ids) == int(record["new_tokens"]):
            out["token_ids"] = list(ids)
        else:
            out["completion_tokens"] = int(record["new_tokens"])
        return {**out, "finish_reason": finish,
                vllm_metrics.OFFLINE: vllm_metrics.dataclass_of(drafted, accepted, k, level)}
    return vllm_metrics.response(rid, str(record.get("target", "")), int(record["prompt_tokens"]),
                                 int(record["new_tokens"]), finish, vllm_metrics.block(drafted, accepted, k, level))


def export(records: Iterable[Mapping[str, Any]], level: str = vllm_metrics.LEVEL, shape: str = "response"
           ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The lines of ``records`` (those with rounds, in order) and what was left out: ``without_rounds``
    (records), ``without_steps`` (records whose rounds never drafted: a request with no step),
    ``undrafted_rounds`` (rounds that drafted nothing), ``mid_generation_undrafted`` (of them, those followed by a
    round that drafted: their place does not survive the shape)."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    lines: list[dict[str, Any]] = []
    summary = {"records": 0, "without_rounds": 0, "without_steps": 0, "undrafted_rounds": 0,
               "mid_generation_undrafted": 0}
    for record in records:
        line = response_of(record, level, shape)
        if line is None:
            summary["without_rounds"] += 1
            continue
        drafted = list(record["drafted_trace"])
        last = max((i for i, d in enumerate(drafted) if d > 0), default=-1)
        summary["records"] += 1
        summary["without_steps"] += last < 0
        summary["undrafted_rounds"] += drafted.count(0)
        summary["mid_generation_undrafted"] += drafted[:last].count(0)
        lines.append(line)
    return lines, summary


def add_parser(sub: Any) -> Any:
    """``export vllm RECORDS --out FILE`` (``runners.replay.commands``); returns the ``export`` targets, for
    ``runners.replay.export_aiperf``'s."""
    e = sub.add_parser("export", help="write a run's records in a peer's format")
    targets = e.add_subparsers(dest="target", required=True)
    s = targets.add_parser("vllm", help=f"vLLM's per-request metrics.{vllm_metrics.BLOCK} "
                                        f"({vllm_metrics.FLAG} {vllm_metrics.LEVEL})")
    s.add_argument("records", help="a records.jsonl, or a results folder searched for them")
    s.add_argument("--out", required=True, help="the JSON-lines file to write (one vLLM response per record)")
    s.add_argument("--level", choices=("summary", vllm_metrics.LEVEL), default=vllm_metrics.LEVEL,
                   help="summary leaves out the per-step arrays, as vLLM's summary level (default %(default)s)")
    s.add_argument("--shape", choices=SHAPES, default="response",
                   help=f"response: a /v1/completions body; offline: CompletionOutput.{vllm_metrics.OFFLINE} as "
                        "dataclasses.asdict gives it (default %(default)s)")
    return targets


def main(args: Any) -> int:
    """The ``export vllm`` command: read every record first, then write the file."""
    import sys

    try:
        files = record_files(args.records)
        lines, summary = export((r for f in files for r in read_records(f)), args.level, args.shape)
        if not lines:
            raise ValueError(f"{args.records}: no record with rounds (in {len(files)} records.jsonl)")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(out, lines)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    what = "responses" if args.shape == "response" else "offline outputs"
    print(f"{summary['records']} records as vLLM {what} ({summary['without_rounds']} without rounds skipped, "
          f"{summary['without_steps']} with no step); "
          f"{summary['undrafted_rounds']} rounds that drafted nothing left out as vLLM leaves them out, "
          f"{summary['mid_generation_undrafted']} of them mid-generation", file=sys.stderr)
    print(out)
    return 0
