"""transformers' own autoregressive decoding: the baseline hf-bench timed (``method=hf_native_ar``).

``HFAutoregressiveRunner(target, eos_token_ids, sampling, cache).generate(prompt_ids,
max_new_tokens, generator) -> Generation`` calls ``target.generate(input_ids, streamer=...,
cache_implementation=cache, ...)`` (batch size 1), the call hf-bench timed for its AR rows
(keyboardAnt/hf-bench ``hf_bench/benchmark.py``, ``HFModel.generate_text``:
``cache_implementation="offloaded"``, a streamer, no processors passed;
../shared/notes/hf-bench-evaluation.md Secs. 1-2), where our ``method=ar`` runs our own loop
(``runners.engine.speculative.AutoregressiveRunner``). It is the peer of ``method=ar``, as
``hf_native_specdecode`` is the peer of ``specdecode`` (``runners.engine.hf_assisted``).

KV cache (``cache``): ``dynamic`` or ``offloaded``, passed as ``cache_implementation``; in
transformers 5.24 both build a ``DynamicCache`` (``offloading=True`` for ``offloaded``:
``generation/utils.py``, ``GenerationMixin._prepare_cache_for_generation``), the cache our
``AutoregressiveRunner`` builds with ``runners.engine.kv.new_cache``. Passed explicitly, so a
checkpoint's own ``cache_implementation`` (Gemma-3's ``hybrid``) never applies.

Settings (``runners.engine.hf_assisted.generate_kwargs``, shared with the assisted peer): exactly
``max_new_tokens`` unless one of ``eos_token_ids`` ends the sequence; no length or repetition
processors of the checkpoint's; the job's sampling processors exactly. So greedy output is the
target's argmax sequence, token for token our AR's (``tests/engine/test_hetero_baselines.py``).
Where hf-bench differs (it passed none of these, so the checkpoint's generation config applied) the
README's Protocols table says so.

Timing (the fields of ``specbench.records``, as our AR records them):

* ``ttft_ms``: from just before ``generate`` until transformers hands the first new token to the
  streamer: ``generate()``'s set-up (config checks, cache creation, processors), the prefill, the
  first token's sampling and its copy to the host (``StopCheck.__call__``:
  ``streamer.put(tokens.cpu())``, a host-device synchronisation). hf-bench's TTFT is the same
  instant read by another thread, plus up to 10 ms of polling; no thread here: the streamer's
  ``put`` runs inside ``generate`` and marks the ``Timer`` (``specbench.timing``: ``perf_counter``
  on CPU, a CUDA event on GPU).
* ``wall_ms``: until ``generate`` returns. TPOT and tokens/s follow from the two
  (``specbench.records.timing_fields``); the draft/verify/overhead split is null (transformers'
  loop is not split into phases).

The first ``put`` of ``generate`` is the prompt (``generation/utils.py``, ``GenerationMixin.generate``:
``streamer.put(input_ids.cpu())`` before decoding); the streamer recognises it by its content,
so a version that does not push the prompt is timed right too.

Sampling (``temperature > 0``): transformers draws from torch's global RNG, seeded from
``generator.initial_seed()`` inside ``torch.random.fork_rng``
(``runners.engine.hf_assisted.seeded_global_rng``): the same law as our AR, other samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

from runners.engine.base import Generation
from runners.engine.hf_assisted import generate_kwargs, pad_token_id, seeded_global_rng
from runners.engine.verify import Sampling
from specbench.config.method import AR_CACHES
from specbench.models import model_device
from specbench.timing import Timer


class FirstTokenStreamer(BaseStreamer):
    """Marks ``timer`` "first" when ``generate`` hands it the first new token (the prompt, which
    ``generate`` puts first, is recognised and skipped); counts the new tokens it was given."""

    def __init__(self, timer: Timer, prompt_ids: list[int]) -> None:
        self.timer = timer
        self.prompt = list(prompt_ids)
        self.puts = 0
        self.new_tokens = 0
        self.ended = False

    def put(self, value: torch.Tensor) -> None:
        ids = value.reshape(-1).tolist()
        self.puts += 1
        if self.puts == 1 and ids == self.prompt:
            return
        if self.new_tokens == 0 and ids:
            self.timer.mark("first")
        self.new_tokens += len(ids)

    def end(self) -> None:
        self.ended = True


class HFAutoregressiveRunner:
    """``target.generate(...)`` alone, timed as our AR records are timed (module docstring)."""

    def __init__(self, target: Any, eos_token_ids: Iterable[int], sampling: Sampling | float = 0.0,
                 cache: str = "dynamic") -> None:
        if cache not in AR_CACHES:
            raise ValueError(f"cache must be one of {AR_CACHES}, got {cache!r}")
        self.target = target
        self.eos = sorted(set(int(e) for e in eos_token_ids))
        self.sampling = Sampling.of(sampling)
        self.cache = cache
        self.device = model_device(target)
        self.pad_token_id = pad_token_id(target, self.eos)
        self.last_streamed = 0  # new tokens the streamer received in the last call

    def generate_kwargs(self, max_new_tokens: int) -> dict[str, Any]:
        """What ``generate`` is given besides the prompt and the streamer."""
        return {**generate_kwargs(self.sampling, self.eos, self.pad_token_id, max_new_tokens),
                "cache_implementation": self.cache, "use_cache": True, "return_dict_in_generate": False}

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator: Any = None) -> Generation:
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        inp = torch.tensor([list(prompt_ids)], device=self.device)
        mask = torch.ones_like(inp)
        timer = Timer(self.device)
        streamer = FirstTokenStreamer(timer, list(prompt_ids))
        kwargs = self.generate_kwargs(max_new_tokens)
        with seeded_global_rng(self.sampling, generator, self.device):
            timer.start()
            out = self.target.generate(inp, attention_mask=mask, streamer=streamer, **kwargs)
            timer.mark("end")
        t = timer.read()
        tokens = out[0, len(prompt_ids):].tolist()
        self.last_streamed = streamer.new_tokens
        return Generation(
            tokens=tokens,
            ttft_ms=t.get("first", t["end"]),
            wall_ms=t["end"],
            stop_reason="eos" if tokens and tokens[-1] in self.eos else "max_new_tokens",
            speculative=False,
        )
