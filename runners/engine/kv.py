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
* ``use_static(model, headroom)``: from then on ``new_cache(model)`` builds a ``PositionCache`` (``engine.graphs=static``)
  with every layer a ``StaticLayer`` sized by the cache's first forward (its tokens + ``headroom``),
  grown (a doubled copy) when a later forward would not fit, so a loop that does not know its longest sequence
  (a drafter's tokens in its own vocabulary) never overflows; ``crop_to`` on it is ``rewind``. ``use_static(model,
  None)`` gives ``model`` the dynamic cache back. A property of how a model runs in this process: the speculative
  loop, its drafters and the target alone built on the same model take the same cache kind (the baseline rule).
  Sliding-window layers (Gemma-3) are held as full static layers: the model's sliding-window mask restricts
  their attention, as it does over a dynamic layer recording its past; transformers' ``StaticSlidingWindowLayer``
  keeps only the window, a ring that a rollback by position cannot undo.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import torch
import transformers
from transformers import DynamicCache
from transformers.cache_utils import Cache, StaticLayer

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


def new_cache(model: Any, offloading: bool = False, dynamic: bool = False) -> Any:
    """The KV cache of one decoding by ``model``: a ``DynamicCache`` (past recording on), or, after
    ``use_static(model, headroom)``, a ``PositionCache``; ``offloading``: transformers' offloaded dynamic cache;
    ``dynamic``: the dynamic cache whatever ``use_static`` set (the plain step beside a width's)."""
    pooled = _POOLED.get(model)
    if pooled is not None and not offloading and not dynamic:
        return pooled.reset()
    headroom = _STATIC.get(model)
    if headroom is not None and not offloading and not dynamic:
        return PositionCache(model, headroom)
    if offloading:
        return DynamicCache(config=model.config, offloading=True)
    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # older transformers: no config argument
        cache = DynamicCache()
    if hasattr(cache, "activate_past_recording"):
        cache.activate_past_recording()
    return cache


def cache_len(cache: Any) -> int:
    return int(cache.get_seq_length())


def crop_to(cache: Any, length: int) -> None:
    """Keep the first ``length`` positions of ``cache`` (a static cache: ``rewind``, a position)."""
    current = cache_len(cache)
    if length > current:
        raise ValueError(f"cannot crop a cache of {current} positions to {length}")
    if is_static(cache):
        if length < current:
            rewind(cache, length)
    elif _MAJOR >= 5:
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


# ---------------------------------------------------------------------- the static path (engine.graphs)

#: models whose caches are static, and the positions a cache holds beyond its first forward's tokens
_STATIC: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def use_static(model: Any, headroom: int | None) -> None:
    """From now on ``new_cache(model)`` builds a ``PositionCache`` with ``headroom`` positions beyond its first
    forward's tokens (``None``: the dynamic cache again). The job sets it on its target and draft model before
    building any loop (``engine.graphs``), every job anew: a model loaded once serves a sweep's jobs."""
    if headroom is None:
        _STATIC.pop(model, None)
    else:
        if int(headroom) < 1:
            raise ValueError(f"headroom must be >= 1, got {headroom}")
        _STATIC[model] = int(headroom)


#: models whose every decoding reuses one cache (``engine.graphs=captured``: the graphs replay its addresses)
_POOLED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def use_pooled(model: Any, cache: Any | None) -> None:
    """From now on ``new_cache(model)`` hands out ``cache`` (``reset()`` to position 0; one decoding at a time);
    None: a new cache per decoding again (``runners.engine.graphs.use_graphs``)."""
    if cache is None:
        _POOLED.pop(model, None)
    else:
        _POOLED[model] = cache


def pooled_cache(model: Any) -> Any | None:
    return _POOLED.get(model)


def static_headroom(model: Any) -> int | None:
    """The headroom ``use_static`` set for ``model`` (None: its caches are dynamic)."""
    return _STATIC.get(model)


def is_static(cache: Any) -> bool:
    """Whether ``cache`` rolls back by position (every layer a ``StaticLayer``)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(isinstance(layer, StaticLayer) for layer in layers)


class GrowingStaticLayer(StaticLayer):
    """A ``StaticLayer`` (preallocated keys and values, the length a device tensor) whose length is fixed by its
    first forward (``query_length + headroom``, decided when the mask is sized or at the first write, whichever
    comes first: the same number) and doubled, keys and values copied, when a forward would pass it. Every
    layer of a cache sees the same lengths, so they grow alike. Growth reads a Python mirror of the position
    (``cumulative_length_int``: ``update`` advances it, ``rewind`` sets it), never the device tensor (no sync).
    ``growable=False``: a cache a CUDA graph replays on (its addresses must not move; a replay advances the
    device position only, so its mirror is never read) keeps the length it was given."""

    def __init__(self, headroom: int, growable: bool = True) -> None:
        super().__init__(max_cache_len=0)
        self.headroom = int(headroom)
        self.growable = growable
        #: the position as a Python int (``update`` advances it, ``rewind`` sets it): growth reads it, not the device
        self.cumulative_length_int = 0

    def _fit(self, tokens: int) -> None:
        if self.max_cache_len == 0:
            self.max_cache_len = tokens + self.headroom
            return
        if not self.growable or self.fits(tokens):
            return
        new_len = max(2 * self.max_cache_len, self.cumulative_length_int + tokens + self.headroom)
        if self.is_initialized:
            for name in ("keys", "values"):
                old = getattr(self, name)
                grown = old.new_zeros((*old.shape[:2], new_len, old.shape[3]))
                grown[:, :, : old.shape[2]].copy_(old)
                setattr(self, name, grown)
        self.max_cache_len = new_len

    def fits(self, tokens: int) -> bool:
        """Whether ``tokens`` more fit in the length the layer has now (``_fit`` grows it where they do not)."""
        return self.cumulative_length_int + tokens <= self.max_cache_len

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        self._fit(query_length)
        return super().get_mask_sizes(query_length)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self._fit(key_states.shape[-2])
        self.cumulative_length_int += int(key_states.shape[-2])
        return super().update(key_states, value_states, *args, **kwargs)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep these batch rows (a batched loop's finished rows leave): new tensors, so uncaptured only."""
        if self.is_initialized:
            self.keys = self.keys[indices]
            self.values = self.values[indices]
            self.batch_size = int(self.keys.shape[0])


#: the attention layers a ``PositionCache`` holds (a sliding window as a full layer, masked by the model)
STATIC_LAYER_KINDS = {"full_attention", "sliding_attention"}


class PositionCache(Cache):
    """``model``'s KV cache as ``GrowingStaticLayer``s, one per decoder layer, the full-attention kind for
    sliding-window layers too (module docstring); rolled back by ``rewind``."""

    def __init__(self, model: Any, headroom: int, growable: bool = True) -> None:
        from transformers.cache_utils import get_layer_types_and_kwargs

        cfg = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        kinds, _ = get_layer_types_and_kwargs(cfg)
        other = sorted(set(kinds) - STATIC_LAYER_KINDS)
        if other:
            raise NotImplementedError(
                f"engine.graphs=static holds full and sliding-window attention layers; {type(model).__name__} has "
                f"{', '.join(other)} layers: use engine.graphs=eager")
        super().__init__(layers=[GrowingStaticLayer(headroom, growable) for _ in kinds])

    @property
    def max_len(self) -> int:
        """The positions the cache holds now (0 before its first forward)."""
        return int(self.layers[0].max_cache_len)

    def fits(self, tokens: int) -> bool:
        """Whether a forward of ``tokens`` more runs without growing the cache: past its first forward, and room in
        every layer (``GrowingStaticLayer.fits``)."""
        return all(layer.is_initialized and layer.fits(tokens) for layer in self.layers)
