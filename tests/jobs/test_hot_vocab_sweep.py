"""A sweep over the draft's head (issue 52, item 2): ``pair.draft.hot_vocab=null,<k>`` runs the whole head and a head
restricted to the k most frequent tokens of a token map as two jobs of one pair, both lossless; their records say how
many tokens the head computed and the share of the output among them, and the analysis names them
``<pair>@full`` and ``<pair>@hot<k>``."""

from __future__ import annotations

import json

import pytest

from analysis.frame import load_records
from specbench.models.hot_vocab import build_token_map

from helpers import run_sweep, tiny

CHEAP = ["pair=tiny", "method=specdecode", "gamma=3", "task.n_prompts=2", "max_new_tokens=12", "warmup=0",
         "threads=1", "engine.fast_linear=false", "engine.verify_buckets=false", "host_probe=false"]


@pytest.mark.slow
def test_a_sweep_of_the_drafts_head_runs_as_typed_and_stays_lossless(tiny_conf, tmp_path):
    token_map = tmp_path / "map.json"
    build_token_map(tiny.tiny_tokenizer(), list(tiny.CORPUS), "the tests' corpus", keep=40).write(token_map)
    results = tmp_path / "results"
    proc = run_sweep(["-m", *CHEAP, "+pair.draft.hot_vocab=null,40", f"+pair.draft.token_map={token_map}"],
                     tiny_conf, results, in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for p in sorted(results.glob("*/records.jsonl")) for line in p.read_text().splitlines()]
    assert len(records) == 4 and all(r["lossless"] for r in records)
    hot = [r for r in records if r["draft_hot_vocab"] == 40]
    assert len(hot) == 2 and all(0 <= r["hot_coverage"] <= 1 for r in hot)
    full = [r for r in records if r["draft_hot_vocab"] is None]
    assert len(full) == 2 and all(r["hot_coverage"] is None for r in full)
    assert sorted(load_records(results)["pair"].unique()) == ["tiny@full", "tiny@hot40"]
