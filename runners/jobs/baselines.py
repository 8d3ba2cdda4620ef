"""The fixed-γ baseline a sweep's Table 2 divides by, run with the sweep when it lacks it (issue 40, item 0).

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

Only the simple form is rewritten: an override ``method=a,b,...`` of plain option names (a sweep written
with ``choice(...)``, ``glob(...)`` or an experiment's ``hydra.sweeper.params`` is left as it is: the
recipes list their baseline themselves). Methods whose loop is transformers' (``hf_native_*``) or the
target alone (``ar*``) need no SpecDecode baseline and add none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import yaml

BASELINE = "specdecode"
OPT_OUT = "baseline=none"
MULTIRUN_FLAGS = ("-m", "--multirun")
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
    if BASELINE in methods or len(methods) < 1:
        return args, None
    if not any(_runner(Path(conf_dir), m) == "speculative" and not m.startswith("hf_native") for m in methods):
        return args, None
    args[i] = f"method={value},{BASELINE}"
    note = (f"run.py: the sweep also runs method={BASELINE} at each of its settings: the fixed-γ baseline of the "
            f"speedup tables (GammaTune Table 2); a complete {BASELINE} job is reused, not decoded again. "
            f"Add {OPT_OUT} to run only the methods listed.")
    return args, note
