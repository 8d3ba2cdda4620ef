"""Speculative decoding across heterogeneous vocabularies (Timor et al., "Accelerating LLM
Inference with Lossless Speculative Decoding Algorithms for Heterogeneous Vocabularies").

* ``vocab``: token strings and the draft -> target id mapping by string (the rule is there);
* ``sampling``: a ``Chooser`` so every algorithm can be sampled or enumerated exactly;
* ``token_level``: TLI (Algorithm 4) and the union baseline (Algorithm 1);
* ``slrs``: String-Level Rejection Sampling (Algorithm 3) with the Sec. 3.3 lookahead;
* ``stats``: the vocabulary statistics of a pair (Tables 5 and 8-11; ``python -m methods.hetero.stats``).

This is the mathematics, once: the exact evaluators on toy vocabularies (the tests enumerate every
outcome) and the real-model drafters (``runners/drafters/slem.py``, ``tli.py``, ``union.py``,
``slrs.py``, on the text sync of ``text_sync.py``) call the same functions. The algorithm is its own
config choice (``hetero=auto|slem|tli|slrs|union``), independent of the γ policy; every one runs on
real model pairs.
"""

from __future__ import annotations

from methods.hetero.sampling import TorchChooser, acceptance_probability, enumerate_outcomes, verify_token
from methods.hetero.slrs import SLRS, SLRSTooLarge
from methods.hetero.token_level import (
    UnionSpace,
    restrict_logits,
    tli_distribution,
    tli_restrict,
    tli_step,
    to_target,
    union_step,
)
from methods.hetero.vocab import VocabMapping, build_vocab_mapping, mapping_from_strings, token_strings

__all__ = [
    "SLRS",
    "SLRSTooLarge",
    "TorchChooser",
    "UnionSpace",
    "VocabMapping",
    "acceptance_probability",
    "build_vocab_mapping",
    "enumerate_outcomes",
    "mapping_from_strings",
    "restrict_logits",
    "tli_distribution",
    "tli_restrict",
    "tli_step",
    "to_target",
    "token_strings",
    "union_step",
    "verify_token",
]
