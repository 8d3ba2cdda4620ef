#!/usr/bin/env python
"""Exactness against the peer: is the first speculated token distributed as the target's own next token?

    .venv/bin/python scripts/peer_exactness.py                                   # Gemma-3-270M / SmolLM2-135M, T = 1
    .venv/bin/python scripts/peer_exactness.py --samples 1000 --prefixes 3 --json results/peer_exactness.json
    .venv/bin/python scripts/peer_exactness.py --rules tli --no-hf --samples 200  # a quick look

For each of a few fixed prefixes ``P`` (target token ids of cuts of the embedded prompts: the
``--prefixes`` whose next-token law is the most concentrated, so that sampling noise is small, but
not nearly deterministic: effective support ``1 / sum p^2 >= --min-support``), with ``p`` = the
target's exact next-token distribution after ``P`` at ``--temperature``
(``runners.engine.verify.probs``, no top-k / top-p):

* ``target``: ``--samples`` draws from ``p`` with the engine's own sampler (what ``method=ar`` does);
* ``ours:<rule>`` for every cross-vocabulary rule (``tli``, ``union``, ``slrs``): our loop
  (``SpeculativeRunner`` with the rule's drafter, fixed γ = ``--gamma``) decoding ``P``: the target
  forced to emit ``P[-1]`` at its prefill (a wrapper puts all its mass there), so the next token is the
  first one a speculative round produces; one draw per generation;
* ``hf``: transformers' different-tokenizer assisted sampling (``generate(assistant_model=...,
  tokenizer=..., assistant_tokenizer=..., do_sample=True)``: the TLI path, which prunes the
  assistant's head, ``candidate_generator.py: AssistantToTargetTranslator``), one round of
  ``--gamma`` tokens, top-k / top-p off, the first new token of each call;
* ``hf-sorted``: the same with the pruned head's rows in ascending assistant-id order (a patch of
  this script only, see below).

Each is compared with ``p`` by the total-variation distance of its empirical law. **Tolerance**: the
``--confidence`` quantile (default 0.999) of the TV distance between ``p`` and the empirical law of
``--samples`` draws from ``p`` itself, simulated (``--null-runs`` times): an exact sampler exceeds it
with probability 1 - confidence per (prefix, method). A method passes a prefix when its TV is at most
that tolerance.

**transformers' permuted pruned map** (5.23). With pruning on (always, when sampling with different
tokenizers), ``AssistantToTargetTranslator`` keeps the assistant's head rows in the order of
``target_to_assistant_input_ids.values()``, i.e. the assistant tokenizer's ``get_vocab()`` order, but
``get_target_logits`` writes the pruned logits to the target ids of the shared assistant ids in
*ascending* id order. Unless ``get_vocab()`` is sorted by id, the draft probabilities it reports are
those of other tokens. The script prints how many rows are out of order and, at the first prefix, the
TV distance between the draft law transformers reports to its verification and the law it really
samples its draft token from, for the original and the sorted map (0 when sorted).
Exit status 1 when one of ours fails a prefix. Cost: one generation per draw (each re-reads the
prefix): the defaults make 2 prefixes × 400 draws × 5 generating methods = 4,000 short generations;
``--rules``, ``--no-hf``, ``--prefixes`` and ``--samples`` trade coverage for time (the tolerance
shrinks as 1/sqrt(samples)).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

RULES = ("tli", "union", "slrs")


def tv(counts: np.ndarray, p: np.ndarray) -> float:
    """Total-variation distance between the empirical law of ``counts`` and ``p``."""
    return 0.5 * float(np.abs(counts / counts.sum() - p).sum())


def tolerance(p: np.ndarray, n: int, confidence: float, runs: int, seed: int) -> float:
    """The ``confidence`` quantile of ``tv(n draws from p, p)`` (simulated ``runs`` times)."""
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, p / p.sum(), size=runs)
    return float(np.quantile([tv(d, p) for d in draws], confidence))


class ForcedPrefill(torch.nn.Module):
    """The target, except that a forward on an empty cache (the loop's prefill) puts all its
    probability on ``token``: the loop's first new token is ``token`` whatever the temperature."""

    def __init__(self, model: Any, token: int) -> None:
        super().__init__()
        self.model, self.token = model, int(token)

    @property
    def config(self) -> Any:
        return self.model.config

    def get_output_embeddings(self) -> Any:
        return self.model.get_output_embeddings()

    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None, **kw: Any) -> Any:
        prefill = past_key_values is None or past_key_values.get_seq_length() == 0
        from runners.engine.kv import cache_arg

        out = self.model(input_ids=input_ids, **cache_arg(self.model, past_key_values), **kw)
        if prefill:
            out.logits[..., :] = float("-inf")
            out.logits[..., self.token] = 0.0
        return out


def load(pair_name: str) -> dict[str, Any]:
    from specbench.config import JobConfig, compose
    from specbench.models import logits_width
    from specbench.models.cache import load_pair

    config = JobConfig.from_mapping(compose([f"pair={pair_name}", "hetero=tli", "temperature=1"]))
    pair = config.pair
    if pair.same_tokenizer or pair.draft is None or pair.draft.model is None:
        raise SystemExit(f"error: pair {pair_name!r} has no draft model with another tokenizer")
    loaded = load_pair(config)
    return {"config": config, "target": loaded.target, "tok": loaded.tokenizer, "draft": loaded.draft,
            "dtok": loaded.draft_tokenizer, "eos": loaded.eos, "width": logits_width(loaded.target)}


@torch.inference_mode()
def next_token_law(target: Any, ids: list[int], temperature: float) -> np.ndarray:
    from runners.engine.verify import probs

    logits = target(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1]
    return probs(logits, temperature).double().numpy()


def choose_prefixes(m: dict[str, Any], n: int, candidates: int, min_support: float) -> list[tuple[list[int], np.ndarray]]:
    """Candidate prefixes: the first half, three quarters and all of each of the first ``candidates``
    embedded prompts (target ids). Returns the ``n`` whose next-token law has the smallest effective
    support ``1 / sum p^2`` that is still ``>= min_support`` (a nearly deterministic next token tests
    little), with that law."""
    from specbench.tasks import load_task

    texts = [p.turns[0] for p in load_task({"name": "embedded", "loader": "embedded"})][:candidates]
    scored = []
    for text in texts:
        full = list(m["tok"](text).input_ids)
        for cut in sorted({max(2, len(full) // 2), max(2, 3 * len(full) // 4), len(full)}):
            p = next_token_law(m["target"], full[:cut], m["temperature"])
            support = 1.0 / float((p * p).sum())
            if support >= min_support:
                scored.append((support, full[:cut], p))
    scored.sort(key=lambda s: s[0])
    if len(scored) < n:
        raise SystemExit(f"error: only {len(scored)} candidate prefixes have an effective support >= {min_support}")
    return [(ids, p) for _, ids, p in scored[:n]]


def sample_target(p: np.ndarray, n: int, seed: int) -> np.ndarray:
    from runners.engine.verify import sample

    gen = torch.Generator().manual_seed(seed)
    pt = torch.from_numpy(p).float()
    counts = np.zeros(len(p))
    for _ in range(n):
        counts[sample(pt, gen)] += 1
    return counts


def sample_ours(m: dict[str, Any], rule: str, ids: list[int], n: int, gamma: int, seed: int) -> np.ndarray:
    from methods.base import FixedGamma
    from runners.drafters import DrafterContext, build_drafter
    from runners.engine.factory import build_runner
    from specbench.config import HeteroConfig

    ctx = DrafterContext(target_tokenizer=m["tok"], eos_token_ids=m["eos"], target_vocab_size=m["width"],
                         draft_model=m["draft"], draft_tokenizer=m["dtok"], hetero=HeteroConfig(rule))
    runner = build_runner("speculative", ForcedPrefill(m["target"], ids[-1]), m["eos"], m["temperature"],
                          drafter=build_drafter(rule, ctx), policy=FixedGamma(gamma))
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros(m["width"])
    for _ in range(n):
        out = runner.generate(ids[:-1], gamma + 2, gen).tokens  # the prefill's token, then a speculative round
        counts[out[1]] += 1
    return counts


@contextmanager
def sorted_pruned_map(enabled: bool):
    """transformers' translator with the pruned head's rows in ascending assistant-id order."""
    from transformers.generation.candidate_generator import (
        AssistantToTargetTranslator,
        AssistantVocabTranslatorCache,
    )

    original = AssistantToTargetTranslator._get_assistant_to_target_input_ids

    def patched(self: Any) -> Any:
        a2t, t2a = original(self)
        return a2t, dict(sorted(t2a.items(), key=lambda kv: kv[1]))

    AssistantVocabTranslatorCache._cache.clear()
    if enabled:
        AssistantToTargetTranslator._get_assistant_to_target_input_ids = patched
    try:
        yield
    finally:
        AssistantToTargetTranslator._get_assistant_to_target_input_ids = original
        AssistantVocabTranslatorCache._cache.clear()


def hf_assistant(m: dict[str, Any], gamma: int) -> Any:
    assistant = copy.deepcopy(m["draft"])  # transformers prunes the assistant's head in place
    gc = assistant.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = gamma, "constant", 0.0
    return assistant


def sample_hf(m: dict[str, Any], ids: list[int], n: int, gamma: int, seed: int, sort: bool) -> np.ndarray:
    counts = np.zeros(m["width"])
    with sorted_pruned_map(sort), torch.inference_mode():
        assistant = hf_assistant(m, gamma)
        inp = torch.tensor([ids])
        torch.manual_seed(seed)  # transformers samples with torch's global generator
        for _ in range(n):
            out = m["target"].generate(
                input_ids=inp, attention_mask=torch.ones_like(inp), assistant_model=assistant, tokenizer=m["tok"],
                assistant_tokenizer=m["dtok"], do_sample=True, temperature=m["temperature"], top_k=0, top_p=1.0,
                max_new_tokens=gamma + 1, pad_token_id=m["eos"][0],
            )
            counts[int(out[0, len(ids)])] += 1
    return counts


@torch.inference_mode()
def hf_reported_draft_law(m: dict[str, Any], ids: list[int], sort: bool) -> dict[str, Any]:
    """At the prefix ``ids``: the draft law transformers *reports* for verification (``get_target_logits``
    of the pruned head's logits) against the law it *samples* its draft token from (the pruned logits'
    softmax, each row moved to the target id of the assistant id that row really is)."""
    from runners.engine.verify import probs

    with sorted_pruned_map(sort):
        from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

        assistant = hf_assistant(m, 1)
        translator = AssistantVocabTranslatorCache.get_translator(
            m["tok"], m["dtok"], m["width"], assistant_model=assistant, assistant_prune_lm_head=True)
        text = m["tok"].decode(ids, skip_special_tokens=True)
        translator.unmap_input_ids()
        pruned = assistant(input_ids=torch.tensor([m["dtok"](text).input_ids])).logits[0, -1]
        reported = probs(translator.get_target_logits(pruned[None])[0], m["temperature"]).double()
        rows = translator.assistant_overlap_token_ids  # assistant id of each pruned row, in the head's order
        sampled = torch.zeros(m["width"], dtype=torch.float64)
        sampled.index_add_(0, translator._assistant_to_target_input_ids[rows], probs(pruned, m["temperature"]).double())
        values = rows.tolist()
    out_of_order = sum(1 for a, b in zip(values, sorted(values), strict=True) if a != b)
    return {"rows": len(values), "rows_out_of_order": out_of_order,
            "tv_reported_vs_sampled": 0.5 * float((reported - sampled).abs().sum())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="gemma3-270m_smollm2-135m", help="conf/pair/NAME.yaml (a draft with another tokenizer)")
    ap.add_argument("--rules", default=",".join(RULES), help="our cross-vocabulary rules to test (comma-separated)")
    ap.add_argument("--no-hf", action="store_true", help="leave transformers out")
    ap.add_argument("--prefixes", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=10, help="prompts considered when choosing the prefixes")
    ap.add_argument("--min-support", type=float, default=2.0, help="smallest effective support 1/sum(p^2) of a prefix")
    ap.add_argument("--samples", type=int, default=400, help="draws per (prefix, method)")
    ap.add_argument("--gamma", type=int, default=1, help="draft tokens per round (the first one is what is tested)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--confidence", type=float, default=0.999)
    ap.add_argument("--null-runs", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if not args.temperature > 0:
        ap.error("--temperature must be > 0 (this tests sampling)")
    torch.set_num_threads(args.threads)
    m = load(args.pair)
    m["temperature"] = args.temperature
    methods = ["target"] + [f"ours:{r}" for r in args.rules.split(",") if r] + ([] if args.no_hf else ["hf", "hf-sorted"])
    bad = [r for r in args.rules.split(",") if r and r not in RULES]
    if bad:
        ap.error(f"unknown rule {bad[0]!r}; rules: {', '.join(RULES)}")
    prefixes = choose_prefixes(m, args.prefixes, args.candidates, args.min_support)
    report: dict[str, Any] = {"pair": args.pair, "temperature": args.temperature, "samples": args.samples,
                              "gamma": args.gamma, "confidence": args.confidence, "prefixes": []}
    if not args.no_hf:
        report["hf_pruned_map"] = {
            "original": hf_reported_draft_law(m, prefixes[0][0], sort=False),
            "sorted": hf_reported_draft_law(m, prefixes[0][0], sort=True),
        }
        for k, v in report["hf_pruned_map"].items():
            print(f"transformers' pruned map ({k}): {v['rows_out_of_order']:,} of {v['rows']:,} head rows out of "
                  f"ascending order; at prefix 1, TV(draft law it reports, draft law it samples) = "
                  f"{v['tv_reported_vs_sampled']:.4f}")
    failed = False
    print(f"\n| prefix | effective support | method | TV to p | tolerance ({args.confidence:g}) | pass | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for k, (ids, p) in enumerate(prefixes, start=1):
        tol = tolerance(p, args.samples, args.confidence, args.null_runs, args.seed + k)
        row = {"ids": ids, "text": m["tok"].decode(ids), "effective_support": 1.0 / float((p * p).sum()),
               "tolerance": tol, "methods": {}}
        for method in methods:
            t0 = time.perf_counter()
            seed = args.seed + 1000 * k
            if method == "target":
                counts = sample_target(p, args.samples, seed)
            elif method.startswith("ours:"):
                counts = sample_ours(m, method.split(":", 1)[1], ids, args.samples, args.gamma, seed)
            else:
                counts = sample_hf(m, ids, args.samples, args.gamma, seed, sort=method == "hf-sorted")
            dist = tv(counts, p)
            ok = dist <= tol
            failed |= method.startswith("ours:") and not ok
            secs = time.perf_counter() - t0
            row["methods"][method] = {"tv": dist, "pass": ok, "seconds": secs}
            print(f"| {k} | {row['effective_support']:.1f} | {method} | {dist:.4f} | {tol:.4f} | {'yes' if ok else 'NO'} "
                  f"| {secs:.0f} |", flush=True)
        report["prefixes"].append(row)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
