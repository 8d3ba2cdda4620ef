#!/usr/bin/env python
"""specbench entry point: one job per Hydra run, a grid with ``-m``.

    python run.py                                   # the embedded default (offline, CPU)
    python run.py -m method=gammatune,gammatune_plus gamma=1,2,4,8

Each job writes ``<results_dir>/<overrides>/records.jsonl`` and ``summary.json``.
"""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from runners.jobs.report import print_job_line, print_summary
from specbench.config import register_resolvers
from specbench.registry import ConfigError

register_resolvers()
log = logging.getLogger("specbench")


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    import runners.jobs.job as jobs

    hc = HydraConfig.get()
    job_dir = hc.runtime.output_dir
    multirun = hc.mode == RunMode.MULTIRUN
    if jobs.STOP_REQUESTED:
        raise KeyboardInterrupt("stopped by Ctrl-C")
    try:
        summary = jobs.run_job(cfg, job_dir, progress=True)
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        if multirun:
            return
        sys.exit(2)
    except KeyboardInterrupt:
        log.error("interrupted: records so far are kept in %s; run the same command again to resume", job_dir)
        raise
    except Exception as exc:  # crash isolation: the failure is in summary.json
        log.exception("job failed: %s (details in %s/summary.json)", exc, job_dir)
        if multirun:
            return
        sys.exit(1)
    if multirun:
        print_job_line(job_dir, summary)
    else:
        print_summary(job_dir, summary)


if __name__ == "__main__":
    main()
