"""Greedy traces: everything a γ policy can ever see on a prompt, from one pass of each model.

For greedy decoding (temperature 0) the target's output ``x_1 .. x_N`` is fixed, and
whether a drafted token is accepted depends only on the draft's greedy rollout from
the target's prefix. So one trace per prompt lets ``runners.replay.replay`` reproduce the
rounds of *any* policy at *any* initial γ without running a model.

Positions. ``t`` = new tokens already emitted (the prefill emits ``x_1``, so every
round starts at some ``t >= 1``); the prefix at ``t`` is ``prompt + x_1 .. x_t``.

What a trace holds, per prompt turn (one JSON line of ``trace.jsonl``):

* ``tokens``: ``x_1 .. x_N``, the target's greedy output (``AutoregressiveRunner``),
  ending at an EOS or at ``max_new_tokens``;
* ``draft_next[t-1]``, ``draft_conf[t-1]`` for ``t = 1 .. N-1``: the draft's greedy
  token after the prefix at ``t`` and its probability (the confidence
  ``ModelDrafter`` shows ``stop_drafting``), and ``draft_entropy[t-1]``,
  ``draft_margin[t-1]``: the entropy and top-1/top-2 margin of that distribution
  (``runners.engine.features``: every feature a policy can ask for, so replay serves any policy);
* ``agreement[t-1]``: the agreement run length ``a_t`` = the number of leading
  rollout tokens from ``t`` equal to ``x_{t+1}, x_{t+2}, ...`` (derived:
  ``a_t = 1 + a_{t+1}`` when ``draft_next[t-1] == x_{t+1}``, else 0; ``a_N = 0``);
* ``tails``: for every *mismatch* position ``s`` (``a_s == 0``), the draft's greedy
  rollout from the prefix at ``s`` — ``[s, tokens, confidences]``, its first token
  being ``draft_next[s-1]`` — of ``min(gamma_max, max_new_tokens - 1 - s)`` tokens,
  or fewer when it drafts an EOS (the drafter stops after an EOS), with the same
  three features per token (``tail_features[s]``: entropies, margins).

``gamma_max`` defaults to ``max_new_tokens − 1``: the longest round any policy can ask for
(a round drafts at most ``remaining − 1`` tokens), so a default trace never refuses a
policy, however large its γ grows (``hf_heuristic`` has no cap).

The full rollout from any ``t`` follows, because a greedy rollout that agrees with
``x`` for ``j`` tokens continues exactly as the rollout from ``t + j``::

    rollout(t) = x_{t+1} .. x_{t+a_t}  ++  tails[t + a_t]
    confidences: draft_conf[t-1 .. t+a_t-2]  ++  the tail's confidences

so ``rollout(t)`` is known for at least ``min(gamma_max, max_new_tokens - 1 - t)``
tokens, which covers every round whose γ is ``<= gamma_max``; a larger γ is covered
when the agreement run makes up the difference (``Trace.rollout`` raises
``TraceTooShort`` otherwise: re-trace with a larger ``--gamma-max``). Storing the
tails only at mismatch positions (and not a γ_max-long rollout at every ``t``) is
lossless and much smaller.

How a trace is built (one pass of each model), how exact its rollouts are, and the drafts whose
outputs depend on how their input is chunked: ``runners.replay.trace_build``.

Confidences are stored as the shortest decimal that round-trips their float32
value (``unpack_conf`` restores the exact double the drafter passes on).

Version 2 (``TRACE_VERSION``) added the entropy and margin per rollout step; a version-1
file is refused with the command that rebuilds it. Prompt lookup pairs get a
``runners.replay.trace_lookup.LookupTrace`` (``kind: prompt_lookup``) in the same files, and the hybrid drafter's
``HybridTrace`` (``kind: hybrid``: this trace's model rollouts plus the lookup's proposal at every position;
``hybrid_of`` builds it; ``runners.replay.replay`` applies the hybrid's rule round by round).

Files: ``<out>/trace.jsonl`` (one line per prompt turn, in the job's prompt order)
and ``<out>/meta.json`` (pair, task, ``max_new_tokens``, ``gamma_max``, EOS ids,
provenance, build time). ``python -m runners.replay trace`` builds them, by default into ``<results_dir>/traces/<pair>__<task>__m<M>__<hash>/``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from runners.replay.trace_base import (
    TraceTooShort,
    TraceViews,
    pack_conf,
    unpack_conf,
    unpack_confs,
)
from runners.replay.trace_lookup import LookupTrace

#: ``None``: trace rollouts of ``max_new_tokens − 1`` tokens, as long as any round can draft
DEFAULT_GAMMA_MAX: int | None = None
TRACE_FILE = "trace.jsonl"
META_FILE = "meta.json"


@dataclass
class Trace(TraceViews):
    """One prompt turn's greedy trace (module docstring)."""

    draft_next: list[int]
    draft_conf: list[float]
    tails: dict[int, tuple[list[int], list[float]]]
    # entropy and margin of each draft_next / tail token (None: not traced, e.g. a synthetic trace)
    draft_entropy: list[float] | None = None
    draft_margin: list[float] | None = None
    tail_features: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if n < 1:
            raise ValueError("a trace needs at least one new token")
        if len(self.draft_next) != n - 1 or len(self.draft_conf) != n - 1:
            raise ValueError(f"draft_next/draft_conf need {n - 1} entries (positions 1..N-1)")
        for name in ("draft_entropy", "draft_margin"):
            values = getattr(self, name)
            if values is not None and len(values) != n - 1:
                raise ValueError(f"{name} needs {n - 1} entries (positions 1..N-1)")
        self.eos = tuple(int(e) for e in self.eos)
        self._eos = set(self.eos)
        # agreement run lengths a_t, t = 1..N (a_N = 0), stored 0-based: self._agree[t-1]
        agree = [0] * n
        for t in range(n - 1, 0, -1):
            agree[t - 1] = 1 + agree[t] if self.draft_next[t - 1] == self.tokens[t] else 0
        self._agree = agree
        for s, (toks, confs) in self.tails.items():
            if not 1 <= s <= n - 1 or agree[s - 1] != 0:
                raise ValueError(f"tail at position {s} is not a mismatch position")
            if not toks or len(toks) != len(confs) or toks[0] != self.draft_next[s - 1]:
                raise ValueError(f"tail at position {s} must start with draft_next[{s - 1}] and hold one "
                                 "confidence per token")
            feats = self.tail_features.get(s)
            if feats is not None and not len(feats[0]) == len(feats[1]) == len(toks):
                raise ValueError(f"tail at position {s}: one entropy and one margin per token")

    # ------------------------------------------------------------------ views
    def rollout(self, t: int, k: int) -> tuple[list[int], list[float]]:
        """The first ``k`` tokens (and confidences) of the draft's greedy rollout from position ``t``,
        fewer only when the rollout drafts an EOS first (drafting stops after it).
        Raises ``TraceTooShort`` when the trace does not hold that many."""
        toks, steps = self.rollout_steps(t, k)
        return toks, [f["confidence"] for f in steps]

    def _features(self, pos: int) -> dict[str, float]:
        """The features of ``draft_next[pos - 1]`` (entropy / margin only when traced)."""
        out = {"confidence": self.draft_conf[pos - 1]}
        if self.draft_entropy is not None:
            out["entropy"] = self.draft_entropy[pos - 1]
        if self.draft_margin is not None:
            out["margin"] = self.draft_margin[pos - 1]
        return out

    def rollout_steps(self, t: int, k: int) -> tuple[list[int], list[dict[str, float]]]:
        """``rollout`` with every traced feature of each token (``{"confidence", "entropy", "margin"}``)."""
        if not 1 <= t <= self.n - 1:
            raise ValueError(f"no rollout at position {t} (positions 1..{self.n - 1})")
        toks: list[int] = []
        confs: list[dict[str, float]] = []
        pos = t
        while len(toks) < k:
            a = self._agree[pos - 1] if pos < self.n else 0
            take = min(a, k - len(toks))
            for j in range(take):
                tok = self.tokens[pos + j]
                toks.append(tok)
                confs.append(self._features(pos + j))
                if tok in self._eos:
                    return toks, confs
            pos += take
            if len(toks) >= k:
                break
            tail = self.tails.get(pos)
            if tail is None:
                raise TraceTooShort(
                    f"{self.prompt_id}/turn {self.turn}: the rollout from position {t} is known for {len(toks)} "
                    f"tokens, {k} asked (gamma_max={self.gamma_max}); re-trace with a larger --gamma-max"
                )
            need = k - len(toks)
            t_toks, t_confs = tail
            feats = self.tail_features.get(pos)
            for i, c in enumerate(t_confs[:need]):
                f = {"confidence": c}
                if feats is not None:
                    f.update(entropy=feats[0][i], margin=feats[1][i])
                confs.append(f)
            toks += t_toks[:need]
            if len(t_toks) < need and not (t_toks and t_toks[-1] in self._eos):
                raise TraceTooShort(
                    f"{self.prompt_id}/turn {self.turn}: the rollout from position {t} is known for {len(toks)} "
                    f"tokens, {k} asked (gamma_max={self.gamma_max}); re-trace with a larger --gamma-max"
                )
            break
        return toks, confs

    def available(self, t: int, limit: int) -> int:
        """How many rollout tokens from ``t`` (at most ``limit``) the trace can give without raising."""
        pos, got = t, 0
        while got < limit:
            a = self._agree[pos - 1] if pos < self.n else 0
            take = min(a, limit - got)
            for j in range(take):
                if self.tokens[pos + j] in self._eos:
                    return got + j + 1
            got += take
            pos += take
            if got >= limit:
                break
            tail = self.tails.get(pos)
            if tail is None:
                return got
            return min(limit, got + len(tail[0]))
        return got

    # ------------------------------------------------------------------ (de)serialisation
    def to_json(self) -> dict[str, Any]:
        return self.head_json({
            "draft_next": self.draft_next,
            "draft_conf": [pack_conf(c) for c in self.draft_conf],
            "agreement": self.agreements,
            "draft_entropy": None if self.draft_entropy is None else [pack_conf(c) for c in self.draft_entropy],
            "draft_margin": None if self.draft_margin is None else [pack_conf(c) for c in self.draft_margin],
            "tails": [[s, toks, [pack_conf(c) for c in confs],
                       *([[pack_conf(c) for c in f] for f in self.tail_features[s]] if s in self.tail_features else [])]
                      for s, (toks, confs) in sorted(self.tails.items())],
        })

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Trace:
        kind = obj.get("kind", "model")
        if kind == HybridTrace.kind and cls is not HybridTrace:
            return HybridTrace.from_json(obj)
        if kind not in ("model", HybridTrace.kind):
            return LookupTrace.from_json(obj)
        unpack = unpack_confs
        trace = cls(
            **cls.head_kwargs(obj),
            draft_next=[int(x) for x in obj["draft_next"]],
            draft_conf=[unpack_conf(c) for c in obj["draft_conf"]],
            tails={int(row[0]): ([int(x) for x in row[1]], [unpack_conf(c) for c in row[2]]) for row in obj["tails"]},
            draft_entropy=unpack(obj.get("draft_entropy")),
            draft_margin=unpack(obj.get("draft_margin")),
            tail_features={int(row[0]): (unpack(row[3]), unpack(row[4])) for row in obj["tails"] if len(row) >= 5},
        )
        stored = obj.get("agreement")
        if stored is not None and list(stored) != trace.agreements:
            raise ValueError(f"{trace.prompt_id}: stored agreement run lengths disagree with draft_next")
        return trace


@dataclass
class HybridTrace(Trace):
    """A trace of the hybrid drafter (``runners.drafters.hybrid.HybridDrafter``): the draft model's greedy rollouts
    (``Trace``'s fields) and, at every position ``t``, the prompt-lookup proposal (``lookup[t − 1]``, as
    ``LookupTrace`` stores it), with the hybrid's own settings. A round at ``t`` with budget ``b`` is the
    hybrid's (``source``): the lookup's first ``b`` tokens when they are at least ``min_lookup_tokens`` (no draft
    forward, no confidences, ``stop_drafting`` not asked), else the model's rollout of ``min(b,
    max_model_tokens)`` tokens; its acceptance is that proposal's agreement with the output (``agreement_of``)."""

    lookup: list[list[int]] = field(default_factory=list)
    min_lookup_tokens: int = 1
    max_model_tokens: int | None = None
    kind = "hybrid"
    chooses_source = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.lookup) != self.n - 1:
            raise ValueError(f"lookup needs {self.n - 1} proposals (positions 1..N-1)")
        agree = []
        for t, prop in enumerate(self.lookup, start=1):
            a = 0
            while a < len(prop) and t + a < self.n and prop[a] == self.tokens[t + a]:
                a += 1
            agree.append(a)
        self._lookup_agree = agree + [0]

    def source(self, t: int, budget: int) -> str:
        """``lookup`` or ``model``: what proposes the round at ``t`` with ``budget`` tokens (the hybrid's rule)."""
        return "lookup" if len(self.lookup[t - 1][: max(0, budget)]) >= self.min_lookup_tokens else "model"

    def agreement_of(self, source: str, t: int) -> int:
        if source == "lookup":
            return self._lookup_agree[t - 1] if t <= self.n else 0
        return self.agreement(t)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "lookup": self.lookup,
                "hybrid": {"min_lookup_tokens": self.min_lookup_tokens, "max_model_tokens": self.max_model_tokens}}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> HybridTrace:
        model = Trace.from_json({k: v for k, v in obj.items() if k != "kind"})
        own = obj.get("hybrid") or {}
        return cls(**{f.name: getattr(model, f.name) for f in fields(Trace) if f.init},
                   lookup=[[int(x) for x in p] for p in obj["lookup"]],
                   min_lookup_tokens=int(own.get("min_lookup_tokens") or 1), max_model_tokens=own.get("max_model_tokens"))


def hybrid_of(trace: Trace, lookup: Any, prompt_ids: list[int], min_lookup_tokens: int = 1,
              max_model_tokens: int | None = None) -> HybridTrace:
    """The hybrid drafter's trace from the draft model's ``trace`` of one prompt turn and its prompt-lookup drafter
    (``runners.drafters.prompt_lookup.PromptLookupDrafter``): the lookup's proposal at every position, as long as
    any round can ask (``min(gamma_max, max_new_tokens − 1 − t)``, as ``build_lookup_trace`` takes them)."""
    ids = list(prompt_ids) + list(trace.tokens)
    p = len(prompt_ids)
    proposals = [lookup.lookup(ids[: p + t], min(trace.gamma_max, trace.max_new_tokens - 1 - t))
                 for t in range(1, trace.n)]
    return HybridTrace(**{f.name: getattr(trace, f.name) for f in fields(Trace) if f.init}, lookup=proposals,
                       min_lookup_tokens=int(min_lookup_tokens), max_model_tokens=max_model_tokens)


# ---------------------------------------------------------------------- files

def write_traces(path: str | os.PathLike, traces: Iterable[Trace], append: bool = False) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a" if append else "w", encoding="utf-8") as fh:
        for tr in traces:
            fh.write(json.dumps(tr.to_json(), allow_nan=False) + "\n")
            fh.flush()


def read_traces(path: str | os.PathLike) -> list[Trace]:
    """Every complete line of a ``trace.jsonl`` (a torn last line is skipped), in file order."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            if line.strip():
                out.append(Trace.from_json(json.loads(line)))
    return out


def find_trace_files(root: str | os.PathLike) -> list[Path]:
    """``trace.jsonl`` files at or under ``root`` (a file is returned as is)."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(root.rglob(TRACE_FILE))
