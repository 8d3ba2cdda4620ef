"""Records: one JSON line per prompt (``records.jsonl``) and one ``summary.json`` per job.

Every figure is defined here, once (the README quotes these definitions):

* ``ttft_ms``  time to first token: from the start of generation (prompt ids on
  the device) until the first new token is available, i.e. the target's prefill.
  (For ``runner: hf`` — transformers' own loop, which has no separate prefill — and
  for our loop with ``engine.fused_prefill`` it is the end of the first round: draft
  prefill, first draft block and its verification in the target's prefill forward.)
* ``tpot_ms``  time per output token after the first:
  ``(wall_ms - ttft_ms) / (new_tokens - 1)``; null when ``new_tokens < 2``.
* ``tokens_per_s``  ``new_tokens / (wall_ms / 1000)``; over several records, **pooled**
  throughput is ``Σ new_tokens / (Σ wall_ms / 1000)`` (``pooled_tokens_per_s``: long answers
  weigh more), the *mean* throughput the mean of per-record ``tokens_per_s``.
* ``draft_ms``, ``verify_ms``, ``overhead_ms``  where the time after the first token
  went (``wall_ms - ttft_ms``, summed over rounds): ``draft_ms`` in the drafter
  (proposing), ``verify_ms`` in the target's forwards, ``overhead_ms`` in everything
  else (acceptance, cache crops, policy, bookkeeping). The three are measured
  separately (``Timer.lap``) and add up to ``wall_ms - ttft_ms`` within timer
  resolution. For ``method=ar`` ``verify_ms`` is the target's decoding forwards and
  ``draft_ms`` is 0; null for ``runner: hf``.
* ``predicted_wall_ms``  the latency model's wall time for this record's own rounds
  (``specbench.latency.predict_wall_ms``; greedy runs, when a calibrated latency model of
  the pair is found, see ``runners.jobs.predict.find_latency``); null otherwise.
* ``drafted``  draft tokens proposed, summed over rounds.
* ``accepted`` draft tokens the target accepted, summed over rounds. The token
  the target itself emits at the end of every round (the correction after a
  rejection, or the bonus after full acceptance) is **not** counted as accepted.
* ``acceptance_rate``  ``accepted / drafted`` (null when nothing was drafted).
* ``mean_accepted_per_round``  ``accepted / rounds``; tokens emitted per round
  are ``mean_accepted_per_round + 1``.
* the per-round fields below are one ``specbench.rounds.Rounds`` serialised (``Rounds.fields``: records and
  replayed rows alike).
* ``gamma_trace[i]`` the γ the method chose for round ``i`` (before any cap by
  the remaining token budget), ``drafted_trace[i]`` the tokens actually drafted,
  ``accepted_trace[i]`` the draft tokens accepted in that round. ``discarded_trace[i]``:
  tokens drafted but not verified (a policy's ``verify_count``, e.g. a peek; not in
  ``drafted``); empty when no round discarded anything.
* acceptance per position in the round (``j`` = 0-based position of a drafted token):
  ``drafted_per_pos[j]`` rounds that drafted at least ``j + 1`` tokens;
  ``compared_per_pos[j]`` rounds in which the target compared position ``j`` (drafted, and
  every earlier position accepted); ``accepted_per_pos[j]`` rounds that accepted position
  ``j`` (vLLM's ``num_accepted_tokens_per_pos``). So ``accepted_per_pos[j] /
  compared_per_pos[j]`` is the conditional acceptance of position ``j`` (NeMo's per-position
  acceptance), and ``accepted_per_pos[j] / rounds`` vLLM's per-position acceptance rate.
* ``draft_forwards``  the drafter's model forwards, summed over rounds (null when it has no model or
  does not count them: prompt lookup, transformers' loop, AR). A drafter with another tokenizer runs
  one forward per *draft* token (SLEM re-tokenizes them into target tokens) and SLRS one per node of
  its ψ tree, so this is the drafting cost, not ``drafted``.
* ``fallback_rounds``  rounds in which the drafter used its lossless fallback rule instead of the
  configured one (SLRS past its expansion bound ``hetero.max_nodes`` uses TLI); null when the rule
  has no fallback.
* ``drafted`` counts every drafted token, including one outside the target's vocabulary (union's
  draft-only tokens, SLRS's ⊥), which is always rejected.
* ``leviathan_alpha`` (``leviathan_alpha``): Leviathan et al.'s α, the probability that one drafted
  token is accepted, estimated from the traces as accepted / (accepted + rounds that ended in a
  rejection) (the maximum-likelihood estimate under their i.i.d. model; tokens after the first
  rejection of a round are never verified, so ``acceptance_rate`` = accepted / drafted is not α).
* ``leviathan_speedup(α, γ, c, f)``: their expected walltime improvement (Leviathan et al. 2023,
  Theorem 3.8), ``(1 - α^(γ+1)) / ((1 - α) (f / c + 1))``, with γ the drafted tokens per round, f the
  draft forwards per round (γ for a same-vocabulary drafter) and ``c = T_target / T_draft`` (the
  GammaTune paper's eq. 1, the project's one convention; Leviathan et al.'s ``c`` is the inverse); it ignores the loop's own overheads and the cost of verifying γ + 1 tokens.
* ``lossless`` for greedy runs with ``verify_lossless``: whether the output equals
  the target's own greedy decoding token for token; ``first_divergence`` is the
  first new-token index where they differ (null when equal or not verified). At batch size > 1 that
  decoding is the paired AR batch's row; ``lossless_alone`` / ``first_divergence_alone`` compare the row with
  the target alone at batch 1 on the same prompt turn too (``runners.jobs.batch``: padding and batched
  kernels must not change a row's tokens).

hf-bench's definitions (Timor et al.'s numbers; keyboardAnt/hf-bench ``hf_bench/benchmark.py``,
``HFModel.generate_text``; ../shared/notes/hf-bench-evaluation.md Sec. 2), kept under their own
names, never mixed with ours:

* ``hfbench_ttft_ms``  when the first new tokens reach a streamer in transformers' assisted
  generation: for a speculative run the end of the first round (draft prefill, first draft
  block and its verification included; our engine's extra target prefill too), for
  autoregressive decoding our ``ttft_ms``. (hf-bench also adds its streamer's polling delay,
  up to 10 ms, and times with ``time.time()`` in another thread: not reproduced.)
* ``hfbench_tpot_ms``  ``(wall_ms - hfbench_ttft_ms) / (new_tokens - 1)``; null when
  ``new_tokens < 2`` (hf-bench: infinity, and such files were removed by hand).
* ``hfbench_tokens_per_s``  ``1000 / hfbench_tpot_ms`` (hf-bench's ``out_toks_per_sec``, TTFT
  excluded). Averaged over examples as hf-bench does in ``analysis.hetero``.

What ran, so a record can be labelled and compared later:

* ``prompt_format`` (``chat_template`` | ``vicuna_v1.1`` | ``plain``; ``chat_template`` keeps
  its former meaning: ``"chat"`` when a chat template was applied);
* ``method_params`` the method's knobs as configured (``transient``: false = γ carried over
  between prompts; ``expand_on``; ``threshold``; ``cache`` of an AR method ...);
* ``ar_cache`` the KV cache of an autoregressive run (``dynamic`` | ``offloaded``), null otherwise;
* ``top_k`` / ``top_p`` / ``typical_p`` the sampling processors in force (null: off; they only
  act when ``temperature`` > 0);
* ``target_vocab_size`` / ``draft_vocab_size`` (``config.vocab_size``, what transformers and
  hf-bench compare to choose SD or SLEM/TLI) and ``tokenizers_identical`` (same token-to-id
  map), for a draft model.

For sweeps at scale:

* ``ar_source``: where the record's AR reference (``ar_tokens_per_s``, ``ar_wall_ms``,
  ``speedup``) came from: ``self`` (the job is ``method=ar``: its own decoding), ``decoded`` (this
  job decoded it), ``cache`` (another job of the sweep did: ``runners.jobs.ar_cache``), ``paired``
  (the interleaved launcher decoded it in the same round as this record: ``ar_decode``),
  ``paired_batch`` (``batch_size`` > 1: the target alone decoded the same batch right after it);
  ``ar_device_jobs`` is ``device_jobs`` (below) of the decoding that timed it.
* ``output_ids``: the generated token ids (target vocabulary).
* ``repeat``: which timing of the prompt turn this is (0-based; ``repeats=R`` times each turn R times).
* ``host_probe_ms``: a fixed piece of work (``runners.jobs.probe``: one forward of the target on a
  fixed input) timed right before the timed generation: the host's speed at that moment. Records
  of one sweep taken when the host ran slow show a larger probe (``analysis`` reports the drift and
  offers a drift-normalised throughput, by name); null when the probe is off (``host_probe=false``).
* ``ar_decode``: the id of the AR decoding this record's ``speedup`` divides by: under the
  interleaved launcher (``ar_source`` ``paired``) ``<key hash>@<round>`` names the AR decode of the
  same prompt turn and repeat, taken inside the same interleaved round (its row is in the sweep's
  ``.specbench/ar_paired.jsonl``); otherwise the on-disk cache entry's key hash (``decoded`` /
  ``cache``), or null (``self``).
* ``kernels``: the kernels the timed decode ran on (``runners.jobs.record.engine_summary``: our loop's
  ``fast_linear`` scope, its padding ``buckets`` and ``fused_prefill``; an AR job's step; a batched job's
  kernels; null for transformers' loops, which run transformers' kernels). ``ar_baseline``: how the
  reference ``speedup`` divides by was decoded (issue 40's baseline rule): ``kernels`` (the target alone
  steps on the kernels of the method compared with it: our loop's scope and the probe's padding of a
  1-token block, ``step: [m, r]``), ``warmup`` and ``warmup_per_prompt`` (the same untimed decodes the
  measured decodes get). Null where there is no reference; records of schema 4 have neither.
* ``interleave``: where the turn ran in its interleaved round (``round``, ``position`` of ``size``
  decodes, the ``seed`` of its order and the ordering ``scheme``: ``balanced``, pairs of mirrored rotations,
  ``latin`` (a cyclic Latin square) or ``shuffle`` in earlier sweeps; ``runners.jobs.interleave``); null under the other launchers.
* ``batch_size`` … ``ar_batch_wall_ms``: the batch a row was decoded in when ``batch_size`` > 1 (each
  field defined in ``runners.jobs.batch``); ``ttft_ms`` is then the batch's prefill and ``wall_ms`` ends
  at the row's own last token.
* ``device_id``, ``device_jobs``, ``device_neighbours``: the device this turn was decoded on
  (``cpu@host``, ``cuda:<GPU UUID>@host``), the most jobs seen running on it during the turn (1 =
  alone) and the other jobs' folder names (``runners.jobs.device_share``). Timings of a turn with
  ``device_jobs > 1`` were taken beside other jobs and are not comparable with sequential runs;
  ``analysis`` flags speedups across jobs whose neighbours differ.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 5  # 3: drafted_per_pos, compared_per_pos, accepted_per_pos, discarded_trace; 4: repeat,
#                     host_probe_ms, ar_decode, interleave (records of 3 read as repeat 0, no probe); 5: kernels,
#                     ar_baseline (records of 4 read as null: not stated)
REPLAY_FILE = "replay.jsonl"  # rows written by ``python -m runners.replay grid``, read by ``analysis``


@dataclass
class Record:
    # identity of the job
    pair: str
    target: str
    draft: str | None
    method: str
    task: str
    category: str
    prompt_id: str
    turn: int
    gamma_init: int | None
    temperature: float
    seed: int
    # what was decoded
    prompt_tokens: int
    new_tokens: int
    output_text: str
    output_sha: str
    stop_reason: str  # "eos" | "max_new_tokens"
    chat_template: str | None
    # timing
    ttft_ms: float
    tpot_ms: float | None
    tokens_per_s: float
    wall_ms: float
    # where the time after the first token went (null when not measured)
    draft_ms: float | None = None
    verify_ms: float | None = None
    overhead_ms: float | None = None
    predicted_wall_ms: float | None = None
    # speculation (null / empty for method=ar)
    hetero: str | None = None  # the cross-vocabulary algorithm that ran (slem, tli, ...); null: one vocabulary
    rounds: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    acceptance_rate: float | None = None
    mean_accepted_per_round: float | None = None
    gamma_trace: list[int] = field(default_factory=list)
    drafted_trace: list[int] = field(default_factory=list)
    accepted_trace: list[int] = field(default_factory=list)
    confidence_trace: list[list[float]] = field(default_factory=list)
    draft_forwards: int | None = None
    fallback_rounds: int | None = None
    drafted_per_pos: list[int] = field(default_factory=list)
    compared_per_pos: list[int] = field(default_factory=list)
    accepted_per_pos: list[int] = field(default_factory=list)
    discarded_trace: list[int] = field(default_factory=list)  # per round; empty when nothing was discarded
    # exactness
    lossless: bool | None = None
    first_divergence: int | None = None
    # the target's own greedy decoding of the same prompt (when verified)
    ar_tokens_per_s: float | None = None
    ar_wall_ms: float | None = None
    speedup: float | None = None
    # hf-bench's definitions (module docstring)
    hfbench_ttft_ms: float | None = None
    hfbench_tpot_ms: float | None = None
    hfbench_tokens_per_s: float | None = None
    # what ran
    prompt_format: str | None = None
    method_params: dict[str, Any] = field(default_factory=dict)
    ar_cache: str | None = None
    top_k: int | None = None
    top_p: float | None = None
    typical_p: float | None = None
    target_vocab_size: int | None = None
    draft_vocab_size: int | None = None
    tokenizers_identical: bool | None = None
    ar_source: str | None = None  # "self" | "decoded" | "cache" | "paired"
    ar_device_jobs: int | None = None
    ar_decode: str | None = None  # the AR decoding the speedup divides by (module docstring)
    kernels: dict[str, Any] | None = None  # the kernels the timed decode ran on (module docstring)
    ar_baseline: dict[str, Any] | None = None  # how the reference was decoded: kernels, warm-ups (module docstring)
    # drift: repeats, the host-speed probe, the interleaved order
    repeat: int = 0
    host_probe_ms: float | None = None
    interleave: dict[str, Any] | None = None
    # batch_size > 1 (runners.jobs.batch: the batch the row was decoded in; null at batch 1)
    batch_size: int = 1
    batch_index: int | None = None
    batch_rows: int | None = None
    batch_wall_ms: float | None = None
    batch_tokens: int | None = None
    batch_share_ms: float | None = None
    gamma_mode: str | None = None
    ar_batch_wall_ms: float | None = None
    ar_batch_tokens: int | None = None  # the paired AR batch's new tokens over its rows (runners.jobs.batch)
    lossless_alone: bool | None = None  # the row equals the target alone at batch 1 on its prompt (runners.jobs.batch)
    first_divergence_alone: int | None = None
    # what was generated, and where (concurrent launchers)
    output_ids: list[int] = field(default_factory=list)
    device_id: str | None = None
    device_jobs: int | None = None
    device_neighbours: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, allow_nan=False)


RECORD_FIELDS = tuple(f.name for f in fields(Record))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def pooled_tokens_per_s(new_tokens: Iterable[float], wall_ms: Iterable[float]) -> float:
    """Pooled throughput: ``Σ new_tokens / (Σ wall_ms / 1000)``; NaN when no time was spent.
    (One record: its own ``tokens_per_s``.)"""
    seconds = float(sum(wall_ms)) / 1000.0
    return float(sum(new_tokens)) / seconds if seconds > 0 else math.nan


def throughput_ms(record: Mapping[str, Any], ar: bool = False) -> float | None:
    """The time a record's new tokens divide by in a throughput over several records: its ``wall_ms``
    (``ar``: its AR reference's, ``ar_wall_ms``), except for a row decoded in a batch (``batch_size`` > 1,
    ``runners.jobs.batch``), whose ``wall_ms`` is its latency: there its share of the batch's wall,
    ``batch_share_ms`` (``ar``: the same share, its tokens over ``batch_tokens``, of the paired AR batch's
    ``ar_batch_wall_ms``, the share by ``ar_batch_tokens``, the AR batch's own tokens: pooled, the AR side is
    its own tokens over its own wall even where its outputs differ from the row's; ``batch_tokens`` for records
    without it). Pooled over a batched job's records this is the batch throughput over all rows;
    at batch 1 it is the wall. The one definition: ``aggregate`` and ``analysis.metrics.time_ms`` read it."""
    wall = record.get("ar_wall_ms" if ar else "wall_ms")
    if not ar:
        share = record.get("batch_share_ms")
    elif record.get("ar_batch_wall_ms") is not None and (record.get("ar_batch_tokens") or record.get("batch_tokens")):
        tokens = record.get("ar_batch_tokens") or record["batch_tokens"]
        share = float(record["ar_batch_wall_ms"]) * float(record["new_tokens"]) / float(tokens)
    else:
        share = None
    if share is not None and not (isinstance(share, float) and math.isnan(share)):
        return float(share)
    return None if wall is None else float(wall)


def timing_fields(wall_ms: float, ttft_ms: float, new_tokens: int) -> dict[str, float | None]:
    """TTFT/TPOT/throughput from one generation's wall time (definitions above)."""
    tpot = (wall_ms - ttft_ms) / (new_tokens - 1) if new_tokens >= 2 else None
    return {"ttft_ms": ttft_ms, "tpot_ms": tpot, "tokens_per_s": pooled_tokens_per_s([new_tokens], [wall_ms]),
            "wall_ms": wall_ms}


def breakdown_fields(phase_ms: Mapping[str, float] | None) -> dict[str, float | None]:
    """``draft_ms`` / ``verify_ms`` / ``overhead_ms`` from a generation's phase times (definitions above)."""
    if not phase_ms:
        return {"draft_ms": None, "verify_ms": None, "overhead_ms": None}
    return {f"{k}_ms": float(phase_ms.get(k, 0.0)) for k in ("draft", "verify", "overhead")}


def hfbench_fields(wall_ms: float, stream_ttft_ms: float, new_tokens: int) -> dict[str, float | None]:
    """hf-bench's per-example TTFT, TPOT and tokens/s (module docstring) from a generation's wall
    time and the time its first tokens would have been streamed."""
    if new_tokens < 2:
        return {"hfbench_ttft_ms": stream_ttft_ms, "hfbench_tpot_ms": None, "hfbench_tokens_per_s": None}
    tpot = (wall_ms - stream_ttft_ms) / (new_tokens - 1)
    return {"hfbench_ttft_ms": stream_ttft_ms, "hfbench_tpot_ms": tpot,
            "hfbench_tokens_per_s": 1000.0 / tpot if tpot > 0 else None}


def leviathan_alpha(accepted_trace: Iterable[int], drafted_trace: Iterable[int]) -> float | None:
    """α = accepted / (accepted + rounds ending in a rejection) over rounds that drafted (definition above)."""
    accepted = rejections = 0
    for a, d in zip(accepted_trace, drafted_trace, strict=True):
        if d > 0:
            accepted += a
            rejections += int(a < d)
    return accepted / (accepted + rejections) if accepted + rejections else None


def leviathan_speedup(alpha: float, gamma: float, c: float, forwards: float | None = None) -> float:
    """Leviathan et al.'s expected speedup (definition above); ``forwards`` defaults to ``gamma``."""
    f = gamma if forwards is None else forwards
    tokens = gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)
    return tokens / (f / c + 1.0)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class RecordWriter:
    """Appends one JSON line per record and flushes + fsyncs it at once, so a
    crash loses at most the prompt in flight and never leaves half a line
    (a torn last line from a kill is dropped by ``read_records``)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, record: Record | Mapping[str, Any]) -> None:
        line = record.to_json() if isinstance(record, Record) else json.dumps(dict(record), allow_nan=False)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete records of a ``records.jsonl`` (a torn final line is skipped)."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    with open(p, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # torn by a kill mid-write
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON to a temp file in the same folder, fsync, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(vals) / len(vals) if vals else None


def aggregate(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Job-level aggregates. Throughput is given both ways:
    ``tokens_per_s`` = total new tokens / total wall time (pooled), and
    ``mean_tokens_per_s`` = mean of per-prompt rates."""
    if not records:
        return {"n_records": 0}
    total_tokens = sum(r["new_tokens"] for r in records)
    times = [throughput_ms(r) or 0.0 for r in records]  # a batched row: its share of the batch's wall
    total_s = sum(times) / 1000.0
    pooled = pooled_tokens_per_s([r["new_tokens"] for r in records], times)
    drafted = [r["drafted"] for r in records if r.get("drafted") is not None]
    accepted = [r["accepted"] for r in records if r.get("accepted") is not None]
    rounds = [r["rounds"] for r in records if r.get("rounds") is not None]
    ar = [r for r in records if r.get("ar_wall_ms") is not None and r.get("ar_tokens_per_s") is not None]
    ar_ms = [throughput_ms(r, ar=True) or 0.0 for r in ar]
    ar_tokens = [r["ar_tokens_per_s"] * r["ar_wall_ms"] / 1000.0 for r in ar]
    lossless = [r["lossless"] for r in records if r.get("lossless") is not None]
    timed = [r for r in records if r.get("overhead_ms") is not None]
    out: dict[str, Any] = {
        "n_records": len(records),
        "new_tokens": total_tokens,
        "wall_s": total_s,
        "tokens_per_s": None if math.isnan(pooled) else pooled,
        "mean_tokens_per_s": _mean(r["tokens_per_s"] for r in records),
        "ttft_ms": _mean(r["ttft_ms"] for r in records),
        "tpot_ms": _mean(r["tpot_ms"] for r in records),
        "drafted": sum(drafted) if drafted else None,
        "accepted": sum(accepted) if accepted else None,
        "acceptance_rate": sum(accepted) / sum(drafted) if drafted and sum(drafted) else None,
        "mean_accepted_per_round": sum(accepted) / sum(rounds) if rounds and sum(rounds) else None,
        "draft_forwards": sum(r["draft_forwards"] for r in records if r.get("draft_forwards") is not None) or None,
        "fallback_rounds": sum(r["fallback_rounds"] for r in records if r.get("fallback_rounds") is not None)
        if any(r.get("fallback_rounds") is not None for r in records) else None,
        "leviathan_alpha": leviathan_alpha(
            [a for r in records for a in r.get("accepted_trace") or []],
            [d for r in records for d in r.get("drafted_trace") or []],
        ),
        "lossless_checked": len(lossless),
        "lossless_all": all(lossless) if lossless else None,
    }
    alone = [r["lossless_alone"] for r in records if r.get("lossless_alone") is not None]
    if alone:  # batched rows against the target alone at batch 1
        out.update(lossless_alone_checked=len(alone), lossless_alone_all=all(alone))
    if timed:  # the breakdown of the time after the first token, over the records that have it
        after = sum(r["wall_ms"] - r["ttft_ms"] for r in timed)
        for key in ("draft", "verify", "overhead"):
            out[f"{key}_s"] = sum(r[f"{key}_ms"] for r in timed) / 1000.0
        out["overhead_share"] = out["overhead_s"] * 1000.0 / after if after > 0 else None
        n_rounds = sum(r.get("rounds") or 0 for r in timed)
        out["overhead_ms_per_round"] = out["overhead_s"] * 1000.0 / n_rounds if n_rounds else None
    predicted = [r["predicted_wall_ms"] for r in records if r.get("predicted_wall_ms") is not None]
    if predicted and len(predicted) == len(records):
        out["predicted_wall_s"] = sum(predicted) / 1000.0
    if ar_ms and len(ar_ms) == len(records):
        ar_tps = pooled_tokens_per_s(ar_tokens, ar_ms)
        out["ar_tokens_per_s"] = ar_tps
        out["speedup"] = out["tokens_per_s"] / ar_tps if out["tokens_per_s"] else None
    return out
