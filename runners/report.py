"""What a job prints, and how job folders are named."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def job_dirname(override_dirname: str) -> str:
    """A job folder named by its overrides (``gamma=4,method=gammatune``); ``default`` when none."""
    name = override_dirname.strip() or "default"
    return re.sub(r"[/\\\s]+", "_", name)


def _fmt(value: Any, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def print_summary(job_dir: str | Path, summary: dict) -> None:
    agg = summary.get("aggregates", {})
    cfg = summary.get("config", {})
    print()
    print(f"specbench: {cfg.get('method', {}).get('name')} on {cfg.get('pair', {}).get('name')}, "
          f"task {cfg.get('task', {}).get('name')}, gamma={cfg.get('gamma')}, temperature={cfg.get('temperature')}")
    print(f"  prompts        {agg.get('n_records')}  ({agg.get('new_tokens')} new tokens)")
    print(f"  throughput     {_fmt(agg.get('tokens_per_s'), '.2f', ' tokens/s')} "
          f"(target alone: {_fmt(agg.get('ar_tokens_per_s'), '.2f', ' tokens/s')})")
    print(f"  speedup vs AR  {_fmt(agg.get('speedup'), '.3f', 'x')}")
    print(f"  acceptance     {_fmt(agg.get('acceptance_rate'), '.3f')} "
          f"(mean accepted per round {_fmt(agg.get('mean_accepted_per_round'), '.2f')})")
    print(f"  TTFT / TPOT    {_fmt(agg.get('ttft_ms'), '.1f', ' ms')} / {_fmt(agg.get('tpot_ms'), '.1f', ' ms')}")
    if agg.get("lossless_checked"):
        print(f"  lossless       {agg.get('lossless_all')} ({agg.get('lossless_checked')} outputs checked against the target)")
    print(f"  records        {Path(job_dir) / 'records.jsonl'}")
    print(f"  summary        {Path(job_dir) / 'summary.json'}")


def print_job_line(job_dir: str | Path, summary: dict) -> None:
    agg = summary.get("aggregates", {})
    print(f"[done] {Path(job_dir).name}: {_fmt(agg.get('tokens_per_s'), '.2f', ' tok/s')}, "
          f"speedup {_fmt(agg.get('speedup'), '.3f', 'x')}, acceptance {_fmt(agg.get('acceptance_rate'), '.3f')}",
          flush=True)
