"""How a job decodes, typed: the method (``conf/method/*.yaml``: which loop runs and the γ policy's knobs)
and the cross-vocabulary algorithm (``conf/hetero/*.yaml``), validated at the boundary
(``specbench.config.JobConfig.from_mapping``).

Defaults are written once: a node's default is its dataclass field's (``HeteroConfig``), or the first of
its choices (``AR_CACHES``, ``AR_LOOPS``, ``SLEM_GAMMA``, ``TLI_PROCESSORS``); ``from_mapping`` reads a key
that is absent from there, and the YAML files that restate one are checked against it
(``tests/specbench/test_config.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specbench.checks import check_choice, check_int, check_str, field_names, only_known
from specbench.registry import ConfigError

RUNNERS = ("ar", "speculative", "hf")
# an ``ar`` method's knobs; the first of each is the default
AR_CACHES = ("dynamic", "offloaded")  # runners.engine.kv.new_cache; offloaded = hf-bench's AR baseline
AR_LOOPS = ("specbench", "transformers")  # our AR loop | transformers' generate() (method=hf_native_ar)


@dataclass(frozen=True)
class MethodConfig:
    """``runner``: our autoregressive loop (``ar``), our speculative loop (``speculative``), or
    transformers' assisted generation (``hf``); ``policy``: the γ policy's registry key; ``params``:
    its knobs (checked when the policy is built, once per job, before any model loads)."""

    name: str
    runner: str
    policy: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any]) -> MethodConfig:
        if not isinstance(node, Mapping):
            raise ConfigError(f"method must be a mapping, got {node!r}")
        values = dict(node)
        name = check_str("method.name", values.pop("name", None))
        runner = check_choice("method.runner", values.pop("runner", None), RUNNERS)
        policy = values.pop("policy", None)
        if runner != "ar":
            check_str("method.policy", policy)
        else:
            only_known(values, "method (runner ar)", ("cache", "loop"))
            check_choice("method.cache", values.get("cache", AR_CACHES[0]), AR_CACHES)
            check_choice("method.loop", values.get("loop", AR_LOOPS[0]), AR_LOOPS)
        return cls(name, runner, policy, values)

    @property
    def ar_cache(self) -> str | None:
        """The KV cache of an autoregressive method (``dynamic`` | ``offloaded``); None otherwise."""
        return str(self.params.get("cache", AR_CACHES[0])) if self.runner == "ar" else None

    @property
    def ar_loop(self) -> str | None:
        """Who runs an autoregressive method: our loop (``specbench``) or transformers' ``generate()``
        (``transformers``: ``method=hf_native_ar``, ``runners.engine.hf_ar``); None otherwise."""
        return str(self.params.get("loop", AR_LOOPS[0])) if self.runner == "ar" else None

    @property
    def transient(self) -> bool | None:
        """Whether an adaptive policy restarts at every prompt turn (None: the policy has no such knob)."""
        value = self.params.get("transient")
        return value if isinstance(value, bool) else None


HETERO = ("auto", "none", "slem", "tli", "slrs", "union")
SLRS_KEYS = ("max_nodes", "max_lookahead", "draft_top_k")
SLEM_GAMMA = ("draft_tokens", "target_tokens")  # runners.drafters.slem: what γ counts
TLI_PROCESSORS = ("before_restrict", "after_restrict")  # runners.drafters.tli: processors, then shared tokens | reverse


@dataclass(frozen=True)
class HeteroConfig:
    """The cross-vocabulary algorithm (Timor et al.): ``auto`` = SLEM at temperature 0 and TLI above
    on pairs whose draft has another tokenizer (none on same-tokenizer pairs); ``none`` = one
    vocabulary; ``slem`` | ``tli`` | ``slrs`` | ``union`` = that algorithm (Algorithms 2, 4, 3, 1).
    ``lookbehind``: tokens re-encoded behind new text when re-syncing the drafter (transformers'
    default 10). SLRS only (``runners/drafters/slrs.py``): ``max_nodes`` = the expansion bound, the
    most draft forwards one position may spend computing ψ (past it the round falls back to TLI);
    ``max_lookahead`` = the threshold K of Sec. 3.3 (None: stop only once the first target token is
    determined); ``draft_top_k`` = the drafter proposes from its k most likely tokens (None: its
    whole distribution, whose ψ tree is the worst case). SLEM (``auto`` or ``slem``):
    ``slem_gamma`` = what γ counts (``draft_tokens``: γ drafter tokens, every re-tokenized target
    token verified within the budget, as transformers and hf-bench; ``target_tokens``: the proposal
    cut to γ target tokens). TLI (``auto`` or ``tli``): ``tli_processors`` = where top-k / top-p /
    typical-p act (``before_restrict``: on the whole draft vocabulary, then the shared tokens kept;
    ``after_restrict``: on the shared tokens, as transformers). null in the YAML files = the first
    of each (``runners/drafters/slem.py``, ``tli.py``)."""

    name: str = "auto"
    lookbehind: int = 10
    max_nodes: int = 32
    max_lookahead: int | None = None
    draft_top_k: int | None = 8
    slem_gamma: str = SLEM_GAMMA[0]
    tli_processors: str = TLI_PROCESSORS[0]

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> HeteroConfig:
        values = only_known(node or {}, "hetero", field_names(cls))
        name = check_choice("hetero", values.get("name", cls.name), HETERO)
        inert = [k for k in SLRS_KEYS if k in values] if name != "slrs" else []
        if inert:
            raise ConfigError(f"hetero.{inert[0]} is a setting of hetero=slrs; hetero={name} has none")
        for key, rule in (("slem_gamma", "slem"), ("tli_processors", "tli")):
            if values.get(key) is not None and name not in ("auto", rule):
                raise ConfigError(f"hetero.{key} is a setting of hetero={rule} (and auto); hetero={name} has none")
        slem_gamma = values.get("slem_gamma") or cls.slem_gamma
        tli_processors = values.get("tli_processors") or cls.tli_processors
        return cls(
            name=name,
            lookbehind=check_int("hetero.lookbehind", values.get("lookbehind", cls.lookbehind), 1),
            max_nodes=check_int("hetero.max_nodes", values.get("max_nodes", cls.max_nodes), 1),
            max_lookahead=check_int("hetero.max_lookahead", values.get("max_lookahead", cls.max_lookahead), 1, optional=True),
            draft_top_k=check_int("hetero.draft_top_k", values.get("draft_top_k", cls.draft_top_k), 1,
                                  optional=True),
            slem_gamma=check_choice("hetero.slem_gamma", slem_gamma, SLEM_GAMMA),
            tli_processors=check_choice("hetero.tli_processors", tli_processors, TLI_PROCESSORS),
        )


#: A method named ``<name>_twin`` (``conf/method/specdecode_twin.yaml``) does exactly the work of
#: ``<name>`` under another label: the A/A pair of cells from which ``analysis`` measures a sweep's
#: noise floor (two cells whose true ratio is 1).
AA_TWIN_SUFFIX = "_twin"


def aa_twin_of(method: str) -> str | None:
    """The method an A/A twin copies (``specdecode_twin`` -> ``specdecode``); None for any other method."""
    if method.endswith(AA_TWIN_SUFFIX) and len(method) > len(AA_TWIN_SUFFIX):
        return method[: -len(AA_TWIN_SUFFIX)]
    return None
