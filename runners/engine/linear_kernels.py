"""The kernels a copy of the target computes its linear layers with (``engine.fast_linear``): which rows take which
product, and the copy that swaps them in. Which copy a job runs, measured on the host, is
``runners.engine.fast_linear``.

A copy of the model (``kernel_copy``: the same parameter tensors) whose ``nn.Linear`` layers take another kernel:

* ``head`` / ``all`` (no extra memory): ``x·Wᵀ`` computed as ``(W·xᵀ)ᵀ`` when ``x`` has ``min_rows..max_rows`` rows,
  the rows of a verification block or a step (``TransposedLinear``; one row as the first of two equal rows,
  ``SINGLE_ROW``). Same products and sums; with this machine's MKL ``F.linear`` takes a slow path for a few rows
  (Gemma-3-270M's 262144 × 640 LM head: 2–4× slower for 2–9 rows than ``torch.mm(W, x.T)``), and its one-column
  product runs on one thread, while long blocks (a prefill's body) keep ``F.linear``. ``head`` swaps the LM head
  only, ``all`` every ``nn.Linear``;
* ``onednn``: every ``nn.Linear`` on oneDNN's matmul with its weight reordered once (``PackedLinear``), at any row
  count: a few rows cost about what one does, as reading the weight does (a second copy of the weights in memory,
  ``packed_bytes``).

Rounding differs at the 1e-6 level, as it already does between a 1-row and a k-row ``F.linear``. The copy is checked
against the model on a short input (the logits must agree) and refused otherwise; quantized or custom linear modules
are left alone.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from runners.engine.kv import cache_arg, new_cache
from specbench.models import model_device, shared_copy

log = logging.getLogger("specbench")


SCOPES = ("head", "all", "onednn")

#: the scope whose copy runs every ``nn.Linear`` on oneDNN's matmul with the weight reordered once (``PackedLinear``)
ONEDNN = "onednn"

#: the rows oneDNN's weight reorder is told to expect (``torch.ops.mkldnn._reorder_linear_weight``'s batch-size
#: hint; any row count runs on the reordered weight). On the 2-core AMD EPYC (avx512_bf16, no AMX), 2026-11-28,
#: Gemma-3-270M's LM head on 1/2/6/8/16/128 rows, 5 interleaved repeats (medians, ms): hint 16: 14.4, 15.5, 15.2,
#: 16.7, 19.8, 126; no hint: 15.8, 16.1, 16.4, 17.8, 21.7, 128; hint 1: 16.4, 21.8, 24.5, 26.0, 30.8, 138; and
#: ``torch.mm(W, xᵀ)`` 42.9, 16.8, 27.5, 32.4, 66.1, 269
PACK_ROWS = 16


#: why a single row is computed as the first of two equal rows (``TransposedLinear`` with ``min_rows=1``: the copy
#: the loop and its target alone run, ``verify_forward``; a prefill's LM head, a step, a one-token block):
#: ``torch.mm(W, xᵀ)`` with one column is MKL's matrix-vector product, which ran on one thread of two, while two
#: columns run on both. On the 2-core AMD EPYC (avx512_bf16, no
#: AMX), 2026-11-28, Gemma-3-270M's LM head on one row took 41.6 ms on one thread and 42.2 ms on two, and 15.5 ms as
#: two rows; the whole decoder body of a one-token step 29.0 ms, and 18.4 ms with every linear layer so
#: (``scripts/bench_engine_costs.py``, ``results/committed/engine_costs_epyc/README.md``). The row's values are the
#: 2-column product's (rounding at the 1e-6 level against the 1-column one, as between any two kernels here).
SINGLE_ROW = "a single row as the first of two equal rows"


class TransposedLinear(torch.nn.Module):
    """``nn.Linear``'s function, computed as ``(W·xᵀ)ᵀ`` for ``min_rows..max_rows`` rows of ``x`` (one row: as the
    first of two equal rows, ``SINGLE_ROW``); shares the wrapped layer's ``weight`` and ``bias`` tensors. Its output
    is a strided view (the product's transpose)."""

    def __init__(self, linear: torch.nn.Linear, min_rows: int = 2, max_rows: int = 16) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.min_rows, self.max_rows = int(min_rows), int(max_rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = x.shape[-1]
        rows = x.numel() // features if features else 0
        if not self.min_rows <= rows <= self.max_rows:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, features)
        if rows == 1:  # a single row goes through the 2-column product, the row twice (``SINGLE_ROW``)
            flat = flat.repeat(2, 1)
        y = torch.mm(self.weight, flat.t()).t()[:rows]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.weight.shape[0])


class PackedLinear(torch.nn.Module):
    """``nn.Linear``'s function on oneDNN's matmul (``torch.ops.mkldnn._linear_pointwise``, the kernel
    ``torch._inductor`` calls for a CPU linear layer) with the weight reordered once into oneDNN's blocked layout
    (``torch.ops.mkldnn._reorder_linear_weight``, ``PACK_ROWS``), for any row count. Keeps the wrapped layer's
    ``weight`` (an embedding may share it) and ``bias``; the reordered weight is a second copy, in memory as long
    as this module lives (``packed_bytes``).

    Why: MKL's ``F.linear`` and ``(W·xᵀ)ᵀ`` grow with the rows of a few-row product, where reading the
    weight, the memory's cost, does not. On the 2-core AMD EPYC (avx512_bf16, no AMX), 2026-11-28, a whole
    Gemma-3-270M forward of 1 and 6 tokens with every linear layer so cost 25.5 and 31.9 ms against 36.0 and 72.0
    ms for the transposed copy's step and block (7 interleaved repeats; ``scripts/bench_engine_costs.py`` has
    the items)."""

    def __init__(self, linear: torch.nn.Linear, rows_hint: int | None = PACK_ROWS) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), rows_hint)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def onednn_available() -> bool:
    """Whether this torch build has oneDNN on the CPU and its linear ops (``PackedLinear``)."""
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise") \
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    except Exception:  # a build without the op namespace
        return False


def packed_bytes(model: Any) -> int:
    """The bytes ``scope="onednn"`` adds to ``model``: one reordered copy of every ``nn.Linear`` weight."""
    return sum(m.weight.numel() * m.weight.element_size() for m in model.modules() if type(m) is torch.nn.Linear)


def _swap_linears(model: torch.nn.Module, scope: str, max_rows: int = 16, min_rows: int = 2) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    swapped = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is not torch.nn.Linear or not (scope in ("all", ONEDNN) or child is head):
                continue
            if scope == ONEDNN:
                setattr(module, name, PackedLinear(child))
            else:
                setattr(module, name, TransposedLinear(child, min_rows=min_rows, max_rows=max_rows))
            swapped += 1
    return swapped


def kernel_copy(model: Any, scope: str = "all", rtol: float = 1e-4, max_rows: int = 16,
                min_rows: int = 2) -> Any | None:
    """A copy of ``model`` sharing its parameters and buffers, with ``TransposedLinear`` layers (``scope`` ``head``
    or ``all``; ``min_rows..max_rows``: the rows they transpose) or ``PackedLinear`` ones (``onednn``; the rows
    ignored); ``None`` when nothing can be swapped, oneDNN is missing or the copy's logits disagree."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    if scope == ONEDNN and (model_device(model).type != "cpu" or not onednn_available()):
        log.info("engine.fast_linear=onednn: no oneDNN for %s here; plain forwards", type(model).__name__)
        return None
    try:
        fast = shared_copy(model)
        if not _swap_linears(fast, scope, max_rows, min_rows):
            return None
        ids = torch.tensor([[1, 2, 3, 4]], device=model_device(model))
        with torch.inference_mode():
            ref = model(input_ids=ids, **cache_arg(model, new_cache(model)), use_cache=True, logits_to_keep=4).logits
            got = fast(input_ids=ids, **cache_arg(fast, new_cache(fast)), use_cache=True, logits_to_keep=4).logits
    except Exception as exc:  # an architecture this does not fit: keep the plain forward
        log.info("engine.fast_linear=%s unavailable for %s: %s", scope, type(model).__name__, exc)
        return None
    scale = float(ref.abs().max()) or 1.0
    if got.shape != ref.shape or float((got.float() - ref.float()).abs().max()) > rtol * scale:
        log.info("engine.fast_linear=%s disagrees with %s's own forward; not used", scope, type(model).__name__)
        return None
    return fast
