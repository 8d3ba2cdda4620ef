"""Speculative decoding across heterogeneous vocabularies (Timor et al., "Accelerating LLM
Inference with Lossless Speculative Decoding Algorithms for Heterogeneous Vocabularies").

* ``vocab``: token strings and the draft -> target id mapping by string (the rule is there);
* ``sampling``: a ``Chooser`` so every algorithm can be sampled or enumerated exactly;
* ``token_level``: TLI (Algorithm 4) and the union baseline (Algorithm 1);
* ``slrs``: String-Level Rejection Sampling (Algorithm 3) with the Sec. 3.3 lookahead.

* ``stats``: the vocabulary statistics of a pair (Tables 5 and 8-11; ``python -m methods.hetero.stats``).

The real-model drafters that use this mathematics are beside the other drafters
(``runners/drafters/slem.py``, ``tli.py``, on the text sync of ``text_sync.py``). The algorithm is
its own config choice (``hetero=auto|slem|tli|slrs|union``), independent of the γ policy;
``check_supported`` says which can run on a real model pair.
"""

from __future__ import annotations

from methods.hetero.sampling import TorchChooser, acceptance_probability, enumerate_outcomes, verify_token
from methods.hetero.slrs import SLRS
from methods.hetero.token_level import UnionSpace, tli_distribution, tli_step, union_step
from methods.hetero.vocab import VocabMapping, build_vocab_mapping, mapping_from_strings, token_strings
from specbench.registry import ConfigError

REAL_DRAFTERS = ("slem", "tli")
"""Drafters that run on real model pairs (``runners.drafters.slem``, ``runners.drafters.tli``)."""
EXACT_ONLY = ("slrs", "union")
"""Algorithms kept as exact, toy-vocabulary evaluations (``methods.hetero.slrs`` / ``token_level``)."""

_WHY = {
    "slrs": (
        "computing psi needs one drafter forward per node of a tree that grows exponentially with the "
        "target-token length (Timor et al., Lemma 3.1 / Appendix C: e.g. 144 combinations per Qwen2 token "
        "on average), so it is implemented as an exact algorithm on toy vocabularies (methods.hetero.slrs)"
    ),
    "union": (
        "Algorithm 1 is the baseline TLI provably beats (Theorem 4.1); a drafted token outside the target "
        "vocabulary cannot be handed to the target as a target id, so it is implemented as an exact "
        "algorithm on toy vocabularies (methods.hetero.token_level.union_step)"
    ),
}


def check_supported(rule: str) -> None:
    """Raise ``ConfigError`` if the cross-vocabulary algorithm ``rule`` cannot run on a real model pair
    (``slrs`` and ``union`` are toy/exact-evaluation only)."""
    if rule in EXACT_ONLY:
        raise ConfigError(
            f"hetero={rule} is toy/exact-evaluation only; refused for real model pairs: {_WHY[rule]}. "
            f"Use hetero=slem (greedy) or hetero=tli (any temperature) on real models."
        )


__all__ = [
    "EXACT_ONLY",
    "REAL_DRAFTERS",
    "SLRS",
    "TorchChooser",
    "UnionSpace",
    "VocabMapping",
    "acceptance_probability",
    "build_vocab_mapping",
    "check_supported",
    "enumerate_outcomes",
    "mapping_from_strings",
    "tli_distribution",
    "tli_step",
    "token_strings",
    "union_step",
    "verify_token",
]
