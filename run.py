#!/usr/bin/env python
"""specbench entry point: one job per Hydra run, a grid with ``-m``.

    python run.py                                   # the embedded default (offline, CPU)
    python run.py -m method=gammatune,gammatune_plus gamma=1,2,4,8
    python run.py -m hydra/launcher=interleaved method=gammatune,gammatune_plus gamma=1,2,4,8   # interleaved

Each job writes ``<results_dir>/<overrides>/records.jsonl`` and ``summary.json``. A sweep of adaptive
methods also runs ``method=specdecode``, the fixed-γ baseline of Table 2, unless it lists it or says
``baseline=none`` (``runners.jobs.baselines``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from runners.jobs.launcher import register as register_launcher
from specbench.config import register_resolvers

register_resolvers()
register_launcher()  # hydra/launcher=interleaved


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from runners.jobs.run_one import run_cli_job

    hc = HydraConfig.get()
    code = run_cli_job(cfg, hc.runtime.output_dir, multirun=hc.mode == RunMode.MULTIRUN)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    from pathlib import Path

    from runners.jobs.baselines import with_baseline

    # a sweep of adaptive methods also runs the fixed-γ SpecDecode it is compared with (Table 2's baseline)
    sys.argv[1:], note = with_baseline(sys.argv[1:], Path(__file__).resolve().parent / "conf")
    if note:
        print(note, file=sys.stderr)
    main()
