"""A job at ``batch_size`` B > 1: which prompt turns decode together, the batch's paired AR baseline, and
what the records and the summary say about the batch.

* **Batches** (``batches``): consecutive prompts in groups of B; within a group turn by turn and repeat
  by repeat, so a batch holds one prompt turn per prompt (a later turn is asked after the job's own
  answer to the earlier one, as at batch 1). A group of prompts with fewer turns than the others gives
  smaller batches for its later turns, and the last group may be smaller than B. A batch is recorded
  whole or not at all: on resume, the records of a batch an interruption cut short (fewer records than its
  ``batch_rows``) are dropped and the batch is decoded again, whole (``drop_partial_batches``), so a batch's
  wall time always covers the rows it has records of.
* **The baseline at the same B**: with greedy ``verify_lossless``, the target alone decodes the same prompt
  turns **as a batch** (``runners.engine.batched.BatchedAutoregressiveRunner``), on the same kernels
  (``batch_kernels``), after its own ``warmup_per_prompt`` untimed decodes of the batch, and in alternating
  order: right after the speculative batch when ``batch_index`` is even, right before it when odd;
  every row is compared with its own AR row (losslessness) and divides by it (``speedup``;
  ``ar_source: paired_batch``). An ``ar`` job at B > 1 is its own reference (``self``). Neither goes to
  the sweep's batch-1 AR cache.
* **The row alone**: the AR batch is decoded with the same padding and batched kernels as the
  speculative batch, so a fault they share would pass the check above. With greedy ``verify_lossless`` every
  row is also compared with the target alone at batch 1 on its prompt turn (``lossless_alone``,
  ``first_divergence_alone``; ``alone_tokens``): the sweep's AR cache entry when it holds one (a batch-1 job of
  the sweep decoded it), else an untimed decode by the job's target alone at batch 1 after the batch's timed
  decodes (not stored: it was not timed like a reference). It costs one batch-1 decode per row.
* **Record fields** (``batch_fields``; ``specbench.records``): ``batch_size`` (B), ``batch_index`` (the
  batch decoding's number in the job folder: unique, so a resumed batch's missing rows and the batches of
  added repeats, decoded later, are batches of their own), ``batch_rows`` (rows decoded together), ``batch_wall_ms`` (the
  batch's start to its last row's last token), ``batch_tokens`` (new tokens over its rows),
  ``batch_share_ms`` (``batch_wall_ms`` × the row's tokens ÷ ``batch_tokens``: the row's share of the
  batch's time), ``gamma_mode``, ``ar_batch_tokens`` (the paired AR batch's own new tokens over its rows: what
  its throughput counts; an ``ar`` job's: its own), ``ar_batch_wall_ms`` (the paired AR batch's wall
  time; an ``ar`` job's: its own
  batch's). A row's
  ``ttft_ms`` is the batch's prefill and its ``wall_ms`` ends at its own last token (its latency).
* **Summary** (``runners.jobs.record.batch_summary``): the batch's throughput (tokens over all rows ÷ the batches' wall
  time), the paired AR's, their ratio, and the rows' mean latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runners.engine.batched import BatchGeneration
from runners.jobs.ar_cache import Reference, job_reference_key
from runners.jobs.record import Unit
from specbench import records
from specbench.batches import turn_batches
from specbench.records import first_divergence


def batches(units: Sequence[Unit], size: int) -> list[list[Unit]]:
    """The job's units in batches of at most ``size`` (module docstring; ``specbench.batches.turn_batches``),
    in decoding order."""
    return [[units[i] for i in group] for group in turn_batches([(u.index, (u.turn, u.repeat)) for u in units], size)]


def drop_partial_batches(done: dict[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    """Remove from ``done`` (unit key → record) the records of every batch decoding with fewer records than its
    ``batch_rows`` (a kill between two rows' writes, or a torn last line); return them (module docstring)."""
    count: dict[int, int] = {}
    for r in done.values():
        if r.get("batch_index") is not None:
            count[int(r["batch_index"])] = count.get(int(r["batch_index"]), 0) + 1
    cut = {k for k, r in done.items() if r.get("batch_index") is not None
           and count[int(r["batch_index"])] < int(r.get("batch_rows") or 0)}
    return [done.pop(k) for k in list(done) if k in cut]


def batch_fields(job_config: Any, index: int, gen: BatchGeneration, row: int,
                 ar: BatchGeneration | None) -> dict[str, Any]:
    """The batch fields of row ``row``'s record (module docstring), built by the one builder jobs and the replay
    share (``specbench.records.batch_fields``)."""
    return records.batch_fields(job_config.batch_size, index, len(gen.rows), gen.wall_ms, gen.tokens,
                                len(gen.rows[row].tokens), job_config.batch_gamma if job_config.speculative else None,
                                ar.wall_ms if ar is not None else None, ar.tokens if ar is not None else None)


def alone_tokens(job: Any, ids: list[int], generator: Any) -> list[int]:
    """The target alone at batch 1 on ``ids`` (module docstring, "The row alone"): the AR cache's tokens, else an
    untimed decode by the job's target alone at batch 1 (``TargetAlone.untimed_row``)."""
    entry = job.ar_cache.get(job_reference_key(job, ids)) if job.ar_cache is not None else None
    if entry is not None:
        return list(entry["tokens"])
    return list(job.target_alone.untimed_row(ids, generator).tokens)


def alone_fields(row_tokens: list[int], alone: list[int]) -> dict[str, Any]:
    """``lossless_alone`` and ``first_divergence_alone`` of a row against the target alone."""
    div = first_divergence(list(row_tokens), list(alone))
    return {"lossless_alone": div is None, "first_divergence_alone": div}


def references(gen: BatchGeneration, ar: BatchGeneration | None, index: int, own: bool) -> list[Reference | None]:
    """Each row's reference: itself (an ``ar`` job), the paired AR batch's row, or none."""
    if own:
        return [Reference(g, "self") for g in gen.rows]
    if ar is None:
        return [None] * len(gen.rows)
    return [Reference(g, "paired_batch", decode_id=f"batch{index}/row{i}") for i, g in enumerate(ar.rows)]
