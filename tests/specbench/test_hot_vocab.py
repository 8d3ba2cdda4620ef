"""A draft's LM head restricted to the most frequent tokens (FR-Spec; ``specbench.models.hot_vocab``): the token maps,
the head, the cache's derivation, the config's checks, and decoding that stays lossless."""

from __future__ import annotations

import json
import math

import pytest
import torch

import runners.drafters.model as model_drafter
import runners.engine.speculative as speculative
import runners.engine.verify as verify
from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import Sampling
from specbench.config import ModelSpec, PairConfig
from specbench.models import apply_transform
from specbench.models.cache import ModelCache
from specbench.models.hot_vocab import (
    TokenMap,
    build_token_map,
    coverage,
    hot_ids,
    load_token_map,
    main,
    package_maps,
    restrict_head,
    vocab_fingerprint,
)
from specbench.registry import ConfigError

from helpers import tiny
from helpers.exact_law import enumerated_law, processed_law

# ----------------------------------------------------------------------------- token maps


@pytest.mark.parametrize("kwargs, message", [
    ({"ids": ()}, "at least one"),
    ({"ids": (1, 2, 1)}, "twice"),
    ({"ids": (3, -1)}, "negative"),
    ({"ids": (1, 2), "counts": (5,)}, "2 ids but 1 counts"),
])
def test_bad_token_maps_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TokenMap(**kwargs)


def test_a_map_ranks_by_count_and_round_trips_through_its_json(tmp_path):
    tok = tiny.tiny_tokenizer()
    texts = ["the quick brown fox", "the lazy dog", "the the the"]
    built = build_token_map(tok, texts, "three lines")
    the = tok("the", add_special_tokens=False)["input_ids"][0]
    assert built.ids[0] == the and built.counts[0] == max(built.counts)
    assert list(built.counts) == sorted(built.counts, reverse=True)
    assert built.tokens_counted == sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
    built.write(tmp_path / "map.json")
    again = load_token_map(str(tmp_path / "map.json"))
    assert again == built and again.vocab["fingerprint"] == vocab_fingerprint(tok)
    assert again.top(2) == built.ids[:2]
    with pytest.raises(ConfigError, match="ranks only"):
        again.top(len(built.ids) + 1)


def test_sglang_and_fr_spec_pt_maps_are_read_in_their_order(tmp_path):
    """SGLang's ``load_token_map`` reads ``torch.load(path, weights_only=True)``: a list or a tensor of ids."""
    torch.save([7, 3, 5], tmp_path / "list.pt")
    torch.save(torch.tensor([9, 1], dtype=torch.int64), tmp_path / "tensor.pt")
    assert load_token_map(str(tmp_path / "list.pt")).ids == (7, 3, 5)
    assert load_token_map(str(tmp_path / "tensor.pt")).ids == (9, 1)


def test_unknown_maps_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such packaged map"):
        load_token_map("package:nope")
    with pytest.raises(ConfigError, match="no such file"):
        load_token_map(str(tmp_path / "absent.json"))
    (tmp_path / "other.json").write_text(json.dumps({"ids": [1]}))
    with pytest.raises(ConfigError, match="not a token map"):
        load_token_map(str(tmp_path / "other.json"))


def test_a_map_counted_under_another_tokenizer_is_refused():
    tok, other = tiny.tiny_tokenizer(), tiny.tiny_tokenizer(kind="char")
    built = build_token_map(tok, ["the quick brown fox"], "t")
    built.check_tokenizer(tok, len(tok), "here")
    with pytest.raises(ConfigError, match="another tokenizer"):
        built.check_tokenizer(other, 10_000, "here")
    with pytest.raises(ConfigError, match="beyond the model's vocabulary"):
        TokenMap((1, 500)).check_tokenizer(None, 300, "here")


def test_every_packaged_map_loads():
    assert "gemma3" in package_maps()  # conf/model/gemma3-270m-int8-hot32k.yaml names it
    for name in package_maps():
        token_map = load_token_map(f"package:{name}")
        assert len(token_map.ids) > 1000 and token_map.vocab.get("fingerprint") and token_map.source


def test_the_build_command_writes_a_map_and_refuses_a_missing_corpus(tmp_path, saved):
    path, tok = saved
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 3)
    out = tmp_path / "m.json"
    assert main(["build", "--model", str(path), "--corpus", str(corpus), "--source", "dogs", "--out", str(out)]) == 0
    assert load_token_map(str(out)).source == "dogs"
    assert main(["build", "--model", str(path), "--corpus", str(tmp_path / "no.txt"), "--source", "x",
                 "--out", str(tmp_path / "n.json")]) == 2
    assert not (tmp_path / "n.json").exists()


# ----------------------------------------------------------------------------- the head


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8_dynamic"])
def test_the_head_keeps_the_hot_rows_logits_and_masks_the_rest(int8):
    """On the hot ids the logits are the full head's (int8: the same integers and scale, so exactly); elsewhere
    ``-inf``; the original model is untouched and shares every tensor but its head's."""
    model = tiny.tiny_model(300, seed=4, hidden=32, layers=1)
    if int8:
        model = apply_transform(model, "int8_dynamic")
    ids = [5, 17, 250, 3, 99]
    hot = restrict_head(model, ids)
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        full, cut = model(x).logits, hot(x).logits
    assert cut.shape == full.shape
    mask = torch.zeros(300, dtype=torch.bool)
    mask[ids] = True
    assert torch.isinf(cut[..., ~mask]).all() and (cut[..., ~mask] < 0).all()
    if int8:
        assert torch.equal(cut[..., mask], full[..., mask])
    else:
        torch.testing.assert_close(cut[..., mask], full[..., mask], rtol=1e-5, atol=1e-6)
    assert hot_ids(hot).tolist() == ids and hot_ids(model) is None
    assert type(model.get_output_embeddings()).__name__ != "HotHead"
    shared = {p.data_ptr() for p in model.model.parameters()}
    assert {p.data_ptr() for p in hot.model.parameters()} == shared


def test_coverage_counts_the_tokens_inside():
    assert coverage([1, 2, 3, 9], torch.tensor([1, 9])) == 0.5
    assert coverage([], [1]) is None


# ----------------------------------------------------------------------------- lossless


def test_a_restricted_draft_keeps_greedy_decoding_lossless(noisy_pair):
    """Greedy: the loop with a restricted draft emits the target alone's tokens; it proposes only hot tokens; and
    the test can fail: the target's answers hold tokens outside the hot set, which the draft never proposes."""
    tok, target, draft, prompts = noisy_pair
    ranked = torch.argsort(target.lm_head.weight.norm(dim=1), descending=True).tolist()
    ids = ranked[:120]
    hot = restrict_head(draft, ids)
    outside = 0
    for prompt in prompts:
        ref = AutoregressiveRunner(target, []).generate(prompt, 24).tokens
        runner = SpeculativeRunner(target, ModelDrafter(hot, []), FixedGamma(4), [])
        out = runner.generate(prompt, 24)
        assert out.tokens == ref
        outside += sum(1 for t in ref if t not in set(ids))
    assert outside > 0


@pytest.fixture
def enumerated(monkeypatch):
    return enumerated_law(monkeypatch, (verify, speculative, model_drafter))


def test_a_restricted_draft_keeps_sampling_exact(enumerated):
    """Sampled: the output law of the loop with a draft restricted to 2 of 5 tokens is the target's processed law
    (float32 rounding only), enumerated exactly; the restricted draft's own law is far from it."""
    target, draft = tiny.toy_pair()
    hot = restrict_head(draft, [2, 0])
    prompt, length, sampling = [1, 2], 2, Sampling(1.0)
    want = processed_law(target, prompt, length, sampling)
    assert sum(v for k, v in want.items() if not set(k) <= {0, 2}) > 0.05  # the target leaves the hot set
    for gamma in (1, 2):
        runner = SpeculativeRunner(target, ModelDrafter(hot, []), FixedGamma(gamma), [], sampling=sampling)
        got = enumerated(lambda r=runner: r.generate(prompt, length).tokens)
        assert max(abs(got.get(k, 0.0) - v) for k, v in want.items()) < 2e-6
        assert math.isclose(sum(got.values()), 1.0, abs_tol=1e-9)


# ----------------------------------------------------------------------------- config and cache


def test_the_config_refuses_a_hot_vocab_without_a_map_and_on_a_target():
    with pytest.raises(ConfigError, match="needs a token_map"):
        ModelSpec(path="x", hot_vocab=10)
    with pytest.raises(ConfigError, match="hot_vocab"):
        ModelSpec(path="x", hot_vocab=0, token_map="m.json")
    with pytest.raises(ConfigError, match="restricts a draft.s LM head"):
        PairConfig.from_mapping({"name": "p", "target": {"path": "x", "hot_vocab": 4, "token_map": "m.json"},
                                 "draft": {"kind": "model", "path": "y"}})
    spec = ModelSpec(path="x", transform="int8_dynamic", hot_vocab=4, token_map="m.json")
    assert spec.derivation == "+int8_dynamic+hot4" and spec.base == ModelSpec(path="x")
    assert ModelSpec(path="x", token_map="m.json").derivation == ""  # no hot_vocab: the whole head


def test_the_cache_derives_a_restricted_head_from_its_parent(saved, tmp_path):
    path, tok = saved
    ranked = build_token_map(tok, ["the quick brown fox jumps over the lazy dog"], "dogs")
    ranked.write(tmp_path / "m.json")
    cache = ModelCache()
    spec = ModelSpec(path=str(path), transform="int8_dynamic", hot_vocab=5, token_map=str(tmp_path / "m.json"))
    cache.make_room([ModelSpec(path=str(path)), spec])
    hot = cache.model(spec)
    int8 = cache.model(ModelSpec(path=str(path), transform="int8_dynamic"))
    assert hot_ids(hot).tolist() == list(ranked.ids[:5]) and hot_ids(int8) is None
    assert cache.loads == 1 and cache.model(spec) is hot
    # a token map without hot_vocab is the whole head: the int8 copy itself, not another model
    assert cache.model(ModelSpec(path=str(path), transform="int8_dynamic", token_map=str(tmp_path / "m.json"))) is int8
    assert "+int8_dynamic+hot5" in " ".join(cache.stats()["held"])
    with pytest.raises(ConfigError, match="ranks only"):
        cache.model(ModelSpec(path=str(path), hot_vocab=10_000, token_map=str(tmp_path / "m.json")))
