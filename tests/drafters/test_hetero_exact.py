"""Exact (noise-free) losslessness of TLI, the union baseline and SLRS on toy vocabularies.

Every random decision of an algorithm goes through a ``Chooser``; ``enumerate_outcomes``
runs the algorithm on every branch and returns each outcome's exact probability, so
"the output distribution equals the target's" is checked to 1e-9 on the same code that
samples. The mutant tests show these checks fail for the classic mistakes (a residual
that is ``p`` instead of ``max(0, p - q)``, verifying against the unrenormalised draft,
a ψ computed with another lookahead than the one that samples).
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
import torch

import methods.hetero.sampling as sampling
from methods.hetero import (
    SLRS,
    enumerate_outcomes,
    mapping_from_strings,
    tli_distribution,
    tli_step,
    union_step,
    verify_token,
)
from methods.hetero.sampling import TorchChooser, acceptance_probability, normalize
from specbench.registry import ConfigError

TOL = 1e-9

TARGET = ["a", "b", "ab", "c", "abc", "ba"]
DRAFT = ["b", "a", "x", "ab", "yy", "c", "ca"]  # shares a, b, ab, c; x, yy, ca are draft-only


def toy_dist(key: object, n: int, alpha: float = 0.8, zero_frac: float = 0.2) -> torch.Tensor:
    """A deterministic random distribution for ``key`` (float64), with some exact zeros."""
    rng = np.random.default_rng(zlib.crc32(repr(key).encode()))
    w = rng.dirichlet(np.full(n, alpha))
    w[rng.random(n) < zero_frac] = 0.0
    if w.sum() == 0:
        w[rng.integers(n)] = 1.0
    return torch.tensor(w / w.sum(), dtype=torch.float64)


def marginal(outcomes: dict, index: int = 1) -> dict:
    out: dict = {}
    for k, prob in outcomes.items():
        out[k[index]] = out.get(k[index], 0.0) + prob
    return out


def max_gap(dist: dict, p) -> float:
    """Largest difference between an outcome distribution and ``p`` (a tensor or a list)."""
    p = [float(x) for x in p]
    keys = set(dist) | set(range(len(p)))
    return max(abs(dist.get(k, 0.0) - (p[k] if isinstance(k, int) and k < len(p) else 0.0)) for k in keys)


MAPPING = mapping_from_strings(DRAFT, TARGET)


# ---------------------------------------------------------------- one position: TLI and union


def test_mapping_by_string():
    assert MAPPING.draft_to_target.tolist() == [1, 0, -1, 2, -1, 3, -1]
    assert MAPPING.intersection_size == 4


@pytest.mark.parametrize("seed", range(12))
def test_tli_one_position_is_lossless(seed):
    p, q = toy_dist(("p", seed), len(TARGET)), toy_dist(("q", seed), len(DRAFT), zero_frac=0.0)
    out = enumerate_outcomes(lambda ch: tli_step(p, q, MAPPING, ch))
    assert sum(out.values()) == pytest.approx(1.0, abs=TOL)
    assert max_gap(marginal(out), p) < TOL


@pytest.mark.parametrize("seed", range(12))
def test_union_one_position_is_lossless(seed):
    p, q = toy_dist(("p", seed), len(TARGET)), toy_dist(("q", seed), len(DRAFT))
    out = enumerate_outcomes(lambda ch: union_step(p, q, MAPPING, ch))
    dist = marginal(out)
    assert all(t < len(TARGET) for t in dist), "union must never output a draft-only token"
    assert max_gap(dist, p) < TOL


def test_tli_distribution_restricts_and_renormalises():
    q = toy_dist("q-restrict", len(DRAFT), zero_frac=0.0)
    qt = tli_distribution(q, MAPPING)
    shared = float(q[[0, 1, 3, 5]].sum())
    assert float(qt.sum()) == pytest.approx(1.0, abs=1e-12)
    want = [float(q[i]) / shared for i in (1, 0, 3, 5)] + [0.0, 0.0]
    assert qt.tolist() == pytest.approx(want, abs=1e-12)
    with pytest.raises(ValueError, match="no probability"):
        tli_distribution(torch.tensor([0, 0, 1.0, 0, 0, 0, 0], dtype=torch.float64), MAPPING)


def _accept_prob(outcomes: dict) -> float:
    return sum(prob for (accepted, _), prob in outcomes.items() if accepted)


@pytest.mark.parametrize("seed", range(40))
def test_theorem_4_1_tli_accepts_at_least_as_often_as_union(seed):
    rng = np.random.default_rng(seed)
    pool = [a + b for a in "abc" for b in ["", *"abc"]]  # 12 strings of 1-2 characters
    shared = str(rng.choice(pool))  # at least one shared token, so TLI can propose
    target = sorted({shared, *rng.choice(pool, size=int(rng.integers(1, 6)), replace=False)})
    draft = sorted({shared, *rng.choice(pool, size=int(rng.integers(1, 6)), replace=False)})
    mapping = mapping_from_strings(draft, target)
    p, q = toy_dist(("p41", seed), len(target), zero_frac=0.1), toy_dist(("q41", seed), len(draft), zero_frac=0.1)
    if float(q[mapping.shared_draft_ids].sum()) == 0.0:
        q = toy_dist(("q41", seed), len(draft), zero_frac=0.0)
    tli = _accept_prob(enumerate_outcomes(lambda ch: tli_step(p, q, mapping, ch)))
    union = _accept_prob(enumerate_outcomes(lambda ch: union_step(p, q, mapping, ch)))
    assert tli >= union - 1e-12
    # the closed forms of Theorem 4.1: sum over T∩D of min(p, q') and of min(p, q)
    shared = mapping.shared_draft_ids
    assert tli == pytest.approx(acceptance_probability(p.tolist(), tli_distribution(q, mapping).tolist()), abs=TOL)
    assert union == pytest.approx(
        sum(min(float(p[t]), float(q[d])) for d, t in zip(shared.tolist(), mapping.shared_target_ids.tolist(), strict=True)),
        abs=TOL,
    )


def test_theorem_4_1_is_strict_when_the_drafter_wastes_mass_and_equal_when_not():
    p = torch.tensor([0.5, 0.5, 0, 0, 0, 0], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.5, 0, 0, 0, 0], dtype=torch.float64)  # half on the draft-only "x"
    tli = _accept_prob(enumerate_outcomes(lambda ch: tli_step(p, q, MAPPING, ch)))
    union = _accept_prob(enumerate_outcomes(lambda ch: union_step(p, q, MAPPING, ch)))
    assert tli == pytest.approx(1.0) and union == pytest.approx(0.5)
    q_in = torch.tensor([0.3, 0.7, 0, 0, 0, 0, 0], dtype=torch.float64)  # all mass on shared tokens
    tli_in = _accept_prob(enumerate_outcomes(lambda ch: tli_step(p, q_in, MAPPING, ch)))
    union_in = _accept_prob(enumerate_outcomes(lambda ch: union_step(p, q_in, MAPPING, ch)))
    assert tli_in == pytest.approx(union_in, abs=TOL) == pytest.approx(0.8)


# ---------------------------------------------------------------- a whole round with several drafts


def target_next(ctx: tuple[int, ...]) -> torch.Tensor:
    return toy_dist(("target", ctx), len(TARGET), zero_frac=0.15)


def draft_next(text: str) -> torch.Tensor:
    """The drafter conditions on the text (it has its own tokenization of it)."""
    return toy_dist(("draft", text), len(DRAFT), zero_frac=0.15)


def tli_proposal(ctx, chooser):
    q = tli_distribution(draft_next("".join(TARGET[t] for t in ctx)), MAPPING)
    x = chooser.choice(q.tolist())
    return x, q


def run_round(ctx, gamma, length, chooser, propose=tli_proposal):
    """The loop in miniature: draft ``gamma`` tokens, verify each against the target in order,
    stop at the first rejection (the residual token) or add the bonus token; then let the target
    alone complete the sequence to ``length`` tokens. Returns the first ``length`` tokens."""
    drafts, qs = [], []
    for _ in range(gamma):
        x, q = propose(ctx + tuple(drafts), chooser)
        drafts.append(x)
        qs.append(q)
    out = list(ctx)
    for x, q in zip(drafts, qs, strict=True):
        accepted, tok = verify_token(target_next(tuple(out)).tolist(), q.tolist(), x, chooser)
        out.append(tok)
        if not accepted:
            break
    else:
        out.append(chooser.choice(target_next(tuple(out)).tolist()))
    while len(out) < length:
        out.append(chooser.choice(target_next(tuple(out)).tolist()))
    return tuple(out[:length])


def target_joint(length):
    return enumerate_outcomes(lambda ch: run_round((), 0, length, ch))


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_tli_round_with_several_drafts_is_lossless(gamma):
    length = 3
    got = enumerate_outcomes(lambda ch: run_round((), gamma, length, ch))
    want = target_joint(length)
    assert set(got) <= set(want)
    assert max(abs(got.get(k, 0.0) - v) for k, v in want.items()) < TOL


# ---------------------------------------------------------------- SLRS (Algorithm 3)

S_TARGET = ["a", "b", "ab", "aab", "ba", "bab", "abab", None]  # id 7: the EOS (no text)
S_DRAFT = ["a", "b", "ab", "c", None]  # "c" starts no target token; id 4: the draft EOS


def slrs(max_lookahead=None, **kw):
    return SLRS(S_DRAFT, S_TARGET, draft_eos_ids=[4], target_eos_id=7, max_lookahead=max_lookahead, **kw)


def s_draft_next(seq):
    return toy_dist(("slrs-draft", seq), len(S_DRAFT), zero_frac=0.1).tolist()


@pytest.mark.parametrize("lookahead", [None, 1, 2, 3])
def test_slrs_psi_is_the_distribution_of_the_sampled_candidate(lookahead):
    algo = slrs(lookahead)
    psi, bottom, _ = algo.psi(s_draft_next)
    cands = marginal(enumerate_outcomes(lambda ch: algo.draft(s_draft_next, ch)))
    assert cands.pop(None, 0.0) == pytest.approx(bottom, abs=TOL)
    assert max_gap(cands, psi) < TOL
    assert sum(psi) + bottom == pytest.approx(1.0, abs=TOL)


@pytest.mark.parametrize("lookahead", [None, 1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_slrs_step_is_lossless(lookahead, seed):
    p = toy_dist(("slrs-p", seed), len(S_TARGET), zero_frac=0.2)
    out = enumerate_outcomes(lambda ch: slrs(lookahead).step(p.tolist(), s_draft_next, ch))
    assert max_gap(marginal(out), p) < TOL


def test_slrs_lookahead_rule():
    algo = slrs()
    assert algo.first_token("aabx") == 3 and algo.first_token("abx") == 2 and algo.first_token("cab") is None
    assert not algo.determined("ab")  # "abab" may still follow
    assert algo.determined("abb") and algo.determined("c")
    # stop as soon as the first target token is fixed: "ab"+"b" -> "abb" -> first token "ab"
    assert algo.advance("ab", 2, 1) == ("abb", True, 2)
    assert algo.advance("", 1, 4) == ("", True, 7)  # an immediate draft EOS proposes the target EOS
    assert slrs(2).advance("a", 2, 0) == ("aa", True, 0)  # K = 2 reached: first token of "aa" is "a"


def test_slrs_a_longer_lookahead_accepts_more_here():
    p = toy_dist("slrs-long", len(S_TARGET), zero_frac=0.0).tolist()
    one, free = slrs(1).acceptance_probability(p, s_draft_next), slrs().acceptance_probability(p, s_draft_next)
    assert 0.0 < one < free <= 1.0


def test_slrs_tree_grows_as_lemma_3_1_and_is_refused_past_the_limit():
    # a complete draft vocabulary over {a} up to length n and the target token a^n:
    # 2^(n-1) draft sequences have a concatenation that is a proper prefix (Lemma 3.1)
    for n in range(1, 9):
        draft = ["a" * k for k in range(1, n + 1)]
        assert SLRS(draft, ["a" * n], max_nodes=10**6).tree_size() == 2 ** (n - 1)
    big = SLRS(["a" * k for k in range(1, 15)], ["a" * 14], max_nodes=1000)
    with pytest.raises(ConfigError, match="max_nodes=1000"):
        big.check_tree_size()
    with pytest.raises(ConfigError, match="max_nodes=1000"):
        big.psi(lambda seq: normalize([1.0] * 14))
    assert slrs().check_tree_size() < 50


def test_slrs_samples_with_a_torch_generator():
    algo, p = slrs(), toy_dist("slrs-torch", len(S_TARGET)).tolist()
    ch = TorchChooser(torch.Generator().manual_seed(0))
    outs = [algo.step(p, s_draft_next, ch)[1] for _ in range(200)]
    assert set(outs) <= {t for t, x in enumerate(p) if x > 0}


# ---------------------------------------------------------------- mutants: the checks can fail


def test_a_residual_of_p_instead_of_max_p_minus_q_is_detected(monkeypatch):
    monkeypatch.setattr(sampling, "residual", lambda p, q: normalize(list(p)))
    p, q = toy_dist(("p", 0), len(TARGET)), toy_dist(("q", 0), len(DRAFT), zero_frac=0.0)
    assert max_gap(marginal(enumerate_outcomes(lambda ch: tli_step(p, q, MAPPING, ch))), p) > 1e-3
    assert max_gap(marginal(enumerate_outcomes(lambda ch: union_step(p, q, MAPPING, ch))), p) > 1e-3


def test_verifying_against_the_unrenormalised_draft_is_detected():
    p, q = toy_dist(("p", 1), len(TARGET)), toy_dist(("q", 1), len(DRAFT), zero_frac=0.0)

    def wrong(ch):  # sample from q' but verify with q restricted, not renormalised
        qt = tli_distribution(q, MAPPING)
        x = ch.choice(qt.tolist())
        raw = torch.zeros(len(TARGET), dtype=torch.float64).index_add_(0, MAPPING.shared_target_ids, q[MAPPING.shared_draft_ids])
        return verify_token(p.tolist(), raw.tolist(), x, ch)

    assert max_gap(marginal(enumerate_outcomes(wrong)), p) > 1e-3


def test_a_psi_from_another_lookahead_is_detected(monkeypatch):
    p = toy_dist("slrs-mutant", len(S_TARGET), zero_frac=0.0).tolist()
    wrong_psi = slrs(1).psi(s_draft_next)
    monkeypatch.setattr(SLRS, "psi", lambda self, draft_next: wrong_psi)
    try:
        out = enumerate_outcomes(lambda ch: slrs().step(p, s_draft_next, ch))
    except RuntimeError as exc:  # a sampled candidate the wrong ψ gives no mass: caught as well
        assert "psi" in str(exc)
        return
    assert max_gap(marginal(out), p) > 1e-3


def test_a_round_with_a_drafter_that_lies_about_q_is_detected():
    def lying(ctx, chooser):  # samples from the drafter but reports the uniform distribution
        x, q = tli_proposal(ctx, chooser)
        return x, torch.full_like(q, 1.0 / len(q))

    got = enumerate_outcomes(lambda ch: run_round((), 2, 2, ch, propose=lying))
    want = target_joint(2)
    assert max(abs(got.get(k, 0.0) - v) for k, v in want.items()) > 1e-3


# ---------------------------------------------------------------- configs


def test_a_cross_vocabulary_algorithm_needs_a_draft_model():
    from specbench.config import JobConfig

    from helpers import compose

    for name in ("slem", "tli", "slrs", "union"):  # a cross-vocabulary algorithm needs a draft model with its tokenizer
        with pytest.raises(ConfigError, match="needs a draft model"):
            JobConfig.from_mapping(compose("pair=gemma3-270m_prompt-lookup", f"hetero={name}"))


# ---------------------------------------------------------------- one implementation, shared with the drafters


def test_tli_and_union_are_built_from_the_same_two_functions():
    from methods.hetero import UnionSpace, tli_restrict, to_target

    q = toy_dist("one-impl", len(DRAFT), zero_frac=0.0)
    restricted = tli_restrict(q, MAPPING)  # what the TLI drafter samples its draft id from
    assert float(restricted.sum()) == pytest.approx(1.0) and float(restricted[[2, 4, 6]].sum()) == 0.0
    assert torch.equal(tli_distribution(q, MAPPING), to_target(restricted, MAPPING))
    space = UnionSpace(MAPPING)  # union: to_target(q) on T, then the draft-only mass, in draft-id order
    assert space.extend_draft(q).tolist() == pytest.approx([*to_target(q, MAPPING).tolist(), *q[[2, 4, 6]].tolist()])
    assert space.draft_to_union.tolist() == [1, 0, 6, 2, 7, 3, 8]
    batch = torch.stack([q, toy_dist("one-impl-2", len(DRAFT), zero_frac=0.0)])  # rows, as the drafters pass them
    assert torch.allclose(tli_distribution(batch, MAPPING)[1], tli_distribution(batch[1], MAPPING))


def test_slrs_stops_walking_once_the_tree_is_known_to_exceed_the_bound():
    from methods.hetero import SLRSTooLarge

    calls = []

    def counting(seq):
        calls.append(seq)
        return s_draft_next(seq)

    full = slrs()
    _, _, nodes = full.psi(s_draft_next)
    for bound in range(1, nodes):
        calls.clear()
        with pytest.raises(SLRSTooLarge):
            slrs(max_nodes=bound).psi(counting)
        assert len(calls) <= bound  # never more drafter evaluations than the bound
    assert slrs(max_nodes=nodes).psi(s_draft_next)[2] == nodes


def test_determined_by_bisection_equals_the_set_of_proper_prefixes():
    rng = np.random.default_rng(5)
    target = sorted({"".join(rng.choice(list("abc"), size=int(rng.integers(1, 5)))) for _ in range(30)})
    algo = SLRS(["a", "b", "c"], target)
    prefixes = {s[:k] for s in target for k in range(len(s))}
    for n in range(0, 6):
        for s in ("".join(t) for t in itertools.product("abc", repeat=n)):
            assert algo.determined(s) == (s not in prefixes), s


def test_top_k_proposal_keeps_the_k_most_likely_and_renormalises():
    from methods.hetero.slrs import top_k_proposal

    q = torch.tensor([0.1, 0.4, 0.2, 0.3])
    assert top_k_proposal(q, 2).tolist() == pytest.approx([0.0, 4 / 7, 0.0, 3 / 7])
    assert top_k_proposal(q, None) is q and top_k_proposal(q, 9) is q
