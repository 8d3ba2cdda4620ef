"""Per-call costs timed inside an interleaved sweep: what the modeled speedups charge.

Every record carries its rounds (γ, drafted, accepted): the work it did. A *modeled* wall time charges that
work with per-call costs — ``Σ calls × cost per call`` — so two jobs that did the same work read the same by
construction, and a comparison of modeled speedups resolves what differs in the *work* at sizes where the
measured walls (7 prompt turns on a drifting host) cannot. The costs must be timed on what the decodes ran
on: the same process, threads, device, dtype and kernels, at the same contexts, spread over the sweep's
hour. So the interleaved launcher (``runners.jobs.interleave``) times them itself, in every round, after the
round's untimed warm-up (the round's prompt turn is then in every cache) and before its timed decodes:

* the target's **prefill** of the round's input (``k`` = its length, context 0) on the loop's
  ``VerifyForward`` (``job.forward``; plain for transformers' loops), as ``SpeculativeRunner`` prefills;
* the target's forward of ``k`` tokens on a cache holding the input (context = its length), for every ``k``
  of ``widths``: ``k = 1`` on the target alone's step kernels (``job.target_alone.step``, the baseline rule's),
  ``k ≥ 2`` on the loop's verification kernels keeping ``k`` logits, as a round of ``k − 1`` drafted tokens
  verifies; each ``k`` ``repeats`` times, all of them in one shuffled order (``random.Random(seed)``);
* a draft model's prefill (``k`` = the input's length, context 0) and its forwards of ``k`` in
  ``DRAFT_WIDTHS`` (one drafted token; the 2–3 token catch-up of a round after an acceptance) at the same
  context, keeping one logit, as ``runners.drafters.model.ModelDrafter`` calls it.

The cache is cropped back after each forward (``kv.crop_to``), as the loop crops rejected tokens. One JSON
line per forward in ``<sweep>/.specbench/costs.jsonl`` (``COSTS_FILE``): ``pair``, ``round``, ``model``
(``target`` | ``draft``), ``k``, ``context``, ``ms``, ``drafter`` (the pair's drafter kind: ``model``,
``prompt_lookup``, … — which records the analysis can model), ``kernels`` (the loop's ``describe()``) and
``time``. The fit and the charge are ``specbench.sweep_costs``; the modeled rows ``analysis.modeled``.

What the timed forwards do not cover — the loop's own time per round (acceptance, cache crops, policy) and a
prompt-lookup drafter's search — is read from the records by the analysis (``specbench.sweep_costs``), pooled
per pair over the whole sweep, the same constant for every method of the pair. A round's forwards add about
``(len(widths) · repeats + 2 + 4 · repeats)`` forwards per pair: ~1-2 % of ``mini_gammatune_table2``'s time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runners.jobs.build import Job
from specbench.drafter_kinds import draft_cost

COSTS_FILE = Path(".specbench") / "costs.jsonl"
DRAFT_WIDTHS = (1, 2, 3, 4)
MAX_WIDTH = 33  # GammaTune's γ_max 32 verifies 33 tokens


def widths_for(jobs: Sequence[Job]) -> list[int]:
    """The target widths a sweep's jobs can verify: ``1 .. max(γ, the policy's γ_max) + 1`` over the jobs,
    at most ``MAX_WIDTH`` (a wider block is charged by the fitted line, ``specbench.latency.ForwardCost``)."""
    top = 1
    for job in jobs:
        config = job.config
        gamma_max = config.method.params.get("gamma_max")
        top = max(top, int(config.gamma), int(gamma_max) if isinstance(gamma_max, int | float) else 0)
    return list(range(1, min(MAX_WIDTH, top + 1) + 1))


def _clock(device_type: str) -> Any:
    import torch

    def now() -> float:
        if device_type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    return now


def time_round(job: Job, ids: Sequence[int], widths: Sequence[int], repeats: int = 2,
               seed: int = 0) -> list[dict[str, Any]]:
    """One round's cost samples for ``job``'s pair on ``ids`` (module docstring): ``{"model", "k", "context",
    "ms"}`` per forward, in the order they ran."""
    import torch

    from runners.engine.kv import cache_arg, crop_to, new_cache
    from runners.engine.verify_forward import VerifyForward
    from specbench.models import model_device

    ids = [int(t) for t in ids]
    p = len(ids)
    target = job.target
    verify = job.forward if job.forward is not None else VerifyForward(target)
    step = job.target_alone.step or verify
    now = _clock(model_device(target))
    pool = ids * (1 + MAX_WIDTH // max(1, p))
    out: list[dict[str, Any]] = []

    def sample(model: str, k: int, context: int, run: Any) -> None:
        t0 = now()
        run()
        out.append({"model": model, "k": k, "context": context, "ms": (now() - t0) * 1000.0})

    with torch.inference_mode():
        cache = new_cache(target)
        sample("target", p, 0, lambda: verify(cache, ids, 1))
        crop_to(cache, p)  # a padded prefill (verify buckets) keeps the prompt's positions only
        # a drafter whose tokens cost a draft-model forward (specbench.drafter_kinds; same vocabulary: the input's ids)
        draft = job.draft_model if draft_cost(job.config.drafter) == "forward" else None
        draft_cache = None
        if draft is not None:
            draft_cache = new_cache(draft)
            device = model_device(draft)

            def draft_forward(feed: list[int]) -> None:
                inp = torch.tensor([feed], device=device)
                draft(input_ids=inp, **cache_arg(draft, draft_cache), use_cache=True, logits_to_keep=1)

            sample("draft", p, 0, lambda: draft_forward(ids))
        keys = [("target", k) for k in widths for _ in range(repeats)]
        if draft is not None:
            keys += [("draft", k) for k in DRAFT_WIDTHS for _ in range(repeats)]
        random.Random(seed).shuffle(keys)
        for model, k in keys:
            feed = pool[:k]
            if model == "target":
                fwd = step if k == 1 else verify
                sample("target", k, p, lambda fwd=fwd, feed=feed, k=k: fwd(cache, feed, k))
                crop_to(cache, p)
            else:
                sample("draft", k, p, lambda feed=feed: draft_forward(feed))
                crop_to(draft_cache, p)
    return out


def round_rows(job: Job, pair: str, round_index: int, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples as ``COSTS_FILE`` rows (module docstring)."""
    config = job.config
    kernels = job.forward.describe() if job.forward is not None else {"fast_linear": False, "buckets": {}}
    drafter = config.drafter
    stamp = time.time()
    return [{"pair": pair, "round": round_index, **s, "drafter": drafter, "kernels": kernels, "time": stamp}
            for s in samples]
