"""What a job's inputs must satisfy once the target's tokenizer is known, before any weights load.

``check_inputs(prepared)`` loads the target's tokenizer and reads its config (no weights) and
refuses, with a one-line ``ConfigError`` naming the prompt and the numbers:

* ``max_new_tokens`` that the target could never reach (``max_new_tokens >= positions``);
* a first turn whose tokens plus ``max_new_tokens`` exceed the target's positions, unless the task
  asks for truncation (``task.truncate: left | right``): then the prompt is cut to fit and the
  record says how many tokens went (``extra.truncated_tokens``).

Later turns of a multi-turn prompt hold the model's own earlier answers, so their length is known
only when they are decoded: ``fit_prompt`` applies the same rule there (the job then fails with the
same message, recorded, and the sweep goes on). A draft model with fewer positions than the
target is a warning (many drafts run past their trained length without failing), named in the log.

``turn_input`` is what one prompt turn feeds the models (``TurnInput``): the turn after the job's own
earlier answers, in ``task.prompt_format`` (``specbench.tasks.encode_turn``), fitted by ``fit_prompt``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from runners.jobs.build import Job
from specbench.config import JobConfig
from specbench.models import max_positions
from specbench.models.cache import MODEL_CACHE
from specbench.registry import ConfigError
from specbench.tasks import Prompt, encode_turn

log = logging.getLogger("specbench")


def positions_limit(config: JobConfig) -> int | None:
    """The target's positions (None when its config does not say)."""
    return max_positions(config.pair.target, config.cache_dir)


def fit_prompt(ids: list[int], config: JobConfig, limit: int | None, where: str) -> tuple[list[int], int]:
    """``(ids, tokens dropped)``: the prompt as fed, cut on ``task.truncate``'s side when it asks and
    the prompt plus ``max_new_tokens`` would not fit the target's ``limit`` positions; else refused."""
    if limit is None or len(ids) + config.max_new_tokens <= limit:
        return ids, 0
    room = limit - config.max_new_tokens
    side = config.task.truncate
    if side is None or room < 1:
        raise ConfigError(
            f"{where} has {len(ids)} tokens; with max_new_tokens={config.max_new_tokens} it needs "
            f"{len(ids) + config.max_new_tokens} positions and the target {config.pair.target.label} has {limit}: "
            f"shorten it, lower max_new_tokens, or set task.truncate=left|right"
        )
    dropped = len(ids) - room
    return (ids[dropped:] if side == "left" else ids[:room]), dropped


def check_inputs(config: JobConfig, prompts: list[Prompt]) -> int | None:
    """Refuse what cannot run (module docstring); returns the target's positions limit."""
    limit = positions_limit(config)
    if limit is not None and config.max_new_tokens >= limit:
        raise ConfigError(
            f"max_new_tokens={config.max_new_tokens} exceeds what the target {config.pair.target.label} can reach: "
            f"{limit} positions in all, prompt included; use max_new_tokens < {limit}"
        )
    draft = config.pair.draft
    if config.speculative and draft is not None and draft.model is not None and limit is not None:
        draft_limit = max_positions(draft.model, config.cache_dir)
        if draft_limit is not None and draft_limit < limit:
            log.warning("the draft %s has %d positions, fewer than the target's %d: long sequences run it past "
                        "its trained length", draft.model.label, draft_limit, limit)
    tokenizer: Any = MODEL_CACHE.tokenizer(config.pair.target, config.cache_dir)
    for prompt in prompts:
        ids, _ = encode_turn(tokenizer, [], prompt.turns[0], config.task.prompt_format)
        fit_prompt(ids, config, limit, f"prompt {prompt.prompt_id!r} of task {config.task.name!r}")
    return limit


@dataclass(frozen=True)
class TurnInput:
    """What a prompt turn feeds the models: its token ids (after ``fit_prompt``), the prompt format
    used, and how many tokens ``task.truncate`` dropped."""

    ids: list[int]
    prompt_format: str
    dropped: int = 0


def turn_input(job: Job, prompt: Prompt, turn: int, history: list[tuple[str, str]], user: str | None = None
               ) -> TurnInput:
    """The ``TurnInput`` of ``prompt``'s ``turn`` after ``history`` ((user, answer) pairs of the earlier turns)."""
    config = job.config
    ids, fmt = encode_turn(job.tokenizer, history, prompt.turns[turn - 1] if user is None else user,
                           config.task.prompt_format)
    ids, dropped = fit_prompt(ids, config, job.positions, f"prompt {prompt.prompt_id!r} turn {turn}")
    return TurnInput(ids, fmt, dropped)
