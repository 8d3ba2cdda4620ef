"""GammaTune's artefacts (``analysis.gammatune``): Table 2's speedup over SpecDecode pooled two ways, Table 1's
ms/token, the acceptance table and the γ/acceptance trace, checked against numbers worked out by hand on the
synthetic results folder (``helpers.analysis_fixture``; the arithmetic is written next to each literal). A table
that lacks its inputs is skipped, not faked."""

from __future__ import annotations

import math

import pytest

from analysis.categories import category_table
from analysis.frame import rows_to_frame
from analysis.gammatune.rounds import acceptance_table, trace_frame, trace_table
from analysis.gammatune.table2 import speedup_table
from analysis.gammatune.throughput import plot_sensitivity, plot_throughput
from analysis.gammatune.tpot import latency_table
from analysis.hetero import hetero_table, hfbench_table
from analysis.paper import model_key

from helpers.analysis_records import LLAMA, VICUNA, record_row


def _cell(table, **where):
    rows = table.data
    for key, value in where.items():
        rows = rows[rows[key] == value]
    assert len(rows) == 1, where
    return rows.iloc[0]


def test_speedup_table_pooled_by_hand(complete, paper):
    table = speedup_table(complete, "pooled", paper=paper)
    # vicuna, pooled tokens/s: specdecode γ2 = 40/1.5 = 26.667, γ4 = 40/2 = 20 → B = 23.333
    # specdecode speedups 8/7, 6/7: mean 1, sample std (2/7)/√2 = 0.202031
    sd = _cell(table, pair=VICUNA, method="specdecode", source="measured")
    assert sd["mean"] == pytest.approx(1.0) and sd["std"] == pytest.approx(0.202031, abs=1e-6)
    # gammatune γ2 = 40/1.6 = 25 → 15/14; γ4 = 40/1.4 = 28.571 → 60/49
    # mean (15/14 + 60/49)/2 = 1.147959; sample std (60/49 - 15/14)/√2 = 0.108231 (population would be 0.076531)
    gt = _cell(table, pair=VICUNA, method="gammatune", source="measured")
    assert gt["mean"] == pytest.approx(1.147959, abs=1e-6)
    assert gt["std"] == pytest.approx(0.108231, abs=1e-6)
    # AR: 40/3 = 13.333 tok/s over 23.333 = 4/7; one value, no std
    ar = _cell(table, pair=VICUNA, method="ar", source="measured")
    assert ar["mean"] == pytest.approx(0.571429, abs=1e-6) and math.isnan(ar["std"])
    # llama: specdecode 40, 50 → B 45; gammatune 50/45, 55.556/45 → mean 1.172840, std 0.087297
    gt_llama = _cell(table, pair=LLAMA, method="gammatune", source="measured")
    assert gt_llama["mean"] == pytest.approx(1.172840, abs=1e-6)
    assert gt_llama["std"] == pytest.approx(0.087297, abs=1e-6)
    # Average = mean of pair means ± sqrt(mean of pair variances): 1.160399 ± sqrt((0.108231² + 0.087297²) / 2)
    avg = _cell(table, pair="average", method="gammatune", source="measured")
    assert avg["mean"] == pytest.approx(1.160399, abs=1e-6) and avg["std"] == pytest.approx(0.098323, abs=1e-6)
    shown = table.display.set_index(["Method", "Source"])
    assert shown.loc[("GammaTune", "measured"), VICUNA] == "1.15 ± 0.11×"
    assert shown.loc[("GammaTune", "measured"), "Average"] == "1.16 ± 0.10×"
    assert shown.loc[("SpecDecode", "measured"), VICUNA] == "1.00 ± 0.20×"
    assert shown.loc[("AR", "measured"), VICUNA] == "0.57×"
    # the paper's own numbers beside them (GammaTune Table 2), labelled
    assert shown.loc[("GammaTune", "paper"), VICUNA] == "1.13 ± 0.03×"
    assert shown.loc[("GammaTune", "paper"), "Average"] == "1.15 ± 0.05×"
    assert shown.loc[("GammaTune+", "paper"), LLAMA] == "1.18 ± 0.05×"
    assert "sample std (ddof=1)" in table.caption and "total new tokens / total wall time" in table.caption


def test_speedup_table_mean_pooling_by_hand(complete):
    table = speedup_table(complete, "mean")
    # vicuna, mean of per-prompt tok/s: specdecode γ2 (20+30)/2 = 25, γ4 (10+30)/2 = 20 → B = 22.5
    sd = _cell(table, pair=VICUNA, method="specdecode", source="measured")
    assert sd["std"] == pytest.approx(0.157135, abs=1e-6)  # (25-20)/22.5/√2
    # gammatune γ2 (25+25)/2 = 25 → 1.111111; γ4 (20+33.333)/2 = 26.667 → 1.185185
    gt = _cell(table, pair=VICUNA, method="gammatune", source="measured")
    assert gt["mean"] == pytest.approx(1.148148, abs=1e-6) and gt["std"] == pytest.approx(0.052378, abs=1e-6)
    assert "mean of per-prompt tokens/s" in table.caption
    assert set(table.data["source"]) == {"measured"}  # no paper given


def test_incomplete_jobs_only_when_asked(records, complete):
    assert "hf_heuristic" not in set(speedup_table(complete).data["method"])
    everything = speedup_table(records).data
    hf = everything[(everything["method"] == "hf_heuristic") & (everything["pair"] == VICUNA)].iloc[0]
    assert hf["mean"] == pytest.approx(40 / (70 / 3))  # 10 tokens / 0.25 s = 40 tok/s over B = 23.333
    assert math.isnan(hf["std"])  # a single initial γ


def test_tables_skip_missing_inputs(complete):
    no_baseline = complete[complete["method"] != "specdecode"]
    assert speedup_table(no_baseline) is None
    assert latency_table(complete[~complete["method"].isin(["ar", "ar_offloaded"])]) is None
    assert hetero_table(complete[~complete["method"].isin(["ar", "ar_offloaded"])]) is None
    assert hfbench_table(complete[~complete["method"].isin(["ar", "ar_offloaded"])]) is None
    assert acceptance_table(complete[complete["method"] == "ar"]) is None
    empty = complete.iloc[0:0]
    assert plot_throughput(empty) is None and plot_sensitivity(empty) is None
    assert category_table(complete[complete["task"] == "scrolls"]) is None  # one category only


def test_latency_table_is_the_tpot_of_ar_by_hand(complete, paper):
    """GammaTune Table 1's ms/token excludes the prefill: the TPOT of autoregressive decoding."""
    table = latency_table(complete, "pooled", paper)
    vicuna = _cell(table, model="vicuna-7b")
    assert vicuna["ms_per_token"] == pytest.approx(2900 / 38)  # Σ(wall − ttft) / Σ(n − 1) = (950 + 1950) / (9 + 29)
    assert vicuna["tokens_per_s"] == pytest.approx(40 / 3)  # prefill included
    assert vicuna["paper_ms_per_token"] == pytest.approx(14.29) and vicuna["paper_model"] == "lmsys/vicuna-7b-v1.5"
    assert _cell(table, model="llama-3.1-8b-instruct")["paper_ms_per_token"] == pytest.approx(16.65)
    phi = table.data[table.data["model"] == "phi-4"]
    assert sorted(phi["cache"]) == ["dynamic", "offloaded"] and phi["paper_ms_per_token"].isna().all()
    assert _cell(table, model="phi-4", cache="offloaded")["ms_per_token"] == pytest.approx(26000 / 500)  # 8000+16000+2000
    assert _cell(latency_table(complete, "mean"), model="vicuna-7b")["ms_per_token"] == pytest.approx(86.398, abs=1e-3)
    assert "excluding the prefill" in table.caption
    assert model_key("llama-3.1-70b-instruct-int4") == model_key("meta-llama/Llama-3.1-70B*") == "llama-3.1-70b"


def test_acceptance_table_by_hand():
    df = rows_to_frame([
        record_row(prompt_id="a", gamma_trace=[2, 2], drafted_trace=[2, 2], accepted_trace=[2, 0], rounds=2,
                drafted=4, accepted=2),
        record_row(prompt_id="b", gamma_init=3, gamma_trace=[3, 4, 1], drafted_trace=[3, 4, 1],
                accepted_trace=[3, 1, 1], rounds=3, drafted=8, accepted=5),
    ])
    row = acceptance_table(df).data.iloc[0]
    assert row["acceptance_rate"] == pytest.approx(7 / 12)  # (2 + 5) / (4 + 8)
    assert row["mean_gamma"] == pytest.approx(2.4)  # (2+2+3+4+1) / 5 rounds
    assert row["mean_accepted_per_round"] == pytest.approx(1.4)  # 7 / 5
    assert row["n_gamma_init"] == 2


def test_trace_frame_picks_the_prompt_and_gamma(complete):
    trace, meta = trace_frame(complete, pair=VICUNA)
    # γ 2 and 4 tie (4 records each): the smaller wins; first prompt is p1
    assert meta == {"pair": VICUNA, "gamma_init": 2.0, "prompt_id": "p1", "turn": 1}
    gt = trace[trace["method"] == "gammatune"]
    assert gt["gamma"].tolist() == [2, 3, 3, 1] and gt["accepted"].tolist() == [2, 3, 0, 1]
    assert trace[trace["method"] == "specdecode"]["accepted"].tolist() == [2, 1, 0, 2, 0]
    table = trace_table(trace, meta)
    assert table.display.columns.tolist() == ["Round", "SpecDecode γ", "SpecDecode accepted", "GammaTune γ",
                                              "GammaTune accepted"]
    assert table.display["GammaTune γ"].tolist() == ["2", "3", "3", "1", ""]
    other, _ = trace_frame(complete, pair=VICUNA, gamma_init=4, prompt_id="p2")
    assert set(other["gamma_init"]) == {4.0} and set(other["prompt_id"]) == {"p2"}
