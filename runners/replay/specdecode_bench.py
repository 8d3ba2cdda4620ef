"""SpecDecode-Bench's cost model of its vLLM engine: Llama-3.1-8B-Instruct on one H100 (arXiv 2601.11580).

The coefficients are those of ``predictor.py: Llama8BH100`` in the public repository
``SpecDecode-Bench/simulator`` (commit 2fdccbd), fitted by its authors on instructcoder at batch sizes
1-64, in seconds there, in milliseconds here. How its simulator uses them (``simulator.py``, read at the
same commit): every step (prefill, AR step or speculative round) costs one target forward
``kv·c_kv + batched·c_compute + c_fixed`` over the whole batch (``kv``: tokens in every row's cache,
``batched``: tokens fed by every row) plus ``overhead_per_step``; a speculative round adds its draft
time, once per step: EAGLE ``kv·c_kv + spec_tokens·c_spec + c_fixed`` with ``spec_tokens`` the row's
verification input (the drafted tokens + 1), n-gram ``ngram_share ×`` the step's verification time
(0 when nothing was proposed). Unlike our loop's latency model, the EAGLE draft is one call per round,
whatever the number of tokens it drafts.

This module only states the coefficients and those formulas (``target_forward_ms``,
``eagle_draft_ms``, ``ngram_draft_ms``); the repository has no licence file, so none of its data or
code is copied here.
"""

from __future__ import annotations

#: where the coefficients were read
SOURCE = "SpecDecode-Bench/simulator@2fdccbd, predictor.py: Llama8BH100 (vLLM, Llama-3.1-8B-Instruct, H100)"

# target forward (ms): per token in the batch's KV caches, per token fed, fixed
TARGET_MS_PER_KV_TOKEN = 3.92645679e-08 * 1e3
TARGET_MS_PER_BATCHED_TOKEN = 2.10103129e-05 * 1e3
TARGET_FIXED_MS = 5.88590713e-03 * 1e3
# EAGLE-3 draft, one call per round (ms)
EAGLE_MS_PER_KV_TOKEN = 2.37768493e-09 * 1e3
EAGLE_MS_PER_SPEC_TOKEN = 8.41429603e-07 * 1e3
EAGLE_FIXED_MS = 2.13526175e-03 * 1e3
#: n-gram lookup: this share of the round's verification time
NGRAM_SHARE = 0.005875
#: the engine's own time per step, AR steps and speculative rounds alike (ms)
OVERHEAD_PER_STEP_MS = 1.20683946e-03 * 1e3


def target_forward_ms(kv_tokens: int, batched_tokens: int) -> float:
    """One target forward over the batch (``TimePredictor.predict_forward_pass_time``)."""
    return kv_tokens * TARGET_MS_PER_KV_TOKEN + batched_tokens * TARGET_MS_PER_BATCHED_TOKEN + TARGET_FIXED_MS


def eagle_draft_ms(kv_tokens: int, spec_tokens: int) -> float:
    """One round's EAGLE proposal (``TimePredictor.predict_draft_time``, EAGLE): ``spec_tokens`` is the row's
    verification input, the drafted tokens + 1."""
    return kv_tokens * EAGLE_MS_PER_KV_TOKEN + spec_tokens * EAGLE_MS_PER_SPEC_TOKEN + EAGLE_FIXED_MS


def ngram_draft_ms(verify_ms: float) -> float:
    """One round's n-gram proposal (``TimePredictor.predict_draft_time``, NGRAM)."""
    return verify_ms * NGRAM_SHARE
