"""How our loops hold the KV cache and run their forwards: ``engine.graphs``.

* ``eager`` (the default, the papers' loop): transformers' ``DynamicCache``, cropped after a rejection
  (``runners.engine.kv.crop_to``), every forward launched kernel by kernel.
* ``static``: every cache our loops build for the job's target and draft model is a
  ``runners.engine.kv.PositionCache`` (preallocated ``StaticLayer``s; a rejection rolls it back by setting its
  position, ``kv.rewind``; the stale states past it are overwritten by the next forward and never attended to,
  the causal mask stopping at the query's position). The same function as ``eager`` on other tensors: greedy
  output equal token for token (``tests/engine/test_graphs.py``, every method and drafter kind at B = 1 and 4).
* ``captured``: the static cache with forwards replayed from CUDA graphs: CUDA only. On a CPU model the job
  refuses it in one line (``use_graphs``) rather than run something else under its name: on the CPU the
  static path is ``static``.

``captured`` at batch 1: each model's cache is one ``CapturedCache`` per process (``kv.use_pooled``), and the
batch-1 target's blocks and steps and a draft model's step go through ``forward_logits``: one CUDA graph per
feed width (``capture_graph``), replayed. Not built at ``batch_size`` > 1 (refused there in one line, the config's
``check_graphs``). On the GPU it is untested as of this writing; on the CPU
its bookkeeping is tested with the CUDA graph machinery stubbed (a "replay" re-runs the recorded forward).

``use_graphs(graphs, models, max_new_tokens)`` sets the cache kind of the job's models (``kv.use_static``),
every job anew; the target alone that a job's speedup divides by decodes the same target object, so it runs on
the same cache kind (the baseline rule), and the record's ``kernels`` name it (``graphs``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from specbench.registry import ConfigError

#: positions a static cache holds beyond its first forward's tokens, on top of ``max_new_tokens``: a padded
#: verification block (``verify_forward.PROBE_K_MAX``) fits; a longer sequence grows the cache
#: (``kv.GrowingStaticLayer``)
HEADROOM_MARGIN = 32


def static_headroom(max_new_tokens: int) -> int:
    """The positions a job's static caches keep free after their first forward."""
    return int(max_new_tokens) + HEADROOM_MARGIN


def use_graphs(graphs: str, models: Iterable[Any], max_new_tokens: int, uncaptured: Iterable[Any] = ()) -> None:
    """Give ``models`` (None entries skipped) the cache kind of ``engine.graphs`` (module docstring);
    ``captured`` on a model off CUDA raises ``ConfigError`` in one line. ``uncaptured``: models of ``models`` whose
    sequences are not the target's tokens (a cross-vocabulary draft: its own tokens may outnumber the budget), which
    ``captured`` gives the growing static cache, uncaptured, instead of a fixed one."""
    uncaptured_ids = {id(m) for m in uncaptured if m is not None}
    from runners.engine.kv import pooled_cache, use_pooled, use_static
    from specbench.models import model_device

    models = [m for m in models if m is not None]
    if graphs == "captured":
        off = sorted({str(model_device(m)) for m in models if model_device(m).type != "cuda"})
        if off:
            raise ConfigError(f"engine.graphs=captured replays CUDA graphs, but a model runs on {', '.join(off)}; "
                              f"engine.graphs=static runs the same static cache uncaptured")
    headroom = static_headroom(max_new_tokens) if graphs != "eager" else None
    for model in models:
        captured = graphs == "captured" and id(model) not in uncaptured_ids
        use_static(model, headroom if graphs != "eager" and not captured else None)
        pooled = pooled_cache(model)
        if not captured:
            use_pooled(model, None)
        elif pooled is None or pooled.headroom != headroom:  # a sweep's jobs of one headroom share the graphs
            use_pooled(model, captured_cache_class()(model, headroom))


def capture_graph(forward: Callable[[], Any], warmup: int = 2,
                  before: Callable[[], None] | None = None) -> tuple[Any, Any]:
    """``forward`` captured once in a CUDA graph, by ``torch.cuda.graphs``' recipe (``warmup`` calls on a side
    stream first, then the capture on the current one): ``(graph, output)``, the output being the tensor every
    replay rewrites. ``before`` runs ahead of every warm-up call and of the capture, outside the graph (a cache
    rewound to its position). CUDA only.

    A CUDA graph replays the device addresses it recorded and holds no Python reference to the tensors behind them:
    an input built inside a caller's frame (the token ids of ``GraphTimer._run``) is freed when that frame returns,
    its memory handed to the next allocation, and the replay reads whatever lies there (on an H100, 2026-11-28:
    token ids out of the vocabulary, a device-side assert in the embedding's ``index_select``). So the graph keeps
    ``forward``, and with it everything its closure holds, alive as long as the graph itself."""
    import torch

    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(1, warmup)):
                if before is not None:
                    before()
                forward()
        torch.cuda.current_stream().wait_stream(side)
        if before is not None:
            before()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = forward()
    graph.keep_alive = (forward, before)  # the tensors the recorded addresses point to live as long as the graph
    return graph, out


# ---------------------------------------------------------------------- captured forwards (CUDA)

#: the widest block a captured graph is kept for (a verification of γ + 1 tokens, a padded one, a draft step of
#: the tokens the draft's cache has not seen); a longer feed (a prefill) runs eagerly on the same static cache
MAX_CAPTURED_WIDTH = 33
#: a captured cache's length is its first forward's tokens plus the headroom, rounded up to this many positions,
#: so the prompts of a task share one cache and its graphs
LENGTH_STEP = 256


def captured_cache_class() -> type:
    """``CapturedCache``, built on first use (``kv``, and with it torch and transformers, imported lazily: the
    replay's timer imports this module's ``capture_graph`` without them)."""
    global _CAPTURED_CACHE
    if _CAPTURED_CACHE is None:
        _CAPTURED_CACHE = _define_captured_cache()
    return _CAPTURED_CACHE


_CAPTURED_CACHE: type | None = None


def _define_captured_cache() -> type:
    import torch

    from runners.engine.kv import PositionCache, cache_arg, cache_len, rewind

    class CapturedCache(PositionCache):
        """One model's static cache for ``engine.graphs=captured`` (CUDA), reused by every decoding of the process
        (``kv.new_cache`` hands it out rewound to 0): a graph replays the addresses it recorded, so the cache and
        its graphs live together. ``forward(executor, feed, keep)`` runs a feed of ``n <= MAX_CAPTURED_WIDTH``
        tokens from a CUDA graph captured once per ``(executor, n, keep)`` at batch 1 (the ids copied into the
        graph's own input buffer before each replay, the logits cloned out of its output), a first forward (a
        prefill) or a wider feed eagerly on the same cache. A first forward that would not fit re-sizes the cache
        in place (``LENGTH_STEP`` positions at a time) and drops its graphs."""

        def __init__(self, model: Any, headroom: int, capture: Callable[..., tuple[Any, Any]] | None = None) -> None:
            super().__init__(model, headroom, growable=False)
            self.model = model
            self.headroom = int(headroom)
            self.graphs: dict[tuple[int, int, int], tuple[Any, Any, Any]] = {}
            self.capture = capture or capture_graph
            self.fresh = True  # the next forward is a decoding's first (read in Python: no sync in a capture)

        def reset(self) -> CapturedCache:
            """Back to position 0 for a new decoding (the keys and values stay where they are)."""
            if self.layers[0].is_initialized:
                rewind(self, 0)
            self.fresh = True
            return self

        def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
            """Every forward asks first (its masks' sizes): a decoding's first forward sizes the cache, whoever
            calls the model (a drafter's own forwards too)."""
            if self.fresh:
                self.fresh = False
                self._size_for(query_length)
            return super().get_mask_sizes(query_length, layer_idx)

        def _size_for(self, n: int) -> None:
            if self.max_len >= n + self.headroom:
                return
            need = -(-(n + self.headroom) // LENGTH_STEP) * LENGTH_STEP
            for layer in self.layers:
                layer.is_initialized = False
                layer.keys = layer.values = None
                layer.cumulative_length = torch.tensor(0, dtype=int)
                layer.cumulative_length_int = 0
                layer.max_cache_len = need
            self.graphs.clear()

        def forward(self, executor: Any, feed: list[int], keep: Any) -> torch.Tensor:
            """The logits of the last ``keep`` positions of ``feed`` fed on this cache, ``[1, keep, vocab]``."""
            device = next(self.model.parameters()).device
            n = len(feed)
            position = cache_len(self)
            if position == 0 or n > MAX_CAPTURED_WIDTH or not isinstance(keep, int):
                return executor(input_ids=torch.tensor([feed], device=device), **cache_arg(executor, self),
                                use_cache=True, logits_to_keep=keep).logits
            key = (id(executor), n, keep)
            if key not in self.graphs:
                ids = torch.tensor([feed], device=device)  # the graph's input buffer: it lives with the graph

                def run(ids: torch.Tensor = ids) -> torch.Tensor:
                    return executor(input_ids=ids, **cache_arg(executor, self), use_cache=True,
                                    logits_to_keep=keep).logits

                graph, out = self.capture(run, 2, before=lambda: rewind(self, position))
                rewind(self, position)  # the warm-ups wrote past it (and the capture, where it runs)
                self.graphs[key] = (graph, ids, out)
            graph, ids, out = self.graphs[key]
            ids.copy_(torch.tensor([feed], device=device))
            graph.replay()  # writes the block's keys and values at the position and advances it, as a forward does
            return out.clone()

    return CapturedCache


def forward_logits(executor: Any, cache: Any, feed: list[int], keep: Any, device: Any) -> Any:
    """``executor``'s logits of the last ``keep`` positions of ``feed`` fed on ``cache`` (``[1, keep, vocab]``):
    replayed from a graph on a captured cache (``engine.graphs=captured``), a draft model's forward after its prefill
    from its compiled one (``engine.draft_compile``, ``runners.engine.compiled_draft``), one eager forward otherwise. The
    batch-1 target's blocks and steps (``VerifyForward``, ``AutoregressiveRunner``) and a draft model's step
    (``ModelDrafter``) run through it."""
    if _CAPTURED_CACHE is not None and isinstance(cache, _CAPTURED_CACHE):
        return cache.forward(executor, feed, keep)
    from runners.engine.compiled_draft import compiled_logits

    compiled = compiled_logits(executor, cache, feed, keep)  # engine.draft_compile: a draft's forward after its prefill
    if compiled is not None:
        return compiled
    import torch

    from runners.engine.kv import cache_arg

    return executor(input_ids=torch.tensor([feed], device=device), **cache_arg(executor, cache), use_cache=True,
                    logits_to_keep=keep).logits
