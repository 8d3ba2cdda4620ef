"""Acceptance in specdec_bench's format: ``speculation_profile.json`` as NVIDIA
Model-Optimizer's ``specdec_bench`` (SPEED-Bench's evaluation framework) computes it, with our own per-drafted-round
acceptance length beside it under its own name.

Read at NVIDIA/Model-Optimizer PR #2247 ("specdec_bench: emit speculation_profile.json alongside acceptance
metrics", open; its files are not on ``main`` at a2fbac7): ``examples/specdec_bench/specdec_bench/
speculation_profile.py`` at edf879d3 (``build_profile``, ``_dense_survival``, ``per_step_mean_accept_length``,
``_CHAIN_DRAFTING_METHODS``), the PR's ``metrics/acceptance_rate.py`` (``AcceptanceRate.process_step``,
``_process_lengths``, ``_write_speculation_profile``: ``per_category = out["Category_AL"]``), and, on ``main``
(a2fbac7), ``metrics/specbench.py`` (``SpecBench.process_final``: the metric of ``--specbench`` and
``--dataset speed``) and ``models/vllm.py`` (``VLLMModel.run``; ``models/sglang.py`` cuts the same way).

**A step** (theirs) is one streamed engine output that added tokens: the prefill's first token is a step of
length 1, a round that drafted nothing is a step of length 1, a round that accepted ``a`` drafts is a step of
length ``a + 1``; when the generation ended on an EOS, that token is stripped from the last step, and a last
step holding only the EOS is dropped (``VLLMModel.run``). Our records keep the rounds and the token count
(``specbench.records``); ``engine_steps`` rebuilds the steps from them: the prefill's token when the loop had a
separate prefill (``prefill``), each round's ``a + 1`` tokens, the last round cut to the tokens the generation kept
(an EOS accepted inside a round ends it there: ``methods.rules.emitted_tokens``), then the EOS strip.

**A request** (theirs, ``SpecBench.process_final``) is a question: the steps of all its turns pooled; its
acceptance length is their mean. From the steps of every request (``profile``):

* ``acceptance_length_histogram``: ``{L: steps of length L}``; ``mean_accept_length``: ``Σ L / steps``
  (``per_step_mean_accept_length``); ``mean_accept_length_per_request``: the mean over requests of each request's
  acceptance length (``Average_AL``); ``per_category``: ``{category: mean acceptance length of its requests}``
  (``Category_AL``, a float per category);
* ``marginal_accept_rates[i]`` = ``S(i + 2)``, ``S(L)`` = the share of steps of length ≥ ``L`` (the survival
  function of the acceptance length; ``_dense_survival``: 0 past the longest step), ``i = 0 .. K − 1``;
  ``conditional_accept_rates[i]`` = ``marginal[i] / marginal[i − 1]`` (``marginal[−1]`` = 1; 0 after a 0), so
  the joint (marginal) rate is the product of the conditional ones by construction;
* ``method``: the speculation algorithm, in vLLM's method names (``speculation_method``); ``accept_length_model``:
  ``chain_analytic`` for ``CHAIN_DRAFTING_METHODS`` (theirs: EAGLE-style and draft-model proposers, whose draft
  at K = n is a prefix of their draft at K = n + 1), ``measured_per_k`` otherwise, and ``measured_per_k`` for a
  cell whose γ policy is adaptive (``adaptive``): its deep rates count where the policy stopped drafting, not
  rejections, so they do not extrapolate over K. ``build_profile`` takes ``accept_length_model`` as an argument
  ("``chain_analytic`` (safe to extrapolate over K) or ``measured_per_k``. Defaults from ``method``"), which is
  what lets a producer override its default;
* ``validation.mean_consistency``: ``1 + Σ marginal`` against ``mean_accept_length`` within ``TOLERANCE``;
  ``validation.marginal_monotonicity``.

``K`` (``num_speculative_tokens``) is the longest draft of any round unless given.

**Ours, beside theirs**: ``drafted_rounds`` (the rounds that drafted ≥ 1 token; ``drafted_rounds_of``) and
``drafted_round_mean_accept_length`` (``Σ (a + 1)`` over them ÷ their number: vLLM's ``mean_acceptance_length``,
SpecDecode-Bench's ``acc_len``), ``drafted_round_mean_accept_length_per_request`` (per request, then the mean);
``acceptance_length_percentiles`` (of the requests' acceptance lengths, theirs: p10 … p90), ``steps``,
``requests``, ``measurement_conditions.policy`` (the γ policy that ran). Theirs counts the prefill's token and
the plain target steps, which ours leaves out: theirs is the lower of the two wherever either happens.

**Two means** (per step, pooled, vs per request): the first weighs a long request by its steps, the second every
request alike; they can rank two methods differently (vLLM GitHub #42508); ``rank_disagreements`` names the pairs of
cells where they do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specbench.drafter_kinds import DRAFTER_KINDS

SCHEMA_VERSION = "1.0"
TOLERANCE = 0.02
PERCENTILES = (10, 25, 50, 75, 90)
#: specdec_bench's ``_CHAIN_DRAFTING_METHODS`` (speculation_profile.py at edf879d3): methods whose K = n draft is
#: a prefix of their K = n + 1 draft, so one measurement extrapolates over K (``chain_analytic``)
CHAIN_DRAFTING_METHODS = frozenset({"eagle", "eagle1", "eagle2", "eagle3", "draft_model"})

DraftedRounds = list[tuple[int, int]]


def speculation_method(draft_kind: str | None, hetero: str | None = None) -> str | None:
    """The profile's ``method`` (module docstring): the ``method`` its drafter declares (``specbench.drafter_kinds``,
    in vLLM's ``speculative_config.method`` names where vLLM has one: ``draft_model``, ``ngram``, ``suffix``), the
    cross-vocabulary rule's (``hetero``: ``cross_vocabulary_<rule>``) for a draft model of another vocabulary; None
    when the kind is not known (a replayed row)."""
    name = hetero or draft_kind
    return DRAFTER_KINDS.get(name).method if name in DRAFTER_KINDS else None


def accept_length_model(method: str | None, adaptive: bool = False) -> str:
    """specdec_bench's default (``build_profile``): ``chain_analytic`` for ``CHAIN_DRAFTING_METHODS`` (any case),
    ``measured_per_k`` otherwise (none included); ``measured_per_k`` whenever the γ policy is ``adaptive`` (module
    docstring: ``build_profile``'s own ``accept_length_model`` argument overrides its default)."""
    chain = bool(method) and method.lower() in CHAIN_DRAFTING_METHODS
    return "chain_analytic" if chain and not adaptive else "measured_per_k"


def drafted_rounds_of(drafted: Sequence[int], accepted: Sequence[int]) -> DraftedRounds:
    """A generation's rounds ``(d, a)`` that drafted at least one token (ours; module docstring)."""
    if len(drafted) != len(accepted):
        raise ValueError(f"drafted and accepted traces differ in length ({len(drafted)} vs {len(accepted)})")
    out = []
    for d, a in zip(drafted, accepted, strict=True):
        if not 0 <= a <= d:
            raise ValueError(f"a round accepted {a} of {d} drafted tokens")
        if d >= 1:
            out.append((int(d), int(a)))
    return out


def engine_steps(accepted: Sequence[int], new_tokens: int, stop_reason: str, prefill: bool = True) -> list[int]:
    """The lengths of a generation's steps as specdec_bench counts them (``VLLMModel.run``; module docstring), from
    its rounds' ``accepted`` trace, its ``new_tokens``, its ``stop_reason`` (``eos``: the last token is an EOS,
    stripped) and whether its first token came from a separate prefill (``prefill``; False for a fused first round
    and transformers' loop). ``ValueError`` when the token count does not fit the rounds."""
    head = 1 if prefill else 0
    lengths = [head] if head else []
    if accepted:
        before = head + sum(a + 1 for a in accepted[:-1])
        last = int(new_tokens) - before
        full = accepted[-1] + 1
        if not 1 <= last <= full or (last < full and stop_reason != "eos"):
            raise ValueError(f"{new_tokens} new tokens do not fit rounds accepting {list(accepted)} "
                             f"(prefill token: {prefill}, stop: {stop_reason}): the last round would emit {last}")
        lengths += [a + 1 for a in accepted[:-1]] + [last]
    elif int(new_tokens) != head:
        raise ValueError(f"{new_tokens} new tokens without a round (prefill token: {prefill})")
    if stop_reason == "eos" and lengths:
        lengths[-1] -= 1
        if lengths[-1] == 0:
            lengths.pop()
    return lengths


def prefill_token(row: Mapping[str, Any]) -> bool:
    """Whether a record's (or replayed row's) first token came from a separate prefill, before its first round:
    as its ``kernels.fused_prefill`` says (our loop); yes for a replayed row (the replay's prefill emits ``x_1``);
    else (transformers' loop, a record of schema ≤ 4) as its count says: ``new_tokens − Σ (a + 1)`` is 1 with a
    prefill, 0 without, when nothing was cut at an EOS. ``ValueError`` when the count cannot tell."""
    kernels = row.get("kernels")
    if isinstance(kernels, Mapping) and "fused_prefill" in kernels:
        return not kernels["fused_prefill"]
    if row.get("source") == "replay":
        return True
    surplus = int(row["new_tokens"]) - sum(a + 1 for a in row.get("accepted_trace") or [])
    if surplus == 1 or (surplus == 0 and row.get("stop_reason") != "eos"):
        return surplus == 1
    raise ValueError(f"cannot tell whether the first of {row['new_tokens']} tokens came from a prefill (rounds "
                     f"accepting {row.get('accepted_trace')}, stop: {row.get('stop_reason')}, no kernels field)")


def record_steps(row: Mapping[str, Any]) -> list[int]:
    """A record's (or replayed row's) steps as specdec_bench counts them (``engine_steps``, ``prefill_token``)."""
    return engine_steps(list(row.get("accepted_trace") or []), int(row["new_tokens"]), str(row.get("stop_reason")),
                        prefill_token(row))


@dataclass
class Request:
    """One request as specdec_bench pools it (a question: the steps of all its turns) and ours: its drafted
    rounds, its category."""

    steps: list[int] = field(default_factory=list)
    rounds: DraftedRounds = field(default_factory=list)
    category: str = ""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` by linear interpolation between order statistics (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def survival_rates(steps: Sequence[int], k: int) -> tuple[list[float], list[float]]:
    """``(marginal, conditional)`` accept rates of ``steps`` (lengths) at ``k`` draft positions (module docstring;
    ``_dense_survival`` and the ratios in ``build_profile``)."""
    n = len(steps)
    marginal = [sum(s >= i + 2 for s in steps) / n if n else 0.0 for i in range(k)]
    conditional, prev = [], 1.0
    for m in marginal:
        conditional.append(m / prev if prev > 0 else 0.0)
        prev = m
    return marginal, conditional


def _r(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(x, 6)


def profile(requests: Sequence[Request], k: int | None = None, method: str | None = None,
            target: str | None = None, draft: str | None = None,
            conditions: Mapping[str, Any] | None = None, adaptive: bool = False) -> dict[str, Any]:
    """The ``speculation_profile.json`` payload of ``requests`` (module docstring; ``build_profile``'s fields and
    order, then ours); ``adaptive``: the γ policy chose each round's draft length (``accept_length_model``).
    Requests without a step are left out of the per-request means (specdec_bench's would fail)."""
    steps = [s for r in requests for s in r.steps]
    rounds = [x for r in requests for x in r.rounds]
    width = max((d for d, _ in rounds), default=0)
    k = int(k) if k is not None else width
    if k < width:
        raise ValueError(f"num_speculative_tokens {k} is below the longest draft seen ({width})")
    n = len(steps)
    marginal, conditional = survival_rates(steps, k)
    per_step = _mean(steps)
    kept = [r for r in requests if r.steps]
    request_al = [_mean(r.steps) for r in kept]
    by_category: dict[str, list[float]] = {}
    for r, al in zip(kept, request_al, strict=True):
        by_category.setdefault(r.category, []).append(al)
    histogram: dict[str, int] = {}
    for s in sorted(steps):
        histogram[str(s)] = histogram.get(str(s), 0) + 1
    implied = 1.0 + sum(marginal)
    violations = [{"position": i, "value": marginal[i], "previous": marginal[i - 1]}
                  for i in range(1, k) if marginal[i] > marginal[i - 1] + 1e-9]
    ours = [_mean([a + 1 for _, a in r.rounds]) for r in requests if r.rounds]
    return {
        "schema_version": SCHEMA_VERSION, "measured": n > 0, "method": method,
        "draft_checkpoint": {"name": draft} if draft else None, "target_model": {"name": target} if target else None,
        "num_speculative_tokens": k, "block_size": None, "max_supported_k": k,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": [round(x, 6) for x in conditional],
        "marginal_accept_rates": [round(x, 6) for x in marginal],
        "mean_accept_length": _r(per_step),
        "mean_accept_length_per_request": _r(_mean(request_al)),
        "accept_length_model": accept_length_model(method, adaptive),
        "accept_length_by_k": {str(k): _r(per_step)} if n else {},
        "acceptance_length_histogram": histogram,
        "per_category": {c: _mean(v) for c, v in sorted(by_category.items())} or None,
        "measurement_conditions": dict(conditions) if conditions else None,
        "validation": {
            "mean_consistency": {"implied_mean_accept_length": round(implied, 6),
                                 "reported_mean_accept_length": _r(per_step),
                                 "abs_delta": _r(abs(implied - per_step)) if n else None,
                                 "tolerance": TOLERANCE, "passed": bool(n) and abs(implied - per_step) <= TOLERANCE},
            "marginal_monotonicity": {"passed": not violations, "violations": violations},
        },
        "acceptance_length_percentiles": ({f"p{q}": round(percentile(request_al, q), 6) for q in PERCENTILES}
                                          if request_al else None),
        "drafted_rounds": len(rounds),
        "drafted_round_mean_accept_length": _r(_mean([a + 1 for _, a in rounds])),
        "drafted_round_mean_accept_length_per_request": _r(_mean(ours)),
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
