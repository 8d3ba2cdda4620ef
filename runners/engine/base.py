"""Types shared by the runners: what a drafter proposes and what a generation returns.

A *drafter* proposes tokens **in the target's vocabulary**; how it gets them
(a same-vocabulary model with its KV cache, n-gram lookup in the prompt, or a
model with another tokenizer, as SLEM/TLI/union/SLRS do) is its own business. The loop in
``runners.engine.speculative`` verifies whatever it proposes.

**Tokens outside the target's vocabulary.** An id ``>=`` the width of the target's logits
(``specbench.models.logits_width``) stands for a drafted token the target does not have: union's
draft-only tokens (``methods.hetero.UnionSpace``: ``|T| + k``) and SLRS's ⊥ (no candidate). Its
target probability is 0, so verification rejects it with certainty and samples the replacement from
the residual ``normalize(max(0, p - q))`` (``q`` = the row's distribution over target ids); the loop
never feeds it to the target. It can only be the last token of a draft (nothing after it can be
accepted): the loop drops anything a drafter proposes after it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from methods.base import DraftStep, GammaPolicy, RoundOutcome
from runners.engine.verify import Sampling
from specbench.registry import ConfigError
from specbench.rounds import Rounds


@dataclass
class Draft:
    """Tokens proposed for one round.

    ``tokens``: target-vocabulary ids (the last may be outside it, module docstring). ``q``: the
    drafter's distribution each token was sampled from, over target ids, shape
    ``[len(tokens), target_vocab]`` (probabilities; a row may sum to less than 1 when the
    drafter can also propose tokens outside the target's vocabulary, as union does), or
    ``None`` for a deterministic proposal (treated as one-hot by speculative
    sampling, which keeps it lossless). ``confidences[i]``: the drafter's
    probability of ``tokens[i]`` (empty when it has none, or when the policy did not
    ask for it). ``steps[i]``: the position and features of ``tokens[i]``, what
    ``stop_drafting`` was shown (a drafted EOS is not asked about; empty when the
    drafter has no features, e.g. prompt lookup). ``forwards``: the drafter's model
    forwards this round (None: the drafter does not count them, or has no model).
    ``fallback``: the drafter could not apply its configured rule to (part of) this round and used
    its lossless fallback (SLRS past its expansion bound).
    """

    tokens: list[int]
    q: torch.Tensor | None = None
    confidences: list[float] = field(default_factory=list)
    steps: list[DraftStep] = field(default_factory=list)
    forwards: int | None = None
    fallback: bool = False


class Drafter(ABC):
    """Proposes draft tokens; keeps its own state (caches) in sync with the sequence."""

    name: str = ""

    def begin(self, prompt_ids: list[int]) -> None:  # noqa: B027 - optional hook
        """A new sequence starts with ``prompt_ids`` (target vocabulary)."""

    @abstractmethod
    def propose(
        self,
        ids: list[int],
        max_tokens: int,
        policy: GammaPolicy,
        sampling: Sampling,
        generator: torch.Generator | None,
    ) -> Draft:
        """Draft up to ``max_tokens`` tokens continuing ``ids`` (the whole sequence so
        far, prompt included), greedily when ``sampling.greedy``, else sampled from the draft's
        distribution processed by ``sampling`` (``runners.engine.verify.probs``). A drafter does not decide
        when its round stops: it yields one ``methods.base.DraftStep`` per drafted token (with the features
        the policy ``needs``), computed when drawn, and ``methods.rules.take_drafts`` draws them until the
        round's stop rule says stop (after an EOS or a token outside the target's vocabulary, when
        ``policy.stop_drafting(step)`` says so, at ``max_tokens``); a deterministic proposer (no
        probabilities) is cut by ``methods.rules.cut_proposal`` and the policy is never asked."""

    def commit(self, ids: list[int]) -> None:  # noqa: B027 - optional hook
        """The sequence after verification (drop cached states past the accepted part)."""

    def limits(self, gamma: int, room: int) -> tuple[int, int]:
        """``(max_tokens, kept)`` for a round of ``gamma`` with ``room`` target tokens left before the
        round's own target token (``max_new_tokens - new tokens - 1``): ``propose`` is asked for
        ``max_tokens`` and the loop verifies at most the first ``kept`` tokens of its proposal. γ counts
        proposed tokens here: ``min(γ, room)`` for both. A drafter whose γ counts tokens of its own
        vocabulary (SLEM, ``runners.drafters.slem``) drafts γ and keeps up to ``room``."""
        n = max(0, min(int(gamma), int(room)))
        return n, n


class OptionsDrafter(Drafter):
    """A drafter built from its pair's ``draft`` options alone, no model (prompt lookup, suffix decoding): ``OPTIONS``
    names the settings its constructor takes, ``LABEL`` names it in errors. An unknown setting, or a value the
    constructor rejects (``ValueError``, ``ConfigError`` included), is a one-line ``ConfigError`` naming
    ``pair.draft``."""

    OPTIONS: tuple[str, ...] = ()
    LABEL = "this drafter"

    @classmethod
    def from_options(cls, options: Mapping[str, Any], eos_token_ids: Iterable[int] | int | None = ()) -> Any:
        unknown = sorted(set(options) - set(cls.OPTIONS) - {"name"})
        if unknown:
            raise ConfigError(f"pair.draft: {cls.LABEL} has no setting {unknown[0]!r}; its settings: "
                              f"{', '.join(cls.OPTIONS)}")
        kwargs = {k: options[k] for k in cls.OPTIONS if options.get(k) is not None}
        try:
            return cls(eos_token_ids=eos_token_ids, **kwargs)
        except ValueError as exc:
            raise ConfigError(f"pair.draft: {exc}") from None

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        cls.from_options(options)

    @classmethod
    def from_context(cls, ctx: Any) -> Any:
        return cls.from_options(ctx.options, ctx.eos_token_ids)


@dataclass
class Generation:
    """One prompt's decoding: the new tokens and how long it took (see specbench.records).
    ``first_round_ms``: end of the first draft-and-verify round (speculative runners; None for AR),
    i.e. when transformers' assisted generation first hands new tokens to a streamer."""

    tokens: list[int]
    ttft_ms: float
    wall_ms: float
    stop_reason: str
    first_round_ms: float | None = None
    rounds: Rounds = field(default_factory=Rounds)  # every round (specbench.rounds; empty for AR)
    speculative: bool = True
    phase_ms: dict[str, float] = field(default_factory=dict)  # draft / verify / overhead after TTFT
    draft_forwards: int | None = None  # the drafter's model forwards, summed over rounds (None: not counted)
    fallback_rounds: int = 0  # rounds in which the drafter used its lossless fallback rule

    def add_round(self, outcome: RoundOutcome, draft: Draft) -> None:
        """One round (the one place both loops record a round): the ``outcome`` its policy observes, into
        ``rounds``; the drafter's forwards and fallback from ``draft``."""
        self.rounds.observe(outcome)
        if draft.forwards is not None:
            self.draft_forwards = (self.draft_forwards or 0) + draft.forwards
        self.fallback_rounds += int(draft.fallback)
