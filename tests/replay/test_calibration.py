"""Calibration (``runners.replay.calibration``): it recovers a known cost function, sweeps over k so a drifting
host biases every k alike, and the latency file round-trips."""

from __future__ import annotations

import random

import pytest

from runners.replay.calibration import calibrate, fit_affine
from specbench.latency import ForwardCost, LatencyModel


def test_calibration_recovers_a_known_cost_function():
    rng = random.Random(0)
    truth = {  # a + b·k + c·context for steps; p + q·k for prefills
        "target": {"a": 40.0, "b": 1.5, "c": 0.02, "p": 30.0, "q": 0.8},
        "draft": {"a": 8.0, "b": 0.4, "c": 0.005, "p": 6.0, "q": 0.2},
    }

    def fake(model: str, k: int, context: int) -> float:
        c = truth[model]
        mean = c["p"] + c["q"] * k if context == 0 else c["a"] + c["b"] * k + c["c"] * context
        return mean * (1 + rng.gauss(0, 0.02)) + (50.0 if rng.random() < 0.05 else 0.0)  # noise + outliers

    lat = calibrate(fake, k_max=16, draft_k_max=4, ref_context=128, contexts=(32, 512, 1024),
                    prefill_lengths=(16, 64, 128, 256, 512), warmup=1, repeats=7)
    for model, cost in (("target", lat.target), ("draft", lat.draft)):
        c = truth[model]
        # the slope from k = 1..4 (draft) under 2 % noise of ~9 ms: ± 0.1 ms per token is its noise
        assert cost.step_affine[1] == pytest.approx(c["b"], abs=0.1)
        assert cost.context_ms_per_token == pytest.approx(c["c"], rel=0.2)
        assert cost.prefill_affine[1] == pytest.approx(c["q"], rel=0.1)
        for k, ctx in ((1, 64), (3, 300), (12, 800), (30, 200)):
            if model == "draft" and k > 4:  # measured at k <= 4 only: far beyond, the slope's noise is multiplied
                continue
            want = c["a"] + c["b"] * k + c["c"] * ctx
            assert cost.forward_ms(k, ctx) == pytest.approx(want, rel=0.05), (model, k, ctx)
        assert cost.forward_ms(200, 0) == pytest.approx(c["p"] + c["q"] * 200, rel=0.05)
    assert lat.c == pytest.approx((40 + 1.5 + 0.02 * 128) / (8 + 0.4 + 0.005 * 128), rel=0.05)


def test_fit_affine_and_latency_json_round_trip(tmp_path):
    assert fit_affine([1, 2, 3], [3, 5, 7]) == pytest.approx((1.0, 2.0))
    lat = LatencyModel(ForwardCost({1: 5.0, 2: 5.5}, (4.5, 0.5), 0.01, 64, (10.0, 0.1)),
                       ForwardCost.affine(1.0, 0.1), 0.3, 0.1, {"pair": "x"})
    back = LatencyModel.load(lat.save(tmp_path / "lat.json"))
    assert back == lat
    assert back.target.forward_ms(2, 64) == 5.5 and back.target.forward_ms(4, 74) == pytest.approx(6.6)
    assert back.target.forward_ms(100, 0) == pytest.approx(20.0)


def test_calibration_sweeps_over_k_so_a_drifting_host_biases_every_k_alike():
    """A host that slows down steadily (0.2 ms per forward timed): timed k after k, the later k look
    dearer (slope 10 + 0.2·(warmup + repeats)); timed in sweeps over k, the slope stays within one
    sweep's drift of the truth."""
    calls = [0]

    def drifting(model: str, k: int, context: int) -> float:
        calls[0] += 1
        return 100.0 + 10.0 * k + 0.2 * calls[0]

    lat = calibrate(drifting, k_max=16, draft_k_max=2, ref_context=128, contexts=(), prefill_lengths=(16, 64),
                    warmup=2, repeats=5)
    assert lat.meta["sampling"] == "interleaved"
    assert abs(lat.target.step_affine[1] - 10.0) < 0.5
    steps = [lat.target.step_ms[k] for k in range(1, 17)]
    assert all(b - a == pytest.approx(10.2) for a, b in zip(steps, steps[1:]))
