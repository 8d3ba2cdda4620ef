"""Block-invariant forwards (``engine.width``) and the target's dtype (``engine.dtype``), issue 52 item 1
(``runners.engine.invariant``): at one width on a static cache the loop's blocks and the target alone's steps give a
position the same logits, bit for bit, so a bfloat16 target decodes losslessly against itself; ``engine.dtype=auto``
names the dtype it chose in the job's config; bad settings are one-line ``ConfigError``s."""

from __future__ import annotations

import pytest
import torch

from methods import build_policy
from runners.drafters import DrafterContext, build_drafter
from runners.engine import kv
from runners.engine.invariant import dtype_choice, resolve_dtype, resolve_width, use_invariant
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify_forward import VerifyForward, engine_forward, engine_options, step_forward
from specbench.config import DEFAULT_WIDTH, EngineConfig, JobConfig
from specbench.registry import ConfigError

from helpers import compose
from helpers.tiny import tiny_pair

TEXTS = ("the quick brown fox", "one two three four five six seven", "a cat",
         "def add(a, b):\n    return a + b\n translate the sentence")
NEW = 20


@pytest.fixture(scope="module")
def pair():
    p = tiny_pair(TEXTS, draft="noisy", noise=0.3)
    return p._replace(target=p.target.to(torch.bfloat16))


@pytest.fixture(autouse=True)
def _dynamic_after():
    yield
    kv._STATIC.clear()


def _steps(forward, prompt, tokens):
    """The logits of each position after the prompt, one step at a time (the target alone's way)."""
    cache = kv.new_cache(forward.model)
    out = [forward(cache, list(prompt), 1)[-1]]
    for i, tok in enumerate(tokens):
        out.append(forward(cache, [tok], 1)[-1])
        assert kv.cache_len(cache) == len(prompt) + i + 1  # the padding rolled back
    return out


def _blocks(forward, prompt, tokens, size):
    """The same positions' logits, the tokens fed in blocks of ``size`` (the loop's way when every draft is kept)."""
    cache = kv.new_cache(forward.model)
    out = [forward(cache, list(prompt), 1)[-1]]
    for i in range(0, len(tokens), size):
        block = tokens[i:i + size]
        out.extend(forward(cache, block, len(block)))
        assert kv.cache_len(cache) == len(prompt) + i + len(block)
    return out


@pytest.fixture(scope="module")
def wider():
    """A bf16 model wide enough (hidden 64, vocabulary 500) that this host's kernels round a block's rows otherwise
    than a step's on a dynamic cache, and a prompt and 13 tokens to feed it."""
    from helpers.tiny import tiny_model

    model = tiny_model(500, seed=1, hidden=64, layers=2).to(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    return model, [int(t) for t in torch.randint(1, 500, (12,), generator=g)], \
        [int(t) for t in torch.randint(1, 500, (13,), generator=g)]


def _moved(forward, prompt, tokens, size):
    with torch.inference_mode():
        steps, blocks = _steps(forward, prompt, tokens), _blocks(forward, prompt, tokens, size)
    assert len(steps) == len(blocks) == len(tokens) + 1
    return sum(int(not torch.equal(a, b)) for a, b in zip(steps, blocks, strict=True))


@pytest.mark.parametrize("size", [4, 5, 6, 7])
def test_a_positions_logits_are_the_same_bits_in_a_block_as_in_a_step(wider, size):
    """Width 4 on a static cache: blocks of 4 to 7 tokens (5 to 7: two pieces) give every position the logits the
    1-token steps give it, bit for bit, in bfloat16, where the plain forward on the dynamic cache moves some (the
    control: skipped on a host whose kernels move none, where it would show nothing)."""
    model, prompt, tokens = wider
    plain = _moved(VerifyForward(model), prompt, tokens, size)
    kv.use_static(model, 64)
    assert _moved(VerifyForward(model, width=4), prompt, tokens, size) == 0
    if plain == 0:
        pytest.skip("this host's bf16 kernels round a block like its steps on the dynamic cache: no control")


def test_a_width_needs_a_static_cache(pair):
    forward = VerifyForward(pair.target, width=4)
    with pytest.raises(RuntimeError, match="static cache"):
        forward(kv.new_cache(pair.target), list(pair.prompts[0]), 1)


@pytest.mark.parametrize("stem", ["fixed", "gammatune"])
@pytest.mark.parametrize("kind", ["model", "hybrid"])
def test_a_bfloat16_target_decodes_losslessly_against_itself_at_one_width(pair, stem, kind):
    """The speculative loop and the target alone, both as the job builds them under ``engine.width=auto`` (the
    target bfloat16: width ``DEFAULT_WIDTH``, its cache static): token for token the same, and the loop's blocks
    were padded (its summary names the width)."""
    engine = EngineConfig.from_mapping({"width": "auto"})
    assert use_invariant(pair.target, engine, NEW) == DEFAULT_WIDTH
    assert kv.static_headroom(pair.target) >= NEW + DEFAULT_WIDTH
    options = engine_options(pair.target, engine, gamma=5)
    assert options["forward"].describe()["width"] == DEFAULT_WIDTH and options["fused_prefill"] is False
    alone = AutoregressiveRunner(pair.target, [], forward=step_forward(pair.target, engine))
    assert alone.describe()["width"] == DEFAULT_WIDTH
    options_of = {"max_model_tokens": 3, "min_lookup_tokens": 2} if kind == "hybrid" else {}
    ctx = DrafterContext(target_tokenizer=pair.tok, eos_token_ids=[], target_vocab_size=len(pair.tok),
                         draft_model=pair.draft, draft_tokenizer=pair.tok, options=options_of)
    for prompt in pair.prompts:
        want = alone.generate(prompt, NEW).tokens
        loop = SpeculativeRunner(pair.target, build_drafter(kind, ctx), build_policy(stem, 5, {}), [], 0.0,
                                 **options)
        assert loop.generate(prompt, NEW).tokens == want


def test_the_width_resolves_from_the_targets_dtype(pair):
    fp32 = tiny_pair(TEXTS).target
    auto = EngineConfig.from_mapping({"width": "auto"})
    assert resolve_width(pair.target, auto) == DEFAULT_WIDTH and resolve_width(fp32, auto) is None
    assert resolve_width(fp32, EngineConfig.from_mapping({"width": 6})) == 6
    assert resolve_width(pair.target, EngineConfig.from_mapping({"width": False})) is None
    assert engine_forward(fp32, auto).width is None and step_forward(fp32, auto).width is None


@pytest.mark.parametrize(("node", "key"), [
    ({"width": 1}, "engine.width"),
    ({"width": "wide"}, "engine.width"),
    ({"dtype": "bfloat16"}, "engine.dtype"),
    ({"width": 8, "fused_prefill": True}, "engine.width"),
    ({"width": 8, "graphs": "captured"}, "engine.width"),
])
def test_bad_width_and_dtype_settings_are_one_line_config_errors(node, key):
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_mapping(node)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_a_fused_prefill_under_an_automatic_width_is_refused_when_the_width_turns_on(pair):
    kv.use_static(pair.target, 64)
    engine = EngineConfig.from_mapping({"width": "auto", "fused_prefill": True})
    with pytest.raises(ConfigError, match="engine.fused_prefill"):
        engine_options(pair.target, engine)


def test_a_width_is_refused_at_batch_size_above_one():
    with pytest.raises(ConfigError, match="engine.width=8"):
        JobConfig.from_mapping(compose("engine.width=8", "batch_size=2"))
    assert JobConfig.from_mapping(compose("engine.width=auto", "batch_size=2")).engine.width == "auto"


def test_dtype_auto_takes_bfloat16_where_the_cpu_has_it_and_names_it_in_the_config():
    config = JobConfig.from_mapping(compose("engine.dtype=auto"))
    assert config.pair.target.dtype == "float32"
    chosen = resolve_dtype(config, native=True)
    assert chosen.pair.target.dtype == "bfloat16" and chosen.as_dict()["pair"]["target"]["dtype"] == "bfloat16"
    assert chosen.pair.draft == config.pair.draft  # the draft keeps its own
    assert resolve_dtype(config, native=False) is config
    assert "no native bf16" in dtype_choice(config, native=False)[1]
    for other in (("engine.dtype=model",), ("engine.dtype=auto", "method=hf_native_specdecode",
                   "pair=gemma3-270m_gemma3-270m-int8"),
                  ("engine.dtype=auto", "batch_size=2"), ("engine.dtype=auto", "pair.target.dtype=float16")):
        config = JobConfig.from_mapping(compose(*other))
        assert resolve_dtype(config, native=True) is config, other


def test_prepare_resolves_the_dtype_before_anything_reads_the_config(monkeypatch):
    from runners.engine import invariant
    from runners.jobs.build import prepare

    monkeypatch.setattr(invariant, "native_bf16", lambda: True)
    assert prepare(compose("engine.dtype=auto")).config.pair.target.dtype == "bfloat16"
    monkeypatch.setattr(invariant, "native_bf16", lambda: False)
    assert prepare(compose("engine.dtype=auto")).config.pair.target.dtype == "float32"


def test_the_width_makes_lossless_a_bfloat16_loop_that_is_not_lossless_without_it():
    """The lossless check at the width with its control: a bf16 target wide enough (hidden 128, vocabulary 2000)
    that the plain loop's blocks round otherwise than its target alone's steps, on random prompts. Without the width
    the loop's output differs from the plain target alone's on some prompt (the control: skipped on a host whose
    kernels move none); at the width it equals the width's target alone on every prompt."""
    from helpers.tiny import noisy_copy, tiny_model

    model = tiny_model(2000, seed=1, hidden=128, layers=2).to(torch.bfloat16)
    ctx = DrafterContext(target_tokenizer=None, eos_token_ids=[], target_vocab_size=2000,
                         draft_model=noisy_copy(model, 0.3, 7, "std"), draft_tokenizer=None, options={})
    g = torch.Generator().manual_seed(0)
    prompts = [[int(t) for t in torch.randint(1, 2000, (12,), generator=g)] for _ in range(8)]
    n = 40

    def differ(alone: AutoregressiveRunner, **options) -> int:
        loop = SpeculativeRunner(model, build_drafter("model", ctx), build_policy("fixed", 5, {}), [], 0.0, **options)
        return sum(loop.generate(p, n).tokens != alone.generate(p, n).tokens for p in prompts)

    plain = differ(AutoregressiveRunner(model, []))
    engine = EngineConfig.from_mapping({"width": "auto"})
    assert use_invariant(model, engine, n) == DEFAULT_WIDTH
    assert differ(AutoregressiveRunner(model, [], forward=step_forward(model, engine)),
                  **engine_options(model, engine, gamma=5)) == 0
    if plain == 0:
        pytest.skip("this host's bf16 kernels round the plain loop's blocks like its steps: no control")
