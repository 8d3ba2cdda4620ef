"""Vocabulary mapping by string and the statistics of Timor et al., Tables 5 and 8-11, on tiny local tokenizers."""

from __future__ import annotations

import json

import pytest

from methods.hetero.feasibility import combinations, describe, psi_tree_nodes, segmentations, table5
from methods.hetero.slrs import SLRS
from methods.hetero.stats import format_report, injectivity, main, prompt_overlap, vocab_overlap, vocab_report
from methods.hetero.vocab import build_vocab_mapping, token_strings

from helpers import sentencepiece_like
from helpers.tiny import tiny_tokenizer


def test_token_strings_read_the_text_a_token_adds():
    bpe = tiny_tokenizer(300, "bpe")
    strings = token_strings(bpe)
    the = bpe.convert_tokens_to_ids("Ġthe")
    assert strings[the] == " the" and strings[bpe.convert_tokens_to_ids("Ċ")] == "\n"
    assert strings[bpe.eos_token_id] is None  # special tokens are paired explicitly, never by text
    lone_byte = bpe.convert_tokens_to_ids("Ã")  # byte 0xC3 alone: an incomplete UTF-8 character
    assert strings[lone_byte] is None
    assert token_strings(bpe, size=310)[300:] == [None] * 10  # padding rows of a bigger head


def test_mapping_matches_byte_level_g_and_sentencepiece_underscore_conventions():
    sp, bpe = sentencepiece_like(), tiny_tokenizer(300, "bpe")
    assert sp.decode(sp.convert_tokens_to_ids(["▁the"])) == "the"  # decoded alone, the space is lost...
    mapping = build_vocab_mapping(sp, bpe)
    d2t = mapping.draft_to_target
    pairs = {"▁the": "Ġthe", "▁": "Ġ", "\n": "Ċ", "at": "at"}
    for sp_tok, bpe_tok in pairs.items():  # ...but after an anchor token it is kept, so they match
        assert int(d2t[sp.convert_tokens_to_ids(sp_tok)]) == bpe.convert_tokens_to_ids(bpe_tok)
    raw = set(sp.get_vocab()) & set(bpe.get_vocab())  # comparing raw vocabulary entries misses them
    assert mapping.intersection_size >= len(raw) + 15


def test_mapping_pairs_eos_explicitly():
    char, bpe = tiny_tokenizer(kind="char"), tiny_tokenizer(300, "bpe")
    mapping = build_vocab_mapping(char, bpe, draft_eos_ids=[0], target_eos_ids=[bpe.eos_token_id])
    assert int(mapping.draft_to_target[0]) == bpe.eos_token_id
    assert int(build_vocab_mapping(char, bpe).draft_to_target[0]) == -1


def test_overlap_of_char_and_bpe_vocabularies():
    char, bpe = tiny_tokenizer(kind="char"), tiny_tokenizer(300, "bpe")
    stats = vocab_overlap(bpe, char)
    # every character of the corpus is a single-byte token of the byte-level BPE
    assert stats["target_vocab_size"] == 300 and stats["draft_vocab_size"] == 34
    assert stats["intersection"] == 33 == stats["draft_strings"]
    assert stats["intersection_ratio"] == 33 / 300
    assert vocab_overlap(char, bpe)["intersection_ratio"] == 33 / 34


def test_prompt_overlap_counts_distinct_target_tokens_of_the_prompts():
    char, bpe = tiny_tokenizer(kind="char"), tiny_tokenizer(300, "bpe")
    prompts = ["the dog", "the dog sat"]
    seen = {t for p in prompts for t in bpe(p, add_special_tokens=False).input_ids}
    single = {t for t in seen if len(bpe.decode([t])) == 1}
    stats = prompt_overlap(bpe, char, prompts)
    assert stats["prompt_tokens"] == len(seen) and stats["prompt_intersection"] == len(single)
    assert 0 < stats["prompt_intersection_ratio"] < 1
    assert prompt_overlap(char, bpe, prompts)["prompt_intersection_ratio"] == 1.0


def test_injectivity_check_on_prefixes():
    char, bpe = tiny_tokenizer(kind="char"), tiny_tokenizer(300, "bpe")
    prompts = ["the quick brown fox " * 8, "The Dog", "a cat sat"]
    assert injectivity(bpe, prompts)["round_trip_fraction"] == 1.0  # byte-level BPE: lossless
    res = injectivity(char, prompts)  # unknown upper-case letters become <eos>: not injective
    assert res["round_trips"] == 2 and not res["injective"]
    assert res["failures"][0]["prefix"] == "The Dog" and res["failures"][0]["decoded"] == "<eos>he <eos>og"
    assert injectivity(char, ["x" * 150 + "A"])["injective"]  # only the first 100 characters count


def test_report_and_command_line(tmp_path, capsys):
    char, bpe = tiny_tokenizer(kind="char"), tiny_tokenizer(300, "bpe")
    report = vocab_report(bpe, char, ["the dog", "The cat"])
    assert report["injectivity"]["draft"]["round_trips"] == 1
    assert "(Table 9)" in format_report(report)
    bpe.save_pretrained(tmp_path / "bpe")
    char.save_pretrained(tmp_path / "char")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"turns": ["the dog", "The cat"]}) + "\n" + json.dumps({"prompt": "a log"}) + "\n")
    out = tmp_path / "stats.json"
    assert main(["--target", str(tmp_path / "bpe"), "--draft", str(tmp_path / "char"), "--prompts", str(prompts),
                 "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["intersection"] == 33 and saved["injectivity"]["draft"]["prompts"] == 3
    printed = capsys.readouterr().out
    assert "| |T ∩ D| by string (Table 9) | 33 |" in printed
    # Table 5 (on by default): a character drafter composes every BPE token in exactly one way
    assert saved["slrs"]["vocabulary"]["combinations"]["max"] == 1.0 and "Table 5" in printed
    assert saved["slrs"]["psi_tree_nodes"] == psi_tree_nodes(token_strings(bpe), token_strings(char))
    assert main(["--target", str(tmp_path / "bpe"), "--draft", str(tmp_path / "char"), "--no-slrs",
                 "--json", str(out)]) == 0
    assert "slrs" not in json.loads(out.read_text())


# ---------------------------------------------------------------- Table 5 / Appendix C (SLRS feasibility)


def test_combinations_follow_lemma_3_1_on_a_complete_vocabulary():
    words = {"a" * k for k in range(1, 9)}
    for n in range(1, 9):
        assert segmentations("a" * n, words, 8) == 2 ** (n - 1)
    # the paper's example: 'hello' over a vocabulary holding some of its pieces (Appendix C, Figure 1)
    pieces = {"H", "e", "l", "o", "He", "el", "ll", "lo", "Hel", "ell", "Hell", "ello", "Hello"}
    assert segmentations("Hello", pieces, 5) == 14  # the 14 leaves of Figure 1
    assert segmentations("Hex", pieces, 5) == 0


def test_table5_statistics_and_the_tree_size_agree_with_slrs():
    target = ["ab", "abc", "b", "bca", None, "x"]
    draft = ["a", "b", "c", "ab", "bc", None]
    assert combinations(target, draft) == {0: 2, 1: 3, 2: 1, 3: 2, 5: 0}
    t5 = table5(target, draft)
    assert t5["tokens"] == 5 and t5["not_expressible"] == 1
    assert t5["combinations"]["max"] == 3 and t5["largest"] == {"token": "abc", "combinations": 3}
    assert t5["length"] == describe([2, 3, 1, 3])
    assert describe([1, 2, 3, 4]) == {"mean": 2.5, "std": pytest.approx(1.2909944), "min": 1.0, "25%": 1.75,
                                      "50%": 2.5, "75%": 3.25, "max": 4.0}
    # ψ's tree with every draft token possible: exactly what SLRS walks (methods.hetero.slrs)
    assert psi_tree_nodes(target, draft) == SLRS(draft, target, max_nodes=10**6).tree_size()
    bpe, char = tiny_tokenizer(300, "bpe"), tiny_tokenizer(kind="char")
    t, d = token_strings(bpe), token_strings(char)
    assert psi_tree_nodes(t, d) == SLRS(d, t, max_nodes=10**6).tree_size()
