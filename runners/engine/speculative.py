"""The decoding loops: one speculative loop for every method, and plain autoregressive decoding.

``SpeculativeRunner(target, drafter, policy, eos_token_ids, sampling).generate(prompt_ids,
max_new_tokens, generator)`` runs, for batch size 1:

1. prefill: the target reads the prompt and emits the first new token (TTFT ends here);
2. each round: ``γ = policy.next_gamma()``; the drafter proposes up to
   ``min(γ, remaining - 1)`` tokens (asking ``policy.stop_drafting`` after each) — or, for a
   drafter whose γ counts its own tokens (``Drafter.limits``: SLEM by default), drafts γ of its
   tokens and its proposal is cut to ``remaining - 1`` target tokens;
   the target scores its last token plus the draft in **one** forward;
   (``policy.verify_count`` may keep only a prefix of the proposal; a peek keeps none)
   ``runners.engine.verify`` accepts a prefix and adds the target's own token; both
   caches are cropped to the accepted sequence; ``policy.observe`` is told
   ``(γ, drafted, accepted)``;
3. stop at an EOS (drafted-and-accepted or the target's) or at ``max_new_tokens``,
   never past it: a round drafts at most ``remaining - 1`` tokens because it always
   adds one target token.

``Generation.first_round_ms`` marks the end of the first round (after its verification):
when transformers' assisted generation would first hand new tokens to a streamer, the TTFT of
hf-bench's definition (``specbench.records``).

``sampling``: a ``runners.engine.verify.Sampling`` (the temperature plus top-k / top-p /
typical-p) or a bare temperature (``Sampling.of``; 0 = greedy, the default); it is handed unchanged
to the drafter and to verification, so the draft and the target are processed identically. ``generator``: a ``DeviceGenerators`` (one
generator per device) or a ``torch.Generator`` on the device of the tensors it samples.

``AutoregressiveRunner(..., cache="offloaded")`` keeps the target's KV cache on the CPU, as
``generate(cache_implementation="offloaded")`` (hf-bench's AR baseline; CUDA only).

A drafted id outside the target's vocabulary (``>= logits_width(target)``: union's draft-only
tokens, SLRS's ⊥; ``runners.engine.base``) ends the draft: it is verified (rejected with certainty,
the replacement sampled from the residual) but never fed to the target. These rules of a round (the
budget, the vocabulary, ``verify_count``, the cut at an accepted EOS, the outcome) are written once, in
``methods.rules``, for this loop, the batched one and the replay.

A policy that ``needs`` ``COSTS`` is told each round's measured ``draft_ms`` (the drafter's
``propose``), ``verify_ms`` (the target's forward and the verification) and ``round_ms``
(the whole round, from ``next_gamma`` to ``observe``), ``time.perf_counter`` wall time
(every round already synchronises with the device when it reads the accepted tokens).

A round with nothing drafted (γ = 0, the budget's last token, or prompt lookup with no
match) is a plain target step: it is recorded in the traces with ``drafted = 0``
and reported to the policy like any round, as transformers does (its "heuristic"
schedule counts 0 == 0 as all accepted; GammaTune ignores such rounds).

Options (both lossless; ``runners.engine.verify_forward``): ``forward`` runs the target's
blocks (shape-aware padding of a verification block, a faster LM head for a few rows);
``fused_prefill`` skips step 1: the first round drafts from the prompt and the target
verifies prompt + draft in its prefill forward (as transformers does).

Time after the first token is attributed to phases (``Generation.phase_ms``):
``draft`` (the drafter's ``propose``), ``verify`` (the target's forward) and
``overhead`` (everything else: acceptance, cache crops, policy, bookkeeping).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch

from methods.base import COSTS, GammaPolicy, policy_needs
from methods.rules import emitted_tokens, round_outcome, verified_block
from runners.engine.base import Draft, Drafter, Generation
from runners.engine.graphs import forward_logits
from runners.engine.kv import crop_to, new_cache
from runners.engine.verify import Sampling, greedy_token, probs, sample, verify_greedy, verify_sampling
from runners.engine.verify_forward import VerifyForward
from specbench.config.method import AR_CACHES
from specbench.models import logits_width, model_device
from specbench.timing import Timer


def _first_token(logits: torch.Tensor, sampling: Sampling, generator: Any) -> int:
    if sampling.greedy:
        return greedy_token(logits)
    return sample(probs(logits, sampling), generator)


class AutoregressiveRunner:
    """The target alone, one token per forward, with its KV cache (``method=ar``, and the reference every
    speculative job is compared with); ``cache``: ``dynamic`` (on the model's device) or ``offloaded`` (on the
    CPU, prefetched per layer).

    ``forward``: how the target runs a step (``runners.engine.verify_forward.VerifyForward``; None: one plain
    forward, transformers' kernels). The job gives the target alone the fastest step the kernels of the method
    it is compared with allow (``verify_forward.step_forward``: the loop's transposed copy, a padded
    step where the engine pads), so a speedup does not include a kernel advantage the baseline is denied (issues
    40, 50). A padded step's extra positions are cropped from the cache after it, as the speculative loop crops
    them."""

    def __init__(self, target: Any, eos_token_ids: Iterable[int], sampling: Sampling | float = 0.0,
                 cache: str = "dynamic", forward: VerifyForward | None = None, dynamic_only: bool = False) -> None:
        if cache not in AR_CACHES:
            raise ValueError(f"cache must be one of {AR_CACHES}, got {cache!r}")
        self.target = target
        self.eos = set(eos_token_ids)
        self.sampling = Sampling.of(sampling)
        self.cache = cache
        self.dynamic_only = dynamic_only  # a dynamic cache even where the model's caches are static (kv.new_cache)
        self.device = model_device(target)
        self.forward = forward

    def describe(self) -> dict[str, Any]:
        """The kernels a step runs on (``VerifyForward.describe_step``; plain: fast_linear false, no padding)."""
        return self.forward.describe_step() if self.forward is not None else {"fast_linear": False, "step": None}

    def _step(self, cache: Any, feed: list[int], seen: int) -> torch.Tensor:
        """The last fed position's logits; ``seen``: the tokens the cache holds after this step."""
        if self.forward is None:
            return forward_logits(self.target, cache, feed, 1, self.device)[0, -1]
        logits = self.forward(cache, feed, 1)[-1]
        if self.forward.pads(len(feed)):
            crop_to(cache, seen)
        return logits

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator: Any = None) -> Generation:
        timer = Timer(self.device)
        cache = new_cache(self.target, offloading=self.cache == "offloaded", dynamic=self.dynamic_only)
        timer.start()
        feed = list(prompt_ids)
        seen = len(feed)
        new: list[int] = []
        while True:
            if new:
                timer.lap("overhead")
            logits = self._step(cache, feed, seen)
            if new:
                timer.lap("verify")
            tok = _first_token(logits, self.sampling, generator)
            new.append(tok)
            if len(new) == 1:
                timer.mark("first")
            if tok in self.eos or len(new) >= max_new_tokens:
                break
            feed = [tok]
            seen += 1
        timer.lap("overhead", mark="end")
        t = timer.read()
        return Generation(
            tokens=new,
            ttft_ms=t["first"],
            wall_ms=t["end"],
            stop_reason="eos" if new[-1] in self.eos else "max_new_tokens",
            speculative=False,
            phase_ms=timer.phases(),
        )


class SpeculativeRunner:
    """Draft → verify in one target forward → accept → crop caches → repeat.

    ``forward``: how the target runs a block (``runners.engine.verify_forward.VerifyForward``;
    default: one plain forward, as before). ``fused_prefill``: the first round drafts
    from the prompt and the target verifies prompt + draft in its prefill forward (as
    transformers does); TTFT is then the end of that first round (``specbench.records``).
    Time after the first token is split into ``draft`` / ``verify`` / ``overhead``
    phases (``Generation.phase_ms``, ``specbench.timing.Timer.lap``).
    """

    def __init__(
        self,
        target: Any,
        drafter: Drafter,
        policy: GammaPolicy,
        eos_token_ids: Iterable[int],
        sampling: Sampling | float = 0.0,
        forward: VerifyForward | None = None,
        fused_prefill: bool = False,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.policy = policy
        self.eos = set(eos_token_ids)
        self.sampling = Sampling.of(sampling)
        self.device = model_device(target)
        self.forward = forward if forward is not None else VerifyForward(target)
        self.fused_prefill = bool(fused_prefill)
        self.vocab = logits_width(target)

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator: Any = None) -> Generation:
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        timer = Timer(self.device)
        cache = new_cache(self.target)
        self.policy.begin_prompt()
        timer.start()
        ids = list(prompt_ids)
        n_prompt = len(prompt_ids)
        if not self.fused_prefill:  # 1. prefill: the target's first token
            logits = self.forward(cache, ids, 1)
            if getattr(self.forward, "buckets", None):  # a short prompt may have been padded: keep its own positions only
                crop_to(cache, n_prompt)
            ids.append(_first_token(logits[-1], self.sampling, generator))
            timer.mark("first")
        self.drafter.begin(list(prompt_ids))
        gen = Generation(tokens=[], ttft_ms=0.0, wall_ms=0.0, stop_reason="")
        lap = timer.lap if not self.fused_prefill else _no_lap  # a fused first round is all TTFT

        # 2. rounds; the target cache holds ids[:-1] (nothing before a fused first round)
        timed = COSTS in policy_needs(self.policy)
        while len(ids) == n_prompt or (ids[-1] not in self.eos and len(ids) - n_prompt < max_new_tokens):
            lap("overhead")
            t_start = time.perf_counter() if timed else 0.0
            remaining = max_new_tokens - (len(ids) - n_prompt)
            gamma = int(self.policy.next_gamma())
            asked, budget = self.drafter.limits(gamma, remaining - 1)  # drafter tokens to draft, target tokens kept
            draft = (
                self.drafter.propose(ids, asked, self.policy, self.sampling, generator)
                if asked > 0 and budget > 0 else Draft([])
            )
            t_drafted = time.perf_counter() if timed else 0.0
            # the budget, the target's vocabulary, the policy's verify_count (methods.rules)
            tokens, fed, proposed = verified_block(draft.tokens, budget, self.vocab, self.policy)
            d = len(tokens)
            lap("draft")
            feed = ids[-1:] if len(ids) > n_prompt else ids  # a fused first round feeds the whole prompt
            logits = self.forward(cache, [*feed, *fed], len(fed) + 1)
            lap("verify")
            if self.sampling.greedy:
                accepted, next_tok = verify_greedy(tokens, logits)
            else:
                q = draft.q[:d] if draft.q is not None else None
                accepted, next_tok = verify_sampling(tokens, q, logits, self.sampling, generator)
            t_verified = time.perf_counter() if timed else 0.0
            ids.extend(emitted_tokens(tokens, accepted, next_tok, self.eos))  # cut at an accepted EOS
            crop_to(cache, len(ids) - 1)  # states of the accepted tokens stay; rejected (and padded) ones go
            self.drafter.commit(ids)
            costs = {}
            if timed:
                costs = {"draft_ms": (t_drafted - t_start) * 1e3, "verify_ms": (t_verified - t_drafted) * 1e3,
                         "round_ms": (time.perf_counter() - t_start) * 1e3}
            outcome = round_outcome(gamma, tokens, accepted, proposed, self.eos, draft.confidences, draft.steps,
                                    **costs)
            gen.add_round(outcome, draft)  # the record of rounds and the policy are told the same outcome
            self.policy.observe(outcome)
            if len(gen.rounds) == 1:  # the first round ends
                if lap is _no_lap:  # fused: its tokens are the first new tokens (TTFT = first round)
                    timer.mark("first")
                    lap = timer.lap
                else:  # the same clock reading closes the round's overhead phase and marks it
                    timer.lap("overhead", mark="first_round")
        timer.lap("overhead", mark="end")
        t = timer.read()
        gen.tokens = ids[n_prompt:]
        gen.ttft_ms, gen.wall_ms = t["first"], t["end"]
        gen.first_round_ms = t.get("first_round", t["first"] if self.fused_prefill else t["end"])
        gen.stop_reason = "eos" if gen.tokens[-1] in self.eos else "max_new_tokens"
        gen.phase_ms = timer.phases()
        return gen


def _no_lap(phase: str) -> None:
    """Stands in for ``Timer.lap`` during a fused first round (its time is TTFT)."""
