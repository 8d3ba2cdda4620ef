"""What ``run.py`` checks before Hydra touches the disk: ``ResultsDirCheck``.

Hydra creates the job folder (``hydra.run.dir``) or the sweep folder (``hydra.sweep.dir``), both
under ``results_dir``, before the job's own validation runs (``hydra/_internal/hydra.py:
Hydra.run`` calls ``callbacks.on_run_start`` and then ``core/utils.py: run_job``, which makes the
folder). A ``results_dir`` that cannot be created (its parent is a file, or is not writable) would
end there in a traceback. This callback runs first (``conf/config.yaml``: ``hydra.callbacks``, listed
before the sweep report, which writes into the sweep folder): one line naming ``results_dir`` on
stderr, exit status 2, nothing written, as for every other bad value (``runners.jobs.run_one.run_cli_job``).
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback

from specbench.job_folders import check_results_dir
from specbench.registry import ConfigError


class ResultsDirCheck(Callback):
    """Hydra callback (``hydra.callbacks.results_dir``): ``results_dir`` checked on run and multirun
    start (module docstring). Hydra's ``Callbacks`` turns an ``Exception`` from a callback into a
    warning and goes on, so a bad folder ends the process here with ``SystemExit(2)``."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        check_or_exit(config)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        check_or_exit(config)


def check_or_exit(config: Any) -> None:
    try:
        value = config.results_dir
    except Exception:  # an interpolation only Hydra's job can resolve: the job validates it
        return
    try:
        check_results_dir(value)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
