"""What a round costs at a batch size (issue 31, item 2): the batched cost table round-trips through JSON,
interpolates between measured batch sizes and refuses beyond; calibration at batch sizes; the forward timers at
several rows; and ``lab compare`` on the records the batched engine writes."""

from __future__ import annotations

import json
import math
from functools import partial

import pandas as pd
import pytest
import torch

from runners.replay.batched import (
    ar_batches,
    pooled_batches,
    replay_job_batched,
)
from runners.replay.calibration import calibrate
from runners.replay.grid import load_method
from runners.replay.trace import write_traces
from specbench.latency import LatencyModel
from specbench.registry import ConfigError

from helpers.replay_strategies import batched_latency

# ----------------------------------------------------------------------------- the cost table


def test_the_batched_cost_table_round_trips_and_interpolates(tmp_path):
    lat = batched_latency()
    lat.target.step_ms.update({1: 11.5, 2: 12.0})  # a measured table at batch 1, an affine one above
    back = LatencyModel.load(lat.save(tmp_path / "lat.json"))
    assert back == lat and back.batch_sizes == [1, 2, 4]
    assert json.loads((tmp_path / "lat.json").read_text())["latency_version"] == 1
    assert back.verify_ms(2, 40) == lat.target.forward_ms(2, 40) == 12.0 + 0.01 * 40
    for k, ctx in ((1, 30), (3, 200), (7, 0)):
        two, four = back.verify_ms(k, ctx, 2), back.verify_ms(k, ctx, 4)
        assert back.verify_ms(k, ctx, 3) == pytest.approx((two + four) / 2)  # linear in b between measured sizes
        assert back.at_batch(3).verify_ms(k, ctx) == pytest.approx(back.verify_ms(k, ctx, 3))
    assert back.draft_ms(1, 10, 2) == pytest.approx(1.5 * (2.0 + 0.3))
    assert back.round_overhead_at(3) == pytest.approx((0.3 + 0.48) / 2) and back.ar_overhead_at(4) == 0.24
    assert back.at_batch(1) is back
    with pytest.raises(ValueError, match=r"batch 8 .* batch sizes \[1, 2, 4\]: recalibrate with .*--batch-sizes 1 2 4 8$"):
        back.verify_ms(1, 10, 8)
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match="batch size must be an integer >= 1"):
            back.costs_at(bad)
    assert "batch" not in LatencyModel(lat.target, lat.draft).to_json()  # a batch-1 model writes today's file


def test_a_version_1_file_reads_as_batch_one(root):
    path = root / "results" / "committed" / "policy_lab" / "replay" / "latency" / "gemma3-270m_gemma3-270m-int8.json"
    obj = json.loads(path.read_text())
    assert obj["latency_version"] == 1 and "batch" not in obj
    lat = LatencyModel.load(path)
    assert lat.batch_sizes == [1]
    assert lat.verify_ms(4, 128) == obj["target"]["step_ms"]["4"] == lat.verify_ms(4, 128, batch=1)
    with pytest.raises(ValueError) as err:
        lat.verify_ms(4, 128, batch=2)
    message = str(err.value)
    assert "\n" not in message and "no batch tables" in message
    assert "calibrate --pair gemma3-270m_gemma3-270m-int8 --batch-sizes 1 2 4 8" in message


def test_calibration_at_batch_sizes_recovers_the_table_and_keeps_batch_ones_samples():
    """A fake host where a forward of b rows costs (1 + 0.5·(b − 1)) times one row's: the tables at each b
    follow; the default (batch 1) takes exactly the samples it took before, in the same order."""
    calls: list[tuple] = []

    def fake(model: str, k: int, context: int, batch: int = 1) -> float:
        calls.append((model, k, context, batch))
        scale = 1 + 0.5 * (batch - 1)
        base = (30.0 + 0.8 * k) if context == 0 else (40.0 + 1.5 * k + 0.02 * context)
        return scale * base / (4.0 if model == "draft" else 1.0)

    one = calibrate(fake, k_max=6, draft_k_max=2, ref_context=64, contexts=(32, 256), prefill_lengths=(16, 64),
                    warmup=1, repeats=2)
    batch_one_calls = list(calls)
    assert one.batches == {} and "batch_sizes" not in one.meta
    assert all(c[3] == 1 for c in batch_one_calls)
    # the batch-1 sweep, key by key: k = 1..6 (warm-up and repeats), contexts, prefills; then the draft's
    assert batch_one_calls[:6] == [("target", k, 64, 1) for k in range(1, 7)]
    calls.clear()
    lat = calibrate(fake, k_max=6, draft_k_max=2, ref_context=64, contexts=(32, 256), prefill_lengths=(16, 64),
                    warmup=1, repeats=2, batch_sizes=(1, 2, 4), batch_k_max=4)
    assert lat.batch_sizes == [1, 2, 4] and lat.meta["batch_sizes"] == [1, 2, 4]
    # one sweep covers every batch size × k: a drifting host biases them alike
    assert calls[:14] == [("target", k, 64, 1) for k in range(1, 7)] + [
        ("target", k, 64, b) for b in (2, 4) for k in range(1, 5)]
    assert sorted(lat.batches[2].target.step_ms) == [1, 2, 3, 4] and sorted(lat.target.step_ms) == list(range(1, 7))
    for b in (1, 2, 4):
        scale = 1 + 0.5 * (b - 1)
        assert lat.verify_ms(3, 64, b) == pytest.approx(scale * (40 + 4.5 + 1.28))
        assert lat.verify_ms(1, 256, b) == pytest.approx(scale * (40 + 1.5 + 5.12))
        assert lat.target_prefill_ms(100, b) == pytest.approx(scale * 110.0)
        assert lat.draft_ms(1, 64, b) == pytest.approx(scale * (41.5 + 1.28) / 4)
    assert lat.verify_ms(1, 64) == one.verify_ms(1, 64)
    assert lat.meta["samples"]["batch"]["4"]["target"]["step_raw_ms"]["1"] == pytest.approx(2.5 * (41.5 + 1.28))


# ----------------------------------------------------------------------------- compare against batched records


def test_compare_reads_batched_records(traces, tmp_path, root):
    """A batched job whose rounds are the replay's and whose every time is 1.25 × the model's: throughput over
    all rows real ÷ replayed 0.8, batch walls real ÷ replayed 1.25, rounds identical, read from the fields
    the batched engine writes (``batch_size``, ``batch_index``, ``batch_rows``, ``batch_wall_ms``, ...)."""
    from omegaconf import OmegaConf

    from runners.replay import lab
    from specbench.config import compose

    write_traces(tmp_path / "traces" / "tiny__t" / "trace.jsonl", traces)
    lat = batched_latency()
    lat.save(tmp_path / "latency" / "tiny.json")
    config = OmegaConf.to_container(compose(["pair=gemma3-270m_gemma3-270m-int8", "method=hf_heuristic", "gamma=3",
                                             "max_new_tokens=24"]), resolve=True)
    config["pair"]["name"], config["task"]["name"] = "tiny", "t"
    batches = replay_job_batched(traces, partial(load_method("hf_heuristic").build, 3), lat, 2, "shared")
    ar = ar_batches(traces, lat, 2)
    records = []
    for index, (batch, (_, ar_walls)) in enumerate(zip(batches, ar)):
        for row, ar_wall in zip(batch.rows, ar_walls):
            records.append({
                "prompt_id": row.trace.prompt_id, "turn": row.trace.turn, "prompt_tokens": row.trace.prompt_tokens,
                "new_tokens": row.new_tokens, "wall_ms": 1.25 * row.wall_ms, "ttft_ms": 1.25 * row.ttft_ms,
                "ar_wall_ms": 1.25 * ar_wall, "gamma_trace": row.rounds.gamma, "drafted_trace": row.rounds.drafted,
                "accepted_trace": row.rounds.accepted, "accepted": sum(row.rounds.accepted),
                "drafted": sum(row.rounds.drafted), "lossless": True, "batch_size": 2, "batch_index": index,
                "batch_rows": len(batch.rows), "batch_wall_ms": 1.25 * batch.wall_ms, "batch_tokens": batch.new_tokens,
                "batch_share_ms": 1.25 * batch.wall_ms / len(batch.rows), "gamma_mode": "shared"})
    records.reverse()  # written as rows finish: the order of the file is not the rows' order
    job = tmp_path / "real" / "job"
    job.mkdir(parents=True)
    (job / "summary.json").write_text(json.dumps({"status": "complete", "config": config}))
    (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert lab.main(["compare", "--real", str(tmp_path / "real"), "--traces", str(tmp_path / "traces"),
                     "--latency", str(tmp_path / "latency"), "--out", str(tmp_path / "cmp")]) == 0
    row = pd.read_csv(tmp_path / "cmp" / "real_vs_replay.csv").iloc[0]
    assert row["batch_size"] == 2 and row["gamma_mode"] == "shared" and row["batches"] == len(batches)
    assert row["identical_rounds_share"] == 1.0
    assert row["real_over_replayed"] == pytest.approx(0.8)
    assert row["batch_wall_real_over_replayed"] == pytest.approx(1.25)
    assert row["ar_real_over_predicted"] == pytest.approx(1.25)
    assert row["speedup_real_over_replayed"] == pytest.approx(1.0)
    assert row["replayed_tokens_per_s"] == pytest.approx(pooled_batches(batches))
    assert math.isnan(row["verify_real_over_predicted"])  # per-record forward times: batch 1 only
    assert row["prefill_real_over_replayed"] == pytest.approx(1.25) and row["rounds_real_over_replayed"] == pytest.approx(1.25)
    # a slower prefill alone shows in the prefill's ratio, not the rounds'
    slow = [dict(r, ttft_ms=2 * r["ttft_ms"], batch_wall_ms=r["batch_wall_ms"] + r["ttft_ms"]) for r in records]
    (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in slow))
    assert lab.main(["compare", "--real", str(tmp_path / "real"), "--traces", str(tmp_path / "traces"),
                     "--latency", str(tmp_path / "latency"), "--out", str(tmp_path / "cmp")]) == 0
    row = pd.read_csv(tmp_path / "cmp" / "real_vs_replay.csv").iloc[0]
    assert row["prefill_real_over_replayed"] == pytest.approx(2.5) and row["rounds_real_over_replayed"] == pytest.approx(1.25)
    (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # a record set whose batches disagree with their rows is refused in one line
    bad = [dict(r, batch_rows=3) for r in records]
    (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
    from runners.replay.compare import compare_rows

    with pytest.raises(ValueError, match="batch_rows"):
        compare_rows(tmp_path / "real", tmp_path / "traces", tmp_path / "latency")
    # a job that ran the transposed kernels against a calibration that timed the plain ones: refused in one line
    (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (job / "summary.json").write_text(json.dumps({"status": "complete", "config": config,
                                                  "engine": {"fast_linear": "all", "buckets": {}, "fused_prefill": False}}))
    with pytest.raises(ConfigError, match="batch_fast_linear=all, .*timed at batch_fast_linear=False: .*calibrate "
                                          "--pair tiny --fast-linear all --batch-sizes 1 2 4 --out"):
        compare_rows(tmp_path / "real", tmp_path / "traces", tmp_path / "latency")
    lat.meta["batch_fast_linear"] = "all"
    lat.save(tmp_path / "latency" / "tiny.json")
    assert compare_rows(tmp_path / "real", tmp_path / "traces", tmp_path / "latency")


def test_the_model_timer_times_forwards_of_several_rows(noisy_pair):
    """``ModelTimer`` at batch b: b rows of their own tokens through a cache of ``context`` columns (cropped back
    after each forward), with the batched engine's attention mask and positions; a calibration at batch sizes
    on real (tiny) models gives a table per size."""
    from runners.replay.calibration import ModelTimer

    _, target, draft, prompts = noisy_pair
    pool = [t for ids in prompts for t in ids]
    timer = ModelTimer({"target": target, "draft": draft}, pool)
    for batch in (1, 3):
        assert timer("target", 4, 16, batch) > 0 and timer("draft", 1, 0, batch) > 0
        cache = timer._caches[("target", 16) if batch == 1 else ("target", 16, batch)]
        assert cache.get_seq_length() == 16
    lat = calibrate(timer, k_max=3, draft_k_max=2, ref_context=16, contexts=(8,), prefill_lengths=(4, 8), warmup=0,
                    repeats=1, batch_sizes=(1, 2))
    assert lat.batch_sizes == [1, 2] and sorted(lat.batches[2].target.step_ms) == [1, 2, 3]
    assert lat.verify_ms(2, 16, 2) > 0


def test_the_model_timer_times_several_rows_on_the_batched_engines_kernels(noisy_pair, monkeypatch):
    """``calibrate --fast-linear`` (``ModelTimer(batch_models=...)``): forwards of more than one row run on the
    batched engine's transposed kernels (``runners.engine.fast_linear.batch_kernels``), batch 1 on the plain model."""
    from runners.engine.fast_linear import batch_kernels
    from runners.engine.linear_kernels import TransposedLinear
    from runners.replay.calibration import ModelTimer
    from specbench.config import EngineConfig

    _, target, draft, prompts = noisy_pair
    kernels = batch_kernels(target, EngineConfig(fast_linear="all"))
    timer = ModelTimer({"target": target, "draft": draft}, [t for ids in prompts for t in ids],
                       {"target": kernels.executor})
    calls, forward = [], TransposedLinear.forward
    monkeypatch.setattr(TransposedLinear, "forward", lambda self, x: calls.append(1) or forward(self, x))
    timer("target", 4, 16, 1)
    timer("draft", 1, 16, 3)
    assert not calls
    timer("target", 4, 16, 3)
    assert calls


def test_the_graph_timer_times_the_forward_the_eager_loop_computes(noisy_pair):
    """``GraphTimer`` (the production regime; on the CPU its static-cache forward runs uncaptured): every timed
    call rewinds its static cache to ``context``, so the logits of a k-token forward are the dynamic cache's at
    every call and every row count, the draft keeps one position, a prefill is timed on the eager timer, and a
    width above ``k_max`` is refused in one line."""

    from runners.engine.kv import cache_arg, new_cache
    from runners.replay.calibration import GraphTimer

    _, target, draft, prompts = noisy_pair
    pool = [t for ids in prompts for t in ids]
    timer = GraphTimer({"target": target, "draft": draft}, pool, k_max=4)
    assert not timer.capture  # no CUDA here
    for rows in (1, 3):
        ids = torch.tensor([[pool[(7 * r + i) % len(pool)] for i in range(16 + 4)] for r in range(rows)])
        with torch.inference_mode():
            cache = new_cache(target)
            target(input_ids=ids[:, :16], **cache_arg(target, cache), use_cache=True)
            ref = target(input_ids=ids[:, 16:20], **cache_arg(target, cache), use_cache=True, logits_to_keep=4).logits
        for _ in range(2):
            assert timer("target", 4, 16, rows) > 0
            assert torch.allclose(timer.logits("target", 4, 16, rows), ref, atol=1e-5)
        assert timer.logits("draft", 2, 16, rows).shape[1] == 1
    assert timer("target", 8, 0) > 0 and ("target", 8, 0, 1) not in timer._runs  # a prefill: eager
    with pytest.raises(ValueError, match="k_max"):
        timer("target", 5, 16)
    lat = calibrate(timer, k_max=3, draft_k_max=2, ref_context=16, contexts=(8,), prefill_lengths=(4,), warmup=0,
                    repeats=1, batch_sizes=(1, 2))
    assert lat.batch_sizes == [1, 2] and lat.verify_ms(3, 16, 2) > 0
