"""Sampling processors (top-k / top-p / typical-p) and random numbers per device (runners.engine.verify).

The exact-distribution tests run the real loop (``SpeculativeRunner`` + ``ModelDrafter``) on a
toy vocabulary with every random decision replaced by an enumerating chooser
(``methods.hetero.sampling.enumerate_outcomes``): the law of the output is computed exactly (up
to float32 rounding of the probabilities), not estimated.
"""

from __future__ import annotations

import math

import pytest
import torch

import runners.drafters.model as model_drafter
import runners.engine.speculative as speculative
import runners.engine.verify as verify
from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import DeviceGenerators, Sampling, device_seed, generator_on, probs, sample

from helpers import tiny
from helpers.exact_law import enumerated_law, processed_law

# ----------------------------------------------------------------------------- the processors


def test_sampling_carries_the_temperature_and_the_warpers():
    s = Sampling(0.7, top_k=3, top_p=0.9)
    assert s.temperature == 0.7 and not s.greedy and Sampling().greedy and Sampling.of(0).greedy
    assert s != Sampling(0.7) and s == Sampling(0.7, top_k=3, top_p=0.9)  # the warpers are part of the value
    with pytest.raises(TypeError):  # not a float: a temperature is read as ``.temperature``
        float(s)
    assert (s.top_k, s.top_p, s.typical_p) == (3, 0.9, None)
    assert Sampling(1.0, top_k=0, top_p=1.0, typical_p=1.0).warped is False  # transformers' "off" values
    assert Sampling.of(0.5).warped is False and Sampling.of(s) is s
    import pickle

    assert pickle.loads(pickle.dumps(s)).settings() == s.settings()
    for bad in ({"temperature": -0.5}, {"top_k": -1}, {"top_p": 0.0}, {"typical_p": 1.5}):
        with pytest.raises(ValueError):
            Sampling(**{"temperature": 1.0, **bad})
    with pytest.raises(ValueError, match="temperature > 0"):  # greedy decoding has no distribution to process
        probs(torch.zeros(3), Sampling(0.0))


def test_top_k_and_top_p_keep_what_transformers_keeps():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    plain = probs(logits, 1.0)[0]
    k2 = probs(logits, Sampling(1.0, top_k=2))[0]
    assert (k2 > 0).tolist() == [True, True, False, False, False, False]
    assert torch.allclose(k2[:2], plain[:2] / plain[:2].sum())
    # top-p: the smallest set of most likely tokens whose mass reaches p (ties and the boundary kept)
    mass = plain.sort(descending=True).values.cumsum(0)
    p = float(mass[2]) - 1e-4  # needs the first three
    kept = probs(logits, Sampling(1.0, top_p=p))[0] > 0
    assert kept.tolist() == [True, True, True, False, False, False]
    # temperature first, then the warpers: at T = 0.25 the top two already hold > 0.9 of the mass
    sharp = probs(logits, Sampling(0.25, top_p=0.9))[0] > 0
    assert int(sharp.sum()) <= 2
    # typical-p keeps a non-empty subset and renormalises
    typ = probs(logits, Sampling(1.0, typical_p=0.5))[0]
    assert 1 <= int((typ > 0).sum()) < 6 and math.isclose(float(typ.sum()), 1.0, rel_tol=1e-6)


# ----------------------------------------------------------------------------- exact laws

@pytest.fixture
def enumerated(monkeypatch):
    """Every random decision of the loop goes through the enumerating chooser."""
    return enumerated_law(monkeypatch, (verify, speculative, model_drafter))


def _tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


@pytest.fixture(scope="module")
def toy():
    target, draft = tiny.toy_pair()
    return target.to(tiny.TEST_DEVICE), draft.to(tiny.TEST_DEVICE), [1, 2]


@pytest.mark.parametrize(
    "sampling",
    [Sampling(1.0, top_k=3), Sampling(0.8, top_p=0.7), Sampling(1.2, top_k=4, top_p=0.85, typical_p=0.9)],
    ids=["top_k", "top_p", "all"],
)
def test_speculative_sampling_is_exact_for_the_processed_target(enumerated, toy, sampling):
    """Target and draft processed alike; the loop's output law equals the target's processed law
    exactly (float32 rounding only), for γ = 1 and 2, while the unprocessed law and the draft's own
    processed law are far from it (the test can fail)."""
    target, draft, prompt = toy
    length = 2
    want = processed_law(target, prompt, length, sampling)
    assert _tv(want, processed_law(target, prompt, length, Sampling(sampling.temperature))) > 0.05
    assert _tv(want, processed_law(draft, prompt, length, sampling)) > 0.1
    for gamma in (1, 2):
        runner = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(gamma), [], sampling=sampling)
        got = enumerated(lambda r=runner: r.generate(prompt, length).tokens)
        assert set(got) <= set(want)
        assert max(abs(got.get(k, 0.0) - v) for k, v in want.items()) < 2e-6
        assert math.isclose(sum(got.values()), 1.0, abs_tol=1e-9)


def test_autoregressive_sampling_follows_theprocessed_law(enumerated, toy):
    target, _, prompt = toy
    sampling = Sampling(1.0, top_k=2)
    got = enumerated(lambda: AutoregressiveRunner(target, [], sampling).generate(prompt, 2).tokens)
    want = processed_law(target, prompt, 2, sampling)
    assert len(want) == 4 and max(abs(got.get(k, 0.0) - v) for k, v in want.items()) < 2e-6


# ----------------------------------------------------------------------------- generators per device


def test_cpu_draws_are_those_of_one_seeded_cpu_generator():
    gens = DeviceGenerators(7)
    assert gens.on("cpu") is gens.on(torch.device("cpu")) and gens.initial_seed() == 7
    ref = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.arange(6.0), 0)
    assert [sample(p, gens) for _ in range(20)] == [sample(p, ref) for _ in range(20)]


def test_device_seeds_differ_per_accelerator():
    seeds = {device_seed(3, d) for d in ("cpu", "cuda:0", "cuda:1")}
    assert device_seed(3, "cpu") == 3 and len(seeds) == 3


def test_a_generator_on_another_device_is_a_clear_error():
    p = torch.empty(4, device="meta")
    with pytest.raises(ValueError, match="cannot sample tensors on meta"):
        generator_on(torch.Generator(), p.device)
    with pytest.raises(ValueError, match="DeviceGenerators"):
        sample(p, torch.Generator())
    assert generator_on(None, "meta") is None


def test_seeded_runs_repeat_with_device_generators(toy):
    target, draft, prompt = toy
    runner = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(2), [], Sampling(1.0, top_k=3))
    a = runner.generate(prompt, 12, DeviceGenerators(5)).tokens
    device = target.device  # on CUDA (SPECBENCH_TEST_DEVICE=cuda) the generator's seed is the device's own
    b = runner.generate(prompt, 12, torch.Generator(device=device).manual_seed(device_seed(5, device))).tokens
    assert a == b == runner.generate(prompt, 12, DeviceGenerators(5)).tokens


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_target_on_cuda_draft_on_cpu_samples_on_each_device():
    target, draft, prompt = (tiny.tiny_model(8, seed=1).cuda(), tiny.tiny_model(8, seed=2), [1, 2])
    runner = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(3), [], Sampling(1.0, top_k=4))
    gens = DeviceGenerators(0)
    out = runner.generate(prompt, 10, gens)
    assert len(out.tokens) == 10 and {"cpu", "cuda:0"} <= set(gens._by_device)
