"""What every greedy trace shares (``runners.replay.trace.Trace`` of a draft model, ``runners.replay.trace_lookup.
LookupTrace`` of prompt lookup): the format's version and its check, the float32 confidences' packing, the views
every trace answers, and the target's greedy pass both kinds start from. Its own module so that the two trace kinds
import it and not each other (issue 30: the import cycle ``trace`` <-> ``trace_lookup``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

TRACE_VERSION = 2


class TraceTooShort(ValueError):
    """A round asked for more rollout tokens than the trace holds (re-trace with a larger gamma_max)."""


def pack_conf(conf: float) -> float:
    """The shortest decimal that round-trips the float32 value of ``conf``."""
    return float(np.format_float_positional(np.float32(conf), unique=True, trim="-"))


def unpack_conf(value: float) -> float:
    """The exact double ``float(float32)`` the drafter passed on."""
    return float(np.float32(value))


def unpack_confs(values: Sequence[float] | None) -> list[float] | None:
    return None if values is None else [unpack_conf(c) for c in values]


class TraceViews:
    """What every trace (a draft model's, prompt lookup's) answers from ``tokens``, ``prompt_id``,
    ``turn`` and its agreement runs ``_agree``."""

    tokens: list[int]
    prompt_id: str
    turn: int
    _agree: list[int]

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def key(self) -> tuple[str, int]:
        return (self.prompt_id, self.turn)

    def agreement(self, t: int) -> int:
        """``a_t``: leading proposed tokens from position ``t`` equal to ``x_{t+1}, ...`` (0 for ``t >= N``)."""
        if t < 1:
            raise ValueError("positions start at 1 (the prefill emits x_1)")
        return self._agree[t - 1] if t <= self.n else 0

    @property
    def agreements(self) -> list[int]:
        """``[a_1, .., a_{N-1}]``."""
        return self._agree[: self.n - 1]


def target_pass(target_model: Any, prompt_ids: list[int], max_new_tokens: int, eos: Iterable[int],
                reuse: Any = None) -> Any:
    """The target's greedy output for a trace (``AutoregressiveRunner``, timed), or ``reuse``'s — a trace of
    the same target, prompt and length from another pair — without running the target again."""
    from runners.engine.base import Generation
    from runners.engine.speculative import AutoregressiveRunner

    if reuse is not None:
        if reuse.prompt_tokens != len(prompt_ids) or reuse.max_new_tokens != max_new_tokens:
            raise ValueError(f"{reuse.prompt_id}/{reuse.turn}: the reused trace has another prompt or length")
        return Generation(list(reuse.tokens), reuse.ar_ttft_ms or 0.0, reuse.ar_wall_ms or 0.0, reuse.stop_reason,
                          speculative=False)
    return AutoregressiveRunner(target_model, list(eos), 0.0).generate(prompt_ids, max_new_tokens)


def check_version(obj: Mapping[str, Any]) -> None:
    """Refuse a trace line written by another version of this module, saying how to rebuild it."""
    version = obj.get("trace_version")
    if version == TRACE_VERSION:
        return
    what = f"{obj.get('pair') or '?'} / {obj.get('task') or '?'}, max_new_tokens={obj.get('max_new_tokens')}"
    if isinstance(version, int) and version < TRACE_VERSION:
        raise ValueError(
            f"trace_version {version} ({what}) is older than this code's {TRACE_VERSION}: version 2 stores the "
            "entropy and margin of every rollout step and traces rollouts as long as any round can draft. "
            "Rebuild it: python -m runners.replay trace pair=... task=... max_new_tokens=... (or --results DIR)")
    raise ValueError(f"trace_version {version!r} ({what}) is not {TRACE_VERSION}: written by another version "
                     "of specbench; rebuild it with python -m runners.replay trace")
