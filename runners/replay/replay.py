"""Replay: any γ policy at any initial γ on a greedy trace, without a model; the oracle bound.

``replay(trace, policy, latency)`` re-enacts ``runners.engine.speculative.SpeculativeRunner`` round
by round on a ``runners.replay.trace.Trace``, with *exactly* its semantics:

* the prefill emits ``x_1``; ``policy.begin_prompt()`` first;
* while the last token is not an EOS and fewer than ``max_new_tokens`` tokens exist:
  ``γ = policy.next_gamma()``; ``budget = min(γ, remaining − 1)``; if ``budget > 0`` the
  draft proposes the first tokens of its greedy rollout from the current position, asking
  ``policy.stop_drafting(step)`` after each (a ``DraftStep`` with the features the policy
  ``needs``, from the trace) and stopping after an EOS (an EOS is not asked about, as in
  ``ModelDrafter``) or at ``budget``; a prompt lookup trace proposes its stored proposal and
  never asks (as ``PromptLookupDrafter``); greedy verification accepts the
  longest prefix equal to ``x`` (``accepted = min(d, a_t)``) and adds the target's token; an
  accepted EOS ends the sequence; ``policy.observe(RoundOutcome(γ, d, accepted,
  confidences, eos_accepted, steps, costs))`` — for every round, ``d = 0`` rounds included;
  the costs (``draft_ms``, ``verify_ms``, ``round_ms``) are the latency model's prediction,
  given only to a policy that ``needs`` ``COSTS`` (``None`` without a latency model);
* one policy object is used for all the prompts of a job, in the job's order (state that
  carries across prompts, e.g. ``hf_heuristic``'s γ, carries here too); a job's warm-up is
  followed by a fresh policy, so a replayed job starts from a fresh one.

The rounds are the real ones as far as the trace's rollouts are the real draft's: exactly
for fp32/bf16 drafts up to float rounding (tested on tiny models, every policy), only
statistically for a draft whose outputs depend on how its input is chunked (the default
pair's int8-dynamic draft; see ``runners.replay.trace``).

With a ``LatencyModel`` (``specbench.latency``, calibrated by ``runners.replay.latency``) each round is
charged by its one rule (``specbench.latency.round_parts``): the target's forward of
``d + 1`` tokens at context ``P + t − 1``; the draft's ``d`` forwards (the first feeds what
the draft's cache has not seen: its prefill in the first drafting round, else 1–3 tokens;
the cache is tracked exactly as ``ModelDrafter`` keeps it); ``round_overhead_ms``; plus the
target's prefill (the TTFT). Predicted ``tokens_per_s = new_tokens / wall``.

The oracle (the exact best any γ policy can do on a trace under a latency model) is
``runners.replay.oracle``; a grid of methods × initial γ, its rows and the best fixed γ in hindsight,
``runners.replay.grid``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from methods.base import COSTS, DraftStep, GammaPolicy, RoundOutcome, policy_needs
from runners.replay.trace import Trace
from specbench.latency import LatencyModel, round_parts, seen_after
from specbench.records import pooled_tokens_per_s


@dataclass
class ReplayResult:
    """One prompt turn replayed: the rounds, and the predicted times (None without a latency model)."""

    trace: Trace
    new_tokens: int
    stop_reason: str
    gamma_trace: list[int] = field(default_factory=list)
    drafted_trace: list[int] = field(default_factory=list)
    accepted_trace: list[int] = field(default_factory=list)
    confidence_trace: list[list[float]] = field(default_factory=list)
    discarded_trace: list[int] = field(default_factory=list)
    round_ms: list[float] = field(default_factory=list)
    ttft_ms: float | None = None
    wall_ms: float | None = None

    @property
    def tokens_per_s(self) -> float | None:
        return pooled_tokens_per_s([self.new_tokens], [self.wall_ms]) if self.wall_ms else None


def max_new(trace: Trace, max_new_tokens: int | None) -> int:
    m = trace.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
    if not 1 <= m <= trace.max_new_tokens:
        raise ValueError(f"max_new_tokens must be in [1, {trace.max_new_tokens}] (the trace's), got {m}")
    return m


# ---------------------------------------------------------------------- replay

def replay(trace: Trace, policy: GammaPolicy, latency: LatencyModel | None = None,
           max_new_tokens: int | None = None) -> ReplayResult:
    """The rounds ``SpeculativeRunner`` would run with ``policy`` on this prompt (module docstring).
    Calls ``policy.begin_prompt()`` first, like the runner."""
    m = max_new(trace, max_new_tokens)
    x = trace.tokens[:m]
    n, p = len(x), trace.prompt_tokens
    eos = set(trace.eos)
    needs = policy_needs(policy)
    asks = getattr(trace, "kind", "model") == "model"  # prompt lookup never asks stop_drafting
    policy.begin_prompt()
    res = ReplayResult(trace, n, "eos" if x[-1] in eos else "max_new_tokens")
    t, seen = 1, 0
    if latency is not None:
        res.ttft_ms = latency.target_prefill_ms(p)
    while x[t - 1] not in eos and t < m:
        remaining = m - t
        gamma = int(policy.next_gamma())
        budget = min(gamma, remaining - 1)
        toks: list[int] = []
        confs: list[float] = []
        steps: list[DraftStep] = []
        if budget > 0:
            r_toks, r_feats = trace.rollout_steps(t, budget)
            if not asks:
                toks = r_toks
            for i, (tok, feats) in enumerate(zip(r_toks, r_feats) if asks else ()):
                toks.append(tok)
                wanted = {k: v for k, v in feats.items() if k in needs}
                if "confidence" in wanted:
                    confs.append(wanted["confidence"])
                step = DraftStep(i + 1, tok, budget=budget, **wanted)
                steps.append(step)
                if tok in eos or policy.stop_drafting(step):
                    break
        proposed = len(toks)
        if proposed:  # the policy may verify only a prefix (a peek: none), as in SpeculativeRunner
            keep = int(policy.verify_count(proposed))
            if not 0 <= keep <= proposed:
                raise ValueError(f"verify_count returned {keep} for {proposed} proposed tokens")
            toks, confs, steps = toks[:keep], confs[:keep], steps[:keep]
        d = len(toks)
        accepted = min(d, trace.agreement(t))
        new_t = min(t + accepted + 1, n)
        costs: dict[str, float] = {}
        if latency is not None:
            draft_ms, verify_ms = round_parts(latency, p, t, seen, d, proposed)
            res.round_ms.append(verify_ms + latency.round_overhead_ms + draft_ms)
            if COSTS in needs:
                costs = {"draft_ms": draft_ms, "verify_ms": verify_ms, "round_ms": res.round_ms[-1]}
        seen = seen_after(p, t, seen, proposed, accepted, new_t)
        res.gamma_trace.append(gamma)
        res.drafted_trace.append(d)
        res.accepted_trace.append(accepted)
        res.confidence_trace.append(list(confs))
        res.discarded_trace.append(proposed - d)
        eos_accepted = any(tok in eos for tok in toks[:accepted])
        policy.observe(RoundOutcome(gamma, d, accepted, tuple(confs), eos_accepted, tuple(steps), **costs,
                                    discarded=proposed - d))
        t = new_t
    if t != n:
        raise AssertionError(f"replay ended at position {t}, the trace has {n} tokens")
    if latency is not None:
        res.wall_ms = res.ttft_ms + sum(res.round_ms)
    return res


def replay_job(traces: Sequence[Trace], policy: GammaPolicy, latency: LatencyModel | None = None,
               max_new_tokens: int | None = None) -> list[ReplayResult]:
    """A job: one policy object across the prompt turns, in order (like ``runners.jobs.job``)."""
    return [replay(tr, policy, latency, max_new_tokens) for tr in traces]
