"""Issues 41 and 49: vLLM's per-request, per-step acceptance (``metrics.speculative_decoding`` at
``--per-request-spec-decode-metrics detailed``, vLLM ≥ 0.29) as the lab's traces. The fixtures
(``tests/fixtures/vllm``, provenance in its README) are written from vLLM's docs and PR #48915: every shape a user
has (a body, a final usage chunk, a logged SSE stream, offline, the pre-release draft), the failures, a last step cut
by a stop; censoring, the cap, the refusal of policies the counts cannot drive, and a replay of the engine's own
schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from methods.policies import build_policy
from runners.replay.commands import main as cli_main
from runners.replay.import_specdecode_bench import PLACEHOLDER, REJECTED, capped_rounds
from runners.replay.import_vllm import censored_rounds, import_traces, to_trace
from runners.replay.replay import replay
from runners.replay.trace import read_traces
from runners.replay.vllm_metrics import block, read_requests, requests_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"


def test_steps_become_positions_exact_after_a_rejection_and_censored_inside_a_full_acceptance():
    traces, meta = import_traces(FIXTURES / "response_detailed.jsonl", pair="p")
    a, b = traces
    assert a.n == 10 and a.tokens == [PLACEHOLDER] * 10 and a.prompt_tokens == 5 and a.gamma_max == 3
    assert a.prompt_id == "cmpl-7f3a" and a.extra["shape"] == "response"
    # t=1: agrees 1 then rejected, padded to k; t=2: agrees 0 (the step's accepted token's successor was rejected)
    assert a.proposals[0] == [PLACEHOLDER, REJECTED, REJECTED] and a.proposals[1] == [REJECTED] * 3
    # t=3..6: the step drafted 3 and accepted 3: 3, 2, 1, 0 tokens agree, nothing known beyond
    assert a.proposals[2:6] == [[PLACEHOLDER] * 3, [PLACEHOLDER] * 2, [PLACEHOLDER], []]
    assert a.extra["censored"] == [3, 4, 5, 6] and a.extra["exact_to"][2:6] == [3, 2, 1, 0]
    # t=7: drafted 2, accepted 0; the 2 tokens the steps do not cover propose nothing
    assert a.proposals[6] == [REJECTED] * 2 and a.proposals[7:] == [[], []] and a.extra["undrafted"] == 2
    assert a.agreements == [1, 0, 3, 2, 1, 0, 0, 0, 0] and a.extra["clipped_tokens"] == 0
    assert meta["cut"]["undrafted_tokens"] == 2 and len(meta["source"]["sha256"]) == 64
    assert meta["source"]["shapes"] == {"response": 2}


def test_a_last_step_cut_by_a_stop_is_clipped_to_completion_tokens_and_counted():
    # chatcmpl-91c2: steps (3 drafted, 2 accepted) at t=1 and (3, 3) at t=4 emit 8 tokens; usage says 6 (an EOS
    # inside the second step's accepted drafts, vLLM issue #56101): the last step emitted 2 of its 4
    traces, meta = import_traces(FIXTURES / "response_detailed.jsonl")
    b = traces[1]
    assert b.n == 6 and b.extra["clipped_tokens"] == 2 and b.extra["undrafted"] == 0
    assert b.agreements == [2, 1, 0, 1, 0]  # t=4, 5: every budget min(γ, N − t − 1) agrees
    assert b.extra["censored"] == [] and b.extra["exact_to"][3:] == [3, 3]
    assert meta["clipped_steps"] == 1 and meta["cut"]["clipped_tokens"] == 2
    res = replay(b, build_policy("fixed", 3, {}))
    assert res.rounds.accepted == [2, 1] and res.new_tokens == 6  # the engine's rounds, cut where it stopped


def test_only_the_last_step_can_be_cut():
    req = {"id": "x", "prompt_tokens": 3, "completion_tokens": 3, "k": 2, "drafted": [2, 2], "accepted": [2, 0],
           "shape": "response"}  # the first step alone emits 1 + 3 = 4 > 3 tokens
    with pytest.raises(ValueError, match="only the last step can be cut") as info:
        to_trace(req)
    assert "\n" not in str(info.value)
    assert to_trace({**req, "completion_tokens": 5}).extra["clipped_tokens"] == 0  # 1 + 3 + 1 = 5: no cut


@pytest.mark.parametrize("name, expect", [
    ("final_usage_chunk.jsonl", [("cmpl-final", 8, [4, 4], [4, 1], "usage chunk")]),
    ("stream_detailed.sse", [("chatcmpl-s1", 4, [3], [1], "stream"), ("cmpl-s2", 9, [2, 2, 1], [2, 0, 1], "stream")]),
    ("offline_detailed.jsonl", [("0", 6, [2, 2], [1, 2], "offline"), ("1", 7, [2, 0, 2], [1, 0, 2], "offline")]),
    ("pre_release.jsonl", [("chatcmpl-pre", 10, [3, 3, 2], [1, 3, 0], "pre-release")]),
])
def test_every_shape_a_vllm_user_has_is_read(name, expect):
    got = [(r["id"], r["completion_tokens"], r["drafted"], r["accepted"], r["shape"]) for r in read_requests(FIXTURES / name)]
    assert got == expect
    traces, _ = import_traces(FIXTURES / name)
    assert [t.n for t in traces] == [e[1] for e in expect]


def test_a_step_left_without_drafts_proposes_nothing_in_place():
    tr = import_traces(FIXTURES / "offline_detailed.jsonl")[0][1]  # steps (2, 1), (0, 0), (2, 2)
    assert tr.proposals[2] == [] and tr.agreements == [1, 0, 0, 2, 1, 0] and tr.extra["undrafted"] == 0


def test_a_logged_pretty_printed_body_is_one_response(tmp_path):
    body = json.loads((FIXTURES / "response_detailed.jsonl").read_text().splitlines()[0])
    (tmp_path / "body.json").write_text(json.dumps(body, indent=2))
    assert [(r["id"], r["drafted"]) for r in read_requests(tmp_path / "body.json")] == [("cmpl-7f3a", [3, 3, 2])]


@pytest.mark.parametrize("name, says", [
    ("summary_level.jsonl", ["'summary' level", "--per-request-spec-decode-metrics detailed"]),
    ("null_block_n2.jsonl", ["is null", "n = 1", "--per-request-spec-decode-metrics detailed"]),
    ("response_without_metrics.jsonl", ["no metrics.speculative_decoding", "--per-request-spec-decode-metrics detailed"]),
    ("stream_without_usage.sse", ["without its usage chunk", "stream_options.include_usage",
                                  "--per-request-spec-decode-metrics detailed"]),
])
def test_what_cannot_be_read_fails_in_one_line_saying_how_to_start_the_server(name, says, tmp_path, capsys):
    out = tmp_path / "t"
    assert cli_main(["import", "vllm", str(FIXTURES / name), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: ") and all(s in err for s in says), err
    assert not out.exists()  # nothing written


def test_one_bad_line_refuses_the_whole_file_writing_nothing(tmp_path):
    good = (FIXTURES / "response_detailed.jsonl").read_text()
    bad = (FIXTURES / "summary_level.jsonl").read_text()
    (tmp_path / "mixed.jsonl").write_text(good + bad)
    assert cli_main(["import", "vllm", str(tmp_path / "mixed.jsonl"), "--out", str(tmp_path / "t")]) == 2
    assert not (tmp_path / "t").exists()


def stats(drafted, accepted, k=3):
    return {"num_spec_tokens": k, "num_spec_steps": len(drafted), "num_draft_tokens": sum(drafted),
            "num_accepted_draft_tokens": sum(accepted), "per_step_drafted": drafted, "per_step_accepted": accepted}


@pytest.mark.parametrize("spec, message", [
    ({"num_spec_tokens": 3}, "no num_spec_steps: not vLLM's block"),
    ({"num_spec_tokens": 3, "num_spec_steps": 2, "acceptance_histogram": [1, 0, 1, 0]},
     "counts 2 verification steps but carries no per_step_drafted / per_step_accepted \\(the 'summary' level\\)"),
    ({**stats([], []), "num_draft_tokens": 3}, "num_draft_tokens is 3 but the per-step arrays say 0"),
    ({**stats([3, 3], [1, 2]), "acceptance_histogram": [0, 2, 0, 0]}, "disagrees with per_step_accepted"),
    ({**stats([2], [1]), "acceptance_histogram": [0, 1]}, "acceptance_histogram is not 4 counts"),
    (stats([4], [1]), "drafts 0..3"),
    (stats([2], [3]), "accepts <= drafted"),
    ({**stats([2], [1]), "num_spec_steps": 2}, "num_spec_steps is 2 but the per-step arrays say 1"),
    ({**stats([2], [1]), "num_accepted_draft_tokens": 2}, "num_accepted_draft_tokens is 2"),
])
def test_bad_blocks_are_one_line_errors(spec, message):
    row = {"id": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 4}, "metrics": {"speculative_decoding": spec}}
    with pytest.raises(ValueError, match=message) as info:
        requests_of(row, "f.jsonl", 3)
    assert "\n" not in str(info.value) and "f.jsonl:3" in str(info.value)


def test_a_null_metrics_object_says_what_the_request_needs():
    with pytest.raises(ValueError, match="n = 1"):
        requests_of({"usage": {"prompt_tokens": 3}, "metrics": None}, "f.jsonl", 1)


def test_the_fixtures_blocks_agree_with_the_docs_definitions():
    """``vllm_metrics.block`` (the exporter's writer) computes the totals, rates and histograms the hand-written
    fixtures state from vLLM's docs."""
    for name in ("response_detailed.jsonl", "final_usage_chunk.jsonl"):
        for line in (FIXTURES / name).read_text().splitlines():
            spec = json.loads(line)["metrics"]["speculative_decoding"]
            assert block(spec["per_step_drafted"], spec["per_step_accepted"], spec["num_spec_tokens"]) == spec


def test_the_block_reproduces_the_example_of_vllms_docs():
    """PR #48915's and the docs' example: histogram [39, 1, 0, 3] of 43 steps at k = 3 (each drafted 3)."""
    accepted = [0] * 39 + [1] + [3] * 3
    spec = block([3] * 43, accepted, 3, level="summary")
    assert spec["mean_acceptance_length"] == 1.2325581395348837 and spec["draft_acceptance_rate"] == 0.07751937984496124
    assert spec["acceptance_histogram"] == [39, 1, 0, 3] and spec["acceptance_histogram_by_draft_length"] == {
        "3": [39, 1, 0, 3]}
    assert (spec["num_spec_steps"], spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]) == (43, 10, 129)
    assert "per_step_accepted" not in spec


def test_the_engines_own_schedule_replays_exactly_and_longer_drafts_are_counted():
    a = import_traces(FIXTURES / "response_detailed.jsonl")[0][0]
    res = replay(a, build_policy("fixed", 3, {}))
    assert res.rounds.accepted[:3] == [1, 3, 0]  # the engine's k = 3: its own steps, exactly
    assert censored_rounds(res, a) == 0 and capped_rounds(res, 3) == 0
    longer = replay(a, build_policy("fixed", 5, {}))
    assert capped_rounds(longer, 3) >= 1  # asks 5 where the engine drafted 3: drafts 3 (rule cap)
    # a γ = 1 policy reaches t = 3, 4, 5: inside the censored step, asking no more than is known there
    assert censored_rounds(replay(a, build_policy("fixed", 1, {})), a) == 0
    # γ = 2 at t = 5 (1 known) asks more than is known: counted
    two = replay(a, build_policy("fixed", 2, {}))
    assert censored_rounds(two, a) >= 1


def test_the_cli_imports_and_names_what_it_cannot_replay(tmp_path, capsys):
    data = FIXTURES / "response_detailed.jsonl"
    assert cli_main(["import", "vllm", str(data), "--out", str(tmp_path / "t"), "--pair", "p"]) == 0
    err = capsys.readouterr().err
    assert "not replayable:" in err and "censored" in err and "1 last steps clipped (2 tokens" in err
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["not_replayable"] and all("acceptance lengths only" in w for w in meta["not_replayable"].values())
    assert meta["clipped_steps"] == 1
    traces = read_traces(tmp_path / "t" / "trace.jsonl")
    assert [t.n for t in traces] == [10, 6] and traces[0].extra["censored"] == [3, 4, 5, 6]
    assert cli_main(["import", "vllm", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "u")]) == 2


# ------------------------------------------- vLLM 0.29.0's own shapes: no step, the summary level, the dataclass
@pytest.mark.parametrize("name, expect", [
    # bodies as model_dump() writes them (arrays null); the third drafted (3, 2), (3, 0), (3, 3)
    ("zero_step_v0290.jsonl", [("cmpl-zero-max1", 1, []), ("cmpl-zero-ngram", 12, []),
                               ("cmpl-detailed", 11, [3, 3, 3])]),
    ("zero_step_stream.sse", [("chatcmpl-zero", 1, [])]),  # a stream's usage chunk, exclude_none (arrays absent)
])
def test_a_request_that_never_drafted_is_read_as_one(name, expect, tmp_path, capsys):
    """``RequestSpecDecodeMetrics.to_dict`` leaves the per-step arrays out of a request with no step, at either
    level: it is a request that never drafted, not the summary level, and the file imports."""
    reqs = read_requests(FIXTURES / name)
    assert [(r["id"], r["completion_tokens"], r["drafted"]) for r in reqs] == expect
    traces, meta = import_traces(FIXTURES / name)
    for req, tr in zip(reqs, traces, strict=True):
        if not req["drafted"]:
            assert tr.n == req["completion_tokens"] and tr.proposals == [[]] * (tr.n - 1)
            assert tr.extra["undrafted"] == tr.n - 1 and tr.extra["steps"] == 0
            assert not any(replay(tr, build_policy("fixed", 3, {})).rounds.drafted)  # nothing drafts on it
    assert meta["zero_step_requests"] == sum(not r["drafted"] for r in reqs)
    assert cli_main(["import", "vllm", str(FIXTURES / name), "--out", str(tmp_path / "t")]) == 0
    assert f"{meta['zero_step_requests']} requests never drafted" in capsys.readouterr().err


def test_the_detailed_request_beside_them_keeps_its_steps():
    tr = import_traces(FIXTURES / "zero_step_v0290.jsonl")[0][2]
    assert replay(tr, build_policy("fixed", 3, {})).rounds.accepted[:3] == [2, 0, 3]
    assert tr.extra["undrafted"] == 2  # 1 + 3 + 1 + 4 = 9 of 11 tokens come from the steps


@pytest.mark.parametrize("name, says", [
    ("summary_level_v0290.jsonl", ["metrics.speculative_decoding counts 43 verification steps", "'summary' level",
                                   "start the server with --per-request-spec-decode-metrics detailed"]),
    ("offline_dataclass_summary.jsonl", ["spec_decode_metrics counts 3 verification steps", "'summary' level",
                                         "pass per_request_spec_decode_metrics='detailed' to LLM(...)"]),
])
def test_the_summary_level_is_told_by_its_own_step_count(name, says, tmp_path, capsys):
    """A summary dump counts steps (``num_spec_steps``, or the dataclass's histogram) and carries no arrays (null in
    a body, ``[]`` in ``dataclasses.asdict``): refused in one line naming the server's flag or ``LLM``'s keyword."""
    assert cli_main(["import", "vllm", str(FIXTURES / name), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(s in err for s in says), err
    assert not (tmp_path / "t").exists()


def test_the_offline_dataclass_is_read_as_asdict_gives_it():
    """``CompletionOutput.spec_decode_metrics`` is ``RequestSpecDecodeMetrics`` (vLLM 0.29.0): ``histogram``,
    ``num_draft_tokens`` and the arrays, ``[]`` without a step; a ``RequestOutput`` of n = 2 has one per output."""
    got = [(r["id"], r["completion_tokens"], r["k"], r["drafted"], r["accepted"], r["shape"])
           for r in read_requests(FIXTURES / "offline_dataclass.jsonl")]
    assert got == [("0", 7, 2, [2, 0, 2], [1, 0, 2], "offline dataclass"), ("1", 5, 2, [], [], "offline dataclass"),
                   ("2/0", 3, 2, [2], [0], "offline dataclass"), ("2/1", 3, 2, [], [], "offline dataclass")]
    traces, meta = import_traces(FIXTURES / "offline_dataclass.jsonl")
    assert traces[0].agreements == [1, 0, 0, 2, 1, 0] and meta["zero_step_requests"] == 2
    assert meta["source"]["shapes"] == {"offline dataclass": 4}


@pytest.mark.parametrize("bend, message", [
    ({"histogram": [0, 3, 0]}, "histogram \\[0, 3, 0\\] disagrees with per_step_accepted"),
    ({"histogram": [1, 1]}, "histogram is not 3 counts"),
    ({"num_draft_tokens": 5}, "num_draft_tokens is 5 but the per-step arrays say 4"),
    ({"per_step_drafted": [2, 2]}, "not two lists of counts of one length"),
])
def test_a_dataclass_that_contradicts_itself_fails_in_one_line(bend, message):
    line = json.loads((FIXTURES / "offline_dataclass.jsonl").read_text().splitlines()[0])
    line["spec_decode_metrics"] = {**line["spec_decode_metrics"], **bend}
    with pytest.raises(ValueError, match=message) as info:
        requests_of(line, "o.jsonl", 1)
    assert "\n" not in str(info.value) and str(info.value).startswith("o.jsonl:1: ")


def test_a_null_offline_output_names_llms_keyword():
    with pytest.raises(ValueError, match="per_request_spec_decode_metrics='detailed' to LLM") as info:
        requests_of({"request_id": "0", "prompt_token_ids": [1], "token_ids": [2], "spec_decode_metrics": None})
    assert "n = 1" not in str(info.value)  # offline, every output has its own: n is not the cause
