"""Which jobs share a device right now: honest timings under concurrent launchers.

A launcher that runs several jobs at once (submitit's local executor, a local Ray instance without
GPUs, any parallel launcher on a CPU box) makes them time each other: a speedup computed between
two such jobs measures their neighbours as much as their methods. So every job registers itself on
its device while it runs, and every record says how many jobs were on that device while it was
decoded and which (``device_id``, ``device_jobs``, ``device_neighbours`` in ``specbench.records``).

The registry is a folder per device, ``<results_dir>/.specbench/devices/<device id>/``, holding one
file per running job, named by the job's folder, exclusively ``flock``-ed by its job for as long as
the job runs (the kernel drops the lock when the job exits or is killed). Counting = listing the
folder and probing each file's lock (a file whose lock can be taken belongs to a dead job and is
removed). A file is locked under a temporary name and then renamed, so a probe never mistakes a
starting job for a dead one.

Scope (a decision): the registry lives under the results folder, so it counts the jobs of sweeps
writing there, which is what a launcher runs; jobs writing elsewhere on the same machine are not
seen. Set ``SPECBENCH_DEVICE_REGISTRY=/some/machine-wide/folder`` to count every specbench job of
the machine (or of a cluster, on a shared disk: device ids carry the host name).

A device id is ``cpu@<host>`` on CPU and ``cuda:<GPU UUID>@<host>`` on a GPU (the physical GPU, so
two Ray tasks that each see their own GPU as ``cuda:0`` do not look shared). A job whose models
span several GPUs registers on each.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import socket
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("specbench")

REGISTRY_ENV = "SPECBENCH_DEVICE_REGISTRY"


def registry_root(results_dir: str | os.PathLike) -> Path:
    env = os.environ.get(REGISTRY_ENV)
    return Path(env).expanduser() if env else Path(results_dir) / ".specbench" / "devices"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]+", "_", name)[:200]


def device_ids(devices: Iterable[str]) -> list[str]:
    """Physical device ids (module docstring) of torch device names (``cpu``, ``cuda``, ``cuda:1``)."""
    host = socket.gethostname()
    out: list[str] = []
    for name in devices:
        name = str(name)
        if name.startswith("cuda"):
            out.append(f"{_gpu_uuid(name)}@{host}")
        else:
            out.append(f"cpu@{host}")
    return sorted(set(out))


def _gpu_uuid(name: str) -> str:
    try:
        import torch

        index = int(name.split(":", 1)[1]) if ":" in name else torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            return f"cuda:{uuid}"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        return f"cuda:{visible[index]}" if index < len(visible) and visible[index] else f"cuda:{index}"
    except Exception:  # no CUDA: keep the name
        return name


class DeviceShare:
    """Registers one job on its devices (``with DeviceShare(...) as share``) and samples who else is
    there (``sample()``): the most jobs seen at once per device and the other jobs' names."""

    def __init__(self, results_dir: str | os.PathLike, job_name: str, devices: Iterable[str]) -> None:
        self.root = registry_root(results_dir)
        self.job_name = _safe(job_name)
        self.ids = device_ids(devices)
        self._fds: list[int] = []
        self._paths: list[Path] = []
        self.warned = False

    @property
    def device_id(self) -> str:
        return ",".join(self.ids)

    def __enter__(self) -> DeviceShare:
        import fcntl

        for dev in self.ids:
            folder = self.root / _safe(dev)
            folder.mkdir(parents=True, exist_ok=True)
            final = folder / f"{self.job_name}.{os.getpid()}"
            tmp = folder / f".{self.job_name}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(tmp, final)
            self._fds.append(fd)
            self._paths.append(final)
        return self

    def __exit__(self, *exc: object) -> None:
        for path in self._paths:
            path.unlink(missing_ok=True)
        for fd in self._fds:
            os.close(fd)
        self._fds, self._paths = [], []

    def running(self) -> list[str]:
        """Names of the jobs registered on this job's devices now (itself included), live ones only."""
        import fcntl

        names: set[str] = set()
        own = {p.name for p in self._paths}
        for dev in self.ids:
            folder = self.root / _safe(dev)
            try:
                entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
            except OSError:
                continue
            for path in entries:
                name = path.name.rsplit(".", 1)[0]
                if path.name in own:
                    names.add(name)
                    continue
                try:
                    fd = os.open(path, os.O_RDWR)
                except OSError:
                    continue  # removed meanwhile
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        names.add(name)  # held: a live job
                    continue
                finally:
                    os.close(fd)
                path.unlink(missing_ok=True)  # its job died without cleaning up
        return sorted(names)

    def sample(self) -> tuple[int, list[str]]:
        """``(jobs on the device now, the others' names)``; warns once per job when it is shared."""
        names = self.running()
        others = [n for n in names if n != self.job_name]
        count = len(others) + 1
        if others and not self.warned:
            self.warned = True
            log.warning(
                "%d jobs share %s (%s): this job's timings are not comparable with sequential runs; "
                "its records say so (device_jobs, device_neighbours)",
                count, self.device_id, ", ".join(others[:4]) + (" ..." if len(others) > 4 else ""),
            )
        return count, others
