"""Issue 49, item 4: AIPerf's per-request ``SpecDecodeAcceptanceRecord`` both ways (``runners.replay.aiperf_record``,
``export_aiperf``, ``import_aiperf``). The fixtures (``tests/fixtures/aiperf/``, README there) are built from
AIPerf 0.13.0's code and its unit tests' payloads, SGLang's and TensorRT-LLM's from their code; the round trip
runs on the committed records of ``mini_gammatune_table2`` and on the committed export of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from methods.policies import build_policy
from runners.replay import aiperf_record
from runners.replay.commands import main as cli_main
from runners.replay.export_aiperf import export, line_of
from runners.replay.import_aiperf import STATS_FILE, import_stats, import_traces
from runners.replay.oracle import ScriptedPolicy
from runners.replay.replay import replay
from specbench.record_io import read_records
from specbench.rounds import Rounds

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "committed" / "mini_gammatune_table2"
COMMITTED = RUNS / "aiperf" / aiperf_record.PROFILE_EXPORT
FIXTURES = ROOT / "tests" / "fixtures" / "aiperf"


def job(method: str, gamma: int, draft: str = "gemma3-270m-int8") -> Path:
    return RUNS / f"experiment=mini_gammatune_table2,gamma={gamma},method={method},pair=gemma3-270m_{draft}"


def write(lines, path: Path) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# ------------------------------------------------------------------------------------ the record, written
def test_the_record_holds_aiperfs_definitions():
    """Field for field (``SpecDecodeAcceptanceRecord``): the bonus token in the mean, not in the rate or histogram."""
    rec = aiperf_record.record([3, 3, 3, 3], [0, 1, 3, 0], 3, 9, engine="vllm")
    assert tuple(rec) == aiperf_record.FIELDS
    assert rec["mean_acceptance_length"] == 2.0 and rec["draft_acceptance_rate"] == 4 / 12  # AIPerf's DETAILED_PAYLOAD
    assert rec["acceptance_histogram"] == {0: 2, 1: 1, 3: 1}
    on_disk = aiperf_record.line(rec, {}, {})[aiperf_record.KEY]
    assert on_disk["acceptance_histogram"] == {"0": 2, "1": 1, "3": 1}  # JSON keys, as AIPerf's writer dumps them
    assert "per_step_accepted" not in aiperf_record.line(aiperf_record.record([3], [1], None, per_step=False),
                                                         {}, {})[aiperf_record.KEY]  # None fields left out


def test_the_export_is_the_records_rounds():
    record = read_records(job("gammatune", 4) / "records.jsonl")[0]
    out = line_of(record, 0)
    spec = aiperf_record.check(out[aiperf_record.KEY])
    own = Rounds.of(record)
    assert spec["per_step_drafted"] == [d for d in own.drafted if d] and spec["num_spec_tokens"] == max(own.gamma)
    assert spec["num_accepted_draft_tokens"] == record["accepted"] and spec["num_draft_tokens"] == record["drafted"]
    assert spec["mean_acceptance_length"] == 1 + record["mean_accepted_per_round"]  # ours excludes the bonus token
    assert spec["completion_tokens"] == record["new_tokens"] == out["metrics"]["output_sequence_length"]["value"]
    assert out["metrics"]["spec_decode_draft_acceptance_rate"]["value"] == pytest.approx(100 * record["acceptance_rate"])
    assert set(out["metadata"]) >= {"session_num", "request_start_ns", "request_end_ns", "worker_id",
                                    "record_processor_id", "benchmark_phase"}  # MetricRecordMetadata's required


# ------------------------------------------------------------------------------------- the round trip
@pytest.mark.parametrize("gamma", (1, 4, 16))
@pytest.mark.parametrize("method", ["specdecode", "gammatune"])
def test_the_runs_rounds_replay_exactly_from_its_aiperf_export(method, gamma, tmp_path):
    records = read_records(job(method, gamma) / "records.jsonl")
    lines, summary = export(records)
    assert summary["records"] == len(records) == 8 and summary["mid_generation_undrafted"] == 0
    traces, meta = import_traces(write(lines, tmp_path / "p.jsonl"))
    assert meta["prompt_tokens_unknown"] == 0 and meta["k_from_steps"] == 0
    for record, trace in zip(records, traces, strict=True):
        assert trace.n == record["new_tokens"] and trace.prompt_tokens == record["prompt_tokens"]
        own = Rounds.of(record)
        policy = build_policy("fixed", gamma, {}) if method == "specdecode" else ScriptedPolicy(own.gamma)
        assert replay(trace, policy).rounds.schedule == own.schedule, record["prompt_id"]


def test_a_changed_round_does_not_round_trip(tmp_path):
    """The check can fail: one round's acceptance moved by one token replays differently."""
    record = read_records(job("specdecode", 4) / "records.jsonl")[0]
    own = Rounds.of(record)
    i = next(i for i, (d, a) in enumerate(zip(own.drafted, own.accepted)) if 0 < a < d)
    bent = {**record, "accepted_trace": [a - (j == i) for j, a in enumerate(own.accepted)],
            "new_tokens": record["new_tokens"] - 1}
    trace = import_traces(write(export([bent])[0], tmp_path / "p.jsonl"))[0][0]
    assert replay(trace, build_policy("fixed", 4, {})).rounds.schedule != own.schedule


def test_the_committed_export_reads_back_as_the_committed_records():
    """``results/committed/mini_gammatune_table2/aiperf/profile_export.jsonl`` is every committed record, per step."""
    reqs, without = aiperf_record.read_records(COMMITTED)
    records = [r for f in sorted(RUNS.rglob("records.jsonl")) for r in read_records(f)]
    assert without == 0 and len(reqs) == len(records) == 576
    for req, record in zip(reqs, records, strict=True):
        own = Rounds.of(record)
        assert req["record"]["per_step_accepted"] == [a for d, a in zip(own.drafted, own.accepted) if d]
        assert req["record"]["completion_tokens"] == record["new_tokens"] and req["prompt_tokens"] == record["prompt_tokens"]
    assert import_stats(COMMITTED)["pooled"]["total_accepted_draft_tokens"] == sum(r["accepted"] for r in records)


@pytest.mark.parametrize("folder", sorted(p.parent.parent.name for p in
                                         (ROOT / "results" / "committed").glob(f"*/aiperf/{aiperf_record.PROFILE_EXPORT}")))
def test_every_committed_recipes_export_reads_back_as_its_records(folder):
    """Every committed recipe's ``aiperf/profile_export.jsonl`` (``python -m runners.replay export aiperf``) holds one
    line per record: a record per step for each one with rounds, none for the others (AR)."""
    runs = ROOT / "results" / "committed" / folder
    reqs, without = aiperf_record.read_records(runs / "aiperf" / aiperf_record.PROFILE_EXPORT)
    records = [r for f in sorted(runs.rglob("records.jsonl")) for r in read_records(f)]
    drafting = [r for r in records if r.get("drafted_trace")]
    assert len(reqs) == len(drafting) > 0 and without == len(records) - len(drafting)
    for req, record in zip(reqs, drafting, strict=True):
        own = Rounds.of(record)
        assert req["record"]["per_step_accepted"] == [a for d, a in zip(own.drafted, own.accepted) if d]


# ------------------------------------------------------------------------------ AIPerf's file, imported
def test_a_per_step_aiperf_record_imports_as_a_trace(tmp_path):
    only = write([json.loads(FIXTURES.joinpath(aiperf_record.PROFILE_EXPORT).read_text().splitlines()[0])],
                 tmp_path / "detailed.jsonl")
    traces, meta = import_traces(only)
    (trace,) = traces
    assert trace.n == 9 and trace.prompt_tokens == 128 and trace.gamma_max == 3  # input_sequence_length, k
    assert replay(trace, build_policy("fixed", 3, {})).rounds.accepted == [0, 1, 3, 0]  # its steps, at its k
    assert meta["source"]["shapes"] == {"aiperf profile_export": 1}


def test_a_histogram_only_record_is_refused_in_one_line_for_a_replay(tmp_path, capsys):
    path = FIXTURES / aiperf_record.PROFILE_EXPORT
    with pytest.raises(ValueError, match="carries only an acceptance histogram") as err:
        import_traces(path)
    assert "\n" not in str(err.value) and "--stats-only" in str(err.value)
    assert cli_main(["import", "aiperf", str(path), "--out", str(tmp_path / "t")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not (tmp_path / "t").exists()  # nothing written


def test_stats_only_reads_every_record_by_aiperfs_run_level_definitions(tmp_path):
    out = tmp_path / "s"
    assert cli_main(["import", "aiperf", str(FIXTURES / aiperf_record.PROFILE_EXPORT), "--out", str(out),
                     "--stats-only"]) == 0
    stats = json.loads((out / STATS_FILE).read_text())
    assert stats["source"]["lines_without_record"] == 1  # the failed request
    pooled = stats["pooled"]
    assert pooled["requests"] == 2 and pooled["with_per_step"] == 1
    assert pooled["total_spec_decode_steps"] == 4 + 43 and pooled["total_accepted_draft_tokens"] == 4 + 10
    assert pooled["token_weighted_acceptance_length"] == 1 + 14 / 47
    assert pooled["acceptance_length"] == (2.0 + 1.2325581395348837) / 2  # each request weighted equally
    assert pooled["overall_draft_acceptance_rate"] == 14 / 141
    assert pooled["pooled_histogram"] == {"0": 41, "1": 2, "3": 4}
    assert not (out / "trace.jsonl").exists()


def test_sglang_and_tensorrt_llm_payloads_give_histograms_only():
    (sglang, _), (trt, _) = [(r, r["record"]) for r in aiperf_record.read_records(FIXTURES / "engines.jsonl")[0]]
    assert sglang["record"]["engine"] == "sglang" and sglang["record"]["acceptance_histogram"] == {0: 2, 1: 1, 2: 1, 3: 3}
    assert sglang["record"]["mean_acceptance_length"] == 1 + 12 / 7  # not SGLang's spec_accept_length (20 / 7)
    assert sglang["record"]["num_spec_tokens"] == 3 and sglang["prompt_tokens"] == 30
    assert trt["record"]["engine"] == "tensorrt_llm" and trt["record"]["mean_acceptance_length"] == 2.5  # AIPerf's test
    assert trt["record"]["acceptance_histogram"] == {0: 8, 2: 6, 3: 6}
    assert not aiperf_record.per_step(sglang["record"]) and not aiperf_record.per_step(trt["record"])
    with pytest.raises(ValueError, match="only an acceptance histogram"):
        import_traces(FIXTURES / "engines.jsonl")
    assert import_stats(FIXTURES / "engines.jsonl")["by_engine"]["sglang"]["requests"] == 1


@pytest.mark.parametrize("bend, message", [
    ({"num_spec_steps": 5}, "counts sum to 4"),
    ({"num_accepted_draft_tokens": 5}, "j-weighted sum"),
    ({"num_draft_tokens": 3}, "exceeds num_draft_tokens"),
    ({"per_step_accepted": [0, 1, 3]}, "per_step_accepted is not 4 counts"),
    ({"per_step_drafted": [3, 3, 2, 4]}, "accepted more drafts than it proposed"),
    ({"num_spec_tokens": 2}, "past num_spec_tokens"),
    ({"acceptance_histogram": {"x": 1}}, "not a map"),
])
def test_a_record_breaking_aiperfs_invariants_fails_in_one_line(bend, message, tmp_path):
    line = json.loads((FIXTURES / aiperf_record.PROFILE_EXPORT).read_text().splitlines()[0])
    line[aiperf_record.KEY] = {**line[aiperf_record.KEY], **bend}
    with pytest.raises(ValueError, match=message) as err:
        aiperf_record.read_records(write([line], tmp_path / "bad.jsonl"))
    assert "\n" not in str(err.value) and str(err.value).startswith(str(tmp_path / "bad.jsonl") + ":1:")


def test_a_file_without_any_record_says_what_aiperf_needs(tmp_path):
    line = json.loads((FIXTURES / aiperf_record.PROFILE_EXPORT).read_text().splitlines()[2])
    with pytest.raises(ValueError, match="--export-level records"):
        aiperf_record.read_records(write([line], tmp_path / "none.jsonl"))


def test_the_export_command_writes_what_the_import_command_reads(tmp_path):
    records = job("gammatune", 8) / "records.jsonl"
    out = tmp_path / aiperf_record.PROFILE_EXPORT
    assert cli_main(["export", "aiperf", str(records), "--out", str(out)]) == 0
    assert cli_main(["import", "aiperf", str(out), "--out", str(tmp_path / "t")]) == 0
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["kind"] == "aiperf_steps" and meta["requests"] == 8


# ------------------------------------------------------------- a request with no verification step
def never_drafted(record):
    """The record as a run whose rounds drafted nothing (a prompt lookup that never matched)."""
    zeros = [0] * len(record["drafted_trace"])
    return {**record, "drafted_trace": zeros, "accepted_trace": zeros, "drafted": 0, "accepted": 0}


def test_a_request_that_never_drafted_has_a_record_and_imports_as_one(tmp_path):
    """AIPerf 0.13.0 writes a record for a vLLM request with no step (its adapter reads vLLM's zero-step block;
    the validator accepts it): an empty histogram, no per-step arrays. It imports as a request that never drafted."""
    path = FIXTURES / "zero_step.jsonl"
    traces, meta = import_traces(path)
    assert [t.n for t in traces] == [1, 12, 11] and meta["zero_step_requests"] == 2
    assert traces[1].proposals == [[]] * 11 and traces[1].extra["undrafted"] == 11
    assert replay(traces[2], build_policy("fixed", 3, {})).rounds.accepted[:3] == [2, 0, 3]
    pooled = import_stats(path)["pooled"]
    assert pooled["requests"] == 3 and pooled["total_spec_decode_steps"] == 3 and pooled["with_per_step"] == 3
    assert pooled["acceptance_length"] == (1.0 + 1.0 + (1 + 5 / 3)) / 3  # AIPerf's mean over records
    assert cli_main(["import", "aiperf", str(path), "--out", str(tmp_path / "t")]) == 0


def test_our_record_of_no_step_is_aiperfs():
    """``record`` of no step is what AIPerf's adapter makes of vLLM's zero-step block, field for field."""
    line = json.loads((FIXTURES / "zero_step.jsonl").read_text().splitlines()[1])
    ours = aiperf_record.line(aiperf_record.record([], [], 4, 12, engine="vllm"), {}, {})[aiperf_record.KEY]
    assert ours == line[aiperf_record.KEY]
    metrics = aiperf_record.spec_metrics(aiperf_record.check(ours))
    assert metrics == {t: v for t, v in line["metrics"].items() if t.startswith("spec_decode_")}
    assert "spec_decode_accepted_per_verified" not in metrics  # NoMetricValue in AIPerf: the tag is absent


def test_the_export_writes_a_record_of_no_step_for_rounds_that_never_drafted(tmp_path):
    record = read_records(job("specdecode", 4) / "records.jsonl")[0]
    lines, summary = export([never_drafted(record), {**record, "drafted_trace": [], "accepted_trace": [],
                                                     "gamma_trace": []}])
    zero, ar = lines
    assert summary["without_steps"] == 1 and summary["without_record"] == 1 and aiperf_record.KEY not in ar
    spec = zero[aiperf_record.KEY]
    assert spec["num_spec_steps"] == 0 and spec["acceptance_histogram"] == {} and "per_step_drafted" not in spec
    (trace,), meta = import_traces(write([zero], tmp_path / "p.jsonl"))
    assert trace.n == record["new_tokens"] and not any(trace.proposals) and meta["zero_step_requests"] == 1
