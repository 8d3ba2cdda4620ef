"""``RaggedCache``: one KV cache for a batch whose rows hold sequences of different lengths.

A batched speculative round leaves every row with its own length: row ``i`` accepted ``a_i`` of
its drafted tokens, so the states of its rejected tokens must go while another row keeps all of
its block. transformers' ``DynamicCache`` crops every row alike. This cache keeps the columns
shared and a validity mask per row instead:

* a forward feeds each row a block of its own length, **right-aligned** in a ``[rows, w]`` input
  (a shorter block is padded on its left); the pad columns are invalid;
* ``truncate(row, n)`` keeps the first ``n`` tokens of a row: later columns of that row become
  invalid (holes) — the states stay in memory, masked out of every later attention;
* every forward passes the 2-D ``attention_mask`` (valid columns) and explicit ``position_ids``
  (a token's index in its own row's sequence), the way transformers' batched ``generate`` runs
  left-padded rows; the model builds its causal (and sliding-window) masks from them
  (``masking_utils.create_causal_mask`` and its ``padding_mask_function``);
* ``select(rows)`` drops finished rows (``Cache.batch_select_indices``);
* ``compact()`` crops columns that no row uses at the end, and **repacks** (each row's valid
  columns gathered and right-aligned, pads on the left) when holes exceed ``HOLE_SHARE`` of the
  columns, or whenever a sliding-window layer could see a hole: a sliding window counts columns,
  so with each row right-aligned and contiguous, the last ``W`` columns are exactly the row's last
  ``W`` tokens — the same window as the row alone.

Sliding-window layers (Gemma-3) are created with past recording on (``runners.engine.kv.new_cache``)
and never cropped through ``crop`` here (that would trim them to the window): this module slices
their full states itself and keeps ``cumulative_length`` equal to the columns. A static cache
(``engine.graphs=static``, ``runners.engine.kv.PositionCache``) keeps its keys and values where they are:
cropping columns is a ``rewind`` (a position), a repack gathers each row's columns and writes them back
into the same tensors. Other cache layer kinds (quantized, linear attention) are refused with a one-line error.

Greedy output per row equals the row decoded alone up to floating-point summation order (the
padded forward reduces over the same valid states); the tests compare every row with its own
autoregressive output (``tests/engine/test_batched.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from runners.engine.kv import GrowingStaticLayer, cache_arg, is_static, new_cache, rewind
from specbench.models import model_device

#: holes (invalid columns between valid ones) above this share of the columns trigger a repack
HOLE_SHARE = 0.25


def is_sampled(sampling: Any) -> bool:
    """True when ``sampling`` (a ``runners.engine.verify.Sampling`` or a bare temperature) samples."""
    return float(getattr(sampling, "temperature", sampling)) > 0


def sliding_window(model: Any) -> int | None:
    """The model's sliding attention window, if any of its layers has one (``config.sliding_window``)."""
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if window and (types is None or any("sliding" in str(t) for t in types)):
        return int(window)
    return None


class RaggedCache:
    """The KV cache of ``rows`` sequences of different lengths (module docstring)."""

    def __init__(self, model: Any, rows: int, pad_id: int = 0, executor: Any | None = None) -> None:
        self.model = model
        self.executor = executor if executor is not None else model  # runs the forwards (engine.fast_linear)
        self.device = model_device(model)
        self.cache = new_cache(model)
        self.valid = torch.zeros(rows, 0, dtype=torch.bool)  # on the CPU: [rows, columns]
        self.lengths = [0] * rows  # tokens held per row
        self.pad_id = int(pad_id)
        self.window = sliding_window(model)
        self.repacks = 0

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def columns(self) -> int:
        return int(self.valid.shape[1])

    def forward(self, blocks: list[list[int]], keep: int | None = None) -> list[torch.Tensor]:
        """Feed row ``i`` the tokens ``blocks[i]`` (may be empty: the row rides along) in one forward;
        returns, per row, the logits of the last ``keep`` tokens of its block (default: all of them),
        ``[min(keep, len(block)), V]`` (an empty block's entry is empty).

        Layout: into an empty cache (a prefill) the blocks are right-aligned (left padding, as
        transformers pads a batch), so ``keep=1`` computes the LM head for one column only;
        afterwards left-aligned, so each row's tokens follow its cached ones. A sliding window counts
        columns: when this forward's last column could be past the window and a row has holes, the
        cache is repacked first (module docstring)."""
        if len(blocks) != self.rows:
            raise ValueError(f"{len(blocks)} blocks for {self.rows} rows")
        w = max(len(b) for b in blocks)
        if w == 0:
            raise ValueError("every block is empty")
        prefill = self.columns == 0
        if not prefill and self.window is not None and self.columns + w > self.window and self.holes():
            self.repack()
        ids = torch.full((self.rows, w), self.pad_id, dtype=torch.long)
        new_valid = torch.zeros(self.rows, w, dtype=torch.bool)
        pos = torch.zeros(self.rows, w, dtype=torch.long)
        for i, block in enumerate(blocks):
            n = len(block)
            start = self.lengths[i] - (w - n) if prefill else self.lengths[i]  # a token's index in its row
            pos[i] = torch.arange(start, start + w).clamp_(min=0)
            if n:
                cols = slice(w - n, w) if prefill else slice(0, n)
                ids[i, cols] = torch.tensor(block, dtype=torch.long)
                new_valid[i, cols] = True
        valid = torch.cat([self.valid, new_valid], dim=1)
        one_column = prefill and keep == 1
        out = self.executor(
            input_ids=ids.to(self.device),
            attention_mask=valid.to(device=self.device, dtype=torch.long),
            position_ids=pos.to(self.device),
            **cache_arg(self.executor, self.cache),
            use_cache=True,
            logits_to_keep=1 if one_column else w,
        )
        self._check_layers()
        self.valid = valid
        # laid out row by row: the rows are split and argmaxed one by one, and a transposed executor's
        # output is a strided view (a per-row argmax over 262k strided columns cost the rounds' overhead
        # 193–217 ms per B = 4 batch of 64 tokens against 35–41 ms on a copy, 2026-11-26); a no-op otherwise
        logits = out.logits.contiguous()
        rows_logits = []
        for i, block in enumerate(blocks):
            n = len(block)
            self.lengths[i] += n
            k = n if keep is None else min(keep, n)
            if one_column:
                rows_logits.append(logits[i, -k:] if k else logits[i, :0])
            elif prefill:
                rows_logits.append(logits[i, w - k:w] if k else logits[i, :0])
            else:
                rows_logits.append(logits[i, n - k:n])
        return rows_logits

    def truncate(self, row: int, n: int) -> None:
        """Keep the first ``n`` tokens of ``row`` (its later columns become holes)."""
        if n >= self.lengths[row]:
            if n > self.lengths[row]:
                raise ValueError(f"row {row} holds {self.lengths[row]} tokens, cannot keep {n}")
            return
        kept = torch.cumsum(self.valid[row].to(torch.long), dim=0) <= n
        self.valid[row] &= kept
        self.lengths[row] = n

    def select(self, rows: list[int]) -> None:
        """Keep only these rows, in this order (finished rows leave the batch)."""
        if rows == list(range(self.rows)):
            return
        index = torch.tensor(rows, dtype=torch.long)
        self.cache.batch_select_indices(index.to(self.device))
        self.valid = self.valid[index]
        self.lengths = [self.lengths[i] for i in rows]

    def holes(self) -> int:
        """Invalid columns after each row's first valid one, summed over rows (left padding is not a hole)."""
        if self.columns == 0:
            return 0
        first = self.valid.to(torch.long).argmax(dim=1)
        spans = self.columns - first
        return int(spans.sum()) - sum(self.lengths)

    def compact(self) -> None:
        """Crop unused trailing columns; repack when holes exceed ``HOLE_SHARE`` of the columns."""
        used = self.valid.any(dim=0)
        last = int(used.nonzero().max()) + 1 if bool(used.any()) else 0
        if last < self.columns:
            self._slice_columns(slice(0, last))
            self.valid = self.valid[:, :last]
        if self.holes() > HOLE_SHARE * self.rows * self.columns:
            self.repack()

    def repack(self) -> None:
        """Gather each row's valid columns, right-aligned (pads on the left)."""
        width = max(self.lengths) if self.lengths else 0
        index = torch.zeros(self.rows, width, dtype=torch.long)
        valid = torch.zeros(self.rows, width, dtype=torch.bool)
        for i in range(self.rows):
            cols = self.valid[i].nonzero().flatten()
            n = int(cols.numel())
            if n:
                index[i, width - n:] = cols
                valid[i, width - n:] = True
        dev_index = index.to(self.device)
        static = is_static(self.cache)
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
                continue
            gather = dev_index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            keys = layer.keys.gather(2, gather)
            values = layer.values.gather(2, gather.expand(-1, -1, -1, layer.values.shape[3]))
            if static:  # written back in place: the static tensors keep their addresses
                layer.keys[:, :, :width].copy_(keys)
                layer.values[:, :, :width].copy_(values)
            else:
                layer.keys, layer.values = keys, values
            if isinstance(layer, DynamicSlidingWindowLayer):
                layer.cumulative_length = width
        if static:
            rewind(self.cache, width)
        self.valid = valid
        self.repacks += 1

    def _slice_columns(self, cols: slice) -> None:
        if is_static(self.cache):  # only ever the first columns: a position
            rewind(self.cache, cols.stop)
            return
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
                continue
            layer.keys = layer.keys[:, :, cols, :]
            layer.values = layer.values[:, :, cols, :]
            if isinstance(layer, DynamicSlidingWindowLayer):
                layer.cumulative_length = int(layer.keys.shape[2])

    def _check_layers(self) -> None:
        for layer in self.cache.layers:
            if type(layer) is GrowingStaticLayer:
                continue
            if not isinstance(layer, DynamicLayer) or type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
                raise NotImplementedError(
                    f"batch_size > 1 supports full and sliding-window attention caches; this model's cache has a "
                    f"{type(layer).__name__}")
            if isinstance(layer, DynamicSlidingWindowLayer) and layer.keys.shape[2] != layer.cumulative_length:
                raise RuntimeError("a sliding-window layer dropped states: it must record its past (kv.new_cache)")
