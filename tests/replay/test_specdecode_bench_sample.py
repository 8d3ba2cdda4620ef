"""Issue 41: ``--sample N`` draws the requests as SpecDecode-Bench's ``simulator.py:
simulate_like_experiment`` does (``random.seed(42); random.sample(data, k=300)``), after the n-gram
no-match draws over the whole file."""

from __future__ import annotations

import json
import random

import pytest

from runners.replay.import_specdecode_bench import import_traces, sample_requests


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "combined_gsm8k.jsonl"
    rows = [{"id": f"r{i}", "prompt_token_ids": [1] * (i + 1), "generated_token_ids": [],
             "acc_eagle": {"acc_len": [1 + i % 3, 1, 2, 1]}, "acc_ngram": {"acc_len": [1, 1, 2, 1, 1]}}
            for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sample_is_their_draw(data):
    full, _ = import_traces(data, "eagle")
    random.seed(42)
    theirs = random.sample([tr.prompt_id for tr in full], k=5)
    picked, meta = import_traces(data, "eagle", sample=5)
    assert [tr.prompt_id for tr in picked] == theirs and meta["requests"] == 5
    assert meta["sample"]["of"] == 12 and meta["sample"]["k"] == 5
    # k at least the number of requests: every request, in their shuffled order
    random.seed(42)
    ids = [tr.prompt_id for tr in full]
    assert [tr.prompt_id for tr in sample_requests(full, 300)] == random.sample(ids, k=12)
    with pytest.raises(ValueError, match="--sample"):
        sample_requests(full, 0)


def test_sample_keeps_the_no_match_draws_of_the_whole_file(data):
    full, _ = import_traces(data, "ngram")
    picked, _ = import_traces(data, "ngram", sample=4)
    by_id = {tr.prompt_id: tr.proposals for tr in full}
    assert all(tr.proposals == by_id[tr.prompt_id] for tr in picked)
    assert any(not p for tr in full for p in tr.proposals)  # gsm8k: no match at acc_len 1, probability 0.8
