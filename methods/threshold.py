"""AssistantThreshold: fixed γ plus transformers' draft-confidence early stop (Mamou et al. 2024a).

Stop rule, as transformers' ``ConfidenceCriteria`` (``generation/stopping_criteria.py``,
5.23): after each drafted token, stop drafting if the draft's probability of that
token is ``< assistant_confidence_threshold``. The token that triggered the stop is
still verified (the loop does that). ``p == τ`` continues. ``τ = 0`` never stops
(transformers only installs the criterion when ``τ > 0``).

Adaptive τ (``adaptive_threshold=True``), as ``AssistedCandidateGenerator``
(transformers ≥ 4.47; ``update_candidate_strategy`` in 5.23):

* every drafted token's draft probability is collected (``probs``); after
  verification ``matches`` gets ``[1] * A`` and, if a drafted token remains,
  one ``0`` for the rejected token ``A``; probabilities of the tokens after it
  (never compared) are dropped. So a round with ``A == d`` adds only positives;
* once more than 5 pairs are held (``len(probs) > 5``) and both labels occur, it
  fits ``sklearn.metrics.roc_curve(matches, probs)`` (accepted = positive) and
  sets τ to the ROC threshold minimising ``FPR + 3·FNR`` (first minimum,
  ``np.argmin``), re-fitted after every later round on all pairs of the call;
* it only adapts while τ is non-zero; the new τ applies from the next round.

Persistence across prompts (our decision): by default the observations *and* τ
reset at ``begin_prompt()``, as in transformers 5.23, where each ``generate()``
builds a new candidate generator from a copy of the assistant's config and the
adapted value is not written back. ``persist_threshold=True`` mimics transformers
4.47–4.57, where the adapted τ was written to the assistant's
``generation_config`` and so carried into the next call, while the collected
(probability, accepted) pairs still started empty (they live on the
per-call candidate generator).

scikit-learn is imported only when ``adaptive_threshold`` is on (a
:class:`~specbench.registry.ConfigError` if missing). transformers computes the
probabilities from the drafter's *processed* scores (after temperature etc.);
that is the drafter's business, this module only sees ``RoundOutcome.confidences``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from methods.base import DraftStep, GammaPolicy, RoundOutcome, policy
from specbench.config import check_bool, check_number
from specbench.registry import ConfigError

#: transformers' default ``assistant_confidence_threshold`` (since 4.45).
DEFAULT_THRESHOLD = 0.4
#: ``FPR + FN_WEIGHT * FNR`` is minimised by the ROC adaptation (transformers: 3).
FN_WEIGHT = 3.0
#: the ROC is fitted once *more than* this many labelled pairs are held (transformers: 5).
MIN_PAIRS = 5


def load_roc_curve() -> Callable:
    """``sklearn.metrics.roc_curve``, imported lazily (only the adaptive threshold needs it)."""
    try:
        from sklearn.metrics import roc_curve
    except ImportError as exc:
        raise ConfigError(
            "adaptive_threshold=true needs scikit-learn, which is not installed "
            "(pip install scikit-learn, or the 'threshold' extra of specbench); "
            "or set method.adaptive_threshold=false"
        ) from exc
    return roc_curve


class ConfidenceStop:
    """The draft-confidence early stop, optionally with transformers' ROC-adapted τ.

    Shared by ``assistant_threshold`` and ``gammatune_plus``; see the module docstring.
    """

    def __init__(self, threshold: float, adaptive: bool = False, persist: bool = False) -> None:
        self.threshold_init = check_number("threshold", threshold, 0.0, 1.0)
        self.adaptive = check_bool("adaptive_threshold", adaptive)
        self.persist = check_bool("persist_threshold", persist)
        self._roc_curve = load_roc_curve() if self.adaptive else None
        self.reset()

    def reset(self) -> None:
        self.threshold = self.threshold_init
        self.probs: list[float] = []
        self.matches: list[int] = []
        self.roc_fits = 0
        self.prompt_end_thresholds: list[float] = []
        self._prompts = 0

    def begin_prompt(self) -> None:
        if self.adaptive and self._prompts:
            self.prompt_end_thresholds.append(self.threshold)
        self._prompts += 1
        self.probs.clear()
        self.matches.clear()
        if not self.persist:
            self.threshold = self.threshold_init

    def stop(self, confidence: float | None) -> bool:
        return confidence is not None and confidence < self.threshold

    def observe(self, outcome: RoundOutcome) -> None:
        if not self.adaptive or not self.threshold:
            return
        conf = outcome.confidences
        if not conf:  # a drafter without probabilities (e.g. prompt lookup): nothing to learn
            return
        if len(conf) != outcome.drafted:
            raise ValueError(f"RoundOutcome has {len(conf)} confidences for {outcome.drafted} drafted tokens")
        # transformers' labelling: accepted prefix -> 1, the rejected token -> 0, the rest dropped
        self.probs.extend(float(p) for p in conf)
        self.matches.extend([1] * outcome.accepted)
        if len(self.probs) > len(self.matches):
            self.matches.append(0)
        del self.probs[len(self.matches) :]
        if len(self.probs) > MIN_PAIRS and 0 in self.matches and 1 in self.matches:
            fpr, tpr, thresholds = self._roc_curve(self.matches, self.probs)
            costs = fpr + FN_WEIGHT * (1 - tpr)
            best = float(thresholds[int(costs.argmin())])
            if math.isfinite(best):  # never the +inf sentinel in practice (its cost is FN_WEIGHT)
                self.threshold = best
                self.roc_fits += 1

    def state(self) -> dict:
        out: dict = {"threshold": self.threshold, "threshold_init": self.threshold_init}
        if self.adaptive:
            out.update(
                adaptive_threshold=True,
                persist_threshold=self.persist,
                roc_fits=self.roc_fits,
                labelled_pairs=len(self.probs),
                prompt_end_thresholds=self.prompt_end_thresholds
                + ([self.threshold] if self._prompts else []),
            )
        return out


@policy("assistant_threshold")
class AssistantThreshold(GammaPolicy):
    """Fixed γ; drafting stops early once the draft's probability of its token is below τ.

    ``threshold`` τ (default 0.4, transformers' default); ``adaptive_threshold``
    adapts τ by ROC as transformers ≥ 4.47 (default off: a fixed τ, the rule of
    Mamou et al. 2024a); ``persist_threshold`` keeps the adapted τ across prompts
    (default off, as transformers 5.x).
    """

    name = "assistant_threshold"
    needs = frozenset({"confidence"})

    def __init__(
        self,
        gamma_init: int,
        threshold: float = DEFAULT_THRESHOLD,
        adaptive_threshold: bool = False,
        persist_threshold: bool = False,
    ) -> None:
        super().__init__(gamma_init)
        self.confidence = ConfidenceStop(threshold, adaptive_threshold, persist_threshold)

    def reset(self) -> None:
        self.confidence.reset()

    def begin_prompt(self) -> None:
        self.confidence.begin_prompt()

    def next_gamma(self) -> int:
        return self.gamma_init

    def stop_drafting(self, step: DraftStep) -> bool:
        return self.confidence.stop(step.confidence)

    def observe(self, outcome: RoundOutcome) -> None:
        self.confidence.observe(outcome)

    def state(self) -> dict:
        return {"gamma": self.gamma_init, **self.confidence.state()}
