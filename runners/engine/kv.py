"""KV-cache helpers that hide the differences between transformers versions.

* transformers 5.x ``Cache.crop(n)`` takes ``n <= 0`` (tokens to remove); 4.x took
  the absolute length to keep. ``crop_to`` takes the length to keep and does
  the right thing for both.
* Sliding-window layers (Gemma-3) drop states past their window unless past
  recording is on; ``new_cache`` turns it on so a rejected draft can be rolled back.
"""

from __future__ import annotations

from typing import Any

import transformers
from transformers import DynamicCache

_MAJOR = int(transformers.__version__.split(".")[0])


def new_cache(model: Any) -> DynamicCache:
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
