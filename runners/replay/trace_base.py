"""What every greedy trace shares (``runners.replay.trace.Trace`` of a draft model, ``runners.replay.trace_lookup.
LookupTrace`` of prompt lookup): the format's version and its check, the float32 confidences' packing, the views
every trace answers, and the target's greedy pass both kinds start from. Its own module so that the two trace kinds
import it and not each other (no import cycle ``trace`` <-> ``trace_lookup``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
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


@dataclass
class TraceViews:
    """What every trace (a draft model's, prompt lookup's) holds of its prompt turn, the target's greedy output
    (``tokens``) and where it came from, written and read alike by both kinds (``head_json``, ``head_kwargs``),
    and what it answers from ``tokens`` and its agreement runs ``_agree`` (set by the kind's
    ``__post_init__``). The descriptive fields after ``tokens`` are keyword-only, so each kind's own fields
    follow ``tokens`` positionally."""

    prompt_id: str
    turn: int
    prompt_tokens: int
    max_new_tokens: int
    gamma_max: int
    eos: tuple[int, ...]
    tokens: list[int]
    _: KW_ONLY
    category: str = ""
    stop_reason: str = ""
    pair: str = ""
    task: str = ""
    target: str = ""
    draft: str = ""
    ar_wall_ms: float | None = None
    ar_ttft_ms: float | None = None
    near_ties: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    _agree: list[int] = field(init=False, repr=False, compare=False, default_factory=list)

    kind = "model"
    asks_policy = True  # the replay asks stop_drafting after each rollout token, as the drafter it traces does
    chooses_source = False  # each round's proposer is chosen per round (``HybridTrace.source``)

    def head_json(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A trace line: the common fields around the kind's own ``body`` (``kind`` named unless ``model``)."""
        return {
            "trace_version": TRACE_VERSION, **({} if self.kind == "model" else {"kind": self.kind}),
            "pair": self.pair, "task": self.task, "target": self.target, "draft": self.draft,
            "prompt_id": self.prompt_id, "turn": self.turn, "category": self.category,
            "prompt_tokens": self.prompt_tokens, "max_new_tokens": self.max_new_tokens, "gamma_max": self.gamma_max,
            "eos": list(self.eos), "new_tokens": self.n, "stop_reason": self.stop_reason, "tokens": self.tokens,
            **body,
            "ar_wall_ms": self.ar_wall_ms, "ar_ttft_ms": self.ar_ttft_ms, "near_ties": self.near_ties,
            "extra": self.extra,
        }

    @staticmethod
    def head_kwargs(obj: Mapping[str, Any]) -> dict[str, Any]:
        """The common fields of a trace line (``head_json``'s), as constructor arguments; the version checked."""
        check_version(obj)
        return {
            "prompt_id": str(obj["prompt_id"]), "turn": int(obj.get("turn", 1)),
            "prompt_tokens": int(obj["prompt_tokens"]), "max_new_tokens": int(obj["max_new_tokens"]),
            "gamma_max": int(obj["gamma_max"]), "eos": tuple(obj.get("eos") or ()),
            "tokens": [int(x) for x in obj["tokens"]],
            "category": str(obj.get("category") or ""), "stop_reason": str(obj.get("stop_reason") or ""),
            "pair": str(obj.get("pair") or ""), "task": str(obj.get("task") or ""),
            "target": str(obj.get("target") or ""), "draft": str(obj.get("draft") or ""),
            "ar_wall_ms": obj.get("ar_wall_ms"), "ar_ttft_ms": obj.get("ar_ttft_ms"),
            "near_ties": int(obj.get("near_ties") or 0), "extra": dict(obj.get("extra") or {}),
        }

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
    from runners.engine.factory import build_runner

    if reuse is not None:
        if reuse.prompt_tokens != len(prompt_ids) or reuse.max_new_tokens != max_new_tokens:
            raise ValueError(f"{reuse.prompt_id}/{reuse.turn}: the reused trace has another prompt or length")
        return Generation(list(reuse.tokens), reuse.ar_ttft_ms or 0.0, reuse.ar_wall_ms or 0.0, reuse.stop_reason,
                          speculative=False)
    return build_runner("ar", target_model, eos).generate(prompt_ids, max_new_tokens)


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
