"""Reading llama-server's streamed ``/completion`` (``runners.engine.llamacpp.stream``) on streams the real server
sent (``tests/fixtures/llamacpp/``, recorded by ``scripts/llamacpp_fixtures.py``): every round's drafted and accepted
tokens, checked against the server's own counters (the final chunk's and the ``/metrics`` deltas, per draft position
too), also when a chunk was never sent (a token inside a UTF-8 character)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runners.engine.llamacpp.stream import (
    ACCEPTED_TOTAL,
    DRAFT_TOTAL,
    Stream,
    metric_values,
    parse_sse,
    rounds_of,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.sse"))
SPECULATIVE = [n for n in NAMES if not n.startswith("alone")]
DRAFTS_TOTAL = "llamacpp:spec_decode_num_drafts_total"
PER_POSITION = re.compile(r'llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\}')


def lines(name: str) -> list[bytes]:
    return (FIXTURES / f"{name}.sse").read_bytes().splitlines(keepends=True)


def read(raw: list[bytes]) -> Stream:
    return parse_sse((float(i), line) for i, line in enumerate(raw, 1))  # arrival "times": the line numbers


def metrics_delta(name: str) -> dict[str, float]:
    before = metric_values((FIXTURES / f"{name}.metrics_before.txt").read_text())
    after = metric_values((FIXTURES / f"{name}.metrics_after.txt").read_text())
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def per_position(delta: dict[str, float]) -> dict[int, int]:
    return {int(m.group(1)): int(v) for k, v in delta.items() if (m := PER_POSITION.fullmatch(k))}


def check_rounds(stream: Stream, name: str, exact: bool = True) -> tuple[list[int], list[int]]:
    """The rounds of ``stream`` against every count the server kept of the request ``name`` (``exact``: per round
    too: its verification steps and its acceptance per draft position)."""
    drafted, accepted, ends = rounds_of(stream)
    timings, delta = stream.final["timings"], metrics_delta(name)
    assert sum(drafted) == timings.get("draft_n", 0) == delta.get(DRAFT_TOTAL, 0)
    assert sum(accepted) == timings.get("draft_n_accepted", 0) == delta.get(ACCEPTED_TOTAL, 0)
    if exact:
        assert sum(d > 0 for d in drafted) == delta.get(DRAFTS_TOTAL, 0)  # the server's verification steps
        # how many rounds accepted more than k tokens: the server's per-position acceptance
        assert {k: sum(a > k for a in accepted) for k in per_position(delta)} == per_position(delta)
    assert all(0 <= a <= d for d, a in zip(drafted, accepted, strict=True))
    # the prefill's token, then accepted + 1 per round (a plain step: 0 + 1)
    assert 1 + sum(a + 1 for a in accepted) == stream.predicted
    assert len(ends) == len(drafted) and ends == sorted(ends)
    return drafted, accepted


def counters(line: bytes) -> tuple[int, int]:
    timings = json.loads(line[len(b"data:"):])["timings"]
    return timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)


@pytest.mark.parametrize("name", NAMES)
def test_every_recorded_stream_gives_the_rounds_the_server_counted(name):
    stream = read(lines(name))
    assert stream.missing == 0 and len(stream.tokens) == stream.predicted == 64
    assert stream.stop_reason() == "max_new_tokens"
    assert 0 < stream.ttft_ms == stream.token_times[0] < stream.wall_ms
    drafted, _ = check_rounds(stream, name)
    if name.startswith("alone"):
        assert drafted == [0] * 63  # the target alone: one plain step per token after the prefill
    else:
        meta = json.loads((FIXTURES / "meta.json").read_text())["settings"][name.split("_")[0]]["flags"]
        n_max = max(int(meta[meta.index(f) + 1]) for f in ("--spec-draft-n-max", "--spec-ngram-simple-size-m")
                    if f in meta)
        assert max(drafted) == n_max  # no round drafts more than the server was told


@pytest.mark.parametrize("name", SPECULATIVE)
def test_a_chunk_never_sent_keeps_every_round_exact(name):
    """Each chunk in turn left out (the prefill's, a round's first, one inside a round, a plain step, the last):
    ``Stream.missing`` counts it, the totals and the tokens stay exact and so does every round, except a round of one
    token whose chunk was the one left out right before another round began: the two are read as one (their counters
    changed together)."""
    raw = lines(name)
    body = [i for i, line in enumerate(raw) if line.startswith(b"data:") and b'"stop":false' in line]
    final = next(line for line in reversed(raw) if b'"stop":true' in line)
    seen = [(0, 0), *(counters(raw[i]) for i in body), counters(final)]
    whole = rounds_of(read(raw))
    whole_rounds = sorted((d, a) for d, a in zip(*whole[:2], strict=True) if d)
    for j, i in enumerate(body, 1):
        stream = read(raw[:i] + raw[i + 1:])
        assert stream.missing == 1 and len(stream.tokens) == 63
        before, this, after = seen[j - 1], seen[j], seen[j + 1]
        merged = this != before and after != this
        drafted, accepted = check_rounds(stream, name, exact=not merged)
        expected = whole_rounds
        if merged:  # the two rounds' counters changed together
            one, two = (this[0] - before[0], this[1] - before[1]), (after[0] - this[0], after[1] - this[1])
            expected = list(whole_rounds)
            expected.remove(one)
            expected.remove(two)
            expected = sorted([*expected, (one[0] + two[0], one[1] + two[1])])
        assert sorted((d, a) for d, a in zip(drafted, accepted, strict=True) if d) == expected, i


def test_an_error_chunk_is_raised_with_its_message():
    raw = lines("draft_0")[:6] + [b'data: {"error": {"code": 500, "message": "context shift is disabled", '
                                  b'"type": "server_error"}}\n']
    with pytest.raises(RuntimeError, match="context shift is disabled"):
        read(raw)


def test_a_stream_without_its_final_chunk_is_refused():
    raw = [line for line in lines("draft_0") if b'"stop":true' not in line]
    stream = read(raw)
    assert len(stream.tokens) == 64  # every token arrived, but nothing says the request ended
    for what in (lambda: stream.final, lambda: stream.missing, lambda: rounds_of(stream)):
        with pytest.raises(ValueError, match="without its final chunk"):
            what()


def test_sse_framing_blank_lines_comments_and_done_are_skipped():
    raw = [b": keep-alive\n", b"\n", *lines("alone_0"), b"data: [DONE]\n"]
    stream = read(raw)
    assert stream.tokens == read(lines("alone_0")).tokens and len(stream.chunks) == 65
