"""One job's run: a pair × method × task × initial γ, from a composed Hydra config to records on disk.

``run_job(cfg, job_dir)`` validates the job (``runners.jobs.build.prepare``), checks its inputs against
the target (``runners.jobs.inputs``), takes the folder's lock, loads the models (once per process, see
``specbench.models.cache.MODEL_CACHE``), warms up, resets the policy, decodes every prompt and appends one
record per prompt turn to ``records.jsonl`` as soon as it is done (``runners.jobs.record``), and writes
``summary.json`` atomically at the start (``running``) and at the end (``complete``, ``failed`` or
``interrupted``). ``run.py`` calls it through ``runners.jobs.run_one.run_cli_job`` (exit codes, messages).

A job whose summary says ``complete`` is skipped unless ``overwrite=true``; otherwise prompt turns
already in ``records.jsonl`` are not redone. A job folder that holds results of another config
(``specbench.config.config_drift``: a changed default, a setting the folder name does not show)
is refused with a ``ConfigError`` instead of being skipped or mixed.

Around that, for sweeps at scale:

* a multirun job on a node that does not see the sweep's results folder fails at once and writes
  nothing (``runners.jobs.report.check_sweep_folder_visible``; the driver's report lists it);
* one writer per job folder: ``run_job`` takes the folder's lock (``runners.jobs.lock``) before it
  writes anything; a job another live process holds is skipped with one line naming the holder
  (``on_locked=skip``, the default; the returned summary says ``skipped`` and nothing is written) or
  waited for (``on_locked=wait``);
* a bounded model cache: before loading, ``MODEL_CACHE.make_room`` evicts models this job does not
  use when its own would not fit (``model_budget`` or the device's free memory), or fails the job
  at once with their sizes (``specbench.models.cache.ModelCache``);
* the AR reference of ``verify_lossless`` comes from the sweep's on-disk cache when another job
  already decoded it (``runners.jobs.ar_cache``); an AR job's own greedy decodings fill it;
* every record says how many jobs shared its device while it was decoded
  (``runners.jobs.device_share``);
* Ctrl-C once finishes the prompt in flight and stops, twice stops at once (``runners.jobs.interrupt``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from runners.jobs import ar_cache
from runners.jobs.ar_cache import ARCache, Reference
from runners.jobs.build import Job, PreparedJob, prepare, warm_up
from runners.jobs.device_share import DeviceShare
from runners.jobs.inputs import TurnInput, check_inputs, turn_input
from runners.jobs.interrupt import StopAfterCurrentPrompt, stop_sweep
from runners.jobs.lock import JobLock, JobLocked, describe
from runners.jobs.record import Timed, Unit, finished_extra, job_summary, make_record, unit_key
from runners.jobs.report import check_sweep_folder_visible
from runners.jobs.target_alone import measured, warm_ups
from specbench.config import JobConfig
from specbench.job_folders import config_drift, nothing_left_on_bad_config
from specbench.loggers import JobLogger, build_logger
from specbench.models import logits_width
from specbench.record_io import RecordWriter, read_records, write_json_atomic
from specbench.registry import ConfigError

log = logging.getLogger("specbench")


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


def open_job(cfg: Any, job_dir: str | Path, progress: bool = True, batched: bool = True) -> JobRun | dict:
    """Validate a job and take its folder's lock: a ``JobRun`` ready to ``start``, or the summary of a
    job another live process holds (``{"status": "skipped", ...}``; nothing written). A bad config
    raises ``ConfigError`` and leaves no folder behind (unless the folder held results already);
    ``batched=False``: a job with ``batch_size`` > 1 is one (the interleaved launcher's case)."""
    job_dir = Path(job_dir)
    check_sweep_folder_visible()  # a worker without the shared results folder writes nothing
    with nothing_left_on_bad_config(job_dir):
        prepared = prepare(cfg)
        if not batched and prepared.config.batch_size > 1:
            raise ConfigError(f"batch_size={prepared.config.batch_size} runs under the basic, SLURM or Ray "
                              "launchers (hydra/launcher=basic); the interleaved launcher decodes one prompt turn "
                              "per job per round")
    try:
        with nothing_left_on_bad_config(job_dir):
            prepared.positions = check_inputs(prepared.config, prepared.prompts)
    except ConfigError:  # a bad input: refused, its folder gone, no summary
        raise
    except Exception as exc:  # e.g. a model folder whose config.json cannot be read: a failed job, recorded
        failure = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        write_json_atomic(job_dir / "summary.json",
                          job_summary(prepared.config, "failed", read_records(job_dir / "records.jsonl"), failure))
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
            for units in run.batches():
                if stop.requested and any(u.first_of_prompt for u in units):
                    raise KeyboardInterrupt("stopped after the current prompt")
                inps = [run.turn_ids(u) for u in units]  # a later turn after the job's own answer to the earlier one
                for unit, inp, (timed, ref) in zip(units, inps, run.generate(inps), strict=True):
                    run.write(unit, inp, timed, ref)
            if stop.requested:  # the last prompt finished after Ctrl-C: the job is complete, the sweep stops
                stop_sweep()
        return run.finish()


class JobRun:
    """One job opened for decoding (``open_job``): its folder's lock held; ``start`` checks the folder
    (resume, drift), loads and warms up the models; then each batch of ``Unit``s (``batches``: one unit at
    batch size 1) is ``turn_ids`` → ``generate`` (one timed decoding, the job's one path at every batch size) →
    ``write`` (a record per unit); ``finish`` writes the summary. ``run_job`` drives one job batch after
    batch; the interleaved launcher (``runners.jobs.interleave``) drives many, one unit of each per round. Used as a context manager it records a failure or an interruption in ``summary.json``, closes
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
        self._next_batch = 0  # the index of the job's next batch decoding (batch size > 1)
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
        self.done = {unit_key(r): r for r in read_records(self.records_path)}
        if config.batch_size > 1:
            from runners.jobs.batch import drop_partial_batches

            cut = drop_partial_batches(self.done)
            if cut:
                log.warning("%s: %d record(s) of a batch an interruption cut short dropped; that batch is decoded "
                            "again, whole", self.job_dir, len(cut))
            # each batch decoding its own number, after those already in the folder (a resumed batch's missing
            # rows, or the batches of more repeats, are new decodings: never merged with an earlier one)
            self._next_batch = 1 + max((int(r["batch_index"]) for r in self.done.values()
                                        if r.get("batch_index") is not None), default=-1)
        if not config.overwrite and is_complete(self.job_dir) and not any(not self.is_done(u) for u in self.units()):
            log.info("job %s is complete; skipped (overwrite=true to redo)", self.job_dir)
            self.summary = json.loads((self.job_dir / "summary.json").read_text())
            return self.summary
        if self.done:
            _rewrite_whole_lines(self.records_path, list(self.done.values()))
        for r in sorted(self.done.values(), key=lambda r: r["turn"]):
            if not r.get("repeat"):
                self.answers.setdefault(r["prompt_id"], []).append(r["output_text"])
        write_json_atomic(self.job_dir / "summary.json", job_summary(config, "running", list(self.done.values())))
        self.began = True
        self.logger = build_logger(config.logger)
        self.logger.start(config.as_dict(), job_name=self.job_dir.name)
        for record in self.done.values():  # on resume, so the logged table is complete
            self.logger.log_record(record)
        if config.threads:
            torch.set_num_threads(config.threads)
        t_load = time.perf_counter()
        job = self.job = Job(self.prepared, sweep_dir=self.job_dir.parent)  # kernel choices shared by the sweep
        job.name = self.job_dir.name
        self.load_s = time.perf_counter() - t_load
        if config.verify_lossless and config.greedy:
            job.ar_cache = ARCache(self.job_dir.parent)  # the sweep's folder (results_dir under Hydra)
        if share is None:
            job.share = self._stack.enter_context(DeviceShare(self.job_dir.parent, self.job_dir.name, job.devices()))
        else:
            job.share = share(job.devices())
        if config.host_probe and job.target is not None:  # a server backend's target lives in its own process
            from runners.jobs.probe import HostProbe

            self.probe = HostProbe(job.target, logits_width(job.target))
        warm_up(job, self.prepared.prompts)
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

    def batches(self) -> list[list[Unit]]:
        """The units still to decode, batch by batch in decoding order: one unit each at batch size 1, else
        ``runners.jobs.batch.batches`` (a batch an interruption cut short is decoded again whole)."""
        if self.config.batch_size == 1:
            return [[u] for u in self.units() if not self.is_done(u)]
        from runners.jobs.batch import batches

        todo = [[u for u in batch if not self.is_done(u)] for batch in batches(self.units(), self.config.batch_size)]
        return [batch for batch in todo if batch]

    def generate(self, inps: list[TurnInput], reference: bool = True) -> list[tuple[Timed, Reference | None]]:
        """One timed decoding of a batch of prompt turns (one at batch size 1; ``runners.engine.contract``), after
        its untimed ``warmup_per_prompt`` decodes and the host probe, and each row's ``Timed`` with its reference:
        itself for an ``ar`` job of our loop; at batch size > 1 with greedy ``verify_lossless`` the paired AR batch,
        with its own untimed warm-ups, decoded right after the timed batch (even batch index) or right before it
        (odd), and each row also against the target alone at batch 1 (untimed, last; ``runners.jobs.batch``); at
        batch size 1 the AR cache's reference (``reference``; ``ar_cache.reference``: memoised, from the sweep's
        cache, or decoded here after the timed decode), or None when the caller brings its own (the interleaved
        launcher's paired decode)."""
        job, config = self.job, self.config
        assert job is not None, "start() first"
        job.activate()  # its cache kinds: another job of the process may have set its own on the same models
        prompts = [inp.ids for inp in inps]
        batched = config.batch_size > 1
        verified = config.verify_lossless and config.greedy
        paired = batched and verified and not job.own_reference  # the target alone decodes the same batch
        index = self._next_batch if batched else None
        alone = job.target_alone  # every decode of the baseline goes through it (runners.jobs.target_alone)
        untimed = [lambda k: job.untimed(prompts, config.max_new_tokens, config.seed + 1 + k)]  # hf-bench's
        if paired:  # the baseline's own untimed decodes of the batch
            untimed.append(lambda k: alone.untimed(prompts))
        warm_ups(config.warmup_per_prompt, *untimed)
        probe_ms = self.probe() if self.probe is not None else None
        ar_first = paired and index is not None and index % 2 == 1  # the order alternates batch by batch
        ar = alone.timed(prompts).value if ar_first else None
        timed = measured(job.share, lambda: job.runner.generate(prompts, config.max_new_tokens,
                                                                job.generator(config.seed)))
        if paired and not ar_first:
            ar = alone.timed(prompts).value
        gen, jobs, neighbours = timed.value, timed.device_jobs, timed.neighbours
        if not batched:
            row = gen.rows[0]
            if verified and job.own_reference:
                ref: Reference | None = Reference(row, "self", jobs)
            else:
                ref = self.reference(prompts[0]) if reference else None
            return [(Timed(row, probe_ms, jobs, neighbours), ref)]
        from runners.jobs.batch import alone_fields, alone_tokens, batch_fields, references

        assert index is not None
        self._next_batch += 1
        refs = references(gen, ar, index, job.own_reference) if verified else [None] * len(prompts)
        fields = [batch_fields(config, index, gen, i, gen if job.own_reference else ar) for i in range(len(gen.rows))]
        if paired:  # each row against the target alone at batch 1, untimed, after the timed decodes
            for row_fields, g, ids in zip(fields, gen.rows, prompts, strict=True):
                row_fields.update(alone_fields(g.tokens, alone_tokens(job, ids, job.generator(config.seed))))
        return [(Timed(g, probe_ms, jobs, neighbours, row_fields), ref)
                for g, ref, row_fields in zip(gen.rows, refs, fields, strict=True)]

    def needs_reference(self) -> bool:
        """Whether records compare with the target alone (greedy ``verify_lossless``, not an AR job)."""
        job = self.job
        return bool(self.config.verify_lossless and self.config.greedy and job is not None and not job.own_reference)

    def reference(self, ids: list[int]) -> Reference | None:
        """The sequential launchers' reference: memoised, from the sweep's cache, or decoded here."""
        if not self.needs_reference():
            return None
        return ar_cache.reference(self.job, ids)

    def write(self, unit: Unit, inp: TurnInput, timed: Timed, reference: Reference | None,
              interleave: Mapping[str, Any] | None = None) -> dict:
        """The unit's record, appended to ``records.jsonl`` at once (crash-safe), logged and counted; then, for an
        ``ar`` job at batch size 1, its decoding stored as the reference other jobs of the sweep need
        (``ar_cache.store_own_reference``)."""
        assert self.job is not None and self._writer is not None
        made = make_record(self.job, unit, inp, timed, reference, interleave)
        self._writer.write(made)
        if reference is not None and reference.source == "self" and self.config.batch_size == 1:
            ar_cache.store_own_reference(self.job, inp.ids, timed.gen, reference.device_jobs)
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
    def finish(self, extra: dict | None = None) -> dict:
        """The job's summary (``complete``), written atomically; ``extra``: what the launcher adds (the interleaved
        launcher: its rounds and whether their positions were balanced)."""
        job = self.job
        assert job is not None
        records = read_records(self.records_path)
        self.summary = job_summary(self.config, "complete", records,
                                   {**finished_extra(job, records, self.load_s), **(extra or {})})
        write_json_atomic(self.job_dir / "summary.json", self.summary)
        if self.logger is not None:
            self.logger.finish(self.summary, failed=False)
            self.logger = None
        return self.summary

    def failed(self, exc: BaseException) -> dict:
        self.summary = job_summary(self.config, "failed", read_records(self.records_path),
                                {"error": f"{type(exc).__name__}: {exc}",
                                 "traceback": "".join(traceback.format_exception(exc))})
        if not self.lock.lost:
            write_json_atomic(self.job_dir / "summary.json", self.summary)
        return self.summary

    def interrupted(self) -> dict:
        self.summary = job_summary(self.config, "interrupted", read_records(self.records_path))
        write_json_atomic(self.job_dir / "summary.json", self.summary)
        return self.summary

    def close(self) -> None:
        """Close the writer, the progress bar and the device registration; finish the logger; release the
        lock. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.job is not None:
                self.job.close()  # a server backend's processes first: nothing left running, whatever follows
            self._stack.close()
            if self.logger is not None:
                self.logger.finish(self.summary or {"status": "failed"}, failed=True)
                self.logger = None
        finally:
            self.lock.release()


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
