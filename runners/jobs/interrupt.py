"""Ctrl-C during a job or a sweep: once finishes the prompt in flight (records it) and stops; twice
stops at once (the prompt in flight is lost; everything before it is kept).

``StopAfterCurrentPrompt`` holds SIGINT while a job (``runners.jobs.job.run_job``) or an interleaved
sweep (``runners.jobs.interleave``) decodes. A Ctrl-C that came during a job's last prompt lets that
job complete; ``stop_sweep()`` then marks the process so that later jobs of the sweep do not start
(``sweep_stopped()``, checked by ``runners.jobs.run_one.run_cli_job``).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("specbench")

STOP_REQUESTED = False  # set by a Ctrl-C that came during a job's last prompt: later jobs do not start


def stop_sweep() -> None:
    """Later jobs of this process's sweep do not start (a Ctrl-C came during a job's last prompt)."""
    global STOP_REQUESTED
    STOP_REQUESTED = True


def sweep_stopped() -> bool:
    """Whether a Ctrl-C asked this process's sweep to stop (``stop_sweep``)."""
    return STOP_REQUESTED


class StopAfterCurrentPrompt:
    """Ctrl-C (SIGINT) once: finish the prompt in flight, record it, then stop.
    Twice: stop at once (the prompt in flight is lost; everything before it is kept)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("Ctrl-C: stopping after the current prompt (press again to stop now)")

    def __enter__(self) -> StopAfterCurrentPrompt:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
