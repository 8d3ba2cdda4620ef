"""The adaptive confidence threshold (AssistantThreshold with ``adaptive``, transformers' ``assistant_confidence_
threshold`` fitted online): its labelling, its fit against a reference written out here, its reset per prompt and
its failure modes."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from methods.gammatune import GammaTunePlus
from methods.policies import build_policy
from methods.threshold import AssistantThreshold
from specbench.registry import ConfigError

from helpers.rounds import conf as draft_step
from helpers.rounds import rnd

# --------------------------------------------------------------------------- adaptive threshold


def test_adaptive_threshold_labelling_and_min_pairs():
    roc_curve = pytest.importorskip("sklearn.metrics").roc_curve
    p = AssistantThreshold(4, threshold=0.4, adaptive_threshold=True)
    p.begin_prompt()
    p.observe(rnd(3, 3, 4, (0.9, 0.8, 0.7)))  # 1 1 1
    p.observe(rnd(1, 4, 4, (0.6, 0.2, 0.95, 0.95)))  # 1 0, last two never compared -> dropped
    assert p.state()["labelled_pairs"] == 5
    assert p.confidence.threshold == 0.4  # 5 pairs: not more than 5 yet, no fit
    p.observe(rnd(0, 2, 4, (0.3, 0.99)))  # 0, 0.99 dropped
    probs, labels = [0.9, 0.8, 0.7, 0.6, 0.2, 0.3], [1, 1, 1, 1, 0, 0]
    fpr, tpr, thr = roc_curve(labels, probs)
    cost = [f + 3 * (1 - t) for f, t in zip(fpr, tpr, strict=True)]
    assert p.confidence.threshold == pytest.approx(float(thr[cost.index(min(cost))]))
    assert p.confidence.threshold == pytest.approx(0.6)  # the lowest accepted probability
    assert p.stop_drafting(draft_step(0.55)) and not p.stop_drafting(draft_step(0.6))
    assert p.state()["roc_fits"] == 1


@pytest.mark.parametrize(("tau0", "acc", "rej", "want"), [(0.4, 0.7, 0.15, 0.7), (0.9, 0.5, 0.05, 0.5)])
def test_adaptive_threshold_moves_to_obvious_value(tau0, acc, rej, want):
    """Accepted tokens all have p >= acc, rejected ones p <= rej: τ goes to acc (up or down)."""
    pytest.importorskip("sklearn")
    for p in (
        AssistantThreshold(3, threshold=tau0, adaptive_threshold=True),
        GammaTunePlus(3, threshold=tau0, adaptive_threshold=True),
    ):
        p.begin_prompt()
        for i in range(10):
            hi = acc + 0.02 * (i % 5)
            p.observe(rnd(2, 3, 3, (hi, acc + 0.1, rej - 0.01 * (i % 3))))
        assert p.confidence.threshold == pytest.approx(want)
        # not adaptive: τ never moves on the same data
        q = AssistantThreshold(3, threshold=tau0)
        q.observe(rnd(2, 3, 3, (acc, acc, rej)))
        assert q.confidence.threshold == tau0


def _reference_tau(tau0, rounds):
    """Independent reference: transformers' labelling + ROC rule, re-fit after every round."""
    from sklearn.metrics import roc_curve

    probs, labels, tau = [], [], tau0
    for a, d, conf in rounds:
        if not tau:
            break
        labels += [1] * a + ([0] if a < d else [])
        probs += list(conf[: a + (1 if a < d else 0)])
        if len(probs) > 5 and 0 in labels and 1 in labels:
            fpr, tpr, thr = roc_curve(labels, probs)
            cost = fpr + 3 * (1 - tpr)
            tau = float(thr[int(cost.argmin())])
    return tau


conf_round = st.integers(1, 6).flatmap(
    lambda d: st.tuples(
        st.integers(0, d), st.just(d), st.lists(st.floats(0.0, 1.0), min_size=d, max_size=d).map(tuple)
    )
)


@settings(max_examples=100, deadline=None)
@given(tau0=st.sampled_from([0.1, 0.4, 0.8]), rounds=st.lists(conf_round, max_size=20))
def test_adaptive_threshold_matches_reference(tau0, rounds):
    pytest.importorskip("sklearn")
    p = AssistantThreshold(6, threshold=tau0, adaptive_threshold=True)
    p.begin_prompt()
    for a, d, conf in rounds:
        p.observe(rnd(a, d, 6, conf))
        assert 0.0 <= p.confidence.threshold <= 1.0
    assert p.confidence.threshold == pytest.approx(_reference_tau(tau0, rounds))


def _fit_once(p):
    for _ in range(3):
        p.observe(rnd(2, 3, 3, (0.8, 0.9, 0.1)))
    assert p.confidence.threshold == pytest.approx(0.8)


def test_adaptive_threshold_resets_per_prompt_by_default():
    pytest.importorskip("sklearn")
    p = AssistantThreshold(3, threshold=0.4, adaptive_threshold=True)
    p.begin_prompt()
    _fit_once(p)
    p.begin_prompt()
    assert p.confidence.threshold == 0.4 and p.state()["labelled_pairs"] == 0  # transformers 5.x
    assert p.state()["prompt_end_thresholds"] == [pytest.approx(0.8), 0.4]


def test_adaptive_threshold_persist_keeps_tau_not_pairs():
    pytest.importorskip("sklearn")
    p = AssistantThreshold(3, threshold=0.4, adaptive_threshold=True, persist_threshold=True)
    p.begin_prompt()
    _fit_once(p)
    p.begin_prompt()
    assert p.confidence.threshold == pytest.approx(0.8)  # transformers 4.47-4.57 write-back
    assert p.state()["labelled_pairs"] == 0


def test_adaptive_threshold_ignores_missing_confidences_and_rejects_mismatch():
    pytest.importorskip("sklearn")
    p = AssistantThreshold(3, adaptive_threshold=True)
    p.begin_prompt()
    for _ in range(5):
        p.observe(rnd(1, 3))  # no probabilities (e.g. prompt lookup): nothing learnt
    assert p.state()["labelled_pairs"] == 0 and p.confidence.threshold == 0.4
    with pytest.raises(ValueError, match="confidences"):
        p.observe(rnd(1, 3, 3, (0.5, 0.5)))


def test_adaptive_threshold_off_when_tau_zero():
    pytest.importorskip("sklearn")
    p = AssistantThreshold(3, threshold=0.0, adaptive_threshold=True)
    p.begin_prompt()
    for _ in range(4):
        p.observe(rnd(2, 3, 3, (0.8, 0.9, 0.1)))
    assert p.confidence.threshold == 0.0  # transformers adapts only a non-zero threshold


def test_adaptive_threshold_without_sklearn(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.metrics", None)
    for name in ("assistant_threshold", "gammatune_plus"):
        with pytest.raises(ConfigError, match="scikit-learn"):
            build_policy(name, 4, {"adaptive_threshold": True})
        build_policy(name, 4, {"adaptive_threshold": False})  # not needed without the flag
