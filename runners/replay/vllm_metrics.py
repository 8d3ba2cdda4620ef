"""vLLM's per-request speculative-decoding metrics: the format, read from every shape a user has and written
(issue 49, items 1 and 2). The one module that knows the format; ``runners.replay.import_vllm`` turns what it
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

Steps with no scheduled draft tokens are left out of all of it. The block is ``null`` for ``n > 1`` (it
describes one generation stream). A stream carries it only in its final usage chunk (``choices: []``), sent
when the request has ``stream_options.include_usage: true`` or the server ``--enable-force-include-usage``.
Offline, ``LLM.generate``'s ``CompletionOutput.spec_decode_metrics`` holds the same fields (not read in vLLM's
source here: the snapshot was too large to fetch and the index holds an older ``vllm/outputs.py``; the field
names are those of the docs, which users' scripts dumping it confirm).

What the lines of a file may be (``requests_of``), one trace per generation:

* ``response``: a completion / chat response body, or a stream's final usage chunk (``metrics``, ``usage``);
* ``stream``: a whole logged SSE stream (``data: {...}`` lines, ``data: [DONE]``; several streams one after
  another): its last chunk carrying ``metrics`` (``sse_chunks``);
* ``offline``: ``CompletionOutput.spec_decode_metrics`` written as JSON, flat ``{"request_id",
  "prompt_token_ids" | "prompt_tokens", "token_ids" | "completion_tokens", "spec_decode_metrics"}`` or a
  ``RequestOutput`` written whole (``{"request_id", "prompt_token_ids", "outputs": [{"token_ids",
  "spec_decode_metrics"}, ...]}``);
* ``pre-release``: the shape of a pre-merge draft of PR #48915, ``choices[i].speculative_decoding_stats`` (or a
  flat ``{id, prompt_tokens, completion_tokens, speculative_decoding_stats}``), which AIPerf's first vLLM adapter
  read (ai-dynamo/aiperf PR #1167); no released vLLM writes it.

Refused in one line, naming what the server or the request needs: the ``summary`` level (no per-step arrays),
a ``null`` block, a response without ``metrics``, a stream without its usage chunk.

Also refused: arrays that disagree with the block's own totals (``num_spec_steps``, ``num_draft_tokens``,
``num_accepted_draft_tokens``, as vLLM's own check of the feature asserts them).
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
INCLUDE_USAGE = ("send stream_options.include_usage: true (or start the server with --enable-force-include-usage), "
                 "so the stream ends with its usage chunk")
#: the block's per-step arrays (``detailed``)
STEPS = ("per_step_drafted", "per_step_accepted")


def fail(path: str | os.PathLike, line: int, what: str) -> ValueError:
    """The format's one-line error (the importer's type: ``ValueError``)."""
    return ValueError(f"{path}:{line}: {what}")


# --------------------------------------------------------------------------------------------- reading
def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def steps_of(block: Any, where: str, path: str | os.PathLike, line: int) -> tuple[int, list[int], list[int]]:
    """``(k, drafted, accepted)`` of one block, checked (module docstring); ``ValueError`` in one line."""
    if block is None:
        raise fail(path, line, f"{where} is null: vLLM writes it only for a request of n = 1 with speculative "
                               f"decoding on; {START} and send n = 1")
    if not isinstance(block, Mapping):
        raise fail(path, line, f"{where} is not an object")
    drafted, accepted, k = block.get(STEPS[0]), block.get(STEPS[1]), block.get("num_spec_tokens")
    if drafted is None or accepted is None:
        raise fail(path, line, f"{where} has no per_step_drafted / per_step_accepted (the 'summary' level): {START}")
    if not (isinstance(drafted, list) and isinstance(accepted, list) and len(drafted) == len(accepted)
            and all(_count(v) for v in [*drafted, *accepted])):
        raise fail(path, line, "per_step_drafted / per_step_accepted are not two lists of counts of one length")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise fail(path, line, "num_spec_tokens is not an integer >= 1")
    for d, a in zip(drafted, accepted, strict=True):
        if not (d <= k and a <= d):
            raise fail(path, line, f"a step drafted {d} and accepted {a} (each step drafts 0..{k}, accepts <= drafted)")
    for key, want in (("num_spec_steps", len(drafted)), ("num_draft_tokens", sum(drafted)),
                      ("num_accepted_draft_tokens", sum(accepted))):
        if block.get(key) is not None and block[key] != want:
            raise fail(path, line, f"{key} is {block[key]} but the per-step arrays say {want}")
    return k, list(drafted), list(accepted)


def _request(rid: str, prompt: Any, completion: Any, shape: str, steps: tuple[int, list[int], list[int]],
             path: str | os.PathLike, line: int) -> dict[str, Any]:
    if not _count(prompt):
        raise fail(path, line, "no prompt_tokens (usage.prompt_tokens, or prompt_token_ids offline)")
    k, drafted, accepted = steps
    return {"id": rid, "prompt_tokens": prompt, "completion_tokens": completion if _count(completion) else None,
            "k": k, "drafted": drafted, "accepted": accepted, "shape": shape}


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
            return [_request(rid, prompt, _length(obj, "token_ids", "completion_tokens"), "offline",
                             steps_of(obj[OFFLINE], OFFLINE, path, line), path, line)]
        outputs = [o if isinstance(o, Mapping) else {} for o in obj["outputs"]]
        if not outputs:
            raise fail(path, line, "outputs is empty")
        return [_request(rid if len(outputs) == 1 else f"{rid}/{out.get('index', i)}", prompt,
                         _length(out, "token_ids", "completion_tokens"), "offline",
                         steps_of(out.get(OFFLINE), f"outputs[{i}].{OFFLINE}", path, line), path, line)
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
def block(drafted: Sequence[int], accepted: Sequence[int], k: int, level: str = LEVEL) -> dict[str, Any]:
    """``metrics.speculative_decoding`` of verification steps that drafted ``drafted[i]`` and accepted
    ``accepted[i]`` tokens, by the docs' definitions (module docstring; steps that drafted nothing are the
    caller's to leave out, as vLLM does). A request with no step: the totals 0, the histogram all zero (the docs'
    words), and ``mean_acceptance_length`` 1.0, ``draft_acceptance_rate`` 0.0 (vLLM's values there not read)."""
    if level not in ("summary", LEVEL):
        raise ValueError(f"level must be summary or {LEVEL}, got {level!r}")
    if any(not 0 <= a <= d <= k for d, a in zip(drafted, accepted, strict=True)):
        raise ValueError(f"each step must have 0 <= accepted <= drafted <= num_spec_tokens {k}")
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
    if level == LEVEL:
        out.update(per_step_accepted=list(accepted), per_step_drafted=list(drafted))
    return out


def response(rid: str, model: str, prompt_tokens: int, completion_tokens: int, finish_reason: str,
             spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ``/v1/completions`` response body carrying ``spec`` as ``metrics.speculative_decoding`` (the output's
    text is not written: ``choices[0]`` holds its index and finish reason only)."""
    return {"id": rid, "object": "text_completion", "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            "metrics": {BLOCK: dict(spec)}}
