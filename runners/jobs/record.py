"""What a job writes: one ``Record`` per timed generation (``make_record``) and its ``summary.json``
(``job_summary``, with the drift, engine and cross-vocabulary parts).

Every figure's definition is in ``specbench.records``; this module only gathers a unit's timed
generation (``Timed``), its input (``runners.jobs.inputs.TurnInput``) and its AR reference
(``runners.jobs.ar_cache.Reference``) into those fields, with the method's identity as it ran
(``Job.method_key``, from ``specbench.config.method.method_key``: what ``analysis`` keys the record by). Every record says how many jobs shared its
device while it was decoded (``runners.jobs.device_share``) and, for greedy ``verify_lossless``,
whether it equals the target's own decoding and where that decoding came from (``ar_source``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runners.engine.base import Generation
from runners.jobs.ar_cache import Reference
from runners.jobs.build import Job
from runners.jobs.inputs import TurnInput
from runners.jobs.predict import predicted_wall
from specbench.config import JobConfig
from specbench.drafter_kinds import drafter_kind
from specbench.models.cache import MODEL_CACHE
from specbench.models.hot_vocab import coverage
from specbench.provenance import provenance
from specbench.records import (
    Record,
    breakdown_fields,
    first_divergence,
    hfbench_fields,
    sha256_text,
    timing_fields,
)
from specbench.summary import aggregate
from specbench.tasks import Prompt


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


def unit_key(record: Mapping[str, Any]) -> tuple[str, int, int]:
    """The ``Unit.key`` a written record belongs to."""
    return (record["prompt_id"], record["turn"], int(record.get("repeat") or 0))


@dataclass
class Timed:
    """A unit's timed generation, the host probe taken right before it, and the device's sharing."""

    gen: Generation
    probe_ms: float | None
    device_jobs: int | None = None
    neighbours: list[str] | None = None
    batch: dict[str, Any] | None = None  # batch_size > 1: the batch's fields (``runners.jobs.batch``)


def fastest_fields(reference: Reference | None, tokens_per_s: float | None) -> dict[str, Any]:
    """Under a width: the plain step's target alone timed beside the reference (``TargetAlone.fastest``) and the
    speedup over it; nothing otherwise."""
    fastest = reference.fastest if reference is not None else None
    if fastest is None or not fastest.wall_ms:
        return {}
    rate = len(fastest.tokens) / (fastest.wall_ms / 1000.0)
    return {"ar_fastest_wall_ms": fastest.wall_ms, "ar_fastest_tokens": len(fastest.tokens),
            "ar_fastest_same": list(fastest.tokens) == list(reference.gen.tokens),
            "speedup_fastest": tokens_per_s / rate if tokens_per_s and rate else None}


def make_record(job: Job, unit: Unit, inp: TurnInput, timed: Timed, reference: Reference | None,
                interleave: Mapping[str, Any] | None = None) -> Record:
    """A unit's ``Record`` from its timed generation and its reference (definitions: ``specbench.records``)."""
    config, prompt, turn, gen, ids = job.config, unit.prompt, unit.turn, timed.gen, inp.ids
    fields: dict[str, Any] = {"output_ids": list(gen.tokens), "repeat": unit.repeat, "host_probe_ms": timed.probe_ms,
                              "interleave": dict(interleave) if interleave is not None else None,
                              **(timed.batch or {})}
    device_jobs = timed.device_jobs
    if device_jobs is not None:
        fields.update(device_id=job.share.device_id, device_jobs=device_jobs,
                      device_neighbours=list(timed.neighbours or []))
    if gen.speculative:
        fields.update(gen.rounds.fields())
        fields["draft_forwards"] = gen.draft_forwards
        if config.hetero_rule is not None and drafter_kind(config.hetero_rule).fallback is not None:
            fields["fallback_rounds"] = gen.fallback_rounds
    extra: dict[str, Any] = {"truncated_tokens": inp.dropped, "truncated": config.task.truncate} if inp.dropped else {}
    if job.shared_target is not None:
        extra["output_tokens_shared"] = sum(
            1 for t in gen.tokens if t < job.shared_target.numel() and bool(job.shared_target[t]))
    if config.verify_lossless and config.greedy:
        assert reference is not None, "a verified job's record needs its reference (itself for an ar job)"
        fields.update(ar_source=reference.source, ar_device_jobs=reference.device_jobs, ar_decode=reference.decode_id,
                      ar_baseline=job.target_alone.describe())
        ref = reference.gen
        div = first_divergence(gen.tokens, ref.tokens)
        fields.update(lossless=div is None, first_divergence=div)
        ref_t = timing_fields(ref.wall_ms, ref.ttft_ms, len(ref.tokens))
        fields.update(ar_tokens_per_s=ref_t["tokens_per_s"], ar_wall_ms=ref.wall_ms)
    timing = timing_fields(gen.wall_ms, gen.ttft_ms, len(gen.tokens))
    predicted = None if timed.batch else predicted_wall(  # a batched round's cost: runners.replay
        job.latency, config, bool(getattr(job.loop, "fused_prefill", False)), len(ids), gen)
    timing.update(breakdown_fields(gen.phase_ms), predicted_wall_ms=predicted)
    if fields.get("ar_tokens_per_s"):
        fields["speedup"] = timing["tokens_per_s"] / fields["ar_tokens_per_s"]
        fields.update(fastest_fields(reference, timing["tokens_per_s"]))
    stream_ttft = gen.first_round_ms if gen.speculative and gen.first_round_ms is not None else gen.ttft_ms
    fields.update(hfbench_fields(gen.wall_ms, stream_ttft, len(gen.tokens)))
    fields.update(job.vocab_facts, kernels=engine_summary(job), backend=config.backend.name)
    if job.backend_info is not None:
        fields["backend_info"] = {**job.backend_info, "stream_missing": getattr(job.loop, "last_missing", 0)}
    if job.hot_tokens is not None and config.speculative:
        fields["hot_coverage"] = coverage(gen.tokens, job.hot_tokens)
    output_text = job.tokenizer.decode(gen.tokens, skip_special_tokens=True)
    fmt = inp.prompt_format
    pair = config.pair
    return Record(
        pair=pair.name,
        target=pair.target.label,
        draft=pair.draft.name if pair.draft is not None and config.speculative else None,
        method=config.method.name,
        hetero=config.hetero_rule,
        task=job.task_facts.label if job.task_facts is not None else config.task.name,
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
        method_key=job.method_key,
        method_display=job.method_display,
        hetero_display=job.hetero_display,
        ar_cache=config.method.ar_cache,
        top_k=job.sampling.top_k,
        top_p=job.sampling.top_p,
        typical_p=job.sampling.typical_p,
        extra=extra,
        **timing,
        **fields,
    )


# --------------------------------------------------------------------------- summary.json

def job_summary(config: JobConfig, status: str, records: list[dict], extra: Mapping[str, Any] | None = None) -> dict:
    """``summary.json``: the status, the config, provenance, the records' aggregates, the model cache's
    counters, and ``extra`` (what a finished job adds: ``finished_extra``; a failure's error)."""
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


def finished_extra(job: Job, records: list[dict], load_s: float) -> dict[str, Any]:
    """What a complete job's summary adds: load time, the policy's final state, the latency model and
    engine options it ran with, repeats, the host-probe drift, and (cross-vocabulary) ``hetero``."""
    extra = {"load_s": load_s, "policy_state": job.policy.state() if job.policy else None,
             "latency_model": job.latency_path, "engine": engine_summary(job), "baseline": job.target_alone.describe(),
             "repeats": job.config.repeats, "drift": drift_summary(records), "batch": batch_summary(records),
             "task": job.task_facts.to_json() if job.task_facts is not None else None,
             "backend": job.backend_info or {"name": job.config.backend.name}}
    hetero = hetero_summary(job, records)
    if hetero is not None:
        extra["hetero"] = hetero
    return extra


def drift_summary(records: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The job's host-probe spread (``summary.json: drift``): median, min, max and max/min of
    ``host_probe_ms`` over its records; None without probes."""
    probes = sorted(r["host_probe_ms"] for r in records if r.get("host_probe_ms") is not None)
    if not probes:
        return None
    return {"host_probe_ms_median": statistics.median(probes), "host_probe_ms_min": probes[0],
            "host_probe_ms_max": probes[-1],
            "max_over_min": probes[-1] / probes[0] if probes[0] > 0 else None, "n": len(probes)}


def batch_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``summary.json: batch`` (``batch_size`` > 1; ``runners.jobs.batch``): the batch's throughput (tokens over
    all rows ÷ the batches' wall time), the paired AR's, their ratio, the rows' mean latency; None at batch 1."""
    rows = [r for r in records if (r.get("batch_size") or 1) > 1]
    if not rows:
        return None
    per_batch: dict[int, Mapping[str, Any]] = {}
    for r in rows:  # batch_index names one batch decoding (runners.jobs.batch)
        per_batch.setdefault(int(r["batch_index"]), r)
    wall = sum(b["batch_wall_ms"] for b in per_batch.values())
    tokens = sum(b["batch_tokens"] for b in per_batch.values())
    ar_walls = [b.get("ar_batch_wall_ms") for b in per_batch.values()]
    ar_wall = sum(ar_walls) if all(w is not None for w in ar_walls) else None
    # the AR side counts its own rows' tokens (records before ``ar_batch_tokens``: the rows', as then)
    ar_tokens = sum(b.get("ar_batch_tokens") or b["batch_tokens"] for b in per_batch.values())
    tps = tokens / (wall / 1000.0) if wall else None
    ar_tps = ar_tokens / (ar_wall / 1000.0) if ar_wall else None
    return {"batch_size": rows[0]["batch_size"], "gamma_mode": rows[0].get("gamma_mode"), "batches": len(per_batch),
            "tokens_per_s": tps, "ar_tokens_per_s": ar_tps,
            "speedup": tps / ar_tps if tps and ar_tps else None,
            "row_latency_ms_mean": statistics.fmean(r["wall_ms"] for r in rows)}


def engine_summary(job: Job) -> dict[str, Any] | None:
    """The kernels the job's timed decodes ran on: our speculative loop's engine options (the fast-linear
    scope, the padding buckets as probed, ``fused_prefill``); our AR loop's step (``AutoregressiveRunner.describe``);
    a batched job's (``ar`` too) batched runner's kernels (``runners.engine.fast_linear.BatchKernels``:
    ``fast_linear`` only); each with ``graphs``, the KV cache kind (``engine.graphs``; with ``width``, block-invariant
    forwards, the target's cache is static whatever it says; the dtype the target ran in, ``engine.dtype`` resolved, is
    the summary config's ``pair.target.dtype``) and ``draft_compile`` where the draft model's forwards ran compiled
    (``engine.draft_compile``); null for transformers' loops (assisted generation, ``hf_native_ar``)."""
    graphs = {"graphs": job.config.engine.graphs}  # the KV cache kind (engine.graphs; eager: the papers' loop)
    if job.loop is None:  # batch size > 1
        return {**job.batch_kernels.describe(), **graphs}
    if job.own_reference:
        return {**job.target_alone.loop.describe(), **graphs}
    forward = getattr(job.loop, "forward", None)
    if forward is None or not hasattr(forward, "describe"):
        return None
    # engine.draft_compile: the draft's forwards compiled (runners.engine.compiled_draft); named where it ran
    compiled = {"draft_compile": True} if job.config.engine.draft_compile and job.draft_model is not None else {}
    return {**forward.describe(), "fused_prefill": bool(getattr(job.loop, "fused_prefill", False)), **graphs,
            **compiled}


def hetero_summary(job: Job, records: list[dict]) -> dict[str, Any] | None:
    """What a job with a cross-vocabulary algorithm adds to its summary: the rule, the vocabulary
    overlap next to the acceptance it allows, the share of output tokens a token-level drafter
    could have proposed at all, and (SLRS) the fallback rule and how often it ran."""
    config = job.config
    if config.hetero_rule is None or job.vocabulary is None:
        return None
    out_tokens = sum(r["new_tokens"] for r in records)
    shared = sum((r.get("extra") or {}).get("output_tokens_shared", 0) for r in records)
    agg = aggregate(records)
    out: dict[str, Any] = {
        "rule": config.hetero_rule,
        "vocabulary": job.vocabulary,
        "acceptance_rate": agg.get("acceptance_rate"),
        "leviathan_alpha": agg.get("leviathan_alpha"),
        "output_tokens": out_tokens,
        "output_tokens_shared": shared,
        "output_shared_fraction": shared / out_tokens if out_tokens else None,
    }
    kind = drafter_kind(config.hetero_rule) if config.hetero_rule is not None else None
    if kind is not None and kind.fallback is not None:  # a round this rule could not finish: its fallback's
        out.update(fallback_rule=kind.fallback, fallback_rounds=agg.get("fallback_rounds"),
                   rounds=sum(r.get("rounds") or 0 for r in records))
    if kind is not None:  # the rule's settings in force (its declared ``settings``; conf/hetero: null = its default)
        out.update({key: getattr(config.hetero, key) for key in kind.settings})
    return out
