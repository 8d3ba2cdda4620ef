"""One runner factory: every loop the harness times is built here, from its kind and the parts it decodes with
(optimum-benchmark's one backend factory).

``build_runner(kind, target, eos, sampling, ...)`` returns a runner of one of ``RUNNER_KINDS``:

* ``speculative``: our draft → verify loop (``SpeculativeRunner``; ``BatchedSpeculativeRunner`` at ``batch_size``
  > 1, one policy per row slot or one shared, ``gamma_mode``), with a built ``drafter`` and a γ ``policy``; the
  engine options (``engine``: ``verify_forward.engine_options``' forward and ``fused_prefill``) or, at B > 1, the
  batched ``kernels``;
* ``ar``: the target alone (``AutoregressiveRunner`` on the 1-token step ``forward``, ``cache`` dynamic or offloaded;
  ``BatchedAutoregressiveRunner`` on ``kernels`` at B > 1);
* ``hf``: transformers' assisted generation (``HFAssistedRunner``) with the ``draft_model`` as assistant, batch 1;
* ``hf_ar``: transformers' own ``generate()`` for the target alone (``HFAutoregressiveRunner``), batch 1.

The jobs (``runners.jobs.build.Job``, ``runners.jobs.target_alone``), the replay (the calibration's overheads, the
live compare, the traces' target pass) and the scripts build their runners here, never by hand: a new loop is one
entry here. A batch-1 loop keeps its own signature (one prompt in, one ``Generation`` out); the job puts it behind
the runner contract (``runners.engine.contract.OneAtATime``). Transformers' loops are imported when chosen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runners.engine.verify import Sampling

RUNNER_KINDS = ("speculative", "ar", "hf", "hf_ar")
#: the kinds that decode a batch of prompts at once (the others are batch-1 loops)
BATCHED_KINDS = ("speculative", "ar")


def build_runner(kind: str, target: Any, eos: Iterable[int], sampling: Sampling | float = 0.0, *,
                 drafter: Any = None, policy: Any = None, draft_model: Any = None, batch_size: int = 1,
                 engine: Mapping[str, Any] | None = None, forward: Any = None, kernels: Any = None,
                 cache: str = "dynamic", gamma_mode: str = "per_row", dynamic_only: bool = False) -> Any:
    """The runner of ``kind`` (module docstring); ``policy``: one policy, or at ``batch_size`` > 1 one per row slot
    (a sequence) or one shared by the batch. An unknown kind, or a batch-1 loop asked for a batch, is a
    ``ValueError`` naming the kinds."""
    if kind not in RUNNER_KINDS:
        raise ValueError(f"unknown runner kind {kind!r}; known: {', '.join(RUNNER_KINDS)}")
    eos = list(eos)
    if batch_size > 1:
        from runners.engine.batched import BatchedAutoregressiveRunner, BatchedSpeculativeRunner

        if kind == "ar":
            return BatchedAutoregressiveRunner(target, eos, sampling, fast=kernels)
        if kind == "speculative":
            policies = list(policy) if isinstance(policy, Sequence) else [policy]
            return BatchedSpeculativeRunner(target, drafter, policies, eos, sampling, gamma_mode, fast=kernels)
        raise ValueError(f"runner kind {kind!r} decodes one prompt at a time; batched kinds: {', '.join(BATCHED_KINDS)}")
    if kind == "speculative":
        from runners.engine.speculative import SpeculativeRunner

        return SpeculativeRunner(target, drafter, policy, eos, sampling, **dict(engine or {}))
    if kind == "ar":
        from runners.engine.speculative import AutoregressiveRunner

        return AutoregressiveRunner(target, eos, sampling, cache=cache, forward=forward, dynamic_only=dynamic_only)
    if kind == "hf":
        from runners.engine.hf_assisted import HFAssistedRunner

        return HFAssistedRunner(target, draft_model, policy, eos, sampling)
    from runners.engine.hf_ar import HFAutoregressiveRunner

    return HFAutoregressiveRunner(target, eos, sampling, cache=cache)
