"""Speculation-length policies: hand-checked sequences, properties against independent
reference computations written out here, and the method configs that build them.

No models: every test drives a policy with synthetic ``RoundOutcome``s.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from methods.base import DraftStep, RoundOutcome
from methods.gammatune import GammaTune, GammaTunePlus
from methods.hf_heuristic import HFHeuristic
from methods.policies import POLICIES, build_policy
from methods.threshold import AssistantThreshold
from specbench.registry import ConfigError

from helpers.rounds import FAST, ad_seq, conf, rnd, run

METHOD_DIR = Path(__file__).resolve().parents[2] / "conf" / "method"
PAPER_GAMMAS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24]
OURS = ["hf_heuristic", "hf_heuristic_carryover", "assistant_threshold", "gammatune", "gammatune_plus"]
PLAIN_STEPS = {"smartspec", "cost_aware"}  # policies that may choose γ = 0 (a plain target step)

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
