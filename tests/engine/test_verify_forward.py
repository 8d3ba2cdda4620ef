"""The engine's lossless options (runners/engine/verify_forward.py, fused first round): outputs stay the
target's own greedy outputs; padded positions never leak into the logits or the cache."""

from __future__ import annotations

import pytest
import torch

from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.drafters.text_sync import CrossVocab
from runners.engine import fast_linear
from runners.engine.fast_linear import chosen_kernels, kernel_copy
from runners.engine.kv import cache_len, new_cache
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify_forward import VerifyForward, choose_buckets, engine_forward, engine_options
from specbench.config import EngineConfig, JobConfig
from specbench.registry import ConfigError

from helpers import tiny

PAD_ALL = {n: (9, n) for n in range(1, 9)}  # every block of 1..8 tokens padded to 9, head on the real rows
PAD_ALL_ROWS = {n: (9, 9) for n in range(1, 10)}  # ... and the head on all 9 rows


@pytest.fixture(scope="module")
def pair():
    _, target, draft, prompts = tiny.tiny_pair(("the quick brown fox", "def add(a, b):", "one two three four five"))
    refs = {tuple(ids): AutoregressiveRunner(target, []).generate(ids, 40).tokens for ids in prompts}
    return target, draft, prompts, refs


OPTIONS = ["padded", "padded_all_rows", "fast_head", "fast_all", "fast_all_padded"]


def _forwards(target):
    return {
        "padded": VerifyForward(target, PAD_ALL),
        "padded_all_rows": VerifyForward(target, PAD_ALL_ROWS),
        "fast_head": VerifyForward(target, executor=kernel_copy(target, "head"), scope="head"),
        "fast_all": VerifyForward(target, executor=kernel_copy(target, "all"), scope="all"),
        "fast_all_padded": VerifyForward(target, PAD_ALL, kernel_copy(target, "all"), "all"),
    }


@pytest.mark.parametrize("option", OPTIONS)
def test_block_logits_equal_the_plain_forward(pair, option):
    target, _, prompts, _ = pair
    fwd = _forwards(target)[option]
    plain = VerifyForward(target)
    with torch.inference_mode():
        for n in (1, 2, 5, 8):
            caches = [new_cache(target), new_cache(target)]
            for cache in caches:
                plain(cache, prompts[0], 1)
            block = prompts[1][:n]
            ref = plain(caches[0], block, n)
            got = fwd(caches[1], block, n)
            assert got.shape == ref.shape == (n, ref.shape[-1])
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
            padded = PAD_ALL.get(n, (n, n))[0] if "padded" in option else n
            assert cache_len(caches[1]) == len(prompts[0]) + padded  # the padding is in the cache until cropped


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("gamma", [1, 5])
def test_greedy_outputs_stay_the_targets(pair, option, fused, gamma):
    target, draft, prompts, refs = pair
    fwd = _forwards(target)[option]
    for ids in prompts:
        runner = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(gamma), [], forward=fwd,
                                   fused_prefill=fused)
        out = runner.generate(ids, 40)
        assert out.tokens == refs[tuple(ids)]


@pytest.mark.parametrize("gamma", [1, 2, 4, 16])
@pytest.mark.parametrize("max_new", [1, 2, 3, 9])
def test_fused_first_round_keeps_the_loop_contract(pair, gamma, max_new):
    target, draft, prompts, refs = pair
    for drafter in (ModelDrafter(draft, []), ModelDrafter(target, []), PromptLookupDrafter()):
        out = SpeculativeRunner(target, drafter, FixedGamma(gamma), [], fused_prefill=True).generate(prompts[2], max_new)
        assert out.tokens == refs[tuple(prompts[2])][:max_new]
        # no separate prefill token: every new token comes from a round (accepted + the target's own)
        assert sum(a + 1 for a in out.rounds.accepted) == len(out.tokens) == max_new
        assert all(d <= min(gamma, max_new - 1) for d in out.rounds.drafted)
        assert 0 < out.ttft_ms <= out.wall_ms


def test_fused_first_round_stops_at_an_accepted_eos(pair):
    target, _, prompts, refs = pair
    ref = refs[tuple(prompts[0])]
    eos = ref[2]  # pretend the target's third token is an EOS
    expect = ref[: ref.index(eos) + 1]
    out = SpeculativeRunner(target, ModelDrafter(target, [eos]), FixedGamma(6), [eos], fused_prefill=True).generate(
        prompts[0], 40)
    assert out.tokens == expect and out.stop_reason == "eos"


def test_sampling_with_options_runs_and_respects_the_budget(pair):
    target, draft, prompts, _ = pair
    fwd = _forwards(target)["fast_all_padded"]
    gen = torch.Generator().manual_seed(0)
    out = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(4), [], sampling=1.0, forward=fwd,
                            fused_prefill=True).generate(prompts[0], 20, gen)
    assert len(out.tokens) == 20


def test_choose_buckets_pads_only_where_it_pays():
    body = {1: 40.0, 2: 70.0, 3: 80.0, 4: 45.0, 5: 46.0, 6: 60.0}
    head = {1: 50.0, 2: 110.0, 3: 170.0, 4: 140.0, 5: 160.0, 6: 130.0}
    buckets = choose_buckets(body, head)
    assert 1 not in buckets  # nothing beats (1, 1)
    assert buckets[2] == (4, 2)  # pad the body to 4, head on the 2 real rows
    assert buckets[3] == (4, 4)  # the head on 4 rows is cheaper than on 3 too
    assert buckets[5] == (6, 6)  # the head on 6 rows is cheaper than on 5
    assert 4 not in buckets and 6 not in buckets
    flat = choose_buckets({k: 10.0 for k in range(1, 7)}, {k: 10.0 + k for k in range(1, 7)})
    assert flat == {}
    # a gain below the margin is noise, not a reason to pad
    assert choose_buckets({1: 10.0, 2: 10.4}, {1: 0.0, 2: 0.0}) == {}


def test_bucket_table_is_validated(pair):
    with pytest.raises(ValueError):
        VerifyForward(pair[0], {4: (3, 4)})


def test_engine_config_builds_the_options(pair):
    target = pair[0]
    assert engine_forward(target, EngineConfig()).describe() == {"fast_linear": False, "buckets": {}}
    fwd = engine_forward(target, EngineConfig.from_mapping({"fast_linear": "all", "verify_buckets": {3: [4, 3]}}))
    assert fwd.describe() == {"fast_linear": "all", "buckets": {"3": [4, 3]}, "min_rows": 1,
                              "single_row": "first of two"}
    assert fwd.executor is not target
    auto = engine_forward(target, EngineConfig.from_mapping({"fast_linear": "auto"}))  # measured on this machine
    assert auto.describe()["fast_linear"] == (chosen_kernels(target) or False)
    probed = engine_forward(target, EngineConfig.from_mapping(
        {"fast_linear": "head", "verify_buckets": "auto", "bucket_k_max": 4}))
    assert all(n <= r <= m <= 4 for n, (m, r) in probed.buckets.items())
    opts = engine_options(target, EngineConfig.from_mapping({"fused_prefill": True}), gamma=4)
    assert opts["fused_prefill"] is True and opts["forward"].executor is target
    off = EngineConfig.from_mapping({"fast_linear": "off", "verify_buckets": "false"})
    assert off == EngineConfig() and not off.any


@pytest.mark.parametrize("node, key", [
    ({"verify_buckets": "sometimes"}, "engine.verify_buckets"),
    ({"verify_buckets": {4: [3, 4]}}, "engine.verify_buckets"),
    ({"verify_buckets": {2: [4]}}, "engine.verify_buckets"),
    ({"fast_linear": "body"}, "engine.fast_linear"),
    ({"fused_prefill": "yes"}, "engine.fused_prefill"),
    ({"bucket_k_max": 1}, "engine.bucket_k_max"),
    ({"fused_prefil": True}, "fused_prefil"),
])
def test_bad_engine_options_are_one_line_config_errors(node, key):
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_mapping(node)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_engine_options_are_validated_at_the_boundary():
    """A bad engine option fails while the config is typed, before any model loads."""
    from runners.jobs.build import prepare

    from helpers import compose

    with pytest.raises(ConfigError, match="engine.fast_linear"):
        prepare(compose("engine.fast_linear=everything"))
    job = prepare(compose("engine.fast_linear=auto", "engine.verify_buckets=auto", "engine.fused_prefill=true"))
    assert job.config.engine == EngineConfig("auto", "auto", None, True, width="auto")


@pytest.mark.parametrize("kind", ["slem", "tli"])
def test_fused_first_round_with_heterogeneous_drafters(kind):
    """SLEM / TLI drafters also start from the bare prompt when the first round is fused."""
    from runners.drafters.slem import SLEMDrafter
    from runners.drafters.tli import TLIDrafter

    bpe, char = tiny.tiny_tokenizer(300, "bpe"), tiny.tiny_tokenizer(kind="char")
    target, draft = tiny.tiny_model(len(bpe), seed=1, layers=2), tiny.tiny_model(len(char), seed=2, layers=1)
    for text in ("the quick brown fox", "one two three"):
        ids = bpe.encode(text)
        want = AutoregressiveRunner(target, [0]).generate(ids, 20).tokens
        drafter = (SLEMDrafter(CrossVocab(draft, char, bpe, [0])) if kind == "slem"
                   else TLIDrafter(CrossVocab(draft, char, bpe, [0], len(bpe))))
        out = SpeculativeRunner(target, drafter, FixedGamma(3), [0], fused_prefill=True).generate(ids, 20)
        assert out.tokens == want


def test_folders_written_before_the_engine_options_still_resume():
    """A job folder whose config predates ``engine`` is the same job as one with every option off; the
    default (every option ``auto``) is another job, so such a folder is not silently extended."""
    from specbench.job_folders import config_drift

    from helpers import compose

    plain = JobConfig.from_mapping(compose("engine.fast_linear=false", "engine.verify_buckets=false",
                                           "engine.fused_prefill=false")).as_dict()
    old = {k: v for k, v in plain.items() if k != "engine"}
    assert config_drift(old, plain) is None
    on = JobConfig.from_mapping(compose("engine.fused_prefill=true")).as_dict()
    assert config_drift(old, on).startswith("engine")
    default = JobConfig.from_mapping(compose()).as_dict()
    assert default["engine"]["fast_linear"] == "auto" and config_drift(old, default).startswith("engine")


@pytest.mark.parametrize("fused", [False, True])
def test_an_outside_vocabulary_token_is_never_fed_under_the_engine_options(fused):
    """A drafted id past the target's logits (union's draft-only tokens, SLRS's ⊥) ends the block the
    engine feeds, with padding and transposed linear layers on and with a fused first round."""
    from runners.engine.base import Draft, Drafter

    target = tiny.tiny_model(50, seed=3)
    ids = [1, 2, 3]
    want = AutoregressiveRunner(target, []).generate(ids, 8).tokens

    class Outside(Drafter):
        def propose(self, ids, max_tokens, policy, sampling, generator):
            return Draft([want[len(ids) - 3], 57, want[0]], None, [])  # a good token, an outside one, junk

    forward = VerifyForward(target, PAD_ALL, kernel_copy(target, "all"), "all")
    out = SpeculativeRunner(target, Outside(), FixedGamma(3), [], forward=forward, fused_prefill=fused).generate(ids, 8)
    assert out.tokens == want
    assert out.rounds.drafted[0] == 2 and out.rounds.accepted[0] == 1


def test_a_short_prompt_padded_in_the_prefill_keeps_only_its_own_positions(pair):
    """A prompt no longer than a bucket is padded in the prefill forward too; the padded positions
    must leave the cache before the first round reads it."""
    target, draft, _, _ = pair
    for ids in ([1, 2, 3], [4, 5], [7]):
        want = AutoregressiveRunner(target, []).generate(ids, 24).tokens
        for forward in (VerifyForward(target, PAD_ALL), VerifyForward(target, PAD_ALL_ROWS)):
            out = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(3), [], forward=forward).generate(ids, 24)
            assert out.tokens == want, ids


# ---------------------------------------------------------------------- the baseline rule (issue 40)

def _steps(target):
    """The target alone's step kernels ``step_forward`` can choose (tokens must not depend on the choice)."""
    one_row = kernel_copy(target, "all", min_rows=1)
    return {
        "padded": VerifyForward(target, {1: (2, 2)}),
        "padded_head_one_row": VerifyForward(target, {1: (3, 1)}),
        "fast_all": VerifyForward(target, executor=kernel_copy(target, "all"), scope="all"),
        "one_row_all": VerifyForward(target, executor=one_row, scope="all"),
        "one_row_head": VerifyForward(target, executor=kernel_copy(target, "head", min_rows=1), scope="head"),
        "one_row_all_padded": VerifyForward(target, {1: (2, 2)}, one_row, "all"),
    }


@pytest.mark.parametrize("option", ["padded", "padded_head_one_row", "fast_all", "one_row_all", "one_row_head",
                                    "one_row_all_padded"])
def test_the_target_alone_on_any_step_kernels_decodes_its_own_greedy_tokens(pair, option):
    """Whichever step ``step_forward`` chooses (a padded step, the transposed copy from one row or two), the
    target alone decodes the plain loop's tokens, a padded step's positions cropped from the cache after it."""
    target, _, prompts, refs = pair
    step = _steps(target)[option]
    for ids in prompts:
        assert AutoregressiveRunner(target, [], forward=step).generate(ids, 40).tokens == refs[tuple(ids)], option


def test_a_steps_description_names_its_scope_padding_and_rows(pair):
    target = pair[0]
    steps = _steps(target)
    assert AutoregressiveRunner(target, [], forward=steps["one_row_all_padded"]).describe() == {
        "fast_linear": "all", "step": [2, 2], "min_rows": 1, "single_row": "first of two"}
    assert steps["fast_all"].describe_step() == {"fast_linear": "all", "step": None, "min_rows": 2}
    assert steps["padded"].describe_step() == {"fast_linear": False, "step": [2, 2]}
    assert AutoregressiveRunner(target, []).describe() == {"fast_linear": False, "step": None}


def _one_row_heads_in_steps(monkeypatch, model, forward, ids, n):
    """Decode ``n`` tokens of ``ids`` with the target alone on ``forward``; returns its tokens and how many of its
    1-token steps ran the LM head on one row of ``F.linear`` (the slow path of the emulated host)."""
    head = model.get_output_embeddings().weight
    stepping, slow = [False], []
    linear, step = torch.nn.functional.linear, AutoregressiveRunner._step

    def spy_linear(x, weight, bias=None):
        if weight is head and stepping[0] and x.numel() // x.shape[-1] == 1:
            slow.append(1)
        return linear(x, weight, bias)

    def spy_step(self, cache, feed, seen):
        stepping[0] = len(feed) == 1  # a step, not the prefill
        return step(self, cache, feed, seen)

    with monkeypatch.context() as m:
        m.setattr(torch.nn.functional, "linear", spy_linear)
        m.setattr(AutoregressiveRunner, "_step", spy_step)
        tokens = AutoregressiveRunner(model, [], forward=forward).generate(ids, n).tokens
    return tokens, len(slow)


@pytest.mark.parametrize("buckets", [False, {3: [4, 4]}, "auto"])
def test_the_target_alone_gets_the_transposed_head_whatever_the_bucket_map(buckets, monkeypatch):
    """Issue 50, item 6: with fast kernels on, the loop verifies through ``(W·xᵀ)ᵀ`` from 2 rows; the target alone
    (``step_forward``) is offered that kernel at its own width, whatever the bucket map. On an emulated host where
    one row of ``F.linear`` on the LM head is slow (54 ms against 20 ms transposed, the EPYC's figures), no step
    of the target alone runs it: without padding (``verify_buckets=false``, or a map without key 1 before this
    issue) it transposes its one row, with padding it may pad. The loop's own executor on a 1-token step, the
    target alone before this issue without a bucket 1, does run it: the spy sees what it is meant to see."""
    from runners.engine import verify_forward as vf

    from helpers import emulated_host

    emulated_host.emulate(monkeypatch)
    model = tiny.tiny_model(300, seed=7)
    engine = EngineConfig.from_mapping({"fast_linear": "auto", "verify_buckets": buckets})
    ids, want = [5, 6, 7, 8], AutoregressiveRunner(model, []).generate([5, 6, 7, 8], 12).tokens
    step = vf.step_forward(model, engine)
    assert step.scope == "all" and step.describe_step() == (
        {"fast_linear": "all", "step": None, "min_rows": 1, "single_row": "first of two"} if buckets is False else
        # k = 1: the one-row copy, its row as the first of two (linear_kernels.SINGLE_ROW: another key than before)
        {"fast_linear": "all", "step": [12, 12], "min_rows": 1, "single_row": "first of two"})  # k = 17: wider pays
    tokens, slow = _one_row_heads_in_steps(monkeypatch, model, step, ids, 12)
    assert tokens == want and slow == 0
    before = VerifyForward(model, executor=fast_linear.fast_executor(model, "all"), scope="all")  # the old rule's unpadded step
    tokens, slow = _one_row_heads_in_steps(monkeypatch, model, before, ids, 12)
    assert tokens == want and slow == 11


def test_one_target_alone_per_engine_config_whatever_gamma(monkeypatch):
    """Issue 50, item 6: the loop's probe measures up to ``max(9, γ + 1)`` tokens, so its own 1-token padding can
    differ between γ (here: none at γ = 2, its one row transposed being cheaper than any padding up to 9 tokens;
    (12, 12) at γ = 16); the target alone's step takes no γ and probes up to ``PROBE_K_MAX``, so every job of a
    sweep divides by one target alone."""
    from runners.engine import verify_forward as vf

    from helpers import emulated_host

    calls = emulated_host.emulate(monkeypatch)
    model = tiny.tiny_model(300, seed=7)
    engine = EngineConfig.from_mapping({"fast_linear": "auto", "verify_buckets": "auto"})
    assert {g: vf.engine_forward(model, engine, g).buckets.get(1) for g in (2, 16)} == {2: None, 16: (12, 12)}
    n = calls["probe"]
    steps = [vf.step_forward(model, engine).describe_step() for _ in range(3)]
    assert steps == [{"fast_linear": "all", "step": [12, 12], "min_rows": 1, "single_row": "first of two"}] * 3
    assert calls["probe"] == n  # the 17-token table is γ = 16's loop probe: one copy, one table


def test_a_padded_step_leaves_the_cache_at_the_sequence_length(pair):
    target, _, prompts, _ = pair
    runner = AutoregressiveRunner(target, [], forward=VerifyForward(target, {1: (3, 1)}))
    cache = new_cache(target)
    with torch.inference_mode():
        runner._step(cache, list(prompts[0]), len(prompts[0]))  # a prompt of several tokens: not padded
        assert cache_len(cache) == len(prompts[0])
        runner._step(cache, [5], len(prompts[0]) + 1)  # one token padded to 3, cropped back
        assert cache_len(cache) == len(prompts[0]) + 1


