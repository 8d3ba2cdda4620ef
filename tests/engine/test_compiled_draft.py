"""``engine.draft_compile`` (``runners.engine.compiled_draft``, issue 52 item 2): the draft's one-token steps run a
``torch.compile``d copy (its dynamic int8 layers through a custom op over the same packed weights); the draft's
logits stay the eager draft's to float rounding, its drafts the same on a tiny pair, and the loop's output the
target's own. Refused in one line where it cannot run (off the CPU, no C++ compiler, batch > 1, transformers' loop).

One compilation per module (``pair``: a tiny int8 Llama), a few seconds on two cores."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from methods import build_policy
from runners.drafters import DrafterContext, build_drafter
from runners.engine import compiled_draft, kv
from runners.engine.compiled_draft import compiled_step, use_compiled
from runners.engine.kv import PositionCache, cache_arg
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.config import EngineConfig
from specbench.models import apply_transform
from specbench.registry import ConfigError

from helpers.tiny import tiny_pair

TEXTS = ("the quick brown fox", "one two three four five six seven", "def add(a, b):\n    return a + b\n")
NEW = 24


#: the module fixtures' first ``torch.compile`` on a cold inductor cache counts in a test's limit: over 60 s on an
#: Intel Xeon without AMX (2026-12-02, CI on a fresh clone), 14-20 s once the cache is warm
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pair():
    """A tiny pair whose draft is an int8-dynamic copy of a noisy target copy (the default pair's kind of draft),
    compiled once for the module."""
    p = tiny_pair(TEXTS, draft="noisy", noise=0.3)
    draft = apply_transform(p.draft, "int8_dynamic")
    use_compiled(draft, True, headroom=NEW + 8)
    yield p._replace(draft=draft)
    use_compiled(draft, False)
    kv._STATIC.clear()


@pytest.fixture(scope="module")
def grouped(pair):
    """The module's draft compiled a second time with ``CompiledStep``'s levers on (grouped products, grouped
    attention): off in a job, kept for ``scripts/bench_compiled_draft.py``."""
    step = compiled_draft.CompiledStep(pair.draft, groups=True, attention=True)
    step.warm_up()
    return step


@pytest.fixture
def uncompiled(monkeypatch):
    """``torch.compile`` as the identity for one test: the bookkeeping around the compiled forward (the job's plumbing,
    references) without a compilation of tens of seconds; the module's ``pair`` is compiled for real."""
    monkeypatch.setattr(compiled_draft.torch, "compile", lambda fn, **options: fn)


def test_the_draft_is_really_compiled_over_the_shared_int8_weights(pair, grouped):
    step = compiled_step(pair.draft)
    assert step is not None and step.compile_s > 0
    assert type(step.forward).__name__ != "method"  # torch.compile's wrapper, not the copy's own forward
    int8_layers = dict((n, m) for n, m in pair.draft.named_modules() if compiled_draft._is_int8_dynamic(m))
    ops = {n: m for n, m in step.copy.named_modules() if isinstance(m, compiled_draft._OpLinear | compiled_draft._GroupPart)}
    assert set(ops) == set(int8_layers) and ops  # a job's step: every int8 layer through the op on its own weight
    assert all(isinstance(op, compiled_draft._OpLinear) for op in ops.values())
    assert step.copy.config._attn_implementation == "sdpa"
    ops = {n: m for n, m in grouped.copy.named_modules() if isinstance(m, compiled_draft._OpLinear | compiled_draft._GroupPart)}
    assert set(ops) == set(int8_layers) and ops  # with the levers, every int8 layer goes through the op ...
    for name, op in ops.items():
        packed, own = compiled_draft._PACKED[op.index], int8_layers[name]
        if isinstance(op, compiled_draft._OpLinear):  # ... on its own packed weight
            assert packed is own._packed_params._packed_params
        else:  # ... or on its rows of its group's stacked weight (q/k/v, gate/up), at its own scale
            rows = packed.unpack()[0][op.start:op.stop]
            assert torch.equal(rows.int_repr(), own.weight().int_repr())
            assert torch.allclose(rows.q_per_channel_scales(), torch.tensor(own.weight().q_scale(), dtype=torch.double))
    groups = {op.index for op in ops.values() if isinstance(op, compiled_draft._GroupPart)}
    assert len(groups) == 2 * pair.draft.config.num_hidden_layers  # the attention's and the MLP's, in every layer
    assert step.copy.model.embed_tokens.weight is pair.draft.model.embed_tokens.weight  # no copy of the weights


def test_a_groups_projections_are_one_product_in_the_compiled_step(pair, grouped):
    """With ``groups``, the compiled step runs one int8 product per group of sibling projections
    (``_OneCallPerGroup``), and its logits are those of the draft's own products, one per layer."""
    from torch.profiler import ProfilerActivity, profile

    step, draft = grouped, pair.draft
    ops = [m for m in step.copy.modules() if isinstance(m, compiled_draft._OpLinear | compiled_draft._GroupPart)]
    expected = sum(isinstance(m, compiled_draft._OpLinear) for m in ops) + len(
        {m.index for m in ops if isinstance(m, compiled_draft._GroupPart)})
    assert expected < len(ops)
    with torch.inference_mode():
        caches = [PositionCache(draft, 32), PositionCache(draft, 32)]
        for cache in caches:
            draft(input_ids=torch.tensor([pair.prompts[0]]), **cache_arg(draft, cache), use_cache=True, logits_to_keep=1)
        step(caches[1], [5], kv.cache_len(caches[1]))  # guards checked: the profiled call is the step alone
        for feed in ([5], [7]):
            eager = draft(input_ids=torch.tensor([feed]), **cache_arg(draft, caches[0]), use_cache=True,
                          logits_to_keep=1).logits
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            compiled = step(caches[1], [7], kv.cache_len(caches[1]))
    calls = sum(e.count for e in prof.key_averages() if e.key == "quantized::linear_dynamic")
    assert calls == expected, (calls, expected, len(ops))
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)


def test_compiled_logits_are_the_eager_forwards_to_float_rounding(pair):
    """Steps of one token and feeds of several (a round's first feed), on caches at every position after a prefill."""
    draft, ids = pair.draft, pair.prompts[1]
    step = compiled_step(draft)
    with torch.inference_mode():
        caches = [PositionCache(draft, 32), PositionCache(draft, 32)]
        for cache in caches:
            draft(input_ids=torch.tensor([ids]), **cache_arg(draft, cache), use_cache=True, logits_to_keep=1)
        for feed in ([5], [17, 42], [9], [100, 3, 7, 250, 12], [3], [8, 9, 10]):
            position = kv.cache_len(caches[1])
            eager = draft(input_ids=torch.tensor([feed]), **cache_arg(draft, caches[0]), use_cache=True,
                          logits_to_keep=1).logits
            compiled = step(caches[1], feed, position)
            torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)
            assert int(compiled.argmax()) == int(eager.argmax())
    assert kv.cache_len(caches[1]) == len(ids) + 13  # the compiled forwards advanced the cache as forwards do
    assert step.guarded[caches[1]] == {False, True}  # dynamo checked its guards on the first forward of each graph
    assert step.unguarded >= 4  # and the four after them skipped the check, with the same logits


def test_a_forward_that_would_grow_the_cache_checks_the_guards(pair):
    """Where the feed does not fit, the cache grows inside the forward: a branch the guards decide, so dynamo checks
    them (and compiles the growing branch) instead of replaying a graph that writes past the cache's end."""
    draft, ids = pair.draft, pair.prompts[0]
    step = compiled_step(draft)
    with torch.inference_mode():
        caches = [PositionCache(draft, 4), PositionCache(draft, 4)]  # 4 positions after the prompt
        for cache in caches:
            draft(input_ids=torch.tensor([ids]), **cache_arg(draft, cache), use_cache=True, logits_to_keep=1)
        start = step.unguarded
        for feed in ([5, 6], [7, 8]):  # the second forward (unchecked) fills the cache; a third would not fit
            step(caches[1], feed, kv.cache_len(caches[1]))
            draft(input_ids=torch.tensor([feed]), **cache_arg(draft, caches[0]), use_cache=True, logits_to_keep=1)
        before, length = step.unguarded, caches[1].layers[0].max_cache_len
        assert before == start + 1 and not caches[1].fits(2)
        compiled = step(caches[1], [9, 10], kv.cache_len(caches[1]))
        eager = draft(input_ids=torch.tensor([[9, 10]]), **cache_arg(draft, caches[0]), use_cache=True,
                      logits_to_keep=1).logits
    assert step.unguarded == before  # checked
    assert caches[1].layers[0].max_cache_len > length  # the cache grew
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)


def _decode(pair, compiled: bool) -> list[tuple[list[int], int]]:
    use_compiled(pair.draft, compiled, headroom=NEW + 8)
    ctx = DrafterContext(target_tokenizer=pair.tok, eos_token_ids=[], target_vocab_size=len(pair.tok),
                         draft_model=pair.draft, draft_tokenizer=pair.tok, options={})
    out = []
    for ids in pair.prompts:
        result = SpeculativeRunner(pair.target, build_drafter("model", ctx), build_policy("fixed", 4), [],
                                   0.0).generate(ids, NEW)
        out.append((result.tokens, list(result.rounds.accepted)))
    return out


def test_the_loop_with_a_compiled_draft_is_lossless_and_drafts_as_the_eager_one(pair):
    step = compiled_step(pair.draft)
    before = step.calls
    compiled = _decode(pair, True)
    assert step.calls > before  # the draft's steps went through the compiled forward
    eager = _decode(pair, False)
    assert compiled == eager  # the same tokens, the same drafts accepted
    alone = [AutoregressiveRunner(pair.target, []).generate(ids, NEW).tokens for ids in pair.prompts]
    assert [tokens for tokens, _ in compiled] == alone  # and the target's own output
    use_compiled(pair.draft, True, headroom=NEW + 8)


def test_prefills_long_feeds_and_dynamic_caches_run_eagerly(pair):
    draft = pair.draft
    empty = PositionCache(draft, 4)
    assert compiled_draft.compiled_logits(draft, empty, [1, 2], 1) is None  # a prefill: position 0
    with torch.inference_mode():
        draft(input_ids=torch.tensor([[1, 2, 3]]), **cache_arg(draft, empty), use_cache=True, logits_to_keep=1)
    too_long = list(range(1, compiled_draft.MAX_FEED + 2))
    assert compiled_draft.compiled_logits(draft, empty, too_long, 1) is None
    assert compiled_draft.compiled_logits(draft, empty, [4, 5], 2) is None  # logits of more than the last position
    assert compiled_draft.compiled_logits(draft, kv.DynamicCache(), [1], 1) is None
    assert compiled_draft.compiled_logits(pair.target, PositionCache(pair.target, 4), [1], 1) is None  # not compiled


def test_refused_in_one_line_off_the_cpu_and_without_a_compiler(pair, monkeypatch):
    import specbench.models

    monkeypatch.setattr(specbench.models, "model_device", lambda model: torch.device("cuda", 0))
    with pytest.raises(ConfigError, match="draft runs on cuda:0"):
        compiled_draft.check_compilable(pair.target)
    monkeypatch.undo()

    import torch._inductor.cpp_builder as builder

    def no_compiler():
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(builder, "get_cpp_compiler", no_compiler)
    with pytest.raises(ConfigError, match="needs a C.. compiler") as err:
        compiled_draft.check_compilable(pair.target)
    assert "\n" not in str(err.value)


def _config(**over):
    from specbench.config import JobConfig, compose

    args = [f"{k}={v}" for k, v in over.items()]
    return JobConfig.from_mapping(compose(args))


def test_the_option_parses_and_is_refused_where_it_does_not_apply():
    assert EngineConfig.from_mapping({"draft_compile": True}).draft_compile is True
    assert EngineConfig.from_mapping(OmegaConf.create({})).draft_compile is False
    with pytest.raises(ConfigError, match="engine.draft_compile must be true or false"):
        EngineConfig.from_mapping({"draft_compile": "sometimes"})
    with pytest.raises(ConfigError, match="batch_size=2"):
        _config(**{"engine.draft_compile": "true", "batch_size": 2, "pair": "gemma3-270m_gemma3-270m-int8"})
    with pytest.raises(ConfigError, match="assisted generation"):
        _config(**{"engine.draft_compile": "true", "method": "hf_native_specdecode", "pair": "gemma3-270m_gemma3-270m-int8"})


def test_a_job_with_a_compiled_draft_is_lossless_and_says_so(tiny_conf, tmp_path, monkeypatch, uncompiled):
    """``engine.draft_compile=true`` at the job level (the tiny pair's float draft: its linear layers stay as they
    are; ``torch.compile`` the identity here, the plumbing is what is tested): the draft's forwards go through its
    compiled step, every record is lossless, and the summary's engine names the option."""
    import yaml

    from runners.jobs.job import run_job
    from specbench.record_io import read_records

    from helpers import compose

    calls = []  # the feeds' lengths of the job's forwards that ran compiled (not the warm-up's)
    original = compiled_draft.compiled_logits

    def spy(executor, cache, feed, keep):
        out = original(executor, cache, feed, keep)
        if out is not None:
            calls.append(len(feed))
        return out

    monkeypatch.setattr(compiled_draft, "compiled_logits", spy)
    cfg = OmegaConf.to_container(compose("task.n_prompts=2", "max_new_tokens=8", "warmup=0", "method=specdecode",
                                         "engine.draft_compile=true"), resolve=True)
    cfg["pair"] = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    summary = run_job(cfg, tmp_path / "compiled", progress=False)
    records = read_records(tmp_path / "compiled" / "records.jsonl")
    assert summary["engine"]["draft_compile"] is True
    assert records and all(r["lossless"] is True for r in records)
    assert 1 in calls  # the draft's steps went through the compiled forward (feeds of several: the test above)


def test_a_compiled_draft_is_released_with_its_model(uncompiled):
    """The compiled step holds no reference to its model (``_COMPILED`` is keyed by it weakly): a draft the model
    cache evicts is freed, its compiled step and the custom op's hold on its packed weights with it."""
    import gc
    import weakref

    from helpers.tiny import tiny_model

    draft = apply_transform(tiny_model(64, seed=5), "int8_dynamic")
    use_compiled(draft, True, headroom=8)
    indices = [m.index for m in compiled_step(draft).copy.modules() if isinstance(m, compiled_draft._OpLinear)]
    assert indices and all(i in compiled_draft._PACKED for i in indices)
    ref = weakref.ref(draft)
    del draft
    gc.collect()
    assert ref() is None
    assert not any(i in compiled_draft._PACKED for i in indices)  # its packed int8 weights are not held either


def test_a_pair_whose_draft_model_is_the_target_is_refused_in_one_line(tiny_conf, tmp_path, uncompiled):
    """A draft spec equal to the target's loads the same model object (the model cache): compiling it would compile
    the target's forwards too, so the job is refused, writing nothing."""
    import yaml

    from runners.jobs.job import run_job

    from helpers import compose

    cfg = OmegaConf.to_container(compose("task.n_prompts=1", "max_new_tokens=4", "warmup=0", "method=specdecode",
                                         "engine.draft_compile=true"), resolve=True)
    pair = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    pair["draft"] = {**pair["draft"], **{k: pair["target"][k] for k in ("name", "path")}}
    cfg["pair"] = pair
    with pytest.raises(ConfigError, match="is the target itself") as err:
        run_job(cfg, tmp_path / "self", progress=False)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "self" / "records.jsonl").exists()


@pytest.mark.parametrize("kind", ["slem", "tli"])
def test_a_draft_of_another_vocabulary_takes_its_compiled_forward_and_stays_lossless(pair, kind, monkeypatch,
                                                                                    uncompiled):
    """The cross-vocabulary drafters' forwards (``runners.drafters.text_sync``) go through ``forward_logits`` too: with
    ``engine.draft_compile`` a char-level draft's feeds after its prefill run its compiled step (``torch.compile`` the
    identity here: the routing), and the loop's output is the target's own."""
    from specbench.config import HeteroConfig

    from helpers.tiny import tiny_model, tiny_tokenizer

    char = tiny_tokenizer(kind="char")
    draft = tiny_model(len(char), seed=14)
    calls = []
    original = compiled_draft.compiled_logits

    def spy(executor, cache, feed, keep):
        out = original(executor, cache, feed, keep)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(compiled_draft, "compiled_logits", spy)
    use_compiled(draft, True, headroom=64)
    try:
        ctx = DrafterContext(target_tokenizer=pair.tok, eos_token_ids=[0], target_vocab_size=len(pair.tok),
                             draft_model=draft, draft_tokenizer=char, hetero=HeteroConfig(kind, max_nodes=8))
        for ids in pair.prompts:
            out = SpeculativeRunner(pair.target, build_drafter(kind, ctx), build_policy("fixed", 3), [0],
                                    0.0).generate(ids, 12).tokens
            assert out == AutoregressiveRunner(pair.target, [0]).generate(ids, 12).tokens
        assert any(calls)  # the draft's forwards after its prefill ran through the compiled step
    finally:
        use_compiled(draft, False)
        kv.use_static(draft, None)


@pytest.mark.parametrize("q_len", [1, 3])
def test_the_grouped_attention_is_transformers_sdpa_bit_for_bit(q_len, monkeypatch):
    """``_sdpa_gqa`` (the compiled copy's attention): SDPA reading the grouped key/value heads in place gives
    transformers' ``sdpa`` output as dynamo traces it (``repeat_kv``: every key/value head repeated) bit for bit with a
    mask, for one query token and several; without a mask it is transformers' function."""
    from transformers.integrations import sdpa_attention
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    monkeypatch.setattr(sdpa_attention, "is_torchdynamo_compiling", lambda: True)  # its branch under torch.compile

    from helpers.tiny import tiny_model

    module = tiny_model(64, seed=3).model.layers[0].self_attn
    assert module.num_key_value_groups == 2
    gen = torch.Generator().manual_seed(0)
    length = 9
    query, key, value = (torch.randn(1, h, n, 8, generator=gen) for h, n in ((4, q_len), (2, length), (2, length)))
    mask = torch.ones(1, 1, q_len, length, dtype=torch.bool).tril(length - q_len)
    mask[..., 0] = False  # a masked position the causal pattern keeps
    with torch.inference_mode():
        want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.5)
        got, _ = compiled_draft._sdpa_gqa(module, query, key, value, mask, scaling=0.5)
        assert got.shape == want.shape == (1, q_len, 4, 8)
        assert torch.equal(got, want)
        plain, _ = compiled_draft._sdpa_gqa(module, query, key, value, None, scaling=0.5, is_causal=False)
        assert torch.equal(plain, sdpa_attention_forward(module, query, key, value, None, scaling=0.5,
                                                         is_causal=False)[0])


def test_the_compiled_copy_alone_takes_the_grouped_attention_and_each_step_has_its_own_frame(uncompiled):
    """With ``attention``, the copy's config names ``ATTENTION`` (registered with transformers' interfaces) and the
    draft's own keeps ``sdpa``; without it (a job's step), or for a model without grouped key/value heads, ``sdpa``. Every compiled step
    calls its copy's forward from a code object of its own (``_own_frame``: dynamo's graphs of two steps kept
    apart), with the copy's logits."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    from helpers.tiny import tiny_gemma3, tiny_model

    draft = tiny_model(64, seed=4)
    one, other = compiled_draft.CompiledStep(draft, attention=True), compiled_draft.CompiledStep(draft)
    assert one.copy.config._attn_implementation == compiled_draft.ATTENTION
    assert draft.config._attn_implementation == other.copy.config._attn_implementation == "sdpa"
    assert compiled_draft.ATTENTION in AttentionInterface() and compiled_draft.ATTENTION in ALL_MASK_ATTENTION_FUNCTIONS
    ungrouped = tiny_model(64, seed=4)
    for layer in ungrouped.model.layers:
        layer.self_attn.num_key_value_groups = 1
    assert compiled_draft.CompiledStep(ungrouped, attention=True).copy.config._attn_implementation == "sdpa"
    gemma = tiny_gemma3(seed=2)  # one key/value head for two query heads, as the real Gemma-3-270M
    assert compiled_draft.CompiledStep(gemma, attention=True).copy.config._attn_implementation == compiled_draft.ATTENTION
    codes = [one.forward.__code__, other.forward.__code__, type(draft).forward.__code__]
    assert len({id(c) for c in codes}) == 3 and codes[0].co_name == "compiled_draft_step"
    with torch.inference_mode():
        cache = PositionCache(draft, 8)
        draft(input_ids=torch.tensor([[1, 2, 3]]), **cache_arg(draft, cache), use_cache=True, logits_to_keep=1)
        steps = []
        for step in (one, other):
            steps.append(step(cache, [5], 3))
            kv.crop_to(cache, 3)
        eager = draft(input_ids=torch.tensor([[5]]), **cache_arg(draft, cache), use_cache=True, logits_to_keep=1).logits
    torch.testing.assert_close(steps[0], eager)
    assert torch.equal(steps[0], steps[1])


def test_compiled_steps_of_one_model_class_keep_their_graphs_apart(monkeypatch):
    """Every compiled step runs from a code object of its own (``_own_frame``), so dynamo's recompile limit counts one
    step's graphs, not those of every int8 draft of the model's class in the process (their graphs differ: each bakes
    its own weights' indices in; a sweep's pairs, a whole and a restricted head: a shared code object refused the
    ninth graph, an error under ``fullgraph``). Dynamo with its eager backend (no inductor: tracing only) and a limit
    of 2 graphs: two tiny int8 drafts of one class, each step compiling its two."""
    from helpers.tiny import tiny_model

    real = torch.compile
    monkeypatch.setattr(compiled_draft.torch, "compile",
                        lambda fn, **options: real(fn, dynamic=True, fullgraph=True, backend="eager"))
    with torch._dynamo.config.patch(recompile_limit=2):
        for seed in range(2):
            step = compiled_draft.CompiledStep(apply_transform(tiny_model(64, seed=seed), "int8_dynamic"))
            step.warm_up()
            assert step.calls == 0 and step.compile_s > 0
