"""Timing: ``time.perf_counter`` on CPU; CUDA events with one synchronize at read time on GPU."""

from __future__ import annotations

import time
from typing import Any


class Timer:
    """Marks points in time during one generation; ``read()`` returns ms since ``start()``.

    On CUDA, each mark records an event on the current stream and ``read()``
    synchronizes once; nothing in between forces a sync.
    """

    def __init__(self, device: Any = "cpu") -> None:
        self.cuda = str(device).startswith("cuda")
        self._marks: dict[str, Any] = {}
        self._start: Any = None

    def _now(self) -> Any:
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        self._marks.clear()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        self._start = self._now()

    def mark(self, name: str) -> None:
        self._marks[name] = self._now()

    def read(self) -> dict[str, float]:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            return {k: self._start.elapsed_time(ev) for k, ev in self._marks.items()}
        return {k: (t - self._start) * 1000.0 for k, t in self._marks.items()}
