"""Drafters: what proposes draft tokens, one proposer per file (vLLM's ``spec_decode`` layout).

``DRAFTERS`` maps a drafter key to its class, imported on first use: the pair's draft kind
(``model``: a same-vocabulary model; ``prompt_lookup``; ``hybrid``: prompt lookup, else a
same-vocabulary model) or, for a draft model with another tokenizer, the cross-vocabulary
algorithm (``slem``, ``tli``, ``union``, ``slrs``). Every class builds itself from a
``DrafterContext`` (``from_context``) once per job, and checks its pair options before any model
loads (``check_options``; a drafter with no options accepts none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runners.engine.base import Drafter
from specbench.config import HeteroConfig
from specbench.registry import ConfigError, Registry

DRAFTERS: Registry[type[Drafter]] = Registry("drafter", {
    "model": "runners.drafters.model:ModelDrafter",
    "prompt_lookup": "runners.drafters.prompt_lookup:PromptLookupDrafter",
    "hybrid": "runners.drafters.hybrid:HybridDrafter",
    "slem": "runners.drafters.slem:SLEMDrafter",
    "tli": "runners.drafters.tli:TLIDrafter",
    "union": "runners.drafters.union:UnionDrafter",
    "slrs": "runners.drafters.slrs:SLRSDrafter",
})


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
