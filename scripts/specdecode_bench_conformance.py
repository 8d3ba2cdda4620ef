"""The lab against SpecDecode-Bench's own simulator, on its own data (issue 41, item 3).

    # theirs: in a checkout of SpecDecode-Bench/simulator (commit 2fdccbd), outside this repository
    python main.py --proposer eagle3 --batch-sizes 1 --output-dir results
    python main.py --proposer ngram --batch-sizes 1 --output-dir results
    # ours, side by side with theirs
    python scripts/specdecode_bench_conformance.py --data CHECKOUT/data/llama3.1-8B --peer-results CHECKOUT/results

Ours: every ``combined_<workload>.jsonl`` imported as the lab's traces
(``runners.replay.import_specdecode_bench.import_traces``: n-gram "no match" drawn once per position, seed 42),
replayed by the lab (``runners.replay.replay.replay_rows``) with fixed γ = 1, 3, 5 (policy ``fixed``) and the
per-position oracle (``runners.replay.oracle.AgreementOracle``: draft exactly what will be accepted, their
``ORACLE``), charged by their cost model as the lab's latency model
(``runners.replay.specdecode_bench.latency_model``). Their sampling and pooling are matched
(``simulator.py: SpecSimulator.simulate_like_experiment``): 300 requests drawn by ``random.seed(42)``,
``random.sample`` over the requests with an ``acc_len``; at ``B`` rows, the request duplicated ``B`` times;
"speedup by tpt" = the mean over requests of ``B·N / mean row latency`` with speculation over the same mean
without (``speedup_by_tpt``).

Theirs: the ``speedup`` column of their ``results/<proposer>_<workload>_speedup.csv`` (two decimals), read from
``--peer-results`` (several folders allowed, e.g. one per batch-size run).

Columns: ``ours`` is the lab's own charge (EAGLE ``draft_rule = "per_step"``: the draft billed on every step, one
that proposes nothing included, as their ``simulator.py: simulate_sd_batch`` bills it; issue 49, item 5);
``ours, empty rounds free`` the same rounds under the zero-charge variant (``latency_model(...,
free_empty_rounds=True)``: a round that drafts nothing pays no draft; the lab's EAGLE rule before issue 49; for
n-gram the same model as ``ours``); ``ours, their bill`` adds to ``ours`` what their simulator bills and the lab does
not (``their_extra_ms``): a step's ``k + 1`` verified tokens (and EAGLE's ``k + 1`` spec tokens) where the lab's
budget ``min(γ, remaining − 1)`` drafts fewer at the end of a generation. At ``B > 1`` both sides decode one
request duplicated ``B`` times (their rule; ``runners.replay.batched.rows_for_rule(..., "duplicate")``).

``--leaderboard DIR`` (issue 41, item 4) instead prints the lab's leaderboard from ``python -m
runners.replay lab replay --full`` output on the imported traces (``DIR/<pair>__<task>/replay.jsonl`` and
``replay_full.jsonl``), pooled over every prompt turn (the lab's cells are split by ``max_new_tokens``, one per
generation length here): a caption naming what a batch holds (``meta.json``'s ``batch_rule``,
``runners.replay.batched.BATCH_RULES``) and the comparison rule, then per method the initial γ of the grid with
the highest pooled speedup over the target alone (``Σ ar_wall_ms / Σ wall_ms``), that speedup, its share of the
oracle's and of the best fixed γ in hindsight's throughput, the mean speedup over the grid's initial γ, and the
comparison rule's columns (``analysis.policy_lab.policy_comparison`` on the per-request rows, pooled over every
request: the 95 % jackknife interval of ``/ best fixed`` over requests, the verdict, the mean over initial γ of
``/ best fixed`` with its interval, the number of requests); then the reference rows (``oracle``,
``oracle_agreement``, ``best_fixed_task`` with its γ, ``best_fixed_prompt``).

``--figure OUT.png TABLE.md ...`` (issue 41, item 4) draws the leaderboard figure from such tables (the committed
``results/committed/specdecode_bench_lab/leaderboard_b*.md``, so it is re-made from a clean checkout without the
peer's data): one panel per proposer × workload, each policy's throughput at its best initial γ over the best
fixed γ in hindsight (column ``/ best fixed``), one bar per batch size, and the oracle's level per batch size.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from analysis.policy_lab import policy_comparison
from analysis.uncertainty import fmt_ci
from methods.base import GammaPolicy
from methods.policies import build_policy
from runners.replay.batched import rows_for_rule
from runners.replay.import_specdecode_bench import import_traces
from runners.replay.oracle import AgreementOracle
from runners.replay.replay import ReplayResult, replay_rows
from runners.replay.specdecode_bench import latency_model
from runners.replay.trace_lookup import LookupTrace
from specbench.latency import LatencyModel, ar_batch_ms
from specbench.record_io import read_records
from specbench.round_costs import RowRound, batch_round_parts
from specbench.rounds import advance

WORKLOADS = ("cnn", "gsm8k", "instructcoder", "sharegpt")
PEER_PROPOSER = {"eagle": "eagle3", "ngram": "ngram"}
PEER_METHODS = {"fixed 1": "FIXED_1", "fixed 3": "FIXED_3", "fixed 5": "FIXED_5", "oracle": "ORACLE"}
SAMPLE, SEED = 300, 42


def sample(traces: Sequence[LookupTrace]) -> list[LookupTrace]:
    """Their ``random.seed(42); random.sample(data, k=300)`` (``simulate_like_experiment``), as indices."""
    return [traces[i] for i in random.Random(SEED).sample(range(len(traces)), min(SAMPLE, len(traces)))]


def policy_of(name: str, trace: LookupTrace) -> GammaPolicy:
    """``fixed k`` (policy ``fixed``) or ``oracle`` (``AgreementOracle``: their ``ORACLE``)."""
    return AgreementOracle(trace) if name == "oracle" else build_policy("fixed", int(name.split()[1]), {})


def their_extra_ms(lat: LatencyModel, res: ReplayResult, name: str, proposer: str, batch: int) -> float:
    """What their simulator bills a row and the lab does not (module docstring): per round at ``t``, their
    ``verify_time + draft_time`` (``simulate_sd_batch``) less the lab's, the same rounds taken."""
    k = None if name == "oracle" else int(name.split()[1])
    t, n, p, extra = 1, res.new_tokens, res.trace.prompt_tokens, 0.0
    for d, accepted in zip(res.rounds.drafted, res.rounds.accepted):
        context = p + t - 1
        ours = sum(batch_round_parts(lat, [RowRound(p, t, 0, d, d)] * batch))  # the lab's own bill of the round
        no_match = proposer == "ngram" and t < n - 1 and not res.trace.proposals[t - 1]
        drafted = 0 if no_match else d if k is None else k  # their input_len - 1
        theirs_v = lat.verify_ms(drafted + 1, context, batch)
        theirs = theirs_v + (lat.draft_ms(drafted + 1, context, batch) if proposer == "eagle"
                             else 0.0 if drafted == 0 else lat.draft_share * theirs_v)
        extra += theirs - ours
        t = advance(t, accepted, n)
    return extra


def duplicate_walls(tr: LookupTrace, name: str, lat: LatencyModel, batch: int,
                    as_one_row: bool = True) -> list[ReplayResult]:
    """The rows of ``tr`` duplicated ``batch`` times (their rule, ``rows_for_rule(..., "duplicate")``) replayed
    together. ``as_one_row``: one row replayed at the costs of ``batch`` rows (``LatencyModel.at_batch``), copied:
    the same rounds and charges (identical rows take the same rounds, and ``batch_round_parts`` bills a batch of
    them as one row at that batch's costs; ``tests/replay/test_sdb_batch_rule.py`` checks both ways agree), at a
    ``batch``-th of the work."""
    rows = rows_for_rule([tr], batch, "duplicate")
    if not as_one_row:
        return replay_rows(rows, [policy_of(name, tr) for _ in rows], lat).rows
    return replay_rows([tr], [policy_of(name, tr)], lat.at_batch(batch)).rows * batch


def speedup_by_tpt(traces: Sequence[LookupTrace], name: str, lat: LatencyModel, proposer: str,
                   batch: int, free: LatencyModel | None = None) -> tuple[float, float, float]:
    """Their "speedup by tpt" of the lab's replay, with ``their_extra_ms`` added, and under ``free`` (the zero-charge
    variant; ``None``: ``lat``'s) (module docstring). At ``batch`` rows: the request duplicated (their rule,
    ``duplicate_walls``)."""
    sd, sd_bill, sd_free, ar = [], [], [], []
    for tr in traces:
        out = duplicate_walls(tr, name, lat, batch)
        walls = [r.wall_ms for r in out]
        extra = [their_extra_ms(lat, r, name, proposer, batch) for r in out]
        free_walls = walls if free is None else [r.wall_ms for r in duplicate_walls(tr, name, free, batch)]
        tokens = sum(r.new_tokens for r in out)
        ar_walls = ar_batch_ms(lat, [tr.prompt_tokens] * batch, [tr.n] * batch)[1]
        sd.append(tokens / (sum(walls) / batch))
        sd_bill.append(tokens / ((sum(walls) + sum(extra)) / batch))
        sd_free.append(tokens / (sum(free_walls) / batch))
        ar.append(tokens / (sum(ar_walls) / batch))
    mean: Callable[[list[float]], float] = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return mean(sd) / mean(ar), mean(sd_bill) / mean(ar), mean(sd_free) / mean(ar)


def read_peer(folders: Sequence[str]) -> dict[tuple[str, str, int, str], float]:
    """``(proposer, workload, batch, method) -> speedup`` from their ``<proposer>_<workload>_speedup.csv``."""
    out = {}
    back = {v: k for k, v in PEER_PROPOSER.items()}
    for folder in folders:
        for path in sorted(Path(folder).glob("*_speedup.csv")):
            proposer, _, workload = path.stem.removesuffix("_speedup").partition("_")
            if proposer not in back:
                continue
            with open(path, newline="") as fh:
                for row in csv.DictReader(fh):
                    out[(back[proposer], workload, int(row["batch_size"]), row["predict_method"])] = float(row["speedup"])
    return out


REFERENCE = ("oracle", "oracle_agreement", "best_fixed_task", "best_fixed_prompt")


def pooled_cells(path: Path, batch_size: int = 1) -> dict[tuple[str, object], tuple[float, float]]:
    """``(method, γ_init) -> (Σ time, Σ AR time)`` over a lab ``replay.jsonl``'s cells (``prompt_id *``) at
    ``batch_size`` rows: at batch 1 the walls, above it each row's share of its batch's wall (``batch_share_ms``,
    ``ar_share_ms``: what the grid's throughput divides by, ``runners.replay.grid.cells``); a per-prompt γ
    (``best_fixed_prompt``) is keyed ``None``."""
    out: dict[tuple[str, object], tuple[float, float]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("prompt_id") != "*" or row.get("batch_size", 1) != batch_size:
            continue
        g = row["gamma_init"] if row["method"] != "best_fixed_prompt" else None
        time = row.get("batch_share_ms") or row["wall_ms"]
        ar_time = row.get("ar_share_ms") or row["ar_wall_ms"]
        wall, ar = out.get((row["method"], g), (0.0, 0.0))
        out[(row["method"], g)] = (wall + time, ar + ar_time)
    return out


#: what a batch holds, per ``runners.replay.batched.BATCH_RULES`` (the leaderboard's caption)
BATCH_CAPTION = {
    "distinct": ("B = {b}: {b} *different* requests (consecutive in the sample) decoded together in a static batch "
                 "(runners.replay.batched, batch rule `distinct`): no request joins a batch once it started, a "
                 "finished row leaves, and the batch's wall is its slowest row's; each row is charged its share of "
                 "that wall (`batch_share_ms`), the target alone on the same batch likewise (`ar_share_ms`), and "
                 "every forward's KV term is billed at {b} × the longest row's context. This is *not* "
                 "SpecDecode-Bench's B = {b}, which decodes one request duplicated {b} times (their "
                 "`simulate_like_experiment`; the lab's `--batch-rule duplicate`, the conformance logs' rule)."),
    "duplicate": ("B = {b}: each request duplicated {b} times and decoded as one batch (runners.replay.batched, batch "
                  "rule `duplicate`: SpecDecode-Bench's `simulate_like_experiment`); every row finishes with its "
                  "batch."),
}


def batch_rule_of(folder: Path) -> str:
    """The batch rule a lab replay folder was made under (its ``meta.json``; folders made before the rule was
    recorded decoded distinct requests)."""
    for meta in sorted(folder.glob("*__*/meta.json")):
        return str(json.loads(meta.read_text()).get("batch_rule") or "distinct")
    return "distinct"


def caption(folder: Path, batch_size: int) -> str:
    """The leaderboard's caption: what a batch holds and the comparison rule (module docstring)."""
    batch = ("B = 1: each request decoded alone." if batch_size == 1
             else BATCH_CAPTION[batch_rule_of(folder)].format(b=batch_size))
    return (f"{batch} Speedups pooled over the workload's requests (Σ AR time / Σ time). Comparison rule "
            "(analysis.policy_lab.policy_comparison): each policy at its best initial γ (`best γ_init`) over the best "
            "fixed γ in hindsight (`/ best fixed`), with its 95 % t-calibrated jackknife interval over requests (the "
            "best initial γ chosen again in every replicate) and the verdict: `beats` when the interval lies above "
            "1, `trails` when below, else `ties`; beside it the mean over initial γ of the same ratio, with its "
            "interval; `n`: requests. Reference rows in italics.")


def comparison(path: Path, batch_size: int) -> dict[str, dict[str, object]]:
    """``method -> policy_comparison row`` from a ``<pair>__<task>/replay_full.jsonl`` at ``batch_size``, every
    request pooled (``max_new_tokens`` dropped: one cell per workload, as the table pools); empty where the folder
    has no per-request rows (a replay without ``--full``)."""
    if not path.exists():
        return {}
    rows = [r for r in read_records(path) if r.get("batch_size", 1) == batch_size]
    rule = policy_comparison(pd.DataFrame(rows).assign(max_new_tokens=None)) if rows else None
    return {} if rule is None else {str(r["method"]): r for r in rule.to_dict("records")}


def leaderboard(folder: Path, batch_size: int = 1) -> list[str]:
    """The leaderboard's caption and markdown lines (module docstring), one block per ``<pair>__<task>``, at
    ``batch_size`` rows per batch (column ``B``). ``AssertionError`` where the comparison rule's point disagrees
    with the table's ``/ best fixed`` (the two read the same rows)."""
    lines = [caption(folder, batch_size), "",
             "| pair | workload | B | method | best γ_init | speedup | / oracle | / best fixed "
             "| / best fixed 95 % CI | verdict | mean / best fixed over γ_init [95 % CI] | n "
             "| mean speedup over γ_init |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for path in sorted(folder.glob("*__*/replay.jsonl")):
        pair, _, task = path.parent.name.partition("__")
        cells = pooled_cells(path, batch_size)
        if not cells:
            continue
        rule = comparison(path.parent / "replay_full.jsonl", batch_size)
        speed = {k: ar / wall for k, (wall, ar) in cells.items()}
        oracle = speed[("oracle", None)]
        best_fixed = next(v for (m, _), v in speed.items() if m == "best_fixed_task")
        methods = sorted({m for m, _ in speed if m not in REFERENCE})
        ranked = []
        for m in methods:
            by_g = {g: v for (mm, g), v in speed.items() if mm == m}
            g = max(by_g, key=lambda k: (by_g[k], -(k or 0)))
            ranked.append((by_g[g], m, g, sum(by_g.values()) / len(by_g)))
        for v, m, g, mean in sorted(ranked, reverse=True):
            r = rule.get(m)
            ruled = "| | | |"
            if r is not None:
                if r["best_gamma_init"] != g or abs(float(r["x_best_fixed_at_best"]) - v / best_fixed) > 1e-9:
                    raise AssertionError(f"{pair} / {task} / {m}: the comparison rule's best initial γ "
                                         f"{r['best_gamma_init']} ({r['x_best_fixed_at_best']:.6f}) is not the "
                                         f"table's {g} ({v / best_fixed:.6f})")
                ruled = (f"| {fmt_ci((r['x_best_fixed_at_best_lo'], r['x_best_fixed_at_best_hi']), 3)} "
                         f"| {r['verdict']} | {r['x_best_fixed_mean_over_gamma']:.3f} "
                         f"{fmt_ci((r['x_best_fixed_mean_over_gamma_lo'], r['x_best_fixed_mean_over_gamma_hi']), 3)} "
                         f"| {int(r['prompts'])} |")
            lines.append(f"| {pair} | {task} | {batch_size} | {m} | {g} | {v:.3f} | {v / oracle:.3f} "
                         f"| {v / best_fixed:.3f} {ruled} {mean:.3f} |")
        for (m, g), v in sorted(((k, v) for k, v in speed.items() if k[0] in REFERENCE),
                                key=lambda kv: -kv[1]):
            lines.append(f"| {pair} | {task} | {batch_size} | *{m}* | {'' if g is None else g} | {v:.3f} "
                         f"| {v / oracle:.3f} | {v / best_fixed:.3f} | | | | | |")
    return lines


def read_leaderboard(paths: Sequence[Path]) -> list[dict[str, object]]:
    """The rows of leaderboard tables (``leaderboard``'s markdown): pair, workload, B, method (a reference without
    its italics, ``reference`` true), ``/ best fixed`` and ``/ oracle`` as floats, ``/ best fixed``'s 95 % interval
    (``x_best_fixed_ci``: ``(lo, hi)``, None where the table has none) and the table's ``batch_rule`` (its caption's;
    ``distinct`` for a table without one)."""
    rows: list[dict[str, object]] = []
    for path in paths:
        lines = [ln for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.startswith("|")]
        if not lines:
            raise ValueError(f"{path}: no leaderboard table in it")
        named = re.search(r"batch rule `(\w+)`", Path(path).read_text(encoding="utf-8").split("\n|", 1)[0])
        rule = named.group(1) if named else "distinct"  # tables from before the caption: distinct requests
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        for line in lines[2:]:
            cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
            method = cells["method"]
            ci = cells.get("/ best fixed 95 % CI", "").strip("[]").split(",")
            rows.append({"pair": cells["pair"], "workload": cells["workload"], "B": int(cells["B"]),
                         "method": method.strip("*"), "reference": method.startswith("*"),
                         "x_best_fixed": float(cells["/ best fixed"]), "x_oracle": float(cells["/ oracle"]),
                         "x_best_fixed_ci": tuple(map(float, ci)) if len(ci) == 2 else None, "batch_rule": rule})
    return rows


def plot_leaderboard_tables(rows: Sequence[dict[str, object]], out: Path) -> Path:
    """The leaderboard figure (module docstring) of ``read_leaderboard`` rows, written to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    panels = sorted({(str(r["pair"]), str(r["workload"])) for r in rows})
    sizes = sorted({int(r["B"]) for r in rows})  # type: ignore[call-overload]
    policies = sorted({str(r["method"]) for r in rows if not r["reference"]})
    value = {(r["pair"], r["workload"], r["B"], r["method"]): float(r["x_best_fixed"]) for r in rows}  # type: ignore[arg-type]
    interval = {(r["pair"], r["workload"], r["B"], r["method"]): r.get("x_best_fixed_ci") for r in rows}
    # one order for every panel: by the mean over the panels and batch sizes
    mean = {m: sum(value.get((p, w, b, m), 0.0) for p, w in panels for b in sizes) / (len(panels) * len(sizes))
            for m in policies}
    policies.sort(key=lambda m: mean[m])
    proposers = sorted({p for p, _ in panels})
    workloads = sorted({w for _, w in panels})
    fig = Figure(figsize=(3.2 * len(workloads), 0.22 * len(policies) * len(proposers) + 1.6 * len(proposers)))
    axes = fig.subplots(len(proposers), len(workloads), squeeze=False, sharex=True)
    colours = ["#4a78b0", "#e0a040", "#60a060", "#a05070"]
    height = 0.8 / len(sizes)
    for i, pair in enumerate(proposers):
        for j, workload in enumerate(workloads):
            ax = axes[i][j]
            for k, b in enumerate(sizes):
                ys = [n + (k - (len(sizes) - 1) / 2) * height for n in range(len(policies))]
                xs = [value.get((pair, workload, b, m), float("nan")) for m in policies]
                cis = [interval.get((pair, workload, b, m)) for m in policies]
                err = [[x - c[0] if c else 0.0 for x, c in zip(xs, cis)], [c[1] - x if c else 0.0 for x, c in zip(xs, cis)]]
                ax.barh(ys, xs, height=height, color=colours[k % len(colours)], label=f"B = {b}",
                        xerr=err if any(cis) else None, error_kw={"elinewidth": 0.6, "capsize": 1.2})
                oracle = value.get((pair, workload, b, "oracle"))
                if oracle is not None:
                    ax.axvline(oracle, color=colours[k % len(colours)], ls="--", lw=0.9, label=f"oracle, B = {b}")
            ax.axvline(1.0, color="black", lw=0.8, label="best fixed γ in hindsight")
            ax.set_yticks(range(len(policies)))
            ax.set_yticklabels(policies if j == 0 else [], fontsize=6)
            ax.set_xlim(0.5, max(1.3, max(v for v in value.values()) + 0.02))
            ax.tick_params(axis="x", labelsize=7)
            ax.set_title(f"{pair.rsplit('_', 1)[-1]} — {workload}", fontsize=8)
            if i == len(proposers) - 1:
                ax.set_xlabel("÷ best fixed γ, at best γ_init (95 % CI)", fontsize=7)
    axes[0][-1].legend(fontsize=6, loc="lower right")
    batched = sorted({(int(r["B"]), str(r["batch_rule"])) for r in rows if int(r["B"]) > 1})  # type: ignore[call-overload]
    what = {"distinct": "different requests in a static batch", "duplicate": "one request duplicated"}
    fig.suptitle("γ policies on SpecDecode-Bench's Llama-3.1-8B traces at their H100 costs"
                 + "".join(f"; B = {b}: {what[rule]}" for b, rule in batched), fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="their data/llama3.1-8B folder (combined_<workload>.jsonl)")
    ap.add_argument("--peer-results", nargs="*", default=[], help="folders of their <proposer>_<workload>_speedup.csv")
    ap.add_argument("--proposers", nargs="+", default=list(PEER_PROPOSER), choices=list(PEER_PROPOSER))
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1], help="rows per batch (default 1)")
    ap.add_argument("--tolerance", type=float, default=0.02, help="|ours - theirs| flagged above it")
    ap.add_argument("--leaderboard", metavar="DIR",
                    help="print the leaderboard of a lab replay folder instead")
    ap.add_argument("--figure", nargs="+", metavar=("OUT.png", "TABLE.md"),
                    help="draw the leaderboard figure from leaderboard tables instead (module docstring)")
    args = ap.parse_args(argv)
    if args.figure:
        if len(args.figure) < 2:
            ap.error("--figure needs the output file and at least one leaderboard table")
        try:
            rows = read_leaderboard([Path(p) for p in args.figure[1:]])
        except (OSError, ValueError, KeyError) as exc:
            ap.error(f"cannot read the leaderboard tables: {type(exc).__name__}: {exc}")
        print(plot_leaderboard_tables(rows, Path(args.figure[0])))
        return 0
    if args.leaderboard:
        print("\n".join(leaderboard(Path(args.leaderboard), args.batch_sizes[0])))
        return 0
    if not args.data:
        ap.error("--data is required (unless --leaderboard)")
    peer = read_peer(args.peer_results)
    print("| proposer | workload | B | policy | theirs | ours | ours - theirs | ours, their bill | - theirs "
          "| ours, empty rounds free | - theirs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    worst = 0.0
    for proposer in args.proposers:
        lat = latency_model(proposer)
        free = latency_model(proposer, free_empty_rounds=True)
        free = None if free.draft_rule == lat.draft_rule else free
        for workload in args.workloads:
            traces, _ = import_traces(Path(args.data) / f"combined_{workload}.jsonl", proposer)
            chosen = sample(traces)
            for batch in args.batch_sizes:
                for name, peer_name in PEER_METHODS.items():
                    ours, billed, zero = speedup_by_tpt(chosen, name, lat, proposer, batch, free)
                    theirs = peer.get((proposer, workload, batch, peer_name))
                    diff, diff_b, diff_z = ("" if theirs is None else f"{v - theirs:+.3f}" for v in (ours, billed, zero))
                    flag = " **" if theirs is not None and abs(ours - theirs) > args.tolerance else ""
                    worst = max(worst, abs(ours - theirs)) if theirs is not None else worst
                    print(f"| {proposer} | {workload} | {batch} | {name} | {'' if theirs is None else f'{theirs:.2f}'} "
                          f"| {ours:.3f} | {diff}{flag} | {billed:.3f} | {diff_b} | {zero:.3f} | {diff_z} |", flush=True)
    print(f"\nlargest |ours - theirs|: {worst:.3f} (tolerance {args.tolerance}; theirs are printed to 2 decimals)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
