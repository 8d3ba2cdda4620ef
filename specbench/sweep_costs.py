"""The per-call costs an interleaved sweep timed, fitted, and the work of a record charged with them.

``runners.jobs.sweep_costs`` times, in every round of an interleaved sweep, the target's prefill and its
forwards of ``k = 1 ..`` tokens, and a same-vocabulary draft's prefill and 1-4 token forwards, at the round's
context (``<sweep>/.specbench/costs.jsonl``, exported as ``costs.jsonl``). Here:

* ``fit_forward(samples)``: one model's ``specbench.latency.ForwardCost`` from its samples. Prefill samples
  (context 0) give ``prefill_affine`` (least squares ``a + b·k`` over the rounds' input lengths). The others
  give the table ``step_ms[k]`` at ``ref_context`` (the samples' mean context) with one context slope shared by
  every ``k`` (``context_ms_per_token``, each ``k`` its own intercept, since CPU kernels make the cost of ``k``
  tokens non-monotone), and ``step_affine``, the line through the table, for a ``k`` beyond it. Both are robust
  (medians, not means): a forward is timed once per round, and a timing is disturbed only upwards (another
  process, a page fault), so one disturbed round must not move the sweep's cost. The slope is the Theil–Sen
  estimate pooled over ``k`` (the median of the slopes between every two samples of the same ``k`` at different
  contexts), ``step_ms[k]`` the median of ``k``'s samples moved to ``ref_context`` along it. Before 2026-11-28
  both were least-squares means; on ``mini_gammatune_table2_b`` (2026-11-27) four of eight rounds timed the int8
  draft's one-token forward at 0.9–1.8 of the target's (0.18–0.23 in the others) and the mean carried that into
  every modeled wall: the paired check (measured ÷ modeled per cell) flagged three int8 cells.
* ``sweep_latency(rows, round_overhead_ms)``: the pair's ``LatencyModel`` (target and draft; ``meta.kind``
  ``sweep``, with the samples' count and what they ran on). The loop's own time per round is not a forward:
  ``round_overhead_ms`` is passed in (the analysis pools the records' measured ``overhead_ms`` — and a
  prompt-lookup drafter's search, its ``draft_ms`` — per round over the whole sweep: one constant per pair).
  ``ar_overhead_ms`` is 0: the target alone's step does no work beside its forward that a record measures.
* ``modeled_ms(latency, ...)``: ``(ttft_ms, wall_ms)`` of a record's own rounds charged by the latency model's
  one rule (``specbench.round_costs.predict_parts_ms``, the replay's): the target's prefill, per round the draft's
  forwards (a draft model only), the target's ``d + 1``-token forward at its context and the round overhead;
  for the target alone (empty traces) its prefill and one 1-token forward per further token.

The modeled speedup of a record is ``modeled AR wall ÷ modeled wall`` on the same prompt (both charged with the
same sweep's costs): identical work reads identical by construction (``analysis.modeled``). Anchors: SGLang's
``bench_speculative`` (acceptance length ÷ step time) and SpecDecode-Bench's simulator (arXiv 2601.11580:
profiled acceptance × a fitted per-call cost model).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.latency import ForwardCost, LatencyModel
from specbench.round_costs import predict_parts_ms

MODELS = ("target", "draft")


def read_costs(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``costs.jsonl`` (a torn last line, from a crash, is skipped)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, Mapping) and row.get("model") in MODELS and _finite(row.get("ms")):
            rows.append(dict(row))
    return rows


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fit_affine(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y = a + b·x`` (``b = 0`` for a single distinct x); the one line fit of the latency
    model's terms (``runners.replay.calibration`` calibrates with it too)."""
    n = len(xs)
    if n == 0:
        raise ValueError("nothing to fit")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def fit_forward(samples: Iterable[Mapping[str, Any]]) -> ForwardCost:
    """One model's ``ForwardCost`` from its samples (``k``, ``context``, ``ms``; module docstring).
    ``ValueError`` when there are none."""
    samples = list(samples)
    prefill = [(int(s["k"]), float(s["ms"])) for s in samples if int(s["context"]) <= 0]
    steps = [(int(s["k"]), int(s["context"]), float(s["ms"])) for s in samples if int(s["context"]) > 0]
    if not steps and not prefill:
        raise ValueError("no cost samples to fit")
    by_k: dict[int, list[tuple[int, float]]] = {}
    for k, context, ms in steps:
        by_k.setdefault(k, []).append((context, ms))
    slopes = [(m2 - m1) / (c2 - c1) for pts in by_k.values()
              for i, (c1, m1) in enumerate(pts) for c2, m2 in pts[i + 1:] if c2 != c1]
    slope = statistics.median(slopes) if slopes else 0.0
    ref = round(sum(c for _, c, _ in steps) / len(steps)) if steps else 0
    table = {k: statistics.median(m - slope * (c - ref) for c, m in pts) for k, pts in sorted(by_k.items())}
    affine = fit_affine(list(table), list(table.values())) if table else (0.0, 0.0)
    pre = fit_affine([k for k, _ in prefill], [m for _, m in prefill]) if prefill else affine
    return ForwardCost(table, affine, slope, ref, pre)


def sweep_latency(rows: Iterable[Mapping[str, Any]], round_overhead_ms: float = 0.0) -> LatencyModel:
    """The ``LatencyModel`` of one pair's cost rows (module docstring); a draft without samples (prompt lookup)
    costs nothing."""
    rows = list(rows)
    target = [r for r in rows if r["model"] == "target"]
    draft = [r for r in rows if r["model"] == "draft"]
    meta = {"kind": "sweep", "samples": {"target": len(target), "draft": len(draft)},
            "rounds": len({r.get("round") for r in rows}),
            "kernels": next((r.get("kernels") for r in target), None),
            "drafter": next((r.get("drafter") for r in rows), None)}
    return LatencyModel(fit_forward(target), fit_forward(draft) if draft else ForwardCost(),
                        float(round_overhead_ms), 0.0, meta)


def modeled_ms(latency: LatencyModel, prompt_tokens: int, new_tokens: int, drafted_trace: Sequence[int],
               accepted_trace: Sequence[int], draft_model: bool, fused_prefill: bool = False) -> tuple[float, float]:
    """``(ttft_ms, wall_ms)`` of a generation's own rounds charged with the sweep's costs (module docstring;
    empty traces: the target alone)."""
    parts = predict_parts_ms(latency, prompt_tokens, new_tokens, drafted_trace, accepted_trace, draft_model,
                             fused_prefill)
    return parts["ttft_ms"], sum(parts.values())
