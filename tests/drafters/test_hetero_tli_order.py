"""Where TLI's sampling processors act (issue 28, item 5; ``runners/drafters/tli.py``, ``hetero.tli_processors``).

* ``before_restrict`` (the default): top-k / top-p / typical-p over the drafter's whole vocabulary, then the
  shared tokens kept and renormalised;
* ``after_restrict``: the shared tokens kept first, then the processors (transformers' order).

Exactness for both, as ``tests/engine/test_sampling.py`` does it: the real loop (``SpeculativeRunner`` +
``TLIDrafter``, text sync included) on a toy pair of two character tokenizers with small vocabularies,
every random decision replaced by an enumerating chooser (``methods.hetero.sampling.enumerate_outcomes``):
the law of the output is computed exactly (float32 rounding of the probabilities only) and equals the
target's processed law. The drafter is biased toward a token only it has, so under top-k the two orders
propose from different distributions (checked) and ``before_restrict`` sometimes has nothing to propose
(its draft then ends: checked lossless too). A drafter that samples by one order but reports the other's
``q`` is caught (the test can fail).
"""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import runners.drafters.tli as tli_module
import runners.engine.speculative as speculative
import runners.engine.verify as verify
from methods.base import FixedGamma
from methods.hetero.token_level import to_target
from runners.drafters.text_sync import CrossVocab
from runners.drafters.tli import TLIDrafter
from runners.engine.speculative import SpeculativeRunner
from runners.engine.verify import Sampling
from specbench.config import HeteroConfig, JobConfig
from specbench.registry import ConfigError

from helpers import compose
from helpers.exact_law import enumerated_law, processed_law
from helpers.tiny import TEST_DEVICE, tiny_model

ORDERS = ["before_restrict", "after_restrict"]
TARGET_CHARS = ["a", "b", "c", "d"]  # 'd' is the target's own
DRAFT_CHARS = ["x", "a", "y", "b", "c"]  # 'x' and 'y' are the drafter's own (another id order, too)
SAMPLING = Sampling(1.0, top_k=2)
LENGTH = 3  # new tokens; the first round drafts γ = 2 from the prompt (fused prefill), so drafts of 2 are enumerated


def char_tokenizer(chars: list[str]) -> PreTrainedTokenizerFast:
    vocab = {"<eos>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


class Biased(torch.nn.Module):
    """A tiny Llama whose logits get a fixed offset (toward the drafter's own tokens)."""

    def __init__(self, model: torch.nn.Module, offset: torch.Tensor) -> None:
        super().__init__()
        self.model, self.config, self.offset = model, model.config, offset

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def forward(self, input_ids, **kwargs):
        out = self.model(input_ids=input_ids, **kwargs)
        out.logits = out.logits + self.offset
        return out


@pytest.fixture(scope="module")
def toy():
    ttok, dtok = char_tokenizer(TARGET_CHARS), char_tokenizer(DRAFT_CHARS)
    target = tiny_model(len(ttok), seed=61, hidden=16, layers=1)
    base = tiny_model(len(dtok), seed=62, hidden=16, layers=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(3.0)
        base.lm_head.weight.mul_(3.0)
    offset = torch.zeros(len(dtok))
    offset[dtok.convert_tokens_to_ids("x")] = 0.3  # draft-only tokens often among the drafter's top 2
    offset[dtok.convert_tokens_to_ids("y")] = 0.5
    device = TEST_DEVICE  # SPECBENCH_TEST_DEVICE=cuda: the same laws on a GPU
    return ttok, dtok, target.to(device), Biased(base.to(device), offset.to(device)), ttok("ab").input_ids


@pytest.fixture
def enumerated(monkeypatch):
    """Every random decision of the loop and of TLI's drafter goes through the enumerating chooser."""
    return enumerated_law(monkeypatch, (verify, speculative, tli_module))


def _max_gap(got: dict, want: dict) -> float:
    return max(abs(got.get(k, 0.0) - want.get(k, 0.0)) for k in set(got) | set(want))


def _drafter(toy, order: str, cls=TLIDrafter) -> TLIDrafter:
    ttok, dtok, _, draft, _ = toy
    return cls(CrossVocab(draft, dtok, ttok, [0], len(ttok)), tli_processors=order)


def test_the_two_orders_propose_from_different_distributions(toy):
    """Under top-2 the drafter's favourites include its own 'x': processing first keeps one shared token,
    restricting first keeps two. Both are distributions on shared tokens only."""
    ttok, _, _, _, prompt = toy
    dists = {}
    for order in ORDERS:
        drafter = _drafter(toy, order)
        drafter.begin(prompt)
        logits = drafter.next_logits(prompt)
        dists[order] = q = drafter.tli_distribution(logits, SAMPLING)
        assert q is not None and math.isclose(float(q.sum()), 1.0, rel_tol=1e-6)
        assert float(q[~drafter.index.shared_mask].sum()) == 0.0
    assert int((dists["before_restrict"] > 0).sum()) == 1 and int((dists["after_restrict"] > 0).sum()) == 2
    # at temperature 0 the order cannot matter (no processors): the same argmax
    greedy = [_drafter(toy, o).tli_pick(logits, Sampling(0.0), None)[:2] for o in ORDERS]
    assert greedy[0] == greedy[1]


@pytest.mark.parametrize("order", ORDERS)
def test_the_output_law_is_the_targetsprocessed_law(enumerated, toy, order):
    _, _, target, _, prompt = toy
    want = processed_law(target, prompt, LENGTH, SAMPLING)
    assert _max_gap(want, processed_law(target, prompt, LENGTH, Sampling(1.0))) > 0.05  # the processors matter
    drafter = _drafter(toy, order)
    runner = SpeculativeRunner(target, drafter, FixedGamma(2), [], SAMPLING, fused_prefill=True)
    first, nothing = [], []  # tokens drafted in the first round (room for 2); positions with nothing to propose
    own = drafter.tli_distribution

    def counted(logits, sampling):
        q = own(logits, sampling)
        nothing.append(q is None)
        return q

    drafter.tli_distribution = counted

    def tokens():
        gen = runner.generate(prompt, LENGTH)
        first.append(gen.rounds.drafted[0])
        return gen.tokens

    got = enumerated(tokens)
    assert max(first) == 2  # two-token drafts are enumerated
    # processing first, the drafter sometimes keeps no shared token and its draft ends there
    assert any(nothing) == (order == "before_restrict")
    assert set(got) <= set(want)
    assert _max_gap(got, want) < 2e-6
    assert math.isclose(sum(got.values()), 1.0, abs_tol=1e-9)


class _Liar(TLIDrafter):
    """Samples its token by processing first, but hands verification restrict-first's ``q``."""

    def tli_pick(self, logits, sampling, generator):
        sampled = TLIDrafter.tli_distribution(self, logits, sampling)
        self.tli_processors = "after_restrict"
        reported = TLIDrafter.tli_distribution(self, logits, sampling)
        self.tli_processors = "before_restrict"
        if sampled is None:
            return None
        d_tok = verify.sample(sampled, generator)
        q = to_target(reported, self.mapping)
        t_tok = int(self.d2t[d_tok])
        return d_tok, t_tok, q, float(q[t_tok])


def test_a_drafter_reporting_the_other_orders_q_is_caught(enumerated, toy):
    _, _, target, _, prompt = toy
    want = processed_law(target, prompt, LENGTH, SAMPLING)
    runner = SpeculativeRunner(target, _drafter(toy, "before_restrict", _Liar), FixedGamma(2), [], SAMPLING,
                               fused_prefill=True)
    got = enumerated(lambda: runner.generate(prompt, LENGTH).tokens)
    assert _max_gap(got, want) > 1e-3


def test_processing_first_may_leave_nothing_to_propose_and_the_draft_ends(toy):
    """Top-2 = the drafter's two own tokens: nothing shared survives, so the round drafts nothing (lossless:
    a plain target step), where restricting first still proposes."""
    ttok, dtok, _, _, prompt = toy
    logits = torch.zeros(len(dtok))
    for token, value in (("x", 5.0), ("y", 4.0), ("a", 2.0), ("b", 1.0), ("c", 0.5)):
        logits[dtok.convert_tokens_to_ids(token)] = value
    before, after = _drafter(toy, "before_restrict"), _drafter(toy, "after_restrict")
    assert before.tli_distribution(logits, SAMPLING) is None and before.tli_pick(logits, SAMPLING, None) is None
    q = after.tli_distribution(logits, SAMPLING)
    assert q is not None and {dtok.convert_ids_to_tokens(i) for i in q.nonzero().flatten().tolist()} == {"a", "b"}

    class Favourites(torch.nn.Module):  # a drafter that always prefers its own two tokens
        def __init__(self, model):
            super().__init__()
            self.model, self.config = model, model.config

        def get_output_embeddings(self):
            return self.model.get_output_embeddings()

        def forward(self, input_ids, **kwargs):
            out = self.model(input_ids=input_ids, **kwargs)
            out.logits = out.logits * 0 + logits.to(out.logits.device)
            return out

    drafter = TLIDrafter(CrossVocab(Favourites(toy[3].model), dtok, ttok, [0], len(ttok)), tli_processors="before_restrict")
    drafter.begin(prompt)
    out = drafter.propose(prompt, 3, FixedGamma(3), SAMPLING, torch.Generator().manual_seed(0))
    assert out.tokens == [] and out.q is None


def test_the_knob_is_a_config_setting_of_tli_and_auto_only(toy):
    assert HeteroConfig.from_mapping({"name": "tli", "tli_processors": None}).tli_processors == "before_restrict"
    assert HeteroConfig.from_mapping({"name": "auto", "tli_processors": "after_restrict"}).tli_processors == "after_restrict"
    with pytest.raises(ConfigError, match="hetero.tli_processors"):
        HeteroConfig.from_mapping({"name": "tli", "tli_processors": "first"})
    with pytest.raises(ConfigError, match="setting of hetero=tli"):
        HeteroConfig.from_mapping({"name": "union", "tli_processors": "after_restrict"})
    with pytest.raises(ConfigError, match="tli_processors"):
        _drafter(toy, "first")
    for name in ("auto", "tli"):
        node = compose(f"hetero={name}").hetero
        assert "tli_processors" in node and node.tli_processors is None  # the YAML's null = before_restrict


@pytest.mark.parametrize(("recipe", "pair"), [("hetero_tli", "phi-4_qwen2.5-0.5b-instruct"),
                                            ("mini_hetero_tli", "gemma3-270m_smollm2-135m")])
def test_the_hf_bench_recipes_use_transformers_order(recipe, pair):
    config = JobConfig.from_mapping(compose(f"experiment={recipe}", f"pair={pair}", "method=assistant_threshold"))
    assert config.hetero.tli_processors == "after_restrict" and config.hetero_rule == "tli"
    assert config.top_k == "checkpoint"  # the order matters because a processor truncates
