"""What a speculative round costs under a latency model (``specbench.latency.LatencyModel``): the one rule the
replay charges its rounds by and a real job's record predicts its wall by.

The rounds are charged exactly as ``runners.engine.speculative`` runs them: the target's prefill of the prompt
(= TTFT); per round, the target's forward of ``d + 1`` tokens at context ``P + t − 1``; the draft's ``d`` forwards
(``draft_forwards_ms``: the first feeds every token of the sequence the draft's cache has not seen, its prefill in
the first drafting round, then 1–3 tokens of catch-up, the others one token each); and ``round_overhead_ms``
(``round_parts``, ``round_ms``; what the draft's cache has seen after a round: ``seen_after``). A batched round is
``batch_round_parts`` (one row: ``round_parts``, bit for bit; an engine's fitted cost may bill its draft once per
round instead: ``LatencyModel.draft_rule``). A whole record's rounds: ``predict_wall_ms`` / ``predict_parts_ms``
(``runners.jobs.predict``, ``specbench.sweep_costs``). The target alone is ``specbench.latency.ar_batch_ms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specbench.latency import LatencyModel
from specbench.rounds import advance


def draft_forwards_ms(lat: LatencyModel, p: int, t: int, seen: int, proposed: int) -> float:
    """Predicted ms of the draft's ``proposed`` forwards in a round at position ``t`` (prompt ``p``), its
    cache holding ``seen`` tokens: the first feeds the ``p + t − seen`` tokens it has not seen, the others
    one each. ``t = 0``, ``seen = 0``: the draft's prefill of the prompt, then ``proposed − 1`` steps (a
    fused first round)."""
    draft = 0.0
    if proposed >= 1:
        draft += lat.draft_ms(p + t - seen, seen)
        for i in range(1, proposed):
            draft += lat.draft_ms(1, p + t + i - 1)
    return draft


def round_parts(lat: LatencyModel, p: int, t: int, seen: int, d: int, proposed: int | None = None,
                draft_model: bool = True) -> tuple[float, float]:
    """Predicted ``(draft ms, verify ms)`` of a round at position ``t`` drafting ``proposed`` tokens
    (default ``d``) and verifying ``d`` of them, the draft's cache holding ``seen``; the round costs
    their sum plus ``round_overhead_ms``. ``draft_model=False``: the drafter costs nothing."""
    proposed = d if proposed is None else proposed
    if lat.draft_rule != "forwards":  # billed once per round: batch_round_parts
        return batch_round_parts(lat, [RowRound(p, t, seen, proposed, d)], draft_model)
    draft = draft_forwards_ms(lat, p, t, seen, proposed) if draft_model else 0.0
    return draft, lat.verify_ms(d + 1, p + t - 1)


def round_ms(lat: LatencyModel, p: int, t: int, seen: int, d: int, proposed: int | None = None) -> float:
    """Predicted ms of a round at position ``t`` verifying ``d`` drafted tokens (of ``proposed``, default
    ``d``), the draft's cache holding ``seen``."""
    draft, verify = round_parts(lat, p, t, seen, d, proposed)
    return verify + lat.round_overhead_ms + draft


def seen_after(p: int, t: int, seen: int, d: int, accepted: int, new_t: int) -> int:
    """``ModelDrafter``'s cache length after ``commit``: it fed ``ids + y_1..y_{d-1}`` (``d``: tokens
    *proposed*, verified or not) and keeps the common prefix with the new sequence (at most its
    length − 1)."""
    if d == 0:
        return min(seen, p + new_t - 1)
    return min(p + t + min(accepted, d - 1), p + new_t - 1)


@dataclass(frozen=True)
class RowRound:
    """One active row's part of a batched round: prompt ``p``, position ``t``, the draft's cache holding
    ``seen`` of the row's tokens, ``proposed`` tokens drafted and the first ``verified`` of them verified."""

    p: int
    t: int
    seen: int
    proposed: int
    verified: int


def batch_round_parts(lat: LatencyModel, rows: Sequence[RowRound], draft_model: bool = True) -> tuple[float, float]:
    """Predicted ``(draft ms, verify ms)`` of a round of the batched engine over its ``b = len(rows)``
    active rows (the round costs their sum plus ``round_overhead_at(b)``):

    * drafting: ``max proposed`` steps, each one draft forward of all ``b`` rows (a row that stopped, or
      drafts nothing this round, rides along masked); the first feeds every drafting row the tokens its
      cache has not seen (right-aligned: width = the widest, ``p + t − seen``) at context = the longest
      row in the draft's cache (0: the draft's prefill), the others one token each at context = the
      longest row then;
    * verification: one target forward of ``b`` rows × ``max verified + 1`` tokens at context = the
      longest row in the target's cache, ``max (p + t − 1)``.

    With one row this is ``round_parts`` exactly (the same forwards, summed in the same order).
    ``draft_model=False``: the drafter costs nothing. ``lat.draft_rule`` other than ``forwards`` bills the draft once
    per round: ``per_step``, one draft forward of the widest proposal + 1 tokens at the verification's context (an
    EAGLE proposal), in *every* round, one that proposes nothing included (a forward of 1 token: SpecDecode-Bench's
    ``simulator.py: simulate_sd_batch`` calls ``predictor.py: predict_draft_time`` on every EAGLE step, and vLLM's
    EAGLE proposer runs after every verification to keep its hidden states); ``per_round``, the same but 0 when no
    row proposes (the zero-charge variant); ``share``, ``draft_share ×`` the verification (an n-gram lookup), 0 when
    no row proposes (their ``step_input_lens == 1``)."""
    b = len(rows)
    steps = max(r.proposed for r in rows)
    if lat.draft_rule != "forwards":
        context = max(r.p + r.t - 1 for r in rows)
        verify = lat.verify_ms(max(r.verified for r in rows) + 1, context, b)
        once = lat.draft_share * verify if lat.draft_rule == "share" else lat.draft_ms(steps + 1, context, b)
        billed = draft_model and (steps >= 1 or lat.draft_rule == "per_step")
        return (once if billed else 0.0), verify
    draft = 0.0
    if draft_model and steps >= 1:
        width = max(r.p + r.t - r.seen for r in rows if r.proposed >= 1)
        draft += lat.draft_ms(width, max(r.seen for r in rows), b)
        for j in range(2, steps + 1):  # step j feeds each drafting row its token j - 1
            context = max(r.p + r.t + min(j, r.proposed) - 2 if r.proposed >= 1 else r.seen for r in rows)
            draft += lat.draft_ms(1, context, b)
    verify = lat.verify_ms(max(r.verified for r in rows) + 1, max(r.p + r.t - 1 for r in rows), b)
    return draft, verify


def predict_wall_ms(latency: LatencyModel, prompt_tokens: int, new_tokens: int, drafted_trace: Sequence[int],
                    accepted_trace: Sequence[int], draft_model: bool = True,
                    fused_prefill: bool = False) -> tuple[float, float]:
    """``(ttft_ms, wall_ms)`` the latency model predicts for a generation's *own* rounds (a record's
    ``drafted_trace`` / ``accepted_trace``), charged as ``replay`` charges them. ``draft_model=False``:
    the drafter costs nothing (prompt lookup). ``fused_prefill``: the first round is verified in the
    prefill forward (``prompt + d`` tokens) after the draft's prefill and ``d − 1`` draft steps, and
    ends the TTFT. ``method=ar`` records: empty traces, one plain step per token after the first."""
    parts = predict_parts_ms(latency, prompt_tokens, new_tokens, drafted_trace, accepted_trace, draft_model,
                             fused_prefill)
    return parts["ttft_ms"], sum(parts.values())


def predict_parts_ms(latency: LatencyModel, prompt_tokens: int, new_tokens: int, drafted_trace: Sequence[int],
                     accepted_trace: Sequence[int], draft_model: bool = True,
                     fused_prefill: bool = False) -> dict[str, float]:
    """``predict_wall_ms`` by part, the record's fields: ``ttft_ms`` (the prefill, and a fused first
    round), then the rounds' ``verify_ms`` (the target's forwards), ``draft_ms`` and ``overhead_ms``."""
    p, n = int(prompt_tokens), int(new_tokens)
    if not drafted_trace:  # autoregressive: prefill, then n - 1 steps
        ttft = latency.target_prefill_ms(p)
        return {"ttft_ms": ttft, "verify_ms": latency.ar_wall_ms(p, n) - ttft, "draft_ms": 0.0, "overhead_ms": 0.0}
    rounds = list(zip(drafted_trace, accepted_trace))
    if fused_prefill:
        d, a = rounds.pop(0)
        ttft = latency.target_prefill_ms(p + d) + latency.round_overhead_ms
        if draft_model:
            ttft += draft_forwards_ms(latency, p, 0, 0, d)
        t = advance(0, a, n)
        seen = p + min(a, d - 1) if d >= 1 else 0
    else:
        ttft, t, seen = latency.target_prefill_ms(p), 1, 0
    out = {"ttft_ms": ttft, "verify_ms": 0.0, "draft_ms": 0.0, "overhead_ms": 0.0}
    for d, a in rounds:
        new_t = advance(t, a, n)
        draft, verify = round_parts(latency, p, t, seen, d, draft_model=draft_model)
        out["verify_ms"] += verify
        out["overhead_ms"] += latency.round_overhead_ms
        out["draft_ms"] += draft
        seen = seen_after(p, t, seen, d, a, new_t)
        t = new_t
    return out
