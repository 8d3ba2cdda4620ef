#!/usr/bin/env python
"""GPU smoke test: every method at temperature 0 and 1 on tiny seeded models on CUDA, a few tokens each,
then autoregressive decoding with the dynamic and the offloaded KV cache side by side (issues 13 and 20).

    scripts/gpu_smoke.sh            # or: make gpu-smoke; about a minute on one GPU
    python scripts/gpu_smoke.py --device cpu    # the same jobs on the CPU (ar_offloaded is then refused)

What it runs, through the real job path (``runners.jobs.job.run_job``, records in a temporary folder):

* every ``conf/method/*.yaml`` on a same-vocabulary pair (target and draft on the GPU), T = 0 and T = 1
  (T = 1 with top-k 20 / top-p 0.95, so the sampling processors run on the device);
* SLEM / TLI (``hetero=auto``) on a pair whose draft has another tokenizer, T = 0 and T = 1;
* prompt lookup, T = 0 and T = 1;
* the draft on the CPU with the target on the GPU, T = 1 (one generator per device);
* AR with ``cache=dynamic`` and ``cache=offloaded`` on a larger tiny model, interleaved, median of
  ``--repeats``; prints both rates and their ratio (hf-bench's AR baseline ran with the offloaded cache).

Prints one line per job (status, new tokens, tokens/s, lossless) and exits 1 if any job failed.
Nothing here needs the network: models are built from a config with a seed, tokenizers trained on
a few sentences.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding drafts tokens with a small model and verifies them with a large one",
    "def add(a, b):\n    return a + b\n",
    "one two three four five six seven eight nine ten",
] * 20
PROMPTS = [{"id": "a", "prompt": "the quick brown fox"}, {"id": "b", "prompt": "def add(a, b):"}]


def tokenizer(kind: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False))
    else:  # characters: another vocabulary for SLEM / TLI
        chars = sorted({c for line in CORPUS for c in line})
        tok = Tokenizer(models.WordLevel(vocab={"<eos>": 0, **{c: i + 1 for i, c in enumerate(chars)}}, unk_token="<eos>"))
        tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
        tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def save_model(folder: Path, tok, seed: int, hidden: int = 64, layers: int = 2) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, eos_token_id=0,
                      bos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def spec(name: str, path: str, device: str) -> dict:
    return {"name": name, "path": path, "dtype": "float32", "device": device}


def jobs(base: Path, device: str) -> list[tuple[str, list[str], dict]]:
    """(label, overrides, pair) for every smoke job."""
    bpe, char = tokenizer("bpe"), tokenizer("char")
    target = save_model(base / "target", bpe, 1)
    draft = save_model(base / "draft", bpe, 2, layers=1)
    other = save_model(base / "other", char, 3, layers=1)
    same = {"name": "tiny", "same_tokenizer": True, "target": spec("tiny-target", target, device),
            "draft": {"kind": "model", **spec("tiny-draft", draft, device)}}
    hetero = {"name": "tiny-hetero", "same_tokenizer": False, "target": spec("tiny-target", target, device),
              "draft": {"kind": "model", **spec("tiny-char", other, device)}}
    lookup = {"name": "tiny-lookup", "target": spec("tiny-target", target, device),
              "draft": {"kind": "prompt_lookup", "name": "prompt-lookup", "max_ngram_size": 2}}
    split = {**same, "name": "tiny-split", "draft": {"kind": "model", **spec("tiny-draft", draft, "cpu")}}
    methods = sorted(p.stem for p in (ROOT / "conf" / "method").glob("*.yaml"))
    out = []
    for temperature in ("0.0", "1.0"):
        sampling = ["top_k=20", "top_p=0.95"] if temperature != "0.0" else []
        for method in methods:
            out.append((f"{method} T={temperature}", [f"method={method}", f"temperature={temperature}", *sampling], same))
        for method in ("specdecode", "gammatune_plus"):
            out.append((f"{method} hetero=auto T={temperature}", [f"method={method}", f"temperature={temperature}",
                                                                 *sampling], hetero))
        out.append((f"prompt lookup T={temperature}", ["method=specdecode", f"temperature={temperature}", *sampling],
                    lookup))
    if device != "cpu":
        out.append(("specdecode, draft on the CPU, T=1.0", ["method=specdecode", "temperature=1.0", "top_k=20"], split))
    return out


def run_all(base: Path, device: str) -> int:
    from omegaconf import OmegaConf

    from runners.jobs.job import run_job
    from specbench.config import compose
    from specbench.record_io import read_records
    from specbench.registry import ConfigError

    data = base / "prompts.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    failures = 0
    for i, (label, overrides, pair) in enumerate(jobs(base, device)):
        cfg = OmegaConf.to_container(compose(["task=custom", f"task.data_files={data}", "max_new_tokens=12",
                                              "warmup=0", "gamma=3", *overrides]), resolve=True)
        cfg["pair"] = pair
        job_dir = base / "results" / f"job{i:02d}"
        t0 = time.perf_counter()
        try:
            summary = run_job(cfg, job_dir, progress=False)
            agg = summary["aggregates"]
            records = read_records(job_dir / "records.jsonl")
            ok = summary["status"] == "complete" and all(r["new_tokens"] == 12 or r["stop_reason"] == "eos" for r in records)
            lossless = agg.get("lossless_all")
            print(f"{'ok  ' if ok else 'FAIL'} {label:42s} {agg['new_tokens']:3d} tokens  {agg['tokens_per_s']:8.1f} tok/s"
                  f"  lossless={lossless}  ({time.perf_counter() - t0:.1f} s)", flush=True)
            failures += not ok
        except ConfigError as exc:
            expected = device == "cpu" and "offload" in str(exc)
            print(f"{'ok  ' if expected else 'FAIL'} {label:42s} refused: {exc}", flush=True)
            failures += not expected
        except Exception as exc:  # report and go on: one line per job
            print(f"FAIL {label:42s} {type(exc).__name__}: {exc}", flush=True)
            failures += 1
    return failures


def cache_ratio(base: Path, device: str, repeats: int, tokens: int) -> None:
    """AR with the dynamic and the offloaded KV cache on one (larger) tiny model, interleaved."""
    import torch
    from transformers import AutoModelForCausalLM

    from runners.engine.factory import build_runner

    if device == "cpu":
        print("AR cache ratio: skipped (the offloaded cache needs a GPU)")
        return
    path = save_model(base / "bigger", tokenizer("bpe"), 4, hidden=512, layers=12)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float16).to(device).eval()
    prompt = list(range(1, 129))
    runners = {cache: build_runner("ar", model, [], cache=cache) for cache in ("dynamic", "offloaded")}
    for runner in runners.values():  # warm-up
        runner.generate(prompt, 8)
    rates: dict[str, list[float]] = {c: [] for c in runners}
    for _ in range(repeats):
        for cache, runner in runners.items():
            gen = runner.generate(prompt, tokens)
            rates[cache].append(len(gen.tokens) / (gen.wall_ms / 1000.0))
    dyn, off = statistics.median(rates["dynamic"]), statistics.median(rates["offloaded"])
    print(f"AR cache ratio ({torch.cuda.get_device_name()}, 12 layers x 512, fp16, {tokens} tokens, median of {repeats}): "
          f"dynamic {dyn:.1f} tok/s, offloaded {off:.1f} tok/s, dynamic / offloaded = {dyn / off:.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run of the same jobs)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_smoke: no CUDA GPU here (torch.cuda.is_available() is False); nothing was run", file=sys.stderr)
        return 2
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"gpu_smoke on {where}: torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specbench-smoke-") as tmp:
        failures = run_all(Path(tmp), args.device)
        cache_ratio(Path(tmp), args.device, args.repeats, args.tokens)
    print(f"gpu_smoke: {failures} failure(s), {time.perf_counter() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
