"""Timing: ``time.perf_counter`` on CPU; CUDA events with one synchronize at read time on GPU."""

from __future__ import annotations

import time
from typing import Any


class Timer:
    """Marks points in time during one generation; ``read()`` returns ms since ``start()``.

    On CUDA, each mark records an event on the current stream and ``read()``
    synchronizes once; nothing in between forces a sync.

    Phases: ``lap(phase)`` attributes the time since the previous boundary (the
    last ``mark`` or ``lap``, or ``start``) to ``phase``; ``phases()`` returns the
    ms summed per phase. Laps after a mark partition the time from that mark to
    the last lap exactly (the intervals telescope). On CPU a lap is one
    ``perf_counter`` call; on CUDA it records one event (no synchronisation) and
    the intervals are read after ``read()``'s single synchronize. ``lap(phase,
    mark="end")`` closes the last phase and marks the end with one clock reading.
    """

    def __init__(self, device: Any = "cpu") -> None:
        self.cuda = str(device).startswith("cuda")
        self._marks: dict[str, Any] = {}
        self._start: Any = None
        self._last: Any = None
        self._phase_ms: dict[str, float] = {}
        self._laps: list[tuple[str, Any, Any]] = []  # CUDA: (phase, from event, to event)

    def _now(self) -> Any:
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        self._marks.clear()
        self._phase_ms.clear()
        self._laps.clear()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        self._start = self._last = self._now()

    def mark(self, name: str) -> None:
        self._marks[name] = self._last = self._now()

    def lap(self, phase: str, mark: str | None = None) -> None:
        """The time since the previous boundary belongs to ``phase``; ``mark``: also mark this instant
        under that name (the same clock reading, so phases and marks agree exactly)."""
        now = self._now()
        if mark is not None:
            self._marks[mark] = now
        if self.cuda:
            self._laps.append((phase, self._last, now))
        else:
            self._phase_ms[phase] = self._phase_ms.get(phase, 0.0) + (now - self._last) * 1000.0
        self._last = now

    def read(self) -> dict[str, float]:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            return {k: self._start.elapsed_time(ev) for k, ev in self._marks.items()}
        return {k: (t - self._start) * 1000.0 for k, t in self._marks.items()}

    def phases(self) -> dict[str, float]:
        """ms per phase (on CUDA: call after ``read()``, whose synchronize completes the events)."""
        if self.cuda:
            out: dict[str, float] = {}
            for phase, a, b in self._laps:
                out[phase] = out.get(phase, 0.0) + a.elapsed_time(b)
            return out
        return dict(self._phase_ms)


class SyncedTimer(Timer):
    """A ``Timer`` that also reads ``perf_counter`` after a ``torch.cuda.synchronize`` at every mark and
    lap, so one run yields both clocks (``read()``: CUDA events; ``wall_read()``: the synchronised host
    clock). For checking the events against the wall clock (``scripts/gpu_timing.py``); the
    extra synchronisations make it unfit for timing runs themselves. On CPU both readings are the
    same ``perf_counter`` values."""

    def __init__(self, device: Any = "cpu") -> None:
        super().__init__(device)
        self._wall: dict[int, float] = {}

    def _now(self) -> Any:
        reading = super()._now()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self._wall[id(reading)] = time.perf_counter()
        return reading

    def start(self) -> None:
        self._wall.clear()
        super().start()

    def wall_read(self) -> dict[str, float]:
        if not self.cuda:
            return self.read()
        t0 = self._wall[id(self._start)]
        return {k: (self._wall[id(ev)] - t0) * 1000.0 for k, ev in self._marks.items()}
