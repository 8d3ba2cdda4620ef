"""``python -m runners.replay calibrate``: a pair's latency model measured on what a job of the pair would run.

The config is composed from ``pair=NAME`` and ``OVERRIDES`` (Hydra overrides, e.g. ``threads=2`` or
``pair.target.dtype=bfloat16``); its torch threads are a job's (``runners.jobs.job``: ``threads``, null = torch's own
choice, left alone; ``--threads N`` sets them). The forwards are timed by ``runners.replay.calibration`` (a prompt
lookup pair's draft forwards cost 0), the loops' own overheads by ``measure_overheads`` with the drafter a job of
the pair builds (``runners.drafters.build_drafter``), and ``meta`` says what the forwards ran on (threads, device, dtype, the kernels:
``runners.replay.calibration.timed_here``), which a job's prediction and ``lab compare`` check
(``specbench.timed_on.check_timed_on``). Above batch 1 the target runs on the batched engine's kernels
(``--fast-linear``, as a batched job's ``engine.fast_linear``).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runners.replay.grid import parse_ints
from specbench.config import JobConfig, compose
from specbench.latency import LatencyModel
from specbench.registry import ConfigError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``calibrate`` subcommand's arguments."""
    c = sub.add_parser("calibrate", help="measure the latency model of a pair on this machine")
    c.add_argument("--pair", required=True, help="conf/pair/NAME.yaml")
    c.add_argument("overrides", nargs="*", help="Hydra overrides of the jobs it predicts, e.g. threads=2 "
                                                "pair.target.dtype=bfloat16 (the pair's own by default)")
    c.add_argument("--hetero", help="cross-vocabulary drafter whose overheads are measured, for a draft with another "
                                    "tokenizer (default: the pair's at temperature 0, i.e. slem)")
    c.add_argument("--out", help="output json (default: <results_dir>/latency/<pair>.json)")
    c.add_argument("--k-max", type=int, default=33, help="target forwards of 1..K tokens (default %(default)s)")
    c.add_argument("--draft-k-max", type=int, default=4, help="draft forwards of 1..K tokens (default %(default)s)")
    c.add_argument("--ref-context", type=int, default=128, help="cache length of the k table (default %(default)s)")
    c.add_argument("--contexts", default="32,512", help="cache lengths for the per-context slope")
    c.add_argument("--prefill", default="16,64,128,256", help="prompt lengths for the prefill fit")
    c.add_argument("--warmup", type=int, default=2)
    c.add_argument("--repeats", type=int, default=5)
    c.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: a job's, the config's threads; null: torch's own choice, left alone)")
    c.add_argument("--no-overheads", action="store_true", help="skip measuring the loops' own overhead")
    c.add_argument("--monotone", action="store_true", help="force the k table nondecreasing (isotonic fit)")
    c.add_argument("--batch-sizes", type=int, nargs="+", default=[1],
                   help="also time forwards of B rows, e.g. 1 2 4 8 (default: batch 1 only)")
    c.add_argument("--batch-k-max", type=int, help="target forwards of 1..K tokens above batch 1 (default: --k-max)")
    c.add_argument("--fast-linear", choices=("auto", "false", "head", "all", "onednn"), default="auto",
                   help="the target's kernels above batch 1, as a batched job's engine.fast_linear runs them "
                        "(default %(default)s: the fastest measured on a CPU, off on GPU); batch 1 times the plain "
                        "forward")
    return c


def _config(args: argparse.Namespace) -> JobConfig:
    """The job config the calibration times (module docstring), its torch threads set; ``ConfigError`` on bad
    arguments or a pair without a drafter."""
    import torch

    if min(args.batch_sizes) < 1 or (args.batch_k_max is not None and args.batch_k_max < 1):
        raise ConfigError(f"--batch-sizes and --batch-k-max need integers >= 1, got {args.batch_sizes}, {args.batch_k_max}")
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads needs an integer >= 1, got {args.threads}")
    overrides = [f"pair={args.pair}", *args.overrides] + ([f"hetero={args.hetero}"] if args.hetero else [])
    config = JobConfig.from_mapping(compose(overrides))
    threads = args.threads or config.threads  # a job's: runners.jobs.job sets ``threads`` when given
    if threads:
        torch.set_num_threads(int(threads))
    if config.pair.draft is None:
        raise ConfigError(f"calibrate needs a pair with a draft model or prompt lookup; {config.pair.name!r} has neither")
    return config


def _timer(args: argparse.Namespace, loaded: Any, lookup: bool, pool: list[int],
           draft_pool: list[int]) -> tuple[Callable[..., float], str | bool]:
    """The forward timer (``ModelTimer``; a prompt lookup pair's draft costs 0) and the batched kernels' scope."""
    from runners.replay.calibration import ModelTimer

    target = loaded.target
    batched, fast_scope = {}, False
    if max(args.batch_sizes) > 1:  # above batch 1 the target runs on the batched engine's kernels
        from runners.engine.fast_linear import batch_kernels
        from specbench.config import EngineConfig

        kernels = batch_kernels(target, EngineConfig(fast_linear=False if args.fast_linear == "false" else args.fast_linear))
        fast_scope = kernels.describe()["fast_linear"]
        if kernels.executor is not None:
            batched = {"target": kernels.executor}
    if not lookup:
        return ModelTimer({"target": target, "draft": loaded.draft}, {"target": pool, "draft": draft_pool},
                          batched), fast_scope
    model_timer = ModelTimer({"target": target}, {"target": pool}, batched)

    def timer(name: str, k: int, context: int, batch: int = 1) -> float:
        return 0.0 if name == "draft" else model_timer(name, k, context, batch)

    return timer, fast_scope


def _drafter_factory(config: JobConfig, loaded: Any, dtok: Any) -> Callable[[], Any]:
    """What builds the drafter whose loop overheads are measured: the one a job of the pair builds
    (``runners.drafters.build_drafter``: the pair's draft kind, or its cross-vocabulary rule)."""
    from functools import partial

    from runners.drafters import DrafterContext, build_drafter
    from specbench.models import logits_width

    ctx = DrafterContext(target_tokenizer=loaded.tokenizer, eos_token_ids=loaded.eos,
                         target_vocab_size=logits_width(loaded.target), draft_model=loaded.draft,
                         draft_tokenizer=dtok, options=config.pair.draft.options, hetero=config.hetero)
    return partial(build_drafter, config.hetero_rule or config.pair.draft.kind, ctx)


def _add_overheads(model: LatencyModel, args: argparse.Namespace, loaded: Any, pool: list[int],
                   make: Callable[[], Any]) -> None:
    """The loops' own time per round and per step (``measure_overheads``), batch 1's for every batch size."""
    from runners.replay.calibration import measure_overheads

    over = measure_overheads(loaded.target, loaded.draft, loaded.eos, pool[: args.ref_context], new_tokens=24,
                             repeats=args.repeats // 2 + 1, drafter=make)
    model.round_overhead_ms = over["round_overhead_ms"]
    model.ar_overhead_ms = over["ar_overhead_ms"]
    model.meta.update(loop_overhead_ms=over["loop_overhead_ms"], round_ms=over["round_ms"])
    for costs in model.batches.values():  # the batched loop's own time is not measured here
        costs.round_overhead_ms, costs.ar_overhead_ms = model.round_overhead_ms, model.ar_overhead_ms
    if model.batches:
        model.meta["batch_overheads"] = "batch 1's: the loops' overheads are measured on the one-sequence loop only"


def _report(model: LatencyModel, args: argparse.Namespace, timed: Any, out: Path) -> None:
    """What the terminal gets: the target's and the draft's costs, c, the loop's overhead share, the kernels."""
    tgt, ref = model.target, args.ref_context
    for b in model.batch_sizes[1:]:
        k = args.batch_k_max or args.k_max
        print(f"batch {b}: target 1 token {model.verify_ms(1, ref, b):.2f} ms, {k} tokens {model.verify_ms(k, ref, b):.2f} "
              f"ms; draft 1 token {model.draft_ms(1, ref, b):.2f} ms")
    print(f"target: 1 token {tgt.forward_ms(1, ref):.2f} ms, {args.k_max} tokens {tgt.forward_ms(args.k_max, ref):.2f} "
          f"ms, prefill a+b·P = {tgt.prefill_affine[0]:.2f} + {tgt.prefill_affine[1]:.3f}·P ms; draft: 1 token "
          f"{model.draft.forward_ms(1, ref):.2f} ms; c = {model.c:.2f}; overhead/round {model.round_overhead_ms:.2f} ms")
    if model.meta.get("round_ms"):
        share = model.meta["loop_overhead_ms"] / model.meta["round_ms"]
        print(f"harness overhead (the loop's own 'overhead' phase): {model.meta['loop_overhead_ms']:.2f} ms per round "
              f"of {model.meta['round_ms']:.1f} ms = {100 * share:.2f} % (γ = 4, fixed; target <= 1 %)")
    print(f"timed on {', '.join(f'{k}={v}' for k, v in timed.to_meta().items())}")
    print(out)


def main(args: argparse.Namespace) -> int:
    """Measure, save and report the pair's latency model (module docstring)."""
    from runners.replay.calibration import calibrate, timed_here
    from specbench.models.cache import load_pair
    from specbench.provenance import provenance
    from specbench.tasks import load_task

    config = _config(args)
    if not config.backend.ours:
        return _server_main(args, config)
    pair = config.pair
    lookup = pair.draft.model is None  # a proposer without a model (prompt lookup): no draft forwards to time
    loaded = load_pair(config)
    tok = loaded.tokenizer
    dtok = loaded.draft_tokenizer if not pair.same_tokenizer else tok
    texts = [prompt.turns[0] for prompt in load_task({"name": "embedded", "loader": "embedded"})]
    pool = [i for text in texts for i in tok(text).input_ids]
    draft_pool = pool if dtok is tok else [i for text in texts for i in dtok(text).input_ids]
    timer, fast_scope = _timer(args, loaded, lookup, pool, draft_pool)
    t0 = time.perf_counter()
    model = calibrate(timer, k_max=args.k_max, draft_k_max=args.draft_k_max, ref_context=args.ref_context,
                      contexts=parse_ints(args.contexts), prefill_lengths=parse_ints(args.prefill), warmup=args.warmup,
                      repeats=args.repeats, monotone=args.monotone, batch_sizes=args.batch_sizes,
                      batch_k_max=args.batch_k_max)
    if not args.no_overheads:
        _add_overheads(model, args, loaded, pool, _drafter_factory(config, loaded, dtok))
    # what the forwards ran on: threads, device, dtype, the plain forward at batch 1, the rows > 1's kernels
    timed = timed_here(loaded.target, pair.target.dtype, fast_scope if model.batches else None)
    model.meta.update(pair=args.pair, hetero=config.hetero_rule, c=model.c if math.isfinite(model.c) else None,
                      **timed.to_meta(), seconds=time.perf_counter() - t0, provenance=provenance(pair.target.device))
    out = Path(args.out) if args.out else Path(config.results_dir) / "latency" / f"{args.pair}.json"
    model.save(out)
    _report(model, args, timed, out)
    return 0


def _server_main(args: argparse.Namespace, config: JobConfig) -> int:
    """``backend=llamacpp``: the forwards timed by llama-bench on the job's own build and model files
    (``runners.engine.llamacpp.bench``); the loop's own overheads are not measured (0, and ``meta`` says so)."""
    from runners.engine.llamacpp import binary
    from runners.engine.llamacpp.bench import forward_table
    from runners.engine.llamacpp.files import pair_files
    from runners.replay.calibration import calibrate
    from specbench.provenance import provenance
    from specbench.timed_on import TimedOn

    backend, pair = config.backend, config.pair
    threads = args.threads or backend.threads or config.threads or 2
    build = binary.ensure(backend.version, backend.build_jobs)
    draft_spec = pair.draft.model if pair.draft is not None else None
    target_file, draft_file = pair_files(build, pair.target, draft_spec, backend.target_type, backend.draft_type,
                                         threads)
    contexts, prefill = parse_ints(args.contexts), parse_ints(args.prefill)
    t0 = time.perf_counter()

    def points(k_max: int) -> list[tuple[int, int]]:  # what ``calibrate`` asks of a model: its k table, slope, prefills
        return [*((k, args.ref_context) for k in range(1, k_max + 1)), *((1, c) for c in contexts),
                *((p, 0) for p in prefill)]

    files = {"target": (target_file, args.k_max), "draft": (draft_file, args.draft_k_max)}
    tables = {name: forward_table(build, f.path, points(k_max), threads, args.repeats)
              for name, (f, k_max) in files.items() if f is not None}

    def timer(name: str, k: int, context: int, batch: int = 1) -> float:
        return tables[name][(k, context)] if name in tables else 0.0  # prompt lookup: no draft forwards

    model = calibrate(timer, k_max=args.k_max, draft_k_max=args.draft_k_max, ref_context=args.ref_context,
                      contexts=contexts, prefill_lengths=prefill, warmup=0, repeats=1, monotone=args.monotone)
    timed = TimedOn(threads=int(threads), device="cpu", dtype=pair.target.dtype, fast_linear=False)
    model.meta.update(pair=args.pair, backend=backend.name, build=build.describe(), target_file=target_file.describe(),
                      draft_file=draft_file.describe() if draft_file else None, timer="llama-bench -p k -d context",
                      overheads="not measured (0): llama.cpp's loop is timed in its forwards only",
                      c=model.c if math.isfinite(model.c) else None, **timed.to_meta(),
                      seconds=time.perf_counter() - t0, provenance=provenance("cpu"))
    out = Path(args.out) if args.out else Path(config.results_dir) / "latency" / f"{args.pair}-llamacpp.json"
    model.save(out)
    _report(model, args, timed, out)
    return 0
