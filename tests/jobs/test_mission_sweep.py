"""The mission's own two commands give GammaTune's Table 2 (issue 40, item 0): ``python run.py -m
method=gammatune,gammatune_plus gamma=1,2,4,8`` runs the fixed-γ SpecDecode baseline with the sweep
(``runners.jobs.baselines``), and ``python -m analysis RESULTS`` renders the speedup over it — on the default
engine (``auto``), whose tag every row shares and which therefore names no variant (``analysis.frame``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runners.jobs.baselines import OPT_OUT, SWEEPER, with_baseline

from helpers import ROOT, offline_env, run_sweep

CONF = ROOT / "conf"


def test_the_baseline_is_added_to_a_sweep_of_adaptive_methods_only():
    mission = ["-m", "method=gammatune,gammatune_plus", "gamma=1,2,4,8"]
    args, note = with_baseline(mission, CONF)
    assert args == ["-m", "method=gammatune,gammatune_plus,specdecode", "gamma=1,2,4,8", SWEEPER]
    assert "baseline=none" in note
    for unchanged in (["method=gammatune"],  # a single run
                      ["-m", "method=gammatune,specdecode", "gamma=1,2"],  # listed already
                      ["-m", "method=ar,hf_native_ar"],  # the target alone, transformers' loop: no SpecDecode
                      ["-m", "method=choice(gammatune,gammatune_plus)"],  # not the simple form
                      ["-m", "gamma=1,2"]):  # no method list
        assert with_baseline(unchanged, CONF) == (unchanged, None)
    assert with_baseline([*mission, OPT_OUT], CONF) == (mission, None)  # consumed: Hydra never sees it


@pytest.mark.slow
def test_the_missions_two_commands_render_table_2(tiny_conf, tmp_path):
    results = tmp_path / "results"
    sweep = run_sweep(["-m", "method=gammatune,gammatune_plus", "gamma=1,2,4,8", "pair=tiny", "task.n_prompts=2",
                       "max_new_tokens=12", "warmup=0"], tiny_conf, results, in_process=True)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert "also runs method=specdecode" in sweep.stderr
    folders = sorted(p.name for p in results.iterdir() if (p / "summary.json").exists())
    assert sum("method=specdecode" in f for f in folders) == 4 and len(folders) == 12, folders
    out = subprocess.run([sys.executable, "-m", "analysis", str(results)], capture_output=True, text=True,
                         cwd=ROOT, env=offline_env(), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "no speedup table" not in out.stdout
    table = (results / "analysis" / "tables" / "gammatune_table2_speedup.md").read_text()
    rows = {line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")}
    assert {"SpecDecode", "GammaTune", "GammaTune+"} <= rows, table
    assert "fast_linear" not in table  # the engine every row shares is no variant
    # a second sweep of another method at the same settings reuses the complete baseline jobs
    again = run_sweep(["-m", "method=hf_heuristic", "gamma=1,2,4,8", "pair=tiny", "task.n_prompts=2",
                       "max_new_tokens=12", "warmup=0"], tiny_conf, results, in_process=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sum("method=specdecode" in p.name for p in results.iterdir()) == 4
    assert "skipped" in again.stdout + again.stderr  # the complete baseline jobs, as the sweep report says

