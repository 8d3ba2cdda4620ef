"""vLLM's per-request speculative-decoding metrics: the format, read from every shape a user has and written.
The one module that knows the format; ``runners.replay.import_vllm`` turns what it
reads into traces, ``runners.replay.export_vllm`` writes a run's records in it.

**The format, as shipped** (vLLM ≥ 0.29.0, PR vllm-project/vllm#48915; read at vLLM commit ``02cf515f``,
``docs/features/speculative_decoding/acceptance_metrics.md``, "Per-Request Acceptance Metrics"). A server started
with ``--per-request-spec-decode-metrics summary|detailed`` (default ``none``: nothing collected) puts, at the top
level of a completion or chat response, ``metrics.speculative_decoding``:

* ``num_spec_tokens`` (``k``, the configured ``num_speculative_tokens``), ``num_spec_steps`` (verification
  steps), ``num_draft_tokens``, ``num_accepted_draft_tokens`` (the bonus token excluded),
  ``mean_acceptance_length`` (``1 + num_accepted_draft_tokens / num_spec_steps``), ``draft_acceptance_rate``
  (``num_accepted_draft_tokens / num_draft_tokens``), ``acceptance_histogram`` (a dense list of length ``k + 1``:
  ``[j]`` the steps that accepted exactly ``j`` drafts), and in the docs' newest text
  ``acceptance_histogram_by_draft_length`` (``{"d": dense list of d + 1}``);
* at ``detailed`` only, one entry per verification step, in order: ``per_step_drafted`` (the proposed length,
  after drafts a grammar invalidated: ``0`` is possible) and ``per_step_accepted``.

**Read in vLLM 0.29.0's source** (the wheel ``vllm-0.29.0-cp38-abi3-manylinux_2_28_x86_64.whl``):
``vllm/v1/metrics/stats.py``, the dataclass ``RequestSpecDecodeMetrics`` (``DATACLASS``: ``num_spec_tokens``,
``histogram``, ``num_draft_tokens``, ``per_step_accepted``, ``per_step_drafted``; ``new`` sizes the histogram
``k + 1``, ``observe`` counts a step, appending to the arrays at ``detailed`` only) and its ``to_dict`` (the block:
the totals from the histogram, ``mean_acceptance_length`` 1.0 and ``draft_acceptance_rate`` 0.0 without steps or
drafts, and the two arrays **only when ``per_step_accepted`` is non-empty**). The server passes it through the
pydantic ``SpeculativeDecodingMetrics`` (``vllm/entrypoints/generate/base/protocol.py``, arrays default None):
a body is dumped whole (``model_dump()``, ``vllm/entrypoints/openai/completion/api_router.py``: the arrays
``null``), a stream's usage chunk with ``exclude_none`` (absent). So a block without arrays is either the
``summary`` level or a request that never drafted; the mark of the summary level is its own step count,
``num_spec_steps > 0`` (or a histogram summing above 0) with no arrays. A request with no step (an n-gram proposer
that never matched, ``max_tokens = 1``) is read as a request that never drafted. 0.29.0 writes no
``acceptance_histogram_by_draft_length`` (the docs' newer text does; not read).

Steps with no scheduled draft tokens are left out of all of it (``Scheduler.update_from_output`` observes a step
only when draft tokens were scheduled). The block is ``null`` for ``n > 1`` (it describes one generation stream).
A stream carries it only in its final usage chunk (``choices: []``), sent when the request has
``stream_options.include_usage: true`` or the server ``--enable-force-include-usage``. Offline,
``LLM.generate``'s ``CompletionOutput.spec_decode_metrics`` (``vllm/outputs.py``) is the dataclass itself, filled on
a finished output when the engine ran with ``per_request_spec_decode_metrics`` (an ``LLM(...)`` keyword) not
``none``; written as JSON by ``dataclasses.asdict``, its arrays are ``[]`` at ``summary`` and without steps.

What the lines of a file may be (``requests_of``), one trace per generation:

* ``response``: a completion / chat response body, or a stream's final usage chunk (``metrics``, ``usage``);
* ``stream``: a whole logged SSE stream (``data: {...}`` lines, ``data: [DONE]``; several streams one after
  another): its last chunk carrying ``metrics`` (``sse_chunks``);
* ``offline``: ``CompletionOutput`` written as JSON, flat ``{"request_id", "prompt_token_ids" | "prompt_tokens",
  "token_ids" | "completion_tokens", "spec_decode_metrics"}`` (``dataclasses.asdict(output)`` plus the request's
  id and prompt) or a ``RequestOutput`` written whole (``{"request_id", "prompt_token_ids", "outputs":
  [{"token_ids", "spec_decode_metrics"}, ...]}``); ``spec_decode_metrics`` as ``dataclasses.asdict`` gives it
  (shape ``offline dataclass``) or as ``to_dict`` does (``offline``);
* ``pre-release``: the shape of a pre-merge draft of PR #48915, ``choices[i].speculative_decoding_stats`` (or a
  flat ``{id, prompt_tokens, completion_tokens, speculative_decoding_stats}``), which AIPerf's first vLLM adapter
  read (ai-dynamo/aiperf PR #1167); no released vLLM writes it.

Refused in one line, naming what the server, the engine or the request needs: the ``summary`` level (steps counted,
no per-step arrays), a ``null`` block, a response without ``metrics``, a stream without its usage chunk.

Also refused: arrays that disagree with the block's own totals (``num_spec_steps``, ``num_draft_tokens``,
``num_accepted_draft_tokens``, as vLLM's own check of the feature asserts them) or with its dense histogram.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

FLAG = "--per-request-spec-decode-metrics"
LEVEL = "detailed"
#: the block's key under a response's ``metrics``
BLOCK = "speculative_decoding"
#: ``CompletionOutput``'s attribute offline
OFFLINE = "spec_decode_metrics"
#: a pre-merge draft's per-choice key (no release writes it)
PRE_RELEASE = "speculative_decoding_stats"
START = f"start the server with {FLAG} {LEVEL}"
#: the same, offline (an ``EngineArgs`` keyword, so ``LLM``'s)
OFFLINE_START = f"pass per_request_spec_decode_metrics='{LEVEL}' to LLM(...)"
INCLUDE_USAGE = ("send stream_options.include_usage: true (or start the server with --enable-force-include-usage), "
                 "so the stream ends with its usage chunk")
#: the block's per-step arrays (``detailed``)
STEPS = ("per_step_drafted", "per_step_accepted")
#: ``RequestSpecDecodeMetrics``' fields (vLLM 0.29.0, ``vllm/v1/metrics/stats.py``), as ``dataclasses.asdict`` gives them
DATACLASS = ("num_spec_tokens", "histogram", "num_draft_tokens", "per_step_accepted", "per_step_drafted")


def fail(path: str | os.PathLike, line: int, what: str) -> ValueError:
    """The format's one-line error (the importer's type: ``ValueError``)."""
    return ValueError(f"{path}:{line}: {what}")


# --------------------------------------------------------------------------------------------- reading
def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_dataclass_dump(block: Any) -> bool:
    """Whether ``block`` is ``RequestSpecDecodeMetrics`` as ``dataclasses.asdict`` gives it (not ``to_dict``'s)."""
    return isinstance(block, Mapping) and "histogram" in block and "acceptance_histogram" not in block


def _from_dataclass(block: Mapping[str, Any], where: str, path: str | os.PathLike, line: int) -> dict[str, Any]:
    """The dataclass's fields under the block's names, the totals from its histogram as ``to_dict`` derives them."""
    hist = block["histogram"]
    if not (isinstance(hist, list) and all(_count(c) for c in hist)):
        raise fail(path, line, f"{where}.histogram is not a list of counts")
    return {**block, "acceptance_histogram": hist, "num_spec_steps": sum(hist),
            "num_accepted_draft_tokens": sum(j * c for j, c in enumerate(hist))}


def _arrays(block: Mapping[str, Any]) -> tuple[Any, Any]:
    """The per-step arrays, None where absent, null or empty (``to_dict`` leaves empty ones out, ``asdict`` keeps [])."""
    drafted, accepted = block.get(STEPS[0]), block.get(STEPS[1])
    return (None if drafted == [] else drafted), (None if accepted == [] else accepted)


def steps_of(block: Any, where: str, path: str | os.PathLike, line: int, offline: bool = False
             ) -> tuple[int, list[int], list[int]]:
    """``(k, drafted, accepted)`` of one block, checked (module docstring); a block counting no step is a request
    that never drafted, ``(k, [], [])``. ``ValueError`` in one line naming the fix (``offline``: ``LLM``'s)."""
    fix = OFFLINE_START if offline else START
    if block is None:
        why = ("vLLM fills it on a finished output that ran speculative decoding" if offline
               else "vLLM writes it only for a request of n = 1 with speculative decoding on")
        raise fail(path, line, f"{where} is null: {why}; {fix}" + ("" if offline else " and send n = 1"))
    if not isinstance(block, Mapping):
        raise fail(path, line, f"{where} is not an object")
    name = "histogram" if is_dataclass_dump(block) else "acceptance_histogram"
    if name == "histogram":
        block = _from_dataclass(block, where, path, line)
    k, hist, steps = block.get("num_spec_tokens"), block.get("acceptance_histogram"), block.get("num_spec_steps")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise fail(path, line, "num_spec_tokens is not an integer >= 1")
    if isinstance(hist, list) and (len(hist) != k + 1 or not all(_count(c) for c in hist)):
        raise fail(path, line, f"{name} is not {k + 1} counts (num_spec_tokens + 1, as vLLM sizes it)")
    if steps is None and isinstance(hist, list):
        steps = sum(hist)
    drafted, accepted = _arrays(block)
    if drafted is None and accepted is None:
        if not _count(steps):
            raise fail(path, line, f"{where} has no per_step_drafted / per_step_accepted and no num_spec_steps: "
                                   "not vLLM's block")
        if steps:
            raise fail(path, line, f"{where} counts {steps} verification steps but carries no per_step_drafted / "
                                   f"per_step_accepted (the 'summary' level): {fix}")
        drafted, accepted = [], []  # no verification step: a request that never drafted
    if not (isinstance(drafted, list) and isinstance(accepted, list) and len(drafted) == len(accepted)
            and all(_count(v) for v in [*drafted, *accepted])):
        raise fail(path, line, "per_step_drafted / per_step_accepted are not two lists of counts of one length")
    for d, a in zip(drafted, accepted, strict=True):
        if not (d <= k and a <= d):
            raise fail(path, line, f"a step drafted {d} and accepted {a} (each step drafts 0..{k}, accepts <= drafted)")
    for key, want in (("num_spec_steps", len(drafted)), ("num_draft_tokens", sum(drafted)),
                      ("num_accepted_draft_tokens", sum(accepted))):
        if block.get(key) is not None and block[key] != want:
            raise fail(path, line, f"{key} is {block[key]} but the per-step arrays say {want}")
    if isinstance(hist, list) and hist != [accepted.count(j) for j in range(k + 1)]:
        raise fail(path, line, f"{name} {hist} disagrees with per_step_accepted")
    return k, list(drafted), list(accepted)


def _request(rid: str, prompt: Any, completion: Any, shape: str, steps: tuple[int, list[int], list[int]],
             path: str | os.PathLike, line: int) -> dict[str, Any]:
    if not _count(prompt):
        raise fail(path, line, "no prompt_tokens (usage.prompt_tokens, or prompt_token_ids offline)")
    k, drafted, accepted = steps
    return {"id": rid, "prompt_tokens": prompt, "completion_tokens": completion if _count(completion) else None,
            "k": k, "drafted": drafted, "accepted": accepted, "shape": shape}


def _offline(block: Any) -> str:
    return "offline dataclass" if is_dataclass_dump(block) else "offline"


def _length(obj: Mapping[str, Any], ids: str, count: str) -> Any:
    return len(obj[ids]) if isinstance(obj.get(ids), list) else obj.get(count)


def requests_of(obj: Any, path: str | os.PathLike = "?", line: int = 0, shape: str | None = None
                ) -> list[dict[str, Any]]:
    """The generations of one line (module docstring) as ``{"id", "prompt_tokens", "completion_tokens", "k",
    "drafted", "accepted", "shape"}`` (``completion_tokens`` None when the line does not say it);
    ``ValueError`` in one line. ``shape`` names a stream's chunk (``"stream"``)."""
    if not isinstance(obj, Mapping):
        raise fail(path, line, "not a JSON object")
    usage = obj.get("usage") if isinstance(obj.get("usage"), Mapping) else {}
    rid = str(obj.get("id", obj.get("request_id", f"line{line}")))
    if "metrics" in obj:  # vLLM >= 0.29: a response, or a stream's final usage chunk
        metrics = obj["metrics"]
        if metrics is not None and (not isinstance(metrics, Mapping) or BLOCK not in metrics):
            raise fail(path, line, f"metrics holds no {BLOCK}: {START}")
        steps = steps_of(None if metrics is None else metrics[BLOCK], f"metrics.{BLOCK}", path, line)
        shape = shape or ("usage chunk" if obj.get("choices") == [] else "response")
        return [_request(rid, usage.get("prompt_tokens"), usage.get("completion_tokens"), shape, steps, path, line)]
    if OFFLINE in obj or isinstance(obj.get("outputs"), list):  # offline: CompletionOutput.spec_decode_metrics
        prompt = _length(obj, "prompt_token_ids", "prompt_tokens")
        if OFFLINE in obj:
            return [_request(rid, prompt, _length(obj, "token_ids", "completion_tokens"), _offline(obj[OFFLINE]),
                             steps_of(obj[OFFLINE], OFFLINE, path, line, offline=True), path, line)]
        outputs = [o if isinstance(o, Mapping) else {} for o in obj["outputs"]]
        if not outputs:
            raise fail(path, line, "outputs is empty")
        return [_request(rid if len(outputs) == 1 else f"{rid}/{out.get('index', i)}", prompt,
                         _length(out, "token_ids", "completion_tokens"), _offline(out.get(OFFLINE)),
                         steps_of(out.get(OFFLINE), f"outputs[{i}].{OFFLINE}", path, line, offline=True), path, line)
                for i, out in enumerate(outputs)]
    prompt = obj.get("prompt_tokens", usage.get("prompt_tokens"))
    if PRE_RELEASE in obj:  # pre-release, flat
        return [_request(rid, prompt, obj.get("completion_tokens", usage.get("completion_tokens")), "pre-release",
                         steps_of(obj[PRE_RELEASE], PRE_RELEASE, path, line), path, line)]
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and all(isinstance(c, Mapping) and PRE_RELEASE in c for c in choices):
        one = len(choices) == 1  # pre-release: one block per choice; usage counts a single choice's tokens
        return [_request(rid if one else f"{rid}/{c.get('index', i)}", prompt,
                         len(c["token_ids"]) if isinstance(c.get("token_ids"), list)
                         else (usage.get("completion_tokens") if one else None), "pre-release",
                         steps_of(c[PRE_RELEASE], f"choices[{i}].{PRE_RELEASE}", path, line), path, line)
                for i, c in enumerate(choices)]
    raise fail(path, line, f"no metrics.{BLOCK} (nor {OFFLINE} offline): {START}")


# ------------------------------------------------------------------------------------------- the files
def _sse_data(text: str) -> str | None:
    """The payload of an SSE ``data:`` line; None for any other line (blank, comment, ``event:``)."""
    return text[5:].strip() if text.startswith("data:") else None


def sse_chunks(lines: Sequence[str], path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """``(line, chunk)``: of each logged stream (ended by ``data: [DONE]``, by a chunk of another ``id``, or by
    the file's end), its last chunk carrying ``metrics`` (vLLM's final usage chunk); a stream without one is a
    one-line error saying what the request or the server needs."""
    stream: list[tuple[int, Any]] = []

    def close() -> Iterator[tuple[int, Any]]:
        if not stream:
            return
        with_metrics = [(i, c) for i, c in stream if isinstance(c, Mapping) and c.get("metrics") is not None]
        if with_metrics:
            yield with_metrics[-1]
        elif any(isinstance(c, Mapping) and c.get("usage") for _, c in stream):
            raise fail(path, stream[-1][0], f"the stream's usage chunk carries no metrics: {START}")
        else:
            raise fail(path, stream[-1][0], f"the stream ended without its usage chunk: {INCLUDE_USAGE}; {START}")
        stream.clear()

    for i, text in enumerate(lines, start=1):
        data = _sse_data(text.strip())
        if data is None:
            continue
        if data == "[DONE]":
            yield from close()
            continue
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise fail(path, i, "an SSE data line that is not JSON") from None
        if stream and isinstance(chunk, Mapping) and isinstance(stream[-1][1], Mapping) \
                and chunk.get("id") != stream[-1][1].get("id"):
            yield from close()
        stream.append((i, chunk))
    yield from close()


def read_file(path: str | os.PathLike) -> Iterator[tuple[int, Any, str | None]]:
    """``(line, object, shape)`` of a file of any of the module's shapes: a logged SSE stream (its first
    non-blank line ``data:``; shape ``"stream"``), one JSON document (a response saved whole, or a list of
    them), or JSON lines."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    first = next((s.strip() for s in lines if s.strip()), "")
    if first.startswith("data:"):
        yield from ((i, c, "stream") for i, c in sse_chunks(lines, path))
        return
    if first.startswith("[") or (first.startswith("{") and not _is_json(first)):  # one (pretty) document
        try:
            whole = json.loads("\n".join(lines))
        except json.JSONDecodeError:
            raise fail(path, 1, "not JSON (expected JSON lines, one JSON document, or a logged SSE stream)") from None
        yield from ((i, obj, None) for i, obj in enumerate(whole if isinstance(whole, list) else [whole], start=1))
        return
    for i, text in enumerate(lines, start=1):
        if text.strip():
            try:
                yield i, json.loads(text), None
            except json.JSONDecodeError:
                raise fail(path, i, "not JSON") from None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def read_requests(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every generation of a file (``read_file``, ``requests_of``), in file order."""
    return [req for i, obj, shape in read_file(path) for req in requests_of(obj, path, i, shape)]


# --------------------------------------------------------------------------------------------- writing
def _checked(drafted: Sequence[int], accepted: Sequence[int], k: int, level: str) -> None:
    if level not in ("summary", LEVEL):
        raise ValueError(f"level must be summary or {LEVEL}, got {level!r}")
    if any(not 0 <= a <= d <= k for d, a in zip(drafted, accepted, strict=True)):
        raise ValueError(f"each step must have 0 <= accepted <= drafted <= num_spec_tokens {k}")


def block(drafted: Sequence[int], accepted: Sequence[int], k: int, level: str = LEVEL) -> dict[str, Any]:
    """``metrics.speculative_decoding`` of verification steps that drafted ``drafted[i]`` and accepted
    ``accepted[i]`` tokens, as ``RequestSpecDecodeMetrics.to_dict`` makes it (module docstring; steps that drafted
    nothing are the caller's to leave out, as vLLM does): no step gives the totals 0, the histogram all zero,
    ``mean_acceptance_length`` 1.0, ``draft_acceptance_rate`` 0.0 and no per-step arrays, at either level."""
    _checked(drafted, accepted, k, level)
    steps, n_drafted, n_accepted = len(drafted), sum(drafted), sum(accepted)
    by_length: dict[str, list[int]] = {}
    for d, a in sorted(zip(drafted, accepted, strict=True)):
        by_length.setdefault(str(d), [0] * (d + 1))[a] += 1
    out = {
        "mean_acceptance_length": 1 + n_accepted / steps if steps else 1.0,
        "draft_acceptance_rate": n_accepted / n_drafted if n_drafted else 0.0,
        "acceptance_histogram": [list(accepted).count(j) for j in range(k + 1)],
        "acceptance_histogram_by_draft_length": by_length,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": n_accepted,
        "num_draft_tokens": n_drafted,
        "num_spec_tokens": k,
    }
    if level == LEVEL and steps:  # to_dict writes the arrays only when per_step_accepted is non-empty
        out.update(per_step_accepted=list(accepted), per_step_drafted=list(drafted))
    return out


def dataclass_of(drafted: Sequence[int], accepted: Sequence[int], k: int, level: str = LEVEL) -> dict[str, Any]:
    """``CompletionOutput.spec_decode_metrics`` of the same steps as ``dataclasses.asdict`` gives it
    (``DATACLASS``): the dense histogram, the drafted total, the arrays (``[]`` at ``summary``)."""
    _checked(drafted, accepted, k, level)
    detailed = level == LEVEL
    return {"num_spec_tokens": k, "histogram": [list(accepted).count(j) for j in range(k + 1)],
            "num_draft_tokens": sum(drafted), "per_step_accepted": list(accepted) if detailed else [],
            "per_step_drafted": list(drafted) if detailed else []}


def response(rid: str, model: str, prompt_tokens: int, completion_tokens: int, finish_reason: str,
             spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ``/v1/completions`` response body carrying ``spec`` as ``metrics.speculative_decoding``, the per-step
    arrays it lacks written ``null`` as vLLM's ``model_dump()`` of the body writes them (the output's text is not
    written: ``choices[0]`` holds its index and finish reason only)."""
    return {"id": rid, "object": "text_completion", "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            "metrics": {BLOCK: {**spec, **{f: spec.get(f) for f in reversed(STEPS)}}}}
