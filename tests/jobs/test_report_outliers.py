"""What a job prints when one turn ran far outside its own timings (``runners.jobs.report``): the headline after the
outlier rule with its interval and the median of per-turn ratios, one warning line naming the turn, and a ``why``
line when speculation wins only through one turn; and a tiny job whose one target-alone decode is slowed."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from runners.jobs.report import print_job_line, print_summary, slowdown_reason
from specbench.summary import aggregate

from helpers import run_sweep

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JOB = ROOT / "results" / "committed" / "make_run_xeon" / "default"  # `make run`, the default job


def _turns(speedups: list[float], ar_tokens_per_s: float = 15.0, new_tokens: int = 64) -> list[dict]:
    """One record per prompt turn ``p<i>`` with the target alone at ``ar_tokens_per_s`` and the loop at ``speedups[i]``
    times it."""
    out = []
    for i, speedup in enumerate(speedups):
        ar_wall = new_tokens / ar_tokens_per_s * 1000.0 * (1 + 0.01 * i)  # a little spread, as measured
        wall = ar_wall / speedup
        out.append({"task": "embedded", "prompt_id": f"p{i}", "turn": 1, "new_tokens": new_tokens, "wall_ms": wall,
                    "tokens_per_s": new_tokens / wall * 1000.0, "ttft_ms": 50.0, "tpot_ms": (wall - 50.0) / 63,
                    "ar_wall_ms": ar_wall, "ar_tokens_per_s": new_tokens / ar_wall * 1000.0,
                    "speedup": ar_wall / wall})
    return out


def _stall(records: list[dict], k: int, factor: float = 10.0) -> list[dict]:
    out = copy.deepcopy(records)
    out[k]["ar_wall_ms"] *= factor
    out[k]["ar_tokens_per_s"] /= factor
    return out


def _summary(records: list[dict], **aggregates) -> dict:
    return {"status": "complete", "config": {"method": {"name": "specdecode"}, "pair": {"name": "p"}},
            "aggregates": {**aggregate(records), **aggregates}}


def test_the_default_jobs_summary_warns_in_one_line_naming_the_stalled_turn(capsys):
    """The default job's records with one target-alone decode 10x slower: the printed headline stays the clean
    one within 5 % (with its interval and the median of per-turn ratios), the pooled figure as measured is beside it,
    and one warning line names the turn and the rule; the clean job prints no warning."""
    summary = json.loads((DEFAULT_JOB / "summary.json").read_text())
    records = [json.loads(line) for line in (DEFAULT_JOB / "records.jsonl").read_text().splitlines()]
    clean = {**summary, "aggregates": aggregate(records)}
    print_summary(DEFAULT_JOB, clean)
    out = capsys.readouterr().out
    assert "warning" not in out and "pooled as measured" not in out
    assert f"speedup vs AR  {clean['aggregates']['speedup']:.3f}x [" in out and "median of per-turn ratios" in out
    stalled = {**summary, "aggregates": aggregate(_stall(records, 3))}
    print_summary(DEFAULT_JOB, stalled)
    lines = capsys.readouterr().out.splitlines()
    headline = next(line for line in lines if line.startswith("  speedup vs AR"))
    printed = float(headline.split()[3].rstrip("x"))
    assert abs(printed / clean["aggregates"]["speedup"] - 1) < 0.05
    assert f"pooled as measured {stalled['aggregates']['speedup']:.3f}x" in headline
    warnings = [line for line in lines if line.startswith("  warning")]
    assert len(warnings) == 1
    assert f"{records[3]['prompt_id']} turn 1 (its target alone at 0.1" in warnings[0]
    assert "charged at the median" in warnings[0] and "rule: a turn whose target alone ran below 1/2" in warnings[0]
    print_job_line(DEFAULT_JOB, stalled)
    line = capsys.readouterr().out
    assert f"speedup {printed:.3f}x (after the outlier rule: {records[3]['prompt_id']} turn 1" in line


def test_the_why_line_names_the_turn_a_pooled_win_came_through():
    """The loop 0.9x the target alone on every turn, one target alone stalled: the pooled figure says the loop wins;
    the headline does not, and the ``why`` line says it is slower and which turn the pooled win came through, with
    the costs when the job measured them."""
    stalled = _stall(_turns([0.9] * 8), 5)
    summary = _summary(stalled)
    assert summary["aggregates"]["speedup"] > 1.5 and summary["aggregates"]["speedup_robust"] < 1.0
    line = slowdown_reason(summary)
    assert line.startswith("slower than the target alone once the outlier rule has handled p5 turn 1")
    assert "won only through it" in line
    costs = _summary(stalled, draft_forwards=100, draft_s=5.0, verify_s=6.0, accepted=60, mean_accepted_per_round=2.0,
                     leviathan_alpha=0.7)
    assert "p5 turn 1" in slowdown_reason(costs) and "c = " in slowdown_reason(costs)
    assert slowdown_reason(_summary(_turns([0.9] * 8))) is None  # slower, no outlier, no costs measured: as before
    assert slowdown_reason(_summary(_turns([0.9] * 8), draft_forwards=100, draft_s=5.0, verify_s=6.0, accepted=60,
                                    mean_accepted_per_round=2.0, leviathan_alpha=0.7)).startswith(
        "slower than the target alone: a draft forward")  # no outlier: the line as before


def test_the_why_line_says_when_a_win_rests_on_one_turn():
    """Seven turns slower than the target alone and one three times faster: the job wins pooled, but not without that
    turn; the ``why`` line says so and names it. A win that survives leaving out any one turn prints none."""
    summary = _summary(_turns([0.95] * 7 + [3.0]))
    assert summary["aggregates"]["speedup"] > 1.0 and not summary["aggregates"]["speedup_outliers"]["turns"]
    line = slowdown_reason(summary)
    assert line.startswith("faster than the target alone only through one turn: without p7 turn 1 the speedup is 0.9")
    assert slowdown_reason(_summary(_turns([1.3] * 7 + [3.0]))) is None


@pytest.mark.slow  # a tiny run.py job (in this process: helpers.run_in_process)
def test_a_tiny_job_with_one_slowed_target_alone_decode_names_it(tiny_conf, tmp_path, monkeypatch):
    """A real job whose third target-alone decode is slowed 20x in every step: its summary.json names that turn under the
    rule, keeps the pooled figure as measured, and the printed summary has the warning line."""
    from runners.engine.speculative import AutoregressiveRunner
    from runners.jobs.target_alone import TargetAlone

    state = {"calls": 0, "slow": False}
    reference, step = TargetAlone.reference, AutoregressiveRunner._step

    def slow_reference(self, prompt_ids, share):
        state["calls"] += 1
        state["slow"] = state["calls"] == 3
        try:
            return reference(self, prompt_ids, share)
        finally:
            state["slow"] = False

    def slow_step(self, *args, **kwargs):  # in the slowed decode, each step takes 20x its own time, whatever the load
        start = time.perf_counter()
        logits = step(self, *args, **kwargs)
        if state["slow"]:
            time.sleep(19 * (time.perf_counter() - start) + 0.002)
        return logits

    monkeypatch.setattr(TargetAlone, "reference", slow_reference)
    monkeypatch.setattr(AutoregressiveRunner, "_step", slow_step)
    proc = run_sweep(["pair=tiny", "task.n_prompts=6", "max_new_tokens=12", "warmup=0"], tiny_conf, tmp_path,
                     in_process=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert state["calls"] == 6, "every turn's target alone is decoded by the job"
    (path,) = tmp_path.rglob("summary.json")
    agg = json.loads(path.read_text())["aggregates"]
    records = [json.loads(line) for line in (path.parent / "records.jsonl").read_text().splitlines()]
    third = records[2]["prompt_id"]
    flagged = {(t["prompt_id"], t["side"], t["handled"]) for t in agg["speedup_outliers"]["turns"]}
    assert (third, "target alone", "charged at the median") in flagged, agg["speedup_outliers"]
    pooled = (sum(r["new_tokens"] for r in records) / sum(r["wall_ms"] for r in records)) / (
        sum(r["ar_tokens_per_s"] * r["ar_wall_ms"] for r in records) / 1000.0 / sum(r["ar_wall_ms"] for r in records))
    assert agg["speedup"] == pytest.approx(pooled)  # kept as measured
    assert agg["speedup_interval"] and agg["speedup_median"] and agg["speedup_robust"]
    warning = next(line for line in proc.stdout.splitlines() if line.startswith("  warning"))
    assert f"{third} turn" in warning
