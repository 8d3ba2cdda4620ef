"""Batched decoding (issue 31): every row lossless, per-row policies exactly their batch-1 selves,
a shared γ shared, rows of different lengths leaving the batch, a sliding window kept exact."""

from __future__ import annotations

import math

import pytest
import torch

import runners.drafters.batched_model as batched_model
import runners.drafters.model as model_drafter
import runners.engine.batched as batched
import runners.engine.ragged as ragged
import runners.engine.speculative as speculative
import runners.engine.verify as verify
from methods import build_policy
from runners.drafters.batched_model import BatchedModelDrafter
from runners.drafters.model import ModelDrafter
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.engine.batch_drafters import PerRowDrafters
from runners.engine.batched import BatchedAutoregressiveRunner, BatchedSpeculativeRunner
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import Sampling

from helpers.exact_law import enumerated_law, processed_law
from helpers.tiny import tiny_gemma3, tiny_model, tiny_pair

TEXTS = ("the quick brown fox", "one two three four five six seven", "a cat",
         "def add(a, b):\n    return a + b\n translate the sentence")
NEW = 36


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(TEXTS, draft="noisy", noise=0.3)


@pytest.fixture(scope="module")
def refs(pair):
    return [AutoregressiveRunner(pair.target, []).generate(p, NEW).tokens for p in pair.prompts]


def _drafter(pair, kind):
    if kind == "model":
        return BatchedModelDrafter(pair.draft, [])
    return PerRowDrafters(PromptLookupDrafter)


def _runner(pair, kind, mode, policy, gamma=4, rows=4, eos=(), **kw):
    policies = [build_policy(policy, gamma) for _ in range(rows if mode == "per_row" else 1)]
    return BatchedSpeculativeRunner(pair.target, _drafter(pair, kind), policies, list(eos), gamma_mode=mode, **kw)


@pytest.mark.parametrize("mode", ["per_row", "shared"])
@pytest.mark.parametrize("kind,policy", [("model", "fixed"), ("model", "gammatune"), ("model", "assistant_threshold"),
                                         ("prompt_lookup", "fixed")])
def test_every_row_equals_its_own_autoregressive_output(pair, refs, kind, policy, mode):
    out = _runner(pair, kind, mode, policy).generate(pair.prompts, NEW)
    assert [g.tokens for g in out.rows] == refs
    assert all(g.rounds.drafted and sum(g.rounds.drafted) > 0 for g in out.rows)
    assert out.tokens == sum(len(r) for r in refs)


def test_batched_autoregressive_decoding_equals_the_target_alone(pair, refs):
    out = BatchedAutoregressiveRunner(pair.target, []).generate(pair.prompts, NEW)
    assert [g.tokens for g in out.rows] == refs
    assert not any(g.speculative for g in out.rows)


@pytest.mark.parametrize("policy", ["fixed", "gammatune", "hf_heuristic"])
def test_per_row_policies_run_exactly_their_batch_one_rounds(pair, policy):
    out = _runner(pair, "model", "per_row", policy, gamma=3).generate(pair.prompts, NEW)
    for prompt, row in zip(pair.prompts, out.rows):
        alone = SpeculativeRunner(pair.target, ModelDrafter(pair.draft, []), build_policy(policy, 3), []).generate(prompt, NEW)
        assert (row.rounds.gamma, row.rounds.drafted, row.rounds.accepted, row.rounds.confidences) == (
            alone.rounds.gamma, alone.rounds.drafted, alone.rounds.accepted, alone.rounds.confidences)


def test_a_shared_gamma_is_one_length_per_round_for_every_row(pair, refs):
    out = _runner(pair, "model", "shared", "gammatune", gamma=2).generate(pair.prompts, NEW)
    traces = [g.rounds.gamma for g in out.rows]
    for k in range(max(map(len, traces))):
        assert len({t[k] for t in traces if k < len(t)}) == 1
    assert len({t[k] for t in traces for k in range(len(t))}) > 1  # GammaTune moved it
    per_row = _runner(pair, "model", "per_row", "gammatune", gamma=2).generate(pair.prompts, NEW)
    assert [g.rounds.gamma for g in per_row.rows] != traces  # the two modes are different policies


def test_rows_stopping_at_eos_leave_the_batch_and_stay_lossless(pair, refs):
    eos = refs[1][5]  # a token row 1 emits early: rows stop at different rounds
    want = [AutoregressiveRunner(pair.target, [eos]).generate(p, NEW).tokens for p in pair.prompts]
    assert len({len(w) for w in want}) > 1
    out = _runner(pair, "model", "per_row", "fixed", eos=[eos]).generate(pair.prompts, NEW)
    assert [g.tokens for g in out.rows] == want
    finished = sorted(out.rows, key=lambda g: len(g.tokens))
    assert finished[0].wall_ms <= finished[-1].wall_ms <= out.wall_ms
    assert all(g.ttft_ms == out.ttft_ms for g in out.rows)
    # every instant after the prefill is in a phase, also the rounds where rows leave
    assert sum(out.phase_ms.values()) == pytest.approx(out.wall_ms - out.ttft_ms, rel=1e-9)


def test_a_row_ending_at_its_first_token_has_no_later_first_round(pair, refs):
    eos = refs[0][0]  # row 0 ends at the prefill; the others go on
    assert any(eos not in r[:1] for r in refs[1:])
    out = _runner(pair, "model", "per_row", "fixed", eos=[eos]).generate(pair.prompts, NEW)
    assert out.rows[0].tokens == [eos]
    for g in out.rows:
        assert g.ttft_ms <= g.first_round_ms <= g.wall_ms


def test_a_smaller_last_batch_and_a_batch_of_one(pair, refs):
    runner = _runner(pair, "model", "per_row", "gammatune")
    assert [g.tokens for g in runner.generate(pair.prompts[:3], NEW).rows] == refs[:3]
    assert [g.tokens for g in runner.generate(pair.prompts[3:], NEW).rows] == refs[3:]


def test_repacking_every_round_changes_nothing(pair, refs, monkeypatch):
    monkeypatch.setattr(ragged, "HOLE_SHARE", 0.0)
    out = _runner(pair, "model", "per_row", "fixed", gamma=5).generate(pair.prompts, NEW)
    assert out.repacks > 0
    assert [g.tokens for g in out.rows] == refs



@pytest.mark.slow
def test_a_sliding_window_sees_each_rows_own_last_tokens(monkeypatch):
    """Gemma-3's sliding layers count columns: rows longer than the window (8) stay exact only because the
    cache is repacked before a forward that reaches past it; without the repack rows diverge (can fail)."""
    target, draft = tiny_gemma3(1), tiny_gemma3(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.003)
    prompts = [list(range(3, 20)), [5, 6, 7], list(range(10, 22)), [9]]
    refs = [AutoregressiveRunner(target, []).generate(p, 30).tokens for p in prompts]

    def run():
        policies = [build_policy("fixed", 4) for _ in prompts]
        return BatchedSpeculativeRunner(target, BatchedModelDrafter(draft, []), policies, []).generate(prompts, 30)

    out = run()
    assert [g.tokens for g in out.rows] == refs
    for prompt, row in zip(prompts, out.rows):
        alone = SpeculativeRunner(target, ModelDrafter(draft, []), build_policy("fixed", 4), []).generate(prompt, 30)
        assert row.rounds.accepted == alone.rounds.accepted
    monkeypatch.setattr(ragged.RaggedCache, "repack", lambda self: None)
    assert [g.tokens for g in run().rows] != refs


@pytest.mark.slow
def test_sampling_is_exact_per_row(monkeypatch):
    """Two rows sampled together: the joint law is the product of each prompt's processed target law
    (every random decision enumerated), while the draft's own law is far from it (the test can fail)."""
    law = enumerated_law(monkeypatch, (verify, speculative, model_drafter, batched, batched_model))
    vocab = 5
    target = tiny_model(vocab, seed=21, hidden=16, layers=1)
    draft = tiny_model(vocab, seed=22, hidden=16, layers=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(4.0)
        draft.lm_head.weight.mul_(4.0)
    sampling = Sampling(1.0, top_k=3)
    prompts = [[1, 2], [3]]
    want_rows = [processed_law(target, p, 2, sampling) for p in prompts]
    want = {(a, b): pa * pb for a, pa in want_rows[0].items() for b, pb in want_rows[1].items()}
    assert max(abs(v - processed_law(draft, prompts[0], 2, sampling).get(k, 0.0)) for k, v in want_rows[0].items()) > 0.05
    for mode in ("per_row", "shared"):
        policies = [build_policy("fixed", 2) for _ in range(2 if mode == "per_row" else 1)]
        runner = BatchedSpeculativeRunner(target, BatchedModelDrafter(draft, []), policies, [], sampling, mode)
        got = law(lambda r=runner: [tuple(g.tokens) for g in r.generate(prompts, 2).rows])
        assert max(abs(got.get(k, 0.0) - v) for k, v in want.items()) < 2e-6
        assert math.isclose(sum(got.values()), 1.0, abs_tol=1e-9)


@pytest.mark.parametrize("kind", ["model", "prompt_lookup"])
def test_the_transposed_kernels_change_no_row_and_run_every_target_forward(pair, refs, kind, monkeypatch):
    """``engine.fast_linear`` at B > 1 (``runners.engine.fast_linear.batch_kernels``): the speculative loop and the target
    alone at B run their target forwards on the transposed copy, up to ``BATCH_MAX_ROWS`` rows, and every row
    is still its own autoregressive output."""
    from runners.engine.fast_linear import BATCH_MAX_ROWS, batch_kernels
    from runners.engine.linear_kernels import TransposedLinear
    from specbench.config import EngineConfig

    fast = batch_kernels(pair.target, EngineConfig(fast_linear="all"))
    assert fast.executor is not None and fast.describe() == {"fast_linear": "all", "buckets": {}, "fused_prefill": False}
    layers = [m for m in fast.executor.modules() if isinstance(m, TransposedLinear)]
    assert layers and all(m.max_rows == BATCH_MAX_ROWS for m in layers)
    cache = ragged.RaggedCache(pair.target, 2, executor=fast.executor)  # the transposed head's strided output
    cache.forward([pair.prompts[0][:3], pair.prompts[1][:4]])
    assert all(r.is_contiguous() for r in cache.forward([[5, 6, 7], [8, 9]]))  # laid out row by row
    rows_seen, forward = [], TransposedLinear.forward

    def counted(self, x):
        rows_seen.append(x.numel() // x.shape[-1])
        return forward(self, x)

    monkeypatch.setattr(TransposedLinear, "forward", counted)
    out = _runner(pair, kind, "per_row", "gammatune", fast=fast).generate(pair.prompts, NEW)
    assert [g.tokens for g in out.rows] == refs
    spec_rows = list(rows_seen)
    assert any(16 < r <= BATCH_MAX_ROWS for r in spec_rows)  # 4 rows × a block: past the batch-1 bound of 16
    rows_seen.clear()
    ar = BatchedAutoregressiveRunner(pair.target, [], fast=fast).generate(pair.prompts, NEW)
    assert [g.tokens for g in ar.rows] == refs
    assert rows_seen and set(rows_seen[len(rows_seen) // 2:]) <= {1, 2, 3, 4}  # decoding steps: a row each
    off = batch_kernels(pair.target, EngineConfig(fast_linear=False))
    assert off.executor is None and off.describe()["fast_linear"] is False


def test_the_onednn_kernels_run_every_batched_target_forward_and_change_no_row(pair, refs, monkeypatch):
    """``engine.fast_linear=onednn`` at B > 1: the batched loop and the target alone at B run every target forward on
    the oneDNN copy (one copy, the batch-1 loop's too), and every row is still its own autoregressive output."""
    from runners.engine.fast_linear import batch_kernels, fast_executor
    from runners.engine.linear_kernels import PackedLinear, onednn_available
    from specbench.config import EngineConfig

    if not onednn_available():
        pytest.skip("this torch has no oneDNN")
    fast = batch_kernels(pair.target, EngineConfig(fast_linear="onednn"))
    assert fast.describe()["fast_linear"] == "onednn" and fast.executor is fast_executor(pair.target, "onednn")
    rows_seen, forward = [], PackedLinear.forward

    def counted(self, x):
        rows_seen.append(x.numel() // x.shape[-1])
        return forward(self, x)

    monkeypatch.setattr(PackedLinear, "forward", counted)
    out = _runner(pair, "model", "per_row", "gammatune", fast=fast).generate(pair.prompts, NEW)
    assert [g.tokens for g in out.rows] == refs and rows_seen
    rows_seen.clear()
    ar = BatchedAutoregressiveRunner(pair.target, [], fast=fast).generate(pair.prompts, NEW)
    assert [g.tokens for g in ar.rows] == refs and rows_seen


def test_bad_input_is_a_clear_error(pair):
    with pytest.raises(ValueError, match="gamma_mode"):
        _runner(pair, "model", "diagonal", "fixed")
    runner = _runner(pair, "model", "per_row", "fixed", rows=2)
    with pytest.raises(ValueError, match="3 rows but 2 policies"):
        runner.generate(pair.prompts[:3], 4)
    with pytest.raises(ValueError, match="no prompts"):
        runner.generate([], 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        runner.generate(pair.prompts[:2], 0)
