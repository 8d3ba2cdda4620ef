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

Exactness. The rollouts are computed as ``ModelDrafter`` computes drafts: one draft
KV cache, the prompt plus ``x_1`` fed in one forward, then one token per forward
(``logits[0, -1]``, ``argmax``, ``float(softmax(logits.float())[tok])``); a tail is
rolled out on the same cache and cropped back. A real run feeds the draft 1–3
tokens per catch-up forward (the last drafted token and the target's bonus token
after a fully accepted round), so for an fp32/bf16 draft it computes the same
numbers up to float rounding (fp32: logits ~1e-5 apart, confidences ~1e-7): a replay
can differ from a real run only where the draft has a near-tie between its top two
logits or a confidence lies within ~1e-6 of a stop threshold. ``near_ties`` counts
the rollout steps whose top-2 logit gap is below ``NEAR_TIE``. Same for the target:
the trace assumes the speculative run is lossless (``verify_lossless`` checks it).
``tests/test_replay.py`` checks replay == real runs round for round on tiny fp32 models.

Chunk-dependent drafts (``chunk_invariant(model)`` is False), e.g. the default pair's
``transform: int8_dynamic`` draft: torch's dynamic quantization scales each Linear's
input *per tensor*, so a token fed together with another (a 2-token catch-up) is
quantized differently from the same token fed alone — Gemma-3-270M int8: logits up to
~2.4 apart, a confidence 0.905 vs 0.884. Such a draft's proposals depend on the
policy's own history of catch-up chunks, so no single trace reproduces every policy's
rounds: the trace holds the rollouts of a drafter that feeds one token per forward,
and replayed rounds drift from a real run's after a few rounds (on 2 prompts × 32
tokens, rounds diverged from round 2–9 on; aggregate acceptance stayed within ~0.03:
``scripts/validate_replay.py``). ``scripts/validate_replay.py --single-token-catchup``
runs the real loop with a drafter that feeds its catch-up one token per forward and
then matches the replay round for round on that pair.

``mode="batched"`` computes ``draft_next`` in one forward of the whole sequence and
the tails of up to 32 mismatch positions in one batched forward per step (the shared
prefix cache repeated, a 2-D mask hiding each row's future, explicit positions): same
mathematics, different rounding (tested: same tokens, confidences within 1e-5; ~6×
faster on Gemma-3-270M fp32). It falls back to ``sequential`` for chunk-dependent drafts
and for sliding-window models whose sequence is longer than the window.

Confidences are stored as the shortest decimal that round-trips their float32
value (``unpack_conf`` restores the exact double the drafter passes on).

Version 2 (``TRACE_VERSION``) added the entropy and margin per rollout step; a version-1
file is refused with the command that rebuilds it. Prompt lookup pairs get a
``runners.replay.trace_lookup.LookupTrace`` (``kind: prompt_lookup``) in the same files.

Files: ``<out>/trace.jsonl`` (one line per prompt turn, in the job's prompt order)
and ``<out>/meta.json`` (pair, task, ``max_new_tokens``, ``gamma_max``, EOS ids,
provenance, build time). ``python -m runners.replay trace`` builds them, by default into ``<results_dir>/traces/<pair>__<task>__m<M>__<hash>/``.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.replay.trace_base import (
    TRACE_VERSION,
    TraceTooShort,
    TraceViews,
    check_version,
    pack_conf,
    target_pass,
    unpack_conf,
    unpack_confs,
)
from runners.replay.trace_lookup import LookupTrace

log = logging.getLogger("specbench")

#: ``None``: trace rollouts of ``max_new_tokens − 1`` tokens, as long as any round can draft
DEFAULT_GAMMA_MAX: int | None = None
#: top-2 logit gap below which a rollout step counts as a near-tie (its argmax could flip by rounding)
NEAR_TIE = 1e-4
TRACE_FILE = "trace.jsonl"
META_FILE = "meta.json"


@dataclass
class Trace(TraceViews):
    """One prompt turn's greedy trace (module docstring)."""

    prompt_id: str
    turn: int
    prompt_tokens: int
    max_new_tokens: int
    gamma_max: int
    eos: tuple[int, ...]
    tokens: list[int]
    draft_next: list[int]
    draft_conf: list[float]
    tails: dict[int, tuple[list[int], list[float]]]
    category: str = ""
    stop_reason: str = ""
    pair: str = ""
    task: str = ""
    target: str = ""
    draft: str = ""
    ar_wall_ms: float | None = None
    ar_ttft_ms: float | None = None
    near_ties: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # entropy and margin of each draft_next / tail token (None: not traced, e.g. a synthetic trace)
    draft_entropy: list[float] | None = None
    draft_margin: list[float] | None = None
    tail_features: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)
    kind = "model"

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
        return {
            "trace_version": TRACE_VERSION,
            "pair": self.pair,
            "task": self.task,
            "target": self.target,
            "draft": self.draft,
            "prompt_id": self.prompt_id,
            "turn": self.turn,
            "category": self.category,
            "prompt_tokens": self.prompt_tokens,
            "max_new_tokens": self.max_new_tokens,
            "gamma_max": self.gamma_max,
            "eos": list(self.eos),
            "new_tokens": self.n,
            "stop_reason": self.stop_reason,
            "tokens": self.tokens,
            "draft_next": self.draft_next,
            "draft_conf": [pack_conf(c) for c in self.draft_conf],
            "agreement": self.agreements,
            "draft_entropy": None if self.draft_entropy is None else [pack_conf(c) for c in self.draft_entropy],
            "draft_margin": None if self.draft_margin is None else [pack_conf(c) for c in self.draft_margin],
            "tails": [[s, toks, [pack_conf(c) for c in confs],
                       *([[pack_conf(c) for c in f] for f in self.tail_features[s]] if s in self.tail_features else [])]
                      for s, (toks, confs) in sorted(self.tails.items())],
            "ar_wall_ms": self.ar_wall_ms,
            "ar_ttft_ms": self.ar_ttft_ms,
            "near_ties": self.near_ties,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Trace:
        check_version(obj)
        if obj.get("kind", "model") != "model":
            return LookupTrace.from_json(obj)
        unpack = unpack_confs
        trace = cls(
            prompt_id=str(obj["prompt_id"]),
            turn=int(obj.get("turn", 1)),
            prompt_tokens=int(obj["prompt_tokens"]),
            max_new_tokens=int(obj["max_new_tokens"]),
            gamma_max=int(obj["gamma_max"]),
            eos=tuple(obj.get("eos") or ()),
            tokens=[int(x) for x in obj["tokens"]],
            draft_next=[int(x) for x in obj["draft_next"]],
            draft_conf=[unpack_conf(c) for c in obj["draft_conf"]],
            tails={int(row[0]): ([int(x) for x in row[1]], [unpack_conf(c) for c in row[2]]) for row in obj["tails"]},
            category=str(obj.get("category") or ""),
            stop_reason=str(obj.get("stop_reason") or ""),
            pair=str(obj.get("pair") or ""),
            task=str(obj.get("task") or ""),
            target=str(obj.get("target") or ""),
            draft=str(obj.get("draft") or ""),
            ar_wall_ms=obj.get("ar_wall_ms"),
            ar_ttft_ms=obj.get("ar_ttft_ms"),
            near_ties=int(obj.get("near_ties") or 0),
            extra=dict(obj.get("extra") or {}),
            draft_entropy=unpack(obj.get("draft_entropy")),
            draft_margin=unpack(obj.get("draft_margin")),
            tail_features={int(row[0]): (unpack(row[3]), unpack(row[4])) for row in obj["tails"] if len(row) >= 5},
        )
        stored = obj.get("agreement")
        if stored is not None and list(stored) != trace.agreements:
            raise ValueError(f"{trace.prompt_id}: stored agreement run lengths disagree with draft_next")
        return trace


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


# ---------------------------------------------------------------------- building

def _greedy(logits: Any) -> tuple[int, tuple[float, float, float], float]:
    """``ModelDrafter``'s greedy token and its features ``(confidence, entropy, margin)`` (the same ops,
    ``runners.engine.features``), plus the top-2 logit gap."""
    import torch

    from runners.engine.features import ALL, draft_features

    tok = int(logits.argmax())
    f = draft_features(logits, tok, ALL)
    top2 = torch.topk(logits.float(), 2).values if logits.shape[-1] > 1 else None
    gap = float(top2[0] - top2[1]) if top2 is not None else float("inf")
    return tok, (f["confidence"], f["entropy"], f["margin"]), gap


class _TieCounter:
    def __init__(self) -> None:
        self.n = 0

    def add(self, gap: float) -> None:
        if gap < NEAR_TIE:
            self.n += 1


@dataclass
class _Rollouts:
    """What a draft pass collects: ``draft_next`` and its features at every position, and the tails
    (``s -> [tokens, confidences, entropies, margins]``)."""

    draft_next: list[int] = field(default_factory=list)
    feats: list[tuple[float, float, float]] = field(default_factory=list)
    tails: dict[int, list[list]] = field(default_factory=dict)

    def add(self, tok: int, feats: tuple[float, float, float]) -> None:
        self.draft_next.append(tok)
        self.feats.append(feats)

    def start_tail(self, s: int) -> list[list]:
        c, e, m = self.feats[s - 1]
        row = [[self.draft_next[s - 1]], [c], [e], [m]]
        self.tails[s] = row
        return row

    @staticmethod
    def extend(row: list[list], tok: int, feats: tuple[float, float, float]) -> None:
        row[0].append(tok)
        for col, value in zip(row[1:], feats):
            col.append(value)

    def trace_fields(self) -> dict[str, Any]:
        return {
            "draft_next": self.draft_next,
            "draft_conf": [f[0] for f in self.feats],
            "draft_entropy": [f[1] for f in self.feats],
            "draft_margin": [f[2] for f in self.feats],
            "tails": {s: (row[0], row[1]) for s, row in self.tails.items()},
            "tail_features": {s: (row[2], row[3]) for s, row in self.tails.items()},
        }


def _draft_pass_sequential(
    draft: Any, ids: list[int], n_prompt: int, x: list[int], max_new_tokens: int, gamma_max: int,
    eos: set[int], ties: _TieCounter,
) -> _Rollouts:
    import torch

    from runners.engine.kv import cache_arg, crop_to, new_cache

    device = next(draft.parameters()).device
    cache = new_cache(draft)
    n = len(x)
    out = _Rollouts()
    feed = ids[: n_prompt + 1]
    for t in range(1, n):  # the cache holds ids[:n_prompt + t] after this forward
        logits = draft(input_ids=torch.tensor([feed], device=device), **cache_arg(draft, cache), use_cache=True,
                       logits_to_keep=1).logits[0, -1]
        tok, feats, gap = _greedy(logits)
        ties.add(gap)
        out.add(tok, feats)
        length = min(gamma_max, max_new_tokens - 1 - t)
        if tok != x[t] and length > 0:
            row = out.start_tail(t)
            while len(row[0]) < length and row[0][-1] not in eos:
                logits = draft(input_ids=torch.tensor([[row[0][-1]]], device=device), **cache_arg(draft, cache),
                               use_cache=True, logits_to_keep=1).logits[0, -1]
                tok2, feats2, gap2 = _greedy(logits)
                ties.add(gap2)
                out.extend(row, tok2, feats2)
            crop_to(cache, n_prompt + t)
        feed = [x[t]]
    return out


def chunk_invariant(model: Any) -> bool:
    """False for models whose outputs depend on which tokens share a forward: torch's dynamic
    quantization (``transform: int8_dynamic``) scales each Linear's input per tensor, so a token
    fed with others (a catch-up chunk, a batch row) is quantized differently than alone."""
    return not any("quantized.dynamic" in type(m).__module__ for m in model.modules())


def _sliding_window(model: Any) -> int | None:
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    window = getattr(cfg, "sliding_window", None)
    layer_types = getattr(cfg, "layer_types", None)
    if window and (layer_types is None or any("sliding" in str(t) for t in layer_types)):
        return int(window)
    return None


def _draft_pass_batched(
    draft: Any, ids: list[int], n_prompt: int, x: list[int], max_new_tokens: int, gamma_max: int,
    eos: set[int], ties: _TieCounter, batch_size: int = 32,
) -> _Rollouts:
    """Same outputs as ``_draft_pass_sequential`` up to float rounding: one forward of the whole
    sequence gives ``draft_next`` at every position; the tails of up to ``batch_size`` mismatch
    positions are then rolled out together on a copy of the shared prefix cache, each row masking
    the sequence past its own prefix and continuing at its own positions."""
    import torch

    from runners.engine.kv import cache_arg, new_cache

    device = next(draft.parameters()).device
    n = len(x)
    seq = ids[: n_prompt + n - 1]  # prefixes up to position N-1
    cache = new_cache(draft)
    logits = draft(input_ids=torch.tensor([seq], device=device), **cache_arg(draft, cache), use_cache=True,
                   logits_to_keep=n - 1).logits[0]
    out = _Rollouts()
    for t in range(1, n):
        tok, feats, gap = _greedy(logits[t - 1])
        ties.add(gap)
        out.add(tok, feats)
    todo = [t for t in range(1, n) if out.draft_next[t - 1] != x[t] and min(gamma_max, max_new_tokens - 1 - t) > 0]
    base_len = len(seq)
    for start in range(0, len(todo), batch_size):
        group = todo[start : start + batch_size]
        b = len(group)
        rows = {s: out.start_tail(s) for s in group}
        lengths = {s: min(gamma_max, max_new_tokens - 1 - s) for s in group}
        bcache = copy.deepcopy(cache)  # prefix states for every row: the shared cache repeated along the batch
        bcache.batch_repeat_interleave(b)
        mask = torch.zeros((b, base_len), dtype=torch.long, device=device)
        for i, s in enumerate(group):
            mask[i, : n_prompt + s] = 1
        step = 0
        while any(len(rows[s][0]) < lengths[s] and rows[s][0][-1] not in eos for s in group):
            inp = torch.tensor([[rows[s][0][-1]] for s in group], device=device)
            pos = torch.tensor([[n_prompt + s + step] for s in group], device=device)
            mask = torch.cat([mask, torch.ones((b, 1), dtype=torch.long, device=device)], dim=1)
            logits_b = draft(input_ids=inp, attention_mask=mask, position_ids=pos, **cache_arg(draft, bcache),
                             use_cache=True, logits_to_keep=1).logits[:, -1]
            for i, s in enumerate(group):
                row = rows[s]
                if len(row[0]) < lengths[s] and row[0][-1] not in eos:
                    tok, feats, gap = _greedy(logits_b[i])
                    ties.add(gap)
                    out.extend(row, tok, feats)
            step += 1
        del bcache
    return out


def build_trace(
    target_model: Any,
    draft_model: Any,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    eos_token_ids: Iterable[int],
    gamma_max: int | None = DEFAULT_GAMMA_MAX,
    mode: str = "sequential",
    prompt_id: str = "",
    turn: int = 1,
    reuse: Any = None,
    **meta: Any,
) -> Trace:
    """One prompt's trace: the target's greedy output (``AutoregressiveRunner``, timed) and the
    draft's rollouts (module docstring; ``gamma_max=None``: ``max_new_tokens − 1``). ``meta``:
    ``category``, ``pair``, ``task``, ``target``, ``draft``, ``extra`` fields of the ``Trace``;
    ``reuse``: a trace of the same target and prompt whose target output (and its timing) to take."""
    import torch

    if mode not in ("sequential", "batched"):
        raise ValueError(f"mode must be sequential or batched, got {mode!r}")
    if gamma_max is None:
        gamma_max = max(1, max_new_tokens - 1)
    if gamma_max < 1 or max_new_tokens < 1:
        raise ValueError("gamma_max and max_new_tokens must be >= 1")
    eos = set(int(e) for e in eos_token_ids)
    prompt_ids = list(prompt_ids)
    with torch.inference_mode():
        ar = target_pass(target_model, prompt_ids, max_new_tokens, eos, reuse)
        x = list(ar.tokens)
        ids = prompt_ids + x
        ties = _TieCounter()
        t0 = time.perf_counter()
        window = _sliding_window(draft_model)
        use = mode
        if mode == "batched" and ((window is not None and len(ids) + gamma_max > window) or not chunk_invariant(draft_model)):
            use = "sequential"
        if use == "batched" and len(x) > 1:
            rolls = _draft_pass_batched(draft_model, ids, len(prompt_ids), x, max_new_tokens, gamma_max, eos, ties)
        else:
            rolls = _draft_pass_sequential(draft_model, ids, len(prompt_ids), x, max_new_tokens, gamma_max, eos, ties)
        draft_s = time.perf_counter() - t0
    extra = dict(meta.pop("extra", {}) or {})
    extra.update(mode=use, draft_pass_s=round(draft_s, 3))
    return Trace(
        prompt_id=str(prompt_id), turn=int(turn), prompt_tokens=len(prompt_ids), max_new_tokens=int(max_new_tokens),
        gamma_max=int(gamma_max), eos=tuple(sorted(eos)), tokens=x, **rolls.trace_fields(),
        stop_reason=ar.stop_reason, ar_wall_ms=ar.wall_ms, ar_ttft_ms=ar.ttft_ms, near_ties=ties.n, extra=extra,
        **meta,
    )
