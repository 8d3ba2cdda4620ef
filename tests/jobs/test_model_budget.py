"""A bounded model cache (``specbench.models.cache.ModelCache``): a sweep over several pairs under a byte
budget never holds more than the budget, loads each model once per run of jobs that use it, fails a
job whose own models cannot fit before loading anything, and writes the same records as without."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.config import ModelSpec
from specbench.models.cache import ModelCache, ModelsDoNotFit
from specbench.models.sizes import estimate_bytes, model_bytes
from specbench.resources import parse_bytes

from helpers import run_sweep, write_tiny_pairs

PAIRS = ("a", "b", "c")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    return write_tiny_pairs(tmp_path_factory.mktemp("pairs"), PAIRS)


def _specs(conf: Path, name: str) -> tuple[ModelSpec, ModelSpec]:
    base = conf.parent
    return (ModelSpec(path=str(base / f"{name}-target"), name=f"{name}-target"),
            ModelSpec(path=str(base / f"{name}-draft"), name=f"{name}-draft"))


def _pair_bytes(conf: Path) -> int:
    cache = ModelCache()
    return sum(model_bytes(cache.model(s)) for s in _specs(conf, "a"))


def test_sizes_are_estimated_from_the_safetensors_headers(pairs):
    cache = ModelCache()
    for spec in _specs(pairs, "a"):
        estimate = estimate_bytes(spec)
        loaded = model_bytes(cache.model(spec))
        assert estimate is not None and 0.99 * loaded <= estimate <= loaded  # buffers (rotary) are not in the file
    assert estimate_bytes(ModelSpec(path="org/not-downloaded-model")) is None


@pytest.mark.slow
def test_budget_evicts_unused_models_and_never_holds_more(pairs):
    budget = int(1.5 * _pair_bytes(pairs))  # one pair fits, two do not
    cache = ModelCache(budget_bytes=budget)
    for name in (*PAIRS, "a"):
        specs = list(_specs(pairs, name))
        cache.make_room(specs)
        for spec in specs:
            cache.model(spec)
            assert cache.held_bytes <= budget
        assert {s.name for s in specs} <= set(cache.stats()["held"])
    assert cache.peak_bytes <= budget
    assert cache.loads == 8 and cache.evictions >= 4  # a, b, c, then a again: only what does not fit is evicted
    assert cache.load_counts == {"a-target": 2, "a-draft": 2, "b-target": 1, "b-draft": 1, "c-target": 1, "c-draft": 1}


def test_a_job_whose_models_cannot_fit_fails_before_loading_with_sizes(pairs):
    cache = ModelCache(budget_bytes=_pair_bytes(pairs) // 3)
    with pytest.raises(ModelsDoNotFit) as info:
        cache.make_room(list(_specs(pairs, "b")))
    message = str(info.value)
    assert "b-target" in message and "b-draft" in message and "KB" in message and "model_budget" in message
    assert cache.loads == 0


def test_parse_bytes_units():
    assert parse_bytes("300KB") == 300_000 and parse_bytes("1.5GiB") == int(1.5 * 2**30) and parse_bytes(42) == 42
    assert parse_bytes(None) is None
    from specbench.registry import ConfigError

    with pytest.raises(ConfigError, match="model_budget"):
        parse_bytes("lots")


def _records(results: Path) -> dict[str, list[tuple]]:
    out = {}
    for path in results.glob("*/records.jsonl"):
        out[path.parent.name] = [(r["prompt_id"], r["turn"], r["output_ids"], r["lossless"])
                                 for r in map(json.loads, path.read_text().splitlines())]
    return out


@pytest.mark.slow
def test_a_three_pair_sweep_under_a_budget_for_one_pair(pairs, tmp_path):
    budget = int(1.5 * _pair_bytes(pairs))
    sweep = ["-m", "pair=tiny_a,tiny_b,tiny_c", "method=ar,specdecode", "gamma=2", "task.n_prompts=1",
             "max_new_tokens=6", "warmup=0", "threads=1"]
    bounded = run_sweep([*sweep, f"model_budget={budget}"], pairs, tmp_path / "bounded", in_process=True)
    assert bounded.returncode == 0, bounded.stderr[-3000:]
    free = run_sweep(sweep, pairs, tmp_path / "free", in_process=True)
    assert free.returncode == 0, free.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "bounded").glob("*/summary.json")]
    assert len(summaries) == 6
    for s in summaries:
        cache = s["model_cache"]
        assert cache["budget_bytes"] == budget and cache["peak_bytes"] <= budget and cache["held_bytes"] <= budget
    last = max(summaries, key=lambda s: s["model_cache"]["loads"])["model_cache"]
    # pair is swept first, so its jobs are consecutive: each model loaded once for its group of jobs
    assert last["load_counts"] == {f"{p}-{role}": 1 for p in PAIRS for role in ("target", "draft")}
    assert last["evictions"] >= 2
    unbounded = max((json.loads(p.read_text())["model_cache"] for p in (tmp_path / "free").glob("*/summary.json")),
                    key=lambda c: c["loads"])
    assert unbounded["evictions"] == 0 and unbounded["peak_bytes"] > budget  # without a budget all three stay
    assert _records(tmp_path / "bounded") == _records(tmp_path / "free")


@pytest.mark.parametrize("bias", [True, False])
def test_an_int8_layer_is_counted_from_its_shape_without_unpacking_it(bias, monkeypatch):
    """``model_bytes`` of torch.ao's dynamic int8 ``Linear`` layers: their int8 weights and a float32 bias (an upper
    bound: counted whether or not the layer has one), and no packed weight read back (unpacking Gemma-3-270M's
    int8 draft layer by layer took 3 s of its every load)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(torch.nn.Linear(64, 32, bias=bias), torch.nn.Linear(32, 16, bias=bias)),
            {torch.nn.Linear}, dtype=torch.qint8)
    layers = [m for m in quantized.modules() if hasattr(m, "_packed_params") and callable(getattr(m, "weight", None))]
    exact = sum(m.weight().numel() + (4 * m.bias().numel() if m.bias() is not None else 0) for m in layers)

    def unpacked(self):
        raise AssertionError("a packed weight was unpacked")

    monkeypatch.setattr(type(layers[0]), "_weight_bias", unpacked)
    counted = model_bytes(quantized)
    assert counted == 64 * 32 + 32 * 16 + 4 * (32 + 16)
    assert counted == exact if bias else exact < counted <= exact + 4 * (32 + 16)
