"""``hydra/launcher=interleaved``: Hydra's side of the interleaved sweep (``runners.jobs.interleave``).

    python run.py -m hydra/launcher=interleaved method=gammatune,gammatune_plus gamma=1,2,4,8
    python run.py -m hydra/launcher=interleaved hydra.launcher.seed=1 repeats=3 experiment=mini_gammatune_table2

The launcher composes every job of the sweep exactly as Hydra's basic launcher does (the same
``load_sweep_config``, job folders from ``hydra.sweep.subdir``, ``.hydra/`` files and job callbacks,
through ``hydra.core.utils.run_job``), but the task it runs there only collects each job's config and
folder; then ``InterleavedSweep`` decodes all of them round by round in this process. Every job
returns like a job of ``run.py`` under the basic launcher: failures are in the job's ``summary.json``
and the sweep report, which exits 1 at the end when a job failed or was refused.

Hydra instantiates launchers (and sweepers) only from its ``hydra_plugins`` namespace; this one is registered
under ``hydra_plugins.specbench.InterleavedLauncher`` by ``register()`` (``Plugins.register``, Hydra's API
for plugins that are not installed as a ``hydra_plugins`` package), which ``run.py`` calls; so is the sweeper
that keeps a sweep's added baseline free of the methods' knobs (``runners.jobs.baselines.BaselineSweeper``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger("specbench")

PLUGIN_MODULE = "hydra_plugins.specbench"


class InterleavedLauncher(Launcher):
    """Hydra launcher: the sweep's jobs in one process, interleaved prompt turn by prompt turn.
    ``seed``: the shuffle seed of the rounds (recorded); ``progress``: one progress bar per pair; ``costs``: time the
    per-call costs in every round (``runners.jobs.sweep_costs``: what the analysis' modeled speedups charge);
    ``scheme``: the rounds' order (``runners.jobs.round_order.SCHEMES``; ``balanced`` unless re-running an earlier sweep)."""

    def __init__(self, seed: int = 0, progress: bool = True, costs: bool = True, scheme: str = "balanced") -> None:
        from runners.jobs.round_order import SCHEMES

        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"hydra.launcher.scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
        self.scheme = str(scheme)
        self.seed = int(seed)
        self.progress = bool(progress)
        self.costs = bool(costs)
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra.core.hydra_config import HydraConfig

        from runners.jobs.interleave import InterleavedSweep

        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info("Interleaving %d jobs (seed %d, %s order)", len(job_overrides), self.seed, self.scheme)
        collected: list[tuple[Any, str]] = []

        def collect(cfg: DictConfig) -> None:
            """The task Hydra runs per job here: note its config (resolved while Hydra still holds the
            job's own settings) and its folder."""
            try:
                plain: Any = OmegaConf.to_container(cfg, resolve=True)
            except Exception:  # resolved again, and refused with its own error, when the job opens
                plain = cfg
            collected.append((plain, HydraConfig.get().runtime.output_dir))

        returns: list[JobReturn] = []
        for idx, overrides in enumerate(job_overrides):
            idx = initial_job_idx + idx
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = idx
                sweep_config.hydra.job.num = idx
            returns.append(run_job(hydra_context=self.hydra_context, task_function=collect, config=sweep_config,
                                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir"))
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        InterleavedSweep(collected, sweep_dir, seed=self.seed, progress=self.progress, costs=self.costs,
                         scheme=self.scheme).run()
        for ret in returns:  # like run.py's jobs in a multirun: a failure is in its summary and the report
            ret.status = JobStatus.COMPLETED
            ret.return_value = None
        return returns


def register() -> None:
    """Make specbench's Hydra plugins instantiable: ``hydra/launcher=interleaved`` (module docstring) and
    ``hydra/sweeper=baseline`` (``runners.jobs.baselines.BaselineSweeper``); idempotent. Hydra checks a
    ``_target_`` against its plugin registry and then imports it by name, so each class is registered
    (``Plugins.register``) under the module ``hydra_plugins.specbench``, put in ``sys.modules``."""
    from runners.jobs.baselines import BaselineSweeper

    for cls in (InterleavedLauncher, BaselineSweeper):
        _register(cls)


def _register(cls: type) -> None:
    """``cls`` as the Hydra plugin ``hydra_plugins.specbench.<its name>`` (``register``)."""
    import sys
    import types

    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()
    if f"{PLUGIN_MODULE}.{cls.__name__}" in plugins.class_name_to_class:
        return
    module = sys.modules.get(PLUGIN_MODULE) or types.ModuleType(PLUGIN_MODULE, "specbench's Hydra plugins")
    alias = type(cls.__name__, (cls,), {"__module__": PLUGIN_MODULE})
    setattr(module, cls.__name__, alias)
    sys.modules[PLUGIN_MODULE] = module
    # Hydra imports the parent first: where no Hydra plugin is installed (the submitit / Ray launchers
    # install the namespace ``hydra_plugins``), there is none to import (seen on a bare GPU image)
    try:
        import hydra_plugins  # noqa: F401
    except ImportError:
        parent = types.ModuleType("hydra_plugins", "Hydra's plugin namespace")
        parent.__path__ = []  # type: ignore[attr-defined]
        sys.modules["hydra_plugins"] = parent
    sys.modules["hydra_plugins"].specbench = module  # type: ignore[attr-defined]
    plugins.register(alias)
