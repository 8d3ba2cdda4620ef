"""Issue 49, item 2: the harness's own records written as vLLM's per-request metrics (``runners.replay.export_vllm``)
and read back (``runners.replay.import_vllm``); the replay of the imported traces at the run's own γ reproduces
its rounds exactly. The records are the committed ones of ``mini_gammatune_table2`` (Gemma-3-270M, int8 draft;
prompt lookup for the limit): a fixed-γ method (``specdecode``) and one that chooses γ (``gammatune``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from methods.policies import build_policy
from runners.replay.commands import main as cli_main
from runners.replay.export_vllm import SHAPES, export, response_of
from runners.replay.import_vllm import import_traces
from runners.replay.oracle import ScriptedPolicy
from runners.replay.replay import replay
from runners.replay.vllm_metrics import DATACLASS, LEVEL, OFFLINE, read_requests
from specbench.record_io import read_records
from specbench.rounds import Rounds

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "committed" / "mini_gammatune_table2"
FIXTURES = ROOT / "tests" / "fixtures" / "vllm"
GAMMAS = (1, 4, 16)


def job(method: str, gamma: int, draft: str = "gemma3-270m-int8") -> Path:
    return RUNS / f"experiment=mini_gammatune_table2,gamma={gamma},method={method},pair=gemma3-270m_{draft}"


def round_trip(records, tmp_path, shape="response", level=LEVEL):
    out = tmp_path / "vllm.jsonl"
    lines, summary = export(records, level, shape)
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return import_traces(out)[0], summary


def never_drafted(record):
    """The record as a run whose rounds drafted nothing (a prompt lookup that never matched)."""
    zeros = [0] * len(record["drafted_trace"])
    return {**record, "drafted_trace": zeros, "accepted_trace": zeros, "drafted": 0, "accepted": 0}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("method", ["specdecode", "gammatune"])
def test_the_runs_rounds_replay_exactly_from_its_vllm_export(method, gamma, shape, tmp_path):
    records = read_records(job(method, gamma) / "records.jsonl")
    assert len(records) == 8  # the recipe's 8 prompt turns
    traces, summary = round_trip(records, tmp_path, shape)
    assert summary["records"] == len(records) == 8 and summary["mid_generation_undrafted"] == 0
    for record, trace in zip(records, traces, strict=True):
        assert trace.n == record["new_tokens"] and trace.prompt_tokens == record["prompt_tokens"]
        own = Rounds.of(record)
        policy = build_policy("fixed", gamma, {}) if method == "specdecode" else ScriptedPolicy(own.gamma)
        res = replay(trace, policy)
        assert res.rounds.schedule == own.schedule, record["prompt_id"]


def test_a_changed_round_does_not_round_trip(tmp_path):
    """The check can fail: one round's acceptance moved by one token replays differently."""
    record = read_records(job("specdecode", 4) / "records.jsonl")[0]
    own = Rounds.of(record)
    i = next(i for i, (d, a) in enumerate(zip(own.drafted, own.accepted)) if 0 < a < d)
    bent = {**record, "accepted_trace": [a - (j == i) for j, a in enumerate(own.accepted)]}
    bent["new_tokens"] -= 1
    trace = round_trip([bent], tmp_path)[0][0]
    assert replay(trace, build_policy("fixed", 4, {})).rounds.schedule != own.schedule


def test_the_export_is_vllms_shape_by_its_definitions():
    record = read_records(job("specdecode", 4) / "records.jsonl")[0]
    line = response_of(record)
    spec = line["metrics"]["speculative_decoding"]
    own = Rounds.of(record)
    drafted = [d for d in own.drafted if d]
    assert spec["per_step_drafted"] == drafted and spec["num_spec_tokens"] == 4
    assert spec["num_spec_steps"] == sum(spec["acceptance_histogram"]) == len(drafted)
    assert spec["num_accepted_draft_tokens"] == sum(i * c for i, c in enumerate(spec["acceptance_histogram"]))
    assert spec["mean_acceptance_length"] == 1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"]
    assert line["usage"]["completion_tokens"] == record["new_tokens"] and line["choices"][0]["index"] == 0
    summary = response_of(record, "summary")["metrics"]["speculative_decoding"]
    assert summary["per_step_accepted"] is None and summary["per_step_drafted"] is None  # model_dump(): null


def test_rounds_that_drafted_nothing_mid_generation_are_left_out_and_counted(tmp_path):
    """Prompt lookup drafts nothing where nothing matches: vLLM leaves such steps out, so their place is lost
    (their tokens come back at the end) and the rounds do not replay exactly; the summary says how many."""
    records = read_records(job("specdecode", 4, "prompt-lookup") / "records.jsonl")
    traces, summary = round_trip(records, tmp_path)
    assert summary["mid_generation_undrafted"] > 0
    assert sum(t.extra["undrafted"] for t in traces) >= summary["undrafted_rounds"]
    assert any(replay(t, build_policy("fixed", 4, {})).rounds.schedule != Rounds.of(r).schedule
               for r, t in zip(records, traces, strict=True) if 0 in r["drafted_trace"][:-1])


def test_the_cli_exports_a_results_folder_and_imports_it_back(tmp_path, capsys):
    out = tmp_path / "vllm.jsonl"
    assert cli_main(["export", "vllm", str(job("specdecode", 4)), "--out", str(out)]) == 0
    assert "8 records as vLLM responses" in capsys.readouterr().err
    assert [r["shape"] for r in read_requests(out)] == ["response"] * 8
    assert cli_main(["import", "vllm", str(out), "--out", str(tmp_path / "t")]) == 0
    assert cli_main(["export", "vllm", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert not (tmp_path / "x.jsonl").exists()


def test_a_record_that_never_drafted_is_written_as_vllm_writes_a_request_with_no_step(tmp_path):
    """vLLM 0.29.0 writes a request with no step as ``to_dict`` makes it (totals 0, the histogram all zero, no
    arrays) and its body dumps the absent arrays as null: ours the same, and it reads back as never drafted."""
    record = never_drafted(read_records(job("specdecode", 4) / "records.jsonl")[0])
    spec = response_of(record)["metrics"]["speculative_decoding"]
    vllm = json.loads((FIXTURES / "zero_step_v0290.jsonl").read_text().splitlines()[1])["metrics"]["speculative_decoding"]
    assert spec["per_step_accepted"] is None and spec["per_step_drafted"] is None
    assert {f: spec[f] for f in vllm} == vllm  # k = 4 both
    assert set(spec) - set(vllm) == {"acceptance_histogram_by_draft_length"}  # the docs' newer field, not 0.29.0's
    (trace,), summary = round_trip([record], tmp_path)
    assert summary["without_steps"] == 1 and trace.n == record["new_tokens"]
    assert trace.proposals == [[]] * (trace.n - 1) and trace.extra["steps"] == 0


def test_the_offline_shape_is_the_dataclass_as_asdict_gives_it(tmp_path, capsys):
    record = read_records(job("specdecode", 4) / "records.jsonl")[0]
    own = Rounds.of(record)
    line = response_of(record, shape="offline")
    spec = line[OFFLINE]
    assert tuple(spec) == DATACLASS and line["token_ids"] == record["output_ids"]
    assert spec["per_step_drafted"] == [d for d in own.drafted if d] and spec["num_draft_tokens"] == record["drafted"]
    assert sum(spec["histogram"]) == len(spec["per_step_drafted"]) and len(spec["histogram"]) == 5
    assert sum(j * c for j, c in enumerate(spec["histogram"])) == record["accepted"]
    assert response_of(never_drafted(record), shape="offline")[OFFLINE] == {
        "num_spec_tokens": 4, "histogram": [0] * 5, "num_draft_tokens": 0, "per_step_accepted": [],
        "per_step_drafted": []}  # RequestSpecDecodeMetrics.new(4), never observed
    out = tmp_path / "summary.jsonl"
    assert cli_main(["export", "vllm", str(job("specdecode", 4)), "--out", str(out), "--shape", "offline",
                     "--level", "summary"]) == 0
    assert cli_main(["import", "vllm", str(out), "--out", str(tmp_path / "t")]) == 2
    assert "per_request_spec_decode_metrics='detailed' to LLM" in capsys.readouterr().err
