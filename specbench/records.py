"""Records: one JSON line per prompt turn (``records.jsonl``), declared once: every field of ``Record`` carries its
unit, group and definition (``declare``, read back by ``declaration()``), from which ``docs/pages/records.md`` is
generated and ``analysis.frame`` types its columns. The field builders (``timing_fields``, ``breakdown_fields``,
``hfbench_fields``, ``batch_fields``) fill a job's record (``runners.jobs.record``) and a replayed row
(``runners.replay.grid``) alike; ``throughput_ms`` is the one time tokens divide by in a pooled throughput.
Aggregates: ``specbench.summary``; files: ``specbench.record_io``.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import cache
from typing import Any

SCHEMA_VERSION = 5  # 3: drafted_per_pos, compared_per_pos, accepted_per_pos, discarded_trace; 4: repeat,
#                     host_probe_ms, ar_decode, interleave (records of 3 read as repeat 0, no probe); 5: kernels,
#                     ar_baseline (records of 4 read as null: not stated). method_key, method_display,
#                     hetero_display (added without a bump): every committed record has them
#                     (scripts/migrate_method_identity.py wrote them into the older ones once).
REPLAY_FILE = "replay.jsonl"  # rows written by ``python -m runners.replay grid``, read by ``analysis``

#: the groups of ``Record``'s fields, in the order ``docs/pages/records.md`` shows them: (title, what they share)
GROUPS: dict[str, tuple[str, str]] = {
    "identity": ("Identity", "Which job and which prompt turn the record is."),
    "decoded": ("What was decoded", "The prompt and the answer."),
    "timing": ("Timing", "Measured with `time.perf_counter` on CPU and CUDA events on GPU (one synchronize at "
               "read time), after untimed warm-ups. Over several records, pooled throughput is "
               "`Σ new_tokens / (Σ throughput_ms / 1000)` (`pooled_tokens_per_s`, `throughput_ms`: long answers "
               "weigh more); the *mean* throughput is the mean of per-record `tokens_per_s`."),
    "breakdown": ("Where the time went", "The time after the first token (`wall_ms − ttft_ms`) split three ways, "
                  "each measured separately (`Timer.lap`), adding up to `wall_ms − ttft_ms` within timer "
                  "resolution; null for transformers' loops."),
    "speculation": ("Speculation", "Summed over the record's rounds; null for an autoregressive method. The token "
                    "the target emits at the end of every round (the correction after a rejection, the bonus after "
                    "full acceptance) is never counted as accepted."),
    "rounds": ("Rounds", "One `specbench.rounds.Rounds` written out (`Rounds.fields`): the loop and the replay fill "
               "it from the outcome their policy observes, and a replayed row writes it the same way. `j` is the "
               "0-based position of a drafted token in its round."),
    "exactness": ("Exactness", "Greedy runs with `verify_lossless`: the output against the target's own greedy "
                  "decoding, checked in fp32 by default (in bf16/fp16 a k-token verification can round differently "
                  "from k one-token steps)."),
    "reference": ("The AR reference", "The target's own decoding of the same prompt turn, which `speedup` divides "
                  "by (the baseline rule: the same kernels and warm-ups as the measured side)."),
    "hfbench": ("hf-bench's definitions", "Timor et al.'s numbers (keyboardAnt/hf-bench `hf_bench/benchmark.py`, "
                "`HFModel.generate_text`), kept under their own names and never mixed with ours."),
    "ran": ("What ran", "So a record can be labelled and compared later."),
    "drift": ("Drift", "Repeats, the host-speed probe and the interleaved order (see Trustworthy comparisons)."),
    "batch": ("Batches", "`batch_size` > 1 (`runners.jobs.batch`); null at batch 1. The row's `ttft_ms` is then the "
              "batch's prefill and its `wall_ms` ends at its own last token; a job's or a table's tokens/s at B is "
              "the batch's throughput (`throughput_ms`), while a record's own `tokens_per_s` and `speedup` stay its "
              "row's."),
    "device": ("Where it ran", "Timings of a turn with `device_jobs` > 1 were taken beside other jobs and are not "
               "comparable with sequential runs; `analysis` flags speedups across jobs whose neighbours differ."),
    "meta": ("The record itself", "What the schema needs."),
}
#: the units a field may declare ("" for none: a label, a flag, an identifier)
UNITS = ("", "ms", "tokens", "tokens/s", "tokens/round", "×", "share", "count", "index", "token ids")


def declare(unit: str, group: str, doc: str, default: Any = None, factory: Any = MISSING,
            absent: Any = None) -> Any:
    """A ``Record`` field with its declaration: ``unit`` (one of ``UNITS``; lists: of each element), ``group`` (one
    of ``GROUPS``), ``doc`` (its definition, Markdown), ``absent`` (what a record of an older schema that lacks it
    reads as; None: null)."""
    if unit not in UNITS or group not in GROUPS or not doc.strip():
        raise ValueError(f"a Record field needs a known unit, a known group and a definition: {unit!r}, {group!r}")
    meta = {"unit": unit, "group": group, "doc": doc, "absent": absent}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def required(unit: str, group: str, doc: str) -> Any:
    """A ``Record`` field every record states (no default), declared as ``declare`` declares one."""
    return declare(unit, group, doc, default=MISSING)


@dataclass
class Record:
    pair: str = required("", "identity", "The pair's config name (`conf/pair/<name>.yaml`).")
    target: str = required("", "identity", "The target model's label.")
    draft: str | None = required("", "identity", "The draft's name; null for the target alone.")
    method: str = required("", "identity", "The method's config name (`conf/method/<name>.yaml`).")
    task: str = required("", "identity", "The task's label (its name, with the task's own variant when it has one).")
    category: str = required("", "identity", "The prompt's category within the task.")
    prompt_id: str = required("", "identity", "The prompt's id within the task.")
    turn: int = required("index", "identity", "The prompt turn (1-based).")
    gamma_init: int | None = required("tokens", "identity", "The initial γ; null for an autoregressive method.")
    temperature: float = required("", "identity", "The sampling temperature (0: greedy).")
    seed: int = required("", "identity", "The job's random seed.")
    prompt_tokens: int = required("tokens", "decoded", "The prompt's length in target tokens.")
    new_tokens: int = required("tokens", "decoded", "The tokens generated.")
    output_text: str = required("", "decoded", "The answer, decoded without special tokens.")
    output_sha: str = required("", "decoded", "The first 16 hex digits of the answer's SHA-256 (`sha256_text`).")
    stop_reason: str = required("", "decoded", "`eos` or `max_new_tokens`.")
    chat_template: str | None = required("", "decoded", "`chat` when a chat template was applied, else null "
                                        "(kept for older readers; `prompt_format` says more).")
    ttft_ms: float = required("ms", "timing", "Time to first token: from the start of generation (prompt ids on the "
                             "device) until the first new token is available, i.e. the target's prefill. For "
                             "transformers' loop (`runner: hf`, no separate prefill) and for our loop with "
                             "`engine.fused_prefill`, the end of the first round: the draft's prefill and first "
                             "block verified in the target's prefill forward.")
    tpot_ms: float | None = required("ms", "timing", "Time per output token after the first: `(wall_ms − ttft_ms) / "
                                    "(new_tokens − 1)`; null when `new_tokens` < 2.")
    tokens_per_s: float = required("tokens/s", "timing", "`new_tokens / (wall_ms / 1000)`.")
    wall_ms: float = required("ms", "timing", "The generation's wall time, from its start to its last token.")
    draft_ms: float | None = declare("ms", "breakdown", "In the drafter, proposing (0 for `method=ar`).")
    verify_ms: float | None = declare("ms", "breakdown", "In the target's forwards (`method=ar`: its decoding "
                                      "forwards).")
    overhead_ms: float | None = declare("ms", "breakdown", "Everything else: acceptance, cache crops, the policy, "
                                        "bookkeeping.")
    predicted_wall_ms: float | None = declare(
        "ms", "breakdown", "The pair's calibrated latency model charged with the record's own rounds "
        "(`specbench.round_costs.predict_wall_ms`): greedy runs of our loop with a model draft of the target's "
        "vocabulary or prompt lookup, and `method=ar`, when `calibrate` has written one for the pair "
        "(`runners.jobs.predict.find_latency`); null otherwise, and at batch size > 1.")
    hetero: str | None = declare("", "speculation", "The cross-vocabulary algorithm that ran (`slem`, `tli`, `slrs`, "
                                 "`union`); null with one vocabulary.")
    rounds: int | None = declare("count", "speculation", "The draft-and-verify rounds of the generation.")
    drafted: int | None = declare("tokens", "speculation", "Draft tokens verified, summed over rounds, including one "
                                  "outside the target's vocabulary (union's draft-only tokens, SLRS's ⊥), which is "
                                  "always rejected.")
    accepted: int | None = declare("tokens", "speculation", "Draft tokens the target accepted.")
    acceptance_rate: float | None = declare("share", "speculation", "`accepted / drafted`; null when nothing was "
                                            "drafted. Not Leviathan et al.'s α (`leviathan_alpha`): tokens after a "
                                            "round's first rejection are never verified.")
    mean_accepted_per_round: float | None = declare("tokens/round", "speculation", "`accepted / rounds`; tokens "
                                                    "emitted per round are this + 1.")
    gamma_trace: list[int] = declare("tokens", "rounds", "`[i]`: the γ the method chose for round `i` (before any cap "
                                     "by the remaining token budget).", factory=list)
    drafted_trace: list[int] = declare("tokens", "rounds", "`[i]`: the tokens round `i` verified.", factory=list)
    accepted_trace: list[int] = declare("tokens", "rounds", "`[i]`: the draft tokens round `i` accepted.",
                                        factory=list)
    confidence_trace: list[list[float]] = declare(
        "share", "rounds", "`[i][j]`: the draft's probability of its `j`-th token of round `i`, when the method reads "
        "it (rounded to 6 digits); empty otherwise.", factory=list)
    draft_forwards: int | None = declare(
        "count", "speculation", "The drafter's model forwards; null when it has no model or does not count them "
        "(prompt lookup, transformers' loop, AR). A drafter with another tokenizer runs one per *draft* token and "
        "SLRS one per node of its ψ tree, so this is the drafting cost, not `drafted`.")
    fallback_rounds: int | None = declare("count", "speculation", "Rounds in which the drafter used its lossless "
                                          "fallback rule (SLRS past `hetero.max_nodes` uses TLI); null when the rule "
                                          "has none.")
    drafted_per_pos: list[int] = declare("count", "rounds", "`[j]`: rounds that drafted at least `j + 1` tokens.",
                                         factory=list)
    compared_per_pos: list[int] = declare("count", "rounds", "`[j]`: rounds in which the target compared position `j` "
                                          "(drafted, and every earlier position accepted).", factory=list)
    accepted_per_pos: list[int] = declare(
        "count", "rounds", "`[j]`: rounds that accepted position `j` (vLLM's `num_accepted_tokens_per_pos`). "
        "`accepted_per_pos[j] / compared_per_pos[j]` is the conditional acceptance of position `j` (NeMo's), "
        "`accepted_per_pos[j] / rounds` vLLM's per-position acceptance rate.", factory=list)
    discarded_trace: list[int] = declare("tokens", "rounds", "`[i]`: tokens round `i` drafted but did not verify (a "
                                         "policy's `verify_count`, e.g. a peek; not in `drafted`); empty when no "
                                         "round discarded anything.", factory=list)
    lossless: bool | None = declare("", "exactness", "Whether the output equals the target's own greedy decoding "
                                    "token for token (at batch size > 1: the paired AR batch's row).")
    first_divergence: int | None = declare("index", "exactness", "The first new-token index where they differ; null "
                                           "when equal or not verified.")
    ar_tokens_per_s: float | None = declare("tokens/s", "reference", "The reference's own `tokens_per_s`.")
    ar_wall_ms: float | None = declare("ms", "reference", "The reference's wall time.")
    speedup: float | None = declare("×", "reference", "`tokens_per_s / ar_tokens_per_s`.")
    ar_fastest_wall_ms: float | None = declare("ms", "reference", "Under `engine.width`: the plain 1-token step's "
                                               "target alone (the fastest of the dtype), timed beside the reference.")
    ar_fastest_tokens: int | None = declare("tokens", "reference", "Its new tokens.")
    ar_fastest_same: bool | None = declare("", "reference", "Whether its output equals the reference's.")
    speedup_fastest: float | None = declare("×", "reference", "`tokens_per_s` over its tokens/s.")
    hfbench_ttft_ms: float | None = declare(
        "ms", "hfbench", "When the first new tokens reach a streamer in transformers' assisted generation: for a "
        "speculative run the end of the first round (draft prefill, first draft block and its verification; our "
        "engine's extra target prefill too), for autoregressive decoding `ttft_ms`. hf-bench's own streamer, "
        "polling every 10 ms from another thread with `time.time()`, is not reproduced.")
    hfbench_tpot_ms: float | None = declare("ms", "hfbench", "`(wall_ms − hfbench_ttft_ms) / (new_tokens − 1)`; null "
                                            "when `new_tokens` < 2 (hf-bench: infinity, such files removed by hand).")
    hfbench_tokens_per_s: float | None = declare("tokens/s", "hfbench", "`1000 / hfbench_tpot_ms` (hf-bench's "
                                                 "`out_toks_per_sec`, TTFT excluded), averaged over examples as "
                                                 "hf-bench does in `analysis.hetero`.")
    prompt_format: str | None = declare("", "ran", "`chat_template`, `vicuna_v1.1` or `plain`.")
    method_params: dict[str, Any] = declare("", "ran", "The method's knobs as configured (`transient`: false = γ "
                                            "carried over between prompts; `expand_on`; `threshold`; an AR method's "
                                            "`cache` …).", factory=dict)
    method_key: str | None = declare(
        "", "ran", "The method's identity as the job ran it (`specbench.config.method.method_key`): its name tagged "
        "with every knob off its default in the method's YAML at run time and the cross-vocabulary algorithm's "
        "knobs off theirs (`gammatune[eta=0.5]`). Records written before it were given theirs once "
        "(`scripts/migrate_method_identity.py`); a row without one is keyed as a job would key it today.")
    method_display: str | None = declare(
        "", "ran", "How tables and figures name the method: its YAML's `display` as the job ran it (null: none given). "
        "Records written before it were given theirs once (`scripts/migrate_method_identity.py`).")
    hetero_display: str | None = declare("", "ran", "How tables name the cross-vocabulary algorithm that ran (its "
                                         "YAML's `display`); null on one vocabulary.")
    ar_cache: str | None = declare("", "ran", "The KV cache of an autoregressive run (`dynamic`, `offloaded`); null "
                                   "otherwise.")
    top_k: int | None = declare("", "ran", "The top-k processor in force (null: off; it acts only when "
                                "`temperature` > 0).")
    top_p: float | None = declare("", "ran", "The top-p processor in force (null: off).")
    typical_p: float | None = declare("", "ran", "The typical-p processor in force (null: off).")
    target_vocab_size: int | None = declare("tokens", "ran", "The target's `config.vocab_size` (what transformers "
                                            "and hf-bench compare to choose SD or SLEM/TLI), for a draft model.")
    draft_vocab_size: int | None = declare("tokens", "ran", "The draft's `config.vocab_size`, for a draft model.")
    draft_hot_vocab: int | None = declare(
        "tokens", "ran", "The tokens the draft's LM head computes when it is restricted to the most frequent ones "
        "(`pair.draft.hot_vocab`, FR-Spec: `specbench.models.hot_vocab`); null: the whole vocabulary.")
    hot_coverage: float | None = declare(
        "share", "ran", "With `draft_hot_vocab`: the share of the emitted tokens among the draft's hot tokens, the "
        "most of them the draft could have proposed; null otherwise.")
    tokenizers_identical: bool | None = declare("", "ran", "Whether the two tokenizers map tokens to the same ids, "
                                                "for a draft model.")
    ar_source: str | None = declare(
        "", "reference", "Where the reference came from: `self` (the job is `method=ar`), `decoded` (this job decoded "
        "it), `cache` (another job of the sweep did: `runners.jobs.ar_cache`), `paired` (the interleaved launcher "
        "decoded it in the same round), `paired_batch` (`batch_size` > 1: the target alone decoded the same batch "
        "right after it).")
    ar_device_jobs: int | None = declare("count", "reference", "`device_jobs` of the decoding that timed the "
                                         "reference.")
    ar_decode: str | None = declare(
        "", "reference", "The AR decoding `speedup` divides by: under the interleaved launcher `<key hash>@<round>` "
        "(its row is in the sweep's `.specbench/ar_paired.jsonl`), otherwise the AR cache entry's key hash "
        "(`decoded`, `cache`), or null (`self`).")
    kernels: dict[str, Any] | None = declare(
        "", "ran", "The kernels the timed decode ran on (`runners.jobs.record.engine_summary`): our loop's "
        "`fast_linear` scope, its padding `buckets` and `fused_prefill`; an AR job's step; a batched job's kernels; "
        "each with `graphs`, the KV cache kind (`engine.graphs`: `eager` the papers' dynamic cache, `static`, "
        "`captured`; absent in old records: eager) and, where block-invariant forwards ran, `width` (`engine.width`); "
        "`draft_compile` where the draft model's forwards ran compiled (`engine.draft_compile`); "
        "null for transformers' loops. Schema 4 and older: null, not stated.")
    backend: str = declare("", "ran", "Which engine decoded it (`backend=`): `torch` (ours) or `llamacpp` "
                           "(`runners.engine.llamacpp`). Older records: `torch`.", default="torch", absent="torch")
    backend_info: dict[str, Any] | None = declare(
        "", "ran", "A server backend's build, model files (type, sha256, the command that made each), servers' command "
        "lines and `stream_missing` (tokens its stream sent no chunk for). Null for `torch`.")
    ar_baseline: dict[str, Any] | None = declare(
        "", "reference", "How the reference was decoded: `kernels` (the target alone on the fastest step the kernels "
        "of the method compared with it allow: our loop's scope, the fewest rows it transposes `min_rows` (1: a single "
        "row as the first of two equal rows, `single_row`) and the step's padding `step: [m, r]`; `width` where it steps at the loop's one width, `engine.width`), `warmup` and `warmup_per_prompt` (the same untimed decodes as the "
        "measured side). Null without a reference; schema 4 and older: null, not stated.")
    repeat: int = declare("index", "drift", "Which timing of the prompt turn this is (0-based; `repeats=R` times each "
                          "turn R times). Schema 3 and older: 0.", default=0, absent=0)
    host_probe_ms: float | None = declare(
        "ms", "drift", "A fixed piece of work (`runners.jobs.probe`: one forward of the target on a fixed input) "
        "timed right before the generation: the host's speed at that moment (`analysis` reports the drift and a "
        "drift-normalised throughput); null when the probe is off (`host_probe=false`).")
    interleave: dict[str, Any] | None = declare(
        "", "drift", "Where the turn ran in its interleaved round (`round`, `position` of `size` decodes, the `seed` "
        "of its order and the ordering `scheme`: `balanced`, pairs of mirrored rotations; `latin`, a cyclic Latin "
        "square, or an independent `shuffle` in earlier sweeps; `runners.jobs.interleave`); null under the other "
        "launchers.")
    batch_size: int = declare("count", "batch", "Rows decoded together (1: alone).", default=1, absent=1)
    batch_index: int | None = declare("index", "batch", "Which batch decoding of the job folder: rows with one index "
                                      "were decoded together.")
    batch_rows: int | None = declare("count", "batch", "The rows of that batch.")
    batch_wall_ms: float | None = declare("ms", "batch", "The batch's start to its last row's last token.")
    batch_tokens: int | None = declare("tokens", "batch", "The batch's new tokens over its rows.")
    batch_share_ms: float | None = declare("ms", "batch", "The row's share of the batch's wall: `batch_wall_ms × "
                                           "new_tokens / batch_tokens` (a job's shares sum to its batches' walls).")
    gamma_mode: str | None = declare("", "batch", "`per_row` (each row its own γ) or `shared` (one γ per round for "
                                     "the whole batch: the method's variant `(shared γ)`); null for AR.")
    ar_batch_wall_ms: float | None = declare("ms", "batch", "The paired AR batch's wall.")
    ar_batch_tokens: int | None = declare("tokens", "batch", "The paired AR batch's own new tokens over its rows (what "
                                          "its throughput counts; older records: `batch_tokens`).")
    lossless_alone: bool | None = declare("", "batch", "Whether the row equals the target alone at batch 1 on its "
                                          "prompt turn too (padding and batched kernels must not change a row's "
                                          "tokens).")
    first_divergence_alone: int | None = declare("index", "batch", "The first new-token index where they differ.")
    output_ids: list[int] = declare("token ids", "decoded", "The generated token ids (target vocabulary).",
                                    factory=list)
    device_id: str | None = declare("", "device", "The device this turn was decoded on (`cpu@host`, "
                                    "`cuda:<GPU UUID>@host`).")
    device_jobs: int | None = declare("count", "device", "The most jobs seen running on it during the turn (1 = "
                                      "alone; `runners.jobs.device_share`).")
    device_neighbours: list[str] = declare("", "device", "The other jobs' folder names.", factory=list)
    extra: dict[str, Any] = declare("", "meta", "What only some records say (`truncated_tokens` and `truncated` when "
                                    "a prompt was cut to fit, `output_tokens_shared` for a cross-vocabulary pair).",
                                    factory=dict)
    schema_version: int = declare("", "meta", "The schema the record was written under (`SCHEMA_VERSION`); records "
                                  "without one are schema 1.", default=SCHEMA_VERSION, absent=1)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, allow_nan=False)


RECORD_FIELDS = tuple(f.name for f in fields(Record))
#: the kinds a declared field's type maps to (``declaration``; ``analysis.frame`` types a column by it)
KINDS = ("number", "text", "flag", "list", "mapping")
_KIND_OF = {int: "number", float: "number", str: "text", bool: "flag", list: "list", dict: "mapping"}


@dataclass(frozen=True)
class FieldDeclaration:
    """One field of ``Record`` as declared: its ``kind`` (from its type: ``KINDS``), whether it may be null,
    its unit, group, definition and the value an older record lacking it reads as (``absent``)."""

    name: str
    kind: str
    nullable: bool
    unit: str
    group: str
    doc: str
    absent: Any


def _kind(hint: Any) -> tuple[str, bool]:
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else ()
    nullable = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    return _KIND_OF[typing.get_origin(base) or base], nullable


@cache
def declaration() -> tuple[FieldDeclaration, ...]:
    """Every field of ``Record``, in order, as declared (module docstring)."""
    hints = typing.get_type_hints(Record)
    out = []
    for f in fields(Record):
        kind, nullable = _kind(hints[f.name])
        meta = f.metadata
        if "doc" not in meta:
            raise TypeError(f"Record.{f.name} is not declared (specbench.records.declare: unit, group, definition)")
        out.append(FieldDeclaration(f.name, kind, nullable, meta["unit"], meta["group"], meta["doc"], meta["absent"]))
    return tuple(out)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def positions_balanced(scheme: str | None, rounds: int) -> bool:
    """Whether an interleaved sweep of ``rounds`` rounds (a record's ``interleave``: its ``scheme``, and the rounds
    its pair ran) ran every decode at the same mean position (``runners.jobs.round_order``): the ``balanced`` scheme
    guarantees it after every pair of rounds, so at an even count; an odd count leaves the last round unmirrored.
    ``latin`` balances only after a whole block and ``shuffle`` only on average: never claimed."""
    return scheme == "balanced" and rounds > 0 and rounds % 2 == 0


def pooled_tokens_per_s(new_tokens: Iterable[float], wall_ms: Iterable[float]) -> float:
    """Pooled throughput: ``Σ new_tokens / (Σ wall_ms / 1000)``; NaN when no time was spent.
    (One record: its own ``tokens_per_s``.)"""
    seconds = float(sum(wall_ms)) / 1000.0
    return float(sum(new_tokens)) / seconds if seconds > 0 else math.nan


def _given(value: Any) -> float | None:
    """A number a record or a frame's row states: None for null and NaN (a frame's missing value)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


#: the fields ``throughput_ms`` reads (a frame passes only these to it: ``analysis.policy_lab``)
THROUGHPUT_FIELDS = ("wall_ms", "batch_share_ms", "ar_share_ms", "ar_batch_wall_ms", "ar_batch_tokens", "batch_tokens",
                     "new_tokens", "ar_wall_ms")


def throughput_ms(record: Mapping[str, Any], ar: bool = False) -> float | None:
    """The time a record's new tokens divide by in a throughput over several records: its ``wall_ms`` (``ar``: its
    AR reference's, ``ar_wall_ms``), except for a row decoded in a batch (``batch_size`` > 1), whose ``wall_ms`` is its
    latency: there its share of the batch's wall, ``batch_share_ms``, and on the AR side the same share of the paired
    AR batch's wall, ``ar_batch_wall_ms × new_tokens / ar_batch_tokens`` (the AR batch's own tokens: pooled, the AR
    side is its own tokens over its own wall even where its outputs differ from the row's; ``batch_tokens`` for
    records without them). A replayed cell (``runners.replay.grid.cells``: the sums of its rows) states its AR side's
    summed shares as ``ar_share_ms``. Pooled over a batched job's records this is the batch throughput over all rows;
    at batch 1 it is the wall. The one definition: ``specbench.summary.aggregate``, ``analysis.metrics.time_ms``,
    ``analysis.policy_lab`` and ``runners.replay.grid.cells`` read it."""
    if not ar:
        share = _given(record.get("batch_share_ms"))
        return share if share is not None else _given(record.get("wall_ms"))
    cell = _given(record.get("ar_share_ms"))
    if cell is not None:
        return cell
    wall = _given(record.get("ar_batch_wall_ms"))
    tokens = _given(record.get("ar_batch_tokens")) or _given(record.get("batch_tokens"))
    if wall is not None and tokens:
        return wall * float(record["new_tokens"]) / tokens
    return _given(record.get("ar_wall_ms"))


def timing_fields(wall_ms: float, ttft_ms: float, new_tokens: int) -> dict[str, float | None]:
    """``ttft_ms``, ``tpot_ms``, ``tokens_per_s``, ``wall_ms`` from one generation's wall time (as declared)."""
    tpot = (wall_ms - ttft_ms) / (new_tokens - 1) if new_tokens >= 2 else None
    return {"ttft_ms": ttft_ms, "tpot_ms": tpot, "tokens_per_s": pooled_tokens_per_s([new_tokens], [wall_ms]),
            "wall_ms": wall_ms}


def breakdown_fields(phase_ms: Mapping[str, float] | None) -> dict[str, float | None]:
    """``draft_ms`` / ``verify_ms`` / ``overhead_ms`` from a generation's phase times (as declared)."""
    if not phase_ms:
        return {"draft_ms": None, "verify_ms": None, "overhead_ms": None}
    return {f"{k}_ms": float(phase_ms.get(k, 0.0)) for k in ("draft", "verify", "overhead")}


def hfbench_fields(wall_ms: float, stream_ttft_ms: float, new_tokens: int) -> dict[str, float | None]:
    """hf-bench's per-example TTFT, TPOT and tokens/s (as declared) from a generation's wall time and the time its
    first tokens would have been streamed."""
    if new_tokens < 2:
        return {"hfbench_ttft_ms": stream_ttft_ms, "hfbench_tpot_ms": None, "hfbench_tokens_per_s": None}
    tpot = (wall_ms - stream_ttft_ms) / (new_tokens - 1)
    return {"hfbench_ttft_ms": stream_ttft_ms, "hfbench_tpot_ms": tpot,
            "hfbench_tokens_per_s": 1000.0 / tpot if tpot > 0 else None}


def batch_fields(batch_size: int, index: int, rows: int, wall_ms: float | None, tokens: int, row_tokens: int,
                 gamma_mode: str | None, ar_wall_ms: float | None = None,
                 ar_tokens: int | None = None) -> dict[str, Any]:
    """The batch fields of one row of a batch decoding (as declared), for a job's record and a replayed row alike:
    ``batch_share_ms`` is ``wall_ms × (row_tokens / tokens)`` (a row alone: its wall, exactly; an even share when the
    batch made no tokens); ``ar_wall_ms`` / ``ar_tokens``: the paired AR batch's wall and own tokens."""
    share = None if wall_ms is None else wall_ms * (row_tokens / tokens if tokens else 1.0 / rows)
    return {"batch_size": batch_size, "batch_index": index, "batch_rows": rows, "batch_wall_ms": wall_ms,
            "batch_tokens": tokens, "batch_share_ms": share,
            "gamma_mode": gamma_mode, "ar_batch_wall_ms": ar_wall_ms, "ar_batch_tokens": ar_tokens}


def leviathan_alpha(accepted_trace: Iterable[int], drafted_trace: Iterable[int]) -> float | None:
    """Leviathan et al.'s α, the probability that one drafted token is accepted, estimated from the traces as
    accepted / (accepted + rounds that ended in a rejection) over rounds that drafted: the maximum-likelihood
    estimate under their i.i.d. model (tokens after the first rejection of a round are never verified, so
    ``acceptance_rate`` is not α)."""
    accepted = rejections = 0
    for a, d in zip(accepted_trace, drafted_trace, strict=True):
        if d > 0:
            accepted += a
            rejections += int(a < d)
    return accepted / (accepted + rejections) if accepted + rejections else None


def leviathan_speedup(alpha: float, gamma: float, c: float, forwards: float | None = None) -> float:
    """Leviathan et al.'s expected walltime improvement (2023, Theorem 3.8), ``(1 − α^(γ+1)) / ((1 − α)(f / c + 1))``,
    with γ the drafted tokens per round, ``forwards`` = f the draft forwards per round (default γ: a same-vocabulary
    drafter) and ``c = T_target / T_draft`` (the GammaTune paper's eq. 1, the project's one convention; Leviathan et
    al.'s ``c`` is the inverse). It ignores the loop's own overheads and the cost of verifying γ + 1 tokens."""
    f = gamma if forwards is None else forwards
    tokens = gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)
    return tokens / (f / c + 1.0)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
