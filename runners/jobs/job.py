"""One job: a pair × method × task × initial γ, from a composed Hydra config to records on disk.

``prepare(cfg)`` is the boundary: it validates the composed config once into a typed
``specbench.config.JobConfig``, builds the job's γ policy (its knobs checked), checks the drafter's
options and the cross-vocabulary algorithm, and loads the prompts — all before any model loads —
and raises ``ConfigError`` for anything wrong. ``run_job(cfg, job_dir)`` then loads the models
(once per process, see ``specbench.models.MODEL_CACHE``), warms up, resets the policy, decodes
every prompt and appends one record per prompt turn to ``records.jsonl`` as soon as it is done,
and writes ``summary.json`` atomically at the start (``running``) and at the end (``complete``,
``failed`` or ``interrupted``). Below this module only typed objects travel.

A job whose summary says ``complete`` is skipped unless ``overwrite=true``; otherwise prompt turns
already in ``records.jsonl`` are not redone. A job folder that holds results of another config
(``specbench.config.config_drift``: a changed default, a setting the folder name does not show)
is refused with a ``ConfigError`` instead of being skipped or mixed.

Protocol settings applied here (README, "Protocols"):

* sampling processors: ``top_k`` / ``top_p`` / ``typical_p`` (``checkpoint``: the target's
  generation config) become one ``runners.engine.verify.Sampling`` used by every runner and
  drafter of the job; random numbers come from ``DeviceGenerators`` (one generator per device);
* ``method.cache`` of an autoregressive method (``offloaded``: hf-bench's AR baseline), refused
  before any model loads when there is no GPU to offload from;
* ``warmup_per_prompt``: untimed generations of each prompt turn right before its timed one
  (hf-bench: two per example, method and temperature), the policy's and runner's state restored
  afterwards so the warm-ups change nothing but the caches of the hardware;
* ``task.prompt_format`` (``specbench.tasks.format_turn``).

Around that, for sweeps at scale:

* a multirun job on a node that does not see the sweep's results folder fails at once and writes
  nothing (``runners.jobs.report.check_sweep_folder_visible``; the driver's report lists it);
* one writer per job folder: ``run_job`` takes the folder's lock (``runners.jobs.lock``) before it
  writes anything; a job another live process holds is skipped with one line naming the holder
  (``on_locked=skip``, the default; the returned summary says ``skipped`` and nothing is written) or
  waited for (``on_locked=wait``);
* a bounded model cache: before loading, ``MODEL_CACHE.make_room`` evicts models this job does not
  use when its own would not fit (``model_budget`` or the device's free memory), or fails the job
  at once with their sizes (``specbench.models.ModelCache``);
* the AR reference of ``verify_lossless`` comes from the sweep's on-disk cache when another job
  already decoded it (``runners.jobs.ar_cache``); an AR job's own greedy decodings fill it;
* every record says how many jobs shared its device while it was decoded
  (``runners.jobs.device_share``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import shutil
import statistics
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from methods.base import GammaPolicy
from methods.registry import build_policy
from runners.drafters import DrafterContext, build_drafter, check_drafter
from runners.engine.base import Generation
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import DeviceGenerators, Sampling
from runners.jobs.ar_cache import ARCache, hardware, reference_key
from runners.jobs.device_share import DeviceShare
from runners.jobs.inputs import check_inputs, fit_prompt
from runners.jobs.lock import JobLock, JobLocked, describe
from runners.jobs.predict import find_latency, predicted_wall
from runners.jobs.report import INVALID_JOBS, check_sweep_folder_visible, print_job_line, print_summary
from specbench.config import CHECKPOINT, JobConfig, config_drift
from specbench.loggers import JobLogger, build_logger
from specbench.models import (
    MODEL_CACHE,
    check_model_source,
    checkpoint_processors,
    config_vocab_size,
    eos_ids,
    logits_width,
    model_device,
    tokenizers_identical,
)
from specbench.provenance import provenance
from specbench.records import (
    Record,
    RecordWriter,
    aggregate,
    breakdown_fields,
    first_divergence,
    hfbench_fields,
    read_records,
    sha256_text,
    speculation_fields,
    timing_fields,
    write_json_atomic,
)
from specbench.registry import ConfigError
from specbench.tasks import Prompt, encode_turn, load_task

log = logging.getLogger("specbench")


@dataclass
class PreparedJob:
    """A validated job: its typed config, its prompts, and its γ policy (built once; None for AR)."""

    config: JobConfig
    prompts: list[Prompt]
    policy: GammaPolicy | None = None
    positions: int | None = None  # the target's positions, once ``check_inputs`` has read its config


def prepare(cfg: Any) -> PreparedJob:
    """Validate everything that can be checked without a model (a ``DictConfig``, a plain mapping or a
    ``JobConfig``); raise ``ConfigError`` naming the offending key."""
    config = cfg if isinstance(cfg, JobConfig) else JobConfig.from_mapping(cfg)
    check_model_source(config.pair.target, "pair.target")
    if config.speculative and config.pair.draft is not None and config.pair.draft.model is not None:
        check_model_source(config.pair.draft.model, "pair.draft")
    policy = None
    if config.speculative:
        policy = build_policy(config.method.policy, config.gamma, config.method.params)
        if config.method.runner == "hf":
            from runners.engine.hf_assisted import hf_settings

            hf_settings(policy)  # a schedule transformers has
    if config.drafter is not None:
        check_drafter(config.drafter, config.pair.draft.options)
    if config.method.ar_cache == "offloaded":
        check_offloading(config)
    prompts = load_task(config.task)
    if not prompts:
        raise ConfigError(f"task {config.task.name!r} selected no prompts")
    return PreparedJob(config, prompts, policy)


def check_offloading(config: JobConfig) -> None:
    """``method.cache=offloaded`` keeps the KV cache in CPU memory while the model runs on a GPU:
    refused (one line, before any model loads) when this run has no GPU or the target is on the CPU."""
    import torch

    target = config.pair.target
    on_cpu = str(target.device).startswith("cpu") and not target.device_map
    if not torch.cuda.is_available() or on_cpu:
        where = "this machine has no CUDA GPU" if not torch.cuda.is_available() else "the target runs on the CPU"
        raise ConfigError(
            f"method.cache=offloaded moves the KV cache from the GPU to the CPU, but {where}: nothing to "
            f"offload to. Use method=ar (cache dynamic) here, or run on a GPU."
        )


def resolve_sampling(config: JobConfig, target: Any) -> Sampling:
    """The job's ``Sampling``: its temperature and processors, ``checkpoint`` values read from the
    target's generation config (``specbench.models.checkpoint_processors``)."""
    from_model = checkpoint_processors(target)
    values = {}
    for key in ("top_k", "top_p", "typical_p"):
        value = getattr(config, key)
        values[key] = from_model[key] if value == CHECKPOINT else value
    try:
        return Sampling(config.temperature, **values)
    except ValueError as exc:
        raise ConfigError(f"sampling processors from the target checkpoint: {exc}") from None


class Job:
    """Models, tokenizers, the drafter and the runner of one job (built once, after ``prepare``)."""

    def __init__(self, prepared: PreparedJob) -> None:
        config = self.config = prepared.config
        self.policy = prepared.policy
        self.positions = prepared.positions
        self.share: DeviceShare | None = None  # set by run_job while the job decodes
        self.draft_model: Any = None
        self.name = ""
        self.ar_cache: ARCache | None = None
        target_spec, cache_dir = config.pair.target, config.cache_dir
        MODEL_CACHE.budget_bytes = config.model_budget
        MODEL_CACHE.make_room(self.model_specs(), cache_dir)
        self.target = MODEL_CACHE.model(target_spec, cache_dir)
        self.tokenizer = MODEL_CACHE.tokenizer(target_spec, cache_dir)
        self.eos = eos_ids(self.target, self.tokenizer)
        self.sampling = resolve_sampling(config, self.target)
        self.ar = AutoregressiveRunner(self.target, self.eos, self.sampling, cache=config.method.ar_cache or "dynamic")
        self.runner: Any = self.ar
        if config.method.ar_loop == "transformers":  # method=hf_native_ar: generate() is timed; our AR stays the reference
            from runners.engine.hf_ar import HFAutoregressiveRunner

            self.ar = AutoregressiveRunner(self.target, self.eos, self.sampling)
            self.runner = HFAutoregressiveRunner(self.target, self.eos, self.sampling, cache=config.method.ar_cache)
        draft = config.pair.draft
        self.vocab_facts: dict[str, Any] = {}
        if config.speculative and draft is not None and draft.model is not None:
            draft_model = MODEL_CACHE.model(draft.model, cache_dir)
            draft_tokenizer = MODEL_CACHE.tokenizer(draft.model, cache_dir)
            self.vocab_facts = {
                "target_vocab_size": config_vocab_size(self.target),
                "draft_vocab_size": config_vocab_size(draft_model),
                "tokenizers_identical": tokenizers_identical(self.tokenizer, draft_tokenizer),
            }
        self.shared_target: torch.Tensor | None = None  # hetero: target ids with a string in the draft vocabulary
        self.vocabulary: dict[str, Any] | None = None
        self.latency, self.latency_path = find_latency(config)  # predicted wall times (runners.jobs.predict)
        if config.method.runner == "speculative":
            from runners.engine.verify_forward import engine_options

            drafter = self._drafter()
            engine = engine_options(self.target, config.engine, config.gamma)  # lossless; all off by default
            self.runner = SpeculativeRunner(self.target, drafter, self.policy, self.eos, self.sampling, **engine)
            if config.hetero_rule is not None:
                self._overlap(drafter)
        elif config.method.runner == "hf":
            from runners.engine.hf_assisted import HFAssistedRunner

            assistant = self.draft_model = MODEL_CACHE.model(draft.model, cache_dir)
            self.runner = HFAssistedRunner(self.target, assistant, self.policy, self.eos, self.sampling)

    def model_specs(self) -> list:
        """The models this job loads: the target, and the draft model when the job drafts with one."""
        config = self.config
        specs = [config.pair.target]
        draft = config.pair.draft
        if config.speculative and draft is not None and draft.model is not None:
            specs.append(draft.model)
        return specs

    def devices(self) -> list[str]:
        """Every device the job's models have parameters on."""
        models = [m for m in (self.target, self.draft_model) if m is not None]
        return sorted({str(p.device) for m in models for p in m.parameters()} or {str(model_device(self.target))})

    def _load_draft(self) -> Any:
        draft = self.config.pair.draft
        if draft is not None and draft.model is not None:
            self.draft_model = MODEL_CACHE.model(draft.model, self.config.cache_dir)
        return self.draft_model

    def _drafter(self) -> Any:
        config = self.config
        draft = config.pair.draft
        ctx = DrafterContext(
            target_tokenizer=self.tokenizer,
            eos_token_ids=self.eos,
            target_vocab_size=logits_width(self.target),
            draft_model=self._load_draft(),
            draft_tokenizer=MODEL_CACHE.tokenizer(draft.model, config.cache_dir) if draft.model else None,
            options=draft.options,
            hetero=config.hetero,
        )
        return build_drafter(config.drafter, ctx)

    def _overlap(self, drafter: Any) -> None:
        """The pair's vocabulary overlap (``summary.json: hetero.vocabulary``) and the shared target ids."""
        from runners.drafters.vocab_map import drafter_mapping, overlap_summary

        mapping = getattr(drafter, "mapping", None) or drafter_mapping(drafter, logits_width(self.target))
        self.vocabulary = overlap_summary(mapping, self.tokenizer, drafter.dtok.tok)
        self.shared_target = torch.zeros(mapping.target_vocab_size, dtype=torch.bool)
        self.shared_target[mapping.shared_target_ids] = True

    def hetero_summary(self, records: list[dict]) -> dict[str, Any] | None:
        """What a job with a cross-vocabulary algorithm adds to its summary: the rule, the vocabulary
        overlap next to the acceptance it allows, the share of output tokens a token-level drafter
        could have proposed at all, and (SLRS) the fallback rule and how often it ran."""
        config = self.config
        if config.hetero_rule is None or self.vocabulary is None:
            return None
        out_tokens = sum(r["new_tokens"] for r in records)
        shared = sum((r.get("extra") or {}).get("output_tokens_shared", 0) for r in records)
        agg = aggregate(records)
        out: dict[str, Any] = {
            "rule": config.hetero_rule,
            "vocabulary": self.vocabulary,
            "acceptance_rate": agg.get("acceptance_rate"),
            "leviathan_alpha": agg.get("leviathan_alpha"),
            "output_tokens": out_tokens,
            "output_tokens_shared": shared,
            "output_shared_fraction": shared / out_tokens if out_tokens else None,
        }
        if config.hetero_rule in ("slem", "tli"):  # the rule's setting in force (conf/hetero: null = its default)
            key = "slem_gamma" if config.hetero_rule == "slem" else "tli_processors"
            out[key] = getattr(config.hetero, key)
        if config.hetero_rule == "slrs":
            h = config.hetero
            out.update(fallback_rule="tli", fallback_rounds=agg.get("fallback_rounds"),
                       rounds=sum(r.get("rounds") or 0 for r in records),
                       max_nodes=h.max_nodes, max_lookahead=h.max_lookahead, draft_top_k=h.draft_top_k)
        return out

    def reset(self) -> None:
        """The policy as configured (state carried across prompts, e.g. by the warm-up, is dropped)."""
        if self.policy is not None:
            self.policy.reset()
        if hasattr(self.runner, "reset"):
            self.runner.reset()

    def generator(self, seed: int) -> DeviceGenerators:
        """Random numbers for one generation: a generator per device (target and draft may differ)."""
        return DeviceGenerators(seed)

    def untimed(self, ids: list[int], max_new_tokens: int, seed: int) -> None:
        """A warm-up generation that leaves the policy and the runner as it found them (a carried-over
        γ or an adapted threshold must come from the timed prompts only)."""
        saved_policy = copy.deepcopy(vars(self.policy)) if self.policy is not None else None
        saved_carry = getattr(self.runner, "carried_gamma", None)
        self.runner.generate(ids, max_new_tokens, self.generator(seed))
        if saved_policy is not None:
            vars(self.policy).clear()
            vars(self.policy).update(saved_policy)
        if saved_carry is not None:
            self.runner.carried_gamma = saved_carry


_AR_REFERENCE: dict[str, tuple[Generation, str, int | None]] = {}


def ar_reference(job: Job, prompt_ids: list[int]) -> Generation:
    """The target's own greedy decoding of a prompt (timed once per sweep; see ``ar_reference_entry``)."""
    return ar_reference_entry(job, prompt_ids)[0]


def _reference_key(job: Job, prompt_ids: list[int], cache: str = "dynamic") -> dict[str, Any]:
    """The AR cache key of ``prompt_ids`` (``runners.jobs.ar_cache.reference_key``): a reference is decoded
    with the dynamic cache; an AR job's own decoding is stored under its own ``cache``."""
    return reference_key(job.config.pair.target, prompt_ids, job.config.max_new_tokens, job.eos,
                         hardware(str(model_device(job.target))), cache)


def ar_reference_entry(job: Job, prompt_ids: list[int]) -> tuple[Generation, str, int | None]:
    """``(reference, source, device_jobs when it was timed)``: memoised in this process, else read from
    the sweep's on-disk cache (``runners.jobs.ar_cache``; source ``cache``), else decoded here while
    holding the key's decode lock and written there (source ``decoded``)."""
    from runners.jobs.ar_cache import key_hash

    key = _reference_key(job, prompt_ids)
    digest = key_hash(key)
    if digest in _AR_REFERENCE:
        gen, _, jobs = _AR_REFERENCE[digest]
        return gen, "cache", jobs
    cache = job.ar_cache
    entry = cache.get(key) if cache is not None else None
    source = "cache"
    if entry is None:
        with cache.claim(key) if cache is not None else _nothing():
            entry = cache.get(key) if cache is not None else None
            if entry is None:
                jobs_before = job.share.sample()[0] if job.share is not None else None
                gen = AutoregressiveRunner(job.target, job.eos, 0.0).generate(prompt_ids, job.config.max_new_tokens)
                jobs_after = job.share.sample()[0] if job.share is not None else None
                device_jobs = max(j for j in (jobs_before, jobs_after) if j is not None) if job.share else None
                _AR_REFERENCE[digest] = (gen, "decoded", device_jobs)
                if cache is not None:
                    cache.put(key, gen.tokens, gen.ttft_ms, gen.wall_ms, gen.stop_reason, _context(job, device_jobs))
                return gen, "decoded", device_jobs
    gen = Generation(tokens=list(entry["tokens"]), ttft_ms=float(entry["ttft_ms"]), wall_ms=float(entry["wall_ms"]),
                     stop_reason=str(entry["stop_reason"]), speculative=False)
    _AR_REFERENCE[digest] = (gen, source, entry.get("device_jobs"))
    return gen, source, entry.get("device_jobs")


def _context(job: Job, device_jobs: int | None) -> dict[str, Any]:
    return {"job": job.name, "device_id": job.share.device_id if job.share is not None else None,
            "device_jobs": device_jobs}


def _store_own_reference(job: Job, prompt_ids: list[int], gen: Generation, device_jobs: int | None) -> None:
    """An AR job's greedy decoding is the reference other jobs need: put it in the cache."""
    if job.ar_cache is None:
        return
    key = _reference_key(job, prompt_ids, job.config.method.ar_cache or "dynamic")
    if job.ar_cache.get(key) is None:
        job.ar_cache.put(key, gen.tokens, gen.ttft_ms, gen.wall_ms, gen.stop_reason, _context(job, device_jobs))


@contextlib.contextmanager
def _nothing() -> Any:
    yield


def _summary(config: JobConfig, status: str, records: list[dict], extra: Mapping[str, Any] | None = None) -> dict:
    pair = config.pair
    dtypes = {"target": pair.target.dtype}
    if pair.draft is not None and pair.draft.model is not None:
        dtypes["draft"] = pair.draft.model.dtype
    return {
        "status": status,
        "config": config.as_dict(),
        "provenance": provenance(pair.target.device, dtypes),
        "aggregates": aggregate(records),
        "model_cache": MODEL_CACHE.stats(),
        **(extra or {}),
    }


def run_cli_job(cfg: Any, job_dir: str | Path, multirun: bool = False) -> int:
    """``run.py``'s job: run it, print its summary (a sweep: one line), and return the exit status.

    A bad config is one line on stderr naming the key or file, no traceback and no job folder: status 2
    for a single run; in a sweep the job is listed in the sweep folder's ``invalid_jobs.jsonl`` (read by
    the sweep report, which then exits 1) and the sweep goes on. A job that fails while running is
    recorded in its ``summary.json`` (status 1 for a single run; the sweep goes on)."""
    job_dir = Path(job_dir)
    if STOP_REQUESTED:
        raise KeyboardInterrupt("stopped by Ctrl-C")
    try:
        summary = run_job(cfg, job_dir, progress=True)
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        if not multirun:
            return 2
        _append_line(job_dir.parent / INVALID_JOBS, {"job": job_dir.name, "error": str(exc), "time": time.time()})
        return 0
    except KeyboardInterrupt:
        log.error("interrupted: records so far are kept in %s; run the same command again to resume", job_dir)
        raise
    except Exception as exc:  # crash isolation: the failure is in summary.json
        log.exception("job failed: %s (details in %s/summary.json)", exc, job_dir)
        return 0 if multirun else 1
    (print_job_line if multirun else print_summary)(job_dir, summary)
    return 0


def _append_line(path: Path, row: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def is_complete(job_dir: Path) -> bool:
    try:
        return json.loads((job_dir / "summary.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def check_same_job(job_dir: Path, config: JobConfig) -> None:
    """A folder with a summary from another config (``config_drift``) is not resumed or skipped."""
    try:
        old = json.loads((job_dir / "summary.json").read_text()).get("config")
    except (OSError, ValueError):
        return
    drift = config_drift(old, config.as_dict()) if isinstance(old, Mapping) else None
    if drift is not None:
        raise ConfigError(
            f"{job_dir} holds a job run with another config ({drift}); overwrite=true redoes it, "
            "or choose another results_dir"
        )


def open_job(cfg: Any, job_dir: str | Path, progress: bool = True) -> JobRun | dict:
    """Validate a job and take its folder's lock: a ``JobRun`` ready to ``start``, or the summary of a
    job another live process holds (``{"status": "skipped", ...}``; nothing written). A bad config
    raises ``ConfigError`` and leaves no folder behind (unless the folder held results already)."""
    job_dir = Path(job_dir)
    check_sweep_folder_visible()  # a worker without the shared results folder writes nothing
    existed_before = (job_dir / "records.jsonl").exists() or (job_dir / "summary.json").exists()
    try:
        prepared = prepare(cfg)
    except ConfigError:
        if not existed_before:  # leave nothing behind for a bad config
            shutil.rmtree(job_dir, ignore_errors=True)
        raise
    try:
        prepared.positions = check_inputs(prepared.config, prepared.prompts)
    except ConfigError:
        if not existed_before:
            shutil.rmtree(job_dir, ignore_errors=True)
        raise
    except Exception as exc:  # e.g. a model folder whose config.json cannot be read: a failed job, recorded
        failure = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        write_json_atomic(job_dir / "summary.json",
                          _summary(prepared.config, "failed", read_records(job_dir / "records.jsonl"), failure))
        raise
    config = prepared.config
    lock = JobLock(job_dir, wait=config.on_locked == "wait")
    try:
        holder = lock.try_acquire()
        if holder is not None:
            if not lock.wait:
                raise JobLocked(job_dir, holder)
            log.warning("%s: run by %s; waiting for it (on_locked=wait)", job_dir.name, describe(holder))
            lock.acquire()
    except JobLocked as exc:
        log.warning("skipped %s (on_locked=wait to wait for it)", exc)
        return {"status": "skipped", "holder": exc.holder, "message": str(exc)}
    return JobRun(prepared, job_dir, lock, progress)


def run_job(cfg: Any, job_dir: str | Path, progress: bool = True) -> dict:
    """Validate, run and record one job, turn after turn; returns its summary (see module docstring).
    A job another live process holds returns ``{"status": "skipped", "holder": ...}`` and writes nothing."""
    run = open_job(cfg, job_dir, progress)
    if not isinstance(run, JobRun):
        return run
    with run:
        summary = run.start()
        if summary is not None:
            return summary
        with StopAfterCurrentPrompt() as stop:
            for unit in run.units():
                if run.is_done(unit):
                    continue
                if stop.requested and unit.first_of_prompt:
                    raise KeyboardInterrupt("stopped after the current prompt")
                inp = run.turn_ids(unit)
                timed = run.generate(unit, inp)
                run.write(unit, inp, timed, run.reference(inp.ids))
            if stop.requested:  # the last prompt finished after Ctrl-C: the job is complete, the sweep stops
                global STOP_REQUESTED
                STOP_REQUESTED = True
        return run.finish()


@dataclass(frozen=True)
class Unit:
    """One timed generation of a job: prompt ``index`` (in task order), its ``turn`` (1-based) and the
    ``repeat`` (0-based) of that turn."""

    index: int
    prompt: Prompt
    turn: int
    repeat: int

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.prompt.prompt_id, self.turn, self.repeat)

    @property
    def first_of_prompt(self) -> bool:
        return self.turn == 1 and self.repeat == 0


@dataclass
class Timed:
    """A unit's timed generation, the host probe taken right before it, and the device's sharing."""

    gen: Generation
    probe_ms: float | None
    device_jobs: int | None = None
    neighbours: list[str] | None = None


@dataclass(frozen=True)
class Reference:
    """The target-alone decoding a record compares with and divides by (``ar_source``, ``ar_decode``)."""

    gen: Generation
    source: str
    device_jobs: int | None = None
    decode_id: str | None = None


class JobRun:
    """One job opened for decoding (``open_job``): its folder's lock held; ``start`` checks the folder
    (resume, drift), loads and warms up the models; then each ``Unit`` is ``turn_ids`` → ``generate``
    (timed) → ``write`` (its record); ``finish`` writes the summary. ``run_job`` drives one job unit
    after unit; the interleaved launcher (``runners.jobs.interleave``) drives many, one unit of each per
    round. Used as a context manager it records a failure or an interruption in ``summary.json``, closes
    its writer and logger, and releases the lock."""

    def __init__(self, prepared: PreparedJob, job_dir: Path, lock: JobLock, progress: bool = True) -> None:
        self.prepared, self.config, self.job_dir, self.lock = prepared, prepared.config, job_dir, lock
        self.records_path = job_dir / "records.jsonl"
        self.progress = progress
        self.job: Job | None = None
        self.done: dict[tuple[str, int, int], dict] = {}
        self.answers: dict[str, list[str]] = {}  # prompt id -> the job's answers to its turns (repeat 0)
        self.logger: JobLogger | None = None
        self.summary: dict | None = None
        self.load_s = 0.0
        self._stack = contextlib.ExitStack()
        self._writer: _Guarded | None = None
        self._bar: Any = None
        self._tokens, self._seconds = 0, 0.0
        self.probe: Any = None
        self.began = False  # the folder says ``running``: an exception from here on is recorded in it
        self.closed = False

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> JobRun:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is not None and self.summary is None and self.began:
                if issubclass(exc_type, KeyboardInterrupt):
                    self.interrupted()
                elif issubclass(exc_type, Exception):
                    self.failed(exc)
        finally:
            self.close()

    def start(self, share: Callable[[list[str]], DeviceShare] | None = None) -> dict | None:
        """Check the folder and load the job; the summary of a job already complete (nothing to do), else
        None. ``share``: gives the device registration for the job's devices (an interleaved sweep
        registers once for all its jobs, which decode one at a time); by default the job registers
        itself while it runs."""
        config = self.config
        if config.overwrite:
            self.records_path.unlink(missing_ok=True)
            (self.job_dir / "summary.json").unlink(missing_ok=True)
        else:
            check_same_job(self.job_dir, config)
        self.done = {_unit_key(r): r for r in read_records(self.records_path)}
        if not config.overwrite and is_complete(self.job_dir) and not any(not self.is_done(u) for u in self.units()):
            log.info("job %s is complete; skipped (overwrite=true to redo)", self.job_dir)
            self.summary = json.loads((self.job_dir / "summary.json").read_text())
            return self.summary
        if self.done:
            _rewrite_whole_lines(self.records_path, list(self.done.values()))
        for r in sorted(self.done.values(), key=lambda r: r["turn"]):
            if not r.get("repeat"):
                self.answers.setdefault(r["prompt_id"], []).append(r["output_text"])
        write_json_atomic(self.job_dir / "summary.json", _summary(config, "running", list(self.done.values())))
        self.began = True
        self.logger = build_logger(config.logger)
        self.logger.start(config.as_dict(), job_name=self.job_dir.name)
        for record in self.done.values():  # on resume, so the logged table is complete
            self.logger.log_record(record)
        if config.threads:
            torch.set_num_threads(config.threads)
        t_load = time.perf_counter()
        job = self.job = Job(self.prepared)
        job.name = self.job_dir.name
        self.load_s = time.perf_counter() - t_load
        if config.verify_lossless and config.greedy:
            job.ar_cache = ARCache(self.job_dir.parent)  # the sweep's folder (results_dir under Hydra)
        if share is None:
            job.share = self._stack.enter_context(DeviceShare(self.job_dir.parent, self.job_dir.name, job.devices()))
        else:
            job.share = share(job.devices())
        if config.host_probe:
            from runners.jobs.probe import HostProbe

            self.probe = HostProbe(job.target, logits_width(job.target))
        _warmup(job, self.prepared.prompts)
        job.reset()  # timed prompts start from the configured initial gamma
        self._writer = _Guarded(self._stack.enter_context(RecordWriter(self.records_path)), self.lock)
        from tqdm.auto import tqdm

        units = self.units()
        self._bar = self._stack.enter_context(tqdm(
            total=len(units), initial=sum(1 for u in units if self.is_done(u)),
            desc=f"{config.method.name} γ={config.gamma}", unit="turn", disable=not self.progress, leave=False))
        return None

    def units(self) -> list[Unit]:
        """Every timed generation of the job, in order: prompt by prompt, turn by turn, repeat by repeat."""
        return [Unit(i, p, t, r) for i, p in enumerate(self.prepared.prompts)
                for t in range(1, len(p.turns) + 1) for r in range(self.config.repeats)]

    def is_done(self, unit: Unit) -> bool:
        return unit.key in self.done

    # ------------------------------------------------------------------ one unit
    def turn_ids(self, unit: Unit) -> TurnInput:
        """The input of a unit: its turn after the job's own earlier answers (their repeat 0)."""
        assert self.job is not None, "start() first"
        prompt = unit.prompt
        answers = self.answers.get(prompt.prompt_id, [])
        return turn_input(self.job, prompt, unit.turn, list(zip(prompt.turns, answers[: unit.turn - 1])))

    def generate(self, unit: Unit, inp: TurnInput) -> Timed:
        """The unit's timed generation (after its untimed ``warmup_per_prompt`` ones and the host probe)."""
        job, config = self.job, self.config
        assert job is not None
        for k in range(config.warmup_per_prompt):  # hf-bench: the same call, untimed, before the timed one
            job.untimed(inp.ids, config.max_new_tokens, config.seed + 1 + k)
        probe_ms = self.probe() if self.probe is not None else None
        before = job.share.sample() if job.share is not None else None
        gen = job.runner.generate(inp.ids, config.max_new_tokens, job.generator(config.seed))
        after = job.share.sample() if job.share is not None else None
        if before is None or after is None:
            return Timed(gen, probe_ms)
        return Timed(gen, probe_ms, max(before[0], after[0]), sorted(set(before[1]) | set(after[1])))

    def needs_reference(self) -> bool:
        """Whether records compare with the target alone (greedy ``verify_lossless``, not an AR job)."""
        job = self.job
        return bool(self.config.verify_lossless and self.config.greedy and job is not None and job.runner is not job.ar)

    def reference(self, ids: list[int]) -> Reference | None:
        """The sequential launchers' reference: memoised, from the sweep's cache, or decoded here."""
        if not self.needs_reference():
            return None
        gen, source, jobs = ar_reference_entry(self.job, ids)
        from runners.jobs.ar_cache import key_hash

        return Reference(gen, source, jobs, key_hash(_reference_key(self.job, ids)))

    def write(self, unit: Unit, inp: TurnInput, timed: Timed, reference: Reference | None,
              interleave: Mapping[str, Any] | None = None) -> dict:
        """The unit's record, appended to ``records.jsonl`` at once (crash-safe), logged and counted."""
        assert self.job is not None and self._writer is not None
        made = make_record(self.job, unit, inp, timed, reference, interleave)
        self._writer.write(made)
        record = asdict(made)
        assert self.logger is not None
        self.logger.log_record(record)
        self.done[unit.key] = record
        if unit.repeat == 0:
            self.answers.setdefault(unit.prompt.prompt_id, []).append(record["output_text"])
        self._tokens += record["new_tokens"]
        self._seconds += record["wall_ms"] / 1000.0
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(tok_s=f"{self._tokens / self._seconds:.1f}" if self._seconds else "-")
        return record

    # ------------------------------------------------------------------ endings
    def finish(self) -> dict:
        """The job's summary (``complete``), written atomically."""
        job = self.job
        assert job is not None
        records = read_records(self.records_path)
        extra = {"load_s": self.load_s, "policy_state": job.policy.state() if job.policy else None,
                 "latency_model": job.latency_path, "engine": _engine_summary(job),
                 "repeats": self.config.repeats, "drift": drift_summary(records)}
        hetero = job.hetero_summary(records)
        if hetero is not None:
            extra["hetero"] = hetero
        self.summary = _summary(self.config, "complete", records, extra)
        write_json_atomic(self.job_dir / "summary.json", self.summary)
        if self.logger is not None:
            self.logger.finish(self.summary, failed=False)
            self.logger = None
        return self.summary

    def failed(self, exc: BaseException) -> dict:
        self.summary = _summary(self.config, "failed", read_records(self.records_path),
                                {"error": f"{type(exc).__name__}: {exc}",
                                 "traceback": "".join(traceback.format_exception(exc))})
        if not self.lock.lost:
            write_json_atomic(self.job_dir / "summary.json", self.summary)
        return self.summary

    def interrupted(self) -> dict:
        self.summary = _summary(self.config, "interrupted", read_records(self.records_path))
        write_json_atomic(self.job_dir / "summary.json", self.summary)
        return self.summary

    def close(self) -> None:
        """Close the writer, the progress bar and the device registration; finish the logger; release the
        lock. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self._stack.close()
            if self.logger is not None:
                self.logger.finish(self.summary or {"status": "failed"}, failed=True)
                self.logger = None
        finally:
            self.lock.release()


def _unit_key(record: Mapping[str, Any]) -> tuple[str, int, int]:
    return (record["prompt_id"], record["turn"], int(record.get("repeat") or 0))


def drift_summary(records: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The job's host-probe spread (``summary.json: drift``): median, min, max and max/min of
    ``host_probe_ms`` over its records; None without probes."""
    probes = sorted(r["host_probe_ms"] for r in records if r.get("host_probe_ms") is not None)
    if not probes:
        return None
    return {"host_probe_ms_median": statistics.median(probes), "host_probe_ms_min": probes[0],
            "host_probe_ms_max": probes[-1],
            "max_over_min": probes[-1] / probes[0] if probes[0] > 0 else None, "n": len(probes)}


def _engine_summary(job: Job) -> dict[str, Any] | None:
    """The engine options the speculative loop ran with (null for ``ar`` and ``hf``): the fast-linear
    scope, the padding buckets (as probed), ``fused_prefill``."""
    forward = getattr(job.runner, "forward", None)
    if forward is None:
        return None
    return {**forward.describe(), "fused_prefill": bool(getattr(job.runner, "fused_prefill", False))}


class _Guarded:
    """A record writer that first checks this process still holds the job's lock."""

    def __init__(self, writer: RecordWriter, lock: JobLock) -> None:
        self.writer, self.lock = writer, lock

    def write(self, record: Any) -> None:
        self.lock.check()
        self.writer.write(record)


def _rewrite_whole_lines(path: Path, records: list[dict]) -> None:
    """Drop a torn last line (a kill mid-write) and duplicates before appending again."""
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _warmup(job: Job, prompts: list[Prompt]) -> None:
    """Untimed generations so one-off costs (allocations, kernels) stay out of the records."""
    config = job.config
    if config.warmup <= 0:
        return
    ids, _ = encode_turn(job.tokenizer, [], prompts[0].turns[0], config.task.prompt_format)
    n_tokens = min(16, config.max_new_tokens)
    for _ in range(config.warmup):
        job.runner.generate(ids, n_tokens, job.generator(config.seed))
        if config.verify_lossless and config.greedy and job.runner is not job.ar:
            job.ar.generate(ids, n_tokens)


STOP_REQUESTED = False  # set by a Ctrl-C that came during a job's last prompt: later jobs do not start


class StopAfterCurrentPrompt:
    """Ctrl-C (SIGINT) once: finish the prompt in flight, record it, then stop.
    Twice: stop at once (the prompt in flight is lost; everything before it is kept)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("Ctrl-C: stopping after the current prompt (press again to stop now)")

    def __enter__(self) -> StopAfterCurrentPrompt:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


@dataclass(frozen=True)
class TurnInput:
    """What a prompt turn feeds the models: its token ids (after ``fit_prompt``), the prompt format
    used, and how many tokens ``task.truncate`` dropped."""

    ids: list[int]
    prompt_format: str
    dropped: int = 0


def turn_input(job: Job, prompt: Prompt, turn: int, history: list[tuple[str, str]], user: str | None = None
               ) -> TurnInput:
    """The ``TurnInput`` of ``prompt``'s ``turn`` after ``history`` ((user, answer) pairs of the earlier turns)."""
    config = job.config
    ids, fmt = encode_turn(job.tokenizer, history, prompt.turns[turn - 1] if user is None else user,
                           config.task.prompt_format)
    ids, dropped = fit_prompt(ids, config, job.positions, f"prompt {prompt.prompt_id!r} turn {turn}")
    return TurnInput(ids, fmt, dropped)


def make_record(job: Job, unit: Unit, inp: TurnInput, timed: Timed, reference: Reference | None,
                interleave: Mapping[str, Any] | None = None) -> Record:
    """A unit's ``Record`` from its timed generation and its reference (definitions: ``specbench.records``)."""
    config, prompt, turn, gen, ids = job.config, unit.prompt, unit.turn, timed.gen, inp.ids
    fields: dict[str, Any] = {"output_ids": list(gen.tokens), "repeat": unit.repeat, "host_probe_ms": timed.probe_ms,
                              "interleave": dict(interleave) if interleave is not None else None}
    device_jobs = timed.device_jobs
    if device_jobs is not None:
        fields.update(device_id=job.share.device_id, device_jobs=device_jobs,
                      device_neighbours=list(timed.neighbours or []))
    if gen.speculative:
        fields.update(speculation_fields(gen.gamma_trace, gen.drafted_trace, gen.accepted_trace))
        fields["confidence_trace"] = gen.confidence_trace
        fields["discarded_trace"] = gen.discarded_trace if any(gen.discarded_trace) else []
        fields["draft_forwards"] = gen.draft_forwards
        if config.hetero_rule == "slrs":
            fields["fallback_rounds"] = gen.fallback_rounds
    extra: dict[str, Any] = {"truncated_tokens": inp.dropped, "truncated": config.task.truncate} if inp.dropped else {}
    if job.shared_target is not None:
        extra["output_tokens_shared"] = sum(
            1 for t in gen.tokens if t < job.shared_target.numel() and bool(job.shared_target[t]))
    if config.verify_lossless and config.greedy:
        if job.runner is job.ar:
            reference = Reference(gen, "self", device_jobs)
            _store_own_reference(job, ids, gen, device_jobs)
        assert reference is not None, "a verified job's record needs its reference"
        fields.update(ar_source=reference.source, ar_device_jobs=reference.device_jobs, ar_decode=reference.decode_id)
        ref = reference.gen
        div = first_divergence(gen.tokens, ref.tokens)
        fields.update(lossless=div is None, first_divergence=div)
        ref_t = timing_fields(ref.wall_ms, ref.ttft_ms, len(ref.tokens))
        fields.update(ar_tokens_per_s=ref_t["tokens_per_s"], ar_wall_ms=ref.wall_ms)
    timing = timing_fields(gen.wall_ms, gen.ttft_ms, len(gen.tokens))
    predicted = predicted_wall(job.latency, config, bool(getattr(job.runner, "fused_prefill", False)), len(ids), gen)
    timing.update(breakdown_fields(gen.phase_ms), predicted_wall_ms=predicted)
    if fields.get("ar_tokens_per_s"):
        fields["speedup"] = timing["tokens_per_s"] / fields["ar_tokens_per_s"]
    stream_ttft = gen.first_round_ms if gen.speculative and gen.first_round_ms is not None else gen.ttft_ms
    fields.update(hfbench_fields(gen.wall_ms, stream_ttft, len(gen.tokens)))
    fields.update(job.vocab_facts)
    output_text = job.tokenizer.decode(gen.tokens, skip_special_tokens=True)
    fmt = inp.prompt_format
    pair = config.pair
    return Record(
        pair=pair.name,
        target=pair.target.label,
        draft=pair.draft.name if pair.draft is not None and config.speculative else None,
        method=config.method.name,
        hetero=config.hetero_rule,
        task=config.task.name,
        category=prompt.category,
        prompt_id=prompt.prompt_id,
        turn=turn,
        gamma_init=config.gamma if config.speculative else None,
        temperature=config.temperature,
        seed=config.seed,
        prompt_tokens=len(ids),
        new_tokens=len(gen.tokens),
        output_text=output_text,
        output_sha=sha256_text(output_text),
        stop_reason=gen.stop_reason,
        chat_template="chat" if fmt == "chat_template" else None,
        prompt_format=fmt,
        method_params=dict(config.method.params),
        ar_cache=config.method.ar_cache,
        top_k=job.sampling.top_k,
        top_p=job.sampling.top_p,
        typical_p=job.sampling.typical_p,
        extra=extra,
        **timing,
        **fields,
    )
