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

Best fixed γ in hindsight: the fixed-γ replay (``policy=fixed``) for every γ in
``1..max(--gammas)``; per prompt (each prompt its own best γ) and per task (one γ for all the
prompts of the trace, best pooled throughput).

CLI: ``python -m runners.replay trace | calibrate | grid`` (``runners.replay.cli``). ``grid`` writes ``replay.jsonl`` and ``replay.csv`` (one row per method × initial γ × prompt turn
with ``specbench.records`` field names: pair, method, gamma_init, prompt_id, new_tokens, rounds,
drafted, accepted, acceptance_rate, gamma_trace, drafted_trace, accepted_trace, the per-position
counts (drafted_per_pos, compared_per_pos, accepted_per_pos), and *predicted*
ttft_ms, tpot_ms, wall_ms, tokens_per_s, ar_tokens_per_s, speedup; plus ``source = "replay"``),
and ``meta.json`` into ``--out`` (default ``<DIR>/replay``); ``python -m analysis`` renders the
oracle table from them (``analysis.replay_table``). Oracle rows have ``method`` ``oracle`` / ``oracle_agreement``; best fixed γ
rows ``best_fixed_prompt`` / ``best_fixed_task``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from methods.base import COSTS, DraftStep, GammaPolicy, RoundOutcome, policy_needs
from runners.replay.trace import Trace, TraceTooShort
from specbench.latency import LatencyModel, round_parts, seen_after
from specbench.paths import CONF_DIR
from specbench.records import per_position, pooled_tokens_per_s

PAPER_METHODS = ("specdecode", "hf_heuristic", "hf_heuristic_carryover", "assistant_threshold", "gammatune",
                 "gammatune_plus")
PAPER_GAMMAS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24)
ORACLE = "oracle"
AGREEMENT_ORACLE = "oracle_agreement"
BEST_FIXED_PROMPT = "best_fixed_prompt"
BEST_FIXED_TASK = "best_fixed_task"


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


def _max_new(trace: Trace, max_new_tokens: int | None) -> int:
    m = trace.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
    if not 1 <= m <= trace.max_new_tokens:
        raise ValueError(f"max_new_tokens must be in [1, {trace.max_new_tokens}] (the trace's), got {m}")
    return m


# ---------------------------------------------------------------------- replay

def replay(trace: Trace, policy: GammaPolicy, latency: LatencyModel | None = None,
           max_new_tokens: int | None = None) -> ReplayResult:
    """The rounds ``SpeculativeRunner`` would run with ``policy`` on this prompt (module docstring).
    Calls ``policy.begin_prompt()`` first, like the runner."""
    m = _max_new(trace, max_new_tokens)
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
        self.t = min(self.t + outcome.accepted + 1, self.trace.n)


def agreement_oracle(trace: Trace, latency: LatencyModel | None = None,
                     max_new_tokens: int | None = None) -> ReplayResult:
    return replay(trace, AgreementOracle(trace), latency, max_new_tokens)


def oracle_schedule(trace: Trace, latency: LatencyModel, max_new_tokens: int | None = None) -> tuple[float, list[int]]:
    """``(minimum predicted wall ms, the d of each round)`` over every choice of drafted
    prefix lengths, and peeks (``PEEK``: draft one token, verify none) (module docstring).
    ``O(N² + N·γ)`` with tiny constants."""
    m = _max_new(trace, max_new_tokens)
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
            if d <= a:
                nxt, lag = min(t + d + 1, n), 2
            else:
                nxt, lag = t + a + 1, 1
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
            if d <= a:
                t, lag = min(t + d + 1, n), 2
            else:
                t, lag = t + a + 1, 1
            is_fresh = False
        else:
            d = 0
            t += 1
            lag += 1
        ds.append(d)
    total = latency.target_prefill_ms(p) + (fresh[1] if n > 1 else 0.0)
    return total, ds


def oracle(trace: Trace, latency: LatencyModel, max_new_tokens: int | None = None) -> ReplayResult:
    """The oracle's rounds, replayed (its wall time equals the dynamic program's minimum)."""
    total, ds = oracle_schedule(trace, latency, max_new_tokens)
    res = replay(trace, ScriptedPolicy(ds), latency, max_new_tokens)
    if not math.isclose(res.wall_ms, total, rel_tol=1e-9, abs_tol=1e-6):
        raise AssertionError(f"oracle replay {res.wall_ms} != dynamic program {total}")
    return res


# ---------------------------------------------------------------------- methods and rows

@dataclass(frozen=True)
class MethodSpec:
    """A method as a job would run it: the ``method`` label, its policy and parameters."""

    label: str
    policy: str
    params: Mapping[str, Any]

    def build(self, gamma: int) -> GammaPolicy:
        from methods.registry import build_policy

        return build_policy(self.policy, gamma, dict(self.params))


def _parse_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def load_method(spec: str, conf_dir: str | os.PathLike | None = None) -> MethodSpec:
    """``NAME`` (``conf/method/NAME.yaml``, or a registered policy name) or
    ``NAME:key=value,key=value`` (parameters overridden; the label is the whole string)."""
    from methods.registry import POLICIES
    from specbench.registry import ConfigError

    name, _, rest = spec.partition(":")
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"method {spec!r}: {item!r} is not key=value")
        overrides[key.strip()] = _parse_value(value)
    path = Path(conf_dir or CONF_DIR / "method") / f"{name}.yaml"
    if path.exists():
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        from specbench.config import MethodConfig

        method = MethodConfig.from_mapping(cfg)
        if method.runner != "speculative":
            raise ConfigError(f"method {name!r} is not our speculative loop; it cannot be replayed")
        return MethodSpec(spec, str(method.policy), {**method.params, **overrides})
    if name in POLICIES:
        return MethodSpec(spec, name, overrides)
    raise ConfigError(f"unknown method {name!r} (no {path} and no such policy)")


def result_row(res: ReplayResult, method: str, gamma_init: int | None, latency: LatencyModel | None) -> dict[str, Any]:
    """A records-like row (``specbench.records`` field names where they apply; times are predicted)."""
    tr = res.trace
    rounds = len(res.accepted_trace)
    drafted, accepted = sum(res.drafted_trace), sum(res.accepted_trace)
    row: dict[str, Any] = {
        "pair": tr.pair, "target": tr.target, "draft": tr.draft, "method": method, "task": tr.task,
        "category": tr.category, "prompt_id": tr.prompt_id, "turn": tr.turn, "gamma_init": gamma_init,
        "temperature": 0.0, "prompt_tokens": tr.prompt_tokens, "new_tokens": res.new_tokens,
        "stop_reason": res.stop_reason, "max_new_tokens": tr.max_new_tokens,
        "rounds": rounds, "drafted": drafted, "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_accepted_per_round": accepted / rounds if rounds else None,
        "gamma_trace": res.gamma_trace, "drafted_trace": res.drafted_trace, "accepted_trace": res.accepted_trace,
        **per_position(res.drafted_trace, res.accepted_trace),
        "ttft_ms": res.ttft_ms, "wall_ms": res.wall_ms, "tpot_ms": None, "tokens_per_s": res.tokens_per_s,
        "ar_wall_ms": None, "ar_tokens_per_s": None, "speedup": None, "source": "replay", "predicted": True,
    }
    if latency is not None and res.wall_ms:
        if res.new_tokens >= 2:
            row["tpot_ms"] = (res.wall_ms - res.ttft_ms) / (res.new_tokens - 1)
        ar = latency.ar_wall_ms(tr.prompt_tokens, res.new_tokens)
        row["ar_wall_ms"] = ar
        row["ar_tokens_per_s"] = res.new_tokens / (ar / 1000.0) if ar > 0 else None
        if row["ar_tokens_per_s"]:
            row["speedup"] = row["tokens_per_s"] / row["ar_tokens_per_s"]
    return row


def _pooled(results: Sequence[ReplayResult]) -> float:
    return pooled_tokens_per_s([r.new_tokens for r in results], [r.wall_ms for r in results])


def replay_grid(traces: Sequence[Trace], methods: Sequence[MethodSpec], gammas: Sequence[int],
                latency: LatencyModel | None, max_new_tokens: int | None = None,
                errors: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows for every method × initial γ over one job's traces (in order), plus, with a latency
    model, the oracles and the best fixed γ in hindsight (``1..max(gammas)``)."""
    errors = errors if errors is not None else []
    rows: list[dict[str, Any]] = []
    for method in methods:
        for gamma in gammas:
            try:
                results = replay_job(traces, method.build(gamma), latency, max_new_tokens)
            except (TraceTooShort, ValueError) as exc:
                errors.append(f"{method.label} γ={gamma}: {exc}")
                continue
            rows += [result_row(r, method.label, gamma, latency) for r in results]
    if latency is None or not traces:
        return rows
    rows += [result_row(oracle(tr, latency, max_new_tokens), ORACLE, None, latency) for tr in traces]
    rows += [result_row(agreement_oracle(tr, latency, max_new_tokens), AGREEMENT_ORACLE, None, latency)
             for tr in traces]
    fixed = MethodSpec("fixed", "fixed", {})
    by_gamma: dict[int, list[ReplayResult]] = {}
    for gamma in range(1, max(gammas) + 1):
        try:
            by_gamma[gamma] = replay_job(traces, fixed.build(gamma), latency, max_new_tokens)
        except TraceTooShort as exc:
            errors.append(f"best fixed γ: γ={gamma} left out: {exc}")
    if by_gamma:
        best_task = max(by_gamma, key=lambda g: (_pooled(by_gamma[g]), -g))
        rows += [result_row(r, BEST_FIXED_TASK, best_task, latency) for r in by_gamma[best_task]]
        for i in range(len(traces)):
            g = min(by_gamma, key=lambda g: (by_gamma[g][i].wall_ms, g))
            rows.append(result_row(by_gamma[g][i], BEST_FIXED_PROMPT, g, latency))
    return rows
