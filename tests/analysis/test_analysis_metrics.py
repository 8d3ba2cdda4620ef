"""Pooling and labels (``analysis.metrics``): the sample std, tokens/s pooled by tokens, by prompt and by question
(Spec-Bench's speed.py), and method variants never pooled under one name. The arithmetic is next to each literal."""

from __future__ import annotations

import math

import pytest

from analysis.frame import job_rows, rows_to_frame
from analysis.metrics import mean_std, method_label, throughput
from specbench.config.method import method_key

from helpers.analysis_records import VICUNA, record_row


def test_mean_std_convention():
    mean, std, n = mean_std([1.0, 2.0, 4.0])
    assert (mean, n) == (pytest.approx(7 / 3), 3)
    assert std == pytest.approx(1.527525, abs=1e-6)  # sqrt(((4/3)²+(1/3)²+(5/3)²)/2)
    assert math.isnan(mean_std([2.0])[1])


def test_throughput_pooling(complete):
    ar = complete[(complete["pair"] == VICUNA) & (complete["method"] == "ar")]
    assert throughput(ar, "pooled") == pytest.approx(40 / 3)
    assert throughput(ar, "mean") == pytest.approx(12.5)
    with pytest.raises(ValueError, match="pooling"):
        throughput(ar, "median")


def test_question_pooling_is_spec_bench_speed_py():
    """Per question, all its turns' tokens over all their time; then the mean over questions."""
    df = rows_to_frame([record_row(prompt_id="q1", turn=1, new_tokens=10, wall_ms=1000, tokens_per_s=10.0),
                        record_row(prompt_id="q1", turn=2, new_tokens=30, wall_ms=1000, tokens_per_s=30.0),
                        record_row(prompt_id="q2", turn=1, new_tokens=10, wall_ms=500, tokens_per_s=20.0)])
    assert throughput(df, "question") == pytest.approx((20 + 20) / 2)  # q1: 40 / 2 s; q2: 10 / 0.5 s
    assert throughput(df, "pooled") == pytest.approx(50 / 2.5)
    assert throughput(df, "mean") == pytest.approx((10 + 30 + 20) / 3)


def test_method_variants_are_never_pooled_under_one_name():
    assert method_key("gammatune", {"transient": False}) == "gammatune[carryover]"
    assert method_key("gammatune", {"transient": True, "expand_on": "gamma"}) == "gammatune"
    assert method_key("gammatune_plus", {"transient": False, "expand_on": "drafted"}) == \
        "gammatune_plus[carryover,expand=drafted]"
    assert method_key("hf_heuristic_carryover", {"transient": False}) == "hf_heuristic_carryover"
    assert method_label("gammatune[carryover]") == "GammaTune (carry-over)"
    rows = rows_to_frame([record_row(method="gammatune", method_params={"transient": False}),
                          record_row(method="gammatune", method_params={"transient": True})])
    assert sorted(rows["method"]) == ["gammatune", "gammatune[carryover]"]
    old = job_rows([{"method": "gammatune", "schema_version": 1}],
                   {"config": {"method": {"name": "gammatune", "eta": 0.25, "transient": False}}})
    assert rows_to_frame(old)["method"].iloc[0] == "gammatune[carryover,expand=drafted]"  # as schema 1 ran
