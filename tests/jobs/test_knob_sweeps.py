"""Sweeps that work as typed (issue 50, item 8): the SpecDecode baseline ``run.py`` adds to a sweep of adaptive
methods takes the sweep's shared settings and never another method's knobs (``runners.jobs.baselines``).
``python run.py -m method=gammatune method.eta=0.25,0.5`` used to stop with "Key 'eta' is not in struct": Hydra's
basic sweeper gave the baseline the knob. Here a knob sweep of every adaptive method with knobs, and of a
cross-vocabulary rule's knob, runs through ``run.py -m`` on a tiny pair (one prompt, four tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from runners.jobs.baselines import BASELINE, SWEEPER, baseline_jobs, with_baseline

from helpers import ROOT, run_sweep, write_tiny_hetero_pair

CONF = ROOT / "conf"
NOT_KNOBS = {"name", "display", "runner", "policy"}

#: the knob sweeps chosen by hand (two values each); an adaptive method not named here is swept on a knob derived
#: from its YAML (``derived_sweep``), so a new method is covered by its YAML alone (issue 51: a policy is three files)
CHOSEN_SWEEPS = {
    "adaedl": "method.threshold=0.6,0.7",
    "assistant_threshold": "method.threshold=0.3,0.4",
    "banditspec": "method.c=0.5,1.0",
    "banditspec_exp3": "method.horizon=100,200",
    "cost_aware": "method.feature=confidence,margin",
    "gammatune": "method.eta=0.25,0.5",
    "gammatune_plus": "method.delta=1,2",
    "hf_heuristic": "method.transient=true,false",
    "hf_heuristic_carryover": "method.transient=false,true",
    "logit_margin": "method.threshold=0.2,0.3",
    "max_confidence": "method.threshold=0.4,0.5",
    "smartspec": "method.k_max=4,8",
    "svip": "method.threshold=0.4,0.5",
    "tapout": "method.algorithm=ucb,exp3",
}
#: cheap and deterministic: no kernel measuring, one prompt, four tokens
CHEAP = ["pair=tiny", "gamma=2", "task.n_prompts=1", "max_new_tokens=4", "warmup=0", "threads=1",
         "engine.fast_linear=false", "engine.verify_buckets=false", "host_probe=false"]


def _adaptive_methods_with_knobs() -> dict[str, set[str]]:
    """``conf/method/<name>.yaml`` of our speculative loop other than the baseline, with its knobs, where it has any."""
    out = {}
    for path in sorted((CONF / "method").glob("*.yaml")):
        node = yaml.safe_load(path.read_text())
        knobs = set(node) - NOT_KNOBS
        if node.get("runner") == "speculative" and node["name"] != BASELINE and knobs:
            out[node["name"]] = knobs
    return out


def derived_sweep(name: str) -> str:
    """A method's first knob that is a number or a flag, at its YAML value and another: half of a number (one more
    for an integer), the other truth value of a flag."""
    node = yaml.safe_load((CONF / "method" / f"{name}.yaml").read_text())
    for key, value in node.items():
        if key in NOT_KNOBS or value is None or isinstance(value, str):
            continue
        if isinstance(value, bool):
            return f"method.{key}={str(value).lower()},{str(not value).lower()}"
        other = value + 1 if isinstance(value, int) else round(value / 2, 6)
        return f"method.{key}={value},{other}"
    raise AssertionError(f"{name}: no number or flag to sweep; name its sweep in CHOSEN_SWEEPS")


KNOB_SWEEPS = {name: CHOSEN_SWEEPS.get(name) or derived_sweep(name) for name in _adaptive_methods_with_knobs()}


def _jobs(results: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in results.glob("*/summary.json")}


def test_every_adaptive_method_with_knobs_has_a_knob_sweep_here():
    methods = _adaptive_methods_with_knobs()
    assert set(KNOB_SWEEPS) == set(methods) and set(CHOSEN_SWEEPS) <= set(methods)  # no sweep of a method gone
    for name, sweep in KNOB_SWEEPS.items():
        assert sweep.partition("=")[0].removeprefix("method.") in methods[name], name


def test_the_added_baseline_keeps_the_shared_settings_and_drops_the_methods_knobs():
    product = [[f"method={m}", f"method.eta={eta}", f"hetero.lookbehind={lb}", "+method.extra=1", "~method.delta"]
               for m in ("gammatune", BASELINE) for eta in (0.25, 0.5) for lb in (5, 10)]
    jobs = baseline_jobs(product)
    assert jobs[:4] == product[:4]  # the method's own jobs keep every override
    assert jobs[4:] == [[f"method={BASELINE}", "hetero.lookbehind=5"], [f"method={BASELINE}", "hetero.lookbehind=10"]]
    args, _ = with_baseline(["-m", "method=gammatune", "method.eta=0.25,0.5"], CONF)
    assert args == ["-m", f"method=gammatune,{BASELINE}", "method.eta=0.25,0.5", SWEEPER]
    own = ["-m", "method=gammatune", "hydra/sweeper=basic"]  # a sweeper named on the command line: left alone
    assert with_baseline(own, CONF) == (own, None)


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(KNOB_SWEEPS))
def test_a_knob_sweep_of_every_adaptive_method_runs_as_typed(method, tiny_conf, tmp_path):
    knob = KNOB_SWEEPS[method]
    proc = run_sweep(["-m", f"method={method}", knob, *CHEAP], tiny_conf, tmp_path, in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path)
    key = knob.partition("=")[0]
    ours = sorted(n for n in jobs if f"method={method}," in n or n.endswith(f"method={method}"))
    baseline = [n for n in jobs if f"method={BASELINE}" in n]
    assert len(ours) == 2 and all(key in n or "transient" in n for n in ours), sorted(jobs)
    assert len(baseline) == 1 and "method." not in baseline[0], sorted(jobs)  # once, with no knob of the method
    assert all(s["status"] == "complete" for s in jobs.values()), jobs


@pytest.mark.slow
def test_a_knob_sweep_of_a_cross_vocabulary_rule_runs_as_typed(tmp_path):
    """The rule's knob is a shared setting (the baseline runs at each value); the method's is not."""
    conf = write_tiny_hetero_pair(tmp_path / "pair")
    proc = run_sweep(["-m", "method=gammatune", "method.eta=0.25,0.5", "hetero=slem", "hetero.lookbehind=5,10",
                      *(o for o in CHEAP if o != "pair=tiny"), "pair=tiny_hetero"], conf, tmp_path / "results",
                     in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path / "results")
    baseline = sorted(n for n in jobs if f"method={BASELINE}" in n)
    assert len(jobs) == 6 and all(s["status"] == "complete" for s in jobs.values()), sorted(jobs)
    assert len(baseline) == 2 and {("hetero.lookbehind=5" in n, "method." in n) for n in baseline} == {
        (True, False), (False, False)}, baseline
