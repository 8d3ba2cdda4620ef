"""KV-cache helpers that hide the differences between transformers versions.

* transformers 5.x ``Cache.crop(n)`` takes ``n <= 0`` (tokens to remove); 4.x took
  the absolute length to keep. ``crop_to`` takes the length to keep and does
  the right thing for both.
* Sliding-window layers (Gemma-3) drop states past their window unless past
  recording is on; ``new_cache`` turns it on so a rejected draft can be rolled back.
* ``new_cache(model, offloading=True)``: the cache of transformers'
  ``generate(cache_implementation="offloaded")`` (5.23: ``DynamicCache(config=...,
  offloading=True)``, ``GenerationMixin._prepare_cache_for_generation``): every layer's keys and
  values live on the CPU and the next layer's are prefetched to the GPU on a side stream. CUDA
  only (it creates streams); the job refuses it before loading on a CPU-only run.
"""

from __future__ import annotations

from typing import Any

import transformers
from transformers import DynamicCache

_MAJOR = int(transformers.__version__.split(".")[0])


def new_cache(model: Any, offloading: bool = False) -> DynamicCache:
    if offloading:
        return DynamicCache(config=model.config, offloading=True)
    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # older transformers: no config argument
        cache = DynamicCache()
    if hasattr(cache, "activate_past_recording"):
        cache.activate_past_recording()
    return cache


def cache_len(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def crop_to(cache: DynamicCache, length: int) -> None:
    """Keep the first ``length`` positions of ``cache``."""
    current = cache_len(cache)
    if length > current:
        raise ValueError(f"cannot crop a cache of {current} positions to {length}")
    if _MAJOR >= 5:
        cache.crop(length - current)  # n <= 0: tokens to remove (crop(0) also trims sliding windows)
    elif length < current:
        cache.crop(length)
