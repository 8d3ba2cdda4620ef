"""A run's records written as AIPerf's per-request records.

    python -m runners.replay export aiperf RECORDS --out FILE

RECORDS is a ``records.jsonl`` or a folder searched for them (``runners.replay.export_vllm.record_files``). Each
record becomes one line of AIPerf's ``profile_export.jsonl`` (``runners.replay.aiperf_record``: the line is
AIPerf's ``MetricRecordInfo``, the record its ``SpecDecodeAcceptanceRecord``, field for field), so that a run here
and an AIPerf run against vLLM, SGLang or TensorRT-LLM are read by the same tools:

* ``spec_decode_acceptance``: from the record's rounds (``specbench.rounds.Rounds``), the rounds that drafted
  something in order as the verification steps (an engine schedules no verification without drafts, and vLLM leaves
  such steps out: so are ours, counted in the summary), ``per_step_drafted`` / ``per_step_accepted`` filled (as
  vLLM at ``detailed``), ``num_spec_tokens`` the largest γ the run asked or drafted, ``completion_tokens`` the
  record's ``new_tokens``, ``engine`` ``"specbench"``. A record whose rounds never drafted (a prompt lookup that
  never matched) gets a record of no step, as AIPerf 0.13.0 writes one from vLLM for a request that never drafted
  (``aiperf_record`` module docstring: the histogram empty, the arrays absent); a record without rounds
  (``method=ar``: no speculative decoding, no payload) gets none.
* ``metrics``: AIPerf's per-request tags in its display units: ``request_latency`` and ``time_to_first_token``
  (``ms``; ours are ``wall_ms`` and ``ttft_ms``, ``specbench.records``: a decode timed in-process, not an HTTP
  request), ``input_sequence_length`` / ``output_sequence_length`` (``prompt_tokens`` / ``new_tokens``) and the
  record's own tags (``aiperf_record.spec_metrics``).
* ``metadata``: AIPerf's required fields; ``request_start_ns`` is 0 and ``request_end_ns`` the wall time (AIPerf
  writes wall-clock timestamps; a record keeps durations only), ``worker_id`` / ``record_processor_id``
  ``"specbench"``, ``benchmark_phase`` ``"profiling"``, ``conversation_id`` the task and prompt, ``turn_index`` the
  turn − 1, ``x_request_id`` unique in the file (the line's index, task, prompt, turn).
* ``specbench``: which cell the line comes from (pair, method, initial γ, task, category, prompt, turn), a key
  AIPerf does not write (its models allow extra keys).

``python -m runners.replay import aiperf FILE`` reads it back: the traces replay the run's rounds as those of
``export vllm`` do (the same per-step arrays; ``tests/replay/test_aiperf.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from runners.replay import aiperf_record
from runners.replay.export_vllm import record_files
from specbench.record_io import read_records, write_jsonl
from specbench.rounds import Rounds


def line_of(record: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One record as a ``profile_export.jsonl`` line (module docstring)."""
    rounds = Rounds.of(record) if record.get("drafted_trace") else None
    rec = None
    if rounds is not None:
        drafted = [d for d in rounds.drafted if d > 0]
        accepted = [a for d, a in zip(rounds.drafted, rounds.accepted, strict=True) if d > 0]
        rec = aiperf_record.record(drafted, accepted, max([*rounds.gamma, *rounds.drafted]), int(record["new_tokens"]))
    turn = int(record.get("turn") or 1)
    wall_ms = float(record.get("wall_ms") or 0.0)
    metadata = {"session_num": index, "x_request_id": f"specbench-{index}-{record.get('task')}-{record.get('prompt_id')}-{turn}",
                "conversation_id": f"{record.get('task')}-{record.get('prompt_id')}", "turn_index": turn - 1,
                "request_start_ns": 0, "request_end_ns": round(wall_ms * 1e6), "worker_id": aiperf_record.ENGINE,
                "record_processor_id": aiperf_record.ENGINE, "benchmark_phase": "profiling"}
    metrics = {"request_latency": {"value": wall_ms, "unit": "ms"},
               "input_sequence_length": {"value": int(record["prompt_tokens"]), "unit": "tokens"},
               "output_sequence_length": {"value": int(record["new_tokens"]), "unit": "tokens"}}
    if record.get("ttft_ms") is not None:
        metrics["time_to_first_token"] = {"value": float(record["ttft_ms"]), "unit": "ms"}
    if rec is not None:
        metrics.update(aiperf_record.spec_metrics(rec))
    cell = {k: record.get(k) for k in ("pair", "method", "gamma_init", "task", "category", "prompt_id", "turn")}
    return aiperf_record.line(rec, metadata, metrics, specbench=cell)


def export(records: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The lines of ``records`` (every record, in order) and what was left out: ``without_record`` (records without
    rounds), ``without_steps`` (records whose rounds never drafted: a record of no step), ``undrafted_rounds``
    (rounds that drafted nothing), ``mid_generation_undrafted`` (of them, those followed by a round that drafted:
    their place does not survive the format)."""
    lines: list[dict[str, Any]] = []
    summary = {"records": 0, "without_record": 0, "without_steps": 0, "undrafted_rounds": 0,
               "mid_generation_undrafted": 0}
    for i, record in enumerate(records):
        out = line_of(record, i)
        summary["records"] += 1
        summary["without_record"] += aiperf_record.KEY not in out
        summary["without_steps"] += aiperf_record.KEY in out and out[aiperf_record.KEY]["num_spec_steps"] == 0
        drafted = list(record.get("drafted_trace") or [])
        last = max((j for j, d in enumerate(drafted) if d > 0), default=-1)
        summary["undrafted_rounds"] += drafted.count(0)
        summary["mid_generation_undrafted"] += drafted[:last].count(0)
        lines.append(out)
    return lines, summary


def add_parser(targets: Any) -> None:
    """``export aiperf RECORDS --out FILE`` (``runners.replay.commands``; ``targets`` from ``export_vllm.add_parser``)."""
    s = targets.add_parser("aiperf", help=f"AIPerf's per-request records ({aiperf_record.PROFILE_EXPORT} lines "
                                          "carrying SpecDecodeAcceptanceRecord)")
    s.add_argument("records", help="a records.jsonl, or a results folder searched for them")
    s.add_argument("--out", required=True, help=f"the JSON-lines file to write (e.g. .../{aiperf_record.PROFILE_EXPORT})")


def main(args: Any) -> int:
    """The ``export aiperf`` command: read every record first, then write the file."""
    import sys

    try:
        files = record_files(args.records)
        lines, summary = export(r for f in files for r in read_records(f))
        if not lines:
            raise ValueError(f"{args.records}: no record (in {len(files)} records.jsonl)")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(out, lines)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{summary['records']} records as AIPerf lines ({summary['without_record']} without rounds: "
          f"no {aiperf_record.KEY}; {summary['without_steps']} with no step); "
          f"{summary['undrafted_rounds']} rounds that drafted nothing left out, "
          f"{summary['mid_generation_undrafted']} of them mid-generation", file=sys.stderr)
    print(out)
    return 0
