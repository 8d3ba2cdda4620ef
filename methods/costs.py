"""What a round costs, as a cost-aware policy sees it: a calibrated table, or costs measured online.

A round that drafts ``d`` tokens costs (``specbench.latency``; ``runners.replay`` charges the same)::

    C(d) = d · D + V(d + 1) + O

``D``: one draft forward (ms), ``V(k)``: the target's forward verifying ``k`` tokens (``k = d + 1``:
the last emitted token plus the draft), ``O``: the loop's own time per round. ``d = 0`` is a plain
target step, ``C(0) = V(1) + O``. On a CPU ``V`` is *not* monotone in ``k`` (Gemma-3-270M fp32, 2
threads: ``V(3)`` ≈ 187 ms, ``V(4)`` ≈ 123 ms), which is what a cost-aware policy can exploit.

``CostModel.from_latency_file(path)`` reads the JSON written by ``python -m runners.replay
calibrate`` through its one reader, ``specbench.latency.LatencyModel.from_json`` (``target.step_ms[k]``
at ``target.ref_context``, its affine fit ``step_affine`` beyond the table, ``draft.step_ms[1]`` (else
the draft's affine cost of one token), ``round_overhead_ms``). It ignores the per-context slope (a
policy is not told the context length; the slope is ~0.01 ms per token here). It does not compare what the
file was timed on (``specbench.timed_on.TimedOn``: threads, device, dtype, kernels) with the run: a policy has
no run to compare with (it is built before the job sets its threads, and a replay has none), and it decides
by the table's shape, not its scale (``adapt_costs`` corrects the scale to the machine's clock). The readers
that turn the file into times do compare: a job's prediction (``runners.jobs.predict.find_latency``) and
``lab compare`` / ``lab confirm`` (the file ``lab confirm`` gives cost-reading policies is the one it checks).

``CostModel.online()`` starts from ``prior`` (the paper's model: ``V(k) = c`` units, ``D = 1``,
``O = 0``, ``c = 5``) and learns from each round's *measured* costs (``RoundOutcome.draft_ms``,
``verify_ms``, ``round_ms``, given to a policy that needs ``COSTS``): an exponentially weighted
mean per verified length ``k`` (weight ``ewma``), per draft token, and of the overhead. A ``k``
never verified yet costs its nearest verified neighbour's estimate (ties: the shorter one), or the
prior while nothing is known. Without costs in the outcomes (a replay without a latency model) the
online model stays at its prior.

``CostModel.build(path, adapt=True)``: the calibrated table is the prior and each round's measured
cost corrects it, as a ratio measured ÷ table: ``V̂(k) = V(k) · (n_k·r_k + w·g) / (n_k + w)`` with
``r_k`` the EWMA ratio of the rounds that verified ``k`` tokens, ``n_k`` their count (capped at
``1/ewma``, the EWMA's memory), ``g`` the EWMA ratio over every round (the host's drift, which moves
every ``k`` alike) and ``w = 2``; a draft token costs ``D · g_D`` (``g_D`` its own EWMA ratio). Why: a
calibration times isolated forwards, and on the engine's own rounds the table was off by −21 % for a
9-token verification and −37 % for a draft forward, −3 % for a 5-token one, within an hour of calibrating
(``results/committed/policy_lab/compare_threads2``); the table's *shape* is what the policy needs first,
the machine's own clock what it can learn. In a replay the measured costs are the latency model's, so
every ratio is 1 up to its per-context slope (which the table ignores), and the decisions are the
calibrated model's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from methods.base import RoundOutcome
from specbench.latency import LatencyModel


class CostModel:
    """``verify(k)``, ``draft`` (per token), ``overhead`` in ms (module docstring)."""

    #: pseudo-rounds of the global ratio behind each k's own ratio (``adapt``)
    ADAPT_WEIGHT = 2.0

    def __init__(self, verify_ms: Mapping[int, float], draft_ms: float, overhead_ms: float = 0.0,
                 affine: tuple[float, float] | None = None, online: bool = False, ewma: float = 0.2,
                 adapt: bool = False) -> None:
        self.table = {int(k): float(v) for k, v in verify_ms.items()}
        if not self.table and affine is None:
            raise ValueError("a cost model needs verification costs")
        self.affine = affine
        self.draft = float(draft_ms)
        self.overhead = float(overhead_ms)
        self.online = online
        self.ewma = float(ewma)
        self._draft_seen = self._over_seen = False
        if adapt and online:
            raise ValueError("adapt corrects a calibrated table; an online model has none")
        self.adapt = bool(adapt)
        self._ratio: dict[int, tuple[int, float]] = {}  # k -> (rounds seen, EWMA of measured ÷ table)
        self._global = self._draft_ratio = 1.0
        self._global_seen = self._draft_ratio_seen = False

    # ------------------------------------------------------------------ constructors
    @classmethod
    def paper(cls, c: float = 5.0) -> CostModel:
        """GammaTune Sec. 3: verification costs ``c`` units whatever its length; a draft token 1."""
        return cls({}, 1.0, 0.0, affine=(float(c), 0.0))

    @classmethod
    def online_model(cls, prior: CostModel | None = None, ewma: float = 0.2) -> CostModel:
        base = prior or cls.paper()
        return cls(dict(base.table), base.draft, base.overhead, base.affine, online=True, ewma=ewma)

    @classmethod
    def from_latency_json(cls, obj: Mapping[str, Any], ewma: float = 0.2, adapt: bool = False) -> CostModel:
        """The calibrated table of a latency file's contents (``specbench.latency.LatencyModel.from_json``)."""
        return cls.from_latency_model(LatencyModel.from_json(obj), ewma=ewma, adapt=adapt)

    @classmethod
    def from_latency_model(cls, latency: LatencyModel, ewma: float = 0.2, adapt: bool = False) -> CostModel:
        """``V(k)``: the target's ``step_ms`` table, its ``step_affine`` beyond it; ``D``: the draft's
        ``step_ms[1]`` (0 when its table lacks 1), else, without a table, its affine cost of one token;
        ``O``: ``round_overhead_ms``."""
        target, draft = latency.target, latency.draft
        d1 = draft.step_ms.get(1, 0.0) if draft.step_ms else sum(draft.step_affine)
        return cls(dict(target.step_ms), max(0.0, d1), latency.round_overhead_ms, target.step_affine,
                   ewma=ewma, adapt=adapt)

    @classmethod
    def from_latency_file(cls, path: str | os.PathLike, ewma: float = 0.2, adapt: bool = False) -> CostModel:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"latency file {str(path)!r} does not exist (python -m runners.replay calibrate ...)")
        return cls.from_latency_json(json.loads(p.read_text()), ewma=ewma, adapt=adapt)

    @classmethod
    def build(cls, latency: str | None, ewma: float = 0.2, adapt: bool = False) -> CostModel:
        """The calibrated model of ``latency`` (a calibrate JSON; ``adapt``: corrected by the rounds'
        measured costs), else an online one."""
        if latency:
            return cls.from_latency_file(latency, ewma=ewma, adapt=adapt)
        if adapt:
            raise ValueError("adapt needs a latency file (python -m runners.replay calibrate): it corrects that table")
        return cls.online_model(ewma=ewma)

    # ------------------------------------------------------------------ queries
    def verify(self, k: int) -> float:
        """``V(k)`` in ms."""
        if self.adapt:
            return self._table_verify(k) * self._correction(k)
        return self._table_verify(k)

    @property
    def draft_cost(self) -> float:
        """``D`` in ms (``adapt``: the table's, corrected)."""
        return self.draft * (self._draft_ratio if self.adapt else 1.0)

    def _correction(self, k: int) -> float:
        n, r = self._ratio.get(k, (0, 1.0))
        n = min(n, max(1, round(1.0 / self.ewma)))
        w = self.ADAPT_WEIGHT
        return (n * r + w * self._global) / (n + w)

    def _table_verify(self, k: int) -> float:
        if k in self.table:
            return self.table[k]
        if self.online and self.table:
            return self.table[min(self.table, key=lambda s: (abs(s - k), s))]
        if self.affine is not None:
            a, b = self.affine
            return max(0.0, a + b * k)
        return self.table[min(self.table, key=lambda s: (abs(s - k), s))]

    def round(self, d: int) -> float:
        """``C(d)``: a round drafting ``d`` tokens (``d = 0``: a plain target step)."""
        return d * self.draft_cost + self.verify(d + 1) + self.overhead

    # ------------------------------------------------------------------ learning
    def observe(self, outcome: RoundOutcome, draft: bool = True) -> None:
        """Learn from a round's measured costs (online and adapting models; costs absent: nothing).
        ``draft=False``: the round's draft time is not a draft token's cost (a prompt's first round also
        feeds the prompt to the draft model) — an adapting model then learns from its verification only."""
        if self.adapt and outcome.verify_ms is not None:
            self._observe_ratios(outcome, draft)
            return
        if not self.online or outcome.verify_ms is None:
            return
        k, v = outcome.drafted + 1, float(outcome.verify_ms)
        self.table[k] = self._ewma(self.table.get(k, v), v, k in self.table)
        if outcome.drafted and outcome.draft_ms is not None:
            per = float(outcome.draft_ms) / outcome.drafted
            self.draft = self._ewma(self.draft, per, self._draft_seen)
            self._draft_seen = True
        if outcome.round_ms is not None:
            rest = max(0.0, float(outcome.round_ms) - v - float(outcome.draft_ms or 0.0))
            self.overhead = self._ewma(self.overhead, rest, self._over_seen)
            self._over_seen = True

    def _observe_ratios(self, outcome: RoundOutcome, draft: bool = True) -> None:
        k = outcome.drafted + 1
        table = self._table_verify(k)
        if table > 0:
            ratio = float(outcome.verify_ms) / table
            n, r = self._ratio.get(k, (0, ratio))
            self._ratio[k] = (n + 1, self._ewma(r, ratio, n > 0))
            self._global = self._ewma(self._global, ratio, self._global_seen)
            self._global_seen = True
        proposed = outcome.drafted + outcome.discarded  # a peek's discarded token was drafted too
        if draft and proposed and outcome.draft_ms is not None and self.draft > 0:
            ratio = float(outcome.draft_ms) / proposed / self.draft
            self._draft_ratio = self._ewma(self._draft_ratio, ratio, self._draft_ratio_seen)
            self._draft_ratio_seen = True

    def _ewma(self, current: float, value: float, seen: bool) -> float:
        """The exponentially weighted mean after ``value`` (its first value when nothing was ``seen``)."""
        return current + self.ewma * (value - current) if seen else value

    def state(self) -> dict[str, Any]:
        source = "online" if self.online else ("table, adapted" if self.adapt else "table")
        return {"cost_source": source, "draft_ms": round(self.draft_cost, 3),
                "overhead_ms": round(self.overhead, 3),
                "verify_ms": {k: round(self.verify(k), 3) for k in range(1, 10)}}
