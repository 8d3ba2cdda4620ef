"""Greedy traces of a deterministic proposer: what ``runners.replay`` needs to replay any policy exactly.

The drafters whose declared trace kind is ``prompt_lookup`` (``specbench.drafter_kinds``): prompt lookup
(``runners.drafters.prompt_lookup.PromptLookupDrafter``), which drafts by copying what followed an earlier
occurrence of the sequence's last n-gram, and suffix decoding (``runners.drafters.suffix.SuffixDrafter``). Such a
drafter has ``lookup(ids, k)``: its proposal at position ``t`` (``t`` new tokens emitted; the prefix is
``prompt + x_1 .. x_t``, the request begun at the prompt) is a deterministic function of that prefix, and the
proposal for a budget ``k`` is the first ``k`` tokens of the proposal for any larger budget (the match does not
depend on ``k``). So one target pass (the greedy output ``x``) plus the proposal of
the largest budget any round can have at each ``t`` — ``max_new_tokens − 1 − t`` — gives every
round of every policy.

Unlike a draft model's greedy rollout, a lookup proposal that agrees with ``x`` for ``j`` tokens
does *not* continue as the proposal at ``t + j`` (the last n-gram changes, and so may its earliest
match), so ``runners.replay.trace.Trace``'s compact form (agreement runs + tails at mismatches) does not
apply: a ``LookupTrace`` stores each position's proposal itself (``proposals[t-1]``, cut after an
EOS as the drafter cuts it; empty when nothing matches).

Prompt lookup has no probabilities: the rollout steps carry no features, ``stop_drafting`` is never
asked (as in the real loop), and a policy sees only the proposal's length through ``drafted``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runners.replay.trace_base import TraceViews, target_pass


@dataclass
class LookupTrace(TraceViews):
    """One prompt turn of a prompt lookup pair (module docstring); the interface of ``Trace``."""

    proposals: list[list[int]]
    kind = "prompt_lookup"
    asks_policy = False  # a deterministic proposer is never asked stop_drafting

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if n < 1:
            raise ValueError("a trace needs at least one new token")
        if len(self.proposals) != n - 1:
            raise ValueError(f"proposals needs {n - 1} entries (positions 1..N-1)")
        self.eos = tuple(int(e) for e in self.eos)
        self._eos = set(self.eos)
        agree = []
        for t, prop in enumerate(self.proposals, start=1):
            a = 0
            while a < len(prop) and t + a < n and prop[a] == self.tokens[t + a]:
                a += 1
            agree.append(a)
        self._agree = agree + [0]

    def rollout(self, t: int, k: int) -> tuple[list[int], list[float]]:
        """The first ``k`` proposal tokens at ``t`` (fewer when the match offers fewer); no confidences."""
        toks, _ = self.rollout_steps(t, k)
        return toks, []

    def rollout_steps(self, t: int, k: int) -> tuple[list[int], list[dict[str, float]]]:
        if not 1 <= t <= self.n - 1:
            raise ValueError(f"no rollout at position {t} (positions 1..{self.n - 1})")
        toks = list(self.proposals[t - 1][: max(0, k)])
        return toks, [{} for _ in toks]

    def available(self, t: int, limit: int) -> int:
        return min(max(0, limit), len(self.proposals[t - 1])) if 1 <= t <= self.n - 1 else 0

    # ------------------------------------------------------------------ (de)serialisation
    def to_json(self) -> dict[str, Any]:
        return self.head_json({"proposals": self.proposals, "agreement": self.agreements})

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> LookupTrace:
        trace = cls(**cls.head_kwargs(obj), proposals=[[int(x) for x in p] for p in obj["proposals"]])
        stored = obj.get("agreement")
        if stored is not None and list(stored) != trace.agreements:
            raise ValueError(f"{trace.prompt_id}: stored agreement run lengths disagree with the proposals")
        return trace


def build_lookup_trace(
    target_model: Any,
    drafter: Any,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    eos_token_ids: Iterable[int],
    gamma_max: int | None = None,
    mode: str = "sequential",
    prompt_id: str = "",
    turn: int = 1,
    reuse: Any = None,
    **meta: Any,
) -> LookupTrace:
    """One prompt's lookup trace: the target's greedy output (``AutoregressiveRunner``, timed) and
    ``drafter.lookup(prompt + x_1..x_t, min(gamma_max, max_new_tokens − 1 − t))`` at every ``t``
    (``gamma_max=None``: ``max_new_tokens − 1``, every round any policy can ask for). ``mode`` is
    accepted for ``build_trace``'s signature and ignored (a lookup costs microseconds); ``reuse``: a
    trace of the same target and prompt whose target output to take (``runners.replay.trace_base.target_pass``)."""
    import torch

    if gamma_max is None:
        gamma_max = max(1, max_new_tokens - 1)
    eos = sorted(set(int(e) for e in eos_token_ids))
    prompt_ids = list(prompt_ids)
    with torch.inference_mode():
        ar = target_pass(target_model, prompt_ids, max_new_tokens, eos, reuse)
    x = list(ar.tokens)
    ids = prompt_ids + x
    t0 = time.perf_counter()
    drafter.begin(list(prompt_ids))  # a drafter with state of its own (suffix decoding's trees) starts the request
    proposals = [drafter.lookup(ids[: len(prompt_ids) + t], min(gamma_max, max_new_tokens - 1 - t))
                 for t in range(1, len(x))]
    extra = dict(meta.pop("extra", {}) or {})
    extra.update(mode="lookup", draft_pass_s=round(time.perf_counter() - t0, 4))
    return LookupTrace(
        prompt_id=str(prompt_id), turn=int(turn), prompt_tokens=len(prompt_ids), max_new_tokens=int(max_new_tokens),
        gamma_max=int(gamma_max), eos=tuple(eos), tokens=x, proposals=proposals, stop_reason=ar.stop_reason,
        ar_wall_ms=ar.wall_ms, ar_ttft_ms=ar.ttft_ms, extra=extra,
        **meta,
    )
