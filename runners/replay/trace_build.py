"""Building a greedy trace (``runners.replay.trace``: what it holds): the target's greedy pass, then the
draft's rollouts from every position (``build_trace``), sequentially or batched.

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
``tests/replay/test_replay.py`` checks replay == real runs round for round on tiny fp32 models.

Chunk-dependent drafts (``chunk_invariant(model)`` is False), e.g. the default pair's
``transform: int8_dynamic`` draft: torch's dynamic quantization scales each Linear's
input *per tensor*, so a token fed together with another (a 2-token catch-up) is
quantized differently from the same token fed alone — Gemma-3-270M int8: logits up to
~2.4 apart, a confidence 0.905 vs 0.884. Such a draft's proposals depend on the
policy's own history of catch-up chunks, so no single trace reproduces every policy's
rounds: the trace holds the rollouts of a drafter that feeds one token per forward,
and replayed rounds drift from a real run's after a few rounds (on 2 prompts × 32
tokens, rounds diverged from round 2–9 on; aggregate acceptance stayed within ~0.03:
``python -m runners.replay lab compare --live``). ``... lab compare --live --single-token-catchup``
runs the real loop with a drafter that feeds its catch-up one token per forward and
then matches the replay round for round on that pair.

``mode="batched"`` computes ``draft_next`` in one forward of the whole sequence and
the tails of up to 32 mismatch positions in one batched forward per step (the shared
prefix cache repeated, a 2-D mask hiding each row's future, explicit positions): same
mathematics, different rounding (tested: same tokens, confidences within 1e-5; ~6×
faster on Gemma-3-270M fp32). It falls back to ``sequential`` for chunk-dependent drafts
and for sliding-window models whose sequence is longer than the window.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runners.replay.trace import DEFAULT_GAMMA_MAX, Trace
from runners.replay.trace_base import target_pass

#: top-2 logit gap below which a rollout step counts as a near-tie (its argmax could flip by rounding)
NEAR_TIE = 1e-4


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
