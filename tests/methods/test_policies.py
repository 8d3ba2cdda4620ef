"""Speculation-length policies: hand-checked sequences, properties against independent
reference computations written out here, and the method configs that build them.

No models: every test drives a policy with synthetic ``RoundOutcome``s.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from methods.base import DraftStep, RoundOutcome
from methods.gammatune import GammaTune, GammaTunePlus
from methods.hf_heuristic import HFHeuristic
from methods.policies import POLICIES, build_policy, policy_params
from methods.threshold import AssistantThreshold
from runners.replay.grid import load_method
from specbench.config import MethodConfig
from specbench.config.method import NOT_KNOBS
from specbench.registry import ConfigError

METHOD_DIR = Path(__file__).resolve().parents[2] / "conf" / "method"
PAPER_GAMMAS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24]
OURS = ["hf_heuristic", "hf_heuristic_carryover", "assistant_threshold", "gammatune", "gammatune_plus"]
PLAIN_STEPS = {"smartspec", "cost_aware"}  # policies that may choose γ = 0 (a plain target step)
FAST = settings(max_examples=150, deadline=None)


def rnd(accepted: int, drafted: int, gamma: int | None = None, conf: tuple[float, ...] = ()) -> RoundOutcome:
    return RoundOutcome(
        gamma=drafted if gamma is None else gamma, drafted=drafted, accepted=accepted, confidences=conf
    )


def conf(confidence: float) -> DraftStep:
    """What the drafter shows ``stop_drafting`` for a token drafted with this probability."""
    return DraftStep(1, confidence=confidence)


def run(policy, rounds):
    """Feed ``(A, d)`` pairs; return γ after each round (what next_gamma says)."""
    out = []
    for a, d in rounds:
        policy.observe(rnd(a, d, policy.next_gamma()))
        out.append(policy.next_gamma())
    return out


# (A, d) sequences: d drafted (0..30), A accepted (0..d)
ad_pair = st.integers(0, 30).flatmap(lambda d: st.tuples(st.integers(0, d), st.just(d)))
ad_seq = st.lists(ad_pair, max_size=60)


# --------------------------------------------------------------------------- hf_heuristic


def test_hf_heuristic_hand_checked():
    p = HFHeuristic(5)
    assert p.next_gamma() == 5
    rounds = [
        (5, 5),  # all accepted -> 7
        (2, 7),  # rejection -> 6
        (3, 3),  # only 3 drafted (budget) but all accepted: transformers compares with d -> 8
        (0, 8),  # -> 7
        (6, 7),  # one short of all -> 6
        (6, 6),  # -> 8
    ]
    assert run(p, rounds) == [7, 6, 8, 7, 6, 8]


def test_hf_heuristic_floor_and_no_cap():
    p = HFHeuristic(1)
    assert run(p, [(0, 1), (0, 1)]) == [1, 1]  # max(1, γ - 1)
    p = HFHeuristic(20)
    assert run(p, [(g, g) for g in range(20, 60, 2)])[-1] == 60  # no upper cap in transformers


def test_hf_heuristic_empty_round_counts_as_all_accepted():
    # transformers: num_matches (0) == candidate_length (0) -> +2
    p = HFHeuristic(4)
    assert run(p, [(0, 0)]) == [6]


@FAST
@given(g0=st.integers(1, 30), seq=ad_seq)
def test_hf_heuristic_matches_reference(g0, seq):
    p = HFHeuristic(g0)
    g = g0
    for a, d in seq:
        p.observe(rnd(a, d))
        g = g + 2 if a == d else max(1, g - 1)
        assert p.next_gamma() == g >= 1


def test_hf_heuristic_persistent_vs_transient():
    persistent, transient = HFHeuristic(5, transient=False), HFHeuristic(5)
    assert transient.transient is True  # the default: restart at every prompt (issue 13 item 2)
    for p in (persistent, transient):
        p.begin_prompt()
        run(p, [(5, 5), (7, 7), (0, 9)])  # 7, 9, 8
        assert p.next_gamma() == 8
        p.begin_prompt()
    assert persistent.next_gamma() == 8  # "heuristic": written back, carries over
    assert transient.next_gamma() == 5  # "heuristic_transient": initial γ again
    assert persistent.state()["gamma"] == 8 and persistent.state()["transient"] is False


# --------------------------------------------------------------------------- gammatune


SEQ = [
    (4, 4),  # A = γ = 4: A' = 6; γ̄ = 2 + 3 = 5 -> 5
    (2, 5),  # γ̄ = 2.5 + 1 = 3.5 -> 4
    (0, 4),  # 1.75 -> 2
    (0, 2),  # 0.875 -> clipped to γ_min 1 -> 1
    (1, 1),  # A = γ = 1: A' = 3: 0.5 + 1.5 = 2 -> 2
    (1, 1),  # γ = 2 but only 1 drafted (stopped early), and accepted
]


def test_gammatune_hand_checked():
    """The paper's rule (expand_on=gamma, the default): the cut-short last round does not expand
    (A = 1 != γ = 2): 0.5·2 + 0.5·1 = 1.5 -> 2."""
    p = GammaTune(4, eta=0.5, delta=2, gamma_min=1, gamma_max=32)
    assert p.expand_on == "gamma" and p.state()["expand_on"] == "gamma"
    assert run(p, SEQ) == [5, 4, 2, 1, 2, 2]
    assert p.gamma_bar == 1.5


def test_gammatune_expand_on_drafted_counts_a_cut_short_round():
    """The named variant: every *drafted* token accepted expands (A = d), so the last round of
    SEQ gives A' = 3: 0.5·2 + 0.5·3 = 2.5 -> 3."""
    p = GammaTune(4, eta=0.5, delta=2, gamma_min=1, gamma_max=32, expand_on="drafted")
    assert run(p, SEQ) == [5, 4, 2, 1, 2, 3]
    assert p.gamma_bar == 2.5 and p.state()["expand_on"] == "drafted"


def test_gammatune_plus_confidence_stop_blocks_expansion_only_under_the_paper_rule():
    stopped = RoundOutcome(gamma=6, drafted=2, accepted=2, confidences=(0.9, 0.3))
    paper, variant = GammaTunePlus(6, eta=0.5), GammaTunePlus(6, eta=0.5, expand_on="drafted")
    paper.observe(stopped)
    variant.observe(stopped)
    assert paper.gamma_bar == 4.0  # 0.5·6 + 0.5·2
    assert variant.gamma_bar == 5.0  # 0.5·6 + 0.5·(2 + 2)
    with pytest.raises(ConfigError, match="expand_on"):
        build_policy("gammatune", 5, {"expand_on": "always"})


def test_gammatune_upper_bound_and_empty_round():
    p = GammaTune(6, eta=0.5, delta=2, gamma_max=6)
    assert run(p, [(6, 6)]) == [6]  # 0.5*6 + 0.5*8 = 7 -> clipped to 6
    assert p.gamma_bar == 6
    before = p.state()
    run(p, [(0, 0)])  # nothing drafted: no information, no change
    assert p.state() == before


@pytest.mark.parametrize(
    ("eta", "g0", "a", "d", "want"), [(0.2, 3, 3, 5, 3), (0.2, 6, 1, 3, 5), (0.6, 6, 1, 3, 3)]
)
def test_gammatune_ceil_ignores_float_fuzz(eta, g0, a, d, want):
    p = GammaTune(g0, eta=eta, delta=2, expand_on="drafted")
    run(p, [(a, d)])
    assert p.gamma_bar != want and math.isclose(p.gamma_bar, want)  # e.g. 3.0000000000000004
    assert p.next_gamma() == want


def ceil_guarded(x) -> int:
    return math.ceil(x - Fraction(1, 10**9))


@FAST
@given(
    g0=st.integers(1, 24),
    eta=st.sampled_from([0.05, 0.1, 0.25, 0.5, 0.75, 1.0]),
    delta=st.integers(0, 4),
    gmax_extra=st.integers(0, 16),
    seq=ad_seq,
    expand_on=st.sampled_from(["gamma", "drafted"]),
)
def test_gammatune_matches_direct_ewma(g0, eta, delta, gmax_extra, seq, expand_on):
    gmin, gmax = 1, g0 + gmax_extra
    p = GammaTune(g0, eta=eta, delta=delta, gamma_min=gmin, gamma_max=gmax, expand_on=expand_on)
    # exact rational reference: γ̄_k = clip((1-η) γ̄_{k-1} + η A'_k), A' = A + δ when A = γ (or A = d)
    e, gbar, g = Fraction(eta), Fraction(g0), g0
    for a, d in seq:
        p.observe(rnd(a, d, g))
        if d >= 1:
            a_prime = a + delta if a == (g if expand_on == "gamma" else d) else a
            gbar = min(Fraction(gmax), max(Fraction(gmin), (1 - e) * gbar + e * a_prime))
            g = ceil_guarded(gbar)
        assert p.gamma_bar == pytest.approx(float(gbar), abs=1e-9)
        assert p.next_gamma() == g >= 1
        assert gmin <= p.gamma_bar <= gmax


@FAST
@given(
    g0=st.integers(1, 24),
    eta=st.floats(0.01, 1.0),
    delta=st.floats(0, 5),
    gmin=st.floats(0.1, 1.0),
    gmax_extra=st.floats(0, 20),
    seq=ad_seq,
)
def test_gammatune_bounds_and_gamma_at_least_one(g0, eta, delta, gmin, gmax_extra, seq):
    gmax = g0 + gmax_extra
    p = GammaTunePlus(g0, eta=eta, delta=delta, gamma_min=gmin, gamma_max=gmax)
    for a, d in seq:
        p.observe(rnd(a, d))
        assert gmin <= p.gamma_bar <= gmax
        g = p.next_gamma()
        assert isinstance(g, int) and g >= 1
        assert g - 1 < p.gamma_bar + 1e-9 and p.gamma_bar <= g + 1e-9  # γ = ⌈γ̄⌉
    assp = p.state()
    assert {"gamma", "gamma_bar", "threshold"} <= set(assp)


def test_gammatune_converges_from_any_initial_gamma():
    # the paper's claim of robustness to the initial γ: the same history pulls all starts together
    # the draft matches the target for k tokens, then diverges: A = min(k, γ)
    history = [2, 1, 3, 0, 2] * 8
    finals = set()
    for g0 in PAPER_GAMMAS:
        p = GammaTune(g0)
        for k in history:
            d = p.next_gamma()
            p.observe(rnd(min(k, d), d))
        finals.add(p.next_gamma())
    assert max(finals) - min(finals) <= 1
    assert max(finals) <= 4  # and far below the largest starts


@pytest.mark.parametrize("cls", [GammaTune, GammaTunePlus])
def test_gammatune_persistent_vs_transient(cls):
    persistent, transient = cls(8, eta=0.5, transient=False), cls(8, eta=0.5)
    assert transient.transient is True  # the default: restart at every prompt (issue 13 item 2)
    for p in (persistent, transient):
        p.begin_prompt()
        run(p, [(0, 8), (0, 4)])  # 4 -> 2
        assert (p.gamma_bar, p.next_gamma()) == (2.0, 2)
        p.begin_prompt()
    assert (persistent.gamma_bar, persistent.next_gamma()) == (2.0, 2)
    assert (transient.gamma_bar, transient.next_gamma()) == (8.0, 8)


# --------------------------------------------------------------------------- confidence stop


@pytest.mark.parametrize(
    "make", [lambda **kw: AssistantThreshold(6, **kw), lambda **kw: GammaTunePlus(6, **kw)]
)
def test_threshold_stop_semantics(make):
    p = make(threshold=0.4)
    assert p.stop_drafting(conf(0.399)) is True
    assert p.stop_drafting(conf(0.0)) is True
    assert p.stop_drafting(conf(0.4)) is False  # equal: continue (transformers: p < τ stops)
    assert p.stop_drafting(conf(0.9)) is False
    off = make(threshold=0.0)
    assert not any(off.stop_drafting(conf(c)) for c in (0.0, 1e-9, 0.5))
    assert make().stop_drafting(conf(0.39)) and not make().stop_drafting(conf(0.41))  # default τ = 0.4


def test_gammatune_has_no_confidence_stop():
    assert not GammaTune(5).stop_drafting(conf(0.0))


@FAST
@given(g0=st.integers(1, 24), seq=ad_seq)
def test_assistant_threshold_gamma_is_fixed(g0, seq):
    p = AssistantThreshold(g0)
    for a, d in seq:
        p.observe(rnd(a, d))
        assert p.next_gamma() == g0
    p.begin_prompt()
    assert p.next_gamma() == g0 and p.state()["threshold"] == 0.4


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
    assert p.stop_drafting(conf(0.55)) and not p.stop_drafting(conf(0.6))
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


# --------------------------------------------------------------------------- registry and configs


def _params(cfg) -> dict:
    """A method config's policy knobs (what ``specbench.config.MethodConfig.params`` holds)."""
    return dict(MethodConfig.from_mapping(OmegaConf.to_container(cfg)).params)


def method_yamls():
    return sorted(METHOD_DIR.glob("*.yaml"))


def test_our_policies_registered():
    for name in ("hf_heuristic", "assistant_threshold", "gammatune", "gammatune_plus"):
        assert POLICIES.get(name).name == name


@pytest.mark.parametrize("path", method_yamls(), ids=lambda p: p.stem)
def test_method_yaml_builds(path):
    cfg = OmegaConf.load(path)
    assert cfg.name == path.stem
    if cfg.get("policy") is None:
        assert cfg.runner != "speculative"
        return
    for g in PAPER_GAMMAS:
        p = build_policy(cfg.policy, g, _params(cfg))
        p.begin_prompt()
        assert p.next_gamma() == g
        p.observe(rnd(1, min(g, 3), g, (0.9,) * min(g, 3)))
        assert p.next_gamma() >= (0 if cfg.policy in PLAIN_STEPS else 1)
        OmegaConf.create(p.state())  # JSON-like
    with pytest.raises(ConfigError):
        build_policy(cfg.policy, 0, _params(cfg))


def speculative_yamls() -> list[str]:
    """Every ``conf/method`` whose runner is our speculative loop with a γ policy (the paper's and the lab's)."""
    return [p.stem for p in method_yamls() if (c := OmegaConf.load(p)).get("runner") == "speculative" and c.get("policy")]


#: knobs a policy keeps under another attribute name (on ``policy.confidence``)
CONFIDENCE_ATTRS = {"threshold": "threshold_init", "adaptive_threshold": "adaptive", "persist_threshold": "persist"}


@pytest.mark.parametrize("stem", speculative_yamls())
def test_every_method_yaml_passes_every_key_on(stem):
    """The one YAML <-> policy-parameter check: a method YAML names exactly its policy's parameters (no typo,
    nothing left out), the paper's policies hold every value, its first round plays the initial γ, and the replay
    builds the same policy (``runners.replay.grid.load_method``)."""
    cfg = OmegaConf.load(METHOD_DIR / f"{stem}.yaml")
    assert cfg.name == stem and cfg.policy in POLICIES
    params = set(cfg) - set(NOT_KNOBS)  # name, runner, policy, display
    assert params == set(policy_params(POLICIES.get(cfg.policy)))
    p = build_policy(cfg.policy, 5, _params(cfg))
    for key in params if stem in OURS else ():  # the paper's policies keep each knob as given (others derive:
        holder = p.confidence if key in CONFIDENCE_ATTRS else p  # BanditSpec's arms gain the initial γ, ...)
        assert getattr(holder, CONFIDENCE_ATTRS.get(key, key)) == cfg[key], key
    p.begin_prompt()
    assert p.next_gamma() == 5
    assert load_method(stem).policy == cfg.policy


def _same(a, b) -> bool:
    """Equal as a YAML value and a Python default are (a list and a tuple of the same items alike)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    if isinstance(a, bool) or isinstance(b, bool):  # True == 1 in Python, never in a YAML knob
        return a is b
    return a == b


@pytest.mark.parametrize("name", [n for n in POLICIES.names() if n != "fixed"])
def test_a_policys_constructor_defaults_are_its_own_yamls(name):
    """One source of defaults (``specbench.config.method``): the YAML. A policy's constructor keeps defaults only to
    be built by hand, and they are its own YAML's (``conf/method/<policy>.yaml``), knob for knob: a default changed
    in one place and not the other fails here."""
    cfg = OmegaConf.to_container(OmegaConf.load(METHOD_DIR / f"{name}.yaml"))
    assert cfg["policy"] == name
    yaml_knobs = {k: v for k, v in cfg.items() if k not in NOT_KNOBS}
    knobs = POLICIES.get(name).knobs()
    assert list(knobs) == [k for k in knobs if k in yaml_knobs] and set(knobs) == set(yaml_knobs)
    assert all(_same(knobs[k], yaml_knobs[k]) for k in knobs), {k: (knobs[k], yaml_knobs[k]) for k in knobs}
    assert POLICIES.get("fixed").knobs() == {}  # SpecDecode's policy: no knob, nothing to agree on


def test_gammatune_plus_takes_gammatunes_knobs_from_gammatune():
    """GammaTune+ writes only its own three knobs; GammaTune's come from GammaTune's constructor."""
    plus, base = GammaTunePlus.knobs(), GammaTune.knobs()
    assert {k: plus[k] for k in base} == base
    assert set(plus) - set(base) == {"threshold", "adaptive_threshold", "persist_threshold"}
    policy = build_policy("gammatune_plus", 4, {"eta": 0.5, "delta": 1, "threshold": 0.3})
    assert (policy.eta, policy.delta, policy.gamma_max, policy.confidence.threshold_init) == (0.5, 1, 32, 0.3)
    with pytest.raises(ConfigError, match="no setting 'etta'"):
        build_policy("gammatune_plus", 4, {"etta": 0.5})


def test_the_check_covers_the_papers_and_the_labs_methods():
    assert set(OURS) | {"adaedl", "svip", "max_confidence", "logit_margin", "tapout", "banditspec",
                        "banditspec_exp3", "smartspec", "cost_aware"} <= set(speculative_yamls())


def test_transient_flags_in_yamls():
    """Every adaptive method restarts per prompt by default; carry-over is named (``*_carryover``)."""
    for name in ("hf_heuristic", "gammatune", "gammatune_plus", "hf_native_heuristic"):
        cfg = OmegaConf.load(METHOD_DIR / f"{name}.yaml")
        assert build_policy(cfg.policy, 5, _params(cfg)).transient is True, name
    for name in ("hf_heuristic_carryover", "hf_native_heuristic_carryover"):
        cfg = OmegaConf.load(METHOD_DIR / f"{name}.yaml")
        assert build_policy(cfg.policy, 5, _params(cfg)).transient is False, name
    for name in ("gammatune", "gammatune_plus"):
        assert OmegaConf.load(METHOD_DIR / f"{name}.yaml").expand_on == "gamma"


def test_sweep_overrides_reach_the_policy():
    cfg = OmegaConf.load(METHOD_DIR / "gammatune_plus.yaml")
    cfg = OmegaConf.merge(
        cfg, OmegaConf.from_dotlist(["eta=0.5", "transient=true", "threshold=0.3", "delta=1"])
    )
    p = build_policy(cfg.policy, 5, _params(cfg))
    assert (p.eta, p.transient, p.confidence.threshold, p.delta) == (0.5, True, 0.3, 1.0)


@pytest.mark.parametrize(
    "name", ["fixed", "hf_heuristic", "assistant_threshold", "gammatune", "gammatune_plus"]
)
def test_gamma_zero_is_config_error(name):
    with pytest.raises(ConfigError):
        build_policy(name, 0)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("hf_heuristic", {"transient": "false"}),  # a string is not a flag
        ("assistant_threshold", {"threshold": 1.5}),
        ("assistant_threshold", {"threshold": -0.1}),
        ("gammatune", {"eta": 0}),
        ("gammatune", {"eta": 1.5}),
        ("gammatune", {"delta": -1}),
        ("gammatune", {"gamma_min": 0}),
        ("gammatune", {"gamma_min": 8, "gamma_max": 4}),
        ("gammatune", {"gamma_max": 4}),  # initial γ 5 above γ_max
        ("gammatune_plus", {"threshold": "high"}),
    ],
)
def test_bad_params_are_config_errors(name, params):
    with pytest.raises(ConfigError):
        build_policy(name, 5, params)


# --------------------------------------------------------------------------- snapshot / restore


def _warm_up_generation(policy, rounds: int = 8) -> None:
    """What an untimed generation does to a policy (no models): a prompt begins, then each round γ is
    asked, drafting is asked to stop after each drafted token (confidences falling), and the outcome
    (with its measured costs) is observed."""
    policy.begin_prompt()
    for r in range(rounds):
        gamma = min(policy.next_gamma(), 12)
        confidences = []
        for position in range(1, gamma + 1):
            confidences.append(round(0.95 - 0.13 * position + 0.05 * (r % 3), 4))
            step = DraftStep(position, token=7, confidence=confidences[-1], entropy=0.5, margin=0.3, budget=gamma)
            if policy.stop_drafting(step):
                break
        drafted = policy.verify_count(len(confidences))
        accepted = (r * 5) % (drafted + 1)
        policy.observe(RoundOutcome(gamma=gamma, drafted=drafted, accepted=accepted,
                                    confidences=tuple(confidences[:drafted]), draft_ms=1.0 + drafted,
                                    verify_ms=4.0 + 0.5 * drafted, round_ms=5.5 + 1.5 * drafted,
                                    discarded=len(confidences) - drafted))


def _plain(value):
    """A policy's whole state as plain, comparable values (objects by their attributes, arrays as lists,
    random generators by their state)."""
    import random
    from collections import deque

    import numpy as np

    if isinstance(value, random.Random):
        return ("Random", value.getstate())
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | deque):
        return (type(value).__name__, [_plain(v) for v in value])
    if isinstance(value, frozenset | set):
        return value
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return (type(value).__name__, _plain(vars(value)))
    return value


SNAPSHOT_POLICIES = [
    ("gammatune", {"transient": False}),
    ("gammatune_plus", {"transient": False, "adaptive_threshold": True, "persist_threshold": True}),
    ("banditspec", {"algorithm": "ucb", "transient": False}),
    ("banditspec", {"algorithm": "exp3", "transient": False}),
    ("hf_heuristic", {"transient": False}),
    ("cost_aware", {"transient": False}),
]


@pytest.mark.parametrize(("name", "params"), SNAPSHOT_POLICIES)
def test_restore_after_a_warm_up_generation_leaves_the_policy_exactly_as_it_was(name, params):
    """``Job.untimed``'s contract (``warmup_per_prompt``): snapshot, an untimed generation, restore, and
    the policy is in its prior state, attribute for attribute (counts, carried γ, EWMA, random state,
    learnt costs), and decides the next prompt as an untouched twin does."""
    import copy

    policy = build_policy(name, 4, params)
    _warm_up_generation(policy, rounds=5)  # state carried over from an earlier, timed prompt
    before = _plain(vars(policy))
    twin = copy.deepcopy(policy)
    saved = policy.snapshot()
    _warm_up_generation(policy)
    assert _plain(vars(policy)) != before, "the warm-up must move the policy for this test to mean anything"
    policy.restore(saved)
    assert _plain(vars(policy)) == before
    _warm_up_generation(policy)
    _warm_up_generation(twin)
    assert _plain(vars(policy)) == _plain(vars(twin))
    policy.restore(saved)  # a snapshot can be restored again
    assert _plain(vars(policy)) == before


@pytest.mark.parametrize("name", sorted(POLICIES.names()))
def test_every_policy_restores_its_snapshot(name):
    """Every registered policy, with its defaults: restore after a warm-up gives back its prior state."""
    policy = build_policy(name, 4)
    _warm_up_generation(policy, rounds=3)
    before = _plain(vars(policy))
    saved = policy.snapshot()
    _warm_up_generation(policy)
    policy.restore(saved)
    assert _plain(vars(policy)) == before
