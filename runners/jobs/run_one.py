"""``run.py``'s job: run one job of a run or a sweep, print what it did, and return the exit status.

A bad config is one line on stderr naming the key or file, no traceback and no job folder: status 2
for a single run; in a sweep the job is listed in the sweep folder's ``invalid_jobs.jsonl`` (read by
the sweep report, ``runners.jobs.report``, which then exits 1) and the sweep goes on. A job that fails
while running is recorded in its ``summary.json`` (status 1 for a single run; the sweep goes on). After
a Ctrl-C (``runners.jobs.interrupt``) later jobs of the sweep do not start.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from runners.jobs.interrupt import sweep_stopped
from runners.jobs.report import (
    INVALID_JOBS,
    append_line,
    check_sweep_folder_visible,
    print_job_line,
    print_summary,
)
from specbench.config import JobConfig
from specbench.job_folders import nothing_left_on_bad_config
from specbench.registry import ConfigError

log = logging.getLogger("specbench")


def run_cli_job(cfg: Any, job_dir: str | Path, multirun: bool = False) -> int:
    """``run.py``'s job: run it, print its summary (a sweep: one line), and return the exit status
    (module docstring)."""
    job_dir = Path(job_dir)
    if sweep_stopped():
        raise KeyboardInterrupt("stopped by Ctrl-C")
    try:
        # the job's own settings first, without torch: a bad value is refused in about a second, not after the
        # engine's imports (3 s on a 2-core Xeon, 2026-11-29); the job then validates everything else. The sweep
        # folder's check first, as in ``open_job``: a worker that cannot see it writes nothing, not even this refusal
        check_sweep_folder_visible()
        with nothing_left_on_bad_config(job_dir):
            JobConfig.from_mapping(cfg)
        from runners.jobs.job import run_job

        summary = run_job(cfg, job_dir, progress=True)
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        if not multirun:
            return 2
        append_line(job_dir.parent / INVALID_JOBS, {"job": job_dir.name, "error": str(exc), "time": time.time()})
        return 0
    except KeyboardInterrupt:
        log.error("interrupted: records so far are kept in %s; run the same command again to resume", job_dir)
        raise
    except Exception as exc:  # crash isolation: the failure is in summary.json
        log.exception("job failed: %s (details in %s/summary.json)", exc, job_dir)
        return 0 if multirun else 1
    (print_job_line if multirun else print_summary)(job_dir, summary)
    return 0
