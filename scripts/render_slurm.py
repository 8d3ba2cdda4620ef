#!/usr/bin/env python
"""The sbatch script ``python run.py -m hydra/launcher=slurm OVERRIDES`` would submit, without a cluster.

    python scripts/render_slurm.py hydra.launcher.partition=gpu experiment=gammatune_table2
    python scripts/render_slurm.py pair=llama-3.1-70b-instruct_llama-3.1-8b-instruct method=gammatune gamma=1,4 \\
        'hydra.launcher.setup=["source /shared/specbench/.venv/bin/activate"]'

It runs ``run.py``'s own multirun with Hydra's submitit launcher exactly as a submission would (with
submitit told that ``srun`` exists), and stops at the point where submitit calls ``sbatch``: the script is printed (and written to
``--out`` when given) and nothing is submitted. Hydra composes the launcher's settings from
``conf/hydra/launcher/slurm.yaml`` and the overrides; submitit turns them into ``#SBATCH`` lines
(``submitit.slurm.slurm._make_sbatch_string``). The job pickles and the ``.submitit`` folder go to a
temporary ``results_dir`` (removed afterwards) unless ``results_dir=...`` is given, so the log paths
in the printed script point there.
"""

from __future__ import annotations

import argparse
import runpy
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # this checkout's run.py and conf/, whatever is installed
sys.path.insert(0, str(REPO_ROOT))


class Rendered(SystemExit):
    """Raised in place of ``sbatch`` (a ``SystemExit``: Hydra lets it through untouched)."""


def render(overrides: list[str]) -> str:
    """The sbatch script for ``run.py -m hydra/launcher=slurm *overrides`` (module docstring)."""
    import submitit.slurm.slurm as slurm

    captured: list[str] = []

    def fake_submit(self: slurm.SlurmExecutor, command: str) -> None:
        captured.append(self._make_submission_file_text(command, "rendered"))
        raise Rendered(0)

    original, affinity = slurm.SlurmExecutor._submit_command, slurm.SlurmExecutor.__dict__["affinity"]
    slurm.SlurmExecutor._submit_command = fake_submit  # type: ignore[method-assign]
    slurm.SlurmExecutor.affinity = classmethod(lambda cls: 1)  # type: ignore[method-assign]  # "srun is here"
    argv = sys.argv
    sys.argv = [str(REPO_ROOT / "run.py"), "-m", "hydra/launcher=slurm", *overrides]
    try:
        runpy.run_path(str(REPO_ROOT / "run.py"), run_name="__main__")
    except Rendered:
        pass
    finally:
        sys.argv = argv
        slurm.SlurmExecutor._submit_command = original  # type: ignore[method-assign]
        slurm.SlurmExecutor.affinity = affinity  # type: ignore[method-assign]
    if not captured:
        raise SystemExit("no sbatch script was produced (did the sweep fail before submission? see above)")
    return captured[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="run.py overrides, as for a sweep")
    ap.add_argument("--out", help="also write the script to this file")
    args = ap.parse_args()
    overrides = list(args.overrides)
    tmp = None
    if not any(o.startswith("results_dir=") for o in overrides):
        tmp = tempfile.mkdtemp(prefix="specbench-render-")
        overrides.append(f"results_dir={tmp}")
    try:
        text = render(overrides)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
