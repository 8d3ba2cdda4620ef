"""Speculative and autoregressive decoding of several prompt turns at once (``batch_size`` > 1).

``BatchedSpeculativeRunner(target, drafter, policies, eos_token_ids, sampling, gamma_mode)
.generate(prompts, max_new_tokens, generator)`` decodes ``len(prompts)`` ≤ B rows together:

1. prefill: one target forward of every prompt (left-padded, ``runners.engine.ragged``); each
   row's first token; TTFT of every row ends here;
2. each round, over the active rows: γ per row (``gamma_mode="per_row"``: row ``i``'s own policy,
   told only its own outcomes, so a row's rounds are exactly its batch-1 rounds) or one γ for the
   batch (``"shared"``: one policy, ``next_gamma()`` once per round, then told every active row's
   outcome in row order; vLLM's engines use one draft length per step); the drafter proposes for
   every row (``runners.engine.batch_drafters``); the target verifies every row's block — its last
   token plus its draft, right-aligned — in **one** forward; each row accepts its own prefix
   (``runners.engine.verify``, and the batch-1 loop's rules of a round, ``methods.rules``, row by
   row) and keeps the states of its accepted
   tokens only (``RaggedCache.truncate``);
3. a row that reaches an EOS or ``max_new_tokens`` **leaves the batch** (its cache rows are dropped,
   ``RaggedCache.select``): the rows still decoding stop paying for it, as a serving engine's
   continuous batch would free its slot. (Not refilled: the next batch starts when every row is
   done, so a batch's rows are the same prompt turns for every method and the batches of two jobs
   compare like for like.)

Per row, greedy output equals the row decoded alone and sampling is exact (every row is verified
by the batch-1 functions on its own logits); the outcome told to a policy is the batch-1 one.
The rounds' draft/verify/overhead split is the batch's (``Timer`` laps); a row's ``phase_ms`` is
its share of them (its tokens over the batch's).

``BatchedAutoregressiveRunner``: the target alone at batch B (one forward of every active row per
token), the baseline of a batched job.

``BatchGeneration``: each row's ``Generation`` (``ttft_ms`` = the batch's prefill, ``wall_ms`` =
from the batch's start to that row's last token) plus the batch's ``wall_ms`` and tokens.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from methods.base import COSTS, GammaPolicy, policy_needs
from methods.rules import emitted_tokens, round_outcome, verified_block
from runners.engine.base import Draft, Generation
from runners.engine.batch_drafters import BatchDrafter
from runners.engine.fast_linear import BatchKernels
from runners.engine.ragged import RaggedCache, is_sampled
from runners.engine.verify import Sampling, greedy_token, probs, sample, verify_greedy, verify_sampling
from specbench.config import GAMMA_MODES
from specbench.models import logits_width, model_device
from specbench.timing import Timer


@dataclass
class BatchGeneration:
    """A batch's decoding: ``rows[i]`` is prompt ``i``'s ``Generation``; ``wall_ms`` from the batch's start
    to its last row's last token; ``ttft_ms`` its prefill; ``phase_ms`` the batch's draft / verify /
    overhead time after the prefill; ``repacks`` how often the target's cache was repacked."""

    rows: list[Generation]
    wall_ms: float
    ttft_ms: float
    phase_ms: dict[str, float] = field(default_factory=dict)
    repacks: int = 0

    @property
    def tokens(self) -> int:
        return sum(len(g.tokens) for g in self.rows)


def _first_token(logits: torch.Tensor, sampling: Any, generator: Any) -> int:
    return sample(probs(logits, sampling), generator) if is_sampled(sampling) else greedy_token(logits)


def _share(phases: dict[str, float], share: float) -> dict[str, float]:
    return {k: v * share for k, v in phases.items()}


class _BatchClock:
    """The batch's ``Timer`` plus the mark of each row's last token."""

    def __init__(self, device: Any) -> None:
        self.timer = Timer(device)

    def finish(self, rows: Iterable[int]) -> None:
        for r in rows:  # a lap, not a bare mark: a mark moves the lap boundary, and what ran since would be lost
            self.timer.lap("overhead", mark=f"row{r}")

    def result(self, gens: list[Generation], first_round: bool = True) -> BatchGeneration:
        self.timer.lap("overhead", mark="end")
        t = self.timer.read()
        phases = self.timer.phases()
        total = sum(len(g.tokens) for g in gens) or 1
        for r, g in enumerate(gens):
            g.ttft_ms, g.wall_ms = t["first"], t[f"row{r}"]
            if g.speculative:  # a row that ended before the first round ended: its own end
                g.first_round_ms = min(t.get("first_round", t[f"row{r}"]), t[f"row{r}"])
            g.phase_ms = _share(phases, len(g.tokens) / total)
        return BatchGeneration(gens, t["end"], t["first"], phases)


def _prefill(cache: RaggedCache, prompts: Sequence[Sequence[int]], sampling: Any, generator: Any) -> list[list[int]]:
    logits = cache.forward([list(p) for p in prompts], keep=1)
    return [[*p, _first_token(logits[i][-1], sampling, generator)] for i, p in enumerate(prompts)]


def _leave(active: list[int], ids: list[list[int]], n_prompt: list[int], max_new_tokens: int, eos: set[int],
           clock: _BatchClock, cache: RaggedCache, drafter: BatchDrafter | None = None) -> list[int]:
    """The rows still decoding: a row that ended (an EOS, or ``max_new_tokens``) is marked finished and
    leaves the target's cache (and the drafter's)."""
    done = [r for r in active if ids[r][-1] in eos or len(ids[r]) - n_prompt[r] >= max_new_tokens]
    if not done:
        return active
    clock.finish(done)
    keep = [j for j, r in enumerate(active) if r not in done]
    if keep:
        cache.select(keep)
        if drafter is not None:
            drafter.select(keep)
    return [active[j] for j in keep]


def _check(prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    if not prompts:
        raise ValueError("no prompts")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("a prompt is empty")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")


class BatchedAutoregressiveRunner:
    """The target alone at batch size ``len(prompts)``: one forward of every active row per token."""

    def __init__(self, target: Any, eos_token_ids: Iterable[int], sampling: float | Sampling = 0.0,
                 pad_id: int = 0, fast: BatchKernels | None = None) -> None:
        self.target = target
        self.fast = fast or BatchKernels()
        self.eos = set(eos_token_ids)
        self.sampling = Sampling.of(sampling)
        self.device = model_device(target)
        self.pad_id = pad_id

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, generator: Any = None) -> BatchGeneration:
        _check(prompts, max_new_tokens)
        clock = _BatchClock(self.device)
        cache = RaggedCache(self.target, len(prompts), self.pad_id, self.fast.executor)
        clock.timer.start()
        ids = _prefill(cache, prompts, self.sampling, generator)
        clock.timer.mark("first")
        n_prompt = [len(p) for p in prompts]
        active = list(range(len(prompts)))
        while active := _leave(active, ids, n_prompt, max_new_tokens, self.eos, clock, cache):
            clock.timer.lap("overhead")
            logits = cache.forward([[ids[r][-1]] for r in active], keep=1)
            clock.timer.lap("verify")
            for j, r in enumerate(active):
                ids[r].append(_first_token(logits[j][-1], self.sampling, generator))
        gens = [Generation(tokens=ids[r][n_prompt[r]:], ttft_ms=0.0, wall_ms=0.0,
                           stop_reason="eos" if ids[r][-1] in self.eos else "max_new_tokens", speculative=False)
                for r in range(len(prompts))]
        return clock.result(gens)


class BatchedSpeculativeRunner:
    """Draft → verify every row in one target forward → accept per row → repeat (module docstring).

    ``policies``: one per row slot (``per_row``; a batch of b rows uses the first b, each carrying its
    state to the same slot of the next batch) or a single policy (``shared``)."""

    def __init__(self, target: Any, drafter: BatchDrafter, policies: Sequence[GammaPolicy],
                 eos_token_ids: Iterable[int], sampling: float | Sampling = 0.0, gamma_mode: str = "per_row",
                 pad_id: int = 0, fast: BatchKernels | None = None) -> None:
        if gamma_mode not in GAMMA_MODES:
            raise ValueError(f"gamma_mode must be one of {GAMMA_MODES}, got {gamma_mode!r}")
        if not policies:
            raise ValueError("no policy")
        self.target = target
        self.drafter = drafter
        self.policies = list(policies)
        self.eos = set(eos_token_ids)
        self.sampling = Sampling.of(sampling)
        self.gamma_mode = gamma_mode
        self.device = model_device(target)
        self.vocab = logits_width(target)
        self.pad_id = pad_id
        self.fast = fast or BatchKernels()

    def _row_policies(self, rows: int) -> list[GammaPolicy]:
        if self.gamma_mode == "shared":
            return [self.policies[0]] * rows
        if rows > len(self.policies):
            raise ValueError(f"{rows} rows but {len(self.policies)} policies (one per row)")
        return self.policies[:rows]

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, generator: Any = None) -> BatchGeneration:
        _check(prompts, max_new_tokens)
        b = len(prompts)
        policies = self._row_policies(b)
        for p in {id(p): p for p in policies}.values():  # each distinct policy once
            p.begin_prompt()
        shared = self.gamma_mode == "shared"
        timed = any(COSTS in policy_needs(p) for p in policies)
        clock = _BatchClock(self.device)
        cache = RaggedCache(self.target, b, self.pad_id, self.fast.executor)
        clock.timer.start()
        ids = _prefill(cache, prompts, self.sampling, generator)
        clock.timer.mark("first")
        n_prompt = [len(p) for p in prompts]
        self.drafter.begin([list(p) for p in prompts])
        gens = [Generation(tokens=[], ttft_ms=0.0, wall_ms=0.0, stop_reason="") for _ in range(b)]
        active = list(range(b))
        rounds = 0
        while active := _leave(active, ids, n_prompt, max_new_tokens, self.eos, clock, cache, self.drafter):
            clock.timer.lap("overhead")
            t_start = time.perf_counter() if timed else 0.0
            if shared:
                gammas = [int(policies[0].next_gamma())] * len(active)
            else:
                gammas = [int(policies[r].next_gamma()) for r in active]
            limits = [self.drafter.limits(g, max_new_tokens - (len(ids[r]) - n_prompt[r]) - 1)
                      for g, r in zip(gammas, active)]
            asked = [a if a > 0 and k > 0 else 0 for a, k in limits]
            drafts = self.drafter.propose([ids[r] for r in active], asked, [policies[r] for r in active],
                                          self.sampling, generator) if any(asked) else [Draft([]) for _ in active]
            t_drafted = time.perf_counter() if timed else 0.0
            # each row's block by the batch-1 loop's rules (methods.rules: the budget, the vocabulary, verify_count)
            kept = [verified_block(draft.tokens, k, self.vocab, policies[r])
                    for draft, (_, k), r in zip(drafts, limits, active)]
            clock.timer.lap("draft")
            blocks = [[ids[r][-1], *fed] for r, (_, fed, _) in zip(active, kept)]
            logits = cache.forward(blocks)
            clock.timer.lap("verify")
            outcomes = []
            for j, (r, draft, (tokens, _, proposed)) in enumerate(zip(active, drafts, kept)):
                row_logits = logits[j]
                d = len(tokens)
                if is_sampled(self.sampling):
                    q = draft.q[:d] if draft.q is not None else None
                    accepted, next_tok = verify_sampling(tokens, q, row_logits, self.sampling, generator)
                else:
                    accepted, next_tok = verify_greedy(tokens, row_logits)
                ids[r].extend(emitted_tokens(tokens, accepted, next_tok, self.eos))  # cut at an accepted EOS
                cache.truncate(j, len(ids[r]) - 1)
                outcome = round_outcome(gammas[j], tokens, accepted, proposed, self.eos, draft.confidences,
                                        draft.steps)
                gens[r].add_round(outcome, draft)  # its policy is told the same outcome (with the batch's costs)
                outcomes.append((r, outcome))
            t_verified = time.perf_counter() if timed else 0.0
            self.drafter.commit([ids[r] for r in active])
            cache.compact()
            costs = {}
            if timed:  # the batch's round, told to every row's policy
                costs = {"draft_ms": (t_drafted - t_start) * 1e3, "verify_ms": (t_verified - t_drafted) * 1e3,
                         "round_ms": (time.perf_counter() - t_start) * 1e3}
            for r, outcome in outcomes:
                policies[r].observe(dataclasses.replace(outcome, **costs) if costs else outcome)
            rounds += 1
            if rounds == 1:
                clock.timer.lap("overhead", mark="first_round")
        for r in range(b):
            gens[r].tokens = ids[r][n_prompt[r]:]
            gens[r].stop_reason = "eos" if gens[r].tokens[-1] in self.eos else "max_new_tokens"
        result = clock.result(gens)
        result.repacks = cache.repacks
        return result
