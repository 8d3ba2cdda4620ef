"""What the paper-scale GPU costs show (issue 43), from the committed files of ``scripts/gpu_paper_costs.py``:

    python scripts/compare_paper_costs.py [results/committed/gpu_paper_costs]

1. transformers' ``generate()`` per model, both runs, beside the GammaTune paper's Table 1;
2. one Llama-3.1-8B step at context 512, batch 1, three ways: SpecDecode-Bench's fitted vLLM costs on an
   H100 (``runners.replay.specdecode_bench``), our loop's calibration (transformers eager), the same forward
   captured in a CUDA graph; with the round of γ = 4 EAGLE-like drafts each implies and the tokens a round
   must yield to beat the target alone;
3. eager against captured per shape, both runs: how much of a step is launch overhead, and its spread;
4. one Llama-3.1-8B forward per width against SpecDecode-Bench's fitted vLLM cost: eager, captured, and the
   weights' read alone (the model's matmuls captured: the floor), where the folder has the floor (issue 53).
Only reads files; prints the tables (what ``compare.log`` holds). A folder of one lease (issue 53's
``results/committed/gpu_costs_h100``: the graphs inside ``paper_costs.json``, no second run) prints what it has.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runners.replay import specdecode_bench as sdb
from specbench.latency import LatencyModel

CONTEXT = 512
GAMMA = 4


def _load(folder: Path, name: str) -> dict[str, Any]:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else {}


def generate_table(folder: Path) -> list[str]:
    runs = [_load(folder, "paper_costs.json").get("generate", {}), _load(folder, "generate_repeat.json").get("generate", {})]
    if not runs[0]:  # a lease that ran no generate stage
        return []
    lines = ["1. transformers generate(), greedy, eager, 128 new tokens after 128: ms per new token (median of 3)",
             f"   {'model':14s} {'params':>7s} {'run 1':>7s} {'run 2':>7s} {'paper':>7s} {'run 1 / paper':>14s} {'run 2 / paper':>14s}"]
    for name, row in runs[0].items():
        other = runs[1].get(name, {})
        ref = row.get("paper_table1_ms")
        r2 = other.get("ms_per_token")
        lines.append(f"   {name:14s} {row['params'] / 1e9:6.2f}B {row['ms_per_token']:7.2f} "
                     f"{r2 if r2 is None else format(r2, '7.2f'):>7} {ref:7.2f} {row['ms_per_token'] / ref:14.2f} "
                     f"{'' if r2 is None else format(r2 / ref, '14.2f')}")
    return lines


def _device(folder: Path) -> str:
    """The GPU's short name (``H100``, ``H200``) from the folder's ``paper_costs.json``."""
    name = _load(folder, "paper_costs.json").get("meta", {}).get("device", "GPU")
    return next((w for w in name.split() if w[:1] in "HABL" and w[1:].isdigit()), name)


def _graphs(folder: Path, group: str) -> dict[str, Any]:
    """The graphs stage's rows of ``group``: ``graphs_<group>.json`` (the H200 lease's per-group files) or, where
    the folder has none, ``paper_costs.json``'s own ``graphs`` (one process for every shape)."""
    return _load(folder, f"graphs_{group}.json").get("graphs") or _load(folder, "paper_costs.json").get("graphs", {})


def step_table(folder: Path) -> list[str]:
    lat = LatencyModel.load(folder / "latency_llama-3.1-8b_eagle-like-8b.json")
    graphs, dev = _graphs(folder, "llama-3.1-8b"), _device(folder)
    g8, ge = graphs.get("llama-3.1-8b_bfloat16", {}), graphs.get("eagle-like-8b_bfloat16", {})

    def cap(row: dict[str, Any], k: int) -> float:
        return row[f"captured_k{k}"]["median"]

    rows = []
    # SpecDecode-Bench: one forward over the batch; the EAGLE proposal is one call per round
    v = {k: sdb.target_forward_ms(CONTEXT, k) for k in (1, 4, 16)}
    verify = sdb.target_forward_ms(CONTEXT, GAMMA + 1)
    draft = sdb.eagle_draft_ms(CONTEXT, GAMMA + 1)
    rows.append(("SpecDecode-Bench fit: vLLM, H100", v, f"{draft:.2f} (1 call)", sdb.OVERHEAD_PER_STEP_MS,
                 sdb.OVERHEAD_PER_STEP_MS, verify + draft + sdb.OVERHEAD_PER_STEP_MS, v[1] + sdb.OVERHEAD_PER_STEP_MS))
    v = {k: lat.verify_ms(k, CONTEXT) for k in (1, 4, 16)}
    d1 = lat.draft_ms(1, CONTEXT)
    rows.append((f"our loop: HF eager, {dev} (calibrate)", v, f"{GAMMA} x {d1:.2f}", lat.round_overhead_ms,
                 lat.ar_overhead_ms, lat.verify_ms(GAMMA + 1, CONTEXT) + GAMMA * d1 + lat.round_overhead_ms,
                 v[1] + lat.ar_overhead_ms))
    if g8 and ge:
        v = {k: cap(g8, k) for k in (1, 4, 16)}
        dc = cap(ge, 1)
        # the captured forward with the eager loop's overheads: what graphs alone would change
        verify = cap(g8, 4) + (cap(g8, 16) - cap(g8, 4)) * (GAMMA + 1 - 4) / 12
        rows.append((f"one forward in a CUDA graph, {dev} (+ our loop's overheads)", v, f"{GAMMA} x {dc:.2f}",
                     lat.round_overhead_ms, lat.ar_overhead_ms, verify + GAMMA * dc + lat.round_overhead_ms,
                     v[1] + lat.ar_overhead_ms))
    lines = [f"2. Llama-3.1-8B with an EAGLE-like draft, context {CONTEXT}, batch 1 (ms); a round drafts γ = {GAMMA} "
             f"and verifies {GAMMA + 1}",
             f"   {'source':58s} {'k=1':>6s} {'k=4':>6s} {'k=16':>6s} {'k16/k1':>6s} {'draft of a round':>16s} "
             f"{'ovh/round':>9s} {'ovh/AR':>6s} {'round':>6s} {'AR step':>7s} {'break-even':>10s}"]
    for name, v, draft, over, ar_over, round_ms, ar_ms in rows:
        lines.append(f"   {name:58s} {v[1]:6.2f} {v[4]:6.2f} {v[16]:6.2f} {v[16] / v[1]:6.2f} {draft:>16s} {over:9.2f} "
                     f"{ar_over:6.2f} {round_ms:6.2f} {ar_ms:7.2f} {round_ms / ar_ms:10.2f}")
    lines.append("   break-even: tokens a round must yield (accepted + the target's own) for speculation to match the "
                 "target alone = round / AR step")
    return lines


def graphs_table(folder: Path) -> list[str]:
    """Table 3: both runs as ``run 1/run 2``; a folder of one run prints its one value in each."""
    if not any(_load(folder, f"graphs_{g}_repeat.json") for g in ("gemma3-270m", "llama-3.1-8b")):
        return _graphs_one_run(folder)
    lines = ["3. one forward, eager (dynamic cache, as our loop) against captured (static cache, one CUDA graph per "
             "width): median ms of 20, run 1 / run 2; IQR of the 20",
             f"   {'shape':26s} {'k':>3s} {'eager':>15s} {'captured':>13s} {'eager/captured':>15s} {'eager IQR':>11s} "
             f"{'captured IQR':>13s}"]
    seen: set[str] = set()
    for group in ("gemma3-270m", "llama-3.1-8b"):
        one = _graphs(folder, group)
        two = _load(folder, f"graphs_{group}_repeat.json").get("graphs", {})
        for shape, row in one.items():
            if shape in seen:  # paper_costs.json's graphs serve every group
                continue
            seen.add(shape)
            rep = two.get(shape, row)
            for k in (1, 4, 16):
                e = [r[f"eager_dynamic_k{k}"] for r in (row, rep)]
                c = [r[f"captured_k{k}"] for r in (row, rep)]
                lines.append(f"   {shape:26s} {k:3d} {e[0]['median']:7.2f}/{e[1]['median']:<7.2f} "
                             f"{c[0]['median']:6.2f}/{c[1]['median']:<6.2f} "
                             f"{e[0]['median'] / c[0]['median']:7.1f}/{e[1]['median'] / c[1]['median']:<7.1f} "
                             f"{e[0]['q3'] - e[0]['q1']:5.2f}/{e[1]['q3'] - e[1]['q1']:<5.2f} "
                             f"{c[0]['q3'] - c[0]['q1']:6.2f}/{c[1]['q3'] - c[1]['q1']:<6.2f}")
    return lines


def _graphs_one_run(folder: Path) -> list[str]:
    lines = ["3. one forward, eager (dynamic cache, as our loop) against captured (static cache, one CUDA graph per "
             "width): median ms of 20, one run; IQR of the 20",
             f"   {'shape':26s} {'k':>3s} {'eager':>8s} {'captured':>8s} {'eager/captured':>14s} {'eager IQR':>9s} "
             f"{'captured IQR':>12s}"]
    for shape, row in _graphs(folder, "llama-3.1-8b").items():
        for k in (1, 4, 16):
            e, c = row[f"eager_dynamic_k{k}"], row[f"captured_k{k}"]
            lines.append(f"   {shape:26s} {k:3d} {e['median']:8.2f} {c['median']:8.2f} {e['median'] / c['median']:14.1f} "
                         f"{e['q3'] - e['q1']:9.2f} {c['q3'] - c['q1']:12.2f}")
    return lines


def floor_table(folder: Path) -> list[str]:
    """Table 4: per verification width, one Llama-3.1-8B forward (context 512, batch 1, bf16) eager, captured and
    the floor, each over SpecDecode-Bench's fitted vLLM forward on an H100 (``target_forward_ms``): how far the
    captured forward is from a serving engine's, and how much of that gap the weights' read leaves."""
    row = _graphs(folder, "llama-3.1-8b").get("llama-3.1-8b_bfloat16", {})
    widths = sorted(int(key.split("_k")[1]) for key in row if key.startswith("floor_k"))
    if not widths:
        return []
    dev = _device(folder)
    lines = [f"4. one Llama-3.1-8B forward of k tokens, context {CONTEXT}, batch 1, bf16, on the {dev} (median ms of "
             f"{row[f'captured_k{widths[0]}']['n']}) against SpecDecode-Bench's fitted vLLM forward on an H100",
             f"   {'k':>3s} {'vLLM fit':>8s} {'eager':>7s} {'captured':>8s} {'floor':>7s} {'eager/vLLM':>10s} "
             f"{'captured/vLLM':>13s} {'floor/vLLM':>10s} {'captured/floor':>14s}",
             ]
    for k in widths:
        v = sdb.target_forward_ms(CONTEXT, k)
        e, c, f = (row[f"{mode}_k{k}"]["median"] for mode in ("eager_dynamic", "captured", "floor"))
        lines.append(f"   {k:3d} {v:8.2f} {e:7.2f} {c:8.2f} {f:7.2f} {e / v:10.2f} {c / v:13.2f} {f / v:10.2f} "
                     f"{c / f:14.2f}")
    lines.append("   floor: every nn.Linear of the model (the LM head included) on k rows, captured alone: the weights "
                 "read once by cuBLAS, nothing else of the forward")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", default="results/committed/gpu_paper_costs")
    folder = Path(p.parse_args(argv).folder)
    if not (folder / "paper_costs.json").exists():
        print(f"compare_paper_costs: no paper_costs.json in {folder} (run scripts/gpu_paper_costs.py first)")
        return 2
    meta = _load(folder, "paper_costs.json")["meta"]
    print(f"paper_costs: {meta['device']}, torch {meta['torch']}, transformers {meta['transformers']}, {meta['dtype']}, "
          f"random weights, {meta['time_utc'][:10]}; SpecDecode-Bench: {sdb.SOURCE}")
    for table in (generate_table, step_table, graphs_table, floor_table):
        lines = table(folder)
        if lines:
            print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
