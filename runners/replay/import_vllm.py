"""vLLM's per-request, per-step acceptance as the lab's traces.

    python -m runners.replay import vllm PATH --out DIR [--pair NAME] [--task NAME]

vLLM ≥ 0.29.0 started with ``--per-request-spec-decode-metrics detailed`` reports, per request, one entry per
verification step in order: ``per_step_drafted`` (the tokens proposed at that step) and ``per_step_accepted`` (of
them, accepted; the bonus token excluded), and ``num_spec_tokens`` (``k``, the configured draft length). Steps that
drafted nothing are left out; a request with no step at all (its block without arrays, counting no step) is a
request that never drafted: every position proposes nothing (counted: ``zero_step_requests``). Where it is and
every shape PATH may hold (a response body, a stream's final usage chunk, a logged SSE stream,
``CompletionOutput.spec_decode_metrics`` offline as ``dataclasses.asdict`` or ``to_dict`` writes it, the
pre-release ``speculative_decoding_stats``), with the failures and their one-line errors:
``runners.replay.vllm_metrics``.

**What the steps say, and what they cannot.** Step ``s`` started at position ``t_s`` (``t_1 = 1``: the prefill
emitted the first token; ``t_{s+1} = t_s + a_s + 1``), drafted ``d_s`` and accepted ``a_s``. Assuming the draft's
proposal at a position depends on the prefix only (a draft model's greedy chain; EAGLE, whose features are the
target's states of that prefix; only approximately for n-gram lookup, whose match may move), a step starting at
``t_s + j`` (``0 ≤ j ≤ a_s``) would see the same tokens agree up to ``t_s + a_s``:

* ``a_s < d_s`` (a rejection was observed): its acceptance is **exact** for any draft length, ``a_s − j``;
* ``a_s = d_s`` (everything drafted was accepted): it is **censored** at ``a_s − j`` (at least that many; what
  follows was never drafted); ``d_s = 0`` (a step whose drafts a grammar invalidated) proposes nothing, in place.

The trace (``VllmTrace``, replayed as a ``LookupTrace``: stored proposals, no features) holds at each position
``t`` a proposal of the agreeing tokens followed, at an exact position, by rejected tokens up to
``min(k, N − 1 − t)``; at a censored position, the agreeing tokens only. **Rule ``cap``** (``CAP_RULE``): a
policy asking more than the proposal holds drafts what it holds — ``k`` at an exact position, as the engine
configured with ``k`` would; at a censored one, fewer than it asked, and an acceptance that may be too low.
Both are counted for every replay (``capped_rounds``, ``censored_rounds``: rounds whose budget exceeded the
position's ``exact_to``, stored per position in the trace's ``extra``), never refused. The output's token ids
are not in the stats: ``PLACEHOLDER`` ids. ``N`` is the generation's completion tokens (``usage.completion_tokens``,
offline the output's ``token_ids``; else ``1 + Σ (a_s + 1)``); tokens not covered by the steps (steps that drafted
nothing, which vLLM leaves out, and the last token) are placed after the last step as positions proposing nothing
(``undrafted``): their place in the generation is not in the data, only their number.

**A last step cut by a stop (clipped).** vLLM counts a step's accepted drafts before the output is cut at a stop
token or at ``max_tokens`` (vllm-project/vllm#56101, v0.29.0: an EOS inside the accepted prefix still counts the
drafts after it), so the steps may emit more than ``N``. Only the last step can be so cut (the generation ends
there): it is clipped to the ``N − t_S`` tokens it emitted — inside the output every budget is answered, all its
drafts agreeing (exact) — and counted (``clipped_steps`` in ``meta.json``, ``clipped_tokens`` in the trace's
``extra``), not refused. The cut assumes no step that drafted nothing came before (vLLM does not say where they
were; with some, the cut is larger by their number). Steps before the last that already emit ``N`` tokens or
more are refused: no stop cuts two steps.

What the data cannot drive: a policy whose ``needs`` name a draft feature (confidence, entropy, margin) — the
stats hold counts only — is listed by ``not_replayable`` (in ``meta.json`` and on the command line). Costs are
not in the data: replay with a latency model of the engine (``--latency``; ``runners.replay.specdecode_bench``
has SpecDecode-Bench's fitted vLLM/H100 model of Llama-3.1-8B). The whole file is read and checked before
anything is written: a failure writes nothing.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.replay import vllm_metrics
from runners.replay.import_specdecode_bench import (
    CAP_RULE,
    PLACEHOLDER,
    REJECTED,
    AcceptanceTrace,
    file_sha256,
    lab_methods,
    not_replayable,
)
from runners.replay.replay import ReplayResult
from runners.replay.trace import META_FILE, TRACE_FILE, write_traces
from runners.replay.trace_base import TRACE_VERSION
from specbench.rounds import advance

SOURCE = (f"vLLM per-request metrics.{vllm_metrics.BLOCK} ({vllm_metrics.FLAG} {vllm_metrics.LEVEL}): "
          "per_step_drafted, per_step_accepted")


class VllmTrace(AcceptanceTrace):
    """A trace imported from vLLM's per-step counts (module docstring)."""

    kind = "vllm_steps"


def to_trace(req: Mapping[str, Any], cls: type[VllmTrace] = VllmTrace, **names: Any) -> VllmTrace:
    """One generation's trace (module docstring), its last step clipped to ``completion_tokens``; ``cls`` names
    the source (``runners.replay.import_aiperf``'s records carry the same per-step arrays)."""
    k, drafted, accepted = req["k"], req["drafted"], req["accepted"]
    covered = 1 + sum(a + 1 for a in accepted)
    n = req["completion_tokens"] if isinstance(req["completion_tokens"], int) else covered
    last_start = covered - (accepted[-1] + 1) if accepted else 1
    if n < covered and last_start >= n:
        raise ValueError(f"request {req['id']}: completion_tokens {n}, but the steps before the last already "
                         f"emitted {last_start} tokens (only the last step can be cut by a stop)")
    clipped = max(0, covered - n)
    tokens = [PLACEHOLDER] * n
    proposals: list[list[int]] = []
    exact_to: list[int] = []
    censored: list[int] = []
    for s, (d, a) in enumerate(zip(drafted, accepted, strict=True)):
        t0 = len(proposals) + 1  # the step's start position
        cut = clipped and s == len(drafted) - 1
        for j in range(a + 1):
            t = t0 + j
            if t > n - 1:
                break
            agree = a - j
            if d == 0:  # nothing left to draft (a grammar invalidated the drafts): proposes nothing, in place
                proposals.append([])
                exact_to.append(k)
            elif cut:  # cut by the stop: every budget inside the output agrees (exact)
                proposals.append(tokens[t:n - 1])
                exact_to.append(k)
            elif a < d:  # a rejection observed: exact at any length, drafted up to the engine's k
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
    return cls(prompt_id=str(req["id"]), turn=1, prompt_tokens=int(req["prompt_tokens"]), max_new_tokens=n,
                     gamma_max=k, eos=(), tokens=tokens, proposals=proposals, stop_reason="length",
                     extra={"tokens": "placeholder", "exact_to": exact_to, "censored": censored,
                            "undrafted": undrafted, "steps": len(drafted), "clipped_tokens": clipped,
                            "shape": req.get("shape")}, **names)


def censored_rounds(res: ReplayResult, trace: VllmTrace) -> int:
    """Rounds of a replay on ``trace`` whose budget ``min(γ, N − t − 1)`` exceeded the position's ``exact_to``
    (module docstring, rule ``cap``): drafted less than asked at a censored position, or ``k`` at an exact one."""
    exact = trace.extra.get("exact_to") or []
    t, n, out = 1, res.new_tokens, 0
    for gamma, accepted in zip(res.rounds.gamma, res.rounds.accepted):
        if t <= len(exact):
            out += min(gamma, n - t - 1) > exact[t - 1]
        t = advance(t, accepted, n)
    return out


def import_traces(path: str | os.PathLike, pair: str = "vllm", task: str | None = None,
                  target: str = "", draft: str = "") -> tuple[list[VllmTrace], dict[str, Any]]:
    """The traces of a file of vLLM's per-request metrics (any shape of ``runners.replay.vllm_metrics``), in file
    order, and what ``meta.json`` says of them."""
    reqs = vllm_metrics.read_requests(path)
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
        "source": {"engine": "vLLM", "fields": SOURCE, "file": str(path), "sha256": file_sha256(path),
                   "shapes": dict(sorted(Counter(str(r["shape"]) for r in reqs).items()))},
        "censored_positions": censored,
        "exact_positions": sum(tr.n - 1 for tr in traces) - censored,
        "clipped_steps": sum(tr.extra["clipped_tokens"] > 0 for tr in traces),
        "zero_step_requests": sum(not r["drafted"] for r in reqs),
        "cut": {"token_ids": "not in the stats: placeholders",
                "undrafted_tokens": sum(tr.extra["undrafted"] for tr in traces),
                "undrafted_place": "after the last step (vLLM leaves steps without a draft out)",
                "clipped_tokens": sum(tr.extra["clipped_tokens"] for tr in traces),
                "clipped": "a last step emitting past completion_tokens (cut by a stop or max_tokens), clipped"},
        "requests": len(traces), "tokens": sum(tr.n for tr in traces),
    }
    return traces, meta


def add_parser(sources: Any) -> None:
    """``import vllm PATH ...`` (``runners.replay.commands``)."""
    s = sources.add_parser("vllm", help=f"vLLM's per-request metrics.{vllm_metrics.BLOCK} "
                                        f"({vllm_metrics.FLAG} {vllm_metrics.LEVEL})")
    s.add_argument("path", help="vLLM responses as JSON lines (bodies or final usage chunks), a logged SSE stream, "
                                f"or CompletionOutput.{vllm_metrics.OFFLINE} written as JSON lines "
                                "(dataclasses.asdict)")
    s.add_argument("--out", required=True, help="folder for trace.jsonl and meta.json")
    s.add_argument("--pair", default="vllm", help="the pair's name in the traces (default %(default)s)")
    s.add_argument("--task", help="the workload's name (default: the file's stem)")
    s.add_argument("--target", default="", help="the target model's name, for the record")
    s.add_argument("--draft", default="", help="the proposer's name, for the record")


def write_lab_traces(out: str | os.PathLike, traces: Sequence[Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """``trace.jsonl`` and ``meta.json`` of an import of per-step acceptance (vLLM's, AIPerf's) into ``out``; the meta
    written (``status`` complete, and the lab's methods these traces cannot drive, ``not_replayable``)."""
    from specbench.record_io import write_json_atomic

    meta = {**meta, "not_replayable": not_replayable(lab_methods()), "status": "complete"}
    write_traces(Path(out) / TRACE_FILE, traces)
    write_json_atomic(Path(out) / META_FILE, meta)
    return meta


def main(args: Any) -> int:
    """The ``import vllm`` command: write the traces, say what the data cannot drive."""
    import sys

    folder = Path(args.out)
    try:
        traces, meta = import_traces(args.path, args.pair, args.task, args.target, args.draft)
        meta = write_lab_traces(folder, traces, meta)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{meta['requests']} requests, {meta['tokens']} tokens; {meta['exact_positions']} positions exact, "
          f"{meta['censored_positions']} censored (rule {CAP_RULE}); {meta['cut']['undrafted_tokens']} undrafted; "
          f"{meta['clipped_steps']} last steps clipped ({meta['cut']['clipped_tokens']} tokens past the stop); "
          f"{meta['zero_step_requests']} requests never drafted",
          file=sys.stderr)
    for label, why in meta["not_replayable"].items():
        print(f"not replayable: {label}: {why}", file=sys.stderr)
    print(folder / TRACE_FILE)
    return 0
