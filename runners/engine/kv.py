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
* ``cache_arg(model, cache)``: the keyword a forward takes its cache by. transformers 5.24 renamed
  ``past_key_values`` to ``cache`` (``modeling_llama.py: LlamaForCausalLM.forward``, decorated with
  ``utils/deprecation.py: deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")``, which
  warns on every call by the old name); 5.23 and earlier take only ``past_key_values``. Every forward
  we call goes through ``model(..., **cache_arg(model, cache))``.
* ``new_static_cache(model, max_len)`` / ``rewind(cache, length)``: transformers' ``StaticCache`` (preallocated
  keys and values, the length a device tensor), set back to ``length`` tokens in place: a rollback that is a
  position, not a crop, so a forward captured in a CUDA graph replays on the rewound cache at the same addresses.
"""

from __future__ import annotations

import inspect
from typing import Any

import transformers
from transformers import DynamicCache

_MAJOR = int(transformers.__version__.split(".")[0])


def _installed_cache_keyword() -> str:
    """``cache`` when the installed transformers takes its KV cache by that name, else
    ``past_key_values``: read off ``GenerationMixin.prepare_inputs_for_generation``'s signature
    (``generation/utils.py``), which every version of transformers 5 has and which was renamed with
    the models' forwards."""
    from transformers.generation.utils import GenerationMixin

    params = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    return "cache" if "cache" in params else "past_key_values"


CACHE_KEYWORD = _installed_cache_keyword()  # detected once, at import
_KEYWORD_OF: dict[type, str] = {}


def cache_keyword(model: Any) -> str:
    """The keyword ``model``'s forward takes its KV cache by, per class (cached): the one its
    signature names (``inspect.signature`` sees through ``deprecate_kwarg``'s ``functools.wraps``),
    else, for a ``forward(**kwargs)``, the installed transformers' (``CACHE_KEYWORD``). A wrapper
    module of our own whose ``forward`` still names ``past_key_values`` is called by that name
    (calling it by ``cache`` would hand it ``past_key_values=None``)."""
    cls = type(model)
    keyword = _KEYWORD_OF.get(cls)
    if keyword is None:
        try:
            params = inspect.signature(cls.forward).parameters
        except (AttributeError, TypeError, ValueError):
            params = {}
        keyword = next((k for k in ("cache", "past_key_values") if k in params), CACHE_KEYWORD)
        _KEYWORD_OF[cls] = keyword
    return keyword


def cache_arg(model: Any, cache: Any) -> dict[str, Any]:
    """``{keyword: cache}`` for ``model(input_ids=..., **cache_arg(model, cache), ...)``: no
    deprecation warning on transformers >= 5.24, and the old name where there is no other."""
    return {cache_keyword(model): cache}


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


def new_static_cache(model: Any, max_len: int) -> Any:
    """transformers' ``StaticCache`` of ``max_len`` positions for ``model`` (its batch size, dtype and device taken
    lazily from the first forward, ``cache_utils.py: StaticLayer.lazy_initialization``). Attention over a static
    cache spans all ``max_len`` positions (``StaticLayer.get_mask_sizes``): keep it to what the forwards need."""
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=int(max_len))


def rewind(cache: Any, length: int) -> None:
    """Set a ``StaticCache`` back to ``length`` tokens in place (transformers 5.24, ``cache_utils.py``: each
    ``StaticLayer`` counts its tokens in a device tensor, ``cumulative_length``, that ``update`` advances and
    indexes the write with; a ``StaticSlidingWindowLayer`` also in a Python int, ``cumulative_length_int``, that
    picks its branch). The keys and values stay where they are: the next forward overwrites the stale positions,
    at the same static addresses, so a captured graph replays on the rewound cache."""
    for layer in cache.layers:
        if isinstance(layer.cumulative_length, int):
            layer.cumulative_length = int(length)
        else:
            layer.cumulative_length.fill_(int(length))
        if hasattr(layer, "cumulative_length_int"):
            layer.cumulative_length_int = int(length)
