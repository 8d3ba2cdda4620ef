"""The engine's shape-aware kernels (``runners/engine/linear_kernels.py``, chosen in ``runners/engine/fast_linear.py``):
the transposed and oneDNN copies compute the
model's function on the same weights, are refused where they disagree or cannot swap, live as long as their model,
and ``fast_linear=auto`` takes the one measured fastest, or none."""

from __future__ import annotations

import weakref

import pytest
import torch

from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.linear_kernels import (
    PackedLinear,
    TransposedLinear,
    kernel_copy,
    onednn_available,
    packed_bytes,
)
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify_forward import VerifyForward, engine_forward
from specbench.config import EngineConfig

from helpers import tiny

PAD_ALL = {n: (9, n) for n in range(1, 9)}  # every block of 1..8 tokens padded to 9, head on the real rows


@pytest.fixture(scope="module")
def pair():
    _, target, draft, prompts = tiny.tiny_pair(("the quick brown fox",))
    return target, draft, prompts


def test_kernel_copy_shares_the_weights_and_leaves_the_model_alone(pair):
    target = pair[0]
    fast = kernel_copy(target, "all")
    assert fast is not None and fast is not target
    swapped = [m for m in fast.modules() if isinstance(m, TransposedLinear)]
    assert len(swapped) == sum(type(m) is torch.nn.Linear for m in target.modules())
    assert not any(isinstance(m, TransposedLinear) for m in target.modules())
    params = {id(p) for p in target.parameters()}
    assert all(id(m.weight) in params for m in swapped)  # no copy of the weights
    head_only = kernel_copy(target, "head")
    assert [type(m) for m in head_only.modules()].count(TransposedLinear) == 1


def test_transposed_linear_computes_the_linear_function():
    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 40)
    fast = TransposedLinear(lin)
    for shape in ((1, 1, 24), (1, 5, 24), (2, 3, 24), (1, 40, 24), (7, 24)):
        x = torch.randn(*shape)
        torch.testing.assert_close(fast(x), lin(x), rtol=1e-5, atol=1e-6)


needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")


@needs_onednn
def test_packed_linear_computes_the_linear_function_at_any_row_count():
    """``PackedLinear`` (issue 52): oneDNN's matmul on the reordered weight is the linear function, to rounding, for
    one row, a few, and a prefill's many, with and without a bias; its row's values do not depend on how many rows
    share the product (measured: the reorder's kernel computes each row alone)."""
    torch.manual_seed(0)
    for bias in (True, False):
        lin = torch.nn.Linear(24, 40, bias=bias)
        packed = PackedLinear(lin)
        assert packed.weight is lin.weight and packed.bias is lin.bias
        for shape in ((1, 1, 24), (1, 6, 24), (2, 3, 24), (1, 40, 24), (7, 24)):
            x = torch.randn(*shape)
            torch.testing.assert_close(packed(x), lin(x), rtol=1e-5, atol=1e-6)
        x = torch.randn(1, 6, 24)
        assert torch.equal(packed(x)[:, :1], packed(x[:, :1]))


@needs_onednn
def test_the_onednn_copy_shares_the_weights_adds_their_reordered_copy_and_stays_lossless(pair):
    """``engine.fast_linear=onednn``: every ``nn.Linear`` of the copy is a ``PackedLinear`` over the model's own
    parameters (their reordered copy is ``packed_bytes`` more memory); the loop and the target alone on it decode
    the target alone's greedy tokens, and the job's kernels name it without ``min_rows`` (no transposed layers)."""
    target, draft, prompts = pair
    onednn = kernel_copy(target, "onednn")
    layers = [m for m in onednn.modules() if isinstance(m, PackedLinear)]
    linears = [m for m in target.modules() if type(m) is torch.nn.Linear]
    assert len(layers) == len(linears) > 0
    params = {id(p) for p in target.parameters()}
    assert all(id(m.weight) in params for m in layers)
    assert packed_bytes(target) == sum(m.weight.numel() * m.weight.element_size() for m in linears)
    engine = EngineConfig.from_mapping({"fast_linear": "onednn", "verify_buckets": "probe", "bucket_k_max": 4})
    forward = engine_forward(target, engine, 4)
    assert forward.describe()["fast_linear"] == "onednn" and "min_rows" not in forward.describe()
    ref = AutoregressiveRunner(target, []).generate(prompts[0], 24).tokens
    out = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(4), [], forward=forward).generate(prompts[0], 24)
    assert out.tokens == ref


def test_a_single_row_goes_through_the_two_column_product(monkeypatch):
    """``SINGLE_ROW``: with ``min_rows=1`` one row is computed as the first of two equal rows (MKL's one-column
    product ran on one thread of two); its values are that product's first row, and the linear function's to
    rounding; ``min_rows=2`` leaves one row to ``F.linear``."""
    from runners.engine.linear_kernels import TransposedLinear

    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 40)
    one, two = TransposedLinear(lin, min_rows=1), TransposedLinear(lin)
    x = torch.randn(1, 1, 24)
    columns = []
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b: columns.append(b.shape[1]) or real_mm(a, b))
    y = one(x)
    assert columns == [2] and y.shape == (1, 1, 40)
    assert torch.equal(y[0], (real_mm(lin.weight, x[0].repeat(2, 1).t()).t() + lin.bias)[:1])
    assert torch.allclose(y, lin(x), atol=1e-5)
    columns.clear()
    two(x)
    assert columns == []  # one row below min_rows: F.linear


def test_fast_linear_with_soft_capping_keeps_gemma_outputs():
    """Gemma-3 (sliding window, final logit soft-capping): the copy runs the model's own forward."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
                           final_logit_softcapping=2.0, max_position_embeddings=128)
    model = Gemma3ForCausalLM(cfg).eval()
    fast = kernel_copy(model, "all")
    assert fast is not None
    ids = list(range(3, 20))
    ref = AutoregressiveRunner(model, []).generate(ids, 24).tokens
    out = SpeculativeRunner(model, ModelDrafter(model, []), FixedGamma(5), [],
                            forward=VerifyForward(model, PAD_ALL, fast, "all"), fused_prefill=True).generate(ids, 24)
    assert out.tokens == ref


def test_kernel_copy_is_refused_when_its_logits_disagree(pair, monkeypatch):
    monkeypatch.setattr(TransposedLinear, "forward", lambda self, x: torch.nn.functional.linear(x, self.weight) + 1.0)
    assert kernel_copy(pair[0], "all") is None


def test_quantized_linears_are_left_alone(pair):
    """A dynamically int8-quantized model (the default pair's draft) has no plain nn.Linear to swap."""
    import copy
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao deprecation notice
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(pair[0]), {torch.nn.Linear}, dtype=torch.qint8)
    assert kernel_copy(q, "all") is None


def test_a_shorter_probe_of_the_same_kernels_is_a_slice_of_a_longer_one(monkeypatch):
    """The target alone's step probes blocks up to 17 tokens, the loop's up to max(9, γ + 1): the second is the
    first one's rows, not a second measurement; other kernels, or a longer probe after a shorter one, are measured."""
    from runners.engine import fast_linear as vf

    calls = []

    def probe(executor, k_max, **_):
        calls.append(k_max)
        return {m: float(m) for m in range(1, k_max + 1)}, {r: 10.0 * r for r in range(1, k_max + 1)}

    monkeypatch.setattr(vf, "probe_costs", probe)
    model = tiny.tiny_model(300, seed=4)
    long = vf.probed_costs(model, None, "all", 17)
    short = vf.probed_costs(model, None, "all", 9)
    assert calls == [17] and short == ({m: long[0][m] for m in range(1, 10)}, {r: long[1][r] for r in range(1, 10)})
    vf.probed_costs(model, None, None, 9)  # other kernels
    vf.probed_costs(model, None, "head", 3)
    vf.probed_costs(model, None, "head", 5)  # longer than what was probed
    assert calls == [17, 9, 3, 5]


def test_the_probe_times_its_items_in_rounds_so_a_slow_spell_cannot_take_one_items_every_sample(monkeypatch):
    """``_fastest_each`` times every item once a round (the order rotating): a slow spell of the host that covers a
    few consecutive timings reaches some samples of every item, so each item's fastest stays its own cost. Timed item
    by item (all of one item's samples, then the next's), the same spell would cover all five samples of one item
    and make it read slower than it is (what the probe did before: one bucket map chosen from a slow spell)."""
    from runners.engine import fast_linear

    clock = {"t": 0.0, "calls": 0}
    cost = {"a": 0.010, "b": 0.012}

    def run(name):
        def call():
            clock["calls"] += 1
            slow = 2 <= clock["calls"] <= 6  # five consecutive calls
            clock["t"] += cost[name] * (3.0 if slow else 1.0)
        return call

    monkeypatch.setattr(fast_linear.time, "perf_counter", lambda: clock["t"])
    got = fast_linear._fastest_each({"a": run("a"), "b": run("b")}, lambda: None, warmup=1, repeats=5)
    assert got == pytest.approx({"a": 10.0, "b": 12.0})
    clock.update(t=0.0, calls=0)  # item by item, the same spell covers calls 2..6: every sample of a
    one_by_one = {name: fast_linear._fastest_ms(run(name), lambda: None, 1, 5) for name in ("a", "b")}
    assert one_by_one == pytest.approx({"a": 30.0, "b": 12.0})


def test_the_executor_and_probe_caches_live_as_long_as_their_model():
    """Issue 40, item 6: the caches were keyed by ``id(model)``: an evicted model's copy stayed in memory, and a new
    model that reused the id got a stale copy. Keyed by the model object (weakly), its entries go with it."""
    import gc

    from runners.engine import fast_linear as vf

    model = tiny.tiny_model(300, seed=3)
    assert vf.fast_executor(model, "all") is vf.fast_executor(model, "all")  # built once per model
    engine_forward(model, EngineConfig(fast_linear="all", verify_buckets="probe", bucket_k_max=2))
    assert model in vf._EXECUTORS and model in vf._PROBED
    before = len(vf._EXECUTORS), len(vf._PROBED)
    del model
    gc.collect()
    assert (len(vf._EXECUTORS), len(vf._PROBED)) == (before[0] - 1, before[1] - 1)


@pytest.mark.parametrize("faster", ["all", "onednn", None])
def test_auto_takes_the_kernels_measured_fastest(faster, monkeypatch):
    """``engine.fast_linear=auto`` (issues 40, 52): the transposed copy paid on an AMD EPYC and lost on an Intel Xeon
    with AVX-512, and oneDNN's reordered weights beat it on the EPYC, so ``auto`` times the plain forward and every
    copy on the machine it runs on (``chosen_kernels``). The timings are faked here (a test never asserts on real
    time): the decision follows whichever kernels the fake clock says are fastest, and is made once per model."""
    from runners.engine import fast_linear as vf

    if not vf.onednn_available():
        pytest.skip("this torch has no oneDNN")
    model = tiny.tiny_model(300, seed=5)
    copies = {"all": vf.fast_executor(model, "all", min_rows=1), "onednn": vf.fast_executor(model, "onednn")}
    runs = {id(model): None, **{id(c): scope for scope, c in copies.items()}}
    calls = []

    def fake_block_ms(executor, cache, context, k, warmup=False):
        calls.append(executor)
        return 1.0 if runs[id(executor)] == faster else 2.0

    monkeypatch.setattr(vf, "_CHOSEN", weakref.WeakKeyDictionary())
    monkeypatch.setattr(vf, "_block_ms", fake_block_ms)
    assert vf.fast_scope(model, EngineConfig.from_mapping({"fast_linear": "auto"})) == faster
    assert {id(c) for c in calls} == set(runs)  # the plain forward and both copies timed
    kept = {scope for scope, _, _ in vf._EXECUTORS[model]}
    assert kept == ({faster} if faster else set())  # a copy not taken is not kept (oneDNN's: a second set of weights)
    n = len(calls)
    vf.fast_scope(model, EngineConfig.from_mapping({"fast_linear": "auto"}))
    assert len(calls) == n  # measured once per model
    assert vf.fast_scope(model, EngineConfig.from_mapping({"fast_linear": "all"})) == "all"  # asked for: no measuring


@needs_onednn
def test_auto_leaves_onednn_out_where_its_second_copy_would_not_fit(monkeypatch):
    """``ONEDNN_MEMORY_SHARE``: the reordered weights are a second copy of the linear layers; ``auto`` does not try
    them when they would take more than that share of the memory free now (asked for by name, they are built)."""
    from runners.engine import fast_linear as vf
    from specbench import resources

    model = tiny.tiny_model(300, seed=6)
    monkeypatch.setattr(resources, "free_bytes", lambda kind: 2 * vf.packed_bytes(model) - 1)
    assert set(vf._candidates(model)) == {"all"}
    monkeypatch.setattr(resources, "free_bytes", lambda kind: 2 * vf.packed_bytes(model))
    assert set(vf._candidates(model)) == {"all", "onednn"}
    monkeypatch.setattr(resources, "free_bytes", lambda kind: None)  # cannot be told: tried
    assert set(vf._candidates(model)) == {"all", "onednn"}


@pytest.mark.parametrize(("entry", "chosen"), [
    ({"fast_linear": "onednn", "fast_linear_step": "all"}, ("onednn", "all")),
    ({"fast_linear": "onednn"}, ("onednn", "onednn")), ({"fast_linear": False}, (None, None)),
    ({"transposed_pays": True}, ("all", "all")), ({"transposed_pays": False}, (None, None)),
    ({"fast_linear": "bogus"}, "unmeasured"), ({"fast_linear": "all", "fast_linear_step": "bogus"}, "unmeasured")])
def test_a_sweeps_shared_choice_is_taken_as_it_was_written(entry, chosen, monkeypatch):
    """``seed_measurements``: a sweep's kernel file names the kernels ``auto`` chose for the loop (``fast_linear``)
    and for the target alone's step (``fast_linear_step``; a file without it: the loop's); one written before
    ``onednn`` existed says whether the transposed copy paid (``transposed_pays``) and keeps meaning that, so a
    resumed sweep's jobs run the kernels its first jobs ran; a value no version wrote is not taken."""
    from runners.engine import fast_linear as vf

    monkeypatch.setattr(vf, "_CHOSEN", weakref.WeakKeyDictionary())
    model = tiny.tiny_model(300, seed=7)
    vf.seed_measurements(model, {**entry, "probes": {}})
    assert vf._CHOSEN.get(model, "unmeasured") == chosen
    if chosen != "unmeasured":
        assert (vf.chosen_kernels(model), vf.chosen_kernels(model, step=True)) == chosen  # seeded: nothing measured
        written = vf.measurements(model)
        assert (written["fast_linear"], written["fast_linear_step"]) == tuple(c or False for c in chosen)


@pytest.mark.parametrize(("one_token", "step"), [({None: 3.0, "all": 2.95, "onednn": 3.0}, "onednn"),
                                                 ({None: 3.0, "all": 2.0, "onednn": 3.0}, "all"),
                                                 ({None: 1.0, "all": 3.0, "onednn": 3.0}, None)])
def test_the_target_alone_is_offered_every_kernel_auto_weighs(one_token, step, monkeypatch):
    """The baseline rule (issue 52): ``auto`` takes the loop's kernels by their sum over the blocks, and the target
    alone's step by the 1-token forward: the loop's, unless another kernel ``auto`` timed runs that forward at least
    ``margin`` faster (a gain the baseline is denied is not a gain of speculation); under block-invariant forwards the
    step keeps the loop's kernels. Faked timings: oneDNN wins the blocks, the 1-token forward varies."""
    from runners.engine import fast_linear as vf
    from runners.engine.verify_forward import step_forward

    if not vf.onednn_available():
        pytest.skip("this torch has no oneDNN")
    model = tiny.tiny_model(300, seed=8)
    copies = {"all": vf.fast_executor(model, "all", min_rows=1), "onednn": vf.fast_executor(model, "onednn")}
    runs = {id(model): None, **{id(c): scope for scope, c in copies.items()}}

    def fake_block_ms(executor, cache, context, k, warmup=False):
        scope = runs[id(executor)]
        return one_token[scope] if k == 1 else {None: 10.0, "all": 8.0, "onednn": 4.0}[scope]

    monkeypatch.setattr(vf, "_CHOSEN", weakref.WeakKeyDictionary())
    monkeypatch.setattr(vf, "_block_ms", fake_block_ms)
    auto = EngineConfig.from_mapping({"fast_linear": "auto"})
    assert vf.chosen_kernels(model) == "onednn" and vf.chosen_kernels(model, step=True) == step
    assert step_forward(model, auto).describe_step()["fast_linear"] == (step or False)
    assert engine_forward(model, auto).describe()["fast_linear"] == "onednn"
    assert vf.measurements(model)["fast_linear_step"] == (step or False)


def test_the_target_alone_s_step_is_decided_on_more_rounds_than_the_blocks(monkeypatch):
    """The baseline rule on a noisy host: the 1-token forward, on which the target alone's kernels are decided, is timed
    ``STEP_REPEATS`` rounds, the longer blocks ``repeats``. Faked timings: the plain 1-token forward is disturbed in
    the first three rounds (another process) and is 10 % faster than oneDNN's after them; three rounds would put the
    target alone on oneDNN's step."""
    from runners.engine import fast_linear as vf

    if not vf.onednn_available():
        pytest.skip("this torch has no oneDNN")
    assert vf.STEP_REPEATS > 3
    model = tiny.tiny_model(300, seed=8)
    copies = {"all": vf.fast_executor(model, "all", min_rows=1), "onednn": vf.fast_executor(model, "onednn")}
    runs = {id(model): None, **{id(c): scope for scope, c in copies.items()}}
    calls: dict[tuple, int] = {}

    def fake_block_ms(executor, cache, context, k, warmup=False):
        scope = runs[id(executor)]
        n = calls[(scope, k)] = calls.get((scope, k), 0) + 1
        if k > 1:
            return {None: 10.0, "all": 8.0, "onednn": 4.0}[scope]
        return {None: 2.0 if n <= 3 else 0.9, "all": 3.0, "onednn": 1.0}[scope]

    monkeypatch.setattr(vf, "_CHOSEN", weakref.WeakKeyDictionary())
    monkeypatch.setattr(vf, "_block_ms", fake_block_ms)
    assert vf.chosen_kernels(model) == "onednn" and vf.chosen_kernels(model, step=True) is None
    assert {calls[(scope, 1)] for scope in (None, "all", "onednn")} == {vf.STEP_REPEATS}
    assert {calls[(scope, 2)] for scope in (None, "all", "onednn")} == {3}


def test_onednn_asked_for_where_it_cannot_run_is_refused_in_one_line(monkeypatch):
    """``engine.fast_linear=onednn`` on a model off the CPU, or on a torch without oneDNN: one line naming why (the job
    would otherwise run plain kernels under the option's name); ``auto`` there just leaves oneDNN out."""
    from runners.engine import fast_linear as vf
    from specbench.registry import ConfigError

    model = tiny.tiny_model(300, seed=9)
    onednn = EngineConfig.from_mapping({"fast_linear": "onednn"})
    monkeypatch.setattr(vf, "model_device", lambda m: torch.device("cuda", 0))
    with pytest.raises(ConfigError, match="engine.fast_linear=onednn runs oneDNN's CPU kernels, but the target runs "
                                          "on cuda:0"):
        vf.fast_scope(model, onednn)
    assert vf.fast_scope(model, EngineConfig.from_mapping({"fast_linear": "auto"})) is None  # off on GPU
    monkeypatch.setattr(vf, "model_device", lambda m: torch.device("cpu"))
    monkeypatch.setattr(vf, "onednn_available", lambda: False)
    with pytest.raises(ConfigError, match="this torch has no oneDNN"):
        vf.fast_scope(model, onednn)
    assert "onednn" not in vf._candidates(model)
