"""The AR baseline hf-bench timed: transformers' ``generate()`` (issue 28, item 7; ``method=hf_native_ar``,
``runners/engine/hf_ar.py``).

* its greedy output is our AR's, token for token, with and without an EOS stop;
* its TTFT is marked when the first new token reaches the streamer (the prompt, which ``generate`` puts
  first, is not mistaken for it), before the end;
* a job of it writes records with our AR's fields (TTFT/TPOT/tokens/s, hf-bench's, ``ar_cache``), is
  checked against our AR (``lossless``) and divided by it (``speedup``), and never becomes the AR
  reference other jobs divide by;
* its cache setting: ``dynamic`` | ``offloaded`` (the offloaded one refused on a CPU run, run on CUDA
  when there is one).
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from runners.engine.hf_ar import FirstTokenStreamer, HFAutoregressiveRunner
from runners.engine.speculative import AutoregressiveRunner
from runners.engine.verify import Sampling
from runners.jobs.ar_cache import CACHE_SUBDIR
from runners.jobs.build import prepare
from runners.jobs.job import run_job
from specbench.config import JobConfig
from specbench.record_io import read_records
from specbench.registry import ConfigError
from specbench.timing import Timer

from helpers import compose
from helpers.tiny import tiny_model, tiny_tokenizer

PROMPTS = ["the quick brown fox", "def add(a, b):\n", "one two three"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def target(tok):
    model = tiny_model(len(tok), seed=71)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # decisive argmaxes
    return model


@pytest.mark.parametrize("eos", [[], [0]])
def test_greedy_output_is_our_ars(tok, target, eos):
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        ours = AutoregressiveRunner(target, eos).generate(ids, 20)
        runner = HFAutoregressiveRunner(target, eos)
        theirs = runner.generate(ids, 20)
        assert theirs.tokens == ours.tokens and theirs.stop_reason == ours.stop_reason
        assert runner.last_streamed == len(theirs.tokens)  # the streamer saw every new token, not the prompt
        assert 0 < theirs.ttft_ms < theirs.wall_ms and theirs.speculative is False
        assert theirs.phase_ms == {} and theirs.first_round_ms is None


def test_an_eos_stops_it_where_it_stops_ours(tok, target):
    ids = tok(PROMPTS[0]).input_ids
    free = AutoregressiveRunner(target, []).generate(ids, 12).tokens
    stop = free[4]  # a token the target emits: make it the EOS
    ours = AutoregressiveRunner(target, [stop]).generate(ids, 12)
    theirs = HFAutoregressiveRunner(target, [stop]).generate(ids, 12)
    assert theirs.tokens == ours.tokens == free[: free.index(stop) + 1] and theirs.stop_reason == "eos"


def test_the_streamer_skips_the_prompt_and_marks_the_first_new_token():
    class Marks(Timer):
        def __init__(self):
            super().__init__("cpu")
            self.names = []

        def mark(self, name):
            self.names.append(name)

    timer = Marks()
    streamer = FirstTokenStreamer(timer, [5, 6, 7])
    streamer.put(torch.tensor([[5, 6, 7]]))  # generate() puts the prompt first
    assert timer.names == [] and streamer.new_tokens == 0
    streamer.put(torch.tensor([9]))
    streamer.put(torch.tensor([4]))
    assert timer.names == ["first"] and streamer.new_tokens == 2
    other = FirstTokenStreamer(Marks(), [5, 6, 7])  # a transformers that does not put the prompt
    other.put(torch.tensor([9]))
    assert other.timer.names == ["first"] and other.new_tokens == 1


def test_sampling_is_seeded_and_leaves_the_global_rng(tok, target):
    ids = tok(PROMPTS[1]).input_ids
    runner = HFAutoregressiveRunner(target, [], Sampling(1.0, top_k=5))
    state = torch.random.get_rng_state()
    a = runner.generate(ids, 16, torch.Generator().manual_seed(3)).tokens
    assert torch.equal(state, torch.random.get_rng_state())
    assert a == runner.generate(ids, 16, torch.Generator().manual_seed(3)).tokens and len(a) == 16
    kwargs = runner.generate_kwargs(16)
    assert (kwargs["top_k"], kwargs["top_p"], kwargs["cache_implementation"]) == (5, 1.0, "dynamic")


def test_the_methods_configs(tmp_path):
    config = JobConfig.from_mapping(compose("method=hf_native_ar"))
    assert (config.method.runner, config.method.ar_cache, config.method.ar_loop) == ("ar", "dynamic", "transformers")
    assert config.speculative is False and config.drafter is None
    assert JobConfig.from_mapping(compose("method=ar")).method.ar_loop == "specbench"
    off = JobConfig.from_mapping(compose("method=hf_native_ar_offloaded")).method
    assert (off.ar_cache, off.ar_loop) == ("offloaded", "transformers")
    with pytest.raises(ConfigError, match="method.loop"):
        prepare(compose("method=hf_native_ar", "method.loop=hf"))
    with pytest.raises(ConfigError, match="nothing to offload"):  # the default pair's target is on the CPU
        prepare(compose("method=hf_native_ar_offloaded"))
    with pytest.raises(ConfigError, match="nothing to offload"):
        prepare(compose("method=hf_native_ar", "method.cache=offloaded"))


def test_a_job_writes_ar_records_checked_against_our_ar(tiny_conf, tmp_path):
    cfg = OmegaConf.to_container(compose("method=hf_native_ar", "task.n_prompts=2", "max_new_tokens=10", "warmup=1"),
                                 resolve=True)
    cfg["pair"] = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    sweep = tmp_path / "sweep"
    summary = run_job(cfg, sweep / "method=hf_native_ar", progress=False)
    assert summary["status"] == "complete"
    records = read_records(sweep / "method=hf_native_ar" / "records.jsonl")
    assert len(records) == 2
    for r in records:
        assert r["method"] == "hf_native_ar" and r["method_params"] == {"cache": "dynamic", "loop": "transformers"}
        assert r["ar_cache"] == "dynamic" and r["draft"] is None and r["gamma_init"] is None
        assert r["drafted"] is None and r["rounds"] is None  # no speculation fields, as our AR's records
        assert 0 < r["ttft_ms"] < r["wall_ms"] and r["tpot_ms"] == pytest.approx(
            (r["wall_ms"] - r["ttft_ms"]) / (r["new_tokens"] - 1))
        assert r["hfbench_ttft_ms"] == r["ttft_ms"] and r["hfbench_tpot_ms"] == pytest.approx(r["tpot_ms"])
        assert r["lossless"] is True and r["first_divergence"] is None  # token for token our AR's
        assert r["ar_source"] == "decoded" and r["speedup"] == pytest.approx(r["tokens_per_s"] / r["ar_tokens_per_s"])
    # the sweep's AR cache holds our AR's decodings only (under the dynamic cache), never transformers'
    entries = [json.loads(p.read_text()) for p in (sweep / CACHE_SUBDIR).glob("*.json")]
    assert len(entries) == 2 and {e["key"]["cache"] for e in entries} == {"dynamic"}
    assert {e["job"] for e in entries} == {"method=hf_native_ar"}
    ours = {tuple(e["tokens"]) for e in entries}
    assert {tuple(r["output_ids"]) for r in records} == ours


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cache", ["dynamic", "offloaded"])
def test_on_cuda_both_caches_give_our_ars_output(tok, cache):
    model = tiny_model(len(tok), seed=72).cuda()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        ours = AutoregressiveRunner(model, [0], cache=cache).generate(ids, 24)
        theirs = HFAutoregressiveRunner(model, [0], cache=cache).generate(ids, 24)
        assert theirs.tokens == ours.tokens and 0 < theirs.ttft_ms < theirs.wall_ms
