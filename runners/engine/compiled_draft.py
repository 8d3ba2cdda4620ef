"""``engine.draft_compile``: the draft model's forwards after its prefill compiled by ``torch.compile`` (a cheaper
draft).

Why: on a 2-core CPU the int8 draft's step is overhead-bound. Under ``torch.profiler`` a third to a half of it is in
``quantized::linear_dynamic`` (fbgemm's int8 kernels), the rest spread over 18 eager layers of small kernels
(RMSNorms, rotary embeddings, attention, masks) and the Python between them (``scripts/bench_engine_costs.py``,
``step_breakdown``). Inductor fuses those kernels into generated C++ and keeps the int8 products as they are.

How (``CompiledStep``):

* the draft is run through a structural copy (``_op_copy``: its modules copied, every parameter, buffer and packed
  int8 weight shared, so no second copy of the weights but the grouped projections', below) whose dynamic int8
  ``Linear`` layers (``torch.ao.nn.quantized.dynamic.Linear``, what ``transform: int8_dynamic`` makes) call the same
  kernel through a custom op, ``specbench::linear_dynamic``: ``torch.compile`` cannot trace the module's packed weight (a TorchScript
  object), so the op takes an index into ``_PACKED`` and calls ``torch.ops.quantized.linear_dynamic`` with
  ``reduce_range=True``, as the module's own ``forward`` does (torch 2.13,
  ``torch/ao/nn/quantized/dynamic/modules/linear.py: Linear.forward``); float ``Linear`` layers stay as they are;
* with ``groups``, sibling projections that read one input (``GROUPS``: the attention's q/k/v, the MLP's gate/up)
  become slices of one product on their stacked int8 weights (``_GroupPart``, ``_group_packed``: each row at its own
  scale, so the outputs are the separate products', bit for bit), the parts' identical calls merged into one by a
  post-grad pass (``_OneCallPerGroup``): 73 products a step instead of 127 for Gemma-3-270M. The stacked weights are
  a second copy of those rows' int8 bytes (the draft's own modules keep theirs for its eager forwards): 65 MB more
  for Gemma-3-270M (5632 rows × 640 columns × 18 layers), held as long as the compiled step;
* with ``attention``, where the draft's attention is transformers' ``sdpa`` and its layers group key/value heads
  (Gemma-3-270M: one for four query heads), the copy's is ``_sdpa_gqa`` (``_grouped_attention``): SDPA reads each
  key/value head in place, where transformers' function, traced by dynamo with a mask, repeats it for every query
  head (a copy of the layer's whole static cache, every layer, every step). The same output bit for bit;
* both levers are off by default, as a job runs the step: side by side in one process
  (``scripts/bench_compiled_draft.py``, the variants compiled in both orders,
  ``results/committed/compiled_draft_levers_xeon``), the grouped products made the compiled step slower on a 2-core
  Xeon, in either order, though the products alone are faster grouped; the grouped attention's ratio changed sign
  with the order. The earlier figure that had the groups faster came from two compiled copies whose graphs shared one
  code object (below), a comparison this one replaces;
* ``torch.compile(dynamic=True, fullgraph=True)`` of the copy's ``forward`` (called from a code object of the step's
  own, ``_own_frame``) on a static cache
  (``runners.engine.kv.PositionCache``; ``use_compiled`` gives the model one): the cache's position and length are
  symbolic, so a graph serves every position. Two graphs: a feed of one token (a draft step; dynamo specializes sizes
  of 1) and a feed of 2 to ``MAX_FEED`` tokens (a round's first feed, the tokens the draft has not seen: the accepted
  ones and the target's; its width marked dynamic). The prefill (a cache at position 0) and a longer feed run
  eagerly, on the same cache;
* both graphs are compiled when ``use_compiled`` is called (a warm-up on a scratch cache: on a 2-core EPYC,
  2026-11-28, 84.7 s for Gemma-3-270M int8 with inductor's on-disk cache empty,
  ``results/committed/engine_costs_epyc/engine_costs_compiled_2.log``), not inside the job's first timed decode; a
  model keeps them for the process (a sweep's jobs share them);
* dynamo checks its guards on the first forward of each graph on a cache; the later forwards on that cache, where the
  feed fits without growing it, skip the check (``CompiledStep.__call__`` says why that is safe).

What it changes: the draft's logits, in their last bits (fused kernels sum in another order; 1.5e-5 on Gemma-3-270M
int8's logits, 2026-11-28): a draft token can differ where two logits tie to that precision. The target verifies every
draft token, so the output stays the target's own (lossless); the record names the option (``engine`` summary:
``draft_compile``). The target and the target alone are not touched (the baseline rule has nothing to compare).

CPU only: on a GPU, ``engine.graphs=captured`` replays the draft's step from a CUDA graph; ``use_compiled`` refuses a
model off the CPU, and a host without a C++ compiler (inductor's CPU backend needs one), in one line.
"""

from __future__ import annotations

import itertools
import logging
import time
import weakref
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from runners.engine.kv import PositionCache
from specbench.registry import ConfigError

log = logging.getLogger(__name__)

#: the longest feed the compiled forward takes after the prefill (a round's first feed: γ + 1 tokens at most for a
#: drafter of the target's vocabulary); a longer one runs eagerly
MAX_FEED = 32

#: the packed int8 weights the custom op reads, by index (``_OpLinear.index``); an entry leaves with its
#: ``_OpLinear`` (a draft the model cache evicts frees its weights)
_PACKED: dict[int, Any] = {}
_NEXT = itertools.count()


# A plain ``torch.library.Library`` kernel rather than ``torch.library.custom_op``: no Python wrapper around each of a
# draft step's products (127 for Gemma-3-270M int8; ``results/committed/engine_costs_epyc/engine_costs_compiled_3.log``
# has the step with both changes of ba9945b).
_LIB = torch.library.Library("specbench", "FRAGMENT")
_LIB.define("linear_dynamic(Tensor x, int index, int out_features) -> Tensor")


def linear_dynamic(x: torch.Tensor, index: int, out_features: int) -> torch.Tensor:
    """``torch.ops.quantized.linear_dynamic`` on the packed weight ``_PACKED[index]`` (a dynamic int8 ``Linear``'s)."""
    return torch.ops.quantized.linear_dynamic(x, _PACKED[index], True)


_LIB.impl("linear_dynamic", linear_dynamic, "CPU")


@torch.library.register_fake("specbench::linear_dynamic", lib=_LIB)
def _linear_dynamic_fake(x: torch.Tensor, index: int, out_features: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


class _OpLinear(torch.nn.Module):
    """A dynamic int8 ``Linear`` (``torch.ao.nn.quantized.dynamic.Linear``, qint8) through ``linear_dynamic``."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.index = next(_NEXT)
        _PACKED[self.index] = module._packed_params._packed_params
        weakref.finalize(self, _PACKED.pop, self.index, None)
        self.out_features = int(module.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.specbench.linear_dynamic(x, self.index, self.out_features)


def _is_int8_dynamic(module: Any) -> bool:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return isinstance(module, DynamicLinear) and module._packed_params.dtype == torch.qint8


#: sibling projections that read the same input in transformers' decoder layers (Llama, Gemma, Qwen, Mistral...):
#: the attention's queries, keys and values, the MLP's gate and up products
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class _GroupPart(torch.nn.Module):
    """One projection of a group (``GROUPS``) as a slice of the group's product: the group's int8 weights stacked in
    one packed weight (``_group_packed``), every part calling ``linear_dynamic`` on it with the same arguments. In the
    compiled graph those calls are one (``_OneCallPerGroup``), so a group costs one product, one quantization of its
    input and one trip through the op's Python, not one per projection. Run eagerly (the warm-up's scratch prefill,
    a test's uncompiled copy) each part computes the whole group's product: correct, not cheaper."""

    def __init__(self, index: int, out_features: int, start: int, stop: int) -> None:
        super().__init__()
        self.index, self.out_features, self.start, self.stop = index, out_features, start, stop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.specbench.linear_dynamic(x, self.index, self.out_features)[..., self.start:self.stop]


def _group_packed(modules: list[Any]) -> Any:
    """One packed int8 weight whose rows are ``modules``' weights in order, each row keeping its module's scale (a
    per-channel qint8 tensor): fbgemm computes each output as the separate products do (the same int8 products and
    scales; bit-identical on Gemma-3-270M's shapes, 2026-11-29). None where a weight is not per-tensor symmetric
    qint8 or a module has a bias (kept apart)."""
    weights = [m.weight() for m in modules]
    if any(w.qscheme() != torch.per_tensor_affine or w.q_zero_point() != 0 for w in weights) or any(
            m.bias() is not None for m in modules):
        return None
    rows = torch.cat([w.int_repr() for w in weights])
    scales = torch.cat([torch.full((w.shape[0],), w.q_scale(), dtype=torch.double) for w in weights])
    stacked = torch._make_per_channel_quantized_tensor(rows, scales, torch.zeros(len(rows), dtype=torch.long), 0)
    return torch.ops.quantized.linear_prepack(stacked, None)


def _group(parent: Any) -> None:
    """``parent``'s sibling int8 projections (``GROUPS``) as ``_GroupPart``s of one packed weight, where all of a
    group are dynamic int8 ``Linear`` layers of one input width."""
    for names in GROUPS:
        members = [getattr(parent, name, None) for name in names]
        if not all(_is_int8_dynamic(m) for m in members) or len({int(m.in_features) for m in members}) != 1:
            continue
        packed = _group_packed(members)
        if packed is None:
            continue
        index = next(_NEXT)
        _PACKED[index] = packed
        weakref.finalize(parent, _PACKED.pop, index, None)  # the stacked weight leaves with the parts' module
        total, start = sum(int(m.out_features) for m in members), 0
        for name, member in zip(names, members, strict=True):
            setattr(parent, name, _GroupPart(index, total, start, start + int(member.out_features)))
            start += int(member.out_features)


class _OneCallPerGroup(CustomGraphPass):
    """Inductor's post-grad pass (``torch.compile``'s ``post_grad_custom_pre_pass``) that keeps one of the identical
    ``linear_dynamic`` calls a group's parts make (``_GroupPart``: the same input, the same stacked weight), the others'
    uses pointed at it: inference graphs get no common-subexpression pass of their own (torch 2.13 runs
    ``fx_graph_cse`` in the training partitioner and under freezing only). Calls of different weights differ in their
    index, so only a group's calls are merged. A ``CustomGraphPass`` with a ``uuid``: inductor's on-disk graph cache
    takes a compilation with it (a plain callable bypasses the cache: ``torch/_inductor/codecache.py``,
    ``_check_custom_passes``), so a second process compiles the draft from the cache."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        first: dict[Any, torch.fx.Node] = {}
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.specbench.linear_dynamic.default:
                kept = first.setdefault((node.args, tuple(sorted(node.kwargs.items()))), node)
                if kept is not node:
                    node.replace_all_uses_with(kept)
                    graph.erase_node(node)

    def uuid(self) -> str:
        """What inductor's graph cache keys this pass by."""
        return "specbench.compiled_draft._OneCallPerGroup/1"


#: the attention the compiled copy runs where the draft's is transformers' ``sdpa`` and its layers group key/value heads
#: (``_grouped_attention``)
ATTENTION = "specbench_sdpa_gqa"


def _sdpa_gqa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention (5.24, ``transformers/integrations/sdpa_attention.py: sdpa_attention_forward``)
    with grouped key/value heads handed to SDPA as they are (``enable_gqa=True``), where a mask is given: under dynamo,
    with a mask, transformers repeats every key/value head for each query head of its group (``repeat_kv``), which in
    the compiled step is a copy of the layer's whole static cache, every layer, every step (its eager one-token step
    reshapes the query instead, ``pack_gqa``, a branch it skips when dynamo traces). SDPA's CPU kernel reads the shared
    heads in place and gives the repeated heads' output bit for bit. Anything else (no mask, a position bias, a softcap,
    one key/value head per query head) is transformers' own function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if getattr(module, "num_key_value_groups", 1) > 1 and attention_mask is not None \
            and kwargs.get("position_bias") is None and kwargs.get("softcap") is None:
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                               dropout_p=dropout, scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def _grouped_attention(copy: Any) -> None:
    """``copy``'s attention set to ``_sdpa_gqa`` (``ATTENTION``, registered with transformers' attention and mask
    interfaces, the mask ``sdpa``'s) where its config names ``sdpa`` and a layer groups key/value heads. ``copy`` is ``shared_copy``'s: its config is its own, so the draft's eager forwards keep theirs."""
    config = getattr(copy, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not any(
            getattr(m, "num_key_value_groups", 1) > 1 for m in copy.modules()):
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _sdpa_gqa)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    config._attn_implementation = ATTENTION


def _op_copy(model: Any, groups: bool = False, attention: bool = False) -> Any:
    """A copy of ``model``'s modules sharing every parameter, buffer and packed int8 weight, its dynamic int8
    ``Linear`` layers replaced by ``_OpLinear``, or, for sibling projections of one input (``GROUPS``; ``groups``), by
    ``_GroupPart``s of one stacked weight, its attention ``_sdpa_gqa`` where it groups key/value heads
    (``attention``; module docstring). Both off by default, as a job runs the copy (the module docstring says why);
    ``scripts/bench_compiled_draft.py`` compares them side by side."""
    from specbench.models import shared_copy

    out = shared_copy(model)
    if attention:
        _grouped_attention(out)
    for parent in list(out.modules()):
        if groups:
            _group(parent)
        for name, child in list(parent.named_children()):
            if _is_int8_dynamic(child):
                setattr(parent, name, _OpLinear(child))
    return out


def _own_frame(forward: Any) -> Any:
    """A function calling ``forward`` whose code object is this step's own. Dynamo keeps its compiled graphs on the
    code object of the frame it compiles, and a model's ``forward`` is its class's: every compiled step of a
    Gemma-3 draft in a process (a sweep's pairs, a whole and a restricted head) would put its graphs on one code
    object, where dynamo looks each call up among all of them and refuses a ninth graph (``recompile_limit``;
    ``fullgraph`` makes it an error; int8 drafts' graphs differ, each baking in its own weights' indices)."""
    def step(**kwargs: Any) -> Any:
        return forward(**kwargs)

    code = step.__code__.replace(co_name="compiled_draft_step")  # a new code object; the name stable, so inductor's
    return type(step)(code, step.__globals__, code.co_name, None, step.__closure__)  # on-disk cache finds it again


class CompiledStep:
    """``model``'s forward of a few tokens on a static cache, compiled (module docstring). ``calls``: how many forwards
    it ran, ``compile_s``: the seconds the warm-up (the compilation) took. ``groups``, ``attention``: ``_op_copy``'s
    levers (both off, as in a job: module docstring)."""

    def __init__(self, model: Any, groups: bool = False, attention: bool = False) -> None:
        from runners.engine.kv import cache_keyword

        # no reference to ``model`` itself: ``_COMPILED`` is keyed by it weakly, and a value holding its key would keep
        # an evicted draft (``specbench.models.cache``) alive
        self.copy = _op_copy(model, groups=groups, attention=attention)
        self.keyword = cache_keyword(model)
        self.forward = torch.compile(_own_frame(self.copy.forward), dynamic=True, fullgraph=True,
                                     options={"post_grad_custom_pre_pass": _OneCallPerGroup()})
        self.calls = 0
        self.compile_s = 0.0
        #: per cache: the graphs (False: one token, True: several) whose guards dynamo checked on it (``__call__``)
        self.guarded: weakref.WeakKeyDictionary[Any, set[bool]] = weakref.WeakKeyDictionary()
        #: the forwards that ran without dynamo's guard check
        self.unguarded = 0

    def __call__(self, cache: Any, feed: list[int], position: int) -> torch.Tensor:
        """The logits after ``feed`` (1 to ``MAX_FEED`` tokens) fed at ``position`` of ``cache``, ``[1, 1, vocab]``.

        Dynamo checks its guards on the first forward of each graph on a cache; later ones on that cache skip them
        (``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``: only the guards that tell the two graphs apart,
        the feed's width, are checked) where nothing the guards read can have changed: the same model copy (private to
        this step), the same cache object, inference mode, and room in every layer for the feed, so the cache does not
        grow (``kv.PositionCache.fits``; growing is the one branch the graphs take on the cache's position). A full
        check reads every guard on the cache's layers and the copy's modules, a cost paid before every forward otherwise.
        Where a skipped check would have needed a new graph, dynamo raises rather than running a wrong one."""
        n, several = len(feed), len(feed) > 1
        ids, positions = torch.tensor([feed]), torch.arange(position, position + n)[None]
        if several:  # the graph of 2..MAX_FEED tokens, not one per width
            for t in (ids, positions):
                torch._dynamo.mark_dynamic(t, 1, min=2, max=MAX_FEED)
        self.calls += 1
        kwargs = {"input_ids": ids, self.keyword: cache, "use_cache": True, "position_ids": positions,
                  "logits_to_keep": 1}
        inference = torch.is_inference_mode_enabled()
        checked = several in self.guarded.get(cache, ())
        if inference and checked and isinstance(cache, PositionCache) and cache.fits(n):
            self.unguarded += 1
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self.forward(**kwargs).logits
        logits = self.forward(**kwargs).logits
        if inference:
            self.guarded.setdefault(cache, set()).add(several)
        return logits

    def warm_up(self, context: int = 4) -> None:
        """Compile now: ``context`` tokens prefilled eagerly on a scratch static cache, then one-token steps and feeds
        of 2 and 3 tokens through the compiled forward (its two graphs)."""
        from runners.engine.kv import PositionCache, cache_arg, cache_len

        start = time.perf_counter()
        with torch.inference_mode():
            cache = PositionCache(self.copy, 16)
            self.copy(input_ids=torch.arange(1, 1 + context)[None], **cache_arg(self.copy, cache), use_cache=True,
                       logits_to_keep=1)
            for feed in ([1], [2], [3, 4], [5, 6, 7]):
                self(cache, feed, cache_len(cache))
        self.calls = self.unguarded = 0
        self.compile_s = time.perf_counter() - start
        log.info("engine.draft_compile: %s's forwards compiled in %.1f s (two graphs: a step, a feed of several)",
                 type(self.copy).__name__, self.compile_s)


#: per draft model: its compiled step (``use_compiled``)
_COMPILED: weakref.WeakKeyDictionary[Any, CompiledStep] = weakref.WeakKeyDictionary()
#: per draft model: whether its forwards take the compiled step now (set per job; the step outlives a job)
_ON: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def check_compilable(model: Any) -> None:
    """``ConfigError`` in one line where ``engine.draft_compile`` cannot run: a model off the CPU, no C++ compiler."""
    from specbench.models import model_device

    where = model_device(model)
    if where.type != "cpu":
        raise ConfigError(f"engine.draft_compile compiles the draft's CPU step, but the draft runs on {where}; on a "
                          f"GPU engine.graphs=captured replays it from a CUDA graph")
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as exc:  # inductor's CPU backend builds C++: without a compiler it cannot
        raise ConfigError(f"engine.draft_compile needs a C++ compiler for torch.compile's CPU backend ({exc}); "
                          f"install g++ or set engine.draft_compile=false") from None


def use_compiled(model: Any, on: bool, headroom: int | None = None) -> None:
    """From now on ``model``'s forwards after its prefill on a static cache run its ``CompiledStep`` (built and compiled on
    first use, kept for the process), or, ``on`` false, eagerly again. ``on`` also gives ``model`` a static cache of
    ``headroom`` positions (``kv.use_static``), the compiled step's cache, where it has none."""
    if not on:
        _ON.pop(model, None)
        return
    from runners.engine.kv import static_headroom, use_static

    if model not in _COMPILED:  # checked and compiled once (a sweep's jobs call this before every decode)
        check_compilable(model)
        step = CompiledStep(model)
        step.warm_up()
        _COMPILED[model] = step
    if static_headroom(model) is None:
        use_static(model, headroom or 64)
    _ON[model] = True


def compiled_step(model: Any) -> CompiledStep | None:
    """``model``'s compiled step where its forwards take it now, else None."""
    return _COMPILED.get(model) if _ON.get(model) else None


def compiled_logits(executor: Any, cache: Any, feed: list[int], keep: Any) -> torch.Tensor | None:
    """The logits after ``feed`` (1 to ``MAX_FEED`` tokens, the last one's: ``keep`` 1) from ``executor``'s compiled
    forward, where it has one on and ``cache`` is a static cache past its prefill; None where the forward runs eagerly
    (module docstring)."""
    step = compiled_step(executor)
    if step is None or not 1 <= len(feed) <= MAX_FEED or keep != 1:
        return None
    from runners.engine.kv import cache_len, is_static

    position = cache_len(cache) if is_static(cache) else 0
    return step(cache, feed, position) if position > 0 else None
