"""Loading models and tokenizers, and the facts a job reads off a loaded model.

A model is named by a ``specbench.config.ModelSpec`` (``conf/model/*.yaml``, composed into
``pair.target`` / ``pair.draft``): where its weights come from (``specbench.models.sources``), its
dtype, device, placement, optimum-quanto weight quantization (``int8`` / ``int4``) and, for
drafts, the ``int8_dynamic`` transform. ``load_model`` loads one, uncached; a job loads its pair
through ``specbench.models.cache`` (``MODEL_CACHE``, ``load_pair``).
"""

from __future__ import annotations

import copy
import importlib.util
import os
from typing import Any

from specbench.config import ModelSpec
from specbench.models.sources import resolve
from specbench.registry import ConfigError


def _torch_dtype(name: str) -> Any:
    import torch

    return "auto" if name == "auto" else getattr(torch, name)


def _pretrained_args(spec: ModelSpec, cache_dir: str | os.PathLike | None) -> tuple[str, dict[str, Any]]:
    """The path and keyword arguments of a tokenizer's or config's ``from_pretrained``."""
    path, gguf = resolve(spec, cache_dir)
    kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code}
    if gguf:
        kwargs["gguf_file"] = gguf
    if spec.revision:
        kwargs["revision"] = spec.revision
    return path, kwargs


def load_tokenizer(spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> Any:
    from transformers import AutoTokenizer

    path, kwargs = _pretrained_args(spec, cache_dir)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def load_model(spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> Any:
    """Load one model in eval mode (no caching here; see ``ModelCache``)."""
    from transformers import AutoModelForCausalLM

    path, gguf = resolve(spec, cache_dir)
    kwargs: dict[str, Any] = {"dtype": _torch_dtype(spec.dtype), "trust_remote_code": spec.trust_remote_code}
    if gguf:
        kwargs["gguf_file"] = gguf
    if spec.revision:
        kwargs["revision"] = spec.revision
    if spec.device_map:
        kwargs["device_map"] = spec.device_map
    if spec.quant is not None:  # int8 / int4 weights (optimum-quanto), as GammaTune's 70B target
        from transformers import QuantoConfig

        if importlib.util.find_spec("optimum.quanto") is None:
            raise ConfigError(f"quant={spec.quant} needs optimum-quanto: pip install 'specbench[quanto]'")
        kwargs["quantization_config"] = QuantoConfig(weights=spec.quant)
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if not spec.device_map:
        model.to(spec.device)
    model.eval()
    if spec.dtype == "float16":
        check_float16_range(model, spec)
    return model


def check_float16_range(model: Any, spec: ModelSpec) -> None:
    """``ConfigError`` when a float16 model's logits are not finite on a short input (its BOS, where a
    model's largest activations sit, then a few ids): its activations overflow float16's range (±65,504)
    and every output would be garbage that still "equals" the target's own. Gemma-3-270M does: its
    residual stream reaches ~1e5 (measured on an H100, 2026-11-25); bfloat16 has float32's range.
    One forward at load time; an input that overflows only elsewhere is not caught."""
    import torch

    vocab = int(getattr(model.config, "vocab_size", 0) or 0) or 1
    bos = getattr(model.config, "bos_token_id", None)
    ids = ([int(bos)] if isinstance(bos, int) else []) + [min(i, vocab - 1) for i in (100, 1000, 20, 300, 7, 42)]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids], device=model_device(model))).logits
    if not bool(torch.isfinite(logits).all()):
        raise ConfigError(f"model {spec.name or spec.path} in float16 gives non-finite logits (its activations overflow "
                          "float16's range): use dtype=bfloat16 or float32")


def apply_transform(model: Any, transform: str | None) -> Any:
    """A transformed *copy* of ``model`` (the original is never mutated).

    ``int8_dynamic``: torch's dynamic int8 quantization of every ``Linear`` (``quantize_dynamic``) applied in place to
    a ``shared_copy`` of ``model``: the copy's ``Linear`` modules are swapped for quantized ones, which pack their own
    int8 weights (``torch/ao/quantization/quantize.py: convert``, ``swap_module``), and every other tensor (the
    embeddings above all: 671 MB of Gemma-3-270M's 1.07 GB in float32) stays ``model``'s own, read and never
    written. A deep copy of the whole model (what this did until 2026-11-29) held a second float copy of those for as
    long as the draft lived."""
    if transform is None:
        return model
    if transform == "int8_dynamic":
        import warnings

        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao deprecation notice
            return torch.ao.quantization.quantize_dynamic(shared_copy(model), {torch.nn.Linear}, dtype=torch.qint8,
                                                          inplace=True)
    raise ConfigError(f"unknown transform {transform!r}")


def shared_copy(model: Any, keep: tuple[Any, ...] = ()) -> Any:
    """A copy of ``model``'s modules sharing every parameter, buffer and packed int8 weight (``torch.ao``'s dynamic
    ``Linear`` keeps its weight outside ``parameters()``) and the objects of ``keep``: no weight is copied, and the
    copy's modules can be swapped without touching ``model``. Used by the kernel copies
    (``runners.engine.linear_kernels.kernel_copy``), the compiled draft (``runners.engine.compiled_draft``) and the
    restricted head (``specbench.models.hot_vocab.restrict_head``)."""
    import warnings

    memo: dict[int, Any] = {id(t): t for t in (*model.parameters(), *model.buffers(), *keep)}
    for module in model.modules():
        packed = getattr(module, "_packed_params", None)
        if packed is not None:
            memo[id(packed)] = packed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices
        return copy.deepcopy(model, memo)


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a generation: the model's generation config and the tokenizer's EOS."""
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return sorted(ids)


def load_generation_eos(spec: ModelSpec, tokenizer: Any, cache_dir: str | os.PathLike | None = None) -> list[int]:
    """``eos_ids`` from the model's generation config and tokenizer, without loading its weights (a server
    backend decodes with its own copy)."""
    from transformers import GenerationConfig

    path, kwargs = _pretrained_args(spec, cache_dir)
    try:
        config = GenerationConfig.from_pretrained(path, **{k: v for k, v in kwargs.items() if k == "revision"})
    except (OSError, ValueError):
        config = None
    holder = type("Holder", (), {"generation_config": config})()
    return eos_ids(holder, tokenizer)


def logits_width(model: Any) -> int:
    """How many logits a model emits per position (its head's rows; can exceed len(tokenizer))."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(getattr(head, "out_features", None), int):  # nn.Linear, and its dynamically quantized twin
        return int(head.out_features)
    weight = getattr(head, "weight", None)
    if callable(weight):  # a quantized module's weight is a method
        weight = weight()
    if weight is not None:
        return int(weight.shape[0])
    return int(model.config.vocab_size)


def max_positions(spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> int | None:
    """How many positions (prompt + generated tokens) a model can attend to, from its config alone
    (``max_position_embeddings``, or ``n_positions``; the text config of a multimodal one), without
    loading weights; None when the config does not say."""
    from transformers import AutoConfig

    path, kwargs = _pretrained_args(spec, cache_dir)
    config = AutoConfig.from_pretrained(path, **kwargs)
    config = getattr(config, "text_config", None) or config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def model_device(model: Any) -> Any:
    """The device of a model's first parameter (where its inputs go)."""
    return next(model.parameters()).device


def model_dtype(model: Any) -> Any:
    """The dtype of a model's first floating-point parameter (a quantized copy's float layers; float32 if none)."""
    import torch

    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def config_vocab_size(model: Any) -> int | None:
    """``config.vocab_size`` of a model's text config: what transformers' ``_validate_assistant``
    compares to decide whether an assistant shares the target's vocabulary (hf-bench's runtime
    choice between standard SD and SLEM/TLI, ../shared/notes/hf-bench-evaluation.md Sec. 1)."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    return int(size) if size is not None else None


def tokenizers_identical(a: Any, b: Any) -> bool:
    """Whether two tokenizers map the same token strings to the same ids (``get_vocab()`` equal)."""
    if a is b:
        return True
    try:
        return a.get_vocab() == b.get_vocab()
    except (AttributeError, NotImplementedError):
        return False


#: transformers' defaults for the sampling processors a checkpoint does not set
#: (``GenerationConfig._get_default_generation_params``, 5.23; the same values in the 4.49 fork
#: hf-bench ran: ``configuration_utils.py`` top_k=50, top_p=1.0, typical_p=1.0).
PROCESSOR_DEFAULTS = {"top_k": 50, "top_p": 1.0, "typical_p": 1.0}


def checkpoint_processors(model: Any) -> dict[str, Any]:
    """The target checkpoint's own ``top_k`` / ``top_p`` / ``typical_p`` (its ``generation_config``,
    else transformers' defaults): what ``generate`` applies when a caller passes none, as hf-bench."""
    config = getattr(model, "generation_config", None)
    out = {}
    for key, default in PROCESSOR_DEFAULTS.items():
        value = getattr(config, key, None) if config is not None else None
        out[key] = default if value is None else value
    return out
