"""Reading one streamed ``/completion`` of ``llama-server`` (b11434): tokens, client times and rounds.

With ``stream``, ``timings_per_token`` and ``return_tokens`` every chunk is ``data: {...}`` with its ``tokens`` (one
token), ``tokens_predicted`` (tokens decoded so far) and ``timings``, which holds ``draft_n`` / ``draft_n_accepted``
(the request's drafted and accepted tokens so far; absent while 0) from the first round on
(``tools/server/server-common.cpp``: ``server_slot_stats::to_json``; ``server-context.cpp``:
``send_partial_response``, one chunk per token a verification accepts). The last chunk has ``stop: true`` and the
totals. A token that ends inside a UTF-8 character sends no chunk (``process_token``'s ``incomplete``): the stream
then holds fewer tokens than ``tokens_predicted`` (``Stream.missing``).

Rounds: each change of the counters is a round that drafted ``Δdraft_n`` and accepted ``Δdraft_n_accepted``, so it
emitted ``accepted + 1`` tokens; tokens decoded under unchanged counters beyond that are plain target steps
(no draft: an n-gram without a match, a p-min stop on the first token), recorded as rounds that drafted 0. The first
token is the prefill's, before any round. Where chunks are missing, a missing token is given to the round in
flight first, then to the round the next chunk shows beginning (the totals stay exact, and so does every round but
a one-token round whose only chunk is missing right before another round: the two are read as one; only a plain
step's place can move).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stream:
    """A read stream: the chunks with their client arrival times (ms after the request was sent)."""

    chunks: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return [int(t) for _, c in self.chunks if not c.get("stop") for t in c.get("tokens") or []]

    @property
    def final(self) -> dict[str, Any]:
        for _, c in reversed(self.chunks):
            if c.get("stop"):
                return c
        raise ValueError("the stream ended without its final chunk (stop: true)")

    @property
    def predicted(self) -> int:
        return int(self.final.get("tokens_predicted") or 0)

    @property
    def missing(self) -> int:
        return self.predicted - len(self.tokens)

    @property
    def token_times(self) -> list[float]:
        return [t for t, c in self.chunks if not c.get("stop") and c.get("tokens")]

    @property
    def wall_ms(self) -> float:
        return self.chunks[-1][0]

    @property
    def ttft_ms(self) -> float:
        times = self.token_times
        return times[0] if times else self.wall_ms

    def stop_reason(self) -> str:
        kind = self.final.get("stop_type")
        return {"eos": "eos", "limit": "max_new_tokens", "word": "stop_word"}.get(kind, str(kind))


def parse_sse(lines: Iterable[tuple[float, bytes | str]]) -> Stream:
    """``(arrival ms, raw line)`` pairs of a server-sent-events body into a ``Stream`` (blank lines skipped; an
    ``error`` chunk is raised with its message)."""
    stream = Stream()
    for t, raw in lines:
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        line = line.strip()
        if not line.startswith("data:"):
            continue
        body = line[len("data:"):].strip()
        if body == "[DONE]":
            continue
        chunk = json.loads(body)
        if "error" in chunk:
            raise RuntimeError(f"llama-server: {chunk['error']}")
        stream.chunks.append((float(t), chunk))
    return stream


def _counters(chunk: dict[str, Any]) -> tuple[int, int]:
    timings = chunk.get("timings") or {}
    return int(timings.get("draft_n") or 0), int(timings.get("draft_n_accepted") or 0)


def rounds_of(stream: Stream) -> tuple[list[int], list[int], list[float]]:
    """``(drafted, accepted, end_ms)`` per round (module docstring); ``end_ms``: when the round's first token
    arrived."""
    drafted: list[int] = []
    accepted: list[int] = []
    ends: list[float] = []
    body = [(t, c) for t, c in stream.chunks if not c.get("stop") and c.get("tokens")]
    if not body:
        return drafted, accepted, ends
    final = stream.final
    n_prev, d_prev, a_prev = 1, 0, 0  # the prefill's token, before any round
    left = 0  # tokens the round in flight has still to emit
    # the final chunk ends the walk: the tokens decoded after the last chunk sent (their chunks missing)
    for i, (t, chunk) in enumerate([*body, (stream.wall_ms, final)]):
        default = 1 if i == 0 else n_prev if chunk is final else n_prev + 1
        n = int(chunk.get("tokens_predicted") or default)
        d, a = _counters(chunk)
        k = n - n_prev  # tokens decoded since the previous chunk, this one's included
        own = min(left, k)  # the round in flight's
        left -= own
        rest = k - own
        if (d, a) != (d_prev, a_prev):  # a round began among the rest: its own first, unseen plain steps before it
            seen = min(rest, a - a_prev + 1)
            drafted.extend([0] * (rest - seen) + [d - d_prev])
            accepted.extend([0] * (rest - seen) + [a - a_prev])
            ends.extend([t] * (rest - seen + 1))
            left = a - a_prev + 1 - seen
        else:  # plain target steps
            drafted.extend([0] * rest)
            accepted.extend([0] * rest)
            ends.extend([t] * rest)
        n_prev, d_prev, a_prev = n, d, a
    return drafted, accepted, ends


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text (``/metrics``) as ``{name: value}`` for llama.cpp's ``llamacpp:*`` samples."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, _, value = line.partition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


DRAFT_TOTAL = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED_TOTAL = "llamacpp:spec_decode_num_accepted_tokens_total"
