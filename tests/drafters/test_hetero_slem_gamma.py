"""What SLEM's γ counts (issue 28, item 4; ``runners/drafters/slem.py``, ``hetero.slem_gamma``).

* ``draft_tokens`` (the default, transformers' and hf-bench's rule): γ drafter tokens are drafted and
  every target token their text re-tokenizes into is verified, cut only to the round's budget;
* ``target_tokens`` (the former rule): the proposal is cut to ``min(γ, budget)`` target tokens.

Both are lossless (greedy output = the target's own, token for token, on tiny models with two
tokenizers, both ways round); with a drafter whose tokens are longer than the target's (byte-level BPE
drafting for a character-level target) the default verifies more than γ target tokens per round and
accepts more per round, where the former rule never verifies more than γ. No round ever proposes past
the budget (``max_new_tokens`` − new tokens − 1).
"""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from methods.base import FixedGamma
from runners.drafters.slem import SLEMDrafter
from runners.drafters.text_sync import CrossVocab
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.jobs.job import run_job
from specbench.config import HeteroConfig, JobConfig
from specbench.record_io import read_records
from specbench.registry import ConfigError

from helpers import compose, write_tiny_hetero_pair
from helpers.hetero import BPE_SIZE, PROMPTS, TEXT, Oracle
from helpers.tiny import tiny_model

RULES = ["draft_tokens", "target_tokens"]


def _run(target, drafter, gamma, ids, max_new_tokens):
    return SpeculativeRunner(target, drafter, FixedGamma(gamma), [0]).generate(ids, max_new_tokens)


def _rooms(gen, max_new_tokens: int) -> list[int]:
    """Each round's budget: target tokens it may propose (``max_new_tokens`` − new tokens − 1)."""
    rooms, produced = [], 1  # the prefill's token
    for accepted in gen.rounds.accepted:
        rooms.append(max_new_tokens - produced - 1)
        produced += accepted + 1
    return rooms


@pytest.mark.parametrize("slem_gamma", RULES)
@pytest.mark.parametrize("draft_kind", ["bpe", "char"])
def test_greedy_output_is_the_targets_under_both_rules(bpe, char, slem_gamma, draft_kind):
    """Lossless both ways round (a draft with longer tokens than the target's, and shorter), every
    round within its budget; ``target_tokens`` never verifies more than γ. (γ = 1, 3, 7 under the
    default: ``tests/drafters/test_hetero_drafters.py``.)"""
    gamma = 3
    ttok, dtok = (char, bpe) if draft_kind == "bpe" else (bpe, char)
    for seed, prompt in enumerate(PROMPTS[:2]):
        target, draft = tiny_model(len(ttok), seed=30 + seed), tiny_model(len(dtok), seed=40 + seed)
        ids = ttok(prompt).input_ids
        want = AutoregressiveRunner(target, [0]).generate(ids, 24).tokens
        gen = _run(target, SLEMDrafter(CrossVocab(draft, dtok, ttok, [0]), slem_gamma=slem_gamma), gamma, ids, 24)
        assert gen.tokens == want, (prompt, slem_gamma)
        assert all(d <= room for d, room in zip(gen.rounds.drafted, _rooms(gen, 24), strict=True))
        if slem_gamma == "target_tokens":
            assert max(gen.rounds.drafted) <= gamma


@pytest.mark.parametrize("gamma", [2, 3])
def test_the_default_verifies_every_retokenized_token_of_gamma_longer_draft_tokens(bpe, char, gamma):
    """Oracle models that both write ``TEXT``: the BPE drafter's γ tokens hold more than γ characters, the
    character target's tokens. The default proposes (and here accepts) more than γ target tokens per round,
    so it needs fewer rounds; the former rule cuts each proposal to γ and throws the rest of the text away."""
    ids = char(TEXT[:19]).input_ids
    target = Oracle(tiny_model(len(char), seed=5), char, TEXT, 0)
    want = AutoregressiveRunner(target, [0]).generate(ids, 60).tokens
    assert char.decode(want, skip_special_tokens=True) == TEXT[19:]
    gens = {}
    for rule in RULES:
        draft = Oracle(tiny_model(BPE_SIZE, seed=6), bpe, TEXT, 0)
        gens[rule] = gen = _run(target, SLEMDrafter(CrossVocab(draft, bpe, char, [0]), slem_gamma=rule), gamma, ids, 60)
        assert gen.tokens == want, rule
        assert all(d <= room for d, room in zip(gen.rounds.drafted, _rooms(gen, 60), strict=True))
    default, former = gens["draft_tokens"], gens["target_tokens"]
    assert max(former.rounds.drafted) <= gamma
    assert max(default.rounds.drafted) > gamma and max(default.rounds.accepted) > gamma
    assert sum(default.rounds.accepted) / len(default.rounds.accepted) > sum(former.rounds.accepted) / len(former.rounds.accepted)
    assert len(default.rounds.accepted) < len(former.rounds.accepted)


def test_limits_count_gamma_in_drafter_tokens_only_by_default(bpe, char):
    draft = tiny_model(BPE_SIZE, seed=7)
    assert SLEMDrafter(CrossVocab(draft, bpe, char, [0])).limits(5, 3) == (5, 3)  # γ drafter tokens, kept up to the budget
    assert SLEMDrafter(CrossVocab(draft, bpe, char, [0]), slem_gamma="target_tokens").limits(5, 3) == (3, 3)
    assert SLEMDrafter(CrossVocab(draft, bpe, char, [0])).limits(0, 3) == (0, 3)  # γ = 0: a plain target step
    with pytest.raises(ConfigError, match="slem_gamma"):
        SLEMDrafter(CrossVocab(draft, bpe, char, [0]), slem_gamma="both")


def test_the_knob_is_a_config_setting_of_slem_and_auto_only():
    assert HeteroConfig.from_mapping({"name": "slem", "slem_gamma": None}).slem_gamma == "draft_tokens"  # null: default
    assert HeteroConfig.from_mapping({"name": "auto", "slem_gamma": "target_tokens"}).slem_gamma == "target_tokens"
    with pytest.raises(ConfigError, match="hetero.slem_gamma"):
        HeteroConfig.from_mapping({"name": "slem", "slem_gamma": "target"})
    with pytest.raises(ConfigError, match="setting of hetero=slem"):
        HeteroConfig.from_mapping({"name": "tli", "slem_gamma": "target_tokens"})
    for name in ("auto", "slem"):
        node = compose(f"hetero={name}").hetero
        assert "slem_gamma" in node and node.slem_gamma is None  # the YAML's null = draft_tokens
    config = JobConfig.from_mapping(compose("pair=gemma3-270m_smollm2-135m", "hetero.slem_gamma=target_tokens"))
    assert (config.hetero_rule, config.hetero.slem_gamma) == ("slem", "target_tokens")


def test_a_job_runs_each_rule_and_its_summary_names_it(tmp_path):
    conf = write_tiny_hetero_pair(tmp_path / "conf")
    pair = yaml.safe_load((conf / "pair" / "tiny_hetero.yaml").read_text())
    for rule in RULES:
        cfg = OmegaConf.to_container(compose("hetero=slem", f"hetero.slem_gamma={rule}", "task.n_prompts=2",
                                             "max_new_tokens=12", "warmup=0", "gamma=3",
                                             "engine.verify_buckets=false"), resolve=True)
        cfg["pair"] = pair
        summary = run_job(cfg, tmp_path / rule, progress=False)
        assert summary["status"] == "complete" and summary["hetero"]["slem_gamma"] == rule
        records = read_records(tmp_path / rule / "records.jsonl")
        assert records and all(r["lossless"] is True and r["hetero"] == "slem" for r in records)
        assert {(r["hetero_display"], r["method_display"]) for r in records} == {("SLEM", "SpecDecode")}
