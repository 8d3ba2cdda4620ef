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
already in ``records.jsonl`` are not redone.

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
import json
import logging
import os
import shutil
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from methods.base import GammaPolicy
from methods.hetero import check_supported
from methods.registry import build_policy
from runners.drafters import DrafterContext, build_drafter, check_drafter
from runners.engine.base import Generation
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.jobs.ar_cache import ARCache, hardware, reference_key
from runners.jobs.device_share import DeviceShare
from runners.jobs.lock import JobLock, JobLocked, describe
from runners.jobs.report import check_sweep_folder_visible
from specbench.config import JobConfig
from specbench.loggers import JobLogger, build_logger
from specbench.models import MODEL_CACHE, eos_ids, logits_width, model_device
from specbench.provenance import provenance
from specbench.records import (
    Record,
    RecordWriter,
    aggregate,
    first_divergence,
    read_records,
    sha256_text,
    speculation_fields,
    timing_fields,
    write_json_atomic,
)
from specbench.registry import ConfigError
from specbench.tasks import Prompt, format_turn, load_task

log = logging.getLogger("specbench")


@dataclass
class PreparedJob:
    """A validated job: its typed config, its prompts, and its γ policy (built once; None for AR)."""

    config: JobConfig
    prompts: list[Prompt]
    policy: GammaPolicy | None = None


def prepare(cfg: Any) -> PreparedJob:
    """Validate everything that can be checked without a model (a ``DictConfig``, a plain mapping or a
    ``JobConfig``); raise ``ConfigError`` naming the offending key."""
    config = cfg if isinstance(cfg, JobConfig) else JobConfig.from_mapping(cfg)
    policy = None
    if config.speculative:
        policy = build_policy(config.method.policy, config.gamma, config.method.params)
        if config.method.runner == "hf":
            from runners.engine.hf_assisted import hf_settings

            hf_settings(policy)  # a schedule transformers has
    if config.hetero_rule is not None:
        check_supported(config.hetero_rule)
    if config.drafter is not None:
        check_drafter(config.drafter, config.pair.draft.options)
    prompts = load_task(config.task)
    if not prompts:
        raise ConfigError(f"task {config.task.name!r} selected no prompts")
    return PreparedJob(config, prompts, policy)


class Job:
    """Models, tokenizers, the drafter and the runner of one job (built once, after ``prepare``)."""

    def __init__(self, prepared: PreparedJob) -> None:
        config = self.config = prepared.config
        self.policy = prepared.policy
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
        self.ar = AutoregressiveRunner(self.target, self.eos, config.temperature)
        self.runner: Any = self.ar
        draft = config.pair.draft
        if config.method.runner == "speculative":
            self.runner = SpeculativeRunner(self.target, self._drafter(), self.policy, self.eos, config.temperature)
        elif config.method.runner == "hf":
            from runners.engine.hf_assisted import HFAssistedRunner

            assistant = self.draft_model = MODEL_CACHE.model(draft.model, cache_dir)
            self.runner = HFAssistedRunner(self.target, assistant, self.policy, self.eos, config.temperature)

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

    def reset(self) -> None:
        """The policy as configured (state carried across prompts, e.g. by the warm-up, is dropped)."""
        if self.policy is not None:
            self.policy.reset()
        if hasattr(self.runner, "reset"):
            self.runner.reset()

    def encode(self, text: str, templated: bool) -> list[int]:
        return self.tokenizer(text, add_special_tokens=not templated).input_ids

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device="cpu").manual_seed(int(seed))


_AR_REFERENCE: dict[str, tuple[Generation, str, int | None]] = {}


def ar_reference(job: Job, prompt_ids: list[int]) -> Generation:
    """The target's own greedy decoding of a prompt (timed once per sweep; see ``ar_reference_entry``)."""
    return ar_reference_entry(job, prompt_ids)[0]


def _reference_key(job: Job, prompt_ids: list[int]) -> dict[str, Any]:
    return reference_key(job.config.pair.target, prompt_ids, job.config.max_new_tokens, job.eos,
                         hardware(str(model_device(job.target))))


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
    key = _reference_key(job, prompt_ids)
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


def is_complete(job_dir: Path) -> bool:
    try:
        return json.loads((job_dir / "summary.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def run_job(cfg: Any, job_dir: str | Path, progress: bool = True) -> dict:
    """Validate, run and record one job; returns its summary (see module docstring). A job another
    live process holds returns ``{"status": "skipped", "holder": ...}`` and writes nothing."""
    job_dir = Path(job_dir)
    check_sweep_folder_visible()  # a worker without the shared results folder writes nothing
    existed_before = (job_dir / "records.jsonl").exists() or (job_dir / "summary.json").exists()
    try:
        prepared = prepare(cfg)
    except ConfigError:
        if not existed_before:  # leave nothing behind for a bad config
            shutil.rmtree(job_dir, ignore_errors=True)
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
    try:
        return _run_locked(prepared, job_dir, progress, lock)
    finally:
        lock.release()


def _run_locked(prepared: PreparedJob, job_dir: Path, progress: bool, lock: JobLock) -> dict:
    config = prepared.config
    records_path = job_dir / "records.jsonl"
    if config.overwrite:
        records_path.unlink(missing_ok=True)
        (job_dir / "summary.json").unlink(missing_ok=True)
    elif is_complete(job_dir):
        log.info("job %s is complete; skipped (overwrite=true to redo)", job_dir)
        return json.loads((job_dir / "summary.json").read_text())
    done = {(r["prompt_id"], r["turn"]): r for r in read_records(records_path)}
    if done:
        _rewrite_whole_lines(records_path, list(done.values()))
    write_json_atomic(job_dir / "summary.json", _summary(config, "running", list(done.values())))
    logger = build_logger(config.logger)
    logger.start(config.as_dict(), job_name=job_dir.name)
    summary: dict = {}
    failed = True
    try:
        for record in done.values():  # on resume, so the logged table is complete
            logger.log_record(record)
        if config.threads:
            torch.set_num_threads(config.threads)
        t_load = time.perf_counter()
        job = Job(prepared)
        job.name = job_dir.name
        load_s = time.perf_counter() - t_load
        if config.verify_lossless and config.greedy:
            job.ar_cache = ARCache(job_dir.parent)  # the sweep's folder (results_dir under Hydra)
        with DeviceShare(job_dir.parent, job_dir.name, job.devices()) as share:
            job.share = share
            _warmup(job, prepared.prompts)
            job.reset()  # timed prompts start from the configured initial gamma
            with RecordWriter(records_path) as writer:
                _decode_all(job, prepared.prompts, done, _Guarded(writer, lock), progress, logger)
        records = read_records(records_path)
        extra = {"load_s": load_s, "policy_state": job.policy.state() if job.policy else None}
        summary = _summary(config, "complete", records, extra)
        write_json_atomic(job_dir / "summary.json", summary)
        failed = False
        return summary
    except KeyboardInterrupt:
        summary = _summary(config, "interrupted", read_records(records_path))
        write_json_atomic(job_dir / "summary.json", summary)
        raise
    except Exception as exc:
        summary = _summary(
            config, "failed", read_records(records_path),
            {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
        )
        if not lock.lost:
            write_json_atomic(job_dir / "summary.json", summary)
        raise
    finally:
        logger.finish(summary or {"status": "failed"}, failed=failed)


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
    text, template = format_turn(job.tokenizer, [], prompts[0].turns[0], config.task.chat_template)
    ids = job.encode(text, template is not None)
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


def _decode_all(
    job: Job, prompts: list[Prompt], done: dict, writer: Any, progress: bool, logger: JobLogger
) -> None:
    from tqdm.auto import tqdm

    config = job.config
    total = sum(len(p.turns) for p in prompts)
    bar = tqdm(total=total, desc=f"{config.method.name} γ={config.gamma}", unit="turn", disable=not progress,
               leave=False)
    tokens = 0
    seconds = 0.0
    with StopAfterCurrentPrompt() as stop, bar:
        for prompt in prompts:
            if stop.requested:
                raise KeyboardInterrupt("stopped after the current prompt")
            history: list[tuple[str, str]] = []
            for turn, user in enumerate(prompt.turns, start=1):
                prev = done.get((prompt.prompt_id, turn))
                if prev is not None:
                    history.append((user, prev["output_text"]))
                    bar.update(1)
                    continue
                record = decode_turn(job, prompt, turn, history, user)
                writer.write(record)
                logger.log_record(asdict(record))
                history.append((user, record.output_text))
                tokens += record.new_tokens
                seconds += record.wall_ms / 1000.0
                bar.update(1)
                bar.set_postfix(tok_s=f"{tokens / seconds:.1f}" if seconds else "-")
        if stop.requested:  # the last prompt finished after Ctrl-C: the job is complete, the sweep stops
            global STOP_REQUESTED
            STOP_REQUESTED = True


def decode_turn(job: Job, prompt: Prompt, turn: int, history: list[tuple[str, str]], user: str) -> Record:
    config = job.config
    text, template = format_turn(job.tokenizer, history, user, config.task.chat_template)
    ids = job.encode(text, template is not None)
    before = job.share.sample() if job.share is not None else None
    gen = job.runner.generate(ids, config.max_new_tokens, job.generator(config.seed))
    after = job.share.sample() if job.share is not None else None
    output_text = job.tokenizer.decode(gen.tokens, skip_special_tokens=True)
    fields: dict[str, Any] = {"output_ids": list(gen.tokens)}
    device_jobs = None
    if before is not None and after is not None:
        device_jobs = max(before[0], after[0])
        fields.update(device_id=job.share.device_id, device_jobs=device_jobs,
                      device_neighbours=sorted(set(before[1]) | set(after[1])))
    if gen.speculative:
        fields.update(speculation_fields(gen.gamma_trace, gen.drafted_trace, gen.accepted_trace))
        fields["confidence_trace"] = gen.confidence_trace
    if config.verify_lossless and config.greedy:
        if job.runner is job.ar:
            ref, source, ar_jobs = gen, "self", device_jobs
            _store_own_reference(job, ids, gen, device_jobs)
        else:
            ref, source, ar_jobs = ar_reference_entry(job, ids)
        fields.update(ar_source=source, ar_device_jobs=ar_jobs)
        div = first_divergence(gen.tokens, ref.tokens)
        fields.update(lossless=div is None, first_divergence=div)
        ref_t = timing_fields(ref.wall_ms, ref.ttft_ms, len(ref.tokens))
        fields.update(ar_tokens_per_s=ref_t["tokens_per_s"], ar_wall_ms=ref.wall_ms)
    timing = timing_fields(gen.wall_ms, gen.ttft_ms, len(gen.tokens))
    if fields.get("ar_tokens_per_s"):
        fields["speedup"] = timing["tokens_per_s"] / fields["ar_tokens_per_s"]
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
        chat_template=template,
        **timing,
        **fields,
    )
