"""How a job decodes, typed: the method (``conf/method/*.yaml``: which loop runs and the γ policy's knobs)
and the cross-vocabulary algorithm (``conf/hetero/*.yaml``), validated at the boundary
(``specbench.config.JobConfig.from_mapping``).

Defaults are written once: a node's default is its dataclass field's (``HeteroConfig``), or the first of
its choices (``AR_CACHES``, ``AR_LOOPS``, ``SLEM_GAMMA``, ``TLI_PROCESSORS``); ``from_mapping`` reads a key
that is absent from there, and the YAML files that restate one are checked against it
(``tests/specbench/test_config.py``).

**One source of a method's defaults: its YAML** (``conf/method/<name>.yaml``). Every knob a method
has is written there, with a comment saying why; the job copies them into every record (``method_params``) and keys
the record by them (``method_key``, below); the replay reads the same file (``runners.replay.grid.load_method``). The
YAML, not the policy's constructor, because a *method* is the YAML: one policy class backs several methods
(``hf_heuristic`` and ``hf_heuristic_carryover``, ``banditspec`` and ``banditspec_exp3``), a sweep overrides the
YAML's keys (``method.eta=0.5``), and a record must state what ran, which is the config, not a signature. A policy's
constructor keeps defaults only so it can be built by hand (tests, scripts); they equal its own YAML's
(``conf/method/<policy>.yaml``), checked by ``tests/methods/test_policies.py``. (The cross-vocabulary algorithm and an
AR method's ``cache`` / ``loop`` are typed nodes: their defaults are the dataclass's, as the paragraph above says.)

A method variant's identity is written once, by the job (``method_key``, into every record): the method's name
tagged with every knob off its default in ``conf/method/<name>.yaml`` at run time (``gammatune[eta=0.5]``), then the
cross-vocabulary algorithm's knobs off ``conf/hetero/<name>.yaml``. Two legacy spellings are kept:
``transient: false`` (where the default is true) reads ``carryover``, ``expand_on: X`` reads ``expand=X``; a
method with no YAML file (a policy run by its registry name) has no known defaults and only those two tags apply.
A replayed method spelled ``NAME:key=value`` (``runners.replay.grid.load_method``) is ``NAME`` with those
overrides, keyed alike. ``analysis`` reads the key and the knobs from the record (every committed record carries
them: ``scripts/migrate_method_identity.py`` migrated the older ones once); only a row that has none, a hand-made
one, is keyed by this rule against today's files, as a job would key it today.

A method's (a rule's) ``display`` is how tables name it: presentation, not a knob (``NOT_KNOBS``; out of folder names
and the drift check, ``specbench.job_folders.PRESENTATION_KEYS``). The job writes it into each record
(``MethodConfig.display``, ``hetero_display``), so ``analysis`` names rows from the records too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from specbench.checks import check_choice, check_int, check_str, field_names, only_known
from specbench.drafter_kinds import cross_vocabulary_kinds, drafter_kind
from specbench.paths import CONF_DIR
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
    #: how tables and figures name the method (the YAML's ``display``; None: its ``name``): presentation, not a knob,
    #: so it is in no ``params``, no ``method_key`` and no drift check (``specbench.job_folders.PRESENTATION_KEYS``)
    display: str | None = None

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any]) -> MethodConfig:
        if not isinstance(node, Mapping):
            raise ConfigError(f"method must be a mapping, got {node!r}")
        values = dict(node)
        name = check_str("method.name", values.pop("name", None))
        display = check_str("method.display", values.pop("display", None), optional=True)
        runner = check_choice("method.runner", values.pop("runner", None), RUNNERS)
        policy = values.pop("policy", None)
        if runner != "ar":
            check_str("method.policy", policy)
        else:
            only_known(values, "method (runner ar)", ("cache", "loop"))
            check_choice("method.cache", values.get("cache", AR_CACHES[0]), AR_CACHES)
            check_choice("method.loop", values.get("loop", AR_LOOPS[0]), AR_LOOPS)
        return cls(name, runner, policy, values, display)

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


#: what ``hetero=`` may name besides the cross-vocabulary drafters (``hetero_names``)
HETERO_CHOICES = ("auto", "none")
SLEM_GAMMA = ("draft_tokens", "target_tokens")  # runners.drafters.slem: what γ counts
TLI_PROCESSORS = ("before_restrict", "after_restrict")  # runners.drafters.tli: processors, then shared tokens | reverse


def hetero_names() -> tuple[str, ...]:
    """What ``hetero=`` may name: ``auto``, ``none`` and every cross-vocabulary drafter
    (``specbench.drafter_kinds.cross_vocabulary_kinds``: its declaration, never a list here)."""
    return (*HETERO_CHOICES, *cross_vocabulary_kinds())


def _check_settings(name: str, values: Mapping[str, Any]) -> None:
    """A key of the ``hetero`` node that is another algorithm's setting (its declared ``settings``) is refused: a
    setting of a rule ``auto`` may choose (``auto_at``) is ``auto``'s too."""
    for rule in cross_vocabulary_kinds():
        kind = drafter_kind(rule)
        allowed = name == rule or (name == "auto" and kind.auto_at is not None)
        given = [k for k in kind.settings if values.get(k) is not None or (k in values and kind.auto_at is None)]
        if given and not allowed:
            also = " (and auto)" if kind.auto_at is not None else ""
            raise ConfigError(f"hetero.{given[0]} is a setting of hetero={rule}{also}; hetero={name} has none")


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
    display: str | None = None  # how tables name the rule (the YAML's ``display``; presentation, as MethodConfig's)

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> HeteroConfig:
        values = only_known(node or {}, "hetero", field_names(cls))
        name = check_choice("hetero", values.get("name", cls.name), hetero_names())
        _check_settings(name, values)
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
            display=check_str("hetero.display", values.get("display"), optional=True),
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


# ---------------------------------------------------------------------- a variant's identity (module docstring)

NOT_KNOBS = ("name", "runner", "policy", "display")


@cache
def _yaml_items(folder: str, name: str) -> tuple[tuple[str, Any], ...] | None:
    """The top-level items of ``<folder>/<name>.yaml``, in the file's order (read once); None without such a file."""
    import yaml

    path = Path(folder) / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        return None
    node = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return tuple((str(k), v) for k, v in node.items()) if isinstance(node, Mapping) else None


def _yaml_knobs(folder: str, name: str) -> dict[str, Any] | None:
    items = _yaml_items(folder, name)
    return None if items is None else {k: v for k, v in items if k not in NOT_KNOBS}


def _yaml_display(folder: str, name: str) -> str | None:
    display = dict(_yaml_items(folder, name) or ()).get("display")
    return display if isinstance(display, str) and display else None


def yaml_display(name: str | None, conf_dir: str | Path | None = None) -> str | None:
    """The ``display`` of ``conf/method/<name>.yaml``, else of ``conf/hetero/<name>.yaml`` (a rule's), as a job would
    write it today; None without either. ``analysis`` names a row by it only when no record names it."""
    if not isinstance(name, str) or not name:
        return None
    conf = Path(conf_dir or CONF_DIR)
    return _yaml_display(str(conf / "method"), name) or _yaml_display(str(conf / "hetero"), name)


def hetero_display(rule: str | None, node: HeteroConfig | None = None, conf_dir: str | Path | None = None) -> str | None:
    """The display name of the cross-vocabulary rule that ran (``rule``: ``JobConfig.hetero_rule``): the job's node's
    when it names that rule, else ``conf/hetero/<rule>.yaml``'s (``hetero=auto`` resolves to ``slem`` or ``tli``);
    None for one vocabulary or a rule without one."""
    if not rule:
        return None
    if node is not None and node.name == rule and node.display:
        return node.display
    return _yaml_display(str(Path(conf_dir or CONF_DIR) / "hetero"), rule)


def method_defaults(name: str, conf_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The knobs of ``conf/method/<name>.yaml`` (``NOT_KNOBS`` left out), in the file's order;
    None when there is no such file."""
    return _yaml_knobs(str(Path(conf_dir or CONF_DIR) / "method"), name)


def hetero_defaults(name: str, conf_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The knobs of ``conf/hetero/<name>.yaml`` (``NOT_KNOBS`` left out); None when there is no such file."""
    return _yaml_knobs(str(Path(conf_dir or CONF_DIR) / "hetero"), name)


def fmt_value(value: Any) -> str:
    """A knob's value as a tag can hold it (no ``,``, ``[`` or ``]``): ``0.5``, ``true``, lists joined by ``/``,
    a path by its file name."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "/".join(fmt_value(v) for v in value)
    if isinstance(value, Mapping):
        return "/".join(f"{k}:{fmt_value(v)}" for k, v in sorted(value.items()))
    text = str(value)
    if "/" in text or "\\" in text:
        text = Path(text).name
    return text.replace(",", ";").replace("[", "(").replace("]", ")")


def knob_tag(key: str, value: Any, default: Any) -> str:
    """The tag of a knob that differs from its default (module docstring)."""
    if key == "transient" and value is False and default is not False:
        return "carryover"
    if key == "expand_on":
        return f"expand={fmt_value(value)}"
    return f"{key}={fmt_value(value)}"


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default or (isinstance(value, bool) and isinstance(default, bool) and value == default)
    if isinstance(value, int | float) and isinstance(default, int | float):
        return math.isclose(float(value), float(default), rel_tol=0, abs_tol=1e-12)
    if isinstance(value, list | tuple) and isinstance(default, list | tuple):
        return len(value) == len(default) and all(_same(a, b) for a, b in zip(value, default, strict=True))
    return value == default


def differing_knobs(params: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> list[tuple[str, Any, Any]]:
    """``(key, value, default)`` of every knob of ``params`` that is not at its default, in the defaults' order,
    then any knob the defaults do not know (alphabetically). With no defaults (``None``), only the two legacy
    tags' knobs: ``transient: false`` and ``expand_on: drafted``."""
    if defaults is None:
        legacy = [("transient", False, True), ("expand_on", "drafted", "gamma")]
        return [(k, v, d) for k, v, d in legacy if k in params and params[k] == v]
    known = [(k, params[k], d) for k, d in defaults.items() if k in params and not _same(params[k], d)]
    extra = [(k, params[k], None) for k in sorted(params) if k not in defaults and k not in NOT_KNOBS]
    return known + extra


def variant_tags(method: str, params: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None,
                 hetero: str | None = None, hetero_params: Mapping[str, Any] | None = None,
                 hetero_knobs: Mapping[str, Any] | None = None) -> list[str]:
    """The variant tags of a method that ran with ``params`` against ``defaults`` (module docstring), then, for a
    cross-vocabulary algorithm that ran (``hetero``, its config node ``hetero_params``), its knobs off
    ``hetero_knobs`` (its YAML's; None: no tags)."""
    tags = [knob_tag(k, v, d) for k, v, d in differing_knobs(params or {}, defaults)]
    if "carryover" in tags and "carryover" in method:
        tags.remove("carryover")  # hf_heuristic_carryover's name already says it
    if isinstance(hetero, str) and hetero and isinstance(hetero_params, Mapping) and hetero_knobs is not None:
        knobs = {k: v for k, v in hetero_params.items() if k not in NOT_KNOBS}
        tags += [knob_tag(k, v, d) for k, v, d in differing_knobs(knobs, hetero_knobs)]
    return tags


def tagged(method: str, tags: list[str]) -> str:
    """``method[tag,tag]`` (``method`` alone without tags)."""
    return f"{method}[{','.join(tags)}]" if tags else method


def method_key(method: str, params: Mapping[str, Any] | None, hetero: str | None = None,
               hetero_params: Mapping[str, Any] | None = None, conf_dir: str | Path | None = None) -> str:
    """The identity a job writes into its records (``specbench.records.Record.method_key``): ``method`` tagged with
    its knobs off today's ``conf/method/<method>.yaml`` and the cross-vocabulary algorithm's (``hetero``: the rule
    that ran, ``hetero_params``: the job's ``hetero`` node) off ``conf/hetero/<name>.yaml`` (module docstring)."""
    hetero_knobs = None
    if isinstance(hetero, str) and hetero and isinstance(hetero_params, Mapping):
        hetero_knobs = hetero_defaults(str(hetero_params.get("name") or hetero), conf_dir)
    return tagged(method, variant_tags(method, params, method_defaults(method, conf_dir), hetero, hetero_params,
                                       hetero_knobs))


def parse_spelling(spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME:key=value,key=value`` (the replay's spelling of a method with overrides, values read as YAML) ->
    ``(NAME, {key: value})``; raises ``ConfigError`` on an item that is not ``key=value``."""
    import yaml

    name, _, rest = spec.partition(":")
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"method {spec!r}: {item!r} is not key=value")
        overrides[key.strip()] = yaml.safe_load(value)
    return name, overrides
