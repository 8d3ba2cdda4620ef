"""A results folder that cannot be created is refused before Hydra creates anything (issue 29, item 4).

``runners.jobs.preflight.ResultsDirCheck`` runs on run and multirun start, before Hydra makes the
job or sweep folder: one line naming ``results_dir`` on stderr, exit status 2, no traceback, nothing
written (neither under the path nor in the working directory, where Hydra would put its default
``outputs/`` or ``multirun/``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from specbench.job_folders import check_results_dir
from specbench.registry import ConfigError

from helpers import ROOT, offline_env


def _tree(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["-m"]], ids=["run", "multirun"])
def test_run_py_refuses_a_results_dir_under_a_file_in_one_line_and_leaves_nothing(mode, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    work = tmp_path / "cwd"
    work.mkdir()
    before = _tree(tmp_path)
    results = blocker / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *mode, f"results_dir={results}", "gamma=3"],
        capture_output=True, text=True, timeout=120, cwd=work, env=offline_env(),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "results_dir" in lines[0] and str(results) in lines[0] and f"{blocker} is a file" in lines[0], lines
    assert _tree(tmp_path) == before and blocker.read_text() == "not a folder\n"


def test_check_results_dir_accepts_what_can_be_created(tmp_path):
    assert check_results_dir(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    assert check_results_dir(str(tmp_path)) == tmp_path
    (tmp_path / "f").write_text("")
    for bad in (tmp_path / "f", tmp_path / "f" / "x" / "y"):
        with pytest.raises(ConfigError, match=r"^results_dir .* cannot be created: .* is a file, not a folder$"):
            check_results_dir(str(bad))
    with pytest.raises(ConfigError, match="results_dir must be a non-empty string"):
        check_results_dir("")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_check_results_dir_refuses_a_folder_it_cannot_write(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(ConfigError, match="is not writable"):
            check_results_dir(str(locked / "results"))
    finally:
        locked.chmod(0o700)
