"""scripts/gpu_paper_costs.py (issue 43) on the CPU with shrunk shapes: what the GPU run does, checked where
it can be — the lab reads its latency files, the static-cache forward it times (and captures on a GPU) computes
what our loop's dynamic-cache forward computes, a draft with a smaller vocabulary takes its loop overheads from
the same target's pair; and scripts/compare_paper_costs.py's reading of SpecDecode-Bench's cost model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_paper_costs as gpc  # noqa: E402

from runners.replay import specdecode_bench as sdb  # noqa: E402
from specbench.latency import LatencyModel  # noqa: E402


def test_a_rewound_static_cache_forward_computes_the_dynamic_cache_forward():
    torch = pytest.importorskip("torch")
    from transformers import StaticCache

    from runners.engine.kv import cache_arg, new_cache, rewind

    for name in ("llama-3.1-8b", "gemma3-270m"):  # full attention; sliding-window layers
        model = gpc.build(name, "float32", "cpu", small=True)
        ids = torch.randint(3, model.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            dynamic = new_cache(model)
            model(input_ids=ids[:, :32], **cache_arg(model, dynamic), use_cache=True)
            ref = model(input_ids=ids[:, 32:36], **cache_arg(model, dynamic), use_cache=True, logits_to_keep=4).logits
            static = StaticCache(config=model.config, max_cache_len=40)
            model(input_ids=ids[:, :32], **cache_arg(model, static), use_cache=True, logits_to_keep=1)
            for _ in range(3):  # the timed forward, repeated: each one rewound to the same 32 tokens
                rewind(static, 32)
                out = model(input_ids=ids[:, 32:36], **cache_arg(model, static), use_cache=True, logits_to_keep=4).logits
                assert torch.equal(out, ref), name
            # without the rewind the cache moves on: the next forward sits at other positions
            out = model(input_ids=ids[:, 32:36], **cache_arg(model, static), use_cache=True, logits_to_keep=4).logits
            assert not torch.equal(out, ref), name


def test_the_tiny_run_writes_latency_files_the_lab_reads(tmp_path, capsys):
    rc = gpc.main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--dtype", "float32", "--repeats", "1",
                   "--generate-repeats", "1", "--new-tokens", "4", "--prompt-len", "8", "--k-max", "3",
                   "--context", "16", "--contexts", "8", "--prefill", "8", "--batch-sizes", "1", "2",
                   "--batch-k-max", "2", "--widths", "1", "2", "--graph-repeats", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    results = json.loads((tmp_path / "paper_costs.json").read_text())
    assert set(results["generate"]) == set(gpc.GENERATE)
    # both regimes per pair; without CUDA the production regime's static cache runs uncaptured, and says so
    assert set(results["calibrate"]) == {f"{t}_{d}{sfx}" for t, d in gpc.PAIRS for sfx in ("", "_static")}
    assert {"gemma3-270m_float32", "llama-3.1-8b_bfloat16"} <= set(results["graphs"])
    eagle = LatencyModel.load(tmp_path / "latency_llama-3.1-8b_eagle-like-8b.json")
    one_b = LatencyModel.load(tmp_path / "latency_llama-3.1-8b_llama-3.2-1b.json")
    assert eagle.batch_sizes == [1, 2] and one_b.batch_sizes == [1]
    assert eagle.meta["random_weights"] and eagle.meta["overheads_from"] == "llama-3.1-8b_llama-3.2-1b"
    assert eagle.round_overhead_ms == one_b.round_overhead_ms > 0
    assert one_b.meta["overheads_from"] == "llama-3.1-8b_llama-3.2-1b"
    assert eagle.verify_ms(2, 16, batch=2) > 0
    static = LatencyModel.load(tmp_path / "latency_llama-3.1-8b_eagle-like-8b_static.json")
    assert (eagle.meta["regime"], static.meta["regime"]) == ("eager", "static") and static.batch_sizes == [1, 2]
    assert static.round_overhead_ms == eagle.round_overhead_ms  # the same loop's overheads, measured once
    assert not any(key.startswith("floor") for key in results["graphs"]["llama-3.1-8b_bfloat16"])  # CUDA only


def test_calibrate_only_the_pairs_asked_for_keeps_the_overheads_they_borrow(tmp_path, capsys):
    rc = gpc.main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--dtype", "float32", "--repeats", "1",
                   "--stages", "calibrate", "--regimes", "eager", "--pairs", "llama-3.1-8b_eagle-like-8b",
                   "--k-max", "2", "--context", "16", "--contexts", "8", "--prefill", "8", "--batch-sizes", "1",
                   "--only", "llama-3.1-8b", "llama-3.2-1b", "eagle-like-8b"])
    assert rc == 0, capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.glob("latency_*.json")) == ["latency_llama-3.1-8b_eagle-like-8b.json"]
    eagle = LatencyModel.load(tmp_path / "latency_llama-3.1-8b_eagle-like-8b.json")
    assert eagle.meta["overheads_from"] == "llama-3.1-8b_llama-3.2-1b" and eagle.round_overhead_ms > 0


def test_specdecode_bench_costs_and_the_comparison_of_the_committed_run(capsys):
    # predictor.py: Llama8BH100 at batch 1, 512 tokens in the cache, 1 token fed: 5.886 + 0.021 + 0.020 ms
    assert sdb.target_forward_ms(512, 1) == pytest.approx(5.9270, abs=1e-4)
    assert sdb.eagle_draft_ms(512, 5) == pytest.approx(2.1407, abs=1e-4)
    assert sdb.ngram_draft_ms(10.0) == pytest.approx(0.05875)
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare_paper_costs

    folder = ROOT / "results" / "committed" / "gpu_paper_costs"
    assert compare_paper_costs.main([str(folder)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == (folder / "compare.log").read_text().strip()  # the committed log is this output


def test_the_h100_lease_folder_prints_its_tables_and_the_floor_against_vllm(capsys):
    """Issue 53's folder (one lease: the graphs inside paper_costs.json, no second run, no generate stage) reads
    as its committed compare.log, whose table 4 puts each width's captured forward and floor over vLLM's fit."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import compare_paper_costs

    folder = ROOT / "results" / "committed" / "gpu_costs_h100"
    assert compare_paper_costs.main([str(folder)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == (folder / "compare.log").read_text().strip()
    assert "1. transformers generate()" not in printed and "one run; IQR" in printed
    row = json.loads((folder / "paper_costs.json").read_text())["graphs"]["llama-3.1-8b_bfloat16"]
    line = next(ln for ln in printed.splitlines() if ln.split()[:1] == ["16"] and "captured" not in ln)
    k, vllm, eager, captured, floor, *ratios = (float(x) for x in line.split())
    assert captured == pytest.approx(row["captured_k16"]["median"], abs=0.005)
    assert ratios[1] == pytest.approx(captured / sdb.target_forward_ms(512, 16), abs=0.006)
