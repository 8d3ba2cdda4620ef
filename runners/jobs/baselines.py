"""The fixed-γ baseline a sweep's Table 2 divides by, run with the sweep when it lacks it.

GammaTune's Table 2 is each method's throughput over SpecDecode's at the same initial γ
(``analysis.gammatune.table2``): the mission's own command, ``python run.py -m
method=gammatune,gammatune_plus gamma=1,2,4,8``, lists no SpecDecode, so its analysis had nothing to divide
by. As the AR reference runs with every job that needs it (``runners.jobs.ar_cache``), the fixed-γ
baseline runs with every sweep that needs it: ``run.py`` appends ``specdecode`` to a multirun's
``method=`` list when that list holds one of our speculative loop's methods and not ``specdecode``
(``with_baseline``), before Hydra expands the sweep. So:

* **shown**: the baseline's jobs are ordinary jobs of the sweep (``method=specdecode`` folders, one per
  pair × γ × the other swept settings), in the sweep report and in every table, and ``run.py`` says on
  stderr that it added them and how to opt out;
* **cached**: a complete job is never decoded again (``runners.jobs.job``: a job whose summary says
  ``complete`` is skipped), so a later sweep of other methods at the same settings reuses the baseline's
  folders instead of decoding them again;
* **opt out**: ``baseline=none`` on the command line (consumed here, never seen by Hydra).

The baseline takes the sweep's shared settings and none of the methods' knobs: ``python
run.py -m method=gammatune method.eta=0.25,0.5`` runs GammaTune at both η and SpecDecode once, not SpecDecode
with an ``eta`` it has no key for (Hydra's basic sweeper expands the product of every override, so the baseline
got the knob and the sweep stopped with "Key 'eta' is not in struct"). ``run.py`` also selects
``hydra/sweeper=baseline`` (``BaselineSweeper``: Hydra's basic sweeper, whose expanded jobs of the baseline drop
every ``method.*`` override and are then de-duplicated); every other override (``gamma``, ``pair``, ``hetero.*``,
``engine.*``, ...) is the sweep's, and the baseline runs at each of its values.

Only the simple form is rewritten: an override ``method=a,b,...`` of plain option names (a sweep written
with ``choice(...)``, ``glob(...)`` or an experiment's ``hydra.sweeper.params`` is left as it is: the
recipes list their baseline themselves), under Hydra's basic sweeper (a sweep that names its own
``hydra/sweeper=`` is left as it is too). Methods whose loop is transformers' (``hf_native_*``) or the
target alone (``ar*``) need no SpecDecode baseline and add none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

BASELINE = "specdecode"
OPT_OUT = "baseline=none"
MULTIRUN_FLAGS = ("-m", "--multirun")
SWEEPER = "hydra/sweeper=baseline"  # conf/hydra/sweeper/baseline.yaml: ``BaselineSweeper``
_SIMPLE = re.compile(r"^[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*$")


def _runner(conf_dir: Path, method: str) -> str | None:
    """The ``runner`` of ``conf/method/<method>.yaml`` (None: no such file or no runner)."""
    path = conf_dir / "method" / f"{method}.yaml"
    try:
        node = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return node.get("runner") if isinstance(node, dict) else None


def with_baseline(argv: Sequence[str], conf_dir: str | Path) -> tuple[list[str], str | None]:
    """``argv`` (``run.py``'s arguments, without the program name) with the sweep's fixed-γ baseline added,
    and the line to print about it (None: nothing added). ``baseline=none`` is removed and disables it."""
    args = list(argv)
    if OPT_OUT in args:
        return [a for a in args if a != OPT_OUT], None
    if not any(flag in args for flag in MULTIRUN_FLAGS):
        return args, None
    found = [i for i, a in enumerate(args) if a.startswith("method=")]
    if len(found) != 1:
        return args, None
    i = found[0]
    value = args[i].partition("=")[2]
    if not _SIMPLE.match(value):
        return args, None
    methods = value.split(",")
    if BASELINE in methods or any(a.startswith("hydra/sweeper=") for a in args):
        return args, None
    if not any(_runner(Path(conf_dir), m) == "speculative" and not m.startswith("hf_native") for m in methods):
        return args, None
    args[i] = f"method={value},{BASELINE}"
    args.append(SWEEPER)
    note = (f"run.py: the sweep also runs method={BASELINE} at each of its settings: the fixed-γ baseline of the "
            f"speedup tables (GammaTune Table 2); a complete {BASELINE} job is reused, not decoded again. "
            f"Add {OPT_OUT} to run only the methods listed.")
    return args, note


def _key(override: str) -> str:
    """The config key an expanded override sets (``+method.eta=0.5`` → ``method.eta``)."""
    return override.partition("=")[0].lstrip("+~")


def baseline_jobs(jobs: Iterable[Sequence[str]], baseline: str = BASELINE) -> list[list[str]]:
    """The sweep's expanded jobs (each a list of ``key=value`` overrides), those of ``method=<baseline>`` without
    any ``method.*`` override (another method's knobs: module docstring), each job once, in their order."""
    out: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for job in jobs:
        job = list(job)
        if f"method={baseline}" in job:
            job = [o for o in job if not _key(o).startswith("method.")]
        if tuple(job) not in seen:
            seen.add(tuple(job))
            out.append(job)
    return out


class BaselineSweeper(Sweeper):
    """Hydra's basic sweeper whose jobs of the added ``baseline`` method take the sweep's shared settings only
    (``baseline_jobs``); ``hydra/sweeper=baseline``, selected by ``run.py`` with the baseline (module docstring).
    It runs a ``BasicSweeper`` (looked up when the sweep starts: Hydra's plugin scan re-executes that module, so a
    class bound at import could be stale) whose product of the overrides passes through ``baseline_jobs``."""

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None,
                 baseline: str = BASELINE) -> None:
        super().__init__()
        self.max_batch_size, self.params, self.baseline = max_batch_size, params, str(baseline)
        self.basic: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        self.basic = BasicSweeper(self.max_batch_size, self.params)
        product = BasicSweeper.split_arguments

        def split_arguments(overrides: list[Any], max_batch_size: int | None) -> list[list[list[str]]]:
            (jobs,) = product(overrides, None)
            return list(BasicSweeper.split_overrides_to_chunks(baseline_jobs(jobs, self.baseline), max_batch_size))

        self.basic.split_arguments = split_arguments  # what its ``sweep`` expands the overrides with
        self.basic.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.basic.sweep(arguments)
