#!/usr/bin/env python
"""Replay vs reality on a real pair: are the replayed rounds the real ones, and how far is the
predicted throughput from the measured one?

    python scripts/validate_replay.py                                  # default pair, 2 prompts, 32 tokens
    python scripts/validate_replay.py --latency results/latency/gemma3-270m_gemma3-270m-int8.json \\
        --n-prompts 10 --max-new-tokens 64 --runs specdecode:2 specdecode:5 hf_heuristic:5 gammatune_plus:5

Steps: load the pair (``conf/pair/NAME.yaml``; default: Gemma-3-270M fp32 verified against its
int8-dynamic copy) and the task's first prompts; build their greedy traces
(``runners.replay.trace.build_trace``); for every ``METHOD:GAMMA`` run the real ``SpeculativeRunner``
like a job does (one untimed warm-up generation, then a fresh policy across the prompts, timed)
and ``runners.replay.replay.replay_job`` on the traces; print, per run, whether the rounds are equal
(γ / drafted / accepted traces), the measured and predicted pooled tokens/s and the relative
error, and the same for the target alone (AR, measured while tracing). Without ``--latency`` a
quick calibration (``runners.replay.latency.calibrate``, few repeats) is made first.

Timings are only meaningful on a quiet machine: run it when nothing else uses the CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _single_token_catchup_drafter() -> type:
    import torch

    from runners.drafters.model import ModelDrafter, common_prefix_len
    from runners.engine.kv import cache_arg, crop_to

    class SingleTokenCatchup(ModelDrafter):
        """``ModelDrafter`` that, after its first forward, feeds the tokens it has not seen one per forward."""

        @torch.inference_mode()
        def propose(self, ids, max_tokens, policy, temperature, generator):
            if self.cache is not None and self.seq:
                n = min(common_prefix_len(self.seq, ids), len(ids) - 1)
                if n < len(self.seq):
                    crop_to(self.cache, n)
                    self.seq = self.seq[:n]
                for tok in ids[n : len(ids) - 1]:
                    self.model(input_ids=torch.tensor([[tok]], device=self.device), **cache_arg(self.model, self.cache),
                               use_cache=True, logits_to_keep=1)
                    self.seq.append(tok)
            return super().propose(ids, max_tokens, policy, temperature, generator)

    return SingleTokenCatchup


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="gemma3-270m_gemma3-270m-int8")
    p.add_argument("--task", default="embedded")
    p.add_argument("--n-prompts", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--gamma-max", type=int, default=32)
    p.add_argument("--trace-mode", choices=("sequential", "batched"), default="sequential")
    p.add_argument("--runs", nargs="+", default=["specdecode:2", "specdecode:5", "hf_heuristic:5", "gammatune_plus:5"],
                   help="METHOD:GAMMA (METHOD as for runners.replay grid, e.g. gammatune_plus:threshold=0.3:4)")
    p.add_argument("--latency", help="latency json from `python -m runners.replay calibrate` (default: a quick one)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--single-token-catchup", action="store_true",
                   help="diagnosis: the real runs' drafter feeds its catch-up tokens one per forward, as the trace "
                        "does (an int8-dynamic draft is then replayed exactly; see runners.replay.trace)")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from runners.drafters.model import ModelDrafter
    from runners.engine.speculative import SpeculativeRunner
    from runners.jobs.job import Job, prepare
    from runners.replay.latency import ModelTimer, calibrate, measure_overheads
    from runners.replay.replay import load_method, replay_job
    from runners.replay.trace import build_trace
    from specbench.config import compose
    from specbench.latency import LatencyModel
    from specbench.models import MODEL_CACHE
    from specbench.records import pooled_tokens_per_s
    from specbench.tasks import encode_turn

    drafter_cls = _single_token_catchup_drafter() if args.single_token_catchup else ModelDrafter
    prepared = prepare(compose([f"pair={args.pair}", f"task={args.task}", "method=ar",
                                f"max_new_tokens={args.max_new_tokens}", f"task.n_prompts={args.n_prompts}"]))
    config = prepared.config
    prompts = prepared.prompts[: args.n_prompts]
    t0 = time.perf_counter()
    job = Job(prepared)
    draft = MODEL_CACHE.model(config.pair.draft.model, config.cache_dir)
    print(f"models loaded in {time.perf_counter() - t0:.1f} s")
    ids_list = []
    for prompt in prompts:
        ids_list.append(encode_turn(job.tokenizer, [], prompt.turns[0], config.task.prompt_format)[0])

    if args.latency:
        latency = LatencyModel.load(args.latency)
    else:
        t0 = time.perf_counter()
        pool = [t for ids in ids_list for t in ids]
        latency = calibrate(ModelTimer({"target": job.target, "draft": draft}, pool), k_max=args.gamma_max + 1,
                            draft_k_max=3, ref_context=min(128, len(pool)), contexts=(len(ids_list[0]) + 64,),
                            prefill_lengths=sorted({len(i) for i in ids_list} | {16}), warmup=1, repeats=3)
        over = measure_overheads(job.target, draft, job.eos, ids_list[0], new_tokens=16, repeats=1)
        latency.round_overhead_ms, latency.ar_overhead_ms = over["round_overhead_ms"], over["ar_overhead_ms"]
        print(f"quick calibration in {time.perf_counter() - t0:.1f} s: target 1 tok "
              f"{latency.target.forward_ms(1, 128):.1f} ms, draft 1 tok {latency.draft.forward_ms(1, 128):.1f} ms, "
              f"c = {latency.c:.2f}, overhead/round {latency.round_overhead_ms:.2f} ms")

    # warm-up (untimed), then the traces; AR times come from the trace's own target pass
    SpeculativeRunner(job.target, ModelDrafter(draft, job.eos), load_method("specdecode").build(2), job.eos).generate(
        ids_list[0], min(16, args.max_new_tokens))
    t0 = time.perf_counter()
    traces = [build_trace(job.target, draft, ids, args.max_new_tokens, job.eos, args.gamma_max, args.trace_mode,
                          prompt_id=pr.prompt_id, category=pr.category, pair=config.pair.name, task=config.task.name)
              for pr, ids in zip(prompts, ids_list)]
    print(f"traced {len(traces)} prompts in {time.perf_counter() - t0:.1f} s "
          f"({sum(len(t.tails) for t in traces)} tails, near-ties {sum(t.near_ties for t in traces)})")

    def pooled(tokens: int, ms: float) -> float:
        return pooled_tokens_per_s([tokens], [ms])

    n_tok = sum(t.n for t in traces)
    ar_meas = pooled(n_tok, sum(t.ar_wall_ms for t in traces))
    ar_pred = pooled(n_tok, sum(latency.ar_wall_ms(t.prompt_tokens, t.n) for t in traces))
    print(f"\n{'run':34s} {'rounds equal':>12s} {'measured tok/s':>15s} {'predicted tok/s':>16s} {'error':>8s}")
    print(f"{'ar (target alone)':34s} {'':>12s} {ar_meas:15.2f} {ar_pred:16.2f} {ar_pred / ar_meas - 1:+8.1%}")
    worst = 0.0
    all_equal = True
    for run in args.runs:
        method_text, _, gamma_text = run.rpartition(":")
        method = load_method(method_text)
        gamma = int(gamma_text)
        warm = method.build(gamma)
        SpeculativeRunner(job.target, drafter_cls(draft, job.eos), warm, job.eos).generate(
            ids_list[0], min(16, args.max_new_tokens))
        policy = method.build(gamma)  # a job resets its policy after the warm-up
        runner = SpeculativeRunner(job.target, drafter_cls(draft, job.eos), policy, job.eos)
        outs = [runner.generate(ids, args.max_new_tokens) for ids in ids_list]
        reps = replay_job(traces, method.build(gamma), latency)
        equal = all((o.gamma_trace, o.drafted_trace, o.accepted_trace) == (r.gamma_trace, r.drafted_trace,
                                                                           r.accepted_trace)
                    for o, r in zip(outs, reps))
        lossless = all(o.tokens == t.tokens for o, t in zip(outs, traces))
        all_equal &= equal and lossless
        meas = pooled(sum(len(o.tokens) for o in outs), sum(o.wall_ms for o in outs))
        pred = pooled(sum(r.new_tokens for r in reps), sum(r.wall_ms for r in reps))
        err = pred / meas - 1
        worst = max(worst, abs(err))
        flag = "yes" if equal else "NO"
        if not lossless:
            flag += " (lossy!)"
        print(f"{run:34s} {flag:>12s} {meas:15.2f} {pred:16.2f} {err:+8.1%}")
        acc = [sum(sum(x.accepted_trace) for x in xs) / max(1, sum(sum(x.drafted_trace) for x in xs)) for xs in (outs, reps)]
        rounds = [sum(len(x.accepted_trace) for x in xs) for xs in (outs, reps)]
        print(f"    acceptance real {acc[0]:.3f} / replay {acc[1]:.3f}; rounds real {rounds[0]} / replay {rounds[1]}")
        if not equal:
            for o, r, t in zip(outs, reps, traces):
                a = list(zip(o.gamma_trace, o.drafted_trace, o.accepted_trace))
                b = list(zip(r.gamma_trace, r.drafted_trace, r.accepted_trace))
                if a != b:
                    first = next((i for i, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))
                    print(f"    {t.prompt_id}: first different round {first} of {len(a)}: real (γ, d, A) {a[first:first + 3]}"
                          f" replay {b[first:first + 3]}")
    print(f"\nrounds equal in every run: {all_equal}; worst throughput error {worst:.1%}")
    meta = {k: latency.meta.get(k) for k in ("kind", "pair", "threads") if latency.meta.get(k) is not None}
    print(f"latency model: {meta or 'quick calibration'}")
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
