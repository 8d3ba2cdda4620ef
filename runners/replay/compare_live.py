"""``python -m runners.replay lab compare --live``: replay vs reality on a real pair, in one process.

    python -m runners.replay lab compare --live                      # default pair, 2 prompts, 32 tokens
    python -m runners.replay lab compare --live --latency results/latency/gemma3-270m_gemma3-270m-int8.json \\
        --n-prompts 10 --max-new-tokens 64 --runs specdecode:2 specdecode:5 hf_heuristic:5 gammatune_plus:5

Steps: load the pair (``conf/pair/NAME.yaml``; default: Gemma-3-270M fp32 verified against its
int8-dynamic copy) and the task's first prompts; build their greedy traces
(``runners.replay.trace_build.build_trace``); for every ``METHOD:GAMMA`` run the real ``SpeculativeRunner``
like a job does (one untimed warm-up generation, then a fresh policy across the prompts, timed)
and ``runners.replay.replay.replay_job`` on the traces; print, per run, whether the rounds are equal
(γ / drafted / accepted traces), the measured and predicted pooled tokens/s and the relative
error, and the same for the target alone (AR, measured while tracing). Without ``--latency`` (a json, or a
folder of ``<pair>.json``) a quick calibration (``runners.replay.calibration.calibrate``, few repeats) is made first;
a given file timed on other torch threads (``--threads``), another device or dtype, or other batch-1 kernels than
the runs here (the plain loop) is refused in one line (``specbench.timed_on.check_timed_on``).
(formerly ``scripts/validate_replay.py``; the pair's models come from ``specbench.models.cache.load_pair``,
as a job's do; the simulator may not import ``runners.jobs``.)

Timings are only meaningful on a quiet machine: run it when nothing else uses the CPU.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from specbench.registry import ConfigError

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _single_token_catchup_drafter() -> type:
    import torch

    from runners.drafters.model import ModelDrafter, common_prefix_len
    from runners.engine.kv import cache_arg, crop_to

    class SingleTokenCatchup(ModelDrafter):
        """``ModelDrafter`` that, after its first forward, feeds the tokens it has not seen one per forward."""

        @torch.inference_mode()
        def propose(self, ids, max_tokens, policy, sampling, generator):
            if self.cache is not None and self.seq:
                n = min(common_prefix_len(self.seq, ids), len(ids) - 1)
                if n < len(self.seq):
                    crop_to(self.cache, n)
                    self.seq = self.seq[:n]
                for tok in ids[n : len(ids) - 1]:
                    self.model(input_ids=torch.tensor([[tok]], device=self.device), **cache_arg(self.model, self.cache),
                               use_cache=True, logits_to_keep=1)
                    self.seq.append(tok)
            return super().propose(ids, max_tokens, policy, sampling, generator)

    return SingleTokenCatchup


def _load(args: argparse.Namespace) -> tuple[Any, list[Any], Any, list[list[int]]]:
    """``(config, prompts, models, their token ids)``: the pair and the task's first prompts (module docstring)."""
    from specbench.config import JobConfig, compose
    from specbench.models.cache import load_pair
    from specbench.tasks import encode_turn, load_task

    config = JobConfig.from_mapping(compose([f"pair={args.pair}", f"task={args.task}", "method=ar",
                                             f"max_new_tokens={args.max_new_tokens}", f"task.n_prompts={args.n_prompts}"]))
    prompts = load_task(config.task)[: args.n_prompts]
    if not prompts:
        raise ConfigError(f"task {config.task.name!r} selected no prompts")
    if config.pair.draft is None or config.pair.draft.model is None:
        raise ConfigError(f"--live needs a pair with a draft model; {config.pair.name!r} has none")
    t0 = time.perf_counter()
    models = load_pair(config)  # the target, its tokenizer and EOS ids, the draft model
    print(f"models loaded in {time.perf_counter() - t0:.1f} s")
    ids_list = [encode_turn(models.tokenizer, [], prompt.turns[0], config.task.prompt_format)[0] for prompt in prompts]
    return config, prompts, models, ids_list


def _latency(args: argparse.Namespace, config: Any, models: Any, ids_list: list[list[int]]) -> Any:
    """The latency model the replay charges: ``--latency`` (refused when timed on other kernels, threads, device or
    dtype than the runs here), else a quick calibration."""
    from runners.replay.calibration import ModelTimer, calibrate, measure_overheads, timed_here
    from specbench.latency import LatencyModel
    from specbench.timed_on import check_timed_on

    here = timed_here(models.target, config.pair.target.dtype)  # the runs below: plain forwards, batch 1
    if args.latency:
        path = Path(args.latency)
        path = path / f"{config.pair.name}.json" if path.is_dir() else path
        latency = LatencyModel.load(path)
        check_timed_on(latency, here, "lab compare --live", path, config.pair.name)
        return latency
    t0 = time.perf_counter()
    pool = [t for ids in ids_list for t in ids]
    latency = calibrate(ModelTimer({"target": models.target, "draft": models.draft}, pool), k_max=args.gamma_max + 1,
                        draft_k_max=3, ref_context=min(128, len(pool)), contexts=(len(ids_list[0]) + 64,),
                        prefill_lengths=sorted({len(i) for i in ids_list} | {16}), warmup=1, repeats=3)
    over = measure_overheads(models.target, models.draft, models.eos, ids_list[0], new_tokens=16, repeats=1)
    latency.round_overhead_ms, latency.ar_overhead_ms = over["round_overhead_ms"], over["ar_overhead_ms"]
    latency.meta.update(pair=config.pair.name, quick=True, **here.to_meta())
    print(f"quick calibration in {time.perf_counter() - t0:.1f} s: target 1 tok "
          f"{latency.target.forward_ms(1, 128):.1f} ms, draft 1 tok {latency.draft.forward_ms(1, 128):.1f} ms, "
          f"c = {latency.c:.2f}, overhead/round {latency.round_overhead_ms:.2f} ms")
    return latency


def _compare_run(run: str, args: argparse.Namespace, models: Any, ids_list: list[list[int]], traces: list[Any],
                 latency: Any, drafter_cls: type) -> tuple[bool, float]:
    """One ``METHOD:GAMMA``: the real loop (one untimed warm-up, then a fresh policy across the prompts, as a job)
    against its replay on the traces; prints the row and returns ``(rounds equal and lossless, throughput error)``."""
    from runners.engine.factory import build_runner
    from runners.replay.grid import load_method
    from runners.replay.replay import replay_job
    from specbench.records import pooled_tokens_per_s
    from specbench.rounds import pooled_acceptance

    method_text, _, gamma_text = run.rpartition(":")
    method, gamma = load_method(method_text), int(gamma_text)

    def runner(policy: Any) -> Any:
        return build_runner("speculative", models.target, models.eos, drafter=drafter_cls(models.draft, models.eos),
                            policy=policy)

    runner(method.build(gamma)).generate(ids_list[0], min(16, args.max_new_tokens))  # the warm-up
    loop = runner(method.build(gamma))  # a job resets its policy after the warm-up
    outs = [loop.generate(ids, args.max_new_tokens) for ids in ids_list]
    reps = replay_job(traces, method.build(gamma), latency)
    equal = all(o.rounds.schedule == r.rounds.schedule for o, r in zip(outs, reps))
    lossless = all(o.tokens == t.tokens for o, t in zip(outs, traces))
    meas = pooled_tokens_per_s([sum(len(o.tokens) for o in outs)], [sum(o.wall_ms for o in outs)])
    pred = pooled_tokens_per_s([sum(r.new_tokens for r in reps)], [sum(r.wall_ms for r in reps)])
    flag = ("yes" if equal else "NO") + ("" if lossless else " (lossy!)")
    print(f"{run:34s} {flag:>12s} {meas:15.2f} {pred:16.2f} {pred / meas - 1:+8.1%}")
    acc = [pooled_acceptance([x.rounds for x in xs]) for xs in (outs, reps)]
    rounds = [sum(len(x.rounds) for x in xs) for xs in (outs, reps)]
    print(f"    acceptance real {acc[0]:.3f} / replay {acc[1]:.3f}; rounds real {rounds[0]} / replay {rounds[1]}")
    for o, r, t in zip(outs, reps, traces):
        a, b = o.rounds.schedule, r.rounds.schedule
        if a != b:
            first = next((i for i, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))
            print(f"    {t.prompt_id}: first different round {first} of {len(a)}: real (γ, d, A) {a[first:first + 3]}"
                  f" replay {b[first:first + 3]}")
    return equal and lossless, pred / meas - 1


def live_main(args: argparse.Namespace) -> int:
    """The real loop and the replay side by side on ``args.pair`` (module docstring); 1 when some run's
    rounds differ from the replay's, or a run was lossy."""
    import torch

    torch.set_num_threads(args.threads)
    from runners.drafters.model import ModelDrafter
    from runners.engine.factory import build_runner
    from runners.replay.grid import load_method
    from runners.replay.trace_build import build_trace
    from specbench.records import pooled_tokens_per_s

    drafter_cls = _single_token_catchup_drafter() if args.single_token_catchup else ModelDrafter
    config, prompts, models, ids_list = _load(args)
    latency = _latency(args, config, models, ids_list)
    # warm-up (untimed), then the traces; AR times come from the trace's own target pass
    build_runner("speculative", models.target, models.eos, drafter=ModelDrafter(models.draft, models.eos),
                 policy=load_method("specdecode").build(2)).generate(ids_list[0], min(16, args.max_new_tokens))
    t0 = time.perf_counter()
    traces = [build_trace(models.target, models.draft, ids, args.max_new_tokens, models.eos, args.gamma_max,
                          args.trace_mode, prompt_id=pr.prompt_id, category=pr.category, pair=config.pair.name,
                          task=config.task.name)
              for pr, ids in zip(prompts, ids_list)]
    print(f"traced {len(traces)} prompts in {time.perf_counter() - t0:.1f} s "
          f"({sum(len(t.tails) for t in traces)} tails, near-ties {sum(t.near_ties for t in traces)})")
    n_tok = sum(t.n for t in traces)
    ar_meas = pooled_tokens_per_s([n_tok], [sum(t.ar_wall_ms for t in traces)])
    ar_pred = pooled_tokens_per_s([n_tok], [sum(latency.ar_wall_ms(t.prompt_tokens, t.n) for t in traces)])
    print(f"\n{'run':34s} {'rounds equal':>12s} {'measured tok/s':>15s} {'predicted tok/s':>16s} {'error':>8s}")
    print(f"{'ar (target alone)':34s} {'':>12s} {ar_meas:15.2f} {ar_pred:16.2f} {ar_pred / ar_meas - 1:+8.1%}")
    results = [_compare_run(run, args, models, ids_list, traces, latency, drafter_cls) for run in args.runs]
    all_equal = all(ok for ok, _ in results)
    worst = max((abs(err) for _, err in results), default=0.0)
    print(f"\nrounds equal in every run: {all_equal}; worst throughput error {worst:.1%}")
    meta = {k: latency.meta.get(k) for k in ("kind", "pair", "quick") if latency.meta.get(k) is not None}
    print(f"latency model: {meta}, timed on {latency.timed_on.to_meta()}")
    return 0 if all_equal else 1
