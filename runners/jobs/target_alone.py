"""The target alone: the one baseline every speedup divides by, decoded for every path through one warm-up loop
and one measurement bracket.

Every comparison the harness makes divides by the target decoding alone (greedy ``verify_lossless``), on the kernels,
dtype and threads of the loop it is compared with (the baseline rule: ``verify_forward.step_forward`` at batch
1, the batched engine's ``batch_kernels`` at B > 1) and after the same untimed warm-ups. ``TargetAlone`` is that
decoder for one job, built once by ``runners.jobs.build.Job`` (``job.target_alone``); every path decodes through it:

* **cached** (batch 1, ``runners.jobs.ar_cache.reference_entry``) and **paired** (batch 1, the interleaved
  launcher's slot, ``runners.jobs.interleave``): ``reference`` — the job's ``warmup_per_prompt`` untimed decodes of
  the prompt turn, then the timed one inside the bracket;
* **batched** (B > 1, ``runners.jobs.job.JobRun.generate``): ``untimed`` (its warm-ups, in the one warm-up loop
  beside the method's) and ``timed`` (the paired AR batch, before or after the method's batch); the row alone at
  batch 1 (``untimed_row``, ``runners.jobs.batch.alone_tokens``);
* **interleaved** rounds' warm-up (``untimed_row``) and the job's warm-up (``runners.jobs.build.warm_up``);
* an ``ar`` job is its own reference: its runner *is* ``runner`` (``Job.own_reference``).

Under ``engine.width`` the reference steps at the width (the function the loop matches token for token), which is
slower than the plain 1-token step; ``fastest`` is that plain step on a dynamic cache (the same dtype and kernels'
choice), timed beside every batch-1 reference in alternating order, so a job reports its speedup over the fastest
target alone of its dtype too (``speedup_fastest``, the headline ``runners.jobs.report`` prints).

``warm_ups`` is the one warm-up loop and ``measured`` the one measurement bracket (the device registration sampled
right before and right after the timed decode, ``runners.jobs.device_share``): the method's timed decode in
``JobRun.generate`` goes through the same two, so both sides of a speedup are treated alike by construction.

``describe`` is what records and summaries say of the baseline (``ar_baseline``, ``summary.json: baseline``);
``cache_key`` is how the batch-1 reference was decoded, part of the AR cache's key (``runners.jobs.ar_cache``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from runners.engine.base import Generation
from runners.engine.batched import BatchGeneration
from runners.engine.contract import OneAtATime
from runners.engine.factory import build_runner
from runners.engine.verify import Sampling
from runners.jobs.device_share import DeviceShare
from specbench.config import JobConfig

T = TypeVar("T")


@dataclass(frozen=True)
class Measured(Generic[T]):
    """A timed decode's result and who shared its device meanwhile (``measured``): the most jobs seen on it
    (``device_jobs``) and the others' names (``neighbours``); both None when the job has no device registration."""

    value: T
    device_jobs: int | None = None
    neighbours: list[str] | None = None
    fastest: Generation | None = None  # a width's reference: the plain step's decode beside it (``TargetAlone``)


def measured(share: DeviceShare | None, decode: Callable[[], T]) -> Measured[T]:
    """The one measurement bracket: ``decode()`` (which times itself) between two samples of the device
    registration (``DeviceShare.sample``; none without one)."""
    before = share.sample() if share is not None else None
    value = decode()
    after = share.sample() if share is not None else None
    if before is None or after is None:
        return Measured(value)
    return Measured(value, max(before[0], after[0]), sorted(set(before[1]) | set(after[1])))


def warm_ups(count: int, *decodes: Callable[[int], object]) -> None:
    """The one warm-up loop: ``count`` times, each of ``decodes`` in turn (called with the warm-up's index), untimed.
    Several decodes alternate (the method's and the paired baseline's warm-ups: ``M A M A``)."""
    for k in range(int(count)):
        for decode in decodes:
            decode(k)


class TargetAlone:
    """The target alone of one job (module docstring), built by the one runner factory
    (``runners.engine.factory``): ``loop`` at batch 1 (``AutoregressiveRunner`` on ``step``,
    the fastest 1-token step the compared loop's kernels allow, or transformers' plain kernels; ``method.ar_cache``'s
    KV cache for an ``ar`` job) and ``runner`` at the job's batch size under the one runner contract (``OneAtATime``
    of ``loop``, or ``BatchedAutoregressiveRunner`` on ``batch_kernels``, the method's batched kernels)."""

    def __init__(self, target: Any, eos: list[int], sampling: Sampling, config: JobConfig, step: Any = None,
                 batch_kernels: Any = None) -> None:
        self.config = config
        self.step = step
        self.batch_kernels = batch_kernels
        native = config.method.ar_loop == "transformers"  # method=hf_native_ar: our AR (dynamic cache) is its reference
        self.loop = build_runner("ar", target, eos, sampling, forward=step,
                                 cache="dynamic" if native else config.method.ar_cache or "dynamic")
        self.runner: Any = (build_runner("ar", target, eos, sampling, batch_size=config.batch_size, kernels=batch_kernels)
                            if config.batch_size > 1 else OneAtATime(self.loop))
        #: under a width, the fastest target alone of the same dtype: the plain step on a dynamic cache (None otherwise)
        self.fastest: Any = None
        if getattr(step, "width", None) is not None and config.batch_size == 1 and not native:
            from dataclasses import replace

            from runners.engine.verify_forward import step_forward

            plain = step_forward(target, replace(config.engine, width=False))
            self.fastest = build_runner("ar", target, eos, sampling, forward=plain, dynamic_only=True)
        self._references = 0  # batch-1 references timed: their parity alternates the order with ``fastest``

    # ------------------------------------------------------------------ what it is
    def describe(self) -> dict[str, Any]:
        """How the target alone that every speedup divides by is decoded (``summary.json: baseline``, a record's
        ``ar_baseline``): its kernels and its untimed warm-ups, the same as the measured decodes'."""
        config = self.config
        kernels = self.batch_kernels.describe() if config.batch_size > 1 else self.loop.describe()
        kernels = {**kernels, "graphs": config.engine.graphs}  # the KV cache kind it ran on (engine.graphs)
        out = {"kernels": kernels, "warmup": config.warmup, "warmup_per_prompt": config.warmup_per_prompt}
        if self.fastest is not None:
            out["fastest"] = {**self.fastest.describe(), "graphs": "eager"}
        return out

    def cache_key(self) -> dict[str, Any]:
        """How a batch-1 reference is decoded (part of the AR cache's key): ``loop``'s step kernels and the untimed
        ``warmup_per_prompt`` decodes before the timed one."""
        kernels = {**self.loop.describe(), "graphs": self.config.engine.graphs}  # a static reference is not an eager one
        key = {"kernels": kernels, "warmup_per_prompt": int(self.config.warmup_per_prompt)}
        if self.fastest is not None:  # its entries hold the plain step's decode too
            key["fastest"] = self.fastest.describe()
        return key

    # ------------------------------------------------------------------ decodes
    def reference(self, prompt_ids: list[int], share: DeviceShare | None) -> Measured[Generation]:
        """The batch-1 reference of ``prompt_ids`` (cached and paired paths): the job's ``warmup_per_prompt``
        untimed decodes of the prompt turn (hf-bench's, as the measured decode gets them), then the timed one in
        the bracket. Greedy: a reference exists for greedy ``verify_lossless`` only."""
        assert self.loop.sampling.greedy, "a reference is a greedy decoding"
        n = self.config.max_new_tokens
        if self.fastest is None:
            warm_ups(self.config.warmup_per_prompt, lambda k: self.untimed_row(prompt_ids))
            return measured(share, lambda: self.loop.generate(prompt_ids, n))
        warm_ups(self.config.warmup_per_prompt, lambda k: self.untimed_row(prompt_ids),
                 lambda k: self.fastest.generate(prompt_ids, n))
        self._references += 1
        order = (self.fastest, self.loop) if self._references % 2 == 0 else (self.loop, self.fastest)  # W P, P W, ...
        both = measured(share, lambda: {id(r): r.generate(prompt_ids, n) for r in order})  # each times itself
        return Measured(both.value[id(self.loop)], both.device_jobs, both.neighbours, both.value[id(self.fastest)])

    def timed(self, prompts: Sequence[Sequence[int]], share: DeviceShare | None = None) -> Measured[BatchGeneration]:
        """One timed decode of ``prompts`` at the job's batch size (the paired AR batch), in the bracket (``share``:
        None samples nothing; the paired batch records no ``ar_device_jobs``)."""
        return measured(share, lambda: self.runner.generate(prompts, self.config.max_new_tokens))

    def untimed(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | None = None) -> BatchGeneration:
        """An untimed decode of ``prompts`` at the job's batch size (a warm-up; ``fastest``'s too, where there is one)."""
        n = self.config.max_new_tokens if max_new_tokens is None else max_new_tokens
        out = self.runner.generate(prompts, n)
        if self.fastest is not None:
            for prompt in prompts:
                self.fastest.generate(list(prompt), n)
        return out

    def untimed_row(self, prompt_ids: list[int], generator: Any = None) -> Generation:
        """An untimed decode of one prompt turn at batch 1 (a warm-up; a batched row's check alone)."""
        return self.loop.generate(prompt_ids, self.config.max_new_tokens, generator)


class ServerTargetAlone(TargetAlone):
    """The target alone of a server backend (``runners.engine.llamacpp``): its ``loop`` is the server started without
    a draft, the same binary and flags as the method's; decoded, warmed and bracketed as ours (the methods above)."""

    def __init__(self, loop: Any, config: JobConfig, backend: dict[str, Any]) -> None:
        self.config, self.step, self.batch_kernels, self.fastest = config, None, None, None
        self.loop, self.runner, self.backend = loop, OneAtATime(loop), backend

    def describe(self) -> dict[str, Any]:
        kernels = {"backend": self.backend["name"], "command": self.backend["target_alone_command"]}
        return {"kernels": kernels, "warmup": self.config.warmup, "warmup_per_prompt": self.config.warmup_per_prompt}

    def cache_key(self) -> dict[str, Any]:
        """The build, the target file's sha256 and the server's flags (its paths and the port left out)."""
        backend = self.backend
        flags = [a for a in backend["target_alone_command"][1:] if not a.startswith("/")]
        kernels = {"backend": backend["name"], "build": {k: backend["build"][k] for k in ("package", "mode", "cmake_args")},
                   "target_sha256": backend["target_file"]["sha256"], "flags": flags}
        return {"kernels": kernels, "warmup_per_prompt": int(self.config.warmup_per_prompt)}
