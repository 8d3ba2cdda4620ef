"""The lab's real runs against their replay (``runners.replay.compare``): real runs ranked against the best fixed
γ measured for real, and a host's drift told apart from the cost table's shape."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from omegaconf import OmegaConf

from runners.replay.trace_build import build_trace
from specbench.latency import LatencyModel

from helpers.policy_lab import lab_script


def test_real_runs_are_ranked_against_the_best_fixed_gamma_measured_for_real(root):
    from runners.replay.compare import real_vs_best_fixed
    df = pd.DataFrame([
        {"pair": "p", "task": "t", "method": m, "method_config": mc, "gamma_init": g, "real_tokens_per_s": tps,
         "real_over_replayed": 1.0}
        for m, mc, g, tps in (("specdecode", "specdecode", 2, 10.0), ("specdecode", "specdecode", 4, 12.0),
                              ("cost_aware", "cost_aware", 2, 13.0), ("cost_aware", "cost_aware", 4, 14.0),
                              ("cost_aware", "cost_aware:transient=false", 2, 15.0))])
    per = real_vs_best_fixed(df).set_index("method_config")
    assert per.loc["specdecode", "x_best_fixed_real"] == pytest.approx(11.0 / 12.0)
    assert per.loc["cost_aware", "x_best_fixed_real"] == pytest.approx(13.5 / 12.0)
    assert per.loc["cost_aware:transient=false", "gammas"] == "2"
    assert real_vs_best_fixed(df[df["method"] != "specdecode"]).empty


def test_compare_separates_the_hosts_drift_from_the_cost_tables_shape(noisy_pair, tmp_path, root):
    """``compare`` on a job whose rounds are the replay's and whose every wall time is 1.25 × the latency
    model's (a host 25 % slower than at calibration): tokens/s real ÷ replayed 0.8, the target alone
    measured ÷ predicted 1.25, speedup real ÷ replayed 1 (the drift cancels), rounds identical."""
    from runners.replay.replay import replay_job
    from runners.replay.trace import write_traces
    from specbench.config import compose
    from specbench.round_costs import predict_parts_ms

    _, target, draft, prompts = noisy_pair
    traces = [build_trace(target, draft, ids, 24, [], prompt_id=str(i), pair="tiny", task="t") for i, ids in
              enumerate(prompts)]
    write_traces(tmp_path / "traces" / "tiny__t" / "trace.jsonl", traces)
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.3), round_overhead_ms=0.2)
    lat.save(tmp_path / "latency" / "tiny.json")
    config = compose(["pair=gemma3-270m_gemma3-270m-int8", "method=specdecode", "gamma=3", "max_new_tokens=24"])

    config = OmegaConf.to_container(config, resolve=True)
    config["pair"]["name"], config["task"]["name"] = "tiny", "t"
    lab = lab_script(root)
    reps = replay_job(traces, lab.method_spec("specdecode", None).build(3), lat)
    job = tmp_path / "real" / "job"
    job.mkdir(parents=True)
    (job / "summary.json").write_text(json.dumps({"status": "complete", "config": config}))
    (job / "records.jsonl").write_text("".join(json.dumps({
        "prompt_id": p.trace.prompt_id, "turn": p.trace.turn, "prompt_tokens": p.trace.prompt_tokens,
        "new_tokens": p.new_tokens, "wall_ms": 1.25 * p.wall_ms,
        "ar_wall_ms": 1.25 * lat.ar_wall_ms(p.trace.prompt_tokens, p.new_tokens),
        "gamma_trace": p.rounds.gamma, "drafted_trace": p.rounds.drafted, "accepted_trace": p.rounds.accepted,
        "accepted": sum(p.rounds.accepted), "drafted": sum(p.rounds.drafted), "lossless": True,
        **{k: 1.25 * v for k, v in predict_parts_ms(lat, p.trace.prompt_tokens, p.new_tokens, p.rounds.drafted,
                                                    p.rounds.accepted).items() if k in ("verify_ms", "draft_ms")}})
        + "\n" for p in reps))
    assert lab.main(["compare", "--real", str(tmp_path / "real"), "--traces", str(tmp_path / "traces"),
                     "--latency", str(tmp_path / "latency"), "--out", str(tmp_path / "cmp")]) == 0
    row = pd.read_csv(tmp_path / "cmp" / "real_vs_replay.csv").iloc[0]
    assert row["method_config"] == "specdecode" and row["identical_rounds_share"] == 1.0
    assert row["real_over_replayed"] == pytest.approx(0.8)
    assert row["ar_real_over_predicted"] == pytest.approx(1.25)
    assert row["speedup_real_over_replayed"] == pytest.approx(1.0)
    assert row["verify_real_over_predicted"] == pytest.approx(1.25)
    assert row["draft_real_over_predicted"] == pytest.approx(1.25)
