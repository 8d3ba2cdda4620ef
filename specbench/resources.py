"""Resources a job needs: memory sizes (bytes, budgets, what a device has free) and the GPUs and CPUs a
launcher should give one job.

* ``parse_bytes("40GB")`` / ``fmt_bytes(n)``: the ``model_budget`` knob and error messages
  (decimal units ``KB MB GB TB``, binary ``KiB MiB GiB TiB``, or a plain number of bytes).
* ``free_bytes(device)``: what a device has free now: ``torch.cuda.mem_get_info`` summed over the
  GPUs a model may use (``cuda``/``auto`` placement: every visible GPU; ``cuda:N``: that one), or
  the kernel's ``MemAvailable`` on CPU.
* Launcher resolvers (registered by ``specbench.config.register_resolvers``), used by
  ``conf/hydra/launcher/{ray,slurm}.yaml``:

  - ``${specbench_gpus:}`` (``${specbench_gpus:null_if_zero}``: null for 0): the GPUs one job of this sweep needs: the largest ``pair.gpus`` over
    the pairs the sweep runs (the command line's ``pair=a,b`` or an experiment's
    ``hydra.sweeper.params.pair``; else the config's pair), counting 0 for a pair whose target runs
    on CPU. Hydra's launchers take one resource request for all jobs of a launch, so a sweep mixing
    a 2-GPU pair with 1-GPU pairs gives every job 2 GPUs (``SweepReport`` warns; launch such pairs
    as separate sweeps to save GPUs).
  - ``${specbench_cpus:}``: CPUs for one job: 1 when the sweep's jobs run on GPUs (the GPU is the
    limit); for a CPU sweep, the job's ``threads`` (all of this machine's cores when ``threads`` is
    null), at most this machine's cores, so that a local Ray instance runs as many CPU jobs at once
    as their threads fit in the cores, and one at a time by default.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("specbench")

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}


def parse_bytes(value: Any, key: str = "model_budget") -> int | None:
    """Bytes from ``1500000``, ``"300KB"``, ``"1.5 GiB"``; ``None`` stays ``None``."""
    from specbench.registry import ConfigError

    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a size such as 40GB or a number of bytes, got {value!r}")
    if isinstance(value, int | float) and value > 0:
        return int(value)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS or float(match.group(1)) <= 0:
        raise ConfigError(f"{key} must be a size such as 40GB, 1.5GiB or a number of bytes, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "unknown size"
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def device_kind(device: str, device_map: str | None = None) -> str:
    """``cpu``, ``cuda`` (any visible GPU: ``auto`` placement or a bare ``cuda``) or ``cuda:N``."""
    device = str(device or "cpu")
    if device_map or device == "cuda":
        return "cuda" if device.startswith("cuda") or device_map == "auto" else device
    return device if device.startswith("cuda") else "cpu"


def free_bytes(kind: str) -> int | None:
    """Memory free on a device kind now (module docstring); None when it cannot be told."""
    if kind.startswith("cuda"):
        try:
            import torch

            if not torch.cuda.is_available():
                return None
            indices = [int(kind.split(":", 1)[1])] if ":" in kind else range(torch.cuda.device_count())
            return int(sum(torch.cuda.mem_get_info(i)[0] for i in indices))
        except Exception:  # a driver error: no check rather than a crash
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


# --------------------------------------------------------------------------- launcher resolvers

def sweep_pairs(root: Any) -> list[str]:
    """The pair names a (multi)run will use, from the composed primary config ``root`` (module doc)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    texts: list[str] = []
    params = _get(root, "hydra", "sweeper", "params") or {}
    texts += [f"{k}={v}" for k, v in dict(params).items()]
    texts += list(_get(root, "hydra", "overrides", "task") or [])
    names: list[str] = []
    try:
        overrides = OverridesParser.create().parse_overrides(texts)
    except Exception:  # Hydra reports bad overrides itself
        overrides = []
    for override in overrides:
        if override.get_key_element().lstrip("+~") != "pair":
            continue
        if override.is_sweep_override() and override.is_discrete_sweep():
            names = list(override.sweep_string_iterator())
        elif not override.is_sweep_override():
            names = [str(override.value())]
    if not names:
        name = _get(root, "pair", "name")
        names = [str(name)] if name else []
    return names


def _get(node: Any, *keys: str) -> Any:
    from omegaconf import OmegaConf

    for key in keys:
        if node is None:
            return None
        try:
            node = node.get(key) if OmegaConf.is_config(node) or isinstance(node, Mapping) else None
        except Exception:  # a missing or unresolvable node
            return None
    return node


@functools.lru_cache(maxsize=64)
def _pair_gpus(name: str, device: str | None = None) -> int | None:
    """GPUs one job of pair ``name`` needs (0 on CPU), composed through Hydra's search path; ``device``: the
    sweep's top-level ``device`` (``specbench.config.pair.on_device``), which moves the pair when set."""
    try:
        from hydra import compose

        cfg = compose(config_name="config", overrides=[f"pair={name}"])
        pair = cfg.pair
        device = str(device or pair.target.get("device") or "cpu")
        if not device.startswith("cuda"):
            return 0
        return int(pair.get("gpus", 1) or 1)
    except Exception as exc:  # the job itself reports a bad pair
        log.debug("could not compose pair %s for its GPU count: %s", name, exc)
        return None


def pair_gpu_counts(root: Any) -> dict[str, int]:
    counts = {}
    moved = _get(root, "device")  # the top-level ``device``: every pair of the sweep on it (null: their own)
    moved = str(moved) if moved else None
    for name in sweep_pairs(root):
        n = _pair_gpus(name, moved)
        if n is not None:
            counts[name] = n
    if not counts:  # compose unavailable: read the primary config's pair
        device = str(moved or _get(root, "pair", "target", "device") or "cpu")
        counts[str(_get(root, "pair", "name"))] = int(_get(root, "pair", "gpus") or 1) if device.startswith("cuda") else 0
    return counts


def sweep_gpus(*args: Any, _root_: Any = None) -> int | None:
    """``${specbench_gpus:}`` (module docstring); ``${specbench_gpus:null_if_zero}`` gives null instead
    of 0 (SLURM: no ``--gpus-per-node`` line for a CPU sweep)."""
    n = max(pair_gpu_counts(_root_).values(), default=0)
    return None if n == 0 and "null_if_zero" in args else n


def sweep_cpus(*_args: Any, _root_: Any = None) -> int:
    """``${specbench_cpus:}`` (module docstring)."""
    cores = os.cpu_count() or 1
    if sweep_gpus(_root_=_root_):
        return 1
    threads = _get(_root_, "threads")
    return max(1, min(int(threads), cores)) if isinstance(threads, int) and threads > 0 else cores


def mixed_gpu_warning(root: Any) -> str | None:
    """A note when the sweep's pairs need different GPU counts (every job gets the largest)."""
    counts = pair_gpu_counts(root)
    if len(set(counts.values())) <= 1:
        return None
    most = max(counts.values())
    fewer = sorted(name for name, n in counts.items() if n < most)
    return (f"this sweep's pairs need different GPU counts ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))}); "
            f"the launcher gives every job {most}. Launch {', '.join(fewer)} as a separate sweep to save GPUs.")


def register_launcher_resolvers() -> None:
    """The resolvers above, and silence Hydra's notice that ``conf/hydra/launcher/ray.yaml`` is validated
    against the plugin's ConfigStore schema of the same name: that match is what we want (the file
    sets the plugin's fields, typed by the plugin), and the file cannot extend the schema by name
    instead (a file named ``ray`` listing ``- ray`` in its defaults names itself)."""
    import warnings

    from omegaconf import OmegaConf

    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/ray' is validated against ConfigStore schema")

    OmegaConf.register_new_resolver("specbench_gpus", sweep_gpus, replace=True)
    OmegaConf.register_new_resolver("specbench_cpus", sweep_cpus, replace=True)
