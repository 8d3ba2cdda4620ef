"""AIPerf's per-request acceptance records in the lab: traces, or acceptance statistics only.

    python -m runners.replay import aiperf PATH --out DIR [--stats-only] [--pair NAME] [--task NAME]

PATH is JSON lines of any shape ``runners.replay.aiperf_record.records_of`` reads: AIPerf's ``profile_export.jsonl``
(``MetricRecordInfo`` lines carrying ``spec_decode_acceptance``), bare ``SpecDecodeAcceptanceRecord`` lines, SGLang's
``/generate`` responses (``meta_info``), TensorRT-LLM's responses (``choices[].speculative_decoding``).

**Per-step replay (the default).** A record carrying ``per_step_drafted`` / ``per_step_accepted`` (AIPerf behind
vLLM at ``--per-request-spec-decode-metrics detailed``, or ``export aiperf``) is the same data as vLLM's per-step
arrays and becomes a trace by the same rule (``runners.replay.import_vllm.to_trace``: exact where a step saw a
rejection, censored inside fully accepted steps, a last step past ``completion_tokens`` clipped; its docstring says
what the steps can and cannot tell). ``k`` is ``num_spec_tokens``, or the longest step where the engine reports no
fixed bound (counted: ``k_from_steps``). A record of no verification step (AIPerf writes one for a vLLM request
that never drafted, its arrays absent: ``aiperf_record.steps``) is a request that never drafted, every position
proposing nothing (counted: ``zero_step_requests``). The prompt's length is the line's ``input_sequence_length``
metric; a line without it gets 0 (counted: ``prompt_tokens_unknown``; a latency model then charges no prefill). A
record of steps with only the histogram (vLLM's ``summary`` level, SGLang, TensorRT-LLM: no per-step sequence
reaches AIPerf from them) is refused in one line naming ``--stats-only``: the order of the steps, which a replay
needs, is not in a histogram.

**``--stats-only``.** Every record, per-step or not, is checked and its acceptance statistics written
(``acceptance.json``: ``runners.replay.aiperf_record.stats``, AIPerf's run-level definitions, pooled and per engine,
and one row per request), no trace: what a histogram can answer (mean acceptance length with the bonus token, draft
acceptance rate, the distribution of accepted drafts per step), and nothing a policy could be replayed on.

The whole file is read and checked before anything is written: a failure writes nothing.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from runners.replay import aiperf_record
from runners.replay.import_specdecode_bench import CAP_RULE, file_sha256
from runners.replay.import_vllm import VllmTrace, to_trace, write_lab_traces
from runners.replay.trace import TRACE_FILE
from runners.replay.trace_base import TRACE_VERSION

STATS_FILE = "acceptance.json"
STATS_ONLY = "--stats-only"


class AiperfTrace(VllmTrace):
    """A trace imported from AIPerf's per-step counts (``import_vllm``'s rule, module docstring)."""

    kind = "aiperf_steps"


def _source(path: str | os.PathLike, reqs: list[dict[str, Any]], without: int) -> dict[str, Any]:
    return {"format": "AIPerf SpecDecodeAcceptanceRecord (aiperf 0.13.0)", "file": str(path),
            "sha256": file_sha256(path), "shapes": dict(sorted(Counter(r["shape"] for r in reqs).items())),
            "lines_without_record": without}


def import_stats(path: str | os.PathLike) -> dict[str, Any]:
    """``acceptance.json`` of a file (module docstring, ``--stats-only``)."""
    reqs, without = aiperf_record.read_records(path)
    recs = [r["record"] for r in reqs]
    by_engine = {e: aiperf_record.stats(r for r in recs if r["engine"] == e) for e in sorted({r["engine"] for r in recs})}
    rows = [{"id": r["id"], "engine": r["record"]["engine"], "shape": r["shape"],
             **{f: r["record"][f] for f in aiperf_record.FIELDS[1:9]},
             "acceptance_histogram": {str(j): c for j, c in r["record"]["acceptance_histogram"].items()},
             "per_step": aiperf_record.per_step(r["record"])} for r in reqs]
    return {"kind": "acceptance_stats", "stats_only": True, "source": _source(path, reqs, without),
            "pooled": aiperf_record.stats(recs), "by_engine": by_engine, "requests": rows}


def import_traces(path: str | os.PathLike, pair: str = "aiperf", task: str | None = None, target: str = "",
                  draft: str = "") -> tuple[list[VllmTrace], dict[str, Any]]:
    """The traces of a file of AIPerf records carrying per-step arrays, in file order, and what ``meta.json`` says
    of them; a record with only a histogram is refused in one line (module docstring)."""
    reqs, without = aiperf_record.read_records(path)
    task = task or Path(path).stem
    names = {"pair": pair, "task": task, "category": task, "target": target, "draft": draft}
    traces: list[VllmTrace] = []
    k_from_steps = unknown_prompt = zero_step = 0
    for r in reqs:
        rec = r["record"]
        known = aiperf_record.steps(rec)
        if known is None:
            raise ValueError(f"{path}: request {r['id']} ({rec['engine']}, {r['shape']}) carries only an acceptance "
                             f"histogram, no per_step_drafted / per_step_accepted: a per-step replay needs their order "
                             f"(vLLM at --per-request-spec-decode-metrics detailed); pass {STATS_ONLY} for "
                             "acceptance-length statistics")
        drafted, accepted = known
        k = rec["num_spec_tokens"] or max([*drafted, 1])
        k_from_steps += rec["num_spec_tokens"] is None
        unknown_prompt += r["prompt_tokens"] is None
        zero_step += not drafted
        req = {"id": r["id"], "prompt_tokens": r["prompt_tokens"] or 0, "completion_tokens": rec["completion_tokens"],
               "k": k, "drafted": drafted, "accepted": accepted, "shape": r["shape"]}
        traces.append(to_trace(req, AiperfTrace, **names))
    censored = sum(len(tr.extra["censored"]) for tr in traces)
    meta = {
        "trace_version": TRACE_VERSION, "kind": AiperfTrace.kind, "pair": pair, "task": task,
        "gamma_max": max(tr.gamma_max for tr in traces), "cap_rule": CAP_RULE,
        "rule": "runners.replay.import_vllm.to_trace (the same per-step arrays as vLLM's)",
        "source": _source(path, reqs, without), "acceptance": aiperf_record.stats(r["record"] for r in reqs),
        "censored_positions": censored, "exact_positions": sum(tr.n - 1 for tr in traces) - censored,
        "clipped_steps": sum(tr.extra["clipped_tokens"] > 0 for tr in traces),
        "k_from_steps": k_from_steps, "prompt_tokens_unknown": unknown_prompt, "zero_step_requests": zero_step,
        "requests": len(traces), "tokens": sum(tr.n for tr in traces),
    }
    return traces, meta


def add_parser(sources: Any) -> None:
    """``import aiperf PATH ...`` (``runners.replay.commands``)."""
    s = sources.add_parser("aiperf", help="AIPerf's per-request SpecDecodeAcceptanceRecord (profile_export.jsonl), "
                                          "SGLang's meta_info, TensorRT-LLM's speculative_decoding")
    s.add_argument("path", help=f"JSON lines: AIPerf's {aiperf_record.PROFILE_EXPORT}, bare records, SGLang or "
                                "TensorRT-LLM responses")
    s.add_argument("--out", required=True, help=f"folder for trace.jsonl and meta.json (or {STATS_FILE})")
    s.add_argument(STATS_ONLY, action="store_true",
                   help="write acceptance-length statistics only (histograms suffice), no traces")
    s.add_argument("--pair", default="aiperf", help="the pair's name in the traces (default %(default)s)")
    s.add_argument("--task", help="the workload's name (default: the file's stem)")
    s.add_argument("--target", default="", help="the target model's name, for the record")
    s.add_argument("--draft", default="", help="the proposer's name, for the record")


def main(args: Any) -> int:
    """The ``import aiperf`` command: traces (or statistics) written, what the data cannot drive said."""
    import sys

    from specbench.record_io import write_json_atomic

    folder = Path(args.out)
    try:
        if args.stats_only:
            out = import_stats(args.path)
            write_json_atomic(folder / STATS_FILE, out)
            pooled = out["pooled"]
            print(f"{pooled['requests']} requests ({pooled['with_per_step']} with per-step arrays), "
                  f"{pooled['total_spec_decode_steps']} verification steps; statistics only, no traces",
                  file=sys.stderr)
            print(folder / STATS_FILE)
            return 0
        traces, meta = import_traces(args.path, args.pair, args.task, args.target, args.draft)
        meta = write_lab_traces(folder, traces, meta)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{meta['requests']} requests, {meta['tokens']} tokens; {meta['exact_positions']} positions exact, "
          f"{meta['censored_positions']} censored (rule {CAP_RULE}); {meta['clipped_steps']} last steps clipped; "
          f"{meta['prompt_tokens_unknown']} without a prompt length; {meta['zero_step_requests']} never drafted",
          file=sys.stderr)
    for label, why in meta["not_replayable"].items():
        print(f"not replayable: {label}: {why}", file=sys.stderr)
    print(folder / TRACE_FILE)
    return 0
