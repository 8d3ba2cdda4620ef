"""A job at batch_size > 1 (issue 31): batches of prompt turns, one record per turn with the batch's
fields, the paired AR batch as the baseline, resume, and the one-line refusals."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from runners.jobs.batch import batches
from runners.jobs.job import open_job, run_job
from runners.jobs.record import Unit, batch_summary
from specbench.registry import ConfigError
from specbench.tasks import Prompt

from helpers import compose, saved_pair_config
from helpers.tiny import tiny_pair

PLAIN = ("engine.fast_linear=false", "engine.verify_buckets=false", "warmup=0")


@pytest.fixture(scope="module")
def pair_node(tmp_path_factory):
    pair = tiny_pair(draft="noisy", noise=0.3)
    return saved_pair_config(pair.tok, pair.target, pair.draft, tmp_path_factory.mktemp("pair"))


def _cfg(pair_node, results, *overrides):
    cfg = compose("task.n_prompts=5", "max_new_tokens=12", f"results_dir={results}", *PLAIN, *overrides)
    cfg.pair = OmegaConf.create(pair_node)
    return cfg


def _records(folder):
    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]


def test_batches_hold_one_turn_per_prompt_in_groups_of_b():
    prompts = [Prompt(f"p{i}", "c", ("a", "b") if i in (1, 2) else ("a",)) for i in range(5)]
    units = [Unit(i, p, t, r) for i, p in enumerate(prompts) for t in range(1, len(p.turns) + 1) for r in range(2)]
    got = [[(u.index, u.turn, u.repeat) for u in b] for b in batches(units, 3)]
    assert got[:4] == [[(0, 1, 0), (1, 1, 0), (2, 1, 0)], [(0, 1, 1), (1, 1, 1), (2, 1, 1)],
                       [(1, 2, 0), (2, 2, 0)], [(1, 2, 1), (2, 2, 1)]]
    assert got[4:] == [[(3, 1, 0), (4, 1, 0)], [(3, 1, 1), (4, 1, 1)]]
    assert sorted(u for b in got for u in b) == sorted((u.index, u.turn, u.repeat) for u in units)


@pytest.mark.parametrize("mode", ["per_row", "shared"])
def test_a_batched_job_is_lossless_and_divides_by_the_ar_batch(pair_node, tmp_path, mode):
    folder = tmp_path / "spec"
    summary = run_job(_cfg(pair_node, tmp_path, "method=gammatune", "gamma=3", "batch_size=2",
                           f"batch_gamma={mode}"), folder, progress=False)
    assert summary["status"] == "complete"
    records = _records(folder)
    assert len(records) == 5 and all(r["lossless"] for r in records)
    assert all(r["lossless_alone"] is True and r["first_divergence_alone"] is None for r in records)
    assert summary["aggregates"]["lossless_alone_all"] is True and summary["aggregates"]["lossless_alone_checked"] == 5
    assert [r["batch_index"] for r in records] == [0, 0, 1, 1, 2]
    assert [r["batch_rows"] for r in records] == [2, 2, 2, 2, 1]
    for r in records:
        assert r["batch_size"] == 2 and r["gamma_mode"] == mode and r["ar_source"] == "paired_batch"
        assert r["wall_ms"] <= r["batch_wall_ms"] and r["ttft_ms"] <= r["wall_ms"]
        assert r["speedup"] == pytest.approx(r["tokens_per_s"] / r["ar_tokens_per_s"])
    first = [r for r in records if r["batch_index"] == 0]
    assert sum(r["batch_share_ms"] for r in first) == pytest.approx(first[0]["batch_wall_ms"])
    assert len({r["ttft_ms"] for r in first}) == 1  # the batch's prefill
    batch = summary["batch"]
    assert batch["batch_size"] == 2 and batch["batches"] == 3 and batch["tokens_per_s"] > 0
    assert batch["speedup"] == pytest.approx(batch["tokens_per_s"] / batch["ar_tokens_per_s"])


def test_a_row_that_differs_from_the_target_alone_at_batch_one_says_so(pair_node, tmp_path, monkeypatch):
    """The AR batch shares the speculative batch's padding and kernels: a fault both had would pass ``lossless``;
    the row alone at batch 1 (here replaced by a decode that differs from the third token) catches it."""
    from runners.jobs import batch as batch_module

    real = batch_module.alone_tokens

    def altered(job, ids, generator):
        tokens = real(job, ids, generator)
        return tokens[:2] + [(tokens[2] + 1) % 50] + tokens[3:]

    monkeypatch.setattr(batch_module, "alone_tokens", altered)
    summary = run_job(_cfg(pair_node, tmp_path, "method=specdecode", "gamma=3", "batch_size=2"), tmp_path / "s",
                      progress=False)
    records = _records(tmp_path / "s")
    assert all(r["lossless"] for r in records)  # against the AR batch's rows: the same
    assert all(r["lossless_alone"] is False and r["first_divergence_alone"] == 2 for r in records)
    assert summary["aggregates"]["lossless_alone_all"] is False


def test_a_batched_ar_job_is_its_own_reference_and_matches_batch_one(pair_node, tmp_path):
    one = run_job(_cfg(pair_node, tmp_path, "method=ar"), tmp_path / "ar1", progress=False)
    four = run_job(_cfg(pair_node, tmp_path, "method=ar", "batch_size=4"), tmp_path / "ar4", progress=False)
    assert one["status"] == four["status"] == "complete"
    assert [r["output_ids"] for r in _records(tmp_path / "ar1")] == [r["output_ids"] for r in _records(tmp_path / "ar4")]
    assert {r["ar_source"] for r in _records(tmp_path / "ar4")} == {"self"}
    assert four["batch"]["batch_size"] == 4 and one["batch"] is None
    assert four["aggregates"]["speedup"] == pytest.approx(1.0)  # its own reference, both sides the batch's time


def test_a_batched_job_resumes_and_decodes_a_cut_batch_again_whole(pair_node, tmp_path):
    folder = tmp_path / "spec"
    cfg = _cfg(pair_node, tmp_path, "method=specdecode", "gamma=2", "batch_size=2")
    run_job(cfg, folder, progress=False)
    lines = (folder / "records.jsonl").read_text().splitlines()
    (folder / "records.jsonl").write_text("\n".join(lines[:3]) + "\n")
    (folder / "summary.json").write_text(json.dumps({**json.loads((folder / "summary.json").read_text()),
                                                     "status": "interrupted"}))
    run_job(cfg, folder, progress=False)
    records = _records(folder)
    assert [r["prompt_id"] for r in records] == [json.loads(line)["prompt_id"] for line in lines]
    # the batch the cut left with one of its two records is dropped and decoded again, whole: a batch's records
    # always hold every row its wall time covers
    assert [r["batch_index"] for r in records] == [0, 0, 1, 1, 2]
    assert [r["batch_rows"] for r in records] == [2, 2, 2, 2, 1]
    assert records[2]["batch_wall_ms"] == records[3]["batch_wall_ms"]
    assert records[2]["batch_wall_ms"] != json.loads(lines[2])["batch_wall_ms"]  # a new decoding, not the cut one
    assert json.loads((folder / "summary.json").read_text())["batch"]["batches"] == 3


def test_more_repeats_number_their_batches_after_the_folders(pair_node, tmp_path):
    folder = tmp_path / "spec"
    run_job(_cfg(pair_node, tmp_path, "method=specdecode", "gamma=2", "batch_size=2"), folder, progress=False)
    run_job(_cfg(pair_node, tmp_path, "method=specdecode", "gamma=2", "batch_size=2", "repeats=2"), folder,
            progress=False)
    records = _records(folder)
    first = [r["batch_index"] for r in records if r["repeat"] == 0]
    added = [r["batch_index"] for r in records if r["repeat"] == 1]
    assert first == [0, 0, 1, 1, 2] and min(added) > max(first)


@pytest.mark.parametrize("overrides,message", [
    (("method=hf_native_specdecode", "batch_size=2"), "transformers' generate"),
    (("method=specdecode", "batch_size=2", "engine.fused_prefill=true"), "engine.fused_prefill is a batch-1 option"),
    (("method=specdecode", "batch_size=0"), "batch_size"),
    (("method=specdecode", "batch_size=2", "batch_gamma=diagonal"), "batch_gamma"),
])
def test_bad_batch_settings_are_one_line_errors_and_leave_nothing(pair_node, tmp_path, overrides, message):
    folder = tmp_path / "job"
    with pytest.raises(ConfigError, match=message):
        run_job(_cfg(pair_node, tmp_path, *overrides), folder, progress=False)
    assert not folder.exists()


def test_a_batched_job_takes_fast_linear_and_its_summary_names_the_kernels_it_ran(pair_node, tmp_path):
    """``engine.fast_linear`` is the one engine option of a batched job; its summary's ``engine`` is the
    batched loop's (it used to name the unused batch-1 loop's options); the batch-1 ones stay refused."""
    fast = run_job(_cfg(pair_node, tmp_path, "method=specdecode", "gamma=3", "batch_size=2",
                        "engine.fast_linear=all"), tmp_path / "fast", progress=False)
    plain = run_job(_cfg(pair_node, tmp_path, "method=specdecode", "gamma=3", "batch_size=2"), tmp_path / "plain",
                    progress=False)
    assert fast["engine"] == {"fast_linear": "all", "buckets": {}, "fused_prefill": False, "graphs": "eager"}
    assert plain["engine"] == {"fast_linear": False, "buckets": {}, "fused_prefill": False, "graphs": "eager"}
    assert all(r["lossless"] for r in _records(tmp_path / "fast"))
    assert [r["output_ids"] for r in _records(tmp_path / "fast")] == [r["output_ids"] for r in _records(tmp_path / "plain")]
    with pytest.raises(ConfigError, match="engine.verify_buckets is a batch-1 option"):
        run_job(_cfg(pair_node, tmp_path, "method=specdecode", "batch_size=2", "engine.verify_buckets=probe"),
                tmp_path / "buckets", progress=False)
    assert not (tmp_path / "buckets").exists()


def test_the_interleaved_launcher_refuses_a_batched_job(pair_node, tmp_path):
    folder = tmp_path / "job"
    with pytest.raises(ConfigError, match="interleaved launcher"):
        open_job(_cfg(pair_node, tmp_path, "method=specdecode", "batch_size=2"), folder, progress=False, batched=False)
    assert not folder.exists()


def test_batch_summary_pools_batches_once():
    rows = [{"batch_size": 2, "batch_index": 0, "repeat": 0, "batch_wall_ms": 1000.0, "batch_tokens": 20,
             "ar_batch_wall_ms": 1500.0, "wall_ms": w, "gamma_mode": "per_row"} for w in (800.0, 1000.0)]
    out = batch_summary(rows)
    assert out["tokens_per_s"] == pytest.approx(20.0) and out["speedup"] == pytest.approx(1.5)
    assert out["row_latency_ms_mean"] == pytest.approx(900.0) and out["batches"] == 1
    assert batch_summary([{"batch_size": 1}]) is None


def test_the_summarys_throughput_is_the_batchs_not_the_rows_latencies(pair_node, tmp_path):
    """aggregates.tokens_per_s (what `run.py` prints) of a batched job is its tokens over its batches' walls,
    as summary.batch says, and its AR the paired AR batch's; at batch 1 it is the plain pooled rate."""
    folder = tmp_path / "spec"
    summary = run_job(_cfg(pair_node, tmp_path, "method=specdecode", "gamma=2", "batch_size=2"), folder,
                      progress=False)
    agg, batch = summary["aggregates"], summary["batch"]
    assert agg["tokens_per_s"] == pytest.approx(batch["tokens_per_s"])
    assert agg["ar_tokens_per_s"] == pytest.approx(batch["ar_tokens_per_s"])
    assert agg["speedup"] == pytest.approx(batch["speedup"])
    records = _records(folder)
    latency_rate = sum(r["new_tokens"] for r in records) / (sum(r["wall_ms"] for r in records) / 1000.0)
    assert agg["tokens_per_s"] > latency_rate  # rows overlap in time: their latencies are not the job's time


def test_the_ar_side_of_a_batched_figure_counts_its_own_rows_tokens():
    """Issue 40, item 6: the paired AR batch's throughput divided the speculative rows' tokens by the AR batch's
    wall. Where the AR rows decode other tokens (half precision, a sampled run), its tokens/s was wrong; it now
    counts the AR batch's own (``ar_batch_tokens``), and records without the field read as before."""
    from runners.jobs.record import batch_summary
    from specbench.records import throughput_ms

    rows = [{"batch_size": 2, "batch_index": 0, "batch_rows": 2, "batch_wall_ms": 1000.0, "batch_tokens": 20,
             "ar_batch_wall_ms": 2000.0, "ar_batch_tokens": 30, "new_tokens": n, "wall_ms": 900.0,
             "batch_share_ms": 1000.0 * n / 20, "gamma_mode": "per_row"} for n in (8, 12)]
    summary = batch_summary(rows)
    assert summary["tokens_per_s"] == pytest.approx(20.0) and summary["ar_tokens_per_s"] == pytest.approx(15.0)
    # pooled over the rows, each row's AR share gives the AR batch's own rate: 30 tokens in 2 s
    assert sum(r["new_tokens"] for r in rows) / sum(throughput_ms(r, ar=True) for r in rows) * 1000 == pytest.approx(15.0)
    old = [{k: v for k, v in r.items() if k != "ar_batch_tokens"} for r in rows]
    assert batch_summary(old)["ar_tokens_per_s"] == pytest.approx(10.0)  # as before: the rows' tokens
