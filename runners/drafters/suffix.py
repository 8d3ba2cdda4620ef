"""Suffix decoding: draft the most frequent continuation of the sequence's longest matching suffix, from suffix
trees of the prompt and the output so far (Oliaro et al. 2024, "SuffixDecoding", arXiv:2411.04975; Snowflake's
ArcticInference; vLLM's ``speculative_config.method="suffix"``).

Read from vLLM at commit ``2dd2348cc87f4a51bfc066a5c80108e5f5ad237c`` (``vllm/v1/spec_decode/suffix_decode/``):
``suffix_tree.py`` (``SuffixTree.append``, ``SuffixTree.speculate``, ``SuffixTree._match_pattern``,
``SuffixTree._speculate_path``) and ``suffix_cache.py`` (``SuffixCache.speculate``); the proposer
``vllm/v1/spec_decode/suffix_decoding.py`` (``SuffixDecodingProposer.propose``, commit ``044ac3a0``) and the knobs'
definitions and defaults in ``SpeculativeConfig`` (``suffix_decoding_max_tree_depth`` 24,
``suffix_decoding_max_spec_factor`` 1.0, ``suffix_decoding_min_token_prob`` 0.1; ``num_speculative_tokens``
defaults to the tree depth: ``_validate_suffix_decoding``).

The rule, as vLLM's path speculation (``use_tree_spec=False``, its proposer's choice):

* a tree counts, for every string ``w`` of at most ``max_tree_depth`` tokens, its occurrences ``count(w)`` in the
  tree's sequence (the root counts the sequence's tokens). Two trees: the request's own (prompt + output so far,
  vLLM's per-request "local" tree) and its output alone (vLLM's global tree at
  ``suffix_decoding_max_cached_requests=0``: earlier requests' outputs are not kept, see below);
* the pattern is the sequence's last ``max_tree_depth`` tokens. For each of its suffixes, longest first, that
  occurs in a tree (``match_len`` tokens), walk down from it: at each step take the child with the largest count
  (ties: the continuation seen first), its probability ``prob ← prob · count(child) / count(node)``; stop when
  ``prob < min_token_prob``, at the tree's depth, or after ``min(max_spec_tokens, ⌊match_len · max_spec_factor +
  max_spec_offset⌋)`` tokens. The candidate's score is the sum of its tokens' probabilities; the best score wins
  (strictly: the longer match on a tie), over both trees (the request's own on a tie);
* the proposal is that candidate, cut to the round's budget (γ, or the room left) and after an EOS (the
  ``Drafter`` contract), or nothing (the loop then does a plain target step).

Where it differs from vLLM, and why:

* the candidate is chosen with ``max_spec_tokens`` (vLLM's ``num_speculative_tokens``; default: the tree depth,
  as vLLM's), then cut to the round's budget: the γ policy decides the budget here, and the proposal for a smaller
  budget stays a prefix of the proposal for a larger one, which the replay lab's lookup traces need
  (``runners.replay.trace_lookup``). With ``max_spec_tokens`` = γ (``method=specdecode``) it is vLLM's proposal
  but in the last rounds, where vLLM chooses with the room left;
* no cache of earlier requests' outputs (``suffix_decoding_max_cached_requests``, 10000 in vLLM): a benchmark
  repeats prompts and warms up on them, and a cached output of the same prompt would draft it perfectly; a
  request's drafts depend on its own sequence alone, so a trace of one prompt replays it exactly;
* at batch size > 1 each row has its own trees (vLLM's global tree holds every active request's output).

Deterministic: ``q=None`` (one-hot for speculative sampling, which keeps it lossless) and no confidences, so
``policy.stop_drafting`` is never asked (its declaration, ``specbench.drafter_kinds``: ``suffix``). Options of a
pair's ``draft`` node (``conf/pair/gemma3-270m_suffix.yaml``): ``max_tree_depth``, ``max_spec_tokens``,
``max_spec_factor``, ``max_spec_offset``, ``min_token_prob``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from methods.base import GammaPolicy
from methods.rules import cut_proposal
from runners.engine.base import Draft, OptionsDrafter
from runners.engine.verify import Sampling
from specbench.checks import check_int, check_number
from specbench.drafter_kinds import drafter


class _Node:
    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.count = 0
        self.children: dict[int, _Node] = {}


class SuffixTree:
    """Occurrence counts of every string of at most ``max_depth`` tokens of one growing sequence (module
    docstring): a trie whose node for ``w`` holds ``count(w)``, the root the sequence's length. vLLM compresses
    runs of single-continuation nodes (``suffix_tree.py``); the counts, and so every proposal, are the same."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = int(max_depth)
        self.root = _Node()
        self._growing: list[_Node] = []  # the nodes of the suffixes that may still grow, shortest first

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.root.count += 1
            grown = []
            for node in (self.root, *self._growing):
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.count += 1
                grown.append(child)
            self._growing = grown[: self.max_depth - 1]  # a suffix of max_depth tokens grows no further

    def match(self, pattern: list[int]) -> _Node | None:
        node: _Node | None = self.root
        for token in pattern:
            node = node.children.get(token)
            if node is None:
                return None
        return node

    def speculate(self, pattern: list[int], max_spec_tokens: int, max_spec_factor: float, max_spec_offset: float,
                  min_token_prob: float) -> tuple[list[int], float]:
        """``(tokens, score)`` of the best path continuation of ``pattern``'s suffixes (vLLM's
        ``SuffixTree.speculate`` with ``use_tree_spec=False``; module docstring); ``([], 0.0)`` when none."""
        pattern = pattern[-self.max_depth:]
        best: list[int] = []
        best_score = 0.0
        for start in range(len(pattern)):  # the longest suffix first
            node = self.match(pattern[start:])
            if node is None:
                continue
            match_len = len(pattern) - start
            limit = max(0, min(max_spec_tokens, int(match_len * max_spec_factor + max_spec_offset + 1e-6)))
            tokens, score = _path(node, limit, min_token_prob)
            if score > best_score:
                best, best_score = tokens, score
        return best, best_score


def _path(node: _Node, limit: int, min_token_prob: float) -> tuple[list[int], float]:
    """The most frequent path below ``node``: ``(tokens, sum of their probabilities)`` (``_speculate_path``)."""
    tokens: list[int] = []
    score, prob = 0.0, 1.0
    while len(tokens) < limit:
        best_token, best = -1, None
        for token, child in node.children.items():
            if best is None or child.count > best.count:
                best_token, best = token, child
        if best is None:
            break
        prob *= best.count / node.count
        if prob < min_token_prob:
            break
        tokens.append(best_token)
        score += prob
        node = best
    return tokens, score


@drafter("suffix", loads_model=False, asks_policy=False, method="suffix", trace="prompt_lookup", draft_cost="free")
class SuffixDrafter(OptionsDrafter):
    """Suffix decoding (module docstring): the request's suffix tree and its output's, kept in step with the
    sequence; ``lookup(ids, k)`` is the proposal (what the replay lab's lookup trace records)."""

    name = "suffix"
    OPTIONS = ("max_tree_depth", "max_spec_tokens", "max_spec_factor", "max_spec_offset", "min_token_prob")
    LABEL = "suffix decoding"

    def __init__(self, max_tree_depth: int = 24, max_spec_tokens: int | None = None, max_spec_factor: float = 1.0,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                 eos_token_ids: Iterable[int] | int | None = ()) -> None:
        self.max_tree_depth = check_int("max_tree_depth", max_tree_depth, 1)
        self.max_spec_tokens = check_int("max_spec_tokens", max_spec_tokens, 1, optional=True) or self.max_tree_depth
        self.max_spec_factor = check_number("max_spec_factor", max_spec_factor, 0.0)
        self.max_spec_offset = check_number("max_spec_offset", max_spec_offset)
        self.min_token_prob = check_number("min_token_prob", min_token_prob, 0.0, 1.0)
        if isinstance(eos_token_ids, int):
            eos_token_ids = (eos_token_ids,)
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids or ())
        self.seq: list[int] | None = None  # no request begun: the first ``ids`` seen is its prompt

    # ------------------------------------------------------------------ built from a pair's draft node
    # ------------------------------------------------------------------ the trees and the proposal
    def begin(self, prompt_ids: list[int]) -> None:
        """A new request: the trees of its prompt (and of an output not yet begun)."""
        self.seq = [int(t) for t in prompt_ids]
        self.prompt_len = len(self.seq)
        self.request = SuffixTree(self.max_tree_depth)
        self.request.extend(self.seq)
        self.output = SuffixTree(self.max_tree_depth)

    def _sync(self, ids: list[int]) -> None:
        """The trees hold ``ids``: extended by its new tokens, or rebuilt (``ids`` as the prompt) when it does not
        continue what they hold."""
        if self.seq is None or len(ids) < len(self.seq) or ids[: len(self.seq)] != self.seq:
            self.begin(ids)
            return
        n = len(self.seq)
        new = [int(t) for t in ids[n:]]
        self.request.extend(new)
        self.output.extend(new)  # every token after the prompt is output
        self.seq.extend(new)

    def lookup(self, ids: list[int], max_tokens: int) -> list[int]:
        """The tokens to propose after ``ids``, at most ``max_tokens`` (empty when nothing matches)."""
        if hasattr(ids, "tolist"):  # a tensor or an array
            ids = ids.tolist()
        self._sync(list(ids))
        assert self.seq is not None
        if max_tokens < 1 or not self.seq:
            return []
        args = (self.seq[-self.max_tree_depth:], self.max_spec_tokens, self.max_spec_factor, self.max_spec_offset,
                self.min_token_prob)
        tokens, score = self.request.speculate(*args)
        out_tokens, out_score = self.output.speculate(*args)
        if out_score > score:
            tokens = out_tokens
        return cut_proposal(tokens, self.eos_token_ids, max_tokens)  # methods.rules: after an EOS, to the budget

    def propose(self, ids: list[int], max_tokens: int, policy: GammaPolicy, sampling: Sampling,
                generator: torch.Generator | None) -> Draft:
        return Draft(tokens=self.lookup(ids, max_tokens), q=None, confidences=[], forwards=None)
