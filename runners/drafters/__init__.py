"""Drafters: what proposes draft tokens, one proposer per file (vLLM's ``spec_decode`` layout).

``DRAFTERS`` maps a drafter key to its class, imported on first use; the keys and classes are those of
``specbench.drafter_kinds.DRAFTER_KINDS``, where each drafter declares what it is (loads a model, asks the
policy, its batched form, its trace kind, its cost and its algorithm's name), which every other part reads
instead of testing a name: the pair's draft kind or, for a draft model with another tokenizer, the
cross-vocabulary algorithm. Every class builds itself from a ``DrafterContext`` (``from_context``) once per
job, and checks its pair options before any model loads (``check_options``; a drafter with no options
accepts none); ``build_batched_drafter`` builds a kind's declared batched form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runners.engine.base import Drafter
from specbench.config import HeteroConfig
from specbench.drafter_kinds import DRAFTER_KINDS, drafter_kind
from specbench.registry import ConfigError, Registry, import_target

DRAFTERS: Registry[type[Drafter]] = Registry(
    "drafter", {name: DRAFTER_KINDS.get(name).drafter for name in DRAFTER_KINDS.names()})


@dataclass(frozen=True)
class DrafterContext:
    """What a drafter may need, built once per job: the target's tokenizer, EOS ids and logits width,
    the draft model and its tokenizer (when the pair has one), the draft kind's options, and the
    cross-vocabulary settings."""

    target_tokenizer: Any
    eos_token_ids: Iterable[int]
    target_vocab_size: int
    draft_model: Any = None
    draft_tokenizer: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    hetero: HeteroConfig = field(default_factory=HeteroConfig)


def check_drafter(name: str, options: Mapping[str, Any]) -> None:
    """Before any model loads: the drafter exists and takes these options."""
    cls = DRAFTERS.get(name)
    check = getattr(cls, "check_options", None)
    if check is not None:
        check(options)
    elif options:
        raise ConfigError(f"drafter {name!r} takes no pair.draft settings, got {sorted(options)}")


def build_drafter(name: str, ctx: DrafterContext) -> Drafter:
    return DRAFTERS.get(name).from_context(ctx)


def build_batched_drafter(name: str, ctx: DrafterContext) -> Any | None:
    """Drafter ``name``'s declared batched form (``DrafterKind.batched``) built from ``ctx``; None when it has none
    (the batched loop then runs one batch-1 drafter per row)."""
    batched = drafter_kind(name).batched
    return None if batched is None else import_target(batched).from_context(ctx)
