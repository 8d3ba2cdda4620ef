"""Paper-scale costs without the Hub (issue 43, items 2 and 3): models built from their published
configs with random weights have the real shapes, hence the real costs (their outputs do not matter
for timing; nothing here is a quality or acceptance figure).

    python scripts/gpu_paper_costs.py --out DIR [--stages generate calibrate graphs] [--device cuda]

Stages (each one guarded: a failing stage is logged and the next runs; every result is written as
soon as it is measured, so a run cut short keeps what finished):

- ``generate``: transformers' own ``generate()`` (greedy, eager, its default dynamic cache, as the
  GammaTune paper's harness ran) on every model of the paper's four pairs that fits one GPU: wall
  time per new token after a fixed prompt, interleaved across models (A B C A B C), beside the
  paper's Table 1 ("Milliseconds per token", `../shared/papers/gammatune.md`).
- ``calibrate``: the lab's latency file (``runners.replay.calibration.calibrate`` with the real
  ``ModelTimer``, and ``measure_overheads`` on our loop) for each pair: Llama-3.1-8B with an
  EAGLE-like one-layer draft, with Llama-3.2-1B; Vicuna-7B with Vicuna-68M; Vicuna-13B with
  Vicuna-160M. The files are ``LatencyModel`` JSON: ``python -m runners.replay grid --latency`` and
  the lab read them; ``meta.shapes`` says they are random-weight shapes.
  Two regimes (``--regimes``): ``eager`` (``ModelTimer``: transformers' eager loop, the papers' regime)
  and ``captured`` (``GraphTimer``: a static cache, each forward captured in a CUDA graph and replayed, the
  production regime), ``latency_<pair>.json`` and ``latency_<pair>_captured.json``.
- ``graphs``: one forward of k tokens on a cache of ``--context`` tokens, four ways side by side
  (interleaved, medians and spreads): eager with the dynamic cache (what our loop runs), eager with
  transformers' ``StaticCache``, the same static-cache forward captured once per width in a
  CUDA graph and replayed (``torch.cuda.CUDAGraph``), and the model's matmuls alone captured (``floor``:
  the weights read once, ``capture_matmuls``): how much of a step, and of c, is launch overhead, and how
  far the captured forward is from the weights' read. CUDA only.
- ``compiled``: the captured forward with its kernels fused by ``torch.compile`` first, against the plain
  captured forward, per width of ``--compile-widths`` (``compiled_one``). CUDA only.

Shapes (``SHAPES``) are the models' published ``config.json`` values (Hub repositories named in each
entry). Deliberate simplifications, stated where the figures are shown: the EAGLE-like draft is one
Llama-3.1-8B decoder layer with EAGLE-3's 32000-token draft head, without EAGLE-3's input fc and its
double-width attention input (~0.1 GB of weights a step more); Llama-3.1-70B (the paper's int8
target) is not built (no int8 kernels on this image, 70 GB of random weights to quantise).
``--tiny`` shrinks every shape (layers, widths, vocabularies) so the whole script runs on a CPU in
seconds: what the CPU test runs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: the GammaTune paper's Table 1 (ms per token on its H100, HF eager, fp16; 70B in int4)
PAPER_TABLE1_MS = {"llama-3.2-1b": 8.87, "llama-3.1-8b": 16.65, "vicuna-68m": 1.76, "vicuna-160m": 5.61,
                   "vicuna-7b": 14.29, "vicuna-13b": 20.15}

_LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_theta": 500000.0}

#: name -> (model_type, config.json values, source). Values from each repository's config.json.
SHAPES: dict[str, tuple[str, dict[str, Any], str]] = {
    "llama-3.1-8b": ("llama", dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                                   rms_norm_eps=1e-5, rope_parameters=_LLAMA3_ROPE, tie_word_embeddings=False),
                     "meta-llama/Llama-3.1-8B-Instruct"),
    "llama-3.2-1b": ("llama", dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                   max_position_embeddings=131072, rms_norm_eps=1e-5,
                                   rope_parameters={**_LLAMA3_ROPE, "factor": 32.0}, tie_word_embeddings=True),
                     "meta-llama/Llama-3.2-1B-Instruct"),
    "eagle-like-8b": ("llama", dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=1,
                                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                                    rms_norm_eps=1e-5, rope_parameters=_LLAMA3_ROPE, tie_word_embeddings=False),
                      "EAGLE-3's draft for Llama-3.1-8B-Instruct (one decoder layer, draft_vocab_size 32000), simplified"),
    "vicuna-7b": ("llama", dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                                rms_norm_eps=1e-5, tie_word_embeddings=False), "lmsys/vicuna-7b-v1.5"),
    "vicuna-13b": ("llama", dict(vocab_size=32000, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                 num_attention_heads=40, num_key_value_heads=40, max_position_embeddings=4096,
                                 rms_norm_eps=1e-5, tie_word_embeddings=False), "lmsys/vicuna-13b-v1.5"),
    "vicuna-68m": ("llama", dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=2,
                                 num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=2048,
                                 rms_norm_eps=1e-6, tie_word_embeddings=False), "double7/vicuna-68m"),
    "vicuna-160m": ("llama", dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                  num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=2048,
                                  rms_norm_eps=1e-6, tie_word_embeddings=False), "double7/vicuna-160m"),
    "gemma3-270m": ("gemma3_text", dict(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                                        num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                                        query_pre_attn_scalar=256, sliding_window=512, max_position_embeddings=32768,
                                        tie_word_embeddings=True),
                    "google/gemma-3-270m (the project's offline target)"),
}

#: (target, draft) of the calibrate stage: the paper's pairs that fit one GPU, and the EAGLE-like draft of
#: SpecDecode-Bench's Llama-3.1-8B engine. A draft whose vocabulary is smaller than its target's (EAGLE-3's
#: draft head) cannot run our same-vocabulary loop: its file takes the loop overheads measured on the pair
#: before it with the same target (``meta.overheads_from``).
PAIRS = [("llama-3.1-8b", "llama-3.2-1b"), ("llama-3.1-8b", "eagle-like-8b"), ("vicuna-7b", "vicuna-68m"),
         ("vicuna-13b", "vicuna-160m")]
#: the generate stage's models: every model of the paper's Table 1 built here
GENERATE = ["llama-3.2-1b", "llama-3.1-8b", "vicuna-68m", "vicuna-160m", "vicuna-7b", "vicuna-13b"]
#: the graphs stage: (shape, dtype) — the 270M target in fp32 and its bf16 copy (the GPU pair of issue 32),
#: the 8B target and its drafts in bf16
GRAPHS = [("gemma3-270m", "float32"), ("gemma3-270m", "bfloat16"), ("llama-3.1-8b", "bfloat16"),
          ("llama-3.2-1b", "bfloat16"), ("eagle-like-8b", "bfloat16"), ("vicuna-68m", "bfloat16")]


def tiny(values: dict[str, Any]) -> dict[str, Any]:
    """The shape shrunk for a CPU run: 2 layers (1 if it had 1), widths ÷ 32, vocabulary ÷ 256, same ratios
    of heads (kept a divisor of the width)."""
    v = dict(values)
    heads = max(1, v["num_attention_heads"] // 8)
    kv = max(1, min(heads, v.get("num_key_value_heads", heads) // 8))
    while heads % kv:
        kv -= 1
    v.update(hidden_size=16 * heads, intermediate_size=max(32, v["intermediate_size"] // 64),
             num_hidden_layers=min(2, v["num_hidden_layers"]), num_attention_heads=heads, num_key_value_heads=kv,
             vocab_size=max(64, v["vocab_size"] // 256))
    if "head_dim" in v:
        v["head_dim"] = 16
    if "sliding_window" in v:
        v["sliding_window"] = 64
    if "query_pre_attn_scalar" in v:
        v["query_pre_attn_scalar"] = 16
    return v


def build(name: str, dtype: str, device: str, small: bool) -> Any:
    """A model of shape ``name`` with random weights (transformers' own initialisation), on ``device``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, values, _ = SHAPES[name]
    values = tiny(values) if small else values
    config = AutoConfig.for_model(model_type, **values)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return model.eval()


def n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Out:
    """The stage results, rewritten after every addition (a run cut short keeps what finished)."""

    def __init__(self, folder: Path, meta: dict[str, Any], name: str = "paper_costs.json") -> None:
        self.folder, self.name = folder, name
        folder.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"meta": meta}

    def put(self, stage: str, key: str, value: Any) -> None:
        self.data.setdefault(stage, {})[key] = value
        path = self.folder / self.name
        path.with_suffix(".tmp").write_text(json.dumps(self.data, indent=1, default=str))
        path.with_suffix(".tmp").replace(path)


def spread(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values), "max": max(values),
            "n": len(values)}


# ---------------------------------------------------------------------- stages

def stage_generate(models: dict[str, Any], args: argparse.Namespace, out: Out) -> None:
    """transformers' generate() per model, interleaved: ms per new token (wall / new tokens) and TPOT."""
    import torch

    names = [n for n in GENERATE if n in models]
    prompt = {n: torch.randint(3, models[n].config.vocab_size, (1, args.prompt_len), generator=torch.Generator().manual_seed(1))
              .to(args.device) for n in names}
    samples: dict[str, list[float]] = {n: [] for n in names}
    first: dict[str, list[float]] = {n: [] for n in names}
    new = args.new_tokens

    def one(n: str) -> tuple[float, float]:
        model = models[n]
        with torch.inference_mode():
            sync(args.device)
            t0 = time.perf_counter()
            model.generate(prompt[n], attention_mask=torch.ones_like(prompt[n]), max_new_tokens=1, do_sample=False,
                           pad_token_id=0)
            sync(args.device)
            t1 = time.perf_counter()
            ids = model.generate(prompt[n], attention_mask=torch.ones_like(prompt[n]), max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=None)
            sync(args.device)
            t2 = time.perf_counter()
        assert ids.shape[1] - prompt[n].shape[1] == new, ids.shape
        return (t1 - t0) * 1000, (t2 - t1) * 1000

    for rep in range(args.generate_repeats + 1):
        for n in names:
            ttft, wall = one(n)
            if rep:  # the first sweep warms up
                samples[n].append(wall / new)
                first[n].append(ttft)
    for n in names:
        ms = statistics.median(samples[n])
        tpot = statistics.median([(w * new - f) / (new - 1) for w, f in zip(samples[n], first[n])])
        row = {"ms_per_token": ms, "spread": spread(samples[n]), "tpot_ms": tpot, "ttft_ms": statistics.median(first[n]),
               "paper_table1_ms": PAPER_TABLE1_MS.get(n), "params": n_params(models[n])}
        out.put("generate", n, row)
        ref = row["paper_table1_ms"]
        print(f"generate {n:14s} {ms:8.2f} ms/token (TPOT {tpot:.2f}, TTFT {row['ttft_ms']:.1f}; "
              f"[{row['spread']['min']:.2f}, {row['spread']['max']:.2f}] over {len(samples[n])})"
              + (f"; paper's Table 1: {ref} ms, ratio {ms / ref:.2f}" if ref else ""), flush=True)


def stage_calibrate(models: dict[str, Any], args: argparse.Namespace, out: Out) -> None:
    """The lab's latency file for each pair and regime (the project's calibration on the real timer): ``eager``,
    transformers' eager loop on a dynamic cache (``ModelTimer``, what our loop runs and the papers' harnesses
    ran), ``latency_<pair>.json``; ``captured``, each forward on a static cache captured in a CUDA graph and
    replayed (``GraphTimer``; ``static`` where nothing can be captured: the CPU), ``latency_<pair>_captured.json``.
    Both regimes carry our eager loop's measured overheads (``measure_overheads``): what captured forwards
    alone would change, not a captured loop."""
    import torch

    from runners.replay.calibration import GraphTimer, ModelTimer, calibrate, measure_overheads
    from specbench.provenance import provenance

    overheads: dict[str, tuple[str, dict[str, float]]] = {}  # target -> (pair, measured overheads)
    for target_name, draft_name in PAIRS:
        pair = f"{target_name}_{draft_name}"
        if target_name not in models or draft_name not in models:
            continue
        target, draft = models[target_name], models[draft_name]
        vocab = min(target.config.vocab_size, draft.config.vocab_size)
        pool = torch.randint(3, vocab, (4096,), generator=torch.Generator().manual_seed(2)).tolist()
        over, source = None, pair
        if draft.config.vocab_size >= target.config.vocab_size:
            over = measure_overheads(target, draft, [], pool[: args.context], new_tokens=24, gamma=4,
                                     repeats=args.repeats // 2 + 1)
            overheads[target_name] = (pair, over)
        elif target_name in overheads:
            source, over = overheads[target_name]
        if args.pairs and pair not in args.pairs:  # its overheads measured (a later pair may take them), no file
            continue
        sizes = args.batch_sizes if (target_name, draft_name) == PAIRS[1] else [1]  # SpecDecode-Bench's regime
        for regime in args.regimes:
            t0 = time.perf_counter()
            if regime == "eager":
                timer: Any = ModelTimer({"target": target, "draft": draft}, pool)
                label, loop = "eager", "transformers eager, dynamic cache (our loop)"
            else:
                timer = GraphTimer({"target": target, "draft": draft}, pool, k_max=max(args.k_max, args.batch_k_max, 4))
                label = "captured" if timer.capture else "static"
                loop = ("static cache, each forward captured in a CUDA graph and replayed (GraphTimer)" if timer.capture
                        else "static cache, eager (GraphTimer without capture)")
            model = calibrate(timer, k_max=args.k_max, draft_k_max=4, ref_context=args.context,
                              contexts=args.contexts, prefill_lengths=args.prefill, warmup=2, repeats=args.repeats,
                              batch_sizes=sizes, batch_k_max=args.batch_k_max)
            if over is not None:
                model.round_overhead_ms, model.ar_overhead_ms = over["round_overhead_ms"], over["ar_overhead_ms"]
                model.meta.update(loop_overhead_ms=over["loop_overhead_ms"], round_ms=over["round_ms"],
                                  overheads_from=source)
                for costs in model.batches.values():
                    costs.round_overhead_ms, costs.ar_overhead_ms = model.round_overhead_ms, model.ar_overhead_ms
            else:
                print(f"calibrate {pair}: loop overheads not measured (a smaller draft vocabulary, no same-target pair "
                      "before it)", flush=True)
            model.meta.update(
                pair=pair, regime=label, random_weights=True, c=model.c if math.isfinite(model.c) else None,
                shapes={n: {"source": SHAPES[n][2], "params": n_params(models[n]), "tiny": args.tiny}
                        for n in (target_name, draft_name)},
                dtype=args.dtype, threads=torch.get_num_threads(), loop=loop,
                **({"graphs": timer.graphs} if regime != "eager" else {}),
                seconds=time.perf_counter() - t0, provenance=provenance(args.device, {"target": args.dtype, "draft": args.dtype}))
            suffix = "" if label == "eager" else f"_{label}"
            path = model.save(out.folder / f"latency_{pair}{suffix}.json")
            tgt = model.target
            row = {"file": path.name, "regime": label, "c": model.meta["c"],
                   "target_step_ms": {k: tgt.forward_ms(k, args.context) for k in (1, 2, 4, 8, 16, args.k_max)},
                   "draft_step_ms": model.draft.forward_ms(1, args.context), "round_overhead_ms": model.round_overhead_ms,
                   "ar_overhead_ms": model.ar_overhead_ms, "seconds": model.meta["seconds"]}
            out.put("calibrate", f"{pair}{suffix}", row)
            steps = ", ".join(f"k={k} {v:.2f}" for k, v in row["target_step_ms"].items())
            print(f"calibrate {pair} [{label}]: target {steps} ms; draft 1 token {row['draft_step_ms']:.2f} ms; "
                  f"c = {model.c:.2f}; round overhead {model.round_overhead_ms:.2f} ms, AR overhead "
                  f"{model.ar_overhead_ms:.2f} ms ({row['seconds']:.0f} s)", flush=True)
            for b in model.batch_sizes[1:]:
                print(f"calibrate {pair} [{label}] batch {b}: target 1 token {model.verify_ms(1, args.context, b):.2f} ms, "
                      f"{args.batch_k_max} tokens {model.verify_ms(args.batch_k_max, args.context, b):.2f} ms; "
                      f"draft 1 token {model.draft_ms(1, args.context, b):.2f} ms", flush=True)
            del timer
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()


def graph_one(name: str, dtype: str, model: Any, args: argparse.Namespace, out: Out) -> None:
    """One k-token forward on a ``--context`` cache: eager dynamic cache, eager static cache, captured graph.
    Every static forward runs on its own prefilled cache (one per mode and width), rewound to the context
    before each call; the captured graph of width k is that forward recorded once (after warm-ups on a side
    stream, as ``torch.cuda.graphs`` asks) and replayed."""
    import torch
    from transformers import StaticCache

    from runners.engine.kv import cache_arg, rewind
    from runners.replay.calibration import ModelTimer
    widths = args.widths
    window = getattr(model.config, "sliding_window", None)
    ctx = min(args.context, window - max(widths) - 1) if window else args.context  # inside one window
    dev = args.device
    pool = torch.randint(3, model.config.vocab_size, (4096,), generator=torch.Generator().manual_seed(3)).tolist()
    dynamic = ModelTimer({"target": model}, pool)
    static_modes = ["eager_static"] + (["captured"] if dev.startswith("cuda") else [])
    caches, inputs = {}, {}
    with torch.inference_mode():
        for k in widths:
            inputs[k] = torch.tensor([pool[ctx:ctx + k]], device=dev)
            for mode in static_modes:
                cache = StaticCache(config=model.config, max_cache_len=ctx + max(widths) + 1)
                model(input_ids=torch.tensor([pool[:ctx]], device=dev), **cache_arg(model, cache), use_cache=True,
                      logits_to_keep=1)
                caches[(mode, k)] = cache

    def static(mode: str, k: int) -> Any:
        rewind(caches[(mode, k)], ctx)
        return model(input_ids=inputs[k], **cache_arg(model, caches[(mode, k)]), use_cache=True, logits_to_keep=k)

    graphs: dict[int, Any] = {}
    outputs: dict[int, Any] = {}  # each graph's logits (its static output buffer)
    error = None
    if "captured" in static_modes:
        try:
            with torch.inference_mode():
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for k in widths:
                        for _ in range(3):
                            static("captured", k)
                torch.cuda.current_stream().wait_stream(stream)
                for k in widths:
                    rewind(caches[("captured", k)], ctx)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        outputs[k] = model(input_ids=inputs[k], **cache_arg(model, caches[("captured", k)]),
                                           use_cache=True, logits_to_keep=k).logits
                    graphs[k] = g
        except Exception as exc:  # the eager rows still come
            error = repr(exc)
            print(f"graphs {name} {dtype}: capture failed: {exc!r}", flush=True)
            graphs = {}

    floors: dict[int, Any] = {}  # the weights' matmuls alone, captured: the floor of a forward's cost
    if graphs:
        try:
            floors = {k: capture_matmuls(model, k) for k in widths}
        except Exception as exc:
            print(f"graphs {name} {dtype}: matmul floor not captured: {exc!r}", flush=True)

    def sample(key: tuple[str, int]) -> float:
        mode, k = key
        if mode == "eager_dynamic":
            return dynamic("target", k, ctx)
        with torch.inference_mode():
            if mode == "captured":
                rewind(caches[(mode, k)], ctx)
            sync(dev)
            t0 = time.perf_counter()
            if mode == "captured":
                graphs[k].replay()
            elif mode == "floor":
                floors[k].replay()
            else:
                static(mode, k)
            sync(dev)
        return (time.perf_counter() - t0) * 1000

    modes = ["eager_dynamic", "eager_static"] + (["captured"] if graphs else []) + (["floor"] if floors else [])
    keys = [(m, k) for k in widths for m in modes]
    samples: dict[tuple[str, int], list[float]] = {key: [] for key in keys}
    for rep in range(args.graph_repeats + 3):  # sweeps over every (mode, k): 3 discarded, then the samples
        for key in keys:
            v = sample(key)
            if rep >= 3:
                samples[key].append(v)
    agree = {}  # the replayed graph computes what the eager static forward computes
    with torch.inference_mode():
        for k in graphs:
            rewind(caches[("captured", k)], ctx)
            graphs[k].replay()
            agree[f"captured_vs_eager_max_abs_k{k}"] = float((outputs[k].float() - static("eager_static", k).logits
                                                              .float()).abs().max())
    row = {"context": ctx, "dtype": dtype, "params": n_params(model), "weight_bytes": weight_bytes(model),
           "capture_error": error, **agree,
           **{f"{m}_k{k}": spread(samples[(m, k)]) for m, k in keys}}
    out.put("graphs", f"{name}_{dtype}", row)
    for k in widths:
        cells = "  ".join(f"{m} {statistics.median(samples[(m, k)]):7.2f} ms "
                          f"[IQR {row[f'{m}_k{k}']['q3'] - row[f'{m}_k{k}']['q1']:.2f}]" for m in modes)
        same = agree.get(f"captured_vs_eager_max_abs_k{k}")
        print(f"graphs {name:14s} {dtype:8s} ctx {ctx} k={k:2d}: {cells}"
              + (f"  (captured - eager logits: max |diff| {same:.3g})" if same is not None else ""), flush=True)


def weight_bytes(model: Any) -> int:
    """The bytes of the model's distinct parameters (a tied LM head counted once): what one forward reads."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def capture_matmuls(model: Any, k: int) -> Any:
    """One CUDA graph of every ``nn.Linear`` of ``model`` (the LM head included) applied to ``k`` rows of random
    input, one after the other: the weights read once by cuBLAS at width ``k``, with nothing else of the forward
    (norms, rotary, attention over the cache, residuals): the floor a captured forward could reach."""
    import torch
    import torch.nn.functional as F

    from runners.replay.calibration import capture_graph

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weight = next(model.parameters())
    xs = {n: torch.randn(k, n, device=weight.device, dtype=weight.dtype) for n in {m.in_features for m in linears}}

    def matmuls() -> None:
        for m in linears:
            F.linear(xs[m.in_features], m.weight)

    return capture_graph(matmuls)[0]


def compiled_one(name: str, dtype: str, model: Any, args: argparse.Namespace, out: Out) -> None:
    """The captured forward with its kernels fused first: ``torch.compile`` (inductor, default mode, static
    shapes: one compilation per width) of the static-cache forward, then captured in a CUDA graph as
    ``graph_one``'s, against the plain captured forward of the same width, interleaved (A B A B); the logits of
    both compared. One row per width, written as soon as it is measured (a compilation cut short by the stage's
    limit keeps the widths before it). CUDA only."""
    import torch

    from runners.engine.kv import cache_arg, new_static_cache, rewind
    from runners.replay.calibration import capture_graph

    dev = args.device
    window = getattr(model.config, "sliding_window", None)
    ctx = min(args.context, window - max(args.widths) - 1) if window else args.context
    pool = torch.randint(3, model.config.vocab_size, (ctx + 64,), generator=torch.Generator().manual_seed(3))
    compiled = torch.compile(model, dynamic=False)
    for k in args.compile_widths:
        t0 = time.perf_counter()
        inp = pool[ctx:ctx + k].view(1, k).to(dev)
        runs, outputs = {}, {}
        for mode, fn in (("captured", model), ("compiled", compiled)):
            cache = new_static_cache(model, ctx + max(args.widths) + 1)
            with torch.inference_mode():
                model(input_ids=pool[:ctx].view(1, ctx).to(dev), **cache_arg(model, cache), use_cache=True,
                      logits_to_keep=1)

            def forward(fn: Any = fn, cache: Any = cache, inp: Any = inp, k: int = k) -> Any:
                return fn(input_ids=inp, **cache_arg(model, cache), use_cache=True, logits_to_keep=k).logits

            graph, outputs[mode] = capture_graph(forward, 3, before=lambda cache=cache: rewind(cache, ctx))
            runs[mode] = (graph, cache)
        seconds = time.perf_counter() - t0
        samples: dict[str, list[float]] = {m: [] for m in runs}
        with torch.inference_mode():
            for rep in range(args.graph_repeats + 3):
                for mode, (graph, cache) in runs.items():
                    rewind(cache, ctx)
                    sync(dev)
                    t1 = time.perf_counter()
                    graph.replay()
                    sync(dev)
                    if rep >= 3:
                        samples[mode].append((time.perf_counter() - t1) * 1000)
            diff = float((outputs["compiled"].float() - outputs["captured"].float()).abs().max())
            scale = float(outputs["captured"].float().abs().max())
        row = {"context": ctx, "k": k, "compile_and_capture_s": seconds, "compiled_vs_captured_max_abs": diff,
               "captured_max_abs": scale, **{f"{m}_k{k}": spread(v) for m, v in samples.items()}}
        out.put("compiled", f"{name}_{dtype}_k{k}", row)
        c, p = (statistics.median(samples[m]) for m in ("compiled", "captured"))
        print(f"compiled {name:14s} {dtype:8s} ctx {ctx} k={k:2d}: captured {p:7.2f} ms, compiled+captured {c:7.2f} ms "
              f"({p / c:.2f}x; logits max |diff| {diff:.3g} of max |logit| {scale:.3g}; {seconds:.0f} s to compile and "
              "capture)", flush=True)


def stage_graphs(models: dict[tuple[str, str], Any], args: argparse.Namespace, out: Out) -> None:
    """``graph_one`` for every (shape, dtype), one after the other, the GPU's cache emptied between them."""
    import torch

    for (name, dtype), model in models.items():
        graph_one(name, dtype, model, args, out)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------- main

def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the results json and the latency files")
    p.add_argument("--name", default="paper_costs.json", help="the results json's name in --out (default %(default)s)")
    p.add_argument("--stages", nargs="+", default=["generate", "calibrate", "graphs"],
                   choices=["generate", "calibrate", "graphs", "compiled"])
    p.add_argument("--regimes", nargs="+", default=["eager", "captured"], choices=["eager", "captured"],
                   help="calibrate's regimes: transformers eager (our loop), static cache captured in CUDA graphs")
    p.add_argument("--pairs", nargs="+", help="calibrate only these pairs (target_draft; default: every pair of PAIRS)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", help="dtype of generate and calibrate (default %(default)s)")
    p.add_argument("--tiny", action="store_true", help="shrunk shapes: the whole script on a CPU in seconds")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--generate-repeats", type=int, default=3)
    p.add_argument("--k-max", type=int, default=33, help="target forwards of 1..K tokens (γ up to K - 1)")
    p.add_argument("--context", type=int, default=512, help="cache length of the k tables")
    p.add_argument("--contexts", type=int, nargs="+", default=[128, 2048])
    p.add_argument("--prefill", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16],
                   help="batch sizes of the Llama-3.1-8B / EAGLE-like pair (the other pairs: batch 1)")
    p.add_argument("--batch-k-max", type=int, default=17)
    p.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--compile-widths", type=int, nargs="+", default=[1, 4, 16],
                   help="the compiled stage's widths (one compilation each)")
    p.add_argument("--graph-repeats", type=int, default=20)
    p.add_argument("--only", nargs="+", help="build only these shapes (default: what the stages need)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch
    import transformers

    args = parse(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_paper_costs: no CUDA device; run with --device cpu --tiny for the CPU check")
        return 2
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    out = Out(Path(args.out), {"device": gpu, "torch": torch.__version__, "transformers": transformers.__version__,
                               "dtype": args.dtype, "tiny": args.tiny, "random_weights": True,
                               "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "args": vars(args)}, args.name)
    print(f"gpu_paper_costs on {gpu}: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{args.dtype}, random weights{' (tiny shapes)' if args.tiny else ''}", flush=True)
    wanted = set(args.only or SHAPES)
    failed = 0
    needed = sorted({n for p in PAIRS for n in p} | set(GENERATE)) if {"generate", "calibrate"} & set(args.stages) else []
    models: dict[str, Any] = {}
    t0 = time.perf_counter()
    for n in needed:
        if n in wanted:
            models[n] = build(n, args.dtype, args.device, args.tiny)
    if models:
        sync(args.device)
        print(f"built {len(models)} models in {time.perf_counter() - t0:.0f} s: "
              + ", ".join(f"{n} {n_params(m) / 1e9:.3f}B" for n, m in models.items()), flush=True)
    for stage in ("generate", "calibrate"):
        if stage in args.stages:
            try:
                (stage_generate if stage == "generate" else stage_calibrate)(models, args, out)
            except Exception:  # the next stage runs
                failed += 1
                traceback.print_exc()
    if {"graphs", "compiled"} & set(args.stages):
        try:
            reuse = {(n, args.dtype): m for n, m in models.items()}
            chosen = {}
            for n, dtype in GRAPHS:
                if n in wanted:
                    chosen[(n, dtype)] = reuse.get((n, dtype)) or build(n, dtype, args.device, args.tiny)
            models.clear()
            reuse.clear()
            if "graphs" in args.stages:
                stage_graphs(chosen, args, out)
            if "compiled" in args.stages:
                if not args.device.startswith("cuda"):
                    raise RuntimeError("the compiled stage captures CUDA graphs: CUDA only")
                for (n, dtype), model in chosen.items():
                    compiled_one(n, dtype, model, args, out)
        except Exception:  # logged; the exit status counts it
            failed += 1
            traceback.print_exc()
    print(f"gpu_paper_costs: {failed} failed stage(s), {time.perf_counter() - t0:.0f} s; {out.folder}", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
