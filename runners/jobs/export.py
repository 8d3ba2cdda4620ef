"""Copy a finished sweep into a compact, committable folder that ``python -m analysis`` reads.

    python -m runners.jobs.export results/mini_gammatune_table2 results/committed/mini_gammatune_table2

Each job folder keeps ``records.jsonl`` (without ``output_text``; ``output_sha`` stays) and
``summary.json`` (without the traceback). ``provenance.json`` at the top says where, when and
with what the numbers were measured. The side folders a recipe's results may hold are copied as
they are: ``latency/`` (calibrations of ``python -m runners.replay calibrate``, read by the
analysis' prediction table) and ``stats/`` (``python -m methods.hetero.stats --json``). An interleaved
sweep's round orders and paired AR decodes (``.specbench/interleave.jsonl``, ``.specbench/ar_paired.jsonl``;
``runners.jobs.interleave``) and its per-call costs (``.specbench/costs.jsonl``, ``runners.jobs.sweep_costs``) are
copied as ``interleave.jsonl``, ``ar_paired.jsonl`` and ``costs.jsonl``.
(formerly ``scripts/export_results.py``: it reads the jobs' folders, so it lives with the jobs.)
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from specbench.record_io import read_records, write_json_atomic

SIDE_FOLDERS = ("latency", "stats")
SIDE_FILES = {".specbench/interleave.jsonl": "interleave.jsonl", ".specbench/ar_paired.jsonl": "ar_paired.jsonl",
              ".specbench/costs.jsonl": "costs.jsonl"}


def export(src: Path, dst: Path) -> dict:
    if dst.exists():
        shutil.rmtree(dst)
    jobs = sorted(p.parent for p in src.rglob("summary.json") if "analysis" not in p.parts)
    provenance = None
    statuses: dict[str, int] = {}
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        statuses[summary.get("status", "?")] = statuses.get(summary.get("status", "?"), 0) + 1
        summary.pop("traceback", None)
        provenance = provenance or summary.get("provenance")
        out = dst / job.relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "summary.json", summary)
        with open(out / "records.jsonl", "w", encoding="utf-8") as fh:
            for record in read_records(job / "records.jsonl"):
                record.pop("output_text", None)
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    for side in SIDE_FOLDERS:
        if (src / side).is_dir():
            shutil.copytree(src / side, dst / side)
    for name, target in SIDE_FILES.items():
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / target)
    info = {"source": str(src), "jobs": len(jobs), "statuses": statuses, "provenance": provenance}
    write_json_atomic(dst / "provenance.json", info)
    return info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m runners.jobs.export", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    args = ap.parse_args(argv)
    info = export(args.src, args.dst)
    print(f"exported {info['jobs']} jobs ({info['statuses']}) to {args.dst}")


if __name__ == "__main__":
    main()
