"""The host-speed probe: a fixed piece of work timed right before every timed generation.

On a host whose speed drifts (other processes, clocks, thermal limits: ±25 % within an hour on our
CPU machine) two records are comparable only when the host ran at the same speed for both. The probe
says how fast it ran: one forward of the job's target model on a fixed input of ``PROBE_TOKENS``
token id(s), without a KV cache, logits for the last position only (the work of one decoding step),
timed with the device synchronised (``host_probe_ms`` in each record;
``specbench.records``). Its work is the same for every job of a pair, whatever the method, so across
a sweep a larger probe means a slower host, not a different job. ``analysis`` reports the sweep's
drift range from it, flags cells taken while the host ran off its median, and offers a
drift-normalised throughput as a named alternative.

It costs one target decoding step per generation (2-3 % of a 40-token generation on the CPU pairs); ``host_probe=false`` turns it off. It runs outside the timed generation, so it changes
no timing but the sweep's wall time.
"""

from __future__ import annotations

import time
from typing import Any

import torch

PROBE_TOKENS = 1  # the probe's input length: one decoding step's work


class HostProbe:
    """Times one forward of ``model`` on a fixed input (module docstring)."""

    def __init__(self, model: Any, vocab_size: int, tokens: int = PROBE_TOKENS) -> None:
        self.model = model
        device = next(iter(model.parameters())).device
        self.device = device
        self.ids = (torch.arange(tokens, dtype=torch.long) * 7919 % max(2, vocab_size - 1) + 1).unsqueeze(0).to(device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __call__(self) -> float:
        """The probe's time in milliseconds, now."""
        with torch.inference_mode():
            self._sync()
            t0 = time.perf_counter()
            try:
                self.model(input_ids=self.ids, use_cache=False, logits_to_keep=1)
            except TypeError:  # a model whose forward has no logits_to_keep
                self.model(input_ids=self.ids, use_cache=False)
            self._sync()
            return (time.perf_counter() - t0) * 1000.0
