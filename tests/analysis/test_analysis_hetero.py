"""The heterogeneous-vocabularies paper's tables (``analysis.hetero``): hf-bench's definitions (harmonic means,
TPOT after the first round, the minimum-length example filter, its name-based labels) and our own, by hand on the
synthetic results folder's phi-4 jobs (``helpers.analysis_fixture``)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.hetero import (
    HFBENCH_DEFINITIONS,
    hetero_table,
    hfbench_label,
    hfbench_runtime_rule,
    hfbench_table,
    min_tokens_filter,
)
from analysis.metrics import hmean


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
    assert "TTFT (ms)" not in table.display.columns and HFBENCH_DEFINITIONS in table.caption  # written once, linked
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
