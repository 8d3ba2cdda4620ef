"""The job's ``device`` moves a pair (issue 42, item 4): one override in place of the ``*-cuda`` twins of model and
pair files. ``specbench.config.pair.on_device``, applied by ``specbench.config.JobConfig.from_mapping``, puts the
pair's target and its draft's model on the device and changes nothing else. No GPU is needed: the composed and
typed configs are compared, no model is loaded."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import yaml
from omegaconf import OmegaConf

from specbench.config import JobConfig
from specbench.config.pair import on_device
from specbench.job_folders import NON_IDENTITY_KEYS, config_drift
from specbench.registry import ConfigError

from helpers import CONF, compose

#: the pairs the GPU scripts and recipes move (scripts/gpu_pairs.py, conf/experiment/gpu_mini_*.yaml)
GPU_PAIRS = ("gemma3-270m_gemma3-270m-bf16", "gemma3-270m_prompt-lookup", "gemma3-270m_smollm2-135m")


def _moved(pair, device):
    """``pair`` with its target and draft model on ``device``, built field by field (not by ``on_device``)."""
    draft = pair.draft
    if draft.model is not None:
        draft = dataclasses.replace(draft, model=dataclasses.replace(draft.model, device=device))
    return dataclasses.replace(pair, target=dataclasses.replace(pair.target, device=device), draft=draft)


@pytest.mark.parametrize("name", GPU_PAIRS)
def test_device_cuda_moves_the_pairs_models_and_nothing_else(name):
    raw_cpu, raw_gpu = compose(f"pair={name}"), compose(f"pair={name}", "device=cuda")
    assert raw_cpu.device is None and raw_gpu.device == "cuda"
    cpu, gpu = JobConfig.from_mapping(raw_cpu), JobConfig.from_mapping(raw_gpu)
    assert cpu.pair.target.device == "cpu" and gpu.pair.target.device == "cuda"
    if gpu.pair.draft.model is not None:
        assert (cpu.pair.draft.model.device, gpu.pair.draft.model.device) == ("cpu", "cuda")
    assert gpu.pair == _moved(cpu.pair, "cuda")
    assert dataclasses.replace(gpu, pair=cpu.pair, device=None) == cpu  # every other field equal
    # the resolved config (what summary.json records) differs in the device keys only
    plain = OmegaConf.to_container(raw_cpu, resolve=True)
    plain["device"] = "cuda"
    plain["pair"]["target"]["device"] = "cuda"
    if gpu.pair.draft.model is not None:
        plain["pair"]["draft"]["device"] = "cuda"
    assert gpu.as_dict() == plain
    assert JobConfig.from_mapping(gpu.as_dict()) == gpu  # a summary's config types back to the same job


def test_a_prompt_lookup_draft_gets_no_device():
    gpu = JobConfig.from_mapping(compose("pair=gemma3-270m_prompt-lookup", "device=cuda:1"))
    assert gpu.pair.target.device == "cuda:1" and gpu.pair.draft.model is None
    assert "device" not in gpu.as_dict()["pair"]["draft"]


def test_on_device_leaves_the_node_it_is_given_alone():
    node = OmegaConf.to_container(compose("pair=gemma3-270m_smollm2-135m").pair, resolve=True)
    moved = on_device(node, "cuda")
    assert (moved["target"]["device"], moved["draft"]["device"]) == ("cuda", "cuda")
    assert (node["target"]["device"], node["draft"]["device"]) == ("cpu", "cpu")


def test_the_device_is_part_of_a_jobs_identity():
    """A job folder is named by its overrides: ``device`` is not left out of the name, and a folder holding the
    CPU job is not extended by the GPU one (``config_drift`` names the device)."""
    assert "device" not in NON_IDENTITY_KEYS
    hydra = yaml.safe_load((CONF / "config.yaml").read_text(encoding="utf-8"))["hydra"]
    assert "device" not in hydra["job"]["config"]["override_dirname"]["exclude_keys"]
    cpu = JobConfig.from_mapping(compose("pair=gemma3-270m_prompt-lookup"))
    gpu = JobConfig.from_mapping(compose("pair=gemma3-270m_prompt-lookup", "device=cuda"))
    assert config_drift(cpu.as_dict(), gpu.as_dict()) == "device: None there, 'cuda' now"


@pytest.mark.parametrize("overrides, message", [
    (("device=tpu",), "device 'tpu' is not one of cpu, cuda, cuda:<n>"),
    (("device=1",), "device 1 is not one of cpu, cuda, cuda:<n>"),
    (("device=cuda:x",), "device 'cuda:x' is not one of cpu, cuda, cuda:<n>"),
    (("pair=gemma3-270m_gemma3-270m-int8", "device=cuda"), "pair.draft: transform=int8_dynamic is CPU-only"),
])
def test_a_bad_device_fails_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        JobConfig.from_mapping(compose(*overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("recipe", ["gpu_mini_gammatune_table2", "gpu_mini_hetero"])
def test_the_gpu_recipes_move_every_pair_of_their_grid(recipe):
    """The GPU recipes name the CPU pairs and ``device: cuda``: every job of the grid types, on the GPU."""
    params = yaml.safe_load((CONF / "experiment" / f"{recipe}.yaml").read_text(encoding="utf-8"))["hydra"]["sweeper"]
    grid = {k: str(v).split(",") for k, v in params["params"].items()}
    pairs = set()
    for values in itertools.product(*grid.values()):
        job = JobConfig.from_mapping(compose(f"experiment={recipe}", *(f"{k}={v}" for k, v in zip(grid, values, strict=True))))
        assert job.device == "cuda" and job.pair.target.device == "cuda"
        assert job.pair.draft.model is None or job.pair.draft.model.device == "cuda"
        pairs.add(job.pair.name)
    assert pairs <= set(GPU_PAIRS) and pairs
