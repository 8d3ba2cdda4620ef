"""Provenance: what a result needs to be trusted later (versions, device, commit, time)."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

from specbench.paths import REPO_ROOT
from specbench.records import SCHEMA_VERSION

PACKAGES = ("torch", "transformers", "accelerate", "hydra-core", "specbench", "optimum-quanto", "wandb")


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def git_commit(root: Path = REPO_ROOT) -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root, capture_output=True, text=True, timeout=5, check=True,
            ).stdout.strip()
        )
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: str = "cpu") -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"device": device, "cpu": cpu_name(), "cpu_count": os.cpu_count(),
                            "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda"] = torch.version.cuda
    return info


def provenance(device: str = "cpu", dtypes: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
        "git": git_commit(),
        "dtypes": dtypes or {},
        **device_info(device),
    }
