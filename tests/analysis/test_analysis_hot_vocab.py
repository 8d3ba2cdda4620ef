"""A draft whose LM head was restricted to the most frequent tokens (issue 52, item 2; ``draft_hot_vocab``) is another
draft: a pair swept over ``pair.draft.hot_vocab`` becomes ``<pair>@hot<k>`` / ``<pair>@full`` (``analysis.frame``,
``split_by_hot_vocab``), so its timings never pool; the target keeps its name (its baseline is the same)."""

from __future__ import annotations

import pandas as pd

from analysis.frame import rows_to_frame, split_runs
from analysis.metrics import gamma_speedups

from helpers.analysis_records import record_row


def _rows(hot: int | None, tokens_per_s: float, method: str = "gammatune", pair: str = "p", n: int = 2) -> list[dict]:
    wall = 10.0 / tokens_per_s * 1000.0
    return [record_row(pair=pair, method=method, prompt_id=f"q{i}", new_tokens=10, wall_ms=wall,
                       tokens_per_s=tokens_per_s, draft_vocab_size=300, draft_hot_vocab=hot) for i in range(n)]


def test_one_pair_with_two_heads_is_two_pairs_and_the_target_is_one():
    df = rows_to_frame(_rows(None, 10.0, "specdecode") + _rows(None, 20.0)
                       + _rows(64, 15.0, "specdecode") + _rows(64, 30.0))
    assert sorted(df["pair"].unique()) == ["p@full", "p@hot64"]
    assert df["target"].nunique() == 1
    speedup = gamma_speedups(df, baseline="specdecode").set_index(["pair", "method"])["speedup"]
    assert round(speedup[("p@full", "gammatune")], 6) == 2.0 and round(speedup[("p@hot64", "gammatune")], 6) == 2.0


def test_a_pair_with_one_head_keeps_its_name_and_the_split_is_idempotent():
    assert rows_to_frame(_rows(64, 10.0) + _rows(None, 12.0, pair="q"))["pair"].unique().tolist() == ["p", "q"]
    one = rows_to_frame(_rows(None, 10.0))
    mixed = rows_to_frame(_rows(None, 11.0) + _rows(128, 14.0))
    again = split_runs(pd.concat([one, mixed], ignore_index=True))
    assert again["pair"].value_counts().to_dict() == {"p@full": 4, "p@hot128": 2}
    assert split_runs(again)["pair"].tolist() == again["pair"].tolist()
