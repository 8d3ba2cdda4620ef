"""Issue 41: vLLM's per-request, per-step acceptance (``speculative_decoding_stats`` at ``detailed``) as the lab's
traces. The fixture is written here from vLLM's documented fields; censoring (a step that accepted everything it
drafted), the cap, the refusal of policies the counts cannot drive, and a replay of the engine's own schedule."""

from __future__ import annotations

import json

import pytest

from methods.registry import build_policy
from runners.replay.cli import main as cli_main
from runners.replay.import_specdecode_bench import PLACEHOLDER, REJECTED, capped_rounds
from runners.replay.import_vllm import censored_rounds, import_traces, parse_line, to_trace, write_fixture
from runners.replay.replay import replay
from runners.replay.trace import read_traces


def stats(drafted, accepted, k=3):
    return {"num_spec_tokens": k, "num_spec_steps": len(drafted), "num_draft_tokens": sum(drafted),
            "num_accepted_draft_tokens": sum(accepted), "per_step_drafted": drafted, "per_step_accepted": accepted}


ROWS = [
    # steps at t = 1 (3 drafted, 1 accepted: rejection), t = 3 (3, 3: censored), t = 7 (2, 0), 2 undrafted tokens
    {"id": "r1", "prompt_tokens": 5, "completion_tokens": 10, "speculative_decoding_stats": stats([3, 3, 2], [1, 3, 0])},
    # an OpenAI-style chat response of one choice
    {"id": "chatcmpl-2", "usage": {"prompt_tokens": 7, "completion_tokens": 4},
     "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"},
                  "speculative_decoding_stats": stats([2], [2], k=2)}]},
]


@pytest.fixture
def data(tmp_path):
    return write_fixture(tmp_path / "responses.jsonl", ROWS)


def test_steps_become_positions_exact_after_a_rejection_and_censored_inside_a_full_acceptance(data):
    traces, meta = import_traces(data, pair="p")
    a, b = traces
    assert a.n == 10 and a.tokens == [PLACEHOLDER] * 10 and a.prompt_tokens == 5 and a.gamma_max == 3
    # t=1: agrees 1 then rejected, padded to k; t=2: agrees 0 (the step's accepted token's successor was rejected)
    assert a.proposals[0] == [PLACEHOLDER, REJECTED, REJECTED] and a.proposals[1] == [REJECTED] * 3
    # t=3..6: the step drafted 3 and accepted 3: 3, 2, 1, 0 tokens agree, nothing known beyond
    assert a.proposals[2:6] == [[PLACEHOLDER] * 3, [PLACEHOLDER] * 2, [PLACEHOLDER], []]
    assert a.extra["censored"] == [3, 4, 5, 6] and a.extra["exact_to"][2:6] == [3, 2, 1, 0]
    # t=7: drafted 2, accepted 0; the 2 tokens the steps do not cover propose nothing
    assert a.proposals[6] == [REJECTED] * 2 and a.proposals[7:] == [[], []] and a.extra["undrafted"] == 2
    assert a.agreements == [1, 0, 3, 2, 1, 0, 0, 0, 0]
    assert b.n == 4 and b.extra["censored"] == [1, 2, 3] and b.prompt_id == "chatcmpl-2"
    assert meta["censored_positions"] == 7 and meta["exact_positions"] == 9 + 3 - 7
    assert meta["cut"]["undrafted_tokens"] == 2 and len(meta["source"]["sha256"]) == 64


def test_the_engines_own_schedule_replays_exactly_and_longer_drafts_are_counted(data):
    a = import_traces(data)[0][0]
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


@pytest.mark.parametrize("row, message", [
    ({"id": "x", "prompt_tokens": 3, "speculative_decoding_stats": None}, "not an object"),
    ({"id": "x", "prompt_tokens": 3, "speculative_decoding_stats": {"num_spec_tokens": 3}}, "'detailed'"),
    ({"id": "x", "prompt_tokens": 3, "speculative_decoding_stats": stats([4], [1])}, "drafts 1..3"),
    ({"id": "x", "prompt_tokens": 3, "speculative_decoding_stats": stats([2], [3])}, "accepts <= drafted"),
    ({"id": "x", "speculative_decoding_stats": stats([2], [1])}, "prompt_tokens"),
])
def test_bad_lines_are_one_line_errors(row, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_line(row, "f.jsonl", 3)
    assert "\n" not in str(info.value) and "f.jsonl:3" in str(info.value)


def test_fewer_completion_tokens_than_the_steps_emitted_is_refused():
    req = parse_line({"id": "x", "prompt_tokens": 3, "completion_tokens": 2,
                      "speculative_decoding_stats": stats([2], [2])})[0]
    with pytest.raises(ValueError, match="completion_tokens 2"):
        to_trace(req)


def test_the_cli_imports_and_names_what_it_cannot_replay(data, tmp_path, capsys):
    assert cli_main(["import", "vllm", str(data), "--out", str(tmp_path / "t"), "--pair", "p"]) == 0
    err = capsys.readouterr().err
    assert "not replayable:" in err and "censored" in err
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["not_replayable"] and all("acceptance lengths only" in w for w in meta["not_replayable"].values())
    traces = read_traces(tmp_path / "t" / "trace.jsonl")
    assert [t.n for t in traces] == [10, 4] and traces[0].extra["censored"] == [3, 4, 5, 6]
    assert cli_main(["import", "vllm", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "u")]) == 2
