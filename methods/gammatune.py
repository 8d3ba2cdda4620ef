"""GammaTune and GammaTune+ (Gautam, Shrestha & Reddy, "Token-Driven GammaTune", Sec. 4,
Algorithm 1; ../shared/papers/gammatune.md).

Algorithm 1, after each verification round with ``A`` accepted draft tokens::

    1: if A = γ then            # eq. 7: the round accepted everything it was asked for
    2:     A' ← A + δ
       else A' ← A
    4: γ̄ ← min(γ_max, max(γ_min, (1 − η)·γ̄ + η·A'))     # eq. 8
    5: γ ← ⌈γ̄⌉

Line 2 literally assigns ``γ ← A + δ`` and line 5 overwrites it; eq. 7's text
("increases A by a tunable offset δ") shows the offset is meant to enter the
average, so ``A'`` is what line 4 uses.

When the offset applies (``expand_on``, recorded in the job's config and ``policy_state``):

* ``gamma`` (default, the paper as written: Alg. 1 line 1, eq. 7): ``A = γ``, with γ the
  speculation length the policy chose for the round. A round cut short — GammaTune+'s
  confidence stop, a drafted EOS, the token budget — has ``A ≤ d < γ`` and never expands.
* ``drafted``: ``A = d`` with ``d ≥ 1`` (every token actually drafted was accepted), the
  comparison transformers' heuristic makes; a named variant, kept for comparison.

A round with nothing drafted (``d == 0``) carries no acceptance information and leaves
the state unchanged under both readings. ``⌈·⌉`` is taken as ``ceil(γ̄ − 1e-9)`` so float
fuzz (``3.0000000000000004``) does not add a token.

Defaults (the paper gives none):

* ``eta = 0.25``: an EWMA over roughly ``(2 − η)/η ≈ 7`` rounds, enough to smooth
  the heavy-tailed, geometric-like ``A`` while a start at the paper's largest
  initial γ (24) decays to near the steady state within ~10 rounds
  (0.75¹⁰ ≈ 0.06), i.e. within the first prompt or two. In a toy simulation
  (i.i.d. acceptances switching between easy/moderate/hard regimes, cost
  ``c + d`` per round for ``c`` ∈ {2, 5, 10}, the paper's initial-γ grid)
  η ∈ [0.25, 0.75] and δ ∈ [1, 3] were within a few % of each other, η = 0.25
  among the best; sweep ``method.eta`` for a real pair.
* ``delta = 2``: the same expansion step as transformers' heuristic (+2), so
  GammaTune and HFHeuristic differ only by the smoothing and the bounds. Since
  ``E[A]`` < γ whenever any rejection is possible, δ is what lets γ̄ climb in the
  easy regime (a fully accepted round moves γ̄ by at least ``η·δ``).
* ``gamma_min = 1``: the smallest useful draft.
* ``gamma_max = 32``: above the paper's largest initial γ (24) so that start is
  not clipped and γ can still grow in easy regimes, while bounding the drafting
  cost of one round. An initial γ outside ``[gamma_min, gamma_max]`` is a
  configuration error (raise ``method.gamma_max``), not silently clipped.

Each of these readings (and δ entering the average, empty rounds skipped, γ̄ starting at the
initial γ) is a row of the README's Protocols table; how η ∈ {0.1, 0.25, 0.5} and δ ∈ {1, 2, 3}
move Table 2 and its ± column, replayed on ``mini_gammatune_table2``'s traces, is in
``results/committed/mini_gammatune_table2_eta_delta/``. A run with another η or δ is its own
table row (``analysis.settings``: ``GammaTune (η = 0.5)``).

Persistence: by default (``transient=True``) γ̄ and γ restart from the
initial γ at every generation call (``begin_prompt()``, i.e. every prompt turn), as
transformers' ``"heuristic_transient"``. Only then does the initial γ shape every prompt and
the paper's "std across initial γ" measure what it claims: replaying 21 Spec-Bench turns, the
spread of GammaTune's throughput across initial γ was 0.002 of the oracle with carry-over and
0.023 with a restart per turn, against the paper's 0.05. ``transient=False`` carries γ̄ over
between the prompts of a job (like transformers' ``"heuristic"`` write-back); the job folder
and every record name it (``method_params``).

GammaTune+ (Sec. 4.2) adds the draft-confidence early stop of AssistantThreshold
(``threshold`` τ, default 0.4); see :mod:`methods.threshold`. Its ROC adaptation
is off by default: in transformers it only runs in the base candidate generator,
never in a subclass such as one implementing a custom γ rule.
"""

from __future__ import annotations

import math
from typing import Any

from methods.base import DraftStep, GammaPolicy, RoundOutcome, policy
from methods.threshold import DEFAULT_THRESHOLD, ConfidenceStop
from specbench.config import check_bool, check_choice, check_number

CEIL_EPS = 1e-9
EXPAND_ON = ("gamma", "drafted")


@policy("gammatune")
class GammaTune(GammaPolicy):
    """EWMA of accepted tokens (+δ on fully accepted rounds), bounded, rounded up."""

    name = "gammatune"

    def __init__(
        self,
        gamma_init: int,
        eta: float = 0.25,
        delta: float = 2,
        gamma_min: float = 1,
        gamma_max: float = 32,
        transient: bool = True,
        expand_on: str = "gamma",
    ) -> None:
        super().__init__(gamma_init)
        self.eta = check_number("eta", eta, 0.0, 1.0)
        if self.eta == 0:
            raise ValueError("eta must be in (0, 1]: eta = 0 never adapts")
        self.delta = check_number("delta", delta, 0.0)
        self.gamma_min = check_number("gamma_min", gamma_min)
        self.gamma_max = check_number("gamma_max", gamma_max)
        if self.gamma_min <= 0:
            raise ValueError(f"gamma_min must be > 0, got {gamma_min!r}")
        if self.gamma_max < self.gamma_min:
            raise ValueError(f"need gamma_min <= gamma_max, got {gamma_min!r} > {gamma_max!r}")
        if not self.gamma_min <= self.gamma_init <= self.gamma_max:
            raise ValueError(
                f"initial gamma {self.gamma_init} outside [gamma_min, gamma_max] = "
                f"[{gamma_min}, {gamma_max}]; widen method.gamma_min/method.gamma_max"
            )
        self.transient = check_bool("transient", transient)
        self.expand_on = check_choice("expand_on", expand_on, EXPAND_ON)
        self.reset()

    def reset(self) -> None:
        self.gamma_bar = float(self.gamma_init)
        self.gamma = self.gamma_init
        self.rounds = 0

    def begin_prompt(self) -> None:
        if self.transient:
            self.gamma_bar = float(self.gamma_init)
            self.gamma = self.gamma_init

    def next_gamma(self) -> int:
        return self.gamma

    def observe(self, outcome: RoundOutcome) -> None:
        if outcome.drafted == 0:
            return
        self.rounds += 1
        if self.expand_on == "gamma":
            expand = outcome.accepted == outcome.gamma
        else:
            expand = outcome.all_accepted
        a = outcome.accepted + self.delta if expand else outcome.accepted
        ewma = (1 - self.eta) * self.gamma_bar + self.eta * a
        self.gamma_bar = min(self.gamma_max, max(self.gamma_min, ewma))
        self.gamma = max(1, math.ceil(self.gamma_bar - CEIL_EPS))

    def state(self) -> dict:
        return {
            "gamma": self.gamma,
            "gamma_bar": self.gamma_bar,
            "transient": self.transient,
            "expand_on": self.expand_on,
            "rounds": self.rounds,
        }


@policy("gammatune_plus")
class GammaTunePlus(GammaTune):
    """GammaTune + stop drafting once the draft's probability of its token is below τ (Sec. 4.2)."""

    name = "gammatune_plus"
    needs = frozenset({"confidence"})

    def __init__(
        self,
        gamma_init: int,
        threshold: float = DEFAULT_THRESHOLD,
        adaptive_threshold: bool = False,
        persist_threshold: bool = False,
        **gammatune_knobs: Any,
    ) -> None:
        """τ and its adaptation (``methods.threshold.ConfidenceStop``); every other knob is GammaTune's, passed on
        (``GammaPolicy.knobs`` lists them: written once, in ``GammaTune.__init__``)."""
        self.confidence = ConfidenceStop(threshold, adaptive_threshold, persist_threshold)
        super().__init__(gamma_init, **gammatune_knobs)

    def reset(self) -> None:
        super().reset()
        self.confidence.reset()

    def begin_prompt(self) -> None:
        super().begin_prompt()
        self.confidence.begin_prompt()

    def stop_drafting(self, step: DraftStep) -> bool:
        return self.confidence.stop(step.confidence)

    def observe(self, outcome: RoundOutcome) -> None:
        super().observe(outcome)
        self.confidence.observe(outcome)

    def state(self) -> dict:
        return {**super().state(), **self.confidence.state()}
