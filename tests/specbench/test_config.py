"""Every config composes; bad values fail with a clear message before any model loads."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from methods.policies import build_policy
from runners.jobs.build import prepare
from specbench.config import (
    SCALARS,
    TOP_LEVEL,
    EngineConfig,
    HeteroConfig,
    JobConfig,
    LoggerConfig,
    MethodConfig,
    ModelSpec,
    PairConfig,
    TaskConfig,
    job_defaults,
)
from specbench.config.method import AR_CACHES, AR_LOOPS
from specbench.registry import ConfigError

from helpers import ROOT, options
from helpers import compose as _compose

_options = options


def test_default_config_is_valid():
    cfg = _compose()
    prompts = prepare(cfg).prompts
    assert len(prompts) >= 10
    assert cfg.results_dir == "results"
    assert {"gamma", "temperature", "max_new_tokens", "seed", "results_dir", "verify_lossless"} <= set(cfg)


@pytest.mark.parametrize("method", _options("method"))
def test_every_method_composes_and_builds_its_policy(method):
    cfg = _compose(f"method={method}")
    assert cfg.method.name == method  # file stem == name == registry key
    if cfg.method.runner == "speculative":
        config = MethodConfig.from_mapping(cfg.method)
        policy = build_policy(config.policy, cfg.gamma, config.params)
        assert policy.next_gamma() >= 1


@pytest.mark.parametrize("pair", _options("pair"))
def test_every_pair_composes_and_its_model_specs_are_valid(pair):
    cfg = _compose(f"pair={pair}")
    assert cfg.pair.name == pair
    typed = JobConfig.from_mapping(cfg).pair  # the target's and the draft's ModelSpec are validated here
    assert typed.target.path and (typed.draft is None or typed.draft.kind != "model" or typed.draft.model.path)


@pytest.mark.parametrize("group", ["task", "logger", "hetero"])
def test_every_option_of_other_groups_composes(group):
    for option in _options(group):
        cfg = _compose(f"{group}={option}")
        assert cfg[group].name == option


@pytest.mark.parametrize(
    "override, message",
    [
        ("gamma=0", "gamma must be an integer >= 1"),
        ("gamma=-3", "gamma must be an integer >= 1"),
        ("temperature=-0.5", "temperature must be >= 0"),
        ("max_new_tokens=0", "max_new_tokens must be an integer >= 1"),
        ("task.n_prompts=0", "n_prompts must be"),
        ("task.categories=[poetry]", "poetry"),
        ("pair.target.dtype=float8", "dtype 'float8'"),
    ],
)
def test_bad_values_are_refused_by_validate(override, message):
    cfg = _compose(override)
    with pytest.raises(ConfigError) as info:
        prepare(cfg)
    assert message in str(info.value)


def _env(tmp_path: Path) -> dict[str, str]:
    """Offline, with a model cache of the test's own."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "SPECBENCH_CACHE": str(tmp_path / "cache")}


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), f"results_dir={tmp_path / 'results'}", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env(tmp_path),
    )


def test_unknown_method_fails_with_the_valid_choices(tmp_path):
    proc = _run(["method=gamatune"], tmp_path)
    assert proc.returncode != 0
    err = proc.stderr + proc.stdout
    assert "method/gamatune" in err and "gammatune" in err  # Hydra lists the available options
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_gamma_zero_fails_before_any_model_loads_and_leaves_nothing(tmp_path):
    # the target path does not exist: reaching model loading would fail with another error
    proc = _run(["gamma=0", "pair.target.path=/nonexistent/model"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "gamma must be an integer >= 1" in proc.stderr + proc.stdout
    assert not any((tmp_path / "results").rglob("*")) if (tmp_path / "results").exists() else True
    assert not (tmp_path / "cache").exists()


def test_a_bad_setting_is_refused_before_torch_is_imported(tmp_path):
    """``run.py`` checks the job's own settings before it imports the engine: a bad value is refused in about a
    second (status 2, nothing left), not after torch's and transformers' imports (3 s on a 2-core Xeon)."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['run.py', 'results_dir={tmp_path / 'results'}', 'gamma=0']\n"
            "try:\n"
            f"    runpy.run_path({str(ROOT / 'run.py')!r}, run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    print('status', exc.code, 'torch', 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=_env(tmp_path))
    assert proc.stdout.splitlines()[-1].split() == ["status", "2", "torch", "False"], proc.stdout + proc.stderr[-2000:]
    assert "gamma must be an integer >= 1" in proc.stdout + proc.stderr
    assert not any((tmp_path / "results").rglob("*")) if (tmp_path / "results").exists() else True


# ----------------------------------------------------------------------------- defaults, written once


def _yaml(*parts: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(ROOT.joinpath("conf", *parts)))


def test_the_job_settings_have_their_defaults_in_config_yaml_only():
    """``JobConfig`` has no field defaults, so a scalar's default cannot be written twice: a config that
    lacks one (a summary written before the key existed) takes ``conf/config.yaml``'s."""
    defaulted = [f.name for f in fields(JobConfig) if (f.default, f.default_factory) != (MISSING, MISSING)]
    assert defaulted == ["resolved"]
    raw = _yaml("config.yaml")
    assert dict(job_defaults()) == {k: raw[k] for k in SCALARS}
    full = OmegaConf.to_container(_compose(), resolve=True)
    assert set(full) == set(TOP_LEVEL)  # every key config.yaml writes is typed, and nothing else is
    bare = JobConfig.from_mapping({k: v for k, v in full.items() if k not in SCALARS})
    assert {k: getattr(bare, k) for k in SCALARS} == {k: raw[k] for k in SCALARS}


@pytest.mark.parametrize(("group", "cls"), [("hetero", HeteroConfig), ("logger", LoggerConfig)])
def test_a_group_file_restates_its_dataclass_defaults_never_other_values(group, cls):
    """The node's defaults are its dataclass fields'; a file of the group that writes one writes the same."""
    for option in _options(group):
        node = _yaml(group, f"{option}.yaml")
        named = {"display": node["display"]} if "display" in node else {}  # a name, not a default (display_names)
        assert cls.from_mapping(node) == cls(name=node["name"], **named), f"conf/{group}/{option}.yaml"


def test_an_absent_node_or_key_takes_its_dataclass_default():
    """``from_mapping`` reads a missing key's default from the dataclass (no second copy), and
    ``conf/config.yaml`` chooses the same option for the nodes a summary may lack."""
    assert HeteroConfig.from_mapping(None) == HeteroConfig() and LoggerConfig.from_mapping(None) == LoggerConfig()
    choices = {k: v for d in _yaml("config.yaml")["defaults"] if isinstance(d, dict) for k, v in d.items()}
    assert (choices["hetero"], choices["logger"]) == (HeteroConfig().name, LoggerConfig().name)
    pair = PairConfig.from_mapping({"name": "p", "target": {"path": "x"}})
    assert pair.target == ModelSpec("x")
    assert (pair.same_tokenizer, pair.gpus) == (PairConfig.same_tokenizer, PairConfig.gpus)
    assert TaskConfig.from_mapping({"loader": "embedded"}).prompt_format == TaskConfig.prompt_format
    ar = MethodConfig.from_mapping({"name": "ar", "runner": "ar"})
    assert (ar.ar_cache, ar.ar_loop) == (AR_CACHES[0], AR_LOOPS[0])
    # the one deliberate difference: no engine node (a summary from before the options) is the plain loop,
    # a new job's options are config.yaml's engine node, which names every option
    assert EngineConfig.from_mapping(None) == EngineConfig() and not EngineConfig().any
    assert set(_yaml("config.yaml")["engine"]) == {f.name for f in fields(EngineConfig)}
