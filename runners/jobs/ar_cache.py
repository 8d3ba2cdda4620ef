"""The AR reference, decoded once per sweep: an on-disk cache under the results folder.

With ``verify_lossless=true`` at temperature 0 every record compares its output with the target's
own greedy decoding of the same prompt and takes ``speedup`` from that decoding's time. Within one
process the reference is memoised; across processes (submitit/SLURM and Ray run each job in its
own process) it is read from ``<results_dir>/.specbench/ar_cache/<key hash>.json``, so a 240-job
sweep decodes each (target, prompt turn) once instead of once per job.

The key is everything that determines the reference's tokens and its timing:

* the target's ``ModelSpec`` without its label (path, GGUF file, revision, dtype, device,
  placement, quantization, remote code);
* the prompt's token ids, ``max_new_tokens``, temperature 0 (greedy; sampled runs have no
  reference), and the EOS ids that end a generation;
* the KV cache the decoding ran with (``dynamic``; an ``ar_offloaded`` job's own decoding is stored
  under ``offloaded`` and never serves as another job's reference, which is decoded with ``dynamic``);
* the hardware (CPU model, or GPU name) and the torch and transformers versions: fp16 kernels differ
  between GPU models and library versions, and a reference timed on another device type would
  give a meaningless speedup;
* how the CPU ran it: torch's thread count and the CPU capability its kernels were dispatched for
  (``torch.backends.cpu.get_cpu_capability()``: ``ATEN_CPU_CAPABILITY=default`` runs other kernels
  than AVX2 / AVX-512), so a job under one never divides by a reference timed under another.

Entries are written atomically (a temporary file in the same folder, fsynced, then renamed), so a
concurrent job never reads half a file; a decode in progress holds an ``flock`` on
``<key hash>.lock``, so a second job wanting the same reference waits for it and reads it instead
of decoding it again (on a filesystem without locks both may decode; the last rename wins and both
files are equal in tokens). An entry also says who timed it (``job``, ``device_id``,
``device_jobs``), which the record copies (``ar_source``, ``ar_device_jobs``).

Delete the folder to force new references (e.g. after changing a model's weights in place).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specbench.config import ModelSpec
from specbench.records import write_json_atomic

CACHE_SUBDIR = Path(".specbench") / "ar_cache"
ENTRY_VERSION = 3  # 2: the KV cache implementation is part of the key; 3: threads and CPU capability


def hardware(device: str) -> str:
    """The device type that timed a reference: the GPU's name, or the CPU's model name."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        index = int(str(device).split(":", 1)[1]) if ":" in str(device) else torch.cuda.current_device()
        return f"cuda:{torch.cuda.get_device_name(index)}"
    from specbench.provenance import cpu_name

    return f"cpu:{cpu_name()}"


def reference_key(spec: ModelSpec, prompt_ids: list[int], max_new_tokens: int, eos_ids: list[int],
                  device_type: str, cache: str = "dynamic") -> dict[str, Any]:
    """The cache key (module docstring) as a plain mapping."""
    import torch
    import transformers

    target = {k: v for k, v in asdict(spec).items() if k != "name"}
    return {
        "version": ENTRY_VERSION,
        "target": target,
        "prompt_ids": list(map(int, prompt_ids)),
        "max_new_tokens": int(max_new_tokens),
        "temperature": 0.0,
        "eos_ids": sorted(map(int, eos_ids)),
        "cache": str(cache),
        "hardware": device_type,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": int(torch.get_num_threads()),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
    }


def key_hash(key: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:40]


class ARCache:
    """Greedy AR references of one results folder (module docstring)."""

    def __init__(self, results_dir: str | os.PathLike) -> None:
        self.folder = Path(results_dir) / CACHE_SUBDIR

    def path(self, key: Mapping[str, Any]) -> Path:
        return self.folder / f"{key_hash(key)}.json"

    def get(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """The entry for ``key``, or None (absent, unreadable, or written for another key)."""
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != json.loads(json.dumps(key)):
            return None
        return entry

    def put(self, key: Mapping[str, Any], tokens: list[int], ttft_ms: float, wall_ms: float, stop_reason: str,
            context: Mapping[str, Any]) -> dict[str, Any]:
        entry = {"key": dict(key), "tokens": list(map(int, tokens)), "ttft_ms": ttft_ms, "wall_ms": wall_ms,
                 "stop_reason": stop_reason, "created": time.time(), **dict(context)}
        write_json_atomic(self.path(key), entry)
        return entry

    @contextlib.contextmanager
    def claim(self, key: Mapping[str, Any]) -> Iterator[None]:
        """Hold the key's decode lock (blocking) while decoding it."""
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f"{key_hash(key)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass  # no locks on this filesystem: decode anyway (module docstring)
            yield
        finally:
            os.close(fd)
