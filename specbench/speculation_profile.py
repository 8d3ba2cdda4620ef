"""Acceptance in the field's formats (issue 41, item 6): SPEED-Bench's ``speculation_profile.json``, per-request
acceptance-length percentiles, and the two means of the acceptance length.

A *step* is a verification round that drafted ``d ≥ 1`` tokens and accepted ``a`` of them (rounds drafting
nothing are plain target steps, as vLLM leaves them out of ``num_spec_steps``); its **acceptance length** is
``a + 1`` (the target's token included: vLLM's ``mean_acceptance_length``, SpecDecode-Bench's ``acc_len``).

``profile(requests, ...)`` builds the ``speculation_profile.json`` payload of NVIDIA Model-Optimizer's
``examples/specdec_bench/specdec_bench/speculation_profile.py: build_profile`` (SPEED-Bench's evaluation
framework; schema ``SCHEMA_VERSION`` "1.0"), from our steps instead of its ``AcceptanceRate`` histograms:

* ``marginal_accept_rates[i]`` = P(the first ``i + 1`` drafts all accepted) = #steps with ``a ≥ i + 1`` ÷ #steps
  (their ``Joint_Acceptance_Rate`` at length ``i + 2``), ``i = 0 .. K − 1``;
* ``conditional_accept_rates[i]`` = P(draft ``i + 1`` accepted | the first ``i`` were), over the steps that
  drafted position ``i + 1`` and reached it (``specbench.rounds.per_position``: ``accepted_per_pos[i] /
  compared_per_pos[i]``; 0 where no step reached it) — with an adaptive γ a step may stop drafting before ``i + 1``,
  so this is not ``marginal[i] / marginal[i − 1]`` unless every step drafted ``K``;
* ``mean_accept_length``: per step, ``Σ (a + 1) / #steps`` (their ``per_step_mean_accept_length``), and
  ``mean_accept_length_per_request``: the mean over requests of each request's per-step mean (their
  ``Average_AL``); ``acceptance_length_histogram``: ``{a + 1: steps}``;
* ``validation.mean_consistency``: ``1 + Σ marginal`` against the per-step mean, within 0.02 (exact for
  longest-prefix verification when the vector spans every length seen; it catches a ``K`` that cuts the vector
  short), and ``validation.marginal_monotonicity`` (a survival function never increases).

``K`` (``num_speculative_tokens``) is the longest draft of any step unless given. Beside their fields, ours:
``acceptance_length_percentiles`` (of the per-request means: p10, p25, p50, p75, p90), ``steps``, ``requests``.

**Two means** (``mean_accept_length`` per step, pooled, vs ``mean_accept_length_per_request``): the first weighs a
long request by its steps, the second every request alike. They can rank two methods differently (vLLM issue
42508 reports benchmarks disagreeing on acceptance length for this reason); ``rank_disagreements`` names the pairs
of cells where they do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specbench.rounds import per_position

SCHEMA_VERSION = "1.0"
TOLERANCE = 0.02
PERCENTILES = (10, 25, 50, 75, 90)

Steps = list[tuple[int, int]]


def steps_of(drafted: Sequence[int], accepted: Sequence[int]) -> Steps:
    """A request's steps ``(d, a)``: its rounds that drafted at least one token (module docstring)."""
    if len(drafted) != len(accepted):
        raise ValueError(f"drafted and accepted traces differ in length ({len(drafted)} vs {len(accepted)})")
    out = []
    for d, a in zip(drafted, accepted, strict=True):
        if not 0 <= a <= d:
            raise ValueError(f"a round accepted {a} of {d} drafted tokens")
        if d >= 1:
            out.append((int(d), int(a)))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` by linear interpolation between order statistics (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean_lengths(requests: Iterable[Steps]) -> tuple[float, float, list[float]]:
    """``(per-step mean, per-request mean, each request's mean)`` of the acceptance length (requests without a
    step left out of the per-request mean)."""
    per_request, total, n = [], 0, 0
    for steps in requests:
        if steps:
            per_request.append(sum(a + 1 for _, a in steps) / len(steps))
            total += sum(a + 1 for _, a in steps)
            n += len(steps)
    pooled = total / n if n else math.nan
    return pooled, (sum(per_request) / len(per_request) if per_request else math.nan), per_request


def profile(requests: Sequence[Steps], k: int | None = None, method: str | None = None,
            target: str | None = None, draft: str | None = None,
            per_category: Mapping[str, Sequence[Steps]] | None = None,
            conditions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``speculation_profile.json`` payload of ``requests`` (each a list of steps; module docstring)."""
    steps = [s for r in requests for s in r]
    width = max((d for d, _ in steps), default=0)
    k = int(k) if k is not None else width
    if k < width:
        raise ValueError(f"num_speculative_tokens {k} is below the longest draft seen ({width})")
    n = len(steps)
    marginal = [sum(a >= i + 1 for _, a in steps) / n if n else 0.0 for i in range(k)]
    pp = per_position([d for d, _ in steps], [a for _, a in steps])
    compared, accepted = pp["compared_per_pos"], pp["accepted_per_pos"]
    conditional = [accepted[i] / compared[i] if i < len(compared) and compared[i] else 0.0 for i in range(k)]
    pooled, per_request, means = mean_lengths(requests)
    histogram: dict[str, int] = {}
    for _, a in steps:
        histogram[str(a + 1)] = histogram.get(str(a + 1), 0) + 1
    implied = 1.0 + sum(marginal)
    violations = [{"position": i, "value": marginal[i], "previous": marginal[i - 1]}
                  for i in range(1, k) if marginal[i] > marginal[i - 1] + 1e-9]
    return {
        "schema_version": SCHEMA_VERSION, "measured": n > 0, "method": method,
        "draft_checkpoint": {"name": draft} if draft else None, "target_model": {"name": target} if target else None,
        "num_speculative_tokens": k, "block_size": None, "max_supported_k": k,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": [round(x, 6) for x in conditional],
        "marginal_accept_rates": [round(x, 6) for x in marginal],
        "mean_accept_length": round(pooled, 6) if n else None,
        "mean_accept_length_per_request": round(per_request, 6) if n else None,
        "accept_length_model": "chain_analytic",
        "accept_length_by_k": {str(k): round(pooled, 6)} if n else {},
        "acceptance_length_histogram": dict(sorted(histogram.items(), key=lambda kv: int(kv[0]))),
        "per_category": ({c: {"mean_accept_length": round(mean_lengths(r)[0], 6), "steps": sum(map(len, r))}
                          for c, r in sorted(per_category.items())} if per_category else None),
        "measurement_conditions": dict(conditions) if conditions else None,
        "validation": {
            "mean_consistency": {"implied_mean_accept_length": round(implied, 6),
                                 "reported_mean_accept_length": round(pooled, 6) if n else None,
                                 "abs_delta": round(abs(implied - pooled), 6) if n else None,
                                 "tolerance": TOLERANCE, "passed": bool(n) and abs(implied - pooled) <= TOLERANCE},
            "marginal_monotonicity": {"passed": not violations, "violations": violations},
        },
        "acceptance_length_percentiles": {f"p{q}": round(percentile(means, q), 6) for q in PERCENTILES} if means else None,
        "steps": n, "requests": len(requests),
    }


def rank_disagreements(cells: Mapping[Any, tuple[float, float]]) -> list[tuple[Any, Any]]:
    """The pairs of ``cells`` (name → ``(per-step mean, per-request mean)``) that the two means rank in opposite
    orders (a strict order under one, the reverse strict order under the other; module docstring)."""
    names = sorted(cells, key=str)
    out = []
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            (px, rx), (py, ry) = cells[x], cells[y]
            if (px - py) * (rx - ry) < 0:
                out.append((x, y))
    return out
