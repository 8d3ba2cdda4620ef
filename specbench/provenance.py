"""Provenance: what a result needs to be trusted later (versions, device, commit, time, lock).

``lock``: whether the environment is the one ``requirements.lock`` pins (what ``make setup``
installs by default; ``make setup LOCK=`` takes the newest versions instead): every package the lock
names installed at its locked version (``matches``), else the packages that differ.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata as md
import os
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

from specbench.paths import REPO_ROOT
from specbench.records import SCHEMA_VERSION

PACKAGES = ("torch", "transformers", "accelerate", "hydra-core", "specbench", "optimum-quanto", "wandb")
LOCK_FILE = REPO_ROOT / "requirements.lock"
MAX_LISTED = 25  # packages listed under lock.differs (all are counted)


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503: case and runs of ``-_.`` do not matter)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    """``{normalized name: version}`` of a ``name==version`` lock file (``pip freeze``'s format;
    comments, blank lines and option lines skipped)."""
    pins: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{path}: {raw.strip()!r} is not a name==version pin")
        pins[normalize(name.split("[", 1)[0].strip())] = version.strip()
    return pins


@functools.cache
def installed_versions() -> dict[str, str]:
    """``{normalized name: version}`` of every distribution on the import path (the first one found
    wins, as for ``importlib.metadata.version``); read once per process."""
    found: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize(name), dist.version)
    return found


def lock_status(path: Path = LOCK_FILE) -> dict[str, Any]:
    """Whether this environment is the lock's (module docstring): ``path`` (relative to the repo when
    inside it), ``sha256`` of the file, ``matches`` (every pinned package installed at its pinned
    version), ``n_pinned``, ``n_differ`` and up to ``MAX_LISTED`` of the differing packages,
    ``{name: {"locked": v, "installed": v or None}}``. No lock file: ``path`` and ``matches`` None."""
    try:
        pins = read_lock(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return {"path": None, "matches": None}
    installed = installed_versions()
    differ = {name: {"locked": version, "installed": installed.get(name)}
              for name, version in sorted(pins.items()) if installed.get(name) != version}
    try:
        shown = str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        shown = str(path)
    return {"path": shown, "sha256": digest, "matches": not differ, "n_pinned": len(pins),
            "n_differ": len(differ), "differs": dict(list(differ.items())[:MAX_LISTED])}


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


#: environment variables that narrow the instruction sets the CPU kernels dispatch to (ATen's own kernels, MKL's,
#: oneDNN's, and FBGEMM's int8 ones: ``FBGEMM_ENABLE_INSTRUCTIONS``, FBGEMM's ``src/Utils.cc: fbgemmEnvGetIsa``): a
#: run that emulates an older host sets them, and its provenance says which (``kernel_env``)
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
              "FBGEMM_ENABLE_INSTRUCTIONS")


def kernel_env() -> dict[str, str]:
    """The ``KERNEL_ENV`` variables this process runs under (only those set)."""
    return {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}


def device_info(device: str = "cpu") -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"device": device, "cpu": cpu_name(), "cpu_count": os.cpu_count(),
                            "torch_threads": torch.get_num_threads(),
                            # the kernels torch dispatches for (ATEN_CPU_CAPABILITY=default: no AVX2 / AVX-512)
                            "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
                            "kernel_env": kernel_env()}
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
        "lock": lock_status(),
        "git": git_commit(),
        "dtypes": dtypes or {},
        **device_info(device),
    }
