"""BanditSpec: the speculation length chosen online by a multi-armed bandit over γ values
(Hou, Zhang, Du, Zhang, Pan, Pang, Du, Tan & Yang, "BanditSpec: Adaptive Speculative Decoding via
Bandit Algorithms", ICML 2025, PMLR 267:24045–24079, arXiv:2505.15141).

Each round is a pull of one arm (a γ); its reward is the round's throughput, tokens per ms
(``methods.bandits``). Two algorithms, as the paper's:

* ``algorithm=ucb`` — UCBSpec, for stochastic rewards: UCB1, every arm once, then
  ``argmax mean_i + c·√(2 ln n / n_i)``;
* ``algorithm=exp3`` — EXP3Spec, for adversarial rewards: EXP3 with a horizon of ``horizon``
  rounds and a seeded generator (``seed``).

Defaults. ``arms = 1..8``: the reference code (``sail-sg/BanditSpec``, ``generate_utils.py``,
``ucb_length_spec_generate``) uses γ ∈ {1, 2, 3, 4} for its EAGLE drafter; a separate small draft
model on this CPU is best at γ ≈ 4–8 (``results/committed/mini_gammatune_table2``), so the arms
cover both. ``c = 1`` (UCB1's constant; the reference code's exploration weight 6 multiplies a
reward in tokens/s, a different scale). ``horizon = 200`` rounds, ``seed = 0``. UCB's warm-up
plays the initial γ first, then the other arms in ascending order. ``transient = true``: the bandit
restarts at every generation call (the project's rule for adaptive policies); ``false``
keeps its statistics across the prompts of a job (what a serving deployment would do).
The initial γ joins the arms (when it is not one) and is the arm the first round plays.
``latency``: a calibrate JSON for the reward's cost when the loop gives no measured cost.
"""

from __future__ import annotations

from methods.bandits import EXP3, UCB1, RewardScale, parse_arms
from methods.base import COSTS, GammaPolicy, RoundOutcome, policy
from methods.costs import CostModel
from specbench.config import check_bool, check_number

ALGORITHMS = ("ucb", "exp3")
ARMS = (1, 2, 3, 4, 5, 6, 7, 8)  # the default arms (module docstring), as conf/method/banditspec.yaml writes them


@policy("banditspec")
class BanditSpec(GammaPolicy):
    """γ = the arm a UCB1 / EXP3 bandit pulls; reward = tokens per ms of the round."""

    name = "banditspec"
    needs = frozenset({COSTS})

    def __init__(self, gamma_init: int, algorithm: str = "ucb", arms: object = ARMS, c: float = 1.0,
                 horizon: int = 200, seed: int = 0, transient: bool = True, latency: str | None = None) -> None:
        super().__init__(gamma_init)
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        self.algorithm = algorithm
        values = parse_arms(arms, ARMS)
        self.arms = [self.gamma_init] + sorted(g for g in values if g != self.gamma_init)
        self.c = check_number("c", c, 0.0)
        self.horizon = int(check_number("horizon", horizon, 1.0))
        self.seed = int(seed)
        self.transient = check_bool("transient", transient)
        self.costs = CostModel.build(latency)
        self.reward = RewardScale(self.costs)
        self.bandit = UCB1(len(self.arms), self.c) if algorithm == "ucb" else EXP3(len(self.arms), self.horizon, self.seed)
        self.arm = 0
        self.fresh = True
        self.rounds = 0

    def begin_prompt(self) -> None:
        if self.transient:
            self.bandit.reset()
            self.reward.best = 0.0
            self.fresh = True

    def next_gamma(self) -> int:
        self.arm = 0 if self.fresh else self.bandit.choose()
        return self.arms[self.arm]

    def observe(self, outcome: RoundOutcome) -> None:
        self.fresh = False
        self.rounds += 1
        self.costs.observe(outcome)
        self.bandit.update(self.arm, self.reward(outcome))

    def state(self) -> dict:
        return {"algorithm": self.algorithm, "arms": self.arms, "transient": self.transient, "rounds": self.rounds,
                **self.bandit.state()}
