"""vLLM's per-request, per-step acceptance as the lab's traces (issue 41, item 1).

    python -m runners.replay import vllm PATH --out DIR [--pair NAME] [--task NAME]

vLLM (``vllm serve ... --speculative-config ... --per-request-spec-decode-stats detailed``; the issue calls the
flag ``--per-request-spec-decode-metrics``) attaches to every response choice ``speculative_decoding_stats``:
``num_spec_tokens`` (``k``, the configured draft length), ``num_spec_steps``, ``num_draft_tokens``,
``num_accepted_draft_tokens``, ``acceptance_histogram``, and, at ``detailed``, one entry per verification step
in order: ``per_step_drafted`` (the tokens proposed at that step) and ``per_step_accepted`` (of them, accepted;
the bonus token excluded). Steps that drafted nothing are left out. (vLLM's docs, "Per-Request Acceptance
Metrics", ``docs/features`` of ``vllm-project/vllm``; the fields summed over requests are the Prometheus counters
``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total``.)

PATH is a JSON-lines file, one response per line: an OpenAI-style completion or chat response (``choices[i].
speculative_decoding_stats``, ``usage.prompt_tokens`` / ``completion_tokens``; one trace per choice), or a flat
object ``{"id", "prompt_tokens", "completion_tokens", "speculative_decoding_stats"}`` (what a client logs).

**What the steps say, and what they cannot.** Step ``s`` started at position ``t_s`` (``t_1 = 1``: the prefill
emitted the first token; ``t_{s+1} = t_s + a_s + 1``), drafted ``d_s`` and accepted ``a_s``. Assuming the draft's
proposal at a position depends on the prefix only (a draft model's greedy chain; EAGLE, whose features are the
target's states of that prefix; only approximately for n-gram lookup, whose match may move), a step starting at
``t_s + j`` (``0 ≤ j ≤ a_s``) would see the same tokens agree up to ``t_s + a_s``:

* ``a_s < d_s`` (a rejection was observed): its acceptance is **exact** for any draft length, ``a_s − j``;
* ``a_s = d_s`` (everything drafted was accepted): it is **censored** at ``a_s − j`` (at least that many; what
  follows was never drafted).

The trace (``VllmTrace``, replayed as a ``LookupTrace``: stored proposals, no features) holds at each position
``t`` a proposal of the agreeing tokens followed, at an exact position, by rejected tokens up to
``min(k, N − 1 − t)``; at a censored position, the agreeing tokens only. **Rule ``cap``** (``CAP_RULE``): a
policy asking more than the proposal holds drafts what it holds — ``k`` at an exact position, as the engine
configured with ``k`` would; at a censored one, fewer than it asked, and an acceptance that may be too low.
Both are counted for every replay (``capped_rounds``, ``censored_rounds``: rounds whose budget exceeded the
position's ``exact_to``, stored per position in the trace's ``extra``), never refused. The output's token ids
are not in the stats: ``PLACEHOLDER`` ids. ``N`` is the choice's completion tokens (``usage.completion_tokens``
for a response of one choice, else the choice's ``token_ids`` when present, else ``1 + Σ (a_s + 1)``); tokens
not covered by the steps (steps that drafted nothing, which vLLM leaves out, and the last token) are placed
after the last step as positions proposing nothing (``undrafted``): their place in the generation is not in the
data, only their number.

What the data cannot drive: a policy whose ``needs`` name a draft feature (confidence, entropy, margin) — the
stats hold counts only — is listed by ``not_replayable`` (in ``meta.json`` and on the command line). Costs are
not in the data: replay with a latency model of the engine (``--latency``; ``runners.replay.specdecode_bench``
has SpecDecode-Bench's fitted vLLM/H100 model of Llama-3.1-8B).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.replay.import_specdecode_bench import (
    CAP_RULE,
    PLACEHOLDER,
    REJECTED,
    AcceptanceTrace,
    file_sha256,
    json_lines,
    lab_methods,
    not_replayable,
)
from runners.replay.replay import ReplayResult
from runners.replay.trace import META_FILE, TRACE_FILE, write_traces
from runners.replay.trace_base import TRACE_VERSION

SOURCE = "vLLM per-request speculative_decoding_stats (detailed): per_step_drafted, per_step_accepted"
STATS = "speculative_decoding_stats"


class VllmTrace(AcceptanceTrace):
    """A trace imported from vLLM's per-step counts (module docstring)."""

    kind = "vllm_steps"


def _fail(path: str | os.PathLike, line: int, what: str) -> ValueError:
    return ValueError(f"{path}:{line}: {what} (expected a vLLM response with choices[].{STATS} at "
                      "--per-request-spec-decode-stats detailed, or {id, prompt_tokens, completion_tokens, "
                      f"{STATS}}})")


def _counts(stats: Any, path: str | os.PathLike, line: int) -> tuple[int, list[int], list[int]]:
    """``(k, drafted, accepted)`` of one choice's stats, checked."""
    if not isinstance(stats, Mapping):
        raise _fail(path, line, f"{STATS} is not an object (was the server started with the flag?)")
    drafted, accepted, k = stats.get("per_step_drafted"), stats.get("per_step_accepted"), stats.get("num_spec_tokens")
    if drafted is None or accepted is None:
        raise _fail(path, line, "no per_step_drafted / per_step_accepted (the flag's 'summary' level: use 'detailed')")
    ints = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in [*drafted, *accepted])
    if not (isinstance(drafted, list) and isinstance(accepted, list) and ints and len(drafted) == len(accepted)):
        raise _fail(path, line, "per_step_drafted / per_step_accepted are not two lists of counts of one length")
    if not isinstance(k, int) or k < 1:
        raise _fail(path, line, "num_spec_tokens is not an integer >= 1")
    for d, a in zip(drafted, accepted, strict=True):
        if not (1 <= d <= k and a <= d):
            raise _fail(path, line, f"a step drafted {d} and accepted {a} (each step drafts 1..{k}, accepts <= drafted)")
    return k, list(drafted), list(accepted)


def parse_line(obj: Any, path: str | os.PathLike = "?", line: int = 0) -> list[dict[str, Any]]:
    """The choices of one line as ``{"id", "prompt_tokens", "completion_tokens", "k", "drafted", "accepted"}``
    (``completion_tokens`` None when the line does not say it for that choice); ``ValueError`` in one line."""
    if not isinstance(obj, Mapping):
        raise _fail(path, line, "not a JSON object")
    usage = obj.get("usage") if isinstance(obj.get("usage"), Mapping) else {}
    prompt = obj.get("prompt_tokens", usage.get("prompt_tokens"))
    if not isinstance(prompt, int) or prompt < 0:
        raise _fail(path, line, "no prompt_tokens (usage.prompt_tokens)")
    rid = str(obj.get("id", f"line{line}"))
    if STATS in obj:
        k, drafted, accepted = _counts(obj[STATS], path, line)
        return [{"id": rid, "prompt_tokens": prompt, "completion_tokens": obj.get("completion_tokens",
                 usage.get("completion_tokens")), "k": k, "drafted": drafted, "accepted": accepted}]
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _fail(path, line, f"neither {STATS} nor choices")
    out = []
    for i, choice in enumerate(choices):
        if not isinstance(choice, Mapping):
            raise _fail(path, line, f"choice {i} is not an object")
        k, drafted, accepted = _counts(choice.get(STATS), path, line)
        ids = choice.get("token_ids")
        n = len(ids) if isinstance(ids, list) else (usage.get("completion_tokens") if len(choices) == 1 else None)
        out.append({"id": rid if len(choices) == 1 else f"{rid}/{choice.get('index', i)}", "prompt_tokens": prompt,
                    "completion_tokens": n, "k": k, "drafted": drafted, "accepted": accepted})
    return out


def to_trace(req: Mapping[str, Any], **names: Any) -> VllmTrace:
    """One choice's trace (module docstring)."""
    k, drafted, accepted = req["k"], req["drafted"], req["accepted"]
    covered = 1 + sum(a + 1 for a in accepted)
    n = req["completion_tokens"] if isinstance(req["completion_tokens"], int) else covered
    if n < covered:
        raise ValueError(f"request {req['id']}: completion_tokens {n} < the {covered} tokens its steps emitted")
    tokens = [PLACEHOLDER] * n
    proposals: list[list[int]] = []
    exact_to: list[int] = []
    censored: list[int] = []
    for d, a in zip(drafted, accepted, strict=True):
        t0 = len(proposals) + 1  # the step's start position
        for j in range(a + 1):
            t = t0 + j
            if t > n - 1:
                break
            agree = a - j
            if a < d:  # a rejection observed: exact at any length, drafted up to the engine's k
                length = min(k, n - 1 - t)
                proposals.append(tokens[t:t + min(agree, length)] + [REJECTED] * max(0, length - agree))
                exact_to.append(k)
            else:  # censored: what follows was never drafted
                proposals.append(tokens[t:t + agree])
                exact_to.append(agree)
                censored.append(t)
    undrafted = (n - 1) - len(proposals)
    proposals += [[] for _ in range(undrafted)]  # nothing drafted there, as the engine drafted nothing
    exact_to += [k] * undrafted
    return VllmTrace(prompt_id=str(req["id"]), turn=1, prompt_tokens=int(req["prompt_tokens"]), max_new_tokens=n,
                     gamma_max=k, eos=(), tokens=tokens, proposals=proposals, stop_reason="length",
                     extra={"tokens": "placeholder", "exact_to": exact_to, "censored": censored,
                            "undrafted": undrafted, "steps": len(drafted)}, **names)


def censored_rounds(res: ReplayResult, trace: VllmTrace) -> int:
    """Rounds of a replay on ``trace`` whose budget ``min(γ, N − t − 1)`` exceeded the position's ``exact_to``
    (module docstring, rule ``cap``): drafted less than asked at a censored position, or ``k`` at an exact one."""
    exact = trace.extra.get("exact_to") or []
    t, n, out = 1, res.new_tokens, 0
    for gamma, accepted in zip(res.rounds.gamma, res.rounds.accepted):
        if t <= len(exact):
            out += min(gamma, n - t - 1) > exact[t - 1]
        t = min(t + accepted + 1, n)
    return out


def import_traces(path: str | os.PathLike, pair: str = "vllm", task: str | None = None,
                  target: str = "", draft: str = "") -> tuple[list[VllmTrace], dict[str, Any]]:
    """The traces of a file of vLLM responses, in file order, and what ``meta.json`` says of them."""
    reqs = [req for i, obj in json_lines(path, _fail) for req in parse_line(obj, path, i)]
    if not reqs:
        raise ValueError(f"{path}: no response")
    ks = sorted({r["k"] for r in reqs})
    task = task or Path(path).stem
    names = {"pair": pair, "task": task, "category": task, "target": target, "draft": draft}
    traces = [to_trace(r, **names) for r in reqs]
    censored = sum(len(tr.extra["censored"]) for tr in traces)
    meta = {
        "trace_version": TRACE_VERSION, "kind": VllmTrace.kind, "pair": pair, "task": task, "gamma_max": max(ks),
        "num_spec_tokens": ks, "cap_rule": CAP_RULE,
        "cap": (f"exact for any gamma where a step saw a rejection (drafted up to k = {max(ks)}); censored inside "
                "fully accepted steps (drafts what is known): counted by censored_rounds, not refused"),
        "source": {"engine": "vLLM", "fields": SOURCE, "file": str(path), "sha256": file_sha256(path)},
        "censored_positions": censored,
        "exact_positions": sum(tr.n - 1 for tr in traces) - censored,
        "cut": {"token_ids": "not in the stats: placeholders",
                "undrafted_tokens": sum(tr.extra["undrafted"] for tr in traces),
                "undrafted_place": "after the last step (vLLM leaves steps without a draft out)"},
        "requests": len(traces), "tokens": sum(tr.n for tr in traces),
    }
    return traces, meta


def add_parser(sources: Any) -> None:
    """``import vllm PATH ...`` (``runners.replay.cli``)."""
    s = sources.add_parser("vllm", help="vLLM responses with per-step speculative_decoding_stats (detailed)")
    s.add_argument("path", help="a JSON-lines file of vLLM responses (or {id, prompt_tokens, completion_tokens, "
                                f"{STATS}}} objects)")
    s.add_argument("--out", required=True, help="folder for trace.jsonl and meta.json")
    s.add_argument("--pair", default="vllm", help="the pair's name in the traces (default %(default)s)")
    s.add_argument("--task", help="the workload's name (default: the file's stem)")
    s.add_argument("--target", default="", help="the target model's name, for the record")
    s.add_argument("--draft", default="", help="the proposer's name, for the record")


def main(args: Any) -> int:
    """The ``import vllm`` command: write the traces, say what the data cannot drive."""
    import sys

    from specbench.record_io import write_json_atomic

    try:
        traces, meta = import_traces(args.path, args.pair, args.task, args.target, args.draft)
        meta = {**meta, "not_replayable": not_replayable(lab_methods()), "status": "complete"}
        folder = Path(args.out)
        write_traces(folder / TRACE_FILE, traces)
        write_json_atomic(folder / META_FILE, meta)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{meta['requests']} requests, {meta['tokens']} tokens; {meta['exact_positions']} positions exact, "
          f"{meta['censored_positions']} censored (rule {CAP_RULE}); {meta['cut']['undrafted_tokens']} undrafted",
          file=sys.stderr)
    for label, why in meta["not_replayable"].items():
        print(f"not replayable: {label}: {why}", file=sys.stderr)
    print(folder / TRACE_FILE)
    return 0


def write_fixture(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]]) -> Path:
    """A JSON-lines file of flat ``{id, prompt_tokens, completion_tokens, speculative_decoding_stats}`` objects (the
    tests' fixture writer: vLLM's documented fields, written by the project)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
    return p
