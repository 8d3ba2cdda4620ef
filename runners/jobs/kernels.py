"""The sweep's kernel decisions, made once and shared by its jobs (the baseline rule across processes).

Our engine chooses its kernels by measuring them on the machine: ``engine.fast_linear=auto`` times the
copies against the plain forward (``runners.engine.fast_linear.chosen_kernels``) and
``engine.verify_buckets=auto`` probes the padding of each block length (``probe_costs``). Within one process
every job reuses the first measurement (the engine caches it per model); across processes — a sweep under
the submitit/SLURM or Ray launcher runs each job in its own — each job used to measure again, and two noisy
measurements could give two jobs of one comparison different kernels (and their references different keys).
Here the first job of a sweep to build its engine writes what it measured to
``<results_dir>/.specbench/kernels/<key hash>.json``; every later job, in any process, reads it first
(``runners.engine.fast_linear.seed_measurements``) and so takes the same kernels. A decode lock (``flock``, as the AR
cache's) makes a second job wait while the first measures. The key is what makes a measurement valid for
another job: the target (its ``ModelSpec`` without the label), the hardware, torch's threads and CPU
capability, and the torch and transformers versions (``runners.jobs.ar_cache.hardware``). Delete the folder
to measure again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runners.engine.fast_linear import measurements, seed_measurements
from runners.jobs.ar_cache import hardware, key_hash, locked, runtime_key
from specbench.config import ModelSpec
from specbench.models import model_device
from specbench.record_io import write_json_atomic

KERNELS_SUBDIR = Path(".specbench") / "kernels"


def kernels_key(spec: ModelSpec, model: Any) -> dict[str, Any]:
    """What a kernel measurement of ``model`` is valid for (module docstring; ``ar_cache.runtime_key``)."""
    return runtime_key(spec, hardware(str(model_device(model))))


@contextlib.contextmanager
def shared_kernels(model: Any, spec: ModelSpec, sweep_dir: str | Path | None) -> Iterator[None]:
    """Around building a job's engine: ``model``'s kernel measurements seeded from the sweep's file, and what
    was measured written back (module docstring). ``sweep_dir`` None: this process's measurements only."""
    if sweep_dir is None:
        yield
        return
    key = kernels_key(spec, model)
    folder = Path(sweep_dir) / KERNELS_SUBDIR
    path = folder / f"{key_hash(key)}.json"
    with locked(folder / f"{key_hash(key)}.lock"):  # no locks on this filesystem: measure anyway
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            entry = None
        if isinstance(entry, dict) and entry.get("key") == json.loads(json.dumps(key)):
            seed_measurements(model, entry)
        yield
        write_json_atomic(path, {"key": key, **measurements(model)})
