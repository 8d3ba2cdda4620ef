"""Ours: a cost-aware optimal-stopping policy — draft while the next token is worth its time.

Problem. A job is a sequence of rounds; round ``r`` drafts ``d_r`` tokens, then the target verifies
``d_r + 1`` in one forward. Under greedy verification a round emits ``A_r + 1`` tokens (``A_r``: the
accepted prefix) and costs ``C(d_r) = d_r·D + V(d_r + 1) + O`` (``methods.costs``: ``D`` a draft
forward, ``V(k)`` a ``k``-token verification — *not* monotone on a CPU —, ``O`` the loop). We want
the largest long-run throughput ``ρ = E[Σ (A_r + 1)] / E[Σ C(d_r)]``.

Step 1 — from a ratio to a sum (renewal-reward; Dinkelbach 1967). Rounds renew the process, so
``ρ* = max_π E[A + 1] / E[C]`` over per-round stopping rules ``π``, and ``π`` is optimal iff it
maximises ``E[(A + 1) − ρ*·C]``, whose maximum is 0. For ``ρ ≤ ρ*`` the maximiser of
``E[(A + 1) − ρ·C]`` reaches a ratio ``≥ ρ``, so iterating ``ρ ←`` the achieved ratio climbs to
``ρ*``. We use ``ρ`` = tokens / ms achieved so far (cumulative, plus ``rho_prior_rounds`` pseudo-rounds
at the prior model's best fixed-γ rate ``ρ₀``), and maximise ``E[(A + 1) − ρ·C]`` in every round.

Step 2 — the round as optimal stopping. After drafting ``j`` tokens the policy knows their
features. Let ``a_i = P(token i accepted | tokens 1..i−1 accepted, features)`` and the survival
``S_j = Π_{i≤j} a_i``. Then ``E[A + 1 | stop after j] = 1 + Σ_{i≤j} S_i`` (token ``i`` is emitted iff
every token up to ``i`` is accepted; the target's own token always is), so drafting token ``j + 1``
adds ``S_j · a_{j+1}`` expected tokens for ``D`` ms, and stopping after ``j`` costs ``V(j + 1)``. The
draft drawn costs are sunk, so the decision after ``j`` tokens depends only on ``(j, S_j, b_j)``,
``b_j`` the feature bucket of token ``j`` (the next token's features depend on it: easy and hard
stretches come in runs). With the value ``W`` of the rest of the round::

    W(j, S, b) = max( −ρ·V(j + 1),                                                  stop now
                      Σ_b' T[b, b'] · ( S·a(b') − ρ·D + W(j + 1, S·a(b'), b') ) )    draft one more
    W(J, S, b) = −ρ·V(J + 1)                                          (J = the round's budget)

and, before drafting (the γ = 0 decision), ``max(−ρ·V(1), Σ_b' P₀[r, b'] (a(b') − ρD + W₁(a(b'), b')))``
with ``P₀[r, ·]`` the first token's bucket distribution after a round of kind ``r`` (plain step or
start / rejection / full acceptance). The policy stops after token ``j`` iff stopping is worth at least
the continuation.

A *peek* (``peek=true``): after the first token, the round may also verify nothing
(``verify_count`` = 0: a plain target step, the draft forward paid). Its value is ``−S₁ − ρ·V(1)``
(the expected token ``S₁`` credited when drafting is given back), so
``W₁(S, b) = max(W(1, S, b), −S − ρ·V(1))`` and the policy peeks iff the first token is not worth
``V(2) − V(1)`` ms of verification nor a continuation — on this CPU ``V(2) − V(1)`` ≈ 60 ms, so a
first token below ~90 % acceptance is verified only if more tokens follow it. The first token's
features cost one draft forward to see; a peek is the only way to use them before paying a
verification (``runners.replay``'s oracle includes peeks, so it still bounds this policy). This is the exact optimal stopping rule of the model; it needs no threshold, and it
sees the cost table: it continues through a dear shape to reach a cheap one (``V(3)`` ≈ 187 ms,
``V(4)`` ≈ 123 ms here: stopping after 2 tokens is almost never right), and it drafts nothing when
even a good first token would not pay for ``D + V(2) − V(1)``. ``W`` is convex in ``S`` (a max of
convex functions), computed by backward induction on a grid of ``S`` (0 and 47 log-spaced points
from 1e-4 to 1, linear interpolation) once per round: ``O(J · G · B²)``, about a millisecond.

Step 3 — the model, learnt online (no training, no tuning on the evaluation prompts):

* ``a(b)``: acceptance of a token whose draft confidence falls in bucket ``b``, a Beta-Bernoulli
  mean with prior mean the bucket's centre (a calibrated draft) and weight ``prior_weight``; labels
  are exactly the conditional ones: each *compared* token (every token up to and including the
  first rejection) is a 1 if accepted, the rejected one a 0; tokens after it were never compared;
* ``T[b, b']``: transitions between consecutive drafted tokens' buckets (every drafted token's
  features are seen, compared or not), ``P₀[r, b]``: the first token's bucket after a round of kind
  ``r``; Dirichlet counts with ``prior_weight`` pseudo-counts spread as the overall bucket frequencies;
* a drafter without features (prompt lookup: its steps carry none and it never asks
  ``stop_drafting``): ``a_j`` per position ``j`` in the round and kind ``r`` of the previous round,
  shrunk to the position's pooled rate and then to the overall rate (``prior_weight``); the whole
  decision is then made before drafting, ``γ = argmax_d Σ_{i≤d} Π_{l≤i} a_l − ρ·(d·D + V(d + 1))``;
* costs: a calibrate JSON (``latency``: ``python -m runners.replay calibrate``), or learnt online
  from the rounds' measured costs (``methods.costs``). With a calibrate JSON ``ρ`` uses the model's
  predicted costs, so the policy's decisions depend only on tokens and features: it makes the same
  decisions in a real run and in a replay of the same rollouts. ``adapt_costs=true`` keeps the
  calibrated table as the prior and corrects it by the rounds' measured costs (``CostModel.build``:
  per verified length and a global drift ratio), and ``ρ`` uses measured times: in a replay the
  measured costs are the latency model's, so it replays as the calibrated model (up to the table's
  per-context slope); in a real run it prices
  rounds as the machine charges them (the calibration's isolated forwards misprice the engine's rounds
  by up to 37 %, ``results/committed/policy_lab/compare_threads2``).

Knobs. ``feature`` (``confidence``, ``margin`` or ``entropy``: which draft feature buckets the
acceptance), ``gamma_max`` (the longest round, 32), ``prior_weight`` (2), ``rho_prior_rounds`` (4),
``alpha_prior`` (0.6: the prior per-token acceptance behind ``ρ₀`` and the featureless prior),
``peek`` (true), ``decay`` (0.98: forgetting of the per-position rates of a featureless drafter),
``probe`` (8: after this many plain steps in a row a round drafts anyway — a policy that never drafts
learns nothing, the lock-in SmartSpec's probe avoids too), ``adapt_costs`` (false: see costs).
``transient`` (default ``true``, the project's rule for every adaptive policy: restart at every
generation call, so a job's prompts are independent of their order); ``false`` keeps what was learnt
across the prompts of a job — what it learns is a property of the pair and the machine (how
confidence maps to acceptance, what a verification costs), not a γ, so carrying it over is the
natural deployment setting, and the lab reports both. The initial γ is the most the
very first round after a (re)start may draft, before anything is known; after that γ is the
model's choice (γ = 0 included). What a causal policy cannot know is in ``runners.replay``'s
oracle: the oracle knows where the draft will diverge; this policy only knows the odds.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from methods.base import COSTS, DraftStep, GammaPolicy, RoundOutcome, policy
from methods.costs import CostModel
from specbench.config import check_bool, check_number

#: feature -> bucket edges (ascending) and the bucket's prior acceptance (its centre; entropy: a guess
#: decreasing in the entropy, as AdaEDL's bound 1 − √(0.2·H))
BUCKETS = {
    "confidence": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0),
    "margin": (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.98, 1.0),
    "entropy": (0.0, 0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 1e9),
}
GRID = np.concatenate([[0.0], np.geomspace(1e-4, 1.0, 47)])
KINDS = 3  # previous round: 0 plain step / start, 1 rejection, 2 every drafted token accepted
#: the DP's states: buckets of a token's calibrated acceptance probability
PROB_EDGES = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.94, 0.97, 0.985, 0.995, 1.0])


def _bucket_prior(feature: str) -> np.ndarray:
    edges = BUCKETS[feature]
    mids = np.array([(lo + min(hi, 4.0)) / 2 for lo, hi in zip(edges[:-1], edges[1:])])
    if feature == "entropy":
        return np.clip(1.0 - np.sqrt(0.2 * mids), 0.02, 0.98)
    return np.clip(mids, 0.02, 0.98)


#: the least a round may cost in ρ's prior (ms): a zero cost table would divide by zero
FREE_ROUND_MS = 1e-9

@policy("cost_aware")
class CostAware(GammaPolicy):
    """Optimal stopping of each round for the most tokens per ms (module docstring)."""

    name = "cost_aware"
    needs = frozenset({"confidence", "entropy", "margin", COSTS})

    def __init__(self, gamma_init: int, feature: str = "confidence", gamma_max: int = 32, prior_weight: float = 2.0,
                 rho_prior_rounds: float = 4.0, alpha_prior: float = 0.6, peek: bool = True,
                 decay: float = 0.98, probe: int = 8, transient: bool = True, latency: str | None = None,
                 adapt_costs: bool = False) -> None:
        super().__init__(gamma_init)
        self.features = tuple(str(feature).split("+"))
        if not 1 <= len(self.features) <= 2 or any(f not in BUCKETS for f in self.features):
            raise ValueError(f"feature must be one of {sorted(BUCKETS)} or two joined by '+', got {feature!r}")
        self.feature = str(feature)
        self.needs = frozenset({*self.features, COSTS})  # only what it reads (one feature: one softmax)
        self.edge_arrays = [np.array(BUCKETS[f][1:-1]) for f in self.features]
        self.shape = tuple(len(BUCKETS[f]) - 1 for f in self.features)
        self.n_buckets = int(np.prod(self.shape))  # feature cells
        self.gamma_max = int(check_number("gamma_max", gamma_max, 1.0))
        self.prior_weight = check_number("prior_weight", prior_weight, 1e-6)
        self.rho_prior_rounds = check_number("rho_prior_rounds", rho_prior_rounds, 0.0)
        self.alpha_prior = check_number("alpha_prior", alpha_prior, 0.01, 0.99)
        self.peek = check_bool("peek", peek)
        self.decay = check_number("decay", decay, 0.0, 1.0)
        self.probe = int(check_number("probe", probe, 1.0))
        self.transient = check_bool("transient", transient)
        self.latency = latency
        self.adapt_costs = check_bool("adapt_costs", adapt_costs)
        # read the latency file once; every (re)start begins from a fresh copy of this model
        self._cost_prior = CostModel.build(self.latency, adapt=self.adapt_costs)
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        b = self.n_buckets
        self.costs = copy.deepcopy(self._cost_prior)
        self.measured = self.costs.online or self.costs.adapt  # rho from the rounds' measured times
        self.acc = np.zeros(b)  # accepted labels per bucket
        self.cmp = np.zeros(b)  # compared labels per bucket
        self.freq = np.zeros(b)  # drafted tokens per bucket
        self.trans = np.zeros((b, b))
        self.start = np.zeros((KINDS, b))
        self.pos_acc: dict[tuple[int, int], float] = {}
        self.pos_cmp: dict[tuple[int, int], float] = {}
        self.tokens = 0.0
        self.cost = 0.0
        self.featured: bool | None = None
        self.kind = 0
        self.plain_streak = 0
        self.fresh = True
        self.stats = {"rounds": 0, "plain": 0, "drafted": 0, "peeks": 0}
        self._plan = None
        self._peeked = self._free = False
        self._peek_bucket: int | None = None
        self._s = 1.0
        self._prompt_start = True

    def begin_prompt(self) -> None:
        if self.transient:
            self.reset()
        self.kind = 0
        self._prompt_start = True

    # ------------------------------------------------------------------ the model
    def bucket(self, step: DraftStep) -> int | None:
        """The feature cell of a drafted token (None when the drafter gave no such feature)."""
        idx = []
        for name, edges in zip(self.features, self.edge_arrays):
            value = getattr(step, name)
            if value is None:
                return None
            idx.append(int(np.searchsorted(edges, value, side="right")))
        return int(np.ravel_multi_index(tuple(idx), self.shape))

    def cell_acceptance(self) -> np.ndarray:
        """Acceptance per feature cell: Beta-Bernoulli, shrunk to its prior (one feature: the bucket's
        centre; two: the mean of the two one-feature estimates) with weight ``prior_weight``."""
        w = self.prior_weight
        if len(self.features) == 1:
            prior = _bucket_prior(self.features[0])
        else:
            acc2, cmp2 = self.acc.reshape(self.shape), self.cmp.reshape(self.shape)
            axis_est = []
            for axis, name in enumerate(self.features):
                other = 1 - axis
                a1 = (acc2.sum(axis=other) + w * _bucket_prior(name)) / (cmp2.sum(axis=other) + w)
                axis_est.append(a1[:, None] if axis == 0 else a1[None, :])
            prior = ((axis_est[0] + axis_est[1]) / 2).ravel()
        return (self.acc + w * prior) / (self.cmp + w)

    def model(self) -> dict:
        """The DP's model on buckets of calibrated acceptance (``PROB_EDGES``): per cell its acceptance and
        bucket; per bucket its mean acceptance ``a``, transitions ``T`` and first-token distributions."""
        a_cell = self.cell_acceptance()
        k_of = np.searchsorted(PROB_EDGES[1:-1], a_cell, side="right")
        n_k = len(PROB_EDGES) - 1
        onehot = np.zeros((self.n_buckets, n_k))
        onehot[np.arange(self.n_buckets), k_of] = 1.0
        weights = self.freq + 1e-3
        mass = onehot.T @ weights
        mids = (PROB_EDGES[:-1] + PROB_EDGES[1:]) / 2
        a_k = np.where(mass > 0, (onehot.T @ (weights * a_cell)) / np.maximum(mass, 1e-12), mids)
        marg = onehot.T @ (self.freq + 1.0)
        marg = marg / marg.sum()
        w = self.prior_weight
        t = onehot.T @ self.trans @ onehot + w * marg[None, :]
        start = self.start @ onehot + w * marg[None, :]
        return {"a_cell": a_cell, "k_of": k_of, "a": a_k, "T": t / t.sum(axis=1, keepdims=True),
                "start": start / start.sum(axis=1, keepdims=True)}

    def acceptance(self) -> np.ndarray:
        """Acceptance per feature cell (``cell_acceptance``)."""
        return self.cell_acceptance()

    def position_acceptance(self, kind: int, horizon: int) -> np.ndarray:
        """Featureless drafters: conditional acceptance at positions 1..horizon after a round of ``kind``."""
        w = self.prior_weight
        total_a = sum(self.pos_acc.values())
        total_c = sum(self.pos_cmp.values())
        overall = (total_a + w * self.alpha_prior) / (total_c + w)
        out = np.empty(horizon)
        for j in range(horizon):
            pa = sum(self.pos_acc.get((r, j), 0.0) for r in range(KINDS))
            pc = sum(self.pos_cmp.get((r, j), 0.0) for r in range(KINDS))
            pooled = (pa + w * overall) / (pc + w)
            out[j] = (self.pos_acc.get((kind, j), 0.0) + w * pooled) / (self.pos_cmp.get((kind, j), 0.0) + w)
        return out

    @property
    def rho(self) -> float:
        """Tokens per ms achieved so far, with ``rho_prior_rounds`` pseudo-rounds at ``ρ₀``. A round the cost
        table says is free (an all-zero table: every schedule then costs nothing) counts as ``FREE_ROUND_MS``,
        so ρ stays finite and the value arithmetic below never meets ``inf · 0``."""
        c0 = self.costs.round(0)
        rho0 = max(self._geometric_tokens(d) / max(self.costs.round(d), FREE_ROUND_MS)
                   for d in range(0, min(self.gamma_max, 16) + 1))
        n0 = self.rho_prior_rounds
        return (self.tokens + n0 * rho0 * c0) / (self.cost + n0 * c0) if self.cost + n0 * c0 > 0 else rho0

    def _geometric_tokens(self, d: int) -> float:
        a = self.alpha_prior
        return (1 - a ** (d + 1)) / (1 - a)

    # ------------------------------------------------------------------ planning
    def _verify_costs(self, horizon: int) -> np.ndarray:
        return np.array([self.costs.verify(j + 1) for j in range(horizon + 1)])

    def _plan_round(self, horizon: int, model: dict | None = None) -> dict:
        """Backward induction of ``W`` (module docstring, step 2) for a round of at most ``horizon`` tokens,
        on the buckets of calibrated acceptance (``model``)."""
        model = model or self.model()
        rho, dcost = self.rho, self.costs.draft_cost
        a, t = model["a"], model["T"]
        v = self._verify_costs(horizon)
        g, b = len(GRID), len(a)
        w_next = np.full((g, b), -rho * v[horizon])
        cont = [None] * horizon
        w1 = w_next
        next_s = GRID[:, None] * a[None, :]
        for j in range(horizon - 1, 0, -1):
            wn = np.empty((g, b))
            for bp in range(b):
                wn[:, bp] = np.interp(next_s[:, bp], GRID, w_next[:, bp])
            gain = next_s - rho * dcost + wn  # drafting token j+1 lands in bucket b'
            cont[j] = gain @ t.T  # expected over T[b, ·]
            w_next = np.maximum(-rho * v[j], cont[j])
            w1 = w_next
        # the first token (S = 1): its bucket b' follows P₀; after it the round may also be a peek
        keep = np.array([np.interp(a[bp], GRID, w1[:, bp]) for bp in range(b)])
        if self.peek:
            keep = np.maximum(keep, -a - rho * v[0])
        first = a - rho * dcost + keep
        return {"horizon": horizon, "cont": cont, "stop": -rho * v, "a": a, "first": first, "model": model}

    def _continue_value(self, plan: dict, j: int, s: float, b: int) -> float:
        return float(np.interp(s, GRID, plan["cont"][j][:, b]))

    # ------------------------------------------------------------------ the policy interface
    def next_gamma(self) -> int:
        self._s, self._plan, self._peeked, self._free = 1.0, None, False, False
        if self.fresh or self.featured is None:
            return self.gamma_init
        horizon = self.gamma_max
        if not self.featured:
            if self.costs.draft_cost <= 0.0:  # proposals cost nothing: take the longest, choose in verify_count
                self._free = True
                return horizon
            return self._best_prefix(horizon)
        plan = self._plan_round(horizon)
        if float(plan["first"] @ plan["model"]["start"][self.kind]) <= plan["stop"][0] and self.plain_streak < self.probe:
            return 0
        self._plan = plan
        return horizon

    def stop_drafting(self, step: DraftStep) -> bool:
        cell = self.bucket(step)
        plan = self._plan
        if cell is None or plan is None:
            return False
        if 0 < step.budget < plan["horizon"]:  # the budget is shorter than planned: plan again
            plan = self._plan = self._plan_round(step.budget, plan["model"])
        j = step.position
        b = int(plan["model"]["k_of"][cell])
        self._s *= float(plan["model"]["a_cell"][cell])
        cont = self._continue_value(plan, j, self._s, b) if j < plan["horizon"] else -math.inf
        keep = max(cont, plan["stop"][j])
        if j == 1 and self.peek and -self._s + plan["stop"][0] > keep:  # not worth a verification: peek
            self._peeked, self._peek_bucket = True, cell
            return True
        return cont <= plan["stop"][j]

    def _best_prefix(self, limit: int) -> int:
        """Featureless drafters: ``argmax_d Σ_{i≤d} Π_{l≤i} a_l − ρ·(d·D + V(d + 1))`` over ``d <= limit``."""
        a = self.position_acceptance(self.kind, max(limit, 1))
        surv = np.cumprod(a)
        rho, dcost = self.rho, self.costs.draft_cost
        values = [np.sum(surv[:d]) - rho * (d * dcost + self.costs.verify(d + 1)) for d in range(limit + 1)]
        return int(np.argmax(values))

    def verify_count(self, proposed: int) -> int:
        if self._free:  # a free proposal of this length: verify its best prefix (none: a plain step)
            return self._best_prefix(proposed)
        return 0 if self._peeked and proposed == 1 else proposed

    def observe(self, outcome: RoundOutcome) -> None:
        self.stats["rounds"] += 1
        self.stats["drafted"] += outcome.drafted
        self.stats["plain"] += int(outcome.drafted == 0)
        self.plain_streak = self.plain_streak + 1 if outcome.drafted == 0 and not outcome.discarded else 0
        self.stats["peeks"] += int(outcome.discarded > 0 and not self._free)
        self.costs.observe(outcome, draft=not self._prompt_start)  # a first round's draft time holds a prefill
        self._prompt_start = False
        measured = self.measured and outcome.round_ms is not None
        predicted = self.costs.round(outcome.drafted) + outcome.discarded * self.costs.draft_cost
        self.cost += float(outcome.round_ms) if measured else predicted
        if outcome.discarded and self._peek_bucket is not None:  # the peeked token: seen, never compared
            self.start[self.kind, self._peek_bucket] += 1
            self.freq[self._peek_bucket] += 1
            self._peek_bucket = None
        self.tokens += outcome.accepted + 1
        d, a = outcome.drafted, outcome.accepted
        if d:
            self.fresh = False
            if self.featured is None:
                self.featured = any(self.bucket(s) is not None for s in outcome.steps)
            if self.featured:
                buckets = [self.bucket(s) for s in outcome.steps[:d]]
                if buckets and buckets[0] is not None:
                    self.start[self.kind, buckets[0]] += 1
                for i, bk in enumerate(buckets):
                    if bk is None:
                        continue
                    self.freq[bk] += 1
                    if i <= a and i < d:  # compared: accepted (i < a) or the rejected token (i == a)
                        self.cmp[bk] += 1
                        self.acc[bk] += float(i < a)
                    if i + 1 < len(buckets) and buckets[i + 1] is not None:
                        self.trans[bk, buckets[i + 1]] += 1
            else:
                for i in range(min(d, a + 1)):
                    key = (self.kind, i)
                    self.pos_cmp[key] = self.pos_cmp.get(key, 0.0) + 1
                    self.pos_acc[key] = self.pos_acc.get(key, 0.0) + float(i < a)
        elif self.featured is not None:
            self.fresh = False
        if self.featured is False:  # exponential forgetting: the copy regimes of a lookup come and go
            for key in self.pos_cmp:
                self.pos_cmp[key] *= self.decay
                self.pos_acc[key] *= self.decay
        self.kind = 0 if d == 0 else (2 if a == d else 1)

    def state(self) -> dict:
        out = {"feature": self.feature, "transient": self.transient, "featured": self.featured,
               "rho_tokens_per_ms": round(self.rho, 5) if math.isfinite(self.rho) else None, **self.stats}
        if self.featured and len(self.features) == 1:
            out["acceptance_by_bucket"] = [round(float(x), 4) for x in self.acceptance()]
            out["compared_by_bucket"] = [int(x) for x in self.cmp]
        return out
