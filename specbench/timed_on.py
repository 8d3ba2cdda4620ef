"""What a latency file's forwards were timed on, and the one check of it against a run.

``TimedOn`` — torch ``threads``, the target's ``device`` (type) and ``dtype``, the kernels at batch 1
(``fast_linear``: calibrate times the plain forward, ``false``) and above it (``batch_fast_linear``, ``calibrate
--fast-linear``) — as keys of a latency file's ``meta`` (``specbench.latency.LatencyModel.timed_on``).
``check_timed_on`` is the one comparison of a file against what a run runs on: a job's prediction
(``runners.jobs.predict.find_latency``), ``lab compare`` (``runners.replay.compare``, ``compare_live``) and ``lab
confirm`` refuse a mismatch in one line naming both values and the calibrate command that fixes it. A setting
either side does not state is not compared (``TimedOn.of_meta`` reads files written before the keys). A core
type like the latency model: it imports no harness code, and no ``specbench.latency`` either (a latency model
is read through what it has: ``timed_on``, ``meta``, ``batch_sizes``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specbench.registry import ConfigError


def device_type(device: Any) -> str | None:
    """A device's type (``cuda:1`` -> ``cuda``, a ``torch.device`` too); None for none or ``auto``."""
    text = str(getattr(device, "type", device) or "").strip().lower()
    return text.split(":", 1)[0] if text and text != "auto" else None


def _kernels(value: Any) -> str | bool | None:
    """An ``engine.fast_linear`` scope as a file states it: ``False`` (the plain kernels: false, null-like
    words), ``head``, ``all``, ``onednn``, ``auto``; None (unstated) stays None."""
    if value is None:
        return None
    if value is False or (isinstance(value, str) and value.strip().lower() in ("false", "off", "none", "no", "")):
        return False
    return str(value).strip().lower()


@dataclass(frozen=True)
class TimedOn:
    """What a latency file's forwards were timed on, or what a run runs on; None: not stated (not compared).

    * ``threads``: torch's CPU threads (``torch.get_num_threads()``; on a GPU they still run the host's side);
    * ``device``: the target's device type (``cpu``, ``cuda``, ...; ``device_type``);
    * ``dtype``: the target's dtype as its model node names it (``float32``, ``bfloat16``, ...; ``auto``: unstated);
    * ``fast_linear``: the kernels at batch 1 — ``False``, the plain forward, for every calibration
      (``runners.replay.calibration.ModelTimer``); a job's batch-1 engine options are not compared with it (they
      make a measured wall time shorter than predicted by what they save: ``runners.jobs.predict``);
    * ``batch_fast_linear``: the kernels of forwards of more than one row (``calibrate --fast-linear``; a batched
      job's ``summary.json: engine.fast_linear``)."""

    threads: int | None = None
    device: str | None = None
    dtype: str | None = None
    fast_linear: str | bool | None = None
    batch_fast_linear: str | bool | None = None

    def __post_init__(self) -> None:
        threads = self.threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int | float) or threads < 1
                                    or threads != int(threads)):
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        object.__setattr__(self, "threads", None if threads is None else int(threads))
        object.__setattr__(self, "device", device_type(self.device))
        dtype = str(self.dtype).strip().removeprefix("torch.") if self.dtype is not None else None
        object.__setattr__(self, "dtype", dtype if dtype and dtype != "auto" else None)
        object.__setattr__(self, "fast_linear", _kernels(self.fast_linear))
        object.__setattr__(self, "batch_fast_linear", _kernels(self.batch_fast_linear))

    @classmethod
    def of_meta(cls, meta: Mapping[str, Any], batches: bool = False) -> TimedOn:
        """A file's ``meta`` read as ``TimedOn``. Files written before these keys: ``threads`` as stated (every
        calibration has written ``meta.threads``), ``device`` from ``meta.provenance.device`` (what calibrate
        was asked for), ``dtype`` unstated (their provenance left it empty: not compared), the batch-1
        kernels plain for a calibration (``kind: calibrated``; ``ModelTimer`` has always timed the plain forward)
        and unstated for a hand-made or paper model, the kernels above batch 1 plain for a file with batch tables
        (``batches``) that does not name them (it was timed before ``calibrate --fast-linear``)."""
        provenance = meta.get("provenance") if isinstance(meta.get("provenance"), Mapping) else {}
        threads = meta.get("threads")
        calibrated = meta.get("kind") == "calibrated"
        return cls(threads=threads if isinstance(threads, int) and not isinstance(threads, bool) else None,
                   device=meta.get("device") or provenance.get("device"),
                   dtype=meta.get("dtype"),
                   fast_linear=meta.get("fast_linear", False if calibrated else None),
                   batch_fast_linear=meta.get("batch_fast_linear", False if batches else None))

    @classmethod
    def of_job(cls, threads: int | None, target: Any, batch_fast_linear: str | bool | None = None) -> TimedOn:
        """What a job runs on: its torch ``threads`` and its target's model node (``specbench.config.pair.ModelSpec``:
        the device type, unstated under a ``device_map`` since accelerate places the model, and the dtype)."""
        return cls(threads=threads, device=None if target.device_map else target.device, dtype=target.dtype,
                   batch_fast_linear=batch_fast_linear)

    def to_meta(self) -> dict[str, Any]:
        """The stated settings as ``meta`` keys (what ``of_meta`` reads back)."""
        return {k: getattr(self, k) for k in TIMED_ON if getattr(self, k) is not None}

    def mismatches(self, run: TimedOn) -> list[str]:
        """The settings both state and on which they differ (``TIMED_ON`` order)."""
        return [k for k in TIMED_ON
                if getattr(self, k) is not None and getattr(run, k) is not None and getattr(self, k) != getattr(run, k)]


#: ``TimedOn``'s settings, as ``meta`` keys, in the order a refusal names them
TIMED_ON = ("threads", "device", "dtype", "fast_linear", "batch_fast_linear")


def _fix(key: str, value: Any) -> str:
    """The calibrate argument that times ``key`` at ``value`` (the run's)."""
    if key == "threads":
        return f"--threads {value}"
    if key in ("device", "dtype"):
        return f"pair.target.{key}={value}"
    if key == "batch_fast_linear":
        return f"--fast-linear {'false' if value is False else value}"
    return ""  # batch 1: calibrate times the plain forward only (``refusal``)


def refusal(latency: Any, run: TimedOn, who: str, where: str | os.PathLike | None = None,
            pair: str | None = None) -> str | None:
    """The one-line refusal of ``latency`` for ``who`` (a job, a live run) running on ``run``, or None when every
    setting both state agrees (``TimedOn.mismatches``): the run's values, the file's, and the calibrate command
    that times the run's (its batch sizes kept; ``--out where``)."""
    timed = latency.timed_on
    keys = timed.mismatches(run)
    if not keys:
        return None
    pair = pair or latency.meta.get("pair") or "NAME"
    args = [a for a in (_fix(k, getattr(run, k)) for k in keys) if a]
    if len(latency.batch_sizes) > 1:
        args.append("--batch-sizes " + " ".join(map(str, latency.batch_sizes)))
    if where is not None:
        args.append(f"--out {where}")
    plain = " (calibrate times batch 1 on the plain forward: run it with engine.fast_linear=false)" \
        if "fast_linear" in keys else ""
    file = f"the latency file {where}" if where is not None else "the latency model"
    return (f"{who} runs at {', '.join(f'{k}={getattr(run, k)}' for k in keys)}, but {file} was timed at "
            f"{', '.join(f'{k}={getattr(timed, k)}' for k in keys)}: recalibrate with python -m runners.replay "
            f"calibrate --pair {pair} {' '.join(args)}".rstrip() + plain)


def check_timed_on(latency: Any, run: TimedOn, who: str, where: str | os.PathLike | None = None,
                   pair: str | None = None) -> None:
    """``ConfigError`` (``refusal``'s one line) unless ``latency`` was timed on what ``run`` runs on."""
    message = refusal(latency, run, who, where, pair)
    if message is not None:
        raise ConfigError(message)
