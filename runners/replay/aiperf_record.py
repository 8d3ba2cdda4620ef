"""NVIDIA AIPerf's engine-neutral per-request acceptance record: the format, read and written.
The one module that knows it; ``runners.replay.export_aiperf`` writes a run's records in it,
``runners.replay.import_aiperf`` reads it into the lab (traces, or acceptance statistics only).

**The record, as AIPerf defines it** (read in AIPerf 0.13.0, the PyPI wheel ``aiperf-0.13.0-py3-none-any.whl``:
``aiperf/common/models/spec_decode_models.py``, class ``SpecDecodeAcceptanceRecord``; the same fields at
ai-dynamo/aiperf commit ``0786f0ca``, ``src/aiperf/common/models/spec_decode_models.py``). One per request
(``FIELDS``):

* ``engine`` (who produced it: ``"vllm"``, ``"tensorrt_llm"``; ours write ``"specbench"``);
* ``mean_acceptance_length`` = ``1 + num_accepted_draft_tokens / num_spec_steps`` (the bonus token included);
* ``draft_acceptance_rate`` = ``num_accepted_draft_tokens / num_draft_tokens`` (a fraction, the bonus excluded);
* ``acceptance_histogram``: sparse ``{j: steps that accepted exactly j drafts}``, zero buckets omitted, the keys
  strings on disk (JSON) and integers once read;
* ``num_accepted_draft_tokens``, ``num_draft_tokens``, ``num_spec_steps``; ``num_spec_tokens`` (``k``, or None
  where the engine has no fixed bound); ``completion_tokens`` (the response's usage, or None);
* ``per_step_accepted`` / ``per_step_drafted``: ordered, one entry per verification step, or None when the engine
  reports no per-step data (vLLM fills them at ``--per-request-spec-decode-metrics detailed``, for a request with a
  step).

Its validator (``_check_aggregate_invariants``, ``_check_per_step_invariants``) holds: the histogram's counts sum
to ``num_spec_steps``, its j-weighted sum is ``num_accepted_draft_tokens``, accepted <= drafted overall and per
step, each per-step array has ``num_spec_steps`` entries summing to its total. The vLLM adapter
(``aiperf/spec_decode/vllm_adapter.py``, ``VLLMSpecDecodeAdapter.adapt``) also refuses a dense histogram whose
length is not ``num_spec_tokens + 1`` (no bucket past ``k``). ``check`` enforces all of them.

**On disk** (``aiperf/post_processors/record_export_jsonl_writer.py``, ``RecordExportJSONLWriter``; the line is
``aiperf/common/models/record_models.py``, ``MetricRecordInfo``): ``profile_export.jsonl`` in the artifacts
folder, written at ``--export-level records`` (the default) or ``raw``, one line per request
``{"metadata": {...}, "metrics": {tag: {"value", "unit"}}, "spec_decode_acceptance": {the record}, "error": ...}``,
dumped with ``exclude_none=True``: a field that is None is absent, and ``spec_decode_acceptance`` is absent when
the request carried no acceptance payload. The per-request metric tags of the record
(``aiperf/metrics/types/spec_decode_metrics.py``) are ``SPEC_METRICS``; the draft acceptance rate is written there
as a percentage, and ``spec_decode_accepted_per_verified`` is absent where it is undefined (no step, no draft:
``NoMetricValue``).

**A request with no verification step gets a record.** AIPerf's docstrings say it gets none, but its code writes
one: vLLM sends the block for every request (0.29.0's ``RequestSpecDecodeMetrics.to_dict``: the histogram all
zero, ``mean_acceptance_length`` 1.0, ``draft_acceptance_rate`` 0.0, the per-step arrays left out), the
adapter's signature keys are present "including the zero-step case", and the record's validator accepts zero
steps. So the record holds an empty histogram, zero totals and no per-step arrays; ``record`` writes the same for
steps ``[]``, and ``steps`` reads it as a request that never drafted (the order of no step is known).

**The engines behind AIPerf, and per-step data.** vLLM: per-step arrays at ``detailed`` (``runners.replay.
vllm_metrics`` reads vLLM's own responses). TensorRT-LLM (AIPerf's ``src/aiperf/spec_decode/trtllm_adapter.py``
at commit ``038b7df1``, after 0.13.0, ``TRTLLMSpecDecodeAdapter``): a per-choice ``speculative_decoding`` block
(``total_accepted_draft_tokens``, ``total_draft_tokens``, ``acceptance_rate``, ``acceptance_histogram``,
``num_spec_steps``, ``num_spec_tokens``; no mean acceptance length, derived from the counts); "per_step_* are never
populated: TRT-LLM keeps per-position vectors, not per-step sequences": a histogram only. SGLang: AIPerf 0.13.0 has
no per-request adapter for it (it reads SGLang's Prometheus ``sglang:spec_accept_rate`` / ``spec_accept_length``
only, ``aiperf/exporters/sglang/speculative_decoding_console_exporter.py``); SGLang's own ``/generate`` response
``meta_info`` (sgl-project/sglang commit ``001067ff``, ``python/sglang/srt/managers/tokenizer_manager.py``,
``TokenizerManager._calculate_spec_decoding_metrics``) carries ``spec_verify_ct``, ``spec_num_correct_drafts``,
``spec_num_proposed_drafts`` (= verify steps × (``speculative_num_draft_tokens`` − 1)), ``spec_accept_rate``,
``spec_accept_length`` (= ``completion_tokens / spec_verify_ct``: it counts the prefill's token, unlike the record's
``1 + accepted / steps``) and ``spec_correct_drafts_histogram`` (alias ``spec_accept_histogram``): a histogram only,
no per-step sequence. ``records_of`` reads both engines' payloads into the record (``engine`` ``"tensorrt_llm"`` /
``"sglang"``, the per-step arrays None); they serve acceptance-length statistics (``stats``), never a per-step
replay.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: ``SpecDecodeAcceptanceRecord``'s fields, in its order
FIELDS = ("engine", "mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram",
          "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_steps", "num_spec_tokens", "completion_tokens",
          "per_step_accepted", "per_step_drafted")
#: ``MetricRecordInfo``'s key for the record
KEY = "spec_decode_acceptance"
#: AIPerf's per-request file (``aiperf/config/artifacts.py``, ``PROFILE_EXPORT_JSONL_FILE``)
PROFILE_EXPORT = "profile_export.jsonl"
ENGINE = "specbench"
#: the per-request metric tags of the record and their display units (``spec_decode_metrics.py``)
SPEC_METRICS = {"spec_decode_acceptance_length": "ratio", "spec_decode_draft_acceptance_rate": "%",
                "spec_decode_accepted_per_verified": "ratio", "spec_decode_steps": "count",
                "spec_decode_accepted_draft_tokens": "tokens", "spec_decode_draft_tokens": "tokens"}
STEPS = ("per_step_accepted", "per_step_drafted")
WHERE = ("run AIPerf at --export-level records (the default) against a server reporting per-request "
         "spec-decode metrics (vLLM: --per-request-spec-decode-metrics detailed)")


def fail(path: str | os.PathLike, line: int, what: str) -> ValueError:
    """The format's one-line error (the importer's type: ``ValueError``)."""
    return ValueError(f"{path}:{line}: {what}")


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


# --------------------------------------------------------------------------------------------- writing
def record(drafted: Sequence[int], accepted: Sequence[int], k: int | None, completion_tokens: int | None = None,
           engine: str = ENGINE, per_step: bool = True) -> dict[str, Any]:
    """The record of verification steps that drafted ``drafted[i]`` and accepted ``accepted[i]`` tokens, by the
    definitions of the module docstring (steps that drafted nothing are the caller's to leave out, as the engines
    do); the histogram's keys integers (``line`` writes them as JSON does). ``per_step=False``: the per-step
    arrays None, as an engine without per-step data reports it; no step: the record AIPerf writes from vLLM for a
    request that never drafted (module docstring)."""
    if any(not 0 <= a <= d for d, a in zip(drafted, accepted, strict=True)) or \
            (k is not None and max(drafted, default=0) > k):
        raise ValueError(f"each step must have 0 <= accepted <= drafted <= num_spec_tokens {k}")
    steps, n_drafted, n_accepted = len(drafted), sum(drafted), sum(accepted)
    arrays = per_step and steps > 0  # vLLM's to_dict leaves empty arrays out, so AIPerf's record has None
    return {
        "engine": engine,
        "mean_acceptance_length": 1 + n_accepted / steps if steps else 1.0,
        "draft_acceptance_rate": n_accepted / n_drafted if n_drafted else 0.0,
        "acceptance_histogram": dict(sorted(Counter(accepted).items())),
        "num_accepted_draft_tokens": n_accepted,
        "num_draft_tokens": n_drafted,
        "num_spec_steps": steps,
        "num_spec_tokens": k,
        "completion_tokens": completion_tokens,
        "per_step_accepted": list(accepted) if arrays else None,
        "per_step_drafted": list(drafted) if arrays else None,
    }


def spec_metrics(rec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The record's per-request metrics as AIPerf's ``metrics`` holds them (``{tag: {"value", "unit"}}``);
    ``spec_decode_accepted_per_verified`` left out without a step or a draft, as AIPerf leaves it."""
    steps, acc, drafted = rec["num_spec_steps"], rec["num_accepted_draft_tokens"], rec["num_draft_tokens"]
    values = {"spec_decode_acceptance_length": rec["mean_acceptance_length"],
              "spec_decode_draft_acceptance_rate": 100.0 * rec["draft_acceptance_rate"],
              "spec_decode_accepted_per_verified": (acc + steps) / (drafted + steps) if drafted + steps else None,
              "spec_decode_steps": steps, "spec_decode_accepted_draft_tokens": acc,
              "spec_decode_draft_tokens": drafted}
    return {tag: {"value": values[tag], "unit": unit} for tag, unit in SPEC_METRICS.items() if values[tag] is not None}


def line(rec: Mapping[str, Any] | None, metadata: Mapping[str, Any], metrics: Mapping[str, Any],
         **extra: Any) -> dict[str, Any]:
    """One ``profile_export.jsonl`` line (``MetricRecordInfo``): None fields left out as AIPerf's writer leaves
    them, the histogram's keys strings; ``extra`` keys after AIPerf's (its models allow extra fields)."""
    out: dict[str, Any] = {"metadata": dict(metadata), "metrics": dict(metrics)}
    if rec is not None:
        out[KEY] = {f: ({str(j): c for j, c in rec[f].items()} if f == "acceptance_histogram" else rec[f])
                    for f in FIELDS if rec.get(f) is not None}
    return {**out, **extra}


# --------------------------------------------------------------------------------------------- reading
def check(raw: Any, path: str | os.PathLike = "?", line_no: int = 0) -> dict[str, Any]:
    """A record (module docstring) checked by AIPerf's own invariants, every field present (None where absent),
    the histogram's keys integers; ``ValueError`` in one line."""
    if not isinstance(raw, Mapping):
        raise fail(path, line_no, f"{KEY} is not an object")
    missing = [f for f in FIELDS[:7] if f not in raw]
    if missing:
        raise fail(path, line_no, f"{KEY} lacks {', '.join(missing)} (not AIPerf's SpecDecodeAcceptanceRecord)")
    rec = {f: raw.get(f) for f in FIELDS}
    hist = rec["acceptance_histogram"]
    try:
        rec["acceptance_histogram"] = {int(j): c for j, c in hist.items()} if isinstance(hist, Mapping) else None
    except ValueError:
        rec["acceptance_histogram"] = None
    hist = rec["acceptance_histogram"]
    if hist is None or not all(_count(j) and _count(c) for j, c in hist.items()):
        raise fail(path, line_no, "acceptance_histogram is not a map of accepted-draft counts to step counts")
    for f in ("num_accepted_draft_tokens", "num_draft_tokens", "num_spec_steps"):
        if not _count(rec[f]):
            raise fail(path, line_no, f"{f} is not a count")
    for f in ("num_spec_tokens", "completion_tokens"):
        if rec[f] is not None and not _count(rec[f]):
            raise fail(path, line_no, f"{f} is not a count")
    steps, acc, drafted, k = rec["num_spec_steps"], rec["num_accepted_draft_tokens"], rec["num_draft_tokens"], \
        rec["num_spec_tokens"]
    if sum(hist.values()) != steps:
        raise fail(path, line_no, f"acceptance_histogram counts sum to {sum(hist.values())}, num_spec_steps is {steps}")
    if sum(j * c for j, c in hist.items()) != acc:
        raise fail(path, line_no, f"acceptance_histogram's j-weighted sum is not num_accepted_draft_tokens {acc}")
    if acc > drafted:
        raise fail(path, line_no, f"num_accepted_draft_tokens {acc} exceeds num_draft_tokens {drafted}")
    if k is not None and hist and max(hist) > k:
        raise fail(path, line_no, f"a step accepted {max(hist)} drafts, past num_spec_tokens {k}")
    for f, total in zip(STEPS, (acc, drafted), strict=True):
        arr = rec[f]
        if arr is None:
            continue
        if not (isinstance(arr, list) and all(_count(v) for v in arr) and len(arr) == steps and sum(arr) == total):
            raise fail(path, line_no, f"{f} is not {steps} counts summing to {total}")
    if rec[STEPS[0]] is not None and rec[STEPS[1]] is not None:
        if any(a > d or (k is not None and d > k) for a, d in zip(rec[STEPS[0]], rec[STEPS[1]], strict=True)):
            raise fail(path, line_no, "a step accepted more drafts than it proposed, or proposed past num_spec_tokens")
    return rec


def steps(rec: Mapping[str, Any]) -> tuple[list[int], list[int]] | None:
    """``(drafted, accepted)`` of a checked record in order, what a per-step replay needs: both arrays, or ``([],
    [])`` for a record of no step (a request that never drafted); None for a histogram only."""
    if rec.get(STEPS[0]) is not None and rec.get(STEPS[1]) is not None:
        return list(rec[STEPS[1]]), list(rec[STEPS[0]])
    return ([], []) if rec.get("num_spec_steps") == 0 else None


def per_step(rec: Mapping[str, Any]) -> bool:
    """Whether the record's steps are known in order (``steps``)."""
    return steps(rec) is not None


def _trtllm(block: Mapping[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]:
    """TensorRT-LLM's per-choice ``speculative_decoding`` as the record (AIPerf's ``TRTLLMSpecDecodeAdapter``)."""
    hist, steps, acc = block.get("acceptance_histogram"), block.get("num_spec_steps"), \
        block.get("total_accepted_draft_tokens")
    if not (isinstance(hist, list) and _count(steps) and steps > 0 and _count(acc)):
        raise ValueError("speculative_decoding (TensorRT-LLM) lacks acceptance_histogram / num_spec_steps > 0 / "
                         "total_accepted_draft_tokens")
    k = block.get("num_spec_tokens")
    if k is not None and (not _count(k) or len(hist) != k + 1):  # AIPerf's inflate_dense_histogram
        raise ValueError(f"acceptance_histogram has {len(hist)} buckets, num_spec_tokens + 1 is {k + 1}")
    return {"engine": "tensorrt_llm", "mean_acceptance_length": 1 + acc / steps,
            "draft_acceptance_rate": block.get("acceptance_rate"),
            "acceptance_histogram": {j: c for j, c in enumerate(hist) if c != 0},
            "num_accepted_draft_tokens": acc, "num_draft_tokens": block.get("total_draft_tokens"),
            "num_spec_steps": steps, "num_spec_tokens": block.get("num_spec_tokens"),
            "completion_tokens": usage.get("completion_tokens")}


def _sglang(meta: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's ``meta_info`` as the record (module docstring; SGLang's ``spec_accept_length`` is not the record's
    ``mean_acceptance_length`` and is not read)."""
    steps = meta.get("spec_verify_ct")
    acc = meta.get("spec_num_correct_drafts", meta.get("spec_accepted_drafts"))
    drafted = meta.get("spec_num_proposed_drafts", meta.get("spec_proposed_drafts"))
    hist = meta.get("spec_correct_drafts_histogram", meta.get("spec_accept_histogram"))
    if not (_count(steps) and steps > 0 and _count(acc) and _count(drafted) and isinstance(hist, list)):
        raise ValueError("meta_info (SGLang) lacks spec_verify_ct > 0 / spec_num_correct_drafts / "
                         "spec_num_proposed_drafts / spec_correct_drafts_histogram")
    return {"engine": "sglang", "mean_acceptance_length": 1 + acc / steps,
            "draft_acceptance_rate": acc / drafted if drafted else 0.0,
            "acceptance_histogram": {j: c for j, c in enumerate(hist) if c != 0},
            "num_accepted_draft_tokens": acc, "num_draft_tokens": drafted, "num_spec_steps": steps,
            "num_spec_tokens": drafted // steps if drafted % steps == 0 else None,
            "completion_tokens": meta.get("completion_tokens")}


def _metric(metrics: Any, tag: str) -> Any:
    value = metrics.get(tag) if isinstance(metrics, Mapping) else None
    return value.get("value") if isinstance(value, Mapping) else None


def records_of(obj: Any, path: str | os.PathLike = "?", line_no: int = 0) -> list[dict[str, Any]]:
    """The requests of one line as ``{"id", "record", "shape", "prompt_tokens"}`` (``prompt_tokens`` None where
    the line does not say it); an AIPerf line without a record gives none. ``ValueError`` in one line."""
    if not isinstance(obj, Mapping):
        raise fail(path, line_no, "not a JSON object")
    if "metadata" in obj and "metrics" in obj:  # AIPerf's profile_export.jsonl (MetricRecordInfo)
        meta = obj["metadata"] if isinstance(obj["metadata"], Mapping) else {}
        if obj.get(KEY) is None:
            return []
        rid = str(meta.get("x_request_id") or f"session{meta.get('session_num', line_no)}")
        isl = _metric(obj["metrics"], "input_sequence_length")
        return [{"id": rid, "record": check(obj[KEY], path, line_no), "shape": "aiperf profile_export",
                 "prompt_tokens": int(isl) if isinstance(isl, (int, float)) else None}]
    if "engine" in obj and "acceptance_histogram" in obj:  # the record alone
        return [{"id": f"line{line_no}", "record": check(obj, path, line_no), "shape": "aiperf record",
                 "prompt_tokens": None}]
    rid = str(obj.get("id", f"line{line_no}"))
    usage = obj.get("usage") if isinstance(obj.get("usage"), Mapping) else {}
    if isinstance(obj.get("meta_info"), Mapping) and "spec_verify_ct" in obj["meta_info"]:  # SGLang /generate
        meta = obj["meta_info"]
        try:
            rec = _sglang(meta)
        except ValueError as exc:
            raise fail(path, line_no, str(exc)) from None
        return [{"id": str(meta.get("id", rid)), "record": check(rec, path, line_no), "shape": "sglang meta_info",
                 "prompt_tokens": meta.get("prompt_tokens")}]
    choices = obj.get("choices")
    if isinstance(choices, list) and any(isinstance(c, Mapping) and isinstance(c.get("speculative_decoding"), Mapping)
                                         and "total_draft_tokens" in c["speculative_decoding"] for c in choices):
        out = []
        for i, c in enumerate(choices):
            try:
                rec = _trtllm(c["speculative_decoding"], usage)
            except (KeyError, TypeError, ValueError) as exc:
                raise fail(path, line_no, f"choices[{i}]: {exc}") from None
            out.append({"id": rid if len(choices) == 1 else f"{rid}/{i}", "record": check(rec, path, line_no),
                        "shape": "tensorrt_llm choice", "prompt_tokens": usage.get("prompt_tokens")})
        return out
    if isinstance(obj.get("metrics"), Mapping) and "speculative_decoding" in obj["metrics"]:
        raise fail(path, line_no, "a vLLM response: read it with `python -m runners.replay import vllm`")
    raise fail(path, line_no, f"no {KEY} (AIPerf), meta_info.spec_verify_ct (SGLang) nor "
                              "choices[].speculative_decoding (TensorRT-LLM)")


def read_records(path: str | os.PathLike) -> tuple[list[dict[str, Any]], int]:
    """Every request of a JSON-lines file (``records_of``), in file order, and the number of AIPerf lines without
    a record (requests that carried no acceptance payload, or failed)."""
    out: list[dict[str, Any]] = []
    without = 0
    with open(path, encoding="utf-8") as fh:
        for i, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                raise fail(path, i, "not JSON (expected JSON lines: AIPerf's profile_export.jsonl)") from None
            reqs = records_of(obj, path, i)
            without += not reqs
            out += reqs
    if not out:
        raise ValueError(f"{path}: no request carries {KEY}: {WHERE}")
    return out, without


# ------------------------------------------------------------------------------------------ statistics
def stats(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Acceptance-length statistics of records, by AIPerf's run-level definitions
    (``aiperf/metrics/types/spec_decode_metrics.py``): ``acceptance_length`` the mean of the per-request
    ``mean_acceptance_length`` (``spec_decode_acceptance_length``, each request weighted equally),
    ``token_weighted_acceptance_length`` = 1 + Σ accepted / Σ steps (``spec_decode_token_weighted_acceptance_
    length``), ``overall_draft_acceptance_rate`` = Σ accepted / Σ drafted (a fraction), ``pooled_histogram`` the
    histograms summed (``ProfileResults.pooled_spec_decode_acceptance_histogram``)."""
    recs = list(records)
    steps = sum(r["num_spec_steps"] for r in recs)
    acc = sum(r["num_accepted_draft_tokens"] for r in recs)
    drafted = sum(r["num_draft_tokens"] for r in recs)
    pooled: Counter[int] = Counter()
    for r in recs:
        pooled.update(r["acceptance_histogram"])
    return {
        "requests": len(recs), "engines": dict(sorted(Counter(r["engine"] for r in recs).items())),
        "total_spec_decode_steps": steps, "total_accepted_draft_tokens": acc, "total_draft_tokens": drafted,
        "acceptance_length": sum(r["mean_acceptance_length"] for r in recs) / len(recs) if recs else None,
        "token_weighted_acceptance_length": 1 + acc / steps if steps else None,
        "overall_draft_acceptance_rate": acc / drafted if drafted else None,
        "pooled_histogram": {str(j): pooled[j] for j in sorted(pooled)},
        "with_per_step": sum(per_step(r) for r in recs),
    }
