"""Speculative decoding across heterogeneous vocabularies (Timor et al., "Accelerating LLM
Inference with Lossless Speculative Decoding Algorithms for Heterogeneous Vocabularies").

* ``vocab``: token strings and the draft -> target id mapping by string (the rule is there);
* ``sampling``: a ``Chooser`` so every algorithm can be sampled or enumerated exactly;
* ``token_level``: TLI (Algorithm 4) and the union baseline (Algorithm 1);
* ``slrs``: String-Level Rejection Sampling (Algorithm 3) with the Sec. 3.3 lookahead.

SLEM (Algorithm 2) is string-level exact matching and lives in ``runners.hetero`` as a
drafter; TLI has a drafter there too. The method configs (``conf/method/{slem,tli,slrs,union}.yaml``)
name it with ``drafter:``; ``check_supported`` says which can run on a real model pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from methods.hetero.sampling import TorchChooser, acceptance_probability, enumerate_outcomes, verify_token
from methods.hetero.slrs import SLRS
from methods.hetero.token_level import UnionSpace, tli_distribution, tli_step, union_step
from methods.hetero.vocab import VocabMapping, build_vocab_mapping, mapping_from_strings, token_strings
from specbench.registry import ConfigError

REAL_DRAFTERS = ("slem", "tli")
"""Drafters that run on real model pairs (``runners.hetero``)."""
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


def _get(node: Any, key: str, default: Any = None) -> Any:
    return node.get(key, default) if isinstance(node, Mapping) or hasattr(node, "get") else default


def check_supported(method_cfg: Any, pair_cfg: Any) -> None:
    """Raise ``ConfigError`` if a heterogeneous-vocabulary method cannot run on this pair.

    ``slrs`` and ``union`` are toy/exact-evaluation only and refused for every real model
    pair; ``slem`` and ``tli`` need a draft *model* (``pair.draft.kind: model``) with its
    tokenizer. Other drafters are not this module's business (no error).
    """
    name = _get(method_cfg, "drafter")
    method = _get(method_cfg, "name", name)
    if name in EXACT_ONLY:
        raise ConfigError(
            f"method {method!r} (drafter {name!r}) is toy/exact-evaluation only; refused for real model pairs: "
            f"{_WHY[name]}. Use method=slem (greedy) or method=tli (any temperature) on real models."
        )
    if name in REAL_DRAFTERS:
        draft = _get(pair_cfg, "draft")
        if not draft:
            raise ConfigError(f"method {method!r} needs a draft model, but the pair has no draft")
        kind = _get(draft, "kind", "model")
        if kind != "model":
            raise ConfigError(f"method {method!r} (drafter {name!r}) needs pair.draft.kind: model, got {kind!r}")


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
