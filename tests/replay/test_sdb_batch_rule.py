"""Issue 49, item 5: what a batch of the SpecDecode-Bench leaderboard holds, and the comparison rule's columns.

``runners.replay.batched.rows_for_rule``: ``distinct`` (the lab's: different requests in a static batch whose wall
is its slowest row's) or ``duplicate`` (SpecDecode-Bench/simulator@2fdccbd, ``simulator.py:
SpecSimulator.simulate_like_experiment``: each request ``_dup_request``-ed ``batch_size`` times). The fixture is
written here in their schema; none of their data is used.
"""

from __future__ import annotations

import json
import random
import runpy
from pathlib import Path

import pytest

from analysis.policy_lab import VERDICTS
from methods.policies import build_policy
from runners.replay.batched import batches_of, rows_for_rule
from runners.replay.commands import main as cli_main
from runners.replay.import_specdecode_bench import import_traces
from runners.replay.replay import replay_rows
from runners.replay.specdecode_bench import latency_model
from specbench.registry import ConfigError

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "specdecode_bench_conformance.py"


@pytest.fixture
def data(tmp_path):
    rng = random.Random(3)
    rows = []
    for i in range(8):  # uneven lengths: 6 to 40 positions
        acc = [rng.choice([1, 1, 2, 3, 5]) for _ in range(6 + 5 * i)]
        rows.append({"id": f"r{i}", "prompt_token_ids": [1] * (5 + i), "generated_token_ids": [],
                     "acc_eagle": {"acc_len": acc}, "acc_ngram": {"acc_len": acc}})
    path = tmp_path / "combined_cnn.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_distinct_batches_wait_for_their_slowest_row_duplicates_do_not(data):
    traces, _ = import_traces(data, "eagle")
    lat = latency_model("eagle")
    [first, *_] = batches_of(rows_for_rule(traces, 4, "distinct"), 4)
    assert [tr.prompt_id for tr in first] == ["r0", "r1", "r2", "r3"]
    out = replay_rows(first, [build_policy("fixed", 3, {}) for _ in first], lat)
    walls = [r.wall_ms for r in out.rows]
    assert out.wall_ms == max(walls) == walls[3] > walls[0]  # the longest request sets the batch's wall
    dup = batches_of(rows_for_rule(traces, 4, "duplicate"), 4)
    assert len(dup) == len(traces) and all({tr.prompt_id for tr in b} == {b[0].prompt_id} and len(b) == 4 for b in dup)
    same = replay_rows(dup[0], [build_policy("fixed", 3, {}) for _ in dup[0]], lat)
    assert len({r.wall_ms for r in same.rows}) == 1
    assert rows_for_rule(traces, 1, "duplicate") == list(traces)
    with pytest.raises(ConfigError, match="batch rule"):
        rows_for_rule(traces, 2, "interleaved")


@pytest.mark.parametrize("rule", ["distinct", "duplicate"])
def test_the_leaderboard_names_its_batch_and_compares_by_the_rule(data, tmp_path, rule):
    traces = tmp_path / "traces" / "cnn"
    assert cli_main(["import", "specdecode-bench", str(data), "--proposer", "eagle", "--out", str(traces)]) == 0
    out = tmp_path / f"replay_{rule}"
    assert cli_main(["lab", "replay", "--traces", str(traces.parent), "--latency", str(traces / "latency"),
                     "--out", str(out), "--methods", "specdecode", "gammatune", "--gammas", "1,4",
                     "--batch-sizes", "1", "2", "--batch-rule", rule, "--full"]) == 0
    board = runpy.run_path(str(SCRIPT))["leaderboard"]
    at_two = board(out, 2)
    assert ("*different* requests" in at_two[0]) == (rule == "distinct")
    assert ("duplicated 2 times and decoded as one batch" in at_two[0]) == (rule == "duplicate")
    assert "B = 1: each request decoded alone" in board(out, 1)[0]
    header = [c.strip() for c in at_two[2].strip("|").split("|")]
    for col in ("pair", "workload", "method", "best γ_init", "speedup", "/ best fixed", "verdict", "n"):
        assert col in header
    rows = [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in at_two[4:]]
    policies = [r for r in rows if not r["method"].startswith("*")]
    assert {r["method"] for r in policies} == {"specdecode", "gammatune"}
    assert all(r["verdict"] in VERDICTS and r["n"] == "8" for r in policies)
    # the figure reads the table back: its interval and the batch rule its caption names
    table = tmp_path / f"leaderboard_{rule}.md"
    table.write_text("\n".join(at_two) + "\n")
    back = runpy.run_path(str(SCRIPT))["read_leaderboard"]([table])
    assert {r["batch_rule"] for r in back} == {rule}
    assert all(r["x_best_fixed_ci"][0] <= r["x_best_fixed"] <= r["x_best_fixed_ci"][1] for r in back if not r["reference"])


@pytest.mark.parametrize("name", ["fixed 3", "oracle"])
def test_the_conformance_replays_duplicates_as_one_row_at_their_batch_costs(data, name):
    """``duplicate_walls``' shortcut (one row at the costs of B rows) against the B rows replayed together."""
    duplicate_walls = runpy.run_path(str(SCRIPT))["duplicate_walls"]
    traces, _ = import_traces(data, "eagle")
    lat = latency_model("eagle")
    for tr in traces[:4]:
        fast, slow = (duplicate_walls(tr, name, lat, 5, as_one_row=one) for one in (True, False))
        assert len(fast) == len(slow) == 5
        assert [r.wall_ms for r in fast] == pytest.approx([r.wall_ms for r in slow], rel=1e-12)
        assert fast[0].rounds.drafted == slow[0].rounds.drafted
