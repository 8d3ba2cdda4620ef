"""Interleaved execution: the jobs of a sweep decode prompt turn by prompt turn, side by side in time.

A host whose speed drifts (±25 % within the hour a sweep takes on our CPU machine) turns a sweep run
job after job into a comparison of minutes: each job is timed in its own block of time. Here the
sweep's jobs are opened together in one process (their models loaded once per pair, through
``specbench.models.cache.MODEL_CACHE``) and decoded in *rounds*: round ``r`` decodes the ``r``-th unit
(prompt, turn, repeat; ``runners.jobs.record.Unit``) of every job, in an order that balances the
positions across rounds (below; recorded in each record's ``interleave`` and in
``<sweep>/.specbench/interleave.jsonl``), before the next round starts. A drift then hits every job of a
round alike instead of one job's block.

Order: the decodes of a round are *slots* with names that do not change from round to round (a job's folder
name, ``ar/<job>`` for a paired AR decode), run in ``runners.jobs.round_order.round_order``'s order (scheme
``balanced`` by default: pairs of mirrored rotations, every slot at every position equally often; that module's
docstring says what each scheme guarantees and why it changed). The row of a round in ``interleave.jsonl`` has
its ``scheme``, ``seed`` (the block's), ``shift``, ``reversed``, the ``slots`` and the ``order`` it ran in (job
names and ``ar:<key hash>``); each record's ``interleave`` has ``round``, ``position``, ``size``, ``seed`` and
``scheme``.

Warm-up: before the timed decodes of a round, one untimed decode of its prompt turn by the target
alone (``untimed_target``): the input and job of the round's first paired AR decode, or, in a round
without one, of its first job in the sweep's order; the job's target alone at batch 1
(``job.target_alone.untimed_row``) with ``max_new_tokens`` of that job. It brings the round's new shapes (prompt length, KV cache) and caches
in before anything is timed. It touches no policy (the target alone has none) and writes no record, no
AR cache entry and no ``ar_paired.jsonl`` row; the round's row says what it decoded (``warmed``: job,
prompt turn, input and new tokens, its wall time, or the error that stopped it: a failed warm-up is
logged and the round goes on).

Per-call costs (``costs``, ``hydra.launcher.costs``; on by default): after the warm-up, still untimed for the
records, the round's prompt turn is used to time the pair's forwards on the job's kernels and threads — the
target's prefill and its forwards of ``k = 1 .. γ_max + 1`` tokens, a same-vocabulary draft's prefill and short
forwards — into ``<sweep>/.specbench/costs.jsonl`` (``runners.jobs.sweep_costs``): what the analysis' modeled
speedups charge each record's own rounds with (``analysis.modeled``). A failure there is logged; the round goes on.

Paired baselines: when records compare with the target alone (greedy ``verify_lossless``), the
target's own decoding of each round's prompt turn is one more decode (a slot) inside the same round,
and every record of the round divides by it (``ar_source: paired``, ``ar_decode: <key hash>@<round>``;
its row, with its own host probe, in ``<sweep>/.specbench/ar_paired.jsonl``). It is also written to
the sweep's AR cache (``runners.jobs.ar_cache``) when the cache has no entry for it yet.

Jobs of different pairs run pair by pair (the pairs in the order the sweep lists them). Each job
keeps its own folder, records, summary and lock (``runners.jobs.job.JobRun``): resume, the folder
lock, ``overwrite``, and the bad-input checks behave as under the basic launcher; a job that fails is
recorded as failed and the others go on; policy state never leaks, since each job has its own
policy and runner (the models are shared, and hold no state between generations). Ctrl-C once
finishes the round in flight (its records written) and stops; twice stops at once.

The Hydra side (``hydra/launcher=interleaved``) is ``runners.jobs.launcher``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.engine.base import Generation
from runners.jobs.ar_cache import Reference, job_reference_key, key_hash, store_reference
from runners.jobs.build import Job
from runners.jobs.device_share import DeviceShare
from runners.jobs.inputs import TurnInput
from runners.jobs.interrupt import StopAfterCurrentPrompt
from runners.jobs.job import JobRun, open_job
from runners.jobs.record import Timed, Unit
from runners.jobs.report import INVALID_JOBS, append_line, print_job_line
from runners.jobs.round_order import SCHEMES, round_order, round_seed
from runners.jobs.sweep_costs import COSTS_FILE, round_rows, time_round, widths_for
from specbench.drafter_kinds import draft_cost
from specbench.records import positions_balanced
from specbench.registry import ConfigError

log = logging.getLogger("specbench")

STATE_DIR = Path(".specbench")
ORDER_FILE = STATE_DIR / "interleave.jsonl"  # one row per round: its seed and the order it ran in
PAIRED_FILE = STATE_DIR / "ar_paired.jsonl"  # one row per paired AR decode


def untimed_target(job: Job, ids: list[int]) -> Generation:
    """A round's warm-up (module docstring): the target alone on ``ids``, untimed, at batch 1 (``TargetAlone``)
    with a generator of its own (nothing of the job's random state is drawn on); it has no policy and writes
    nothing."""
    return job.target_alone.untimed_row(ids, job.generator(job.config.seed))


@dataclass
class Outcome:
    """What happened to one job of the sweep: ``status`` (``complete`` | ``failed`` | ``interrupted`` |
    ``skipped`` | ``invalid``), its summary when it has one, and the error of a failed or invalid job."""

    job_dir: Path
    status: str
    summary: dict | None = None
    error: BaseException | None = None


@dataclass
class _Item:
    """One decode of a round: a job's unit, or the paired AR decode of a prompt turn (``run`` decodes it)."""

    run: JobRun
    unit: Unit
    inp: TurnInput
    ar_digest: str | None = None  # set for a paired AR decode: its reference key's hash
    ar_key: dict[str, Any] | None = None  # ... and the key itself (``runners.jobs.ar_cache.reference_key``)
    waits_for: str | None = None  # a job's decode: the digest of the AR decode it divides by

    @property
    def name(self) -> str:
        return f"ar:{self.ar_digest[:16]}" if self.ar_digest else self.run.job_dir.name

    @property
    def slot(self) -> str:
        """The name the order is drawn over (the same in every round): the job's folder name, or
        ``ar/<job>`` for the paired AR decode of the first job that divides by it."""
        return f"ar/{self.run.job_dir.name}" if self.ar_digest else self.run.job_dir.name


@dataclass
class _Shares:
    """One device registration for the whole interleaved process (its jobs decode one at a time)."""

    results_dir: Path
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    shares: dict[tuple[str, ...], DeviceShare] = field(default_factory=dict)

    def __call__(self, devices: Iterable[str]) -> DeviceShare:
        key = tuple(sorted(devices))
        if key not in self.shares:
            import os

            name = f"interleaved-{os.getpid()}-{len(self.shares)}"
            self.shares[key] = self.stack.enter_context(DeviceShare(self.results_dir, name, key))
        return self.shares[key]


class InterleavedSweep:
    """Runs ``jobs`` (``(config, job folder)`` pairs, as Hydra composed them) interleaved (module
    docstring); ``run()`` returns one ``Outcome`` per job, in the given order."""

    def __init__(self, jobs: Sequence[tuple[Any, str | Path]], sweep_dir: str | Path, seed: int = 0,
                 progress: bool = True, multirun: bool = True, scheme: str = "balanced", costs: bool = True) -> None:
        if scheme not in SCHEMES:
            raise ValueError(f"interleave scheme must be one of {SCHEMES}, got {scheme!r}")
        self.jobs = [(cfg, Path(d)) for cfg, d in jobs]
        self.sweep_dir = Path(sweep_dir)
        self.seed = int(seed)
        self.scheme = scheme
        self.progress = progress
        self.multirun = multirun
        self.costs = costs  # time the per-call costs in every round (runners.jobs.sweep_costs)
        self._widths: dict[str, list[int]] = {}
        self.outcomes: dict[Path, Outcome] = {}

    # ------------------------------------------------------------------ the sweep
    def run(self) -> list[Outcome]:
        runs: list[JobRun] = []
        for cfg, job_dir in self.jobs:
            run = self._open(cfg, job_dir)
            if run is not None:
                runs.append(run)
        groups: dict[str, list[JobRun]] = {}
        for run in runs:
            groups.setdefault(run.config.pair.name, []).append(run)
        shares = _Shares(self.sweep_dir)
        try:
            with shares.stack, StopAfterCurrentPrompt() as stop:
                for pair, group in groups.items():
                    if stop.requested:
                        raise KeyboardInterrupt("stopped after the current round")
                    self._run_group(pair, group, shares, stop)
        except KeyboardInterrupt:
            for run in runs:
                if run.job_dir not in self.outcomes:
                    if run.began and run.summary is None:
                        run.interrupted()
                    self.outcomes[run.job_dir] = Outcome(run.job_dir, "interrupted", run.summary)
            raise
        finally:
            for run in runs:  # every lock released, every writer closed, whatever happened
                run.close()
        return [self.outcomes[d] for _, d in self.jobs]

    def _open(self, cfg: Any, job_dir: Path) -> JobRun | None:
        """``open_job`` with ``run_cli_job``'s handling: a bad config is listed in the sweep's
        ``invalid_jobs.jsonl`` (no folder); a job another process holds is skipped."""
        try:
            opened = open_job(cfg, job_dir, progress=False, batched=False)
        except ConfigError as exc:
            log.error("configuration error: %s", exc)
            if self.multirun:
                append_line(job_dir.parent / INVALID_JOBS, {"job": job_dir.name, "error": str(exc), "time": time.time()})
            self.outcomes[job_dir] = Outcome(job_dir, "invalid", error=exc)
            return None
        except Exception as exc:  # crash isolation: recorded in the job's summary.json
            log.exception("job failed: %s (details in %s/summary.json)", exc, job_dir)
            self.outcomes[job_dir] = Outcome(job_dir, "failed", error=exc)
            return None
        if not isinstance(opened, JobRun):
            print_job_line(job_dir, opened)
            self.outcomes[job_dir] = Outcome(job_dir, str(opened.get("status")), opened)
            return None
        return opened

    def _fail(self, run: JobRun, exc: BaseException) -> None:
        log.error("job failed: %s: %s (details in %s/summary.json)", type(exc).__name__, exc, run.job_dir)
        log.debug("%s", "".join(traceback.format_exception(exc)))
        if run.began:
            run.failed(exc)
        run.close()
        self.outcomes[run.job_dir] = Outcome(run.job_dir, "failed", run.summary, exc)

    def _run_group(self, pair: str, group: list[JobRun], shares: _Shares, stop: StopAfterCurrentPrompt) -> None:
        """Start a pair's jobs (models loaded once), decode them round by round, and finish them."""
        live: list[JobRun] = []
        for run in group:
            try:
                summary = run.start(share=shares)
            except Exception as exc:
                self._fail(run, exc)
                continue
            if summary is not None:  # complete already
                run.close()
                print_job_line(run.job_dir, summary)
                self.outcomes[run.job_dir] = Outcome(run.job_dir, "complete", summary)
                continue
            live.append(run)
        if not live:
            return
        try:
            self._widths[pair] = widths_for([run.job for run in live if run.job is not None])
        except Exception as exc:  # the costs are no measurement of any job: never a reason to stop the sweep
            log.warning("the widths to time the per-call costs at are unknown (%s: %s); k = 1 only", type(exc).__name__, exc)
            self._widths[pair] = [1]
        units = {id(run): run.units() for run in live}
        n_rounds = max(len(u) for u in units.values())
        balance = {"scheme": self.scheme, "rounds": n_rounds,
                   "positions_balanced": positions_balanced(self.scheme, n_rounds)}
        if self.scheme == "balanced" and not balance["positions_balanced"]:
            log.warning("%s: %d rounds (an odd count): the balanced order mirrors rounds in pairs, so the last round's "
                        "positions are unmirrored and every slot's mean position is not the middle; an even number of "
                        "prompt turns × repeats balances them exactly (the jobs' summaries say so: interleave)",
                        pair, n_rounds)
        from tqdm.auto import tqdm

        total = sum(1 for run in live for u in units[id(run)] if not run.is_done(u))
        with contextlib.ExitStack() as stack:
            bar = stack.enter_context(tqdm(total=total, desc=f"interleaved {pair} ({len(live)} jobs)", unit="decode",
                                           disable=not self.progress))
            for r in range(n_rounds):
                if stop.requested:
                    raise KeyboardInterrupt("stopped after the current round")
                todo = [(run, units[id(run)][r]) for run in live
                        if r < len(units[id(run)]) and not run.is_done(units[id(run)][r])]
                if todo:
                    self._round(pair, r, todo, live, bar)
        for run in live:
            if run.job_dir in self.outcomes:
                continue  # failed during a round
            try:
                summary = run.finish({"interleave": balance})
            except Exception as exc:
                self._fail(run, exc)
                continue
            run.close()
            print_job_line(run.job_dir, summary)
            self.outcomes[run.job_dir] = Outcome(run.job_dir, "complete", summary)

    def _round(self, pair: str, r: int, todo: list[tuple[JobRun, Unit]], live: list[JobRun], bar: Any) -> None:
        """One round: the untimed warm-up, then each job's unit and one paired AR decode per distinct reference,
        in the order ``runners.jobs.round_order.round_order`` gives."""
        items: list[_Item] = []
        refs: dict[str, _Item] = {}
        for run, unit in todo:
            try:
                inp = run.turn_ids(unit)
            except Exception as exc:
                self._fail(run, exc)
                live.remove(run)
                continue
            item = _Item(run, unit, inp)
            if run.needs_reference():
                key = job_reference_key(run.job, inp.ids)
                digest = key_hash(key)
                item.waits_for = digest
                if digest not in refs:
                    refs[digest] = _Item(run, unit, inp, ar_digest=digest, ar_key=key)
            items.append(item)
        slots = items + list(refs.values())  # jobs in the sweep's order (round_order's ties), then the AR decodes
        plan = round_order([it.slot for it in slots], self.seed, pair, r, self.scheme)
        order = [slots[i] for i in plan.order]
        warmed = self._warm_up(list(refs.values()) + items) if slots else None
        if self.costs and items:
            self._time_costs(pair, r, items)
        append_line(self.sweep_dir / ORDER_FILE, {
            "pair": pair, "round": r, "scheme": plan.scheme, "seed": plan.seed, "shift": plan.shift,
            "reversed": plan.reversed, "slots": [it.slot for it in order], "order": [it.name for it in order], "warmed": warmed,
            "time": time.time()})
        references: dict[str, Reference] = {}
        pending: list[tuple[_Item, tuple[Timed, Reference | None], dict[str, Any]]] = []
        failed_refs: dict[str, BaseException] = {}
        for position, item in enumerate(order):
            where = {"round": r, "position": position, "size": len(order), "seed": plan.seed, "scheme": plan.scheme}
            if item.ar_digest is not None:
                try:
                    references[item.ar_digest] = self._paired_ar(item, pair, where)
                except Exception as exc:
                    failed_refs[item.ar_digest] = exc
            elif item.run.job_dir not in self.outcomes:
                try:
                    # the job's one generate path, a batch of one; its reference is the round's paired decode
                    # (or itself, an ``ar`` job)
                    pending.append((item, item.run.generate([item.inp], reference=False)[0], where))
                except Exception as exc:
                    self._fail(item.run, exc)
                    live.remove(item.run)
            pending = self._write_ready(pending, references, failed_refs, live)
            bar.update(0 if item.ar_digest else 1)
        assert not pending, "every decode of a round is written by its end"

    def _warm_up(self, candidates: list[_Item]) -> dict[str, Any]:
        """The round's untimed decode (module docstring, "Warm-up") on the first candidate's input: what it
        decoded, for the round's row (a failure is logged there and the round goes on)."""
        item = candidates[0]
        job = item.run.job
        assert job is not None
        warmed: dict[str, Any] = {"decode": "target", "job": item.run.job_dir.name,
                                  "prompt_id": item.unit.prompt.prompt_id, "turn": item.unit.turn,
                                  "repeat": item.unit.repeat, "input_tokens": len(item.inp.ids),
                                  "max_new_tokens": item.run.config.max_new_tokens}
        try:
            job.activate()  # the job's cache kinds (another job of the sweep may share its models)
            gen = untimed_target(job, item.inp.ids)
        except Exception as exc:  # not a measurement: the round's decodes still run (and fail on their own)
            log.warning("untimed warm-up of a round failed: %s: %s", type(exc).__name__, exc)
            warmed["error"] = f"{type(exc).__name__}: {exc}"
            return warmed
        warmed.update(new_tokens=len(gen.tokens), wall_ms=gen.wall_ms)
        return warmed

    def _time_costs(self, pair: str, r: int, items: list[_Item]) -> None:
        """The round's per-call costs (``runners.jobs.sweep_costs``) on the input of its first job whose drafter
        the analysis models (a same-vocabulary draft model, prompt lookup), else of its first job; untimed for
        the records, after the warm-up. A failure is logged and the round goes on (the analysis then has fewer
        samples)."""
        items = [it for it in items if it.run.job is not None and it.run.job.target is not None]  # ours: in process
        if not items:  # a round of server backends only: their forwards are not ours to time
            return
        try:
            item = next((it for it in items if it.run.config.drafter is not None  # a drafter the analysis models
                         and draft_cost(it.run.config.drafter) is not None), items[0])
            job = item.run.job
            job.activate()
            samples = time_round(job, item.inp.ids, self._widths.get(pair) or [1], seed=round_seed(self.seed, pair, r))
            rows = round_rows(job, pair, r, samples)
        except Exception as exc:  # not a measurement of any job: the round's decodes still run
            log.warning("timing the round's per-call costs failed: %s: %s", type(exc).__name__, exc)
            return
        for row in rows:
            append_line(self.sweep_dir / COSTS_FILE, row)

    def _write_ready(self, pending: list[tuple[_Item, tuple[Timed, Reference | None], dict[str, Any]]],
                     references: dict[str, Reference], failed_refs: dict[str, BaseException],
                     live: list[JobRun]) -> list[tuple[_Item, tuple[Timed, Reference | None], dict]]:
        """Write the records whose paired reference is decoded (at once: a crash loses at most a round)."""
        left = []
        for item, (timed, own), where in pending:
            digest = item.waits_for
            if digest is not None and digest in failed_refs:
                self._fail(item.run, RuntimeError(f"the paired AR decode failed: {failed_refs[digest]}"))
                live.remove(item.run)
                continue
            if digest is not None and digest not in references:
                left.append((item, (timed, own), where))
                continue
            try:
                item.run.write(item.unit, item.inp, timed, references[digest] if digest else own, where)
            except Exception as exc:
                self._fail(item.run, exc)
                live.remove(item.run)
        return left

    def _paired_ar(self, item: _Item, pair: str, where: dict[str, Any]) -> Reference:
        """The target alone on the item's prompt turn, timed now (after its own host probe): the job's
        ``TargetAlone.reference`` (its baseline kernels, after its per-prompt warm-ups, in the one bracket)."""
        run, job = item.run, item.run.job
        assert job is not None and item.ar_digest is not None
        job.activate()
        probe_ms = run.probe() if run.probe is not None else None
        decoded = job.target_alone.reference(item.inp.ids, job.share)
        gen, device_jobs, fastest = decoded.value, decoded.device_jobs, decoded.fastest
        decode_id = f"{item.ar_digest[:16]}@{where['round']}"
        row = {"ar_decode": decode_id, "key": item.ar_digest, "pair": pair, "target": run.config.pair.target.label,
               "prompt_id": item.unit.prompt.prompt_id, "turn": item.unit.turn, "repeat": item.unit.repeat,
               "new_tokens": len(gen.tokens), "ttft_ms": gen.ttft_ms, "wall_ms": gen.wall_ms,
               "host_probe_ms": probe_ms, "device_jobs": device_jobs, "interleave": where, "time": time.time()}
        if fastest is not None:  # a width's reference: the plain step's decode beside it
            row["fastest"] = {"new_tokens": len(fastest.tokens), "wall_ms": fastest.wall_ms}
        append_line(self.sweep_dir / PAIRED_FILE, row)
        if item.ar_key is not None:
            store_reference(job, item.ar_key, gen, device_jobs, fastest)
        return Reference(gen, "paired", device_jobs, decode_id, fastest)


def read_order(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """The rounds of an interleaved sweep (``interleave.jsonl``), in the order they ran."""
    path = Path(sweep_dir) / ORDER_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
