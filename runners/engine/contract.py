"""The one runner contract: prompts in, one ``BatchGeneration`` out.

A job decodes a batch of prompt turns at a time — at batch size 1 a batch of one — and reads every result the
same way: ``runner.generate(prompts, max_new_tokens, generator) -> BatchGeneration`` (``rows[i]`` is prompt
``i``'s ``Generation``; ``runners.engine.batched``). The batched loops (``BatchedSpeculativeRunner``,
``BatchedAutoregressiveRunner``) are such runners already. The batch-1 loops (``SpeculativeRunner``,
``AutoregressiveRunner``, transformers' loops in ``hf_assisted`` / ``hf_ar``) keep their own signature, one
prompt's ids in and one ``Generation`` out, and their internals; ``OneAtATime`` puts one behind the contract.
The wrapper does nothing inside the timed decode (the loop times itself), so the batch-1 speed is the loop's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from runners.engine.base import Generation
from runners.engine.batched import BatchGeneration


class Runner(Protocol):
    """What a job decodes with (module docstring)."""

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 generator: Any = None) -> BatchGeneration: ...


class Loop(Protocol):
    """A batch-1 loop: one prompt's ids in, its ``Generation`` out."""

    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator: Any = None) -> Generation: ...


class OneAtATime:
    """A batch-1 ``loop`` behind the contract: a batch of exactly one prompt, whose ``BatchGeneration`` is the
    loop's ``Generation`` as its only row (the batch's wall time, TTFT and phases are the row's)."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 generator: Any = None) -> BatchGeneration:
        if len(prompts) != 1:
            raise ValueError(f"a batch-1 runner decodes one prompt at a time, got a batch of {len(prompts)} "
                             "(batch_size > 1 runs the batched loops)")
        gen = self.loop.generate(list(prompts[0]), max_new_tokens, generator)
        return BatchGeneration([gen], gen.wall_ms, gen.ttft_ms, dict(gen.phase_ms or {}))
