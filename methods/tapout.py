"""TapOut: a bandit that picks, each round, which parameter-free stopper ends the drafting
(Sridhar, Sinnadurai, Lie & Thangarasa 2025, "TapOut: A Bandit-Based Approach to Dynamic
Speculative Decoding", arXiv:2511.02017).

Each round the bandit chooses an arm — a stopper: Max-Confidence, Logit-Margin, SVIP or AdaEDL
(``methods.max_confidence``, ``methods.logit_margin``, ``methods.svip``, ``methods.adaedl``, each
with its own default) — drafts up to γ (the initial γ) tokens under that stopper, and is rewarded
with the round's throughput (tokens per ms; ``methods.bandits``). ``algorithm=ucb`` (UCB1,
default) or ``exp3``. TapOut's meta-algorithm is "online, training-free, no tuning": its arms'
thresholds are the stoppers' defaults and the bandit needs none.

Our choices where the paper's text was not available offline: the four arms above (``arms``, any
subset, in this order), the reward (throughput rather than acceptance, since speed is the goal and
a stopper that drafts little has a high acceptance rate), ``c = 1``, and ``transient = true`` (the
bandit restarts at every generation call, the project's rule; ``false`` keeps it across prompts).
"""

from __future__ import annotations

from methods.adaedl import AdaEDL
from methods.bandits import EXP3, UCB1, RewardScale
from methods.banditspec import ALGORITHMS
from methods.base import COSTS, DraftStep, GammaPolicy, RoundOutcome, policy
from methods.costs import CostModel
from methods.logit_margin import LogitMargin
from methods.max_confidence import MaxConfidence
from methods.stoppers import StopRule
from methods.svip import SVIP
from specbench.config import check_bool, check_number

STOPPERS: dict[str, type[StopRule]] = {cls.name: cls for cls in (MaxConfidence, LogitMargin, SVIP, AdaEDL)}


@policy("tapout")
class TapOut(GammaPolicy):
    """γ = the initial γ; the round's stopper = the arm a UCB1 / EXP3 bandit pulls."""

    name = "tapout"
    needs = frozenset({"confidence", "entropy", "margin", COSTS})

    def __init__(self, gamma_init: int, algorithm: str = "ucb", arms: object = None, c: float = 1.0,
                 horizon: int = 200, seed: int = 0, transient: bool = True, latency: str | None = None) -> None:
        super().__init__(gamma_init)
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        names = list(STOPPERS) if arms is None else (arms.split(",") if isinstance(arms, str) else list(arms))
        unknown = [a for a in names if a not in STOPPERS]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(f"arms must be distinct stoppers among {list(STOPPERS)}, got {arms!r}")
        self.arm_names = [str(a) for a in names]
        self.stoppers = [STOPPERS[a](self.gamma_init) for a in self.arm_names]
        self.algorithm = algorithm
        self.c = check_number("c", c, 0.0)
        self.transient = check_bool("transient", transient)
        self.costs = CostModel.build(latency)
        self.reward = RewardScale(self.costs)
        k = len(self.stoppers)
        self.bandit = UCB1(k, self.c) if algorithm == "ucb" else EXP3(k, int(horizon), int(seed))
        self.arm = 0
        self.rounds = 0

    def begin_prompt(self) -> None:
        if self.transient:
            self.bandit.reset()
            self.reward.best = 0.0

    def next_gamma(self) -> int:
        self.arm = self.bandit.choose()
        return self.gamma_init

    def stop_drafting(self, step: DraftStep) -> bool:
        return self.stoppers[self.arm].stop(step)

    def observe(self, outcome: RoundOutcome) -> None:
        self.rounds += 1
        self.costs.observe(outcome)
        self.bandit.update(self.arm, self.reward(outcome))

    def state(self) -> dict:
        return {"algorithm": self.algorithm, "arms": self.arm_names, "gamma": self.gamma_init,
                "transient": self.transient, "rounds": self.rounds, **self.bandit.state()}
