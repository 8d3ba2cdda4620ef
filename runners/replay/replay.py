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
  given only to a policy that ``needs`` ``COSTS`` (``None`` without a latency model); the stop, the
  verified prefix and the outcome are the loop's own functions (``methods.rules``);
* one policy object is used for all the prompts of a job, in the job's order (state that
  carries across prompts, e.g. ``hf_heuristic``'s γ, carries here too); a job's warm-up is
  followed by a fresh policy, so a replayed job starts from a fresh one.

The rounds are the real ones as far as the trace's rollouts are the real draft's: exactly
for fp32/bf16 drafts up to float rounding (tested on tiny models, every policy), only
statistically for a draft whose outputs depend on how its input is chunked (the default
pair's int8-dynamic draft; see ``runners.replay.trace``).

With a ``LatencyModel`` (``specbench.latency``, calibrated by ``runners.replay.calibration``) each round is
charged by its one rule (``specbench.round_costs.round_parts``): the target's forward of
``d + 1`` tokens at context ``P + t − 1``; the draft's ``d`` forwards (the first feeds what
the draft's cache has not seen: its prefill in the first drafting round, else 1–3 tokens;
the cache is tracked exactly as ``ModelDrafter`` keeps it); ``round_overhead_ms``; plus the
target's prefill (the TTFT). Predicted ``tokens_per_s = new_tokens / wall``.

Batches: ``replay_rows`` replays ``b`` traces decoded together by the batched engine, with one
policy per row (``per_row``) or one γ per round for every row (``shared``; its docstring gives the order
of the policy's calls), every round charged by ``specbench.round_costs.batch_round_parts`` at the rows still
decoding; ``replay`` is its one-row case (exactly the loop above). Jobs at a batch size, the target alone
at that batch size and the oracle there: ``runners.replay.batched``.

The oracle (the exact best any γ policy can do on a trace under a latency model) is
``runners.replay.oracle``; a grid of methods × initial γ, its rows and the best fixed γ in hindsight,
``runners.replay.grid``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from methods.base import COSTS, DraftStep, GammaPolicy, policy_needs
from methods.rules import round_outcome, stop_drafting_after, verified_block
from runners.replay.trace import Trace
from specbench.config import GAMMA_MODES
from specbench.latency import LatencyModel
from specbench.records import pooled_tokens_per_s
from specbench.round_costs import RowRound, batch_round_parts, seen_after
from specbench.rounds import Rounds, advance


@dataclass
class ReplayResult:
    """One prompt turn replayed: the rounds, and the predicted times (None without a latency model)."""

    trace: Trace
    new_tokens: int
    stop_reason: str
    rounds: Rounds = field(default_factory=Rounds)  # as the engine's Generation keeps them (specbench.rounds)
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

@dataclass
class BatchReplay:
    """Rows decoded together (``replay_rows``): each row's ``ReplayResult`` (its ``round_ms`` are the
    batch's rounds it took part in, its ``wall_ms`` from the batch's start to its own finish, its
    ``ttft_ms`` the batch's prefill) and the batch's own rounds; None times without a latency model."""

    rows: list[ReplayResult]
    gamma_mode: str
    round_ms: list[float] = field(default_factory=list)
    ttft_ms: float | None = None

    @property
    def wall_ms(self) -> float | None:
        """The batch's wall time: its prefill and every round (its last row's finish)."""
        return None if self.ttft_ms is None else self.ttft_ms + sum(self.round_ms)

    @property
    def new_tokens(self) -> int:
        return sum(r.new_tokens for r in self.rows)

    @property
    def tokens_per_s(self) -> float | None:
        """Throughput over all rows: every row's new tokens over the batch's wall time."""
        return pooled_tokens_per_s([self.new_tokens], [self.wall_ms]) if self.wall_ms else None


class _Row:
    """One row's state in ``replay_rows``: the trace, its position ``t``, the draft's cache (``seen``), the
    round being drafted."""

    def __init__(self, trace: Trace, max_new_tokens: int | None, policy: GammaPolicy) -> None:
        self.m = max_new(trace, max_new_tokens)
        self.x = trace.tokens[: self.m]
        self.n, self.p, self.eos = len(self.x), trace.prompt_tokens, set(trace.eos)
        self.policy, self.needs = policy, policy_needs(policy)
        self.asks = getattr(trace, "asks_policy", True)  # a deterministic proposer's trace never asks stop_drafting
        self.hybrid = getattr(trace, "chooses_source", False)  # the hybrid's choice per round (``HybridTrace.source``)
        self.src = "model"
        self.trace = trace
        self.res = ReplayResult(trace, self.n, "eos" if self.x[-1] in self.eos else "max_new_tokens")
        self.t, self.seen = 1, 0

    @property
    def done(self) -> bool:
        return self.x[self.t - 1] in self.eos or self.t >= self.m

    def begin_round(self, gamma: int) -> None:
        """γ decided: the budget, and the rollout it may draft (a prompt lookup proposal in full)."""
        self.gamma, self.budget = gamma, min(gamma, self.m - self.t - 1)
        self.toks: list[int] = []
        self.confs: list[float] = []
        self.steps: list[DraftStep] = []
        k = self.budget
        self.src = "model"
        if self.hybrid and k > 0:
            self.src = self.trace.source(self.t, k)
            if self.src == "lookup":  # the lookup's tokens: no draft forward, no stop asked
                self.r_toks, self.r_feats = self.trace.lookup[self.t - 1][:k], []
                self.toks, self.drafting = list(self.r_toks), False
                return
            if self.trace.max_model_tokens is not None:
                k = min(k, self.trace.max_model_tokens)
        self.r_toks, self.r_feats = self.trace.rollout_steps(self.t, k) if k > 0 else ([], [])
        if not self.asks:
            self.toks = self.r_toks
        self.drafting = self.asks and bool(self.r_toks)

    def draft_step(self, i: int) -> None:
        """The ``i``-th (0-based) drafted token, and the policy asked whether to stop after it."""
        tok, feats = self.r_toks[i], self.r_feats[i]
        self.toks.append(tok)
        wanted = {k: v for k, v in feats.items() if k in self.needs}
        if "confidence" in wanted:
            self.confs.append(wanted["confidence"])
        step = DraftStep(i + 1, tok, budget=self.budget, **wanted)
        self.steps.append(step)
        if stop_drafting_after(tok, step, self.policy, self.eos, i + 1, len(self.r_toks)):
            self.drafting = False

    def verify(self) -> None:
        """The prefix verified, by ``SpeculativeRunner``'s rules (``methods.rules.verified_block``: the policy may
        verify only a prefix, a peek none; a trace holds no id outside the target's vocabulary)."""
        self.toks, _, self.proposed = verified_block(self.toks, self.budget, None, self.policy)
        self.d = len(self.toks)
        agree = self.trace.agreement_of(self.src, self.t) if self.hybrid else self.trace.agreement(self.t)
        self.accepted = min(self.d, agree)
        self.model_proposed = 0 if self.src == "lookup" else self.proposed  # what the draft model forwarded

    def end_round(self, costs: dict[str, float], round_ms: float | None) -> None:
        """The round's outcome recorded and observed; the row moves on."""
        res, accepted = self.res, self.accepted
        new_t = advance(self.t, accepted, self.n)
        if round_ms is not None:
            res.round_ms.append(round_ms)
        self.seen = seen_after(self.p, self.t, self.seen, self.model_proposed, accepted, new_t)
        outcome = round_outcome(self.gamma, self.toks, accepted, self.proposed, self.eos, self.confs, self.steps,
                                **(costs if COSTS in self.needs else {}))
        res.rounds.observe(outcome)  # the record of rounds and the policy are told the same outcome
        self.policy.observe(outcome)
        self.t = new_t


def replay_rows(traces: Sequence[Trace], policies: Sequence[GammaPolicy], latency: LatencyModel | None = None,
                max_new_tokens: int | None = None, gamma_mode: str = "per_row") -> BatchReplay:
    """The rounds of ``b = len(traces)`` rows decoded together by the batched engine (one row:
    ``SpeculativeRunner``; module docstring), each round charged by ``specbench.round_costs.batch_round_parts``
    over the rows still decoding (a finished row leaves the batch) plus ``round_overhead_at(rows)``, after
    one prefill of ``b`` rows × the longest prompt (every row's TTFT).

    ``gamma_mode="per_row"``: ``policies`` holds one policy per row, each asked and told only about its own
    row, so a row's rounds are those of the row alone (a policy that reads ``COSTS`` is told the batch's
    round costs and may decide otherwise). ``"shared"``: one policy, ``policies[0]``, whose one γ per round
    every row drafts up to (its own budget, EOS and stops aside). Per round: ``next_gamma()`` (shared: once;
    per row: each row's, in row order); drafting step by step, ``stop_drafting`` asked at each step for each
    row still drafting, in row order (the draft forwards run step by step over the batch); ``verify_count``
    for each row, then ``observe`` for each row, in row order. ``begin_prompt()`` once per policy, before
    the batch."""
    if gamma_mode not in GAMMA_MODES:
        raise ValueError(f"unknown gamma_mode {gamma_mode!r} (known: {', '.join(GAMMA_MODES)})")
    if not traces:
        raise ValueError("a batch needs at least one row")
    shared = gamma_mode == "shared"
    if len(policies) != (1 if shared else len(traces)):
        raise ValueError(f"{gamma_mode}: {len(policies)} policies for {len(traces)} rows")
    rows = [_Row(tr, max_new_tokens, policies[0 if shared else i]) for i, tr in enumerate(traces)]
    for pol in policies:
        pol.begin_prompt()
    out = BatchReplay([r.res for r in rows], gamma_mode)
    if latency is not None:
        out.ttft_ms = latency.target_prefill_ms(max(r.p for r in rows), len(rows))
        for r in rows:
            r.res.ttft_ms = out.ttft_ms
    active = [r for r in rows if not r.done]
    while active:
        if shared:
            gamma = int(policies[0].next_gamma())
            for r in active:
                r.begin_round(gamma)
        else:
            for r in active:
                r.begin_round(int(r.policy.next_gamma()))
        for i in range(max(r.budget for r in active)):
            for r in active:
                if r.drafting:
                    r.draft_step(i)
        for r in active:
            r.verify()
        costs: dict[str, float] = {}
        round_ms = None
        if latency is not None:
            draft_ms, verify_ms = batch_round_parts(latency, [RowRound(r.p, r.t, r.seen, r.model_proposed, r.d)
                                                              for r in active])
            round_ms = verify_ms + latency.round_overhead_at(len(active)) + draft_ms
            out.round_ms.append(round_ms)
            costs = {"draft_ms": draft_ms, "verify_ms": verify_ms, "round_ms": round_ms}
        for r in active:
            r.end_round(costs, round_ms)
        active = [r for r in active if not r.done]
    for r in rows:
        if r.t != r.n:
            raise AssertionError(f"replay ended at position {r.t}, the trace has {r.n} tokens")
        if latency is not None:
            r.res.wall_ms = r.res.ttft_ms + sum(r.res.round_ms)
    return out


def replay(trace: Trace, policy: GammaPolicy, latency: LatencyModel | None = None,
           max_new_tokens: int | None = None) -> ReplayResult:
    """The rounds ``SpeculativeRunner`` would run with ``policy`` on this prompt (module docstring): a
    batch of one row. Calls ``policy.begin_prompt()`` first, like the runner."""
    return replay_rows([trace], [policy], latency, max_new_tokens).rows[0]


def replay_job(traces: Sequence[Trace], policy: GammaPolicy, latency: LatencyModel | None = None,
               max_new_tokens: int | None = None) -> list[ReplayResult]:
    """A job: one policy object across the prompt turns, in order (like ``runners.jobs.job``)."""
    return [replay(tr, policy, latency, max_new_tokens) for tr in traces]
