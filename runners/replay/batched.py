"""A job replayed at a batch size: its prompt turns decoded ``B`` at a time by the batched
engine, any γ policy in either γ mode, the target alone at the same ``B``, and the oracle there.

* Batches: as the batched engine forms them (``specbench.batches.turn_batches``): ``batch_size``
  consecutive prompts, then one batch per turn (a later turn is asked after the answer to the one before); each is ``runners.replay.replay.replay_rows`` (its docstring: the
  order of the policy's calls, the rounds' charges at the rows still decoding).
* ``per_row``: ``B`` policy objects, one per row slot; slot ``i`` decodes row ``i`` of every batch (the
  ``i``-th prompt of each group, turn after turn, as the engine's slots do), one object across them, as ``replay_job`` carries one object across a job: at ``B = 1`` this
  *is* ``replay_job``, and at any ``B`` the rounds of slot ``i`` are those of ``replay_job`` on its own
  prompts (for a policy that does not read ``COSTS``; one that does is told the batch's round costs).
  ``shared``: one policy object across the job, ``begin_prompt()`` once per batch.
* Times: a row's ``wall_ms`` runs from its batch's start to its own finish (its latency; ``ttft_ms`` is the
  batch's prefill); a batch's wall is its last row's; throughput over all rows is
  ``Σ new tokens / Σ batch walls`` (``BatchReplay.tokens_per_s`` per batch, ``pooled_batches`` per job).
  The target alone at ``B`` (``ar_batches``): ``specbench.latency.ar_batch_ms`` over the same batches.

What a batch holds (``BATCH_RULES``, ``rows_for_rule``). ``distinct`` (the default, the batched engine's): ``B``
*different* prompt turns decoded together in a **static** batch: no row joins once it started, a finished row
leaves, the batch's wall is its **slowest row's** (``replay_rows``: rounds run while any row is active), so a
batch of uneven rows pays for its straggler, speculation or not. ``duplicate``: SpecDecode-Bench's rule
(``SpecDecode-Bench/simulator`` at 2fdccbd, ``simulator.py: SpecSimulator.simulate_like_experiment``: each sampled
request copied ``batch_size`` times by ``_dup_request`` and simulated as one batch): ``B`` identical rows, so every
row finishes with the batch and the batch's costs are those of ``B`` rows of one request.

The oracle at batch ``B`` (``oracle_batches``). At ``B = 1`` it is ``runners.replay.oracle.oracle``, the
exact minimum over every schedule. For ``B > 1`` the exact minimum is over joint schedules of all the rows
(a dynamic program over every row's position and draft cache at once: exponential in ``B``), so the
oracle at ``B`` is defined as: each row plays *its own* exact oracle schedule computed under the costs at
the batch's row count (``LatencyModel.at_batch(b)``: the row's best schedule if every forward it takes
were a forward of ``b`` rows), and the rows are then replayed together (``per_row``) and charged as the
batched engine runs them. It is exact for a batch of identical rows and cheap (one ``O(N²)`` dynamic
program per row), but it is **not a bound** at ``B > 1``: a policy that aligns its rows' draft lengths
(every round pays for the longest) can beat it. ``agreement_oracle_batches``: each row drafts exactly its
agreement run (``runners.replay.oracle.AgreementOracle``), per row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from methods.base import GammaPolicy
from runners.replay.oracle import AgreementOracle, ScriptedPolicy, oracle_schedule
from runners.replay.replay import BatchReplay, max_new, replay_rows
from runners.replay.trace import Trace
from specbench.batches import turn_batches
from specbench.config import GAMMA_MODES
from specbench.latency import LatencyModel, ar_batch_ms, check_batch_size
from specbench.records import pooled_tokens_per_s
from specbench.registry import ConfigError

#: what a batch of ``B`` rows holds (module docstring): different prompt turns, or one request duplicated ``B`` times
BATCH_RULES = ("distinct", "duplicate")


def rows_for_rule(traces: Sequence[Trace], batch_size: int, rule: str = "distinct") -> list[Trace]:
    """The prompt turns to replay at ``batch_size`` under ``rule`` (``BATCH_RULES``): ``distinct``, ``traces`` as
    they are (``batch_indices`` groups ``B`` consecutive ones); ``duplicate``, each turn listed ``B`` times in a
    row, so each batch is ``B`` copies of one turn (SpecDecode-Bench's ``simulate_like_experiment``). Batch 1:
    the same under both."""
    if rule not in BATCH_RULES:
        raise ConfigError(f"unknown batch rule {rule!r} (known: {', '.join(BATCH_RULES)})")
    size = check_batch_size(batch_size)
    return list(traces) if rule == "distinct" or size == 1 else [tr for tr in traces for _ in range(size)]


def check_batching(batch_size: object, gamma_mode: object, latency: LatencyModel | None = None) -> tuple[int, str]:
    """``(batch_size, gamma_mode)`` checked: one-line ``ConfigError`` on a batch size that is not an integer
    >= 1, or beyond what ``latency`` was calibrated at, or an unknown γ mode."""
    try:
        size = check_batch_size(batch_size)
        if latency is not None:
            latency.costs_at(size)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if gamma_mode not in GAMMA_MODES:
        raise ConfigError(f"unknown gamma_mode {gamma_mode!r} (known: {', '.join(GAMMA_MODES)})")
    return size, str(gamma_mode)


def batch_indices(traces: Sequence[Trace], batch_size: int) -> list[list[int]]:
    """Which prompt turns the batched engine decodes together (``specbench.batches.turn_batches``: ``B``
    consecutive prompts, then turn by turn), as indices into ``traces``."""
    size = check_batching(batch_size, GAMMA_MODES[0])[0]
    seen: dict[tuple[str, int], int] = {}
    keys = []
    for t in traces:  # a prompt turn listed twice is another prompt (the n-th time: the n-th copy)
        copy = seen.get((t.prompt_id, t.turn), 0)
        seen[(t.prompt_id, t.turn)] = copy + 1
        keys.append(((t.prompt_id, copy), t.turn))
    return turn_batches(keys, size)


def batches_of(traces: Sequence[Trace], batch_size: int) -> list[list[Trace]]:
    """The batches of ``batch_indices``, as traces (the last group may hold fewer prompts, a later turn fewer
    rows)."""
    return [[traces[i] for i in group] for group in batch_indices(traces, batch_size)]


def replay_job_batched(traces: Sequence[Trace], build: Callable[[], GammaPolicy], latency: LatencyModel | None = None,
                       batch_size: int = 1, gamma_mode: str = "per_row",
                       max_new_tokens: int | None = None) -> list[BatchReplay]:
    """A job at ``batch_size`` (module docstring): ``build()`` makes a fresh policy (one per row slot in
    ``per_row`` mode, one for the job in ``shared`` mode)."""
    size, mode = check_batching(batch_size, gamma_mode)
    return replay_groups(batches_of(traces, size), build, latency, mode, max_new_tokens)


def replay_groups(groups: Sequence[Sequence[Trace]], build: Callable[[], GammaPolicy], latency: LatencyModel | None,
                  gamma_mode: str = "per_row", max_new_tokens: int | None = None) -> list[BatchReplay]:
    """``replay_job_batched`` on given batches (e.g. a real job's own, ``runners.replay.compare``), in order."""
    mode = check_batching(1, gamma_mode)[1]
    if mode == "shared":
        policy = build()
        return [replay_rows(group, [policy], latency, max_new_tokens, mode) for group in groups]
    slots = [build() for _ in range(max((len(g) for g in groups), default=0))]
    return [replay_rows(group, slots[: len(group)], latency, max_new_tokens, mode) for group in groups]


def replay_each_batched(traces: Sequence[Trace], policies: Sequence[GammaPolicy], latency: LatencyModel | None,
                        batch_size: int = 1, max_new_tokens: int | None = None) -> list[BatchReplay]:
    """``per_row`` with a policy of its own for every prompt turn (``policies[i]`` plays ``traces[i]``):
    the oracles' scripts, each prompt's own best fixed γ."""
    if len(policies) != len(traces):
        raise ValueError(f"{len(policies)} policies for {len(traces)} prompt turns")
    return [replay_rows([traces[i] for i in group], [policies[i] for i in group], latency, max_new_tokens)
            for group in batch_indices(traces, batch_size)]


def rows_of(batches: Sequence[BatchReplay]) -> list:
    """Every row's ``ReplayResult``, in the job's order."""
    return [row for batch in batches for row in batch.rows]


def pooled_batches(batches: Sequence[BatchReplay]) -> float:
    """Throughput over all rows of a job: ``Σ new tokens / Σ batch walls`` (tokens/s)."""
    return pooled_tokens_per_s([b.new_tokens for b in batches], [b.wall_ms for b in batches])


def ar_batches(traces: Sequence[Trace], latency: LatencyModel, batch_size: int = 1,
               max_new_tokens: int | None = None) -> list[tuple[float, list[float]]]:
    """The target alone on the same batches: per batch, ``(prefill ms, each row's wall ms)``
    (``specbench.latency.ar_batch_ms``; a row decodes ``min(N, max_new_tokens)`` tokens, as replayed)."""
    out = []
    for group in batches_of(traces, batch_size):
        news = [min(tr.n, max_new(tr, max_new_tokens)) for tr in group]
        out.append(ar_batch_ms(latency, [tr.prompt_tokens for tr in group], news))
    return out


def oracle_batches(traces: Sequence[Trace], latency: LatencyModel, batch_size: int = 1,
                   max_new_tokens: int | None = None) -> list[BatchReplay]:
    """The oracle at ``batch_size`` (module docstring); at batch 1 each row's wall is checked against its
    dynamic program's minimum, as ``runners.replay.oracle.oracle`` checks it."""
    scripts: list[GammaPolicy | None] = [None] * len(traces)
    totals: dict[int, float] = {}
    for group in batch_indices(traces, batch_size):
        costs = latency.at_batch(len(group))
        for i in group:
            totals[i], ds = oracle_schedule(traces[i], costs, max_new_tokens)
            scripts[i] = ScriptedPolicy(ds)
    out = replay_each_batched(traces, scripts, latency, batch_size, max_new_tokens)
    order = [i for group in batch_indices(traces, batch_size) for i in group]
    for (batch, row), i in zip(((b, r) for b in out for r in b.rows), order):
        if len(batch.rows) == 1 and not math.isclose(row.wall_ms, totals[i], rel_tol=1e-9, abs_tol=1e-6):
            raise AssertionError(f"oracle replay {row.wall_ms} != dynamic program {totals[i]}")
    return out


def agreement_oracle_batches(traces: Sequence[Trace], latency: LatencyModel | None, batch_size: int = 1,
                             max_new_tokens: int | None = None) -> list[BatchReplay]:
    """Each row drafts exactly its agreement run (``AgreementOracle``), at ``batch_size``."""
    return replay_each_batched(traces, [AgreementOracle(tr) for tr in traces], latency, batch_size, max_new_tokens)
