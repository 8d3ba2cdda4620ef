"""Where the time goes: draft / verify / overhead per record, predicted wall times, the analysis table
and figure (tiny seeded models, offline)."""

from __future__ import annotations

import json
import time

import pytest

from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.latency import ForwardCost, LatencyModel
from specbench.records import breakdown_fields
from specbench.round_costs import predict_wall_ms
from specbench.summary import aggregate
from specbench.timing import Timer

from helpers import tiny


@pytest.fixture(scope="module")
def pair():
    tok, target, draft, prompts = tiny.tiny_pair()
    return tok, target, draft, prompts[0]


class SlowDrafter(ModelDrafter):
    """A model drafter that sleeps ``delay_s`` in every ``propose``."""

    def __init__(self, model, delay_s: float) -> None:
        super().__init__(model, [])
        self.delay_s = delay_s
        self.calls = 0

    def propose(self, *args, **kwargs):
        self.calls += 1
        time.sleep(self.delay_s)
        return super().propose(*args, **kwargs)


def _after_first(gen) -> float:
    return gen.wall_ms - gen.ttft_ms


def test_laps_partition_the_time_after_a_mark():
    timer = Timer("cpu")
    timer.start()
    timer.mark("first")
    for phase in ("draft", "verify", "overhead", "draft"):
        time.sleep(0.001)
        timer.lap(phase)
    timer.lap("overhead", mark="end")
    t, phases = timer.read(), timer.phases()
    assert set(phases) == {"draft", "verify", "overhead"}
    assert sum(phases.values()) == pytest.approx(t["end"] - t["first"], abs=1e-6)
    assert phases["draft"] >= 2.0  # two laps of >= 1 ms each


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("gamma", [1, 4])
def test_speculative_parts_sum_to_wall_minus_ttft(pair, gamma, fused):
    _, target, draft, ids = pair
    gen = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(gamma), [], fused_prefill=fused).generate(ids, 30)
    fields = breakdown_fields(gen.phase_ms)
    assert all(fields[k] is not None and fields[k] >= 0 for k in ("draft_ms", "verify_ms", "overhead_ms"))
    assert fields["draft_ms"] > 0 and fields["verify_ms"] > 0
    assert sum(fields.values()) == pytest.approx(_after_first(gen), abs=1e-6)


def test_autoregressive_parts_sum_to_wall_minus_ttft(pair):
    _, target, _, ids = pair
    gen = AutoregressiveRunner(target, []).generate(ids, 20)
    fields = breakdown_fields(gen.phase_ms)
    assert fields["draft_ms"] == 0.0 and fields["verify_ms"] > 0
    assert sum(fields.values()) == pytest.approx(_after_first(gen), abs=1e-6)


def test_a_slowed_drafter_shows_up_in_draft_ms(pair):
    _, target, draft, ids = pair
    delay = 0.02
    slow = SlowDrafter(draft, delay)
    gen = SpeculativeRunner(target, slow, FixedGamma(3), []).generate(ids, 24)
    fields = breakdown_fields(gen.phase_ms)
    assert slow.calls >= 3
    assert fields["draft_ms"] >= slow.calls * delay * 1000.0  # every sleep is drafting time ...
    assert sum(fields.values()) == pytest.approx(_after_first(gen), abs=1e-6)  # ... and nothing is counted twice


def test_breakdown_fields_without_phases_are_null():
    assert breakdown_fields({}) == {"draft_ms": None, "verify_ms": None, "overhead_ms": None}


def test_aggregates_give_overhead_per_round_and_predicted_wall():
    recs = [
        {"new_tokens": 10, "wall_ms": 100.0, "ttft_ms": 10.0, "rounds": 4, "draft_ms": 30.0, "verify_ms": 50.0,
         "overhead_ms": 10.0, "predicted_wall_ms": 90.0, "tokens_per_s": 100.0, "tpot_ms": 10.0},
        {"new_tokens": 10, "wall_ms": 200.0, "ttft_ms": 20.0, "rounds": 6, "draft_ms": 60.0, "verify_ms": 110.0,
         "overhead_ms": 10.0, "predicted_wall_ms": 210.0, "tokens_per_s": 50.0, "tpot_ms": 20.0},
    ]
    agg = aggregate(recs)
    assert agg["draft_s"] == pytest.approx(0.09) and agg["verify_s"] == pytest.approx(0.16)
    assert agg["overhead_ms_per_round"] == pytest.approx(2.0)
    assert agg["overhead_share"] == pytest.approx(20.0 / 270.0)
    assert agg["predicted_wall_s"] == pytest.approx(0.3)


# ----------------------------------------------------------------------------- predicted wall time

def _latency() -> LatencyModel:
    """Target: 10 ms + 1 ms per token (prefill 5 + 0.1·P); draft 2 ms per forward; 0.5 ms per round."""
    target = ForwardCost({}, (10.0, 1.0), 0.0, 0, (5.0, 0.1))
    draft = ForwardCost({}, (2.0, 0.0), 0.0, 0, (2.0, 0.0))
    return LatencyModel(target, draft, round_overhead_ms=0.5, ar_overhead_ms=0.25)


def test_predicted_wall_charges_the_rounds():
    lat = _latency()
    # prompt 10: prefill 6 ms; round 1 drafts 3 (accepts 3: +4 tokens), round 2 drafts 3 (accepts 1: +2)
    ttft, wall = predict_wall_ms(lat, 10, 7, [3, 3], [3, 1])
    assert ttft == pytest.approx(6.0)
    rounds = 2 * ((10.0 + 4.0) + 0.5 + 3 * 2.0)
    assert wall == pytest.approx(6.0 + rounds)
    # prompt lookup: no draft forwards
    assert predict_wall_ms(lat, 10, 7, [3, 3], [3, 1], draft_model=False)[1] == pytest.approx(6.0 + 2 * 14.5)
    # autoregressive: prefill + (n - 1) steps of 11 ms + 0.25 ms
    assert predict_wall_ms(lat, 10, 5, [], [])[1] == pytest.approx(6.0 + 4 * 11.25)


def test_predicted_wall_of_a_fused_first_round():
    lat = _latency()
    ttft, wall = predict_wall_ms(lat, 10, 6, [3, 2], [3, 0], fused_prefill=True)
    first = (5.0 + 0.1 * 13) + 0.5 + 3 * 2.0  # target prefill of prompt + draft; draft prefill + 2 steps
    assert ttft == pytest.approx(first)
    assert wall == pytest.approx(first + (10.0 + 3.0) + 0.5 + 2 * 2.0)


# ----------------------------------------------------------------------------- through a job

@pytest.mark.slow
def test_job_records_and_analysis_show_the_breakdown(pair, tmp_path):
    from omegaconf import OmegaConf

    from analysis.make_artefacts import main as analysis_main
    from runners.jobs.job import run_job

    from helpers import compose, saved_pair_config

    tok, target, draft, _ = pair
    tiny_pair = saved_pair_config(tok, target, draft, tmp_path)
    results = tmp_path / "results"
    _latency().save(results / "latency" / "tiny.json")  # found as <results_dir>/latency/<pair>.json
    plain = ("engine.fast_linear=false", "engine.verify_buckets=false", "engine.fused_prefill=false")
    jobs = (("specdecode", plain), ("specdecode_fast", (*plain, "engine.fast_linear=all", "engine.fused_prefill=true")),
            ("ar", ()))
    for folder, engine in jobs:
        method = folder.partition("_")[0]
        cfg = compose(f"method={method}", "gamma=3", "task.n_prompts=2", "max_new_tokens=16", "warmup=0",
                      f"results_dir={results}", *engine)
        cfg.pair = OmegaConf.create(tiny_pair)
        summary = run_job(cfg, results / folder, progress=False)
        assert summary["latency_model"].endswith("tiny.json")
        agg = summary["aggregates"]
        assert agg["predicted_wall_s"] > 0 and agg["overhead_s"] >= 0
        records = [json.loads(line) for line in (results / folder / "records.jsonl").read_text().splitlines()]
        for r in records:
            parts = r["draft_ms"] + r["verify_ms"] + r["overhead_ms"]
            assert parts == pytest.approx(r["wall_ms"] - r["ttft_ms"], abs=1e-6)
            assert r["predicted_wall_ms"] > 0
    # method=ar: the target alone steps on the engine's kernels (issue 40's baseline rule), as its summary says
    assert summary["engine"] == summary["baseline"]["kernels"]
    assert analysis_main([str(results), "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "tables" / "time_breakdown.md").read_text()
    assert "SpecDecode" in table and "AR" in table and "overhead ms/round" in table
    # engine options change what a job measures: their job is its own cell, named, never pooled with the plain one
    assert "| SpecDecode (plain) |" in table and "| SpecDecode (fast_linear=all, fused_prefill) |" in table
    assert (tmp_path / "out" / "figures" / "time_breakdown.png").stat().st_size > 0
    data = (tmp_path / "out" / "tables" / "time_breakdown.data.csv").read_text()
    assert "predicted_wall_s" in data
    latency = (tmp_path / "out" / "tables" / "latency_percentiles.md").read_text()  # found by its @artefact alone
    assert "TTFT p99" in latency and "TPOT p50" in latency and "| SpecDecode (plain) |" in latency


def test_latency_percentiles_are_numpys_over_each_cells_prompt_turns():
    """``analysis.time_breakdown.latency_percentiles_table``: per cell, the mean and the 50th / 90th / 99th
    percentiles of TTFT and TPOT over its records (linear interpolation: 1..100 ms give 50.5, 90.1, 99.01); a turn
    of one token has no TPOT and counts for TTFT only; cells never pool."""
    import pandas as pd

    from analysis.artefacts import get
    from analysis.time_breakdown import latency_percentiles_table

    cell = {"pair": "p", "hetero": None, "task": "t", "temperature": 0.0}
    rows = [{**cell, "method": "specdecode", "gamma_init": 4.0, "ttft_ms": float(v), "tpot_ms": float(v) / 10}
            for v in range(1, 101)]
    rows.append({**cell, "method": "specdecode", "gamma_init": 4.0, "ttft_ms": 1000.0, "tpot_ms": None})
    rows += [{**cell, "method": "ar", "gamma_init": None, "ttft_ms": 7.0, "tpot_ms": 3.0}] * 3
    table = latency_percentiles_table(pd.DataFrame(rows))
    data = table.data.set_index("method")
    assert data.loc["specdecode", "n_records"] == 101 and data.loc["ar", "n_records"] == 3
    assert data.loc["specdecode", ["p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms"]].tolist() == pytest.approx(
        [5.05, 9.01, 9.901])
    assert data.loc["specdecode", "mean_tpot_ms"] == pytest.approx(5.05)
    assert data.loc["specdecode", "p50_ttft_ms"] == 51.0  # 101 turns: the 1-token one counts here
    assert data.loc["ar", ["mean_ttft_ms", "p99_ttft_ms", "p50_tpot_ms"]].tolist() == [7.0, 7.0, 3.0]
    assert "TTFT p90" in table.display.columns and get("tables/latency_percentiles").fn is latency_percentiles_table
    assert latency_percentiles_table(pd.DataFrame(columns=["pair", "method", "ttft_ms"])) is None
