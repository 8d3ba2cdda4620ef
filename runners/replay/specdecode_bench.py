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

This module states the coefficients and those formulas (``target_forward_ms``, ``eagle_draft_ms``,
``ngram_draft_ms``), and, for the γ-policy lab, the same charges as the lab's latency model
(``latency_model``: a ``specbench.latency.LatencyModel`` at batch 1 and at batch tables up to 128 rows), whose
rounds are billed by ``specbench.round_costs.batch_round_parts``:

* target forward at ``B`` rows of one request duplicated (their ``simulate_like_experiment`` batches): the KV
  term reads every row's cache, ``B·(p + t)`` tokens (the lab's context ``p + t − 1`` plus the token fed), the
  compute term every row's ``d + 1`` tokens: ``ForwardCost.affine(c_fixed + B·c_kv, B·c_compute, B·c_kv)``;
* prefill: ``c_fixed + B·p·c_compute`` plus one ``overhead_per_step`` (``simulate_org_batch`` /
  ``simulate_sd_batch`` append it after the prefill, with and without speculation);
* EAGLE: ``draft_rule = "per_step"``, one draft forward of the row's ``d + 1`` tokens at ``B·(p + t)`` KV tokens:
  ``ForwardCost.affine(e_fixed + B·e_kv, e_spec, B·e_kv)`` (``predict_draft_time``: ``num_spec_tokens`` is the
  row's verification input, not the batch's), in every round, one that drafts nothing included (``d = 0``: a
  forward of 1 token; ``simulate_sd_batch`` calls ``predict_draft_time`` for every EAGLE step, and their ``ORACLE``
  proposes nothing at ``acc_len = 1``). This is their default and the realistic rule for an EAGLE proposer (vLLM's
  runs after every verification, to keep its hidden states). The zero-charge variant, a round that drafts nothing
  billed as a plain target step, is ``latency_model("eagle", free_empty_rounds=True)`` (``draft_rule =
  "per_round"``); it is kept under that name, not as a leaderboard row: the lab's earlier EAGLE figures (before
  2026-11-27's issue-49 regeneration) were billed by it, and the conformance script prints its column
  (``ours, empty rounds free``) beside theirs;
* n-gram: ``draft_rule = "share"``, ``draft_share = NGRAM_SHARE``, 0 in a round that proposes nothing (their
  ``step_input_lens == 1``);
* ``round_overhead_ms = ar_overhead_ms = OVERHEAD_PER_STEP_MS`` at every batch size.

Every term is linear in ``B``, so ``LatencyModel.costs_at``'s interpolation between two tables is exact at any
batch size in between. Two things of theirs the lab bills differently (the conformance script,
``scripts/specdecode_bench_conformance.py``, measures both): their per-request latency adds each request's own
``draft_time`` (``simulate_sd_batch`` also computes a ``max_draft_time`` over the batch, but only records it),
the lab bills a batched round's draft once, for the widest proposal (identical for uniform duplicates); at the end
of a generation their step verifies ``k + 1`` tokens (and bills EAGLE ``k + 1`` spec tokens) where the lab's
budget ``min(γ, remaining − 1)`` drafts fewer. The repository has no licence file, so none of its data or code is
copied here.
"""

from __future__ import annotations

from specbench.latency import BatchCosts, ForwardCost, LatencyModel

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


#: the proposers of their data (``acc_eagle`` / ``acc_ngram``) and the lab's draft rule for each
PROPOSERS = {"eagle": "per_step", "ngram": "share"}
#: the batch sizes of their ``main.py`` (the lab's tables; in between: exact interpolation)
BATCH_SIZES = (1, 8, 16, 32, 64, 128)


def batch_costs(proposer: str, batch: int) -> BatchCosts:
    """The target, the draft and the overheads at ``batch`` duplicated rows (module docstring)."""
    if proposer not in PROPOSERS:
        raise ValueError(f"proposer {proposer!r} is not one of {', '.join(PROPOSERS)}")
    b = int(batch)
    target = ForwardCost.affine(TARGET_FIXED_MS + b * TARGET_MS_PER_KV_TOKEN, b * TARGET_MS_PER_BATCHED_TOKEN,
                                b * TARGET_MS_PER_KV_TOKEN,
                                prefill=(TARGET_FIXED_MS + OVERHEAD_PER_STEP_MS, b * TARGET_MS_PER_BATCHED_TOKEN))
    draft = (ForwardCost.affine(EAGLE_FIXED_MS + b * EAGLE_MS_PER_KV_TOKEN, EAGLE_MS_PER_SPEC_TOKEN,
                                b * EAGLE_MS_PER_KV_TOKEN) if proposer == "eagle" else ForwardCost.affine(0.0))
    return BatchCosts(target, draft, OVERHEAD_PER_STEP_MS, OVERHEAD_PER_STEP_MS)


def latency_model(proposer: str, batch_sizes: tuple[int, ...] = BATCH_SIZES,
                  free_empty_rounds: bool = False) -> LatencyModel:
    """Their cost model of ``proposer`` (``eagle`` / ``ngram``) as the lab's latency model, batch 1 and the
    tables at ``batch_sizes`` (module docstring); ``meta`` names the source. ``free_empty_rounds``: EAGLE's
    zero-charge variant (``draft_rule = "per_round"``: a round that drafts nothing pays no draft), not theirs."""
    one = batch_costs(proposer, 1)
    rule = "per_round" if proposer == "eagle" and free_empty_rounds else PROPOSERS[proposer]
    return LatencyModel(one.target, one.draft, one.round_overhead_ms, one.ar_overhead_ms,
                        {"kind": "specdecode_bench", "source": SOURCE, "proposer": proposer, "unit": "ms",
                         "batch_rows": "one request duplicated (their simulate_like_experiment)"},
                        {b: batch_costs(proposer, b) for b in batch_sizes if b > 1},
                        draft_rule=rule, draft_share=NGRAM_SHARE if proposer == "ngram" else 0.0)
