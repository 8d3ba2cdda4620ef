"""Analysis: records → tables and figures, checked against numbers worked out by hand.

The fixture (tests/helpers/analysis_fixture.py) is small enough to do every
expected value on paper; the arithmetic is written next to each literal.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.categories import category_table
from analysis.cli import main
from analysis.frame import complete_only, job_rows, load_records, rows_to_frame
from analysis.gammatune.latency import latency_table
from analysis.gammatune.rounds import acceptance_table, plot_trace, trace_frame, trace_table
from analysis.gammatune.table2 import speedup_table
from analysis.gammatune.throughput import plot_sensitivity, plot_throughput
from analysis.hetero import (
    hetero_table,
    hfbench_label,
    hfbench_runtime_rule,
    hfbench_table,
    min_tokens_filter,
)
from analysis.metrics import hmean, mean_std, method_key, method_label, throughput
from analysis.paper import dataset_key, load_paper_numbers, model_key
from analysis.render import save_figure, to_latex, to_markdown, write_table
from analysis.wandb_source import fetch_frame, frame_from_runs, rows_from_run
from specbench.loggers import records_table

from helpers.analysis_fixture import COMMITTED, build

VICUNA = "vicuna-7b_vicuna-68m"
LLAMA = "llama-3.1-8b-instruct_llama-3.2-1b-instruct"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def records(results) -> pd.DataFrame:
    return load_records(results)


@pytest.fixture(scope="module")
def complete(records) -> pd.DataFrame:
    return complete_only(records)


@pytest.fixture(scope="module")
def paper() -> pd.DataFrame:
    return load_paper_numbers()


def _cell(table, **where):
    rows = table.data
    for key, value in where.items():
        rows = rows[rows[key] == value]
    assert len(rows) == 1, where
    return rows.iloc[0]


# ---------------------------------------------------------------- loading


def test_committed_fixture_matches_builder(results):
    committed = COMMITTED
    built = sorted(p.relative_to(results) for p in results.rglob("*") if p.is_file())
    assert built == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
    for rel in built:
        assert (results / rel).read_text() == (committed / rel).read_text(), rel


def test_load_records_finds_nested_jobs_and_keeps_failed_ones(records):
    assert len(records) == 34  # vicuna 5 jobs x 2 + failed 1 + running 1; llama 5 x 2; phi 4 x 3
    assert (records["pair"] == LLAMA).sum() == 10  # sweep2/nested/deeper: any depth
    status = records.groupby("method")["job_status"].agg(set).to_dict()
    assert status["hf_heuristic"] == {"failed"}
    assert status["gammatune_plus"] == {"incomplete"}  # no summary.json yet
    assert len(complete_only(records)) == 32
    ar = records[records["method"].isin(["ar", "ar_offloaded"])]
    assert ar["gamma_init"].isna().all() and ar["draft"].isna().all()  # config's gamma never fills AR
    assert set(ar["ar_cache"]) == {"dynamic", "offloaded"}
    assert set(records.loc[records["pair"] == VICUNA, "target_path"].dropna()) == {"lmsys/vicuna-7b-v1.5"}
    assert set(records["device"].dropna()) == {"cpu"}
    assert isinstance(records["accepted_trace"].iloc[0], list)


def test_summary_config_fills_only_missing_fields():
    config = {"pair": {"name": "p", "target": {"name": "t"}, "draft": {"name": "d"}}, "method": {"name": "m"},
              "task": {"name": "k"}, "gamma": 3, "temperature": 0.5, "max_new_tokens": 9}
    rows = job_rows([{"method": None, "gamma_init": None, "new_tokens": 1}, {"pair": "mine"}],
                    {"config": config, "status": "complete"})
    assert rows[0]["method"] == "m" and rows[0]["gamma_init"] is None and rows[0]["pair"] == "p"
    assert rows[1]["pair"] == "mine" and rows[1]["gamma_init"] == 3 and rows[1]["max_new_tokens"] == 9
    assert rows[0]["job_status"] == "complete"
    assert job_rows([{}], None)[0]["job_status"] == "incomplete"


def test_unreadable_summary_and_torn_line(tmp_path):
    job = tmp_path / "a" / "b"
    job.mkdir(parents=True)
    (job / "records.jsonl").write_text('{"pair": "x", "method": "ar", "new_tokens": 2, "wall_ms": 100}\n{"torn')
    (job / "summary.json").write_text("{not json")
    df = load_records(tmp_path)
    assert len(df) == 1 and df["job_status"].iloc[0] == "unreadable" and df["job_dir"].iloc[0] == "a/b"


# ---------------------------------------------------------------- GammaTune Table 2


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


# ---------------------------------------------------------------- other tables


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


def _record(**kw):
    base = {"pair": "p", "target": "t", "draft": "d", "method": "gammatune", "task": "k", "category": "c",
            "prompt_id": "x", "turn": 0, "gamma_init": 2, "temperature": 0.0, "new_tokens": 10, "wall_ms": 100.0,
            "tokens_per_s": 100.0, "ttft_ms": 10.0}
    return {**base, **kw}


def test_acceptance_table_by_hand():
    df = rows_to_frame([
        _record(prompt_id="a", gamma_trace=[2, 2], drafted_trace=[2, 2], accepted_trace=[2, 0], rounds=2,
                drafted=4, accepted=2),
        _record(prompt_id="b", gamma_init=3, gamma_trace=[3, 4, 1], drafted_trace=[3, 4, 1],
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


def test_hfbench_table_by_hand(complete, paper):
    """hf-bench's definitions on phi-4/scrolls (fixture docstring): s3 made < 128 tokens under AR at T = 0,
    so it is dropped from every row, T = 1 included. Per example, hf-bench TPOT = (wall − first round) / (n − 1)."""
    table = hfbench_table(complete, paper)
    data = table.data[(table.data["target"] == "phi-4") & (table.data["source"] == "measured")]
    pick = lambda m, t=0.0: data[(data["method"] == m) & (data["temperature"] == t)].iloc[0]  # noqa: E731
    ar, off, slem, tli = pick("ar"), pick("ar_offloaded"), pick("slem"), pick("tli", 1.0)
    assert ar["tokens_per_s"] == pytest.approx(100 / 3)  # hmean(1000/20, 1000/40) = hmean(50, 25)
    assert ar["tpot_ms"] == pytest.approx(80 / 3)  # hmean(20, 40)
    assert off["tokens_per_s"] == pytest.approx(50 / 3)  # hmean(25, 12.5)
    assert slem["tokens_per_s"] == pytest.approx(200 / 3) and slem["ttft_ms"] == pytest.approx(300.0)  # hmean(100, 50)
    assert slem["speedup"] == pytest.approx(4.0)  # over offloaded AR, as hf-bench's baseline ran
    assert slem["speedup_same_cache"] == pytest.approx(2.0)  # over AR with the same dynamic cache
    assert (slem["n_kept"], slem["n_examples"]) == (2, 3) and (tli["n_kept"], tli["n_examples"]) == (2, 3)
    assert math.isnan(tli["speedup"]) and math.isnan(tli["speedup_same_cache"])  # no AR at T = 1: empty, noted
    shown = table.display[(table.display["Target"] == "phi-4") & (table.display["Source"] == "measured")]
    tli_row = shown[shown["T"] == "1.0"].iloc[0]
    assert tli_row["Speedup vs offloaded AR (as hf-bench)"].startswith(" [") and "never taken from another" in table.caption
    assert tli_row["Method"].startswith("TLI [")  # equal vocab sizes, different tokenizers: hf-bench would run SD
    assert "would have run SD (vocab_size 100352 and 100352, although the tokenizers differ)" in table.caption
    assert shown[shown["T"] == "0.0"]["n kept"].tolist() == ["2/3", "2/3", "2/3"]
    published = table.data[(table.data["target"] == "phi-4") & (table.data["source"] == "paper")]
    qwen = published[(published["draft"] == "Qwen2.5-0.5B-Instruct") & (published["temperature"] == 0)].iloc[0]
    assert (qwen["tokens_per_s"], qwen["speedup"], qwen["hardware"]) == (33.9, 1.59, "1 * H100 NVL")
    for column in ("TTFT (ms, hf-bench)", "TPOT (ms, hf-bench)", "Tok/s (hf-bench)", "Speedup vs same-cache AR"):
        assert column in table.display.columns  # hf-bench's definitions under their own names
    assert "TTFT (ms)" not in table.display.columns and "harmonic mean" in table.caption
    # vicuna-68m drafting for vicuna-7b ran SD; hf-bench's name rule would have called it SLEM
    assert "vicuna-7b with vicuna-68m, T = 0.0: SD ran here; hf-bench's tables would have labelled it SLEM" \
        in hfbench_table(complete, None, 0).caption


def test_hfbench_speedup_divides_by_transformers_offloaded_ar_when_it_ran(complete):
    """hf-bench timed transformers' generate() with the offloaded cache (method=hf_native_ar_offloaded): when it
    ran beside our loop's offloaded AR, hf-bench's speedup divides by it, and a footnote names the baseline."""
    phi = complete[(complete["target"] == "phi-4") & (complete["method"] == "ar_offloaded")]
    native = phi.assign(method="hf_native_ar_offloaded", hfbench_tokens_per_s=phi["hfbench_tokens_per_s"] * 2,
                        hfbench_tpot_ms=phi["hfbench_tpot_ms"] / 2)  # twice as fast as our loop's
    both = pd.concat([complete, native], ignore_index=True)
    table = hfbench_table(both, None)
    data = table.data[(table.data["target"] == "phi-4") & (table.data["temperature"] == 0.0)]
    pick = lambda m: data[data["method"] == m].iloc[0]  # noqa: E731
    slem, ours, theirs = pick("slem"), pick("ar_offloaded"), pick("hf_native_ar_offloaded")
    assert theirs["tokens_per_s"] > ours["tokens_per_s"]
    assert slem["speedup"] == pytest.approx(slem["tokens_per_s"] / theirs["tokens_per_s"])
    assert slem["speedup"] < hfbench_table(complete, None).data.query("target == 'phi-4' and method == 'slem' and "
                                                                      "temperature == 0.0").iloc[0]["speedup"]
    assert "(method=hf_native_ar_offloaded): the baseline hf-bench timed" in table.caption


def test_hfbench_table_unfiltered_keeps_every_example(complete):
    data = hfbench_table(complete, None, 0, name="x").data
    slem = data[(data["target"] == "phi-4") & (data["method"] == "slem")].iloc[0]
    assert slem["tokens_per_s"] == pytest.approx(75.0)  # hmean(100, 50, 100)
    assert slem["speedup_same_cache"] == pytest.approx(1.75)  # over hmean(50, 25, 100) = 300/7
    assert slem["n_kept"] == 3 and set(data["source"]) == {"measured"}


def test_our_hetero_table_by_hand(complete):
    table = hetero_table(complete, "pooled")
    data = table.data
    slem = data[(data["target"] == "phi-4") & (data["method"] == "slem")].iloc[0]
    assert slem["tokens_per_s"] == pytest.approx(503000 / 7900)  # pooled: 503 tokens / 7.9 s
    assert slem["speedup"] == pytest.approx(13300 / 7900)  # over AR's 503 / 13.3 s, dynamic cache
    assert slem["ttft_ms"] == pytest.approx(120.0)  # the target's prefill, not the first round
    assert slem["tpot_ms"] == pytest.approx((2180 / 200 + 4180 / 200 + 1180 / 100) / 3)
    assert set(data["source"]) == {"measured"}  # no paper numbers beside our definitions
    assert math.isnan(data[(data["method"] == "tli")]["speedup"].iloc[0])
    assert "specbench's own definitions" in table.caption
    # speedups of the GammaTune pairs are over AR of the same target and task
    sd = data[(data["target"] == "vicuna-7b") & (data["method"] == "sd") & (data["gamma_init"] == 2)]
    assert sd["speedup"].iloc[0] == pytest.approx(2.0)  # 26.667 / 13.333


def test_hfbench_labels_and_filter():
    # speedups.ipynb cell 13 on full Hub ids
    assert hfbench_label("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.2-1B", 0) == "SD"
    assert hfbench_label("meta-llama/Llama-3.1-70B", "double7/vicuna-68m", 1) == "TLI"
    assert hfbench_label("microsoft/phi-4", "microsoft/Phi-3.5-mini-instruct", 0) == "SLEM"  # phi: never SD
    assert hfbench_label("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 0) == "SD"
    assert hfbench_label("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 0) == "SLEM"
    assert hfbench_label(None, "x", 0) is None
    assert hfbench_runtime_rule(32000, 32000, 1.0) == "SD" and hfbench_runtime_rule(32000, 32001, 1.0) == "TLI"
    assert hfbench_runtime_rule(None, 5, 0.0) is None
    df = pd.DataFrame({"target": ["t"] * 4, "task": ["k"] * 4, "prompt_id": ["a", "a", "b", "b"], "turn": [1] * 4,
                       "new_tokens": [200, 127, 300, 128]})
    assert min_tokens_filter(df, 128)["prompt_id"].tolist() == ["b", "b"]  # a: one method fell short
    assert len(min_tokens_filter(df, 0)) == 4
    assert hmean([50, 25]) == pytest.approx(100 / 3) and math.isnan(hmean([]))


def test_method_variants_are_never_pooled_under_one_name():
    assert method_key("gammatune", {"transient": False}) == "gammatune[carryover]"
    assert method_key("gammatune", {"transient": True, "expand_on": "gamma"}) == "gammatune"
    assert method_key("gammatune_plus", {"transient": False, "expand_on": "drafted"}) == \
        "gammatune_plus[carryover,expand=drafted]"
    assert method_key("hf_heuristic_carryover", {"transient": False}) == "hf_heuristic_carryover"
    assert method_label("gammatune[carryover]") == "GammaTune (carry-over)"
    rows = rows_to_frame([_record(method="gammatune", method_params={"transient": False}),
                          _record(method="gammatune", method_params={"transient": True})])
    assert sorted(rows["method"]) == ["gammatune", "gammatune[carryover]"]
    old = job_rows([{"method": "gammatune", "schema_version": 1}],
                   {"config": {"method": {"name": "gammatune", "eta": 0.25, "transient": False}}})
    assert rows_to_frame(old)["method"].iloc[0] == "gammatune[carryover,expand=drafted]"  # as schema 1 ran


def test_question_pooling_is_spec_bench_speed_py():
    """Per question, all its turns' tokens over all their time; then the mean over questions."""
    df = rows_to_frame([_record(prompt_id="q1", turn=1, new_tokens=10, wall_ms=1000, tokens_per_s=10.0),
                        _record(prompt_id="q1", turn=2, new_tokens=30, wall_ms=1000, tokens_per_s=30.0),
                        _record(prompt_id="q2", turn=1, new_tokens=10, wall_ms=500, tokens_per_s=20.0)])
    assert throughput(df, "question") == pytest.approx((20 + 20) / 2)  # q1: 40 / 2 s; q2: 10 / 0.5 s
    assert throughput(df, "pooled") == pytest.approx(50 / 2.5)
    assert throughput(df, "mean") == pytest.approx((10 + 30 + 20) / 3)


def test_category_table_by_hand(complete):
    table = category_table(complete)
    data = table.data
    pick = lambda m, c: data[(data["pair"] == VICUNA) & (data["method"] == m) & (data["category"] == c)].iloc[0]  # noqa: E731
    # baseline AR: writing (p1) 10 tok/s, coding (p2) 15 tok/s, all 13.333
    assert pick("gammatune", "writing")["speedup"] == pytest.approx(2.25)  # (25/10 + 20/10) / 2
    assert pick("gammatune", "coding")["speedup"] == pytest.approx(1.944444, abs=1e-6)  # (25/15 + 33.333/15) / 2
    assert pick("gammatune", "All")["speedup"] == pytest.approx(2.008929, abs=1e-6)  # (25 + 28.571) / 2 / 13.333
    assert pick("specdecode", "writing")["speedup"] == pytest.approx(1.5)  # (20/10 + 10/10) / 2
    assert set(data["baseline"]) == {"ar"}
    # without AR runs the baseline is SpecDecode averaged over γ: writing B = (20 + 10) / 2 = 15
    no_ar = category_table(complete[complete["method"] != "ar"]).data
    row = no_ar[(no_ar["pair"] == VICUNA) & (no_ar["method"] == "gammatune") & (no_ar["category"] == "writing")]
    assert row["speedup"].iloc[0] == pytest.approx(1.5) and set(no_ar["baseline"]) == {"specdecode"}


# ---------------------------------------------------------------- rendering


def test_markdown_latex_csv_from_the_same_frame(complete, paper, tmp_path):
    table = speedup_table(complete, paper=paper)
    paths = write_table(table, tmp_path)
    assert [p.name for p in paths] == [f"{table.name}.md", f"{table.name}.tex", f"{table.name}.csv",
                                       f"{table.name}.data.csv"]
    assert all(p.stat().st_size > 0 for p in paths)
    md = paths[0].read_text()
    assert md.startswith("| Method | Source |") and "| GammaTune | measured |" in md and table.caption in md
    tex = paths[1].read_text()
    assert r"\begin{tabular}" in tex and r"vicuna-7b\_vicuna-68m" in tex and r"1.15 $\pm$ 0.11$\times$" in tex
    back = pd.read_csv(paths[2], keep_default_na=False)
    assert back.columns.tolist() == table.display.columns.tolist()
    assert back.astype(str).values.tolist() == table.display.astype(str).values.tolist()
    assert to_markdown(pd.DataFrame({"a": ["x|y"]})).splitlines()[2] == "| x\\|y |"
    assert "50\\%" in to_latex(pd.DataFrame({"a": ["50%"]}))


def test_figures_written_png_and_pdf(complete, tmp_path):
    trace, meta = trace_frame(complete, pair=VICUNA)
    for name, fig in (("throughput", plot_throughput(complete)), ("sensitivity", plot_sensitivity(complete, "mean")),
                      ("trace", plot_trace(trace, meta))):
        png, pdf = save_figure(fig, tmp_path, name)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000


# ---------------------------------------------------------------- command line


@pytest.mark.slow
def test_cli_writes_every_artefact(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(results), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "| GammaTune | measured |" in printed.out and "1.15 ± 0.11×" in printed.out
    assert "not complete" in printed.err and "skipped" in printed.err  # scrolls has no SpecDecode
    tables = {p.name for p in (out / "tables").iterdir()}
    figures = {p.name for p in (out / "figures").iterdir()}
    sb = "-specbench-t0"
    for name in (f"gammatune_table2_speedup{sb}", "gammatune_table1_latency", "hetero_speedup", "category_speedup",
                 "hetero_speedup_unfiltered", "hetero_speedup_ours", f"acceptance{sb}", f"gammatune_fig2a_trace{sb}"):
        assert {f"{name}.md", f"{name}.tex", f"{name}.csv", f"{name}.data.csv"} <= tables, name
    for name in (f"gammatune_fig1_throughput{sb}", f"gammatune_sensitivity{sb}", f"gammatune_fig2a_trace{sb}"):
        assert {f"{name}.png", f"{name}.pdf"} <= figures, name
    assert "gammatune_sensitivity-scrolls-t0.png" not in figures  # no initial γ there


def test_cli_default_out_print_only_and_missing_data(results, tmp_path, capsys):
    assert main([str(results), "--print-only", "--pooling", "mean"]) == 0
    assert "mean of per-prompt tokens/s" in capsys.readouterr().out
    assert not (results / "analysis").exists()
    only_ar = tmp_path / "only_ar"
    (only_ar / "job").mkdir(parents=True)
    src = next(results.glob("sweep3/*method=ar"))
    for name in ("records.jsonl", "summary.json"):
        (only_ar / "job" / name).write_text((src / name).read_text())
    assert main([str(only_ar)]) == 0  # default out: RESULTS_DIR/analysis
    assert (only_ar / "analysis" / "tables" / "gammatune_table1_latency.md").exists()
    assert "no speedup table" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 0
    assert "no records" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope")])


# ---------------------------------------------------------------- the artefact registry


def test_list_names_every_artefact_without_a_results_folder(capsys):
    from analysis.registry import SCOPES, load

    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    known = load()
    assert len(known) >= 25
    for key, artefact in known.items():
        assert f"  {key} " in listed and artefact.about in listed, key
        assert artefact.about and "\n" not in artefact.about and artefact.needs, key
    assert all(f"{scope}:" in listed for scope in SCOPES)


@pytest.mark.slow
def test_every_file_the_cli_writes_is_a_registered_artefact(results, tmp_path):
    """The registry key is where an artefact is written: ``tables/<name>`` and ``figures/<name>``
    (a scenario's suffix ``-<task>-t<T>`` appended): nothing is written that ``--list`` does not name."""
    from analysis.registry import load

    out = tmp_path / "out"
    assert main([str(results), "--out", str(out)]) == 0
    keys = set(load())
    for path in [*(out / "tables").iterdir(), *(out / "figures").iterdir()]:
        stem = path.name.split(".", 1)[0]
        assert f"{path.parent.name}/{stem.split('-', 1)[0]}" in keys, path.name


def test_a_table_under_another_name_than_its_key_is_refused(complete, tmp_path, capsys):
    from analysis.cli import Report
    from analysis.gammatune.rounds import acceptance_table
    from analysis.registry import SCENARIO, Artefact, Inputs

    wrong = Artefact("tables/acceptance_rates", "acceptance table", "one line", SCENARIO, ("records",), acceptance_table)
    report = Report(tmp_path)
    assert report.make(wrong, Inputs(records=complete)) is None
    assert report.failed == ["acceptance table"] and not report.written
    assert "returned a table named 'acceptance'" in capsys.readouterr().err


def test_registry_refuses_what_it_cannot_run():
    from analysis.registry import SCENARIO, artefact, get

    with pytest.raises(ValueError, match="unknown needs"):
        artefact("tables/x", "x", about="x", scope=SCENARIO, needs=("record",))
    with pytest.raises(ValueError, match="tables/<name> or figures/<name>"):
        artefact("plots/x", "x", about="x", scope=SCENARIO, needs=("records",))
    with pytest.raises(ValueError, match="unknown scope"):
        artefact("tables/x", "x", about="x", scope="everything", needs=("records",))
    with pytest.raises(ValueError, match="registered twice"):
        artefact("tables/acceptance", "x", about="x", scope=SCENARIO, needs=("records",))(lambda records: None)
    with pytest.raises(ValueError, match="Did you mean 'tables/gammatune_table2_speedup'"):
        get("tables/gammatune_table2_sepedup")


# ---------------------------------------------------------------- the papers' numbers


def test_paper_numbers_spot_checks(paper):
    def value(**where):
        rows = paper
        for key, v in where.items():
            rows = rows[rows[key] == v]
        assert len(rows) == 1, where
        return rows.iloc[0]

    assert value(table="table1", target="lmsys/vicuna-13b-v1.5")["value"] == 20.15
    assert value(table="table1", target="meta-llama/Llama-3.1-70B*")["value"] == 925.05
    row = value(table="table2", pair="vicuna-13b_vicuna-160m", method="gammatune_plus")
    assert (row["value"], row["std"]) == (1.28, 0.02)
    assert value(table="table2", pair="average", method="specdecode")["std"] == 0.23
    mix = value(table="appendix_d_temp_0", target="Mixtral-8x22B-Instruct-v0.1", dataset="cnn_dailymail",
                drafter="vicuna-68m", metric="speedup")
    assert mix["value"] == 2.1 and mix["method"] == "slem"
    assert value(table="appendix_d_temp_1", target="CodeLlama-13b-Instruct-hf", drafter="tiny_starcoder_py",
                 metric="tokens_per_s")["value"] == 38.5
    assert model_key("lmsys/vicuna-13b-v1.5") == model_key("vicuna-13b") == "vicuna-13b"
    assert model_key("Mixtral-8x22B-Instruct-v0.1") == "mixtral-8x22b"
    assert dataset_key("openai_humaneval") == dataset_key("humaneval")


def test_paper_average_std_is_the_root_mean_square_of_the_pair_stds(paper):
    """GammaTune Table 2's Average column from its pair columns: mean of the means, and the square root of
    the mean of the variances, both equal to the published value at two decimals, for all five methods.
    The mean of the stds does not reproduce it (HFHeuristic: 0.11 against the paper's 0.12)."""
    t2 = paper[paper["table"] == "table2"]
    for method, rows in t2.groupby("method"):
        pairs, avg = rows[rows["pair"] != "average"], rows[rows["pair"] == "average"].iloc[0]
        assert len(pairs) == 4
        assert abs(pairs["value"].mean() - avg["value"]) <= 0.0051, method  # 1.125 printed as 1.13
        assert f"{math.sqrt((pairs['std'] ** 2).mean()):.2f}" == f"{avg['std']:.2f}", method
    hf = t2[(t2["method"] == "hf_heuristic") & (t2["pair"] != "average")]
    assert f"{hf['std'].mean():.2f}" == "0.11"
    # and the table builder uses it: the paper's pair rows through _average give the paper's Average
    from analysis.gammatune.table2 import _average

    for method, rows in t2[t2["pair"] != "average"].groupby("method"):
        _, std = _average(rows.rename(columns={"value": "mean"}))
        avg = t2[(t2["method"] == method) & (t2["pair"] == "average")].iloc[0]
        assert f"{std:.2f}" == f"{avg['std']:.2f}", method


def _parse_paper_tables(text: str) -> list[list[tuple]]:
    """The heterogeneous-vocabularies paper's benchmark tables (rows carry target/dataset/… down)."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("TTFT (ms) | TPOT"):
            current = []
            tables.append(current)
            continue
        if current is None or line.startswith(("---", "Target | Dataset")):
            continue
        if "|" not in line or line.startswith(("Appendix", "Target Model")):
            current = None
            continue
        cells = [c.strip() for c in line.split("|") if c.strip()]
        current.append(tuple(cells))
    return tables


def test_paper_numbers_match_the_paper_text(paper, shared_dir):
    source = shared_dir / "papers" / "heterogeneous-vocabularies.md"
    if not source.exists():
        pytest.skip("paper text not available")
    tables = _parse_paper_tables(source.read_text(encoding="utf-8"))
    assert len(tables) == 4  # Sec. 5 temp 0/1, Appendix D temp 0/1
    for name, rows in (("appendix_d_temp_0", tables[2]), ("appendix_d_temp_1", tables[3])):
        ours: dict[tuple, dict[str, float]] = {}
        for r in paper[paper["table"] == name].fillna({"drafter": ""}).to_dict("records"):
            key = (r["target"], r["dataset"], r["hardware"], r["method_label"], r["drafter"])
            ours.setdefault(key, {})[r["metric"]] = r["value"]
        assert len(ours) == len(rows)
        carried = [None] * 5
        for cells in rows:
            keys = list(cells[:-4])
            carried = carried[: 5 - len(keys)] + keys
            target, dataset, hardware, method, drafter = carried
            got = ours[(target, dataset, hardware, method, "" if method == "AR" else drafter)]
            expected = [float(v) for v in cells[-4:]]
            assert [got["ttft_ms"], got["tpot_ms"], got["tokens_per_s"], got["speedup"]] == expected, cells
    # the Sec. 5 tables are subsets of Appendix D's
    full = {c[-4:] for c in tables[2] + tables[3]}
    assert all(c[-4:] in full for c in tables[0] + tables[1])
    assert re.search(r"\bSD\b", " ".join(paper["method_label"].dropna()))


# ---------------------------------------------------------------- W&B runs → the same frame


class FakeFile:
    def __init__(self, payload: dict) -> None:
        self.payload = payload

    def download(self, root: str = ".", replace: bool = False):
        target = Path(root) / "media" / "table" / "records.table.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.payload))
        return open(target)


class FakeRun:
    def __init__(self, run_id, config, records, state="finished", status="complete", via_artifact=False):
        columns, data = records_table(records)
        self.id, self.state, self.path = run_id, state, ["me", "specbench", run_id]
        self.config = {k: {"value": v, "desc": None} for k, v in config.items()}  # old API wrapping
        self._payload = {"columns": columns, "data": data}
        self._via_artifact = via_artifact
        self.summary = {"status": status}
        if not via_artifact:
            self.summary["records"] = {"_type": "table-file", "path": "media/table/records.table.json"}

    def file(self, path):
        assert path == "media/table/records.table.json"
        return FakeFile(self._payload)

    def logged_artifacts(self):
        payload = self._payload

        class Artifact:
            type, name = "run_table", f"run-{self.id}-records:v0"

            def get(self, key):
                return type("Table", (), {"columns": payload["columns"], "data": payload["data"]})()

        return [Artifact()] if self._via_artifact else []


class FakeApi:
    def __init__(self, runs):
        self._runs = runs

    def runs(self, path, filters=None):
        assert path == "me/specbench"
        return list(self._runs)


def _fake_runs(results: Path) -> list[FakeRun]:
    runs = []
    for i, path in enumerate(sorted(results.rglob("records.jsonl"))):
        summary_path = path.parent / "summary.json"
        if not summary_path.exists():
            continue
        summary = json.loads(summary_path.read_text())
        records = [json.loads(line) for line in path.read_text().splitlines()]
        state = "failed" if summary["status"] == "failed" else "finished"
        runs.append(FakeRun(f"r{i}", summary["config"], records, state=state, status=None, via_artifact=i % 2 == 1))
    return runs


def test_rows_from_run_is_pure_and_decodes_cells():
    columns, data = records_table([_record(gamma_trace=[2, 3], accepted_trace=[1, 0], extra={"k": 1})])
    table = {"columns": columns, "data": data}
    assert isinstance(data[0][columns.index("gamma_trace")], str)  # JSON-encoded in W&B
    rows = rows_from_run({"pair": {"value": {"name": "p"}}, "method": "gammatune", "max_new_tokens": 64}, table,
                         run_path="me/specbench/abc", state="crashed")
    assert rows[0]["gamma_trace"] == [2, 3] and rows[0]["extra"] == {"k": 1}
    assert rows[0]["job_status"] == "failed" and rows[0]["source"] == "wandb" and rows[0]["max_new_tokens"] == 64
    assert rows_from_run({}, None) == []
    assert rows_from_run({}, table, summary_status="complete")[0]["job_status"] == "complete"


def test_wandb_runs_give_the_same_tables(results, complete, paper):
    runs = _fake_runs(results)
    frame = fetch_frame("me/specbench", api=FakeApi(runs))
    assert set(frame["source"]) == {"wandb"} and len(frame) == 33  # every job with a summary
    assert set(frame.loc[frame["method"] == "hf_heuristic", "job_status"]) == {"failed"}
    remote = speedup_table(complete_only(frame), paper=paper)
    local = speedup_table(complete, paper=paper)
    pd.testing.assert_frame_equal(remote.display, local.display)
    assert frame_from_runs([]).empty


def test_analysis_imports_only_specbench(root):
    """analysis → specbench only: no runners, methods (or torch through them)."""
    import subprocess
    import sys

    code = ("import sys, analysis.cli, analysis.wandb_source; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('runners', 'methods', 'wandb')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_batched_jobs_engine_tag_is_the_kernels_it_ran():
    """At B > 1 ``engine.fast_linear=auto`` ran the plain kernels before the batched engine took the option and
    the transposed ones after: the tag comes from ``summary.json: engine`` (what ran), for ``ar`` jobs too."""
    config = {"method": {"name": "specdecode", "runner": "speculative"}, "batch_size": 4,
              "engine": {"fast_linear": "auto", "verify_buckets": "auto", "fused_prefill": False}}
    fast = job_rows([{"prompt_id": "a"}], {"config": config, "status": "complete",
                                           "engine": {"fast_linear": "all", "buckets": {}, "fused_prefill": False}})
    plain = job_rows([{"prompt_id": "a"}], {"config": config, "status": "complete",
                                            "engine": {"fast_linear": False, "buckets": {}, "fused_prefill": False}})
    ar = job_rows([{"prompt_id": "a"}], {"config": {**config, "method": {"name": "ar", "runner": "ar"}},
                                         "engine": {"fast_linear": "all", "buckets": {}, "fused_prefill": False}})
    one = job_rows([{"prompt_id": "a"}], {"config": {**config, "batch_size": 1}, "status": "complete"})
    assert fast[0]["engine"] == "fast_linear=all" and ar[0]["engine"] == "fast_linear=all"
    assert plain[0].get("engine") == "plain"  # our loop with every option off: a tag of its own (issue 40)
    assert one[0]["engine"] == "fast_linear=auto,verify_buckets=auto"  # batch 1: the config, as before


def _engine_rows(method: str, engine: dict | None, gamma: int = 2) -> list[dict]:
    config = {"pair": "p", "method": {"name": method, "runner": "speculative"}, "gamma": gamma, "batch_size": 1,
              **({"engine": engine} if engine is not None else {})}
    return job_rows([{"prompt_id": "a", "turn": 1, "new_tokens": 4, "wall_ms": 10.0, "ttft_ms": 1.0}],
                    {"config": config, "status": "complete"})


def test_an_engine_every_row_of_a_pair_shares_names_no_variant():
    """Issue 40, item 0: a sweep run on the default engine (``auto``) labelled every row
    ``specdecode[fast_linear=auto,verify_buckets=auto]``, and Table 2 found no ``specdecode`` baseline. One engine
    shared by every row of a pair is dropped from the keys; two engines in one pair keep their tags."""
    auto = {"fast_linear": "auto", "verify_buckets": "auto", "fused_prefill": False}
    plain = {"fast_linear": False, "verify_buckets": False, "fused_prefill": False}
    one_engine = rows_to_frame(_engine_rows("specdecode", auto) + _engine_rows("gammatune", auto))
    assert set(one_engine["method"]) == {"specdecode", "gammatune"}
    two_engines = rows_to_frame(_engine_rows("specdecode", plain) + _engine_rows("gammatune", auto)
                                + _engine_rows("specdecode", auto, 4))
    assert set(two_engines["method"]) == {"specdecode[plain]", "gammatune[fast_linear=auto,verify_buckets=auto]",
                                          "specdecode[fast_linear=auto,verify_buckets=auto]"}
    # jobs before issue 16 (no engine node) ran the plain kernels: the same engine as an explicit plain one
    legacy = rows_to_frame(_engine_rows("specdecode", None) + _engine_rows("gammatune", plain))
    assert set(legacy["method"]) == {"specdecode", "gammatune"}
