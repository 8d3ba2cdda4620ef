"""The performance page's registered claims on what the engine's parts cost on a CPU (``analysis.claims``, issue 52):
the cost line at a hybrid job's own drafting (``results/committed/make_run_cap_epyc``), the target alone's one-row
step, the narrow LM head's bound and the draft's breakdown (``engine_costs_epyc/engine_costs_single_row.log``), and the
engine against transformers' assisted generation (``vs_hf_epyc``). Each check reads only those committed files."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.claim_check import COMMITTED, claim, rounds_to

#: make run's hybrid pair swept over its draft's cap (``analysis.claims``' cap claims read it too)
CAP_RUN = COMMITTED / "make_run_cap_epyc"


@claim("docs/pages/performance.md",
       "`make run`'s job drafted 3.82 tokens for 1.55 draft forwards a round, and the model reads 2.03× there against "
       "1.44× at a forward per token",
       str(CAP_RUN / "pair.draft.max_model_tokens=3" / "summary.json"),
       figures=("3.82", "1.55", "2.03×", "1.44×"))
def cost_line_as_drafted(root: Path) -> str | None:
    from specbench.summary import measured_costs

    summary = json.loads((root / CAP_RUN / "pair.draft.max_model_tokens=3" / "summary.json").read_text())
    costs = measured_costs(summary)
    if costs is None or costs.as_drafted() is None:
        return "the summary gives no drafting per round"
    got = {"drafted": (costs.drafted, 3.82), "forwards": (costs.forwards, 1.55), "as drafted": (costs.as_drafted(), 2.03),
           "a forward per token": (costs.best()[1], 1.44)}
    off = [f"{k} {v:.2f}" for k, (v, want) in got.items() if not rounds_to(v, want, 2)]
    return f"the summary reads {', '.join(off)}" if off else None


#: ``scripts/bench_engine_costs.py --json`` of the run the page shows (its log beside it)
_SINGLE_ROW = COMMITTED / "engine_costs_epyc" / "engine_costs_single_row.json"


def _costs(root: Path) -> dict:
    return json.loads((root / _SINGLE_ROW).read_text(encoding="utf-8"))


@claim("docs/pages/performance.md",
       "The target alone's step on one row costs 0.837 of the same step on the loop's kernels padded to 2",
       str(_SINGLE_ROW), figures=("0.837",))
def single_row_step(root: Path) -> str | None:
    med = _costs(root)["median_ms"]
    ratio = med["target fp32 1 token, engine step"] / med["target fp32 1 token, loop's kernels padded to 2"]
    return None if rounds_to(ratio, 0.837, 3) else f"the run reads {ratio:.3f}"


@claim("docs/pages/performance.md",
       "The LM head on 6 rows costs 1.9× its cost on 2 rows, where this host's GEMM rate would compute 6 rows in 9.2 ms",
       str(_SINGLE_ROW), figures=("1.9×", "9.2 ms"))
def narrow_head_bound(root: Path) -> str | None:
    costs = _costs(root)
    ratio = costs["median_ms"]["head fp32 mm(W,xT)T 6 rows"] / costs["median_ms"]["head fp32 mm(W,xT)T 2 rows"]
    compute_ms = 2 * 262144 * 640 * 6 / costs["floors"]["gemm_gflops"] / 1e6  # Gemma-3-270M's LM head: 262144 × 640
    if not rounds_to(ratio, 1.9, 1) or not rounds_to(compute_ms, 9.2, 1):
        return f"6 rows over 2: {ratio:.2f}; 6 rows at the GEMM rate: {compute_ms:.2f} ms"
    return None


@claim("docs/pages/performance.md",
       "The int8 draft spends 45 % of its step in its linear layers, and 29 % with the 32768-row head",
       str(_SINGLE_ROW), figures=("45 %", "29 %"))
def draft_step_breakdown(root: Path) -> str | None:
    parts = _costs(root)["breakdown"]
    shares = [round(100 * parts[name]["linear_ms"] / parts[name]["wall_ms"])
              for name in ("draft 1 token", "draft 1 token, head 32768 rows")]
    return None if shares == [45, 29] else f"the run reads {shares} %"


_VS_HF = COMMITTED / "vs_hf_epyc"


@claim("docs/pages/performance.md",
       "Over the two runs our engine decodes at 1.516 and 1.524 × transformers' assisted generation (pooled; the "
       "medians of the per-prompt ratios 1.513 and 1.534), every output identical to the target alone's, where the "
       "run before the loop took the single row read 1.458. The per-prompt ratios spread from 1.32 to 1.70",
       *(str(_VS_HF / "one_copy" / f"bench_vs_hf_{i}.json") for i in (1, 2)), str(_VS_HF / "bench_vs_hf.json"),
       figures=("1.516", "1.524 ×", "1.513", "1.534", "1.458", "1.32", "1.70"))
def engine_over_hf(root: Path) -> str | None:
    runs = [json.loads((root / _VS_HF / "one_copy" / f"bench_vs_hf_{i}.json").read_text()) for i in (1, 2)]
    before = json.loads((root / _VS_HF / "bench_vs_hf.json").read_text())
    got = [(r["engines"]["ours"]["ratio_hf"], r["engines"]["ours"]["ratio_hf_median"]) for r in runs]
    stated = [(1.516, 1.513), (1.524, 1.534)]
    if any(not (rounds_to(p, sp, 3) and rounds_to(m, sm, 3)) for (p, m), (sp, sm) in zip(got, stated, strict=True)):
        return f"the runs read {got}"
    if not all(r["identical"] for r in runs) or not rounds_to(before["engines"]["ours"]["ratio_hf"], 1.458, 3):
        return "an output differs, or the run before reads otherwise"
    per_prompt = [p["ours"]["tokens_per_s"] / p["hf"]["tokens_per_s"] for r in runs for p in r["prompts"]]
    if not (rounds_to(min(per_prompt), 1.32, 2) and rounds_to(max(per_prompt), 1.70, 2)):
        return f"the per-prompt ratios spread from {min(per_prompt):.2f} to {max(per_prompt):.2f}"
    return None
