"""The interface between the decoding loop and a speculation-length policy.

The loop (``runners.engine.speculative.SpeculativeRunner``) owns prefill, drafting,
verification and cache cropping. A policy only *decides*:

* ``begin_prompt()`` is called before every prompt (per-turn);
* ``next_gamma()`` returns the number of tokens to draft in the next round
  (γ, an int >= 0; ``0`` = a plain target step, no drafting), *before* the loop
  caps it by the remaining token budget;
* ``stop_drafting(step)`` is asked after each drafted token with a ``DraftStep``
  (its position in the round and the draft features the policy asked for:
  confidence, entropy, margin); ``True`` ends the round's drafting early (that
  token is still verified), as transformers' ``assistant_confidence_threshold`` does;
* ``verify_count(proposed)`` (optional) is asked once the round's drafting is over, with
  the number of tokens proposed: how many of them to verify (default: all). ``0`` after a
  one-token draft is a *peek*: the policy looked at the draft's first token, judged it not
  worth a verification, and the round becomes a plain target step (the draft forward is
  still paid; ``RoundOutcome.discarded`` counts such tokens);
* ``observe(outcome)`` is told what happened in the round.

The job (not the loop) also asks for ``snapshot()`` before an untimed warm-up generation and hands it
back to ``restore(snapshot)`` after it, so that the warm-up leaves the policy exactly as it was.

What a policy needs from the drafter it says in ``needs`` (a class attribute, a
frozenset of ``FEATURES`` and ``COSTS``): the drafter computes only those (no
softmax at all when no feature is needed), and the loop times the round only when
``COSTS`` is asked for. Features it did not ask for are ``None`` in its steps.

Definitions used by every policy (GammaTune paper, Sec. 3/4; issue #3):
``A`` = ``outcome.accepted`` = draft tokens the target accepted in the round,
*not* counting the target's own bonus/correction token; ``d`` =
``outcome.drafted`` = draft tokens actually proposed in the round (can be
below γ after a confidence stop, an EOS, or the token budget).
"""

from __future__ import annotations

import copy
import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from specbench.registry import Registry

#: per drafted token: the draft's probability of its token, the entropy (nats) of the
#: distribution it was drawn from, and the margin ``p(top-1) − p(top-2)`` of that distribution
FEATURES = frozenset({"confidence", "entropy", "margin"})
#: per round: measured (real runs) or predicted (replay) ``draft_ms`` / ``verify_ms`` / ``round_ms``
COSTS = "costs"


@dataclass(frozen=True)
class DraftStep:
    """One drafted token, as ``stop_drafting`` sees it.

    ``position``: 1-based index of the token in the round; ``budget``: the most tokens
    this round may draft (``min(γ, remaining − 1)``). The features are ``None`` unless
    the policy's ``needs`` names them (or the drafter has none: prompt lookup).
    """

    position: int
    token: int = -1
    confidence: float | None = None
    entropy: float | None = None
    margin: float | None = None
    budget: int = 0


def policy_needs(policy: object) -> frozenset[str]:
    """What ``policy`` asks of the drafter and the loop (``needs``; empty when it says nothing)."""
    return frozenset(getattr(policy, "needs", frozenset()) or ())


@dataclass(frozen=True)
class RoundOutcome:
    """What one verification round did.

    ``confidences[i]`` is the draft's probability of drafted token ``i``
    (empty when the drafter has no probabilities, e.g. prompt lookup, or when the
    policy does not need ``confidence``).
    The first ``accepted`` drafted tokens were accepted; when
    ``accepted < drafted`` token ``accepted`` was rejected and the rest were
    never compared.
    """

    gamma: int
    drafted: int
    accepted: int
    confidences: tuple[float, ...] = field(default_factory=tuple)
    eos_accepted: bool = False  # an accepted drafted token was an EOS (generation ends in this round)
    steps: tuple[DraftStep, ...] = field(default_factory=tuple)  # one per drafted token (features as asked)
    # the round's cost, when the policy needs COSTS: measured by SpeculativeRunner, predicted by the
    # latency model in runners.replay (None otherwise). round_ms = draft_ms + verify_ms + the loop's own time
    draft_ms: float | None = None
    verify_ms: float | None = None
    round_ms: float | None = None
    discarded: int = 0  # tokens drafted but not verified (``verify_count`` < proposed); not in ``drafted``

    def __post_init__(self) -> None:
        if not 0 <= self.accepted <= self.drafted:
            raise ValueError(f"need 0 <= accepted <= drafted, got {self.accepted} > {self.drafted}")

    @property
    def all_accepted(self) -> bool:
        """``A == d`` with ``d >= 1``: every drafted token was accepted."""
        return self.drafted >= 1 and self.accepted == self.drafted


class GammaPolicy(ABC):
    """Base class of every speculation-length policy.

    Subclasses are registered in ``methods.policies.POLICIES`` under the same
    string as their ``name`` and the ``policy:`` field of ``conf/method/*.yaml``.
    ``gamma_init`` is the initial γ (the top-level ``gamma`` config key).
    """

    name: str = ""
    needs: frozenset[str] = frozenset()  # FEATURES and/or COSTS this policy reads

    @classmethod
    def knobs(cls) -> dict[str, Any]:
        """The constructor's knobs (``gamma_init`` aside) with their defaults, in order; a constructor that passes
        ``**kwargs`` on to its base's (``GammaTunePlus``: GammaTune's seven, written once) has those too. The
        defaults are there to build a policy by hand: a method's one source of defaults is its YAML
        (``specbench.config.method``), and each policy's equal its own YAML's (``tests/methods/test_policies.py``)."""
        out: dict[str, Any] = {}
        for klass in cls.__mro__:
            if "__init__" not in vars(klass) or klass is GammaPolicy:
                continue
            params = inspect.signature(vars(klass)["__init__"]).parameters.values()
            out.update({p.name: p.default for p in params if p.name not in ("self", "gamma_init", *out)
                        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)})
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                break
        return out

    def __init__(self, gamma_init: int) -> None:
        if int(gamma_init) != gamma_init or gamma_init < 1:
            raise ValueError(f"gamma must be an integer >= 1, got {gamma_init!r}")
        self.gamma_init = int(gamma_init)

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Back to the state right after construction (a job calls it once, after its warm-up,
        so that every timed prompt sees the policy the job configured)."""

    def begin_prompt(self) -> None:  # noqa: B027 - optional hook
        """Called before each prompt; per-prompt state is reset here."""

    @abstractmethod
    def next_gamma(self) -> int:
        """γ for the next round (>= 0; 0 = a plain target step)."""

    def stop_drafting(self, step: DraftStep) -> bool:
        """Whether to stop drafting after this drafted token (``step``: its position and features)."""
        return False

    def verify_count(self, proposed: int) -> int:
        """How many of the ``proposed`` drafted tokens the target verifies (a prefix; default: all)."""
        return proposed

    def observe(self, outcome: RoundOutcome) -> None:  # noqa: B027 - optional hook
        """Told the outcome of the round just verified."""

    def state(self) -> dict:
        """Policy state worth recording in the job summary (JSON-serialisable)."""
        return {}

    def snapshot(self) -> object:
        """Everything a generation can change in this policy, to be put back by ``restore``: an untimed
        warm-up generation (``warmup_per_prompt``, hf-bench's protocol) must leave no trace in the timed
        one (a carried-over γ, an adapted threshold, a bandit's counts and random state). The default
        copies every attribute deeply; a policy holding something that cannot or should not be copied
        overrides both methods."""
        return copy.deepcopy(vars(self))

    def restore(self, snapshot: object) -> None:
        """Put the policy back exactly as it was when ``snapshot`` was taken (the snapshot stays
        usable: it can be restored again)."""
        assert isinstance(snapshot, dict), "a snapshot of GammaPolicy.snapshot"
        vars(self).clear()
        vars(self).update(copy.deepcopy(snapshot))


#: every policy by name (``policy:`` in ``conf/method/*.yaml``), each declared on its class with ``@policy("<name>")``
#: in a module of ``methods/`` and imported the first time its name is asked for (``specbench.registry``); here, beside
#: the interface every policy subclasses, so that declaring one imports nothing else (``methods.policies`` builds them)
POLICIES: Registry[type[GammaPolicy]] = Registry("gamma policy", package="methods", marker="policy")
policy = POLICIES.register


@policy("fixed")
class FixedGamma(GammaPolicy):
    """SpecDecode: a constant γ every round (Leviathan et al. 2023; Chen et al. 2023)."""

    name = "fixed"

    def next_gamma(self) -> int:
        return self.gamma_init
