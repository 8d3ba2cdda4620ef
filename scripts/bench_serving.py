#!/usr/bin/env python
"""The serving regime: llama.cpp's server under 1, 2, 4 concurrent streamed requests, with and without its draft,
beside our batched engine at B = the same number (issue 69, item 8).

    python scripts/bench_serving.py [--levels 1,2,4] [--rounds 3] [--gamma 5] [--out results/committed/serving_x]

For each level C: two servers (``runners.engine.llamacpp``, the job's build and model files), the target alone and
with the Q8_0 draft (draft-simple, γ), each with C slots; the embedded prompts' first turns sent C at a time
(bounded: C threads on loopback), in rounds alternating the two servers (A B A B). Per request: TTFT (first chunk)
and TPOT (the rest of the stream ÷ its tokens); per level and server: throughput = all tokens ÷ the span from the
first request sent to the last token. Beside it, our engine through the job factory (``runners.jobs.job.run_job``,
as ``run.py``): ``batch_size=C`` jobs of ``method=ar`` and ``method=specdecode`` (its batched throughput and the
paired AR batch's, ``summary.json: batch``). Writes ``serving.jsonl`` (every request), ``serving.md`` (the table:
where speculation stops paying) and ``serving.png``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.engine.llamacpp import ServerLoop, spec_args
from runners.engine.llamacpp import binary as binaries
from runners.engine.llamacpp.files import pair_files
from runners.engine.llamacpp.server import Server
from specbench.config import JobConfig, compose
from specbench.models import load_tokenizer
from specbench.provenance import cpu_name
from specbench.tasks import encode_turn, load_task_facts

PAIR = "gemma3-270m_gemma3-270m-int8"


def level_round(servers: dict[str, Server], loops: dict[str, ServerLoop], name: str, prompts: list[list[int]],
                level: int, max_new: int) -> list[dict]:
    """``level`` threads, each decoding its share of ``prompts`` one after another on server ``name``."""
    rows: list[dict] = []
    lock = threading.Lock()
    t0 = time.perf_counter()

    def worker(k: int) -> None:
        for i in range(k, len(prompts), level):
            sent = time.perf_counter()
            gen = loops[name].generate(prompts[i], max_new)
            with lock:
                rows.append({"server": name, "level": level, "prompt": i, "tokens": len(gen.tokens),
                             "ttft_ms": gen.ttft_ms, "wall_ms": gen.wall_ms,
                             "tpot_ms": (gen.wall_ms - gen.ttft_ms) / max(1, len(gen.tokens) - 1),
                             "start_s": sent - t0, "end_s": time.perf_counter() - t0,
                             "drafted": sum(gen.rounds.drafted), "accepted": sum(gen.rounds.accepted)})

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(level)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows


def ours(level: int, results: Path, gamma: int, max_new: int) -> dict:
    """Our batched engine at B = ``level`` through the job factory: the specdecode job's batched throughput and its
    paired AR batch's (``summary.json: batch``)."""
    from runners.jobs.job import run_job

    cfg = compose([f"pair={PAIR}", "method=specdecode", f"gamma={gamma}", f"batch_size={level}",
                   f"max_new_tokens={max_new}", f"results_dir={results}"])
    summary = run_job(cfg, results / f"ours_b{level}", progress=False)
    figures = summary["batch"] if level > 1 else summary["aggregates"]  # batch 1 has no batch block
    return {k: figures.get(k) for k in ("tokens_per_s", "ar_tokens_per_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gamma", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-ours", action="store_true", help="llama.cpp only")
    ap.add_argument("--out", default="results/serving")
    args = ap.parse_args()
    levels = [int(v) for v in args.levels.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = JobConfig.from_mapping(compose([f"pair={PAIR}", "method=specdecode", "backend=llamacpp",
                                             f"gamma={args.gamma}"]))
    tok = load_tokenizer(config.pair.target, config.cache_dir)
    prompts_cfg, _ = load_task_facts(config.task)
    prompts = [encode_turn(tok, [], p.turns[0], config.task.prompt_format)[0] for p in prompts_cfg]
    build = binaries.ensure(config.backend.version)
    target, draft = pair_files(build, config.pair.target, config.pair.draft.model, "model", "Q8_0", args.threads)
    rows: list[dict] = []
    summary: list[dict] = []
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for level in levels:
        base = ["-m", target.path, "-t", str(args.threads), "-tb", str(args.threads), "-np", str(level),
                "-c", str(4096 * level), "--no-cache-prompt", "--metrics", "--no-webui", "--no-cache-idle-slots"]
        argv = {"alone": base, "draft": [*base, *spec_args(config, draft.path, args.threads)]}
        servers = {k: Server(build.server, v).start() for k, v in argv.items()}
        try:
            loops = {"alone": ServerLoop(servers["alone"], None, False, False, check_counters=False),
                     "draft": ServerLoop(servers["draft"], args.gamma, True, False, check_counters=False)}
            for name in loops:  # warm-up, untimed
                loops[name].generate(prompts[0], 16)
            for r in range(args.rounds):
                order = ("alone", "draft") if r % 2 == 0 else ("draft", "alone")
                for name in order:
                    got = level_round(servers, loops, name, prompts, level, args.max_new_tokens)
                    rows += [{**g, "round": r} for g in got]
                    span = max(g["end_s"] for g in got)
                    summary.append({"level": level, "server": name, "round": r,
                                    "tokens_per_s": sum(g["tokens"] for g in got) / span,
                                    "ttft_ms": statistics.median(g["ttft_ms"] for g in got),
                                    "tpot_ms": statistics.median(g["tpot_ms"] for g in got)})
                    print(f"C={level} {name:5s} round {r}: {summary[-1]['tokens_per_s']:.2f} tokens/s", flush=True)
        finally:
            for s in servers.values():
                s.stop()
    ours_rows = {}
    if not args.no_ours:
        with tempfile.TemporaryDirectory() as tmp:
            for level in levels:
                ours_rows[level] = ours(level, Path(tmp), args.gamma, args.max_new_tokens)
                print(f"ours B={level}: {ours_rows[level]}", flush=True)
    with open(out / "serving.jsonl", "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    lines = [f"Serving regime, {PAIR} (llama.cpp: F32 target, Q8_0 draft, draft-simple γ = {args.gamma}; ours: fp32, "
             f"its int8 copy), embedded prompts × {args.max_new_tokens} tokens, {args.threads} threads, "
             f"{args.rounds} rounds per level alternating A B; {cpu_name()} ({platform.machine()}), {stamp}.", "",
             "| C | llama.cpp alone (tokens/s) | llama.cpp + draft (tokens/s) | draft ÷ alone (rounds) | TTFT alone / draft (ms) "
             "| TPOT alone / draft (ms) | ours AR at B (tokens/s) | ours SpecDecode at B (tokens/s) | ours ÷ its AR |",
             "|---|---|---|---|---|---|---|---|---|"]
    table = []
    for level in levels:
        a = [s for s in summary if s["level"] == level and s["server"] == "alone"]
        d = [s for s in summary if s["level"] == level and s["server"] == "draft"]
        ratios = [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(d, a, strict=True)]
        mine = ours_rows.get(level, {})
        row = {"level": level, "alone": statistics.median(x["tokens_per_s"] for x in a),
               "draft": statistics.median(x["tokens_per_s"] for x in d), "ratio_median": statistics.median(ratios),
               "ratio_min": min(ratios), "ratio_max": max(ratios), "ours_ar": mine.get("ar_tokens_per_s"),
               "ours_spec": mine.get("tokens_per_s")}
        table.append(row)
        ours_ratio = (row["ours_spec"] / row["ours_ar"]) if row["ours_spec"] and row["ours_ar"] else None
        lines.append(f"| {level} | {row['alone']:.2f} | {row['draft']:.2f} | {row['ratio_median']:.3f} "
                     f"({row['ratio_min']:.3f}–{row['ratio_max']:.3f}) | "
                     f"{statistics.median(x['ttft_ms'] for x in a):.0f} / {statistics.median(x['ttft_ms'] for x in d):.0f} | "
                     f"{statistics.median(x['tpot_ms'] for x in a):.1f} / {statistics.median(x['tpot_ms'] for x in d):.1f} | "
                     f"{_fmt(row['ours_ar'])} | {_fmt(row['ours_spec'])} | {_fmt(ours_ratio, 3)} |")
    paying = [r["level"] for r in table if r["ratio_min"] > 1.0]
    lines += ["", "Speculation pays (every round's draft ÷ alone above 1) at C = "
              + (", ".join(map(str, paying)) if paying else "none of the levels") + "."]
    (out / "serving.md").write_text("\n".join(lines) + "\n")
    (out / "serving.json").write_text(json.dumps({"summary": summary, "table": table, "ours": ours_rows,
                                                  "build": build.describe(), "when": stamp, "cpu": cpu_name()}, indent=1))
    _figure(table, out / "serving.png")
    print("\n".join(lines))


def _fmt(v, digits: int = 2) -> str:
    return f"{v:.{digits}f}" if isinstance(v, int | float) else "—"


def _figure(table: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    levels = [r["level"] for r in table]
    ax.plot(levels, [r["alone"] for r in table], "o-", label="llama.cpp alone")
    ax.plot(levels, [r["draft"] for r in table], "o-", label="llama.cpp + Q8_0 draft")
    if all(r["ours_ar"] for r in table):
        ax.plot(levels, [r["ours_ar"] for r in table], "s--", label="ours AR at B")
        ax.plot(levels, [r["ours_spec"] for r in table], "s--", label="ours SpecDecode at B")
    ax.set_xlabel("concurrent requests C (ours: batch size B)")
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_xticks(levels)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
