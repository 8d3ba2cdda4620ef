"""Predicted wall times of a job's records: the pair's calibrated latency model, found and applied.

``find_latency(config)`` finds the latency model of ``config.pair`` (written by ``python -m runners.replay
calibrate --pair NAME``): ``config.latency`` when set (a JSON file, or a folder holding ``<pair>.json``;
``false`` turns predictions off), else ``<results_dir>/latency/<pair>.json``, else
``results/latency/<pair>.json`` (calibrate's default output). ``predicted_wall`` charges a generation's
own rounds with it (``specbench.round_costs.predict_wall_ms``, the rule the replay charges): greedy runs of
our loops only (``method=ar`` and same-vocabulary model drafts or prompt lookup; null for transformers'
loop, the hybrid and heterogeneous drafters, and sampling). The model was calibrated with plain forwards: when
the engine's lossless options (``runners.engine.verify_forward``) make verification cheaper, measured
< predicted by about what they save.

A file is used only when it was timed on what the job runs on (``job_timed_on``; the comparison is
``specbench.timed_on.check_timed_on``): the job's torch threads (``threads``, else torch's own choice — the
process's ``torch.get_num_threads()``, as ``runners.jobs.job`` leaves it), the target's device type and dtype.
A mismatch is refused in one line naming both values and the calibrate command that fixes it: a ``ConfigError``
for the file ``latency=`` names, a warning for one found in the default places (the search goes on; records
carry no ``predicted_wall_ms`` when none fits). The kernels are not compared here: batch 1's prediction is the
plain forward's by design (above), and a batched job predicts nothing (``predicted_wall``; ``lab compare``
compares a batched job's kernels with the file's ``batch_fast_linear``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from specbench.config import JobConfig
from specbench.drafter_kinds import draft_cost
from specbench.latency import LatencyModel
from specbench.registry import ConfigError
from specbench.round_costs import predict_wall_ms
from specbench.timed_on import TimedOn, refusal

log = logging.getLogger("specbench")



def job_timed_on(config: JobConfig) -> TimedOn:
    """What ``config``'s job runs its forwards on, for ``check_timed_on``: its ``threads`` (null: this process's
    ``torch.get_num_threads()``, torch's own choice, which the job keeps), the target's device type (unstated
    under a ``device_map``: accelerate places it) and dtype (unstated for ``auto``)."""
    import torch

    return TimedOn.of_job(config.threads or torch.get_num_threads(), config.pair.target)


def find_latency(config: JobConfig) -> tuple[LatencyModel | None, str | None]:
    """``(LatencyModel, path)``, or ``(None, None)`` when none is found, it cannot be read (a warning) or it was
    timed on something else than the job runs on (module docstring: ``ConfigError`` for ``latency=PATH``, a
    warning for a file found in the default places)."""
    spec = config.latency
    if spec is False:
        return None, None
    name = f"{config.pair.name}.json"
    if spec:
        candidates = [Path(spec) / name if Path(spec).is_dir() else Path(spec)]
    else:
        candidates = [Path(config.results_dir) / "latency" / name, Path("results") / "latency" / name]
    for path in candidates:
        if path.is_file():
            try:
                latency = LatencyModel.load(path)
            except (OSError, ValueError, KeyError) as exc:
                log.warning("latency model %s not used: %s", path, exc)
                continue
            why = refusal(latency, job_timed_on(config), f"this job (pair {config.pair.name})", path, config.pair.name)
            if why is None:
                return latency, str(path)
            if spec:
                raise ConfigError(f"latency={spec}: {why}")
            log.warning("latency model not used: %s", why)
    if spec:
        log.warning("latency=%s: no latency model %s found; records carry no predicted_wall_ms", spec, candidates[0])
    return None, None


def predicted_wall(latency: LatencyModel | None, config: JobConfig, fused_prefill: bool, prompt_tokens: int,
                   gen: Any) -> float | None:
    """The latency model's wall time (ms) for ``gen``'s rounds, or None (module docstring)."""
    if latency is None or not config.greedy or config.method.runner == "hf":
        return None
    cost = draft_cost(config.drafter)  # specbench.drafter_kinds: None for a drafter whose rounds are not modeled
    if cost is None:
        return None
    return predict_wall_ms(latency, prompt_tokens, len(gen.tokens), gen.rounds.drafted, gen.rounds.accepted,
                           draft_model=cost == "forward", fused_prefill=fused_prefill)[1]
