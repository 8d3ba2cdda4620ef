"""The AR reference, decoded once per sweep: memoised in the process, and an on-disk cache under the
results folder. Everything about a job's reference is here: its key, the cache, where it comes from
(``reference``), and the decodings that fill the cache (``store_own_reference``, ``store_reference``).

With ``verify_lossless=true`` at temperature 0 every record compares its output with the target's
own greedy decoding of the same prompt and takes ``speedup`` from that decoding's time
(``Reference``; ``ar_source``: ``cache``, ``decoded``, ``self`` for an AR job's own decoding, or
``paired`` under the interleaved launcher, ``runners.jobs.interleave``). Within one process the
reference is memoised; across processes (submitit/SLURM and Ray run each job in its own process)
it is read from ``<results_dir>/.specbench/ar_cache/<key hash>.json``, so a 240-job sweep decodes
each (target, prompt turn) once instead of once per job; an AR job's own greedy decodings fill it.

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
  than AVX2 / AVX-512) and, where set, the variables that narrow MKL's and oneDNN's
  (``specbench.provenance.KERNEL_ENV``), so a job under one never divides by a reference timed under another;
* how the target alone was decoded (the baseline rule, ``runners.jobs.target_alone.TargetAlone.cache_key``):
  the kernels of its step (``AutoregressiveRunner.describe``: the fast-linear scope, the fewest rows it transposes
  and the 1-token padding ``verify_forward.step_forward`` chose, or plain for transformers' loops) and its untimed
  warm-ups (``warmup_per_prompt`` decodes of the same prompt turn right before the timed one, as the measured
  decodes get: ``TargetAlone.reference``, which decodes every reference).

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from runners.engine.base import Generation
from runners.jobs.device_share import DeviceShare
from runners.jobs.target_alone import TargetAlone
from specbench.config import JobConfig, ModelSpec
from specbench.models import model_device
from specbench.provenance import kernel_env
from specbench.record_io import write_json_atomic

CACHE_SUBDIR = Path(".specbench") / "ar_cache"
ENTRY_VERSION = 4  # 2: the KV cache implementation is part of the key; 3: threads and CPU capability; 4: the
#                    baseline's kernels and warm-ups


def hardware(device: str) -> str:
    """The device type that timed a reference: the GPU's name, or the CPU's model name."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        index = int(str(device).split(":", 1)[1]) if ":" in str(device) else torch.cuda.current_device()
        return f"cuda:{torch.cuda.get_device_name(index)}"
    from specbench.provenance import cpu_name

    return f"cpu:{cpu_name()}"


def runtime_key(spec: ModelSpec, device_type: str) -> dict[str, Any]:
    """What a measurement on ``spec``'s target is valid for, besides its own inputs: the target (its
    ``ModelSpec`` without the label), the hardware, the torch and transformers versions, torch's threads and the
    CPU capability its kernels were dispatched for (module docstring). Part of the AR cache's key and of the
    sweep's kernel choices' (``runners.jobs.kernels``)."""
    import torch
    import transformers

    return {"target": {k: v for k, v in asdict(spec).items() if k != "name"}, "hardware": device_type,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": int(torch.get_num_threads()), "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
            **({"kernel_env": env} if (env := kernel_env()) else {})}


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its folder) while the block runs; on a filesystem
    without locks the block runs unlocked."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def reference_key(spec: ModelSpec, prompt_ids: list[int], max_new_tokens: int, eos_ids: list[int],
                  device_type: str, cache: str = "dynamic",
                  baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The cache key (module docstring) as a plain mapping."""
    return {
        "version": ENTRY_VERSION,
        **runtime_key(spec, device_type),
        "prompt_ids": list(map(int, prompt_ids)),
        "max_new_tokens": int(max_new_tokens),
        "temperature": 0.0,
        "eos_ids": sorted(map(int, eos_ids)),
        "cache": str(cache),
        "baseline": dict(baseline or {"kernels": {"fast_linear": False, "step": None}, "warmup_per_prompt": 0}),
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
        """Hold the key's decode lock (blocking) while decoding it (no locks on this filesystem: decode anyway)."""
        with locked(self.folder / f"{key_hash(key)}.lock"):
            yield


# --------------------------------------------------------------------------- a job's reference

class ReferenceJob(Protocol):
    """What the reference reads of a job (``runners.jobs.build.Job``): its config, its target model and
    EOS ids, its name, its device registration, the sweep's cache (None: memoised only) and its target alone."""

    config: JobConfig
    target: Any
    eos: list[int]
    name: str
    share: DeviceShare | None
    ar_cache: ARCache | None
    target_alone: TargetAlone  # decodes every reference (the one baseline, runners.jobs.target_alone)


@dataclass(frozen=True)
class Reference:
    """The target-alone decoding a record compares with and divides by (``ar_source``, ``ar_decode``)."""

    gen: Generation
    source: str
    device_jobs: int | None = None
    decode_id: str | None = None
    fastest: Generation | None = None  # under a width: the plain step's decode beside it (``TargetAlone.fastest``)


_Entry = tuple[Generation, str, "int | None", "Generation | None"]
_AR_REFERENCE: dict[str, _Entry] = {}  # this process's memo, by key hash


def job_reference_key(job: ReferenceJob, prompt_ids: list[int], cache: str = "dynamic") -> dict[str, Any]:
    """The cache key of ``prompt_ids`` for ``job``'s target (``reference_key``): a reference is decoded
    with the dynamic cache; an AR job's own decoding is stored under its own ``cache``."""
    return reference_key(job.config.pair.target, prompt_ids, job.config.max_new_tokens, job.eos,
                         hardware(str(model_device(job.target)) if job.target is not None else "cpu"), cache,
                         job.target_alone.cache_key())


def reference(job: ReferenceJob, prompt_ids: list[int]) -> Reference:
    """The reference of a record decoded by a sequential launcher: memoised, from the sweep's cache, or
    decoded here (``reference_entry``), with its key hash as ``decode_id``."""
    gen, source, jobs, fastest = reference_entry(job, prompt_ids)
    return Reference(gen, source, jobs, key_hash(job_reference_key(job, prompt_ids)), fastest)


def reference_entry(job: ReferenceJob, prompt_ids: list[int]) -> _Entry:
    """``(reference, source, device_jobs when it was timed, the fastest plain step's decode or None)``: memoised in
    this process, else read from the sweep's on-disk cache (source ``cache``), else decoded here
    (``TargetAlone.reference``) while holding the key's decode lock and written there (source ``decoded``)."""
    key = job_reference_key(job, prompt_ids)
    digest = key_hash(key)
    if digest in _AR_REFERENCE:
        gen, _, jobs, fastest = _AR_REFERENCE[digest]
        return gen, "cache", jobs, fastest
    cache = job.ar_cache
    entry = cache.get(key) if cache is not None else None
    source = "cache"
    if entry is None:
        with cache.claim(key) if cache is not None else contextlib.nullcontext():
            entry = cache.get(key) if cache is not None else None
            if entry is None:
                decoded = job.target_alone.reference(prompt_ids, job.share)
                gen, device_jobs, fastest = decoded.value, decoded.device_jobs, decoded.fastest
                _AR_REFERENCE[digest] = (gen, "decoded", device_jobs, fastest)
                if cache is not None:
                    cache.put(key, gen.tokens, gen.ttft_ms, gen.wall_ms, gen.stop_reason,
                              _context(job, device_jobs, fastest))
                return gen, "decoded", device_jobs, fastest
    gen = _generation(entry)
    fastest = _generation(entry["fastest"]) if entry.get("fastest") else None
    _AR_REFERENCE[digest] = (gen, source, entry.get("device_jobs"), fastest)
    return gen, source, entry.get("device_jobs"), fastest


def _generation(entry: Mapping[str, Any]) -> Generation:
    return Generation(tokens=list(entry["tokens"]), ttft_ms=float(entry["ttft_ms"]), wall_ms=float(entry["wall_ms"]),
                      stop_reason=str(entry["stop_reason"]), speculative=False)


def _context(job: ReferenceJob, device_jobs: int | None, fastest: Generation | None = None) -> dict[str, Any]:
    """Who timed an entry (the record copies it: ``ar_source``, ``ar_device_jobs``), and the fastest plain step's
    decode timed beside it, where there is one."""
    out: dict[str, Any] = {"job": job.name, "device_id": job.share.device_id if job.share is not None else None,
                           "device_jobs": device_jobs}
    if fastest is not None:
        out["fastest"] = {"tokens": list(map(int, fastest.tokens)), "ttft_ms": fastest.ttft_ms,
                          "wall_ms": fastest.wall_ms, "stop_reason": fastest.stop_reason}
    return out


def store_reference(job: ReferenceJob, key: Mapping[str, Any], gen: Generation, device_jobs: int | None,
                    fastest: Generation | None = None) -> None:
    """Put a greedy decoding of ``job``'s target under ``key`` in the sweep's cache, unless an entry is
    there already (the first one stays) or the job has no cache."""
    cache = job.ar_cache
    if cache is not None and cache.get(key) is None:
        cache.put(key, gen.tokens, gen.ttft_ms, gen.wall_ms, gen.stop_reason, _context(job, device_jobs, fastest))


def store_own_reference(job: ReferenceJob, prompt_ids: list[int], gen: Generation, device_jobs: int | None) -> None:
    """An AR job's greedy decoding is the reference other jobs need: put it in the cache (under the
    job's own KV cache implementation, module docstring)."""
    if job.ar_cache is None:
        return
    store_reference(job, job_reference_key(job, prompt_ids, job.config.method.ar_cache or "dynamic"), gen, device_jobs)
