"""Which prompt turns decode together at batch size ``B``: the one rule of the engine's batched jobs
(``runners.jobs.batch``) and of the replay (``runners.replay.batched``), kept here, without torch, so that the
replay and the policy lab do not import the engine."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from specbench.latency import check_batch_size


def turn_batches(keys: Sequence[tuple[Hashable, Any]], size: int) -> list[list[int]]:
    """Which items decode together at batch ``size``: ``keys[i] = (prompt, turn key)`` of item ``i`` (a turn
    key sorts: a turn, or ``(turn, repeat)``). Consecutive prompts (in first-seen order) in groups of
    ``size``; within a group one batch per turn key, in sorted order, its items in their order. A batch so
    holds one prompt turn per prompt, and a later turn comes after the batch of the turn before it (it is
    asked after the model's own answer). The one rule of the engine's jobs (``runners.jobs.batch``) and of
    the replay (``runners.replay.batched``): index lists into ``keys``."""
    size = check_batch_size(size)
    order: list[Hashable] = []
    by_prompt: dict[Hashable, list[int]] = {}
    for i, (prompt, _) in enumerate(keys):
        if prompt not in by_prompt:
            order.append(prompt)
        by_prompt.setdefault(prompt, []).append(i)
    out: list[list[int]] = []
    for g in range(0, len(order), size):
        members = [i for prompt in order[g:g + size] for i in by_prompt[prompt]]
        for turn in sorted({keys[i][1] for i in members}):
            out.append([i for i in members if keys[i][1] == turn])
    return out
