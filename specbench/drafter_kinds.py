"""What each drafter is, declared once: ``DrafterKind``, and ``DRAFTER_KINDS``, the registry of every drafter.

A drafter (``runners.drafters``) proposes tokens in the target's vocabulary. Config, jobs, replay, cost timing
and analysis need to know what a drafter *is* — whether it loads a model, asks the γ policy, has a batched
form, how the replay lab traces it, how the latency model charges it, which algorithm it is in vLLM's and
specdec_bench's names — and they read it here, from its declaration, never by testing its name.

A drafter declares itself where it is defined, on its class: ``@drafter("suffix", loads_model=False, …)`` in
``runners/drafters/suffix.py``. ``DRAFTER_KINDS`` finds the declarations by reading the sources of
``runners.drafters`` (``specbench.registry.declaration_entries``: the decorator's literal arguments, never an
import), because the config layer and ``analysis`` read them and may import neither ``runners`` (the import
contracts in ``pyproject.toml``) nor torch; a declaration names its class as ``"module:Class"``, which only
``runners.drafters`` imports (``runners.drafters.DRAFTERS`` is built from it).

A pair's ``draft.kind`` (``conf/pair/*.yaml``; a node without one is ``DEFAULT_KIND``) is a key of this registry
whose drafter proposes in the target's vocabulary; the cross-vocabulary drafters (``own_vocabulary``) are chosen
by ``hetero=`` instead, and draft with the pair's ``plain_model`` draft.

Adding a drafter: its module in ``runners/drafters/`` (declared with ``@drafter``), a pair YAML that names it, its
test: three files (``docs/pages/extending-drafter.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specbench.registry import NOT_LITERAL, Registry, declaration_entries

#: ``draft_cost``'s values: a draft-model forward per drafted token, or nothing (the round's overhead holds it)
DRAFT_COSTS = ("forward", "free")
#: ``auto_at``'s values: the temperatures at which ``hetero=auto`` picks a cross-vocabulary algorithm (0; above 0)
AUTO_AT = ("greedy", "sampled")


@dataclass(frozen=True)
class DrafterKind:
    """A drafter's declaration.

    * ``drafter``: its class, ``"module:Class"`` (imported by ``runners.drafters`` only, on first use).
    * ``loads_model``: the pair's ``draft`` node names a model to load (``conf/model/``), which the job's
      ``device`` moves (``specbench.config.pair.on_device``); otherwise the node holds only the kind's options.
    * ``plain_model``: the draft *is* that model and nothing else: transformers' assisted generation can run it
      (``method.runner=hf``), and a cross-vocabulary rule drafts with it when the tokenizers differ.
    * ``own_vocabulary``: a cross-vocabulary algorithm (Timor et al.): drafts with a ``plain_model`` draft of
      another tokenizer, chosen by ``hetero=``, never a pair's ``draft.kind``.
    * ``asks_policy``: asks the policy's ``stop_drafting`` after each drafted token (``methods.rules``); a
      deterministic proposer (no probabilities) is never asked.
    * ``batched``: its batched form at batch size > 1 (``"module:Class"``, built by ``from_context``); None:
      one batch-1 drafter per row (``runners.engine.batch_drafters.PerRowDrafters``).
    * ``trace``: the replay lab's trace kind (``runners.replay``: ``model`` rollouts, ``prompt_lookup``
      per-position proposals of a deterministic proposer with ``lookup(ids, k)``, ``hybrid``); None: the lab
      cannot replay it.
    * ``draft_cost``: how the latency model (``specbench.latency``) charges its drafted tokens (``DRAFT_COSTS``);
      None: its rounds are not modeled.
    * ``method``: the speculation algorithm, in vLLM's ``speculative_config.method`` names where vLLM has one
      (``specbench.speculation_profile``).
    * ``auto_at`` (a cross-vocabulary algorithm only): the temperatures at which ``hetero=auto`` chooses it
      (``AUTO_AT``: ``greedy`` = 0, ``sampled`` > 0; transformers' own choice for a draft of another tokenizer, which
      hf-bench ran); None: only when named.
    * ``settings`` (likewise): the ``hetero`` node's keys that are its own settings (``specbench.config.method.
      HeteroConfig``; a setting of a rule that ``auto`` may choose is a setting of ``auto`` too; any other rule
      refuses it), written into the job's summary.
    * ``fallback`` (likewise): the algorithm a round falls back to when this one cannot finish it; its records count
      ``fallback_rounds``.
    """

    drafter: str
    loads_model: bool
    asks_policy: bool
    method: str
    plain_model: bool = False
    own_vocabulary: bool = False
    batched: str | None = None
    trace: str | None = None
    draft_cost: str | None = None
    auto_at: str | None = None
    settings: tuple[str, ...] = ()
    fallback: str | None = None

    def __post_init__(self) -> None:
        if self.draft_cost not in (None, *DRAFT_COSTS):
            raise ValueError(f"draft_cost must be one of {DRAFT_COSTS} or None, got {self.draft_cost!r}")
        if self.plain_model and not self.loads_model:
            raise ValueError("a plain_model drafter loads its model")
        if self.own_vocabulary and self.trace is not None:
            raise ValueError("the replay lab traces same-vocabulary drafters only")
        if self.auto_at not in (None, *AUTO_AT):
            raise ValueError(f"auto_at must be one of {AUTO_AT} or None, got {self.auto_at!r}")
        if (self.auto_at or self.settings or self.fallback) and not self.own_vocabulary:
            raise ValueError("auto_at, settings and fallback belong to a cross-vocabulary algorithm (own_vocabulary)")


#: the kind of a pair's ``draft`` node that names none: a draft model of the target's vocabulary
DEFAULT_KIND = "model"

#: where drafters are declared (``@drafter``), read as sources
DRAFTER_PACKAGE = "runners.drafters"


def drafter(name: str, **declaration: Any) -> Callable[[type], type]:
    """The decorator a drafter's class is declared with, in its own module (``@drafter("suffix", loads_model=False,
    asks_policy=False, method="suffix", …)``: ``DrafterKind``'s fields but ``drafter``, as literals). The registry
    reads it from the source; importing the module checks that it makes a valid ``DrafterKind``."""

    def declare(cls: type) -> type:
        DrafterKind(f"{cls.__module__}:{cls.__qualname__}", **declaration)
        return cls

    return declare


class ScannedKinds:
    """``DRAFTER_KINDS``: every drafter declared with ``@drafter`` in ``package``, read from the sources the first time
    one is asked for (never imported), then cached; ``get``/``names``/``in`` as a ``Registry``."""

    def __init__(self, package: str) -> None:
        self.package = package

    @functools.cached_property
    def _registry(self) -> Registry[DrafterKind]:
        kinds = {}
        for name, (module, obj, arguments) in declaration_entries(self.package, "drafter").items():
            unread = sorted(k for k, v in arguments.items() if v is NOT_LITERAL)
            if unread:
                raise ValueError(f"{module}: @drafter({name!r}, {unread[0]}=...) must be a literal (declarations are "
                                 "read from the source, never imported)")
            kinds[name] = DrafterKind(f"{module}:{obj}", **arguments)
        return Registry("drafter", kinds)

    def get(self, name: str) -> DrafterKind:
        return self._registry.get(name)

    def names(self) -> list[str]:
        return self._registry.names()

    def __contains__(self, name: object) -> bool:
        return name in self._registry


DRAFTER_KINDS = ScannedKinds(DRAFTER_PACKAGE)


def drafter_kind(name: str) -> DrafterKind:
    """The declaration of drafter ``name`` (``ConfigError`` with "did you mean" for an unknown one)."""
    return DRAFTER_KINDS.get(name)


def draft_cost(drafter: str | None) -> str | None:
    """How the latency model charges the drafted tokens of a job whose drafter is ``drafter`` (``JobConfig.drafter``):
    its declared ``draft_cost``; ``free`` for none (the target alone drafts nothing); None when not modeled."""
    return "free" if drafter is None else drafter_kind(drafter).draft_cost


def pair_kinds() -> list[str]:
    """The kinds a pair's ``draft.kind`` may name: every drafter that proposes in the target's vocabulary."""
    return [name for name in DRAFTER_KINDS.names() if not DRAFTER_KINDS.get(name).own_vocabulary]


def cross_vocabulary_kinds() -> list[str]:
    """The cross-vocabulary algorithms (``own_vocabulary``), in the order of their modules: the values ``hetero=``
    names besides ``auto`` and ``none``."""
    return [name for name in DRAFTER_KINDS.names() if DRAFTER_KINDS.get(name).own_vocabulary]


def auto_rule(temperature: float) -> str:
    """The cross-vocabulary algorithm ``hetero=auto`` runs at ``temperature`` (its declared ``auto_at``)."""
    at = AUTO_AT[0] if temperature == 0 else AUTO_AT[1]
    chosen = [name for name in cross_vocabulary_kinds() if DRAFTER_KINDS.get(name).auto_at == at]
    if len(chosen) != 1:
        raise ValueError(f"exactly one cross-vocabulary drafter must declare auto_at={at!r}, found {chosen}")
    return chosen[0]
