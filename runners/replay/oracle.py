"""The oracle bounds of a greedy trace under a latency model, replayed by ``runners.replay.replay``.

Oracle (``oracle(trace, latency)``). A round at position ``t`` can only draft a prefix of the
draft's greedy rollout from ``t``: ``d ∈ [0, min(budget, rollout length)]``. Drafting
``d ≤ a_t`` tokens accepts all of them and moves to ``t + d + 1``; drafting more accepts
``a_t`` and moves to ``t + a_t + 1``. What a round costs depends on ``(t, d)`` and on how
many tokens the draft's cache lags behind (``f``, 1 after a rejection, 2 after a fully
accepted round, ``+1`` per round that drafts nothing, the whole prefix before the first
drafting round). The oracle is the exact minimum of the predicted wall time over **every**
such sequence of choices, by dynamic programming over states ``(t, f)`` (``V(N, ·) = 0``;
``V(t, f) = min(T_plain(t) + V(t+1, f+1), T_draft_first(t, f) + min_d [rest(t, d) +
V(next(t, d))], T_draft_first(t, f) + T_plain(t) + V(t+1, 1))``, the last term a *peek*: draft
one token, verify none — ``GammaPolicy.verify_count`` = 0 — which leaves the draft's cache
current). Every γ policy — whatever its γ, confidence stops, peeks, or state — makes one
of these choices each round, and the replay charges it the same costs, so **no policy can
beat the oracle on that trace under that latency model**. The bound holds among policies
whose round drafts a prefix of the draft's greedy rollout and verifies all of it or, after a
one-token draft, none of it (all of ``methods``); verifying a shorter prefix of a longer
draft (never better when a draft forward of ``k`` tokens costs no more than ``k`` forwards of
one) and drafters that propose other tokens (e.g. several candidates) are outside it.

The oracle may draft ``0`` tokens (``γ = 0``: a plain target step; ``SpeculativeRunner``
does exactly that for a budget of 0): drafting when ``a_t = 0`` buys nothing but a longer
verification and draft forwards, though it can keep the draft's cache current. The
"agreement oracle" (``agreement_oracle``) is the policy papers usually call the oracle:
``γ_t = a_t`` (capped by the budget; one less when the run ends with the output's EOS, which
the target emits for free), a plain target step when ``a_t = 0``. It wastes no
draft token, but it is *not* always optimal: with a very cheap target call and costly draft
tokens, splitting a long run into two rounds drafts one token fewer (the middle token comes
from the target), and with a target whose cost jumps at some ``k`` a shorter round can pay
off. Under the paper's cost model (``LatencyModel.paper(c)``: verification of any length
costs ``c``, a draft token 1) and ``c ≥ 1`` it is optimal: a prompt costs ``c·R + D`` for ``R``
rounds drafting ``D`` tokens, ``R + A = N − 1`` (``A`` accepted, a round ending on an accepted
EOS aside), so the cost is ``≥ (c − 1)·R + N − 1`` with equality when nothing is wasted; the
furthest reach ``t + a_t + 1`` is nondecreasing in ``t``, so taking the whole run each round
minimises ``R`` (the jump-game argument) and wastes nothing. Both oracles are reported.

At a batch size ``B > 1`` (rows decoded together, ``runners.replay.batched``) the exact minimum is over the
rows' joint schedules, exponential in ``B``; the oracle there is each row's own schedule from this dynamic
program under the costs at the batch's row count (``LatencyModel.at_batch``), replayed together: exact for a
batch of identical rows, **not a bound** otherwise (``runners.replay.batched`` says why). At ``B = 1`` it is
the oracle above.

A latency model whose ``draft_rule`` bills the draft once per round (``per_step``, ``per_round``,
``share``; ``specbench.round_costs.batch_round_parts``) has no draft cache to track: a round drafting ``d ≥ 1`` tokens
costs one draft charge, the verification of ``d + 1`` tokens and the overhead, a round drafting none is a plain
target step, plus under ``per_step`` one draft charge of 1 token (SpecDecode-Bench's EAGLE: the proposer runs on
every step), whatever came before. Its oracle (``once_schedule``) is the same minimum
over ``V(t) = min(T(t, 0) + V(t + 1), min_d [T(t, d) + V(next(t, d))])``, the rounds charged by
``specbench.round_costs.round_ms``, the replay's own rule; a peek (one token drafted, none verified) costs a draft
charge on top of a plain step and leads to the same state, so it never helps and is not played.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from methods.base import GammaPolicy, RoundOutcome
from runners.replay.replay import ReplayResult, max_new, replay
from runners.replay.trace import Trace
from specbench.latency import LatencyModel
from specbench.round_costs import round_ms
from specbench.rounds import advance

ORACLE = "oracle"
AGREEMENT_ORACLE = "oracle_agreement"


#: a scripted round that drafts one token and verifies none (``verify_count`` 0): a peek
PEEK = -1


class ScriptedPolicy(GammaPolicy):
    """Plays a fixed list of γ (0 allowed: a plain target step; ``PEEK``: draft one token, verify
    none), never stops drafting early."""

    name = "scripted"

    def __init__(self, gammas: Iterable[int]) -> None:
        self.gamma_init = 1
        self.gammas = list(gammas)
        self.i = 0
        self.peek = False

    def begin_prompt(self) -> None:
        self.i = 0

    def next_gamma(self) -> int:
        g = self.gammas[self.i]
        self.i += 1
        self.peek = g == PEEK
        return 1 if self.peek else g

    def verify_count(self, proposed: int) -> int:
        return 0 if self.peek else proposed


class AgreementOracle(GammaPolicy):
    """``γ_t = a_t`` (``0`` = a plain target step when the draft's first token is wrong), less one
    when the run ends with the output's EOS (an accepted EOS earns no bonus token, so the target
    may as well emit it). Follows the replay through ``observe`` (told each round's accepted count)."""

    name = AGREEMENT_ORACLE

    def __init__(self, trace: Trace) -> None:
        self.gamma_init = 1
        self.trace = trace
        self.t = 1

    def begin_prompt(self) -> None:
        self.t = 1

    def next_gamma(self) -> int:
        t, tr = self.t, self.trace
        if t >= tr.n:
            return 0
        a = tr.agreement(t)
        if a and t + a == tr.n and tr.tokens[-1] in tr.eos:
            a -= 1  # the target emits the final EOS itself: drafting it adds a draft token and no progress
        return a

    def observe(self, outcome: RoundOutcome) -> None:
        self.t = advance(self.t, outcome.accepted, self.trace.n)


def agreement_oracle(trace: Trace, latency: LatencyModel | None = None,
                     max_new_tokens: int | None = None) -> ReplayResult:
    return replay(trace, AgreementOracle(trace), latency, max_new_tokens)


def oracle_schedule(trace: Trace, latency: LatencyModel, max_new_tokens: int | None = None) -> tuple[float, list[int]]:
    """``(minimum predicted wall ms, the d of each round)`` over every choice of drafted
    prefix lengths, and peeks (``PEEK``: draft one token, verify none) (module docstring).
    ``O(N² + N·γ)`` with tiny constants. A ``draft_rule`` other than ``forwards``: ``once_schedule``."""
    if latency.draft_rule != "forwards":
        return once_schedule(trace, latency, max_new_tokens)
    m = max_new(trace, max_new_tokens)
    n, p = min(trace.n, m), trace.prompt_tokens
    big = math.inf
    # V[t][f]: the rest's minimum cost at position t with the draft lagging f tokens (f = 1..t+1),
    # F[t]: the same before the draft's first forward (its cache empty; the lag is p + t).
    v: list[list[float]] = [[] for _ in range(n + 2)]
    fresh = [0.0] * (n + 2)
    v[n] = [0.0] * (n + 3)
    choice_g: dict[int, tuple[float, int]] = {}
    for t in range(n - 1, 0, -1):
        budget = m - t - 1
        a = trace.agreement(t)
        avail = trace.available(t, budget) if budget > 0 else 0
        plain = latency.verify_ms(1, p + t - 1) + latency.round_overhead_ms
        # best over d >= 1 of everything but the draft's first forward
        best, best_d = big, 0
        draft_rest = 0.0
        for d in range(1, avail + 1):
            if d >= 2:
                draft_rest += latency.draft_ms(1, p + t + d - 2)
            cost = latency.verify_ms(d + 1, p + t - 1) + latency.round_overhead_ms + draft_rest
            nxt, lag = advance(t, min(d, a), n), 2 if d <= a else 1
            cost += 0.0 if nxt >= n else v[nxt][lag]
            if cost < best:
                best, best_d = cost, d
        choice_g[t] = (best, best_d)
        nxt_plain = v[t + 1] if t + 1 < n else None
        # a peek: the draft's first forward (its catch-up and one token), then a plain step; lag 1 after
        peek_rest = (plain + (v[t + 1][1] if t + 1 < n else 0.0)) if avail >= 1 else big
        row = [big] * (t + 3)
        for f in range(1, t + 2):
            stay = plain + (nxt_plain[f + 1] if nxt_plain is not None else 0.0)
            go = latency.draft_ms(f, p + t - f) + best if best_d else big
            peek = latency.draft_ms(f, p + t - f) + peek_rest
            row[f] = min(stay, go, peek)
        v[t] = row
        stay = plain + (fresh[t + 1] if t + 1 < n else 0.0)
        go = latency.draft_ms(p + t, 0) + best if best_d else big
        peek = latency.draft_ms(p + t, 0) + peek_rest
        fresh[t] = min(stay, go, peek)
    # the path, forwards from (1, fresh)
    ds: list[int] = []
    t, lag, is_fresh = 1, 0, True
    while t < n:
        best, best_d = choice_g[t]
        plain = latency.verify_ms(1, p + t - 1) + latency.round_overhead_ms
        budget = m - t - 1
        avail = trace.available(t, budget) if budget > 0 else 0
        peek_rest = (plain + (v[t + 1][1] if t + 1 < n else 0.0)) if avail >= 1 else big
        first = latency.draft_ms(p + t, 0) if is_fresh else latency.draft_ms(lag, p + t - lag)
        if is_fresh:
            stay = plain + (fresh[t + 1] if t + 1 < n else 0.0)
        else:
            stay = plain + (v[t + 1][lag + 1] if t + 1 < n else 0.0)
        go = first + best if best_d else big
        peek = first + peek_rest
        if peek < min(go, stay):
            ds.append(PEEK)
            t, lag, is_fresh = t + 1, 1, False
            continue
        if go < stay:
            d = best_d
            a = trace.agreement(t)
            t, lag = advance(t, min(d, a), n), 2 if d <= a else 1
            is_fresh = False
        else:
            d = 0
            t += 1
            lag += 1
        ds.append(d)
    total = latency.target_prefill_ms(p) + (fresh[1] if n > 1 else 0.0)
    return total, ds


def once_schedule(trace: Trace, latency: LatencyModel,
                  max_new_tokens: int | None = None) -> tuple[float, list[int]]:
    """``oracle_schedule`` under a draft billed once per round (``latency.draft_rule`` ``per_step``,
    ``per_round`` or ``share``; module docstring): ``V(t)`` over positions only, each round
    ``round_ms(latency, p, t, 0, d)`` — EAGLE's one proposal call per step, ``d + 1`` spec tokens
    (SpecDecode-Bench ``predictor.py: predict_draft_time``; ``per_step`` bills it at ``d = 0`` too, as their
    ``simulator.py: simulate_sd_batch`` does), or n-gram's share of the step's verification, 0 when the step
    verifies one token (``simulate_sd_batch``, ``step_input_lens == 1``). ``O(N·γ)``."""
    m = max_new(trace, max_new_tokens)
    n, p = min(trace.n, m), trace.prompt_tokens
    v, choice = [0.0] * (n + 1), [0] * (n + 1)
    for t in range(n - 1, 0, -1):
        budget = m - t - 1
        avail = trace.available(t, budget) if budget > 0 else 0
        a = trace.agreement(t)
        best, best_d = round_ms(latency, p, t, 0, 0) + v[t + 1], 0
        for d in range(1, avail + 1):
            cost = round_ms(latency, p, t, 0, d) + v[advance(t, min(d, a), n)]
            if cost < best:
                best, best_d = cost, d
        v[t], choice[t] = best, best_d
    ds: list[int] = []
    t = 1
    while t < n:
        ds.append(choice[t])
        t = advance(t, min(choice[t], trace.agreement(t)), n)
    return latency.target_prefill_ms(p) + v[1], ds


def oracle(trace: Trace, latency: LatencyModel, max_new_tokens: int | None = None) -> ReplayResult:
    """The oracle's rounds, replayed (its wall time equals the dynamic program's minimum)."""
    total, ds = oracle_schedule(trace, latency, max_new_tokens)
    res = replay(trace, ScriptedPolicy(ds), latency, max_new_tokens)
    if not math.isclose(res.wall_ms, total, rel_tol=1e-9, abs_tol=1e-6):
        raise AssertionError(f"oracle replay {res.wall_ms} != dynamic program {total}")
    return res
