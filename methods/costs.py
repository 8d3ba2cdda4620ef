"""What a round costs, as a cost-aware policy sees it: a calibrated table, or costs measured online.

A round that drafts ``d`` tokens costs (``runners.replay.latency``; ``runners.replay`` charges the same)::

    C(d) = d · D + V(d + 1) + O

``D``: one draft forward (ms), ``V(k)``: the target's forward verifying ``k`` tokens (``k = d + 1``:
the last emitted token plus the draft), ``O``: the loop's own time per round. ``d = 0`` is a plain
target step, ``C(0) = V(1) + O``. On a CPU ``V`` is *not* monotone in ``k`` (Gemma-3-270M fp32, 2
threads: ``V(3)`` ≈ 187 ms, ``V(4)`` ≈ 123 ms), which is what a cost-aware policy can exploit.

``CostModel.from_latency_file(path)`` reads the JSON written by ``python -m runners.replay
calibrate`` (``latency_version`` 1: ``target.step_ms[k]`` at ``target.ref_context``, its affine fit
``step_affine`` beyond the table, ``draft.step_ms[1]``, ``round_overhead_ms``). It ignores the
per-context slope (a policy is not told the context length; the slope is ~0.01 ms per token here).
``methods`` may not import ``runners`` (the layering), so the file is read here, by its format.

``CostModel.online()`` starts from ``prior`` (the paper's model: ``V(k) = c`` units, ``D = 1``,
``O = 0``, ``c = 5``) and learns from each round's *measured* costs (``RoundOutcome.draft_ms``,
``verify_ms``, ``round_ms``, given to a policy that needs ``COSTS``): an exponentially weighted
mean per verified length ``k`` (weight ``ewma``), per draft token, and of the overhead. A ``k``
never verified yet costs its nearest verified neighbour's estimate (ties: the shorter one), or the
prior while nothing is known. Without costs in the outcomes (a replay without a latency model) the
online model stays at its prior.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from methods.base import RoundOutcome

LATENCY_VERSION = 1


class CostModel:
    """``verify(k)``, ``draft`` (per token), ``overhead`` in ms (module docstring)."""

    def __init__(self, verify_ms: Mapping[int, float], draft_ms: float, overhead_ms: float = 0.0,
                 affine: tuple[float, float] | None = None, online: bool = False, ewma: float = 0.2) -> None:
        self.table = {int(k): float(v) for k, v in verify_ms.items()}
        if not self.table and affine is None:
            raise ValueError("a cost model needs verification costs")
        self.affine = affine
        self.draft = float(draft_ms)
        self.overhead = float(overhead_ms)
        self.online = online
        self.ewma = float(ewma)
        self._draft_seen = self._over_seen = False

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
    def from_latency_json(cls, obj: Mapping[str, Any]) -> CostModel:
        if obj.get("latency_version") != LATENCY_VERSION:
            raise ValueError(f"latency_version {obj.get('latency_version')!r} is not {LATENCY_VERSION}")
        target, draft = obj["target"], obj["draft"]
        table = {int(k): float(v) for k, v in (target.get("step_ms") or {}).items()}
        affine = tuple(float(x) for x in (target.get("step_affine") or (0.0, 0.0)))
        d_table = draft.get("step_ms") or {}
        d1 = float(d_table.get("1", d_table.get(1, 0.0))) if d_table else sum(draft.get("step_affine") or (0.0, 0.0))
        return cls(table, max(0.0, d1), float(obj.get("round_overhead_ms") or 0.0), affine)  # type: ignore[arg-type]

    @classmethod
    def from_latency_file(cls, path: str | os.PathLike) -> CostModel:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"latency file {str(path)!r} does not exist (python -m runners.replay calibrate ...)")
        return cls.from_latency_json(json.loads(p.read_text()))

    @classmethod
    def build(cls, latency: str | None, ewma: float = 0.2) -> CostModel:
        """The calibrated model of ``latency`` (a calibrate JSON), else an online one."""
        if latency:
            return cls.from_latency_file(latency)
        return cls.online_model(ewma=ewma)

    # ------------------------------------------------------------------ queries
    def verify(self, k: int) -> float:
        """``V(k)`` in ms."""
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
        return d * self.draft + self.verify(d + 1) + self.overhead

    # ------------------------------------------------------------------ learning
    def observe(self, outcome: RoundOutcome) -> None:
        """Learn from a round's measured costs (online models only; costs absent: nothing)."""
        if not self.online or outcome.verify_ms is None:
            return
        k, w, v = outcome.drafted + 1, self.ewma, float(outcome.verify_ms)
        self.table[k] = v if k not in self.table else self.table[k] + w * (v - self.table[k])
        if outcome.drafted and outcome.draft_ms is not None:
            per = float(outcome.draft_ms) / outcome.drafted
            self.draft = per if not self._draft_seen else self.draft + w * (per - self.draft)
            self._draft_seen = True
        if outcome.round_ms is not None:
            rest = max(0.0, float(outcome.round_ms) - v - float(outcome.draft_ms or 0.0))
            self.overhead = rest if not self._over_seen else self.overhead + w * (rest - self.overhead)
            self._over_seen = True

    def state(self) -> dict[str, Any]:
        return {"cost_source": "online" if self.online else "table", "draft_ms": round(self.draft, 3),
                "overhead_ms": round(self.overhead, 3),
                "verify_ms": {k: round(self.verify(k), 3) for k in range(1, 10)}}
