"""What a job prints, and the sweep report at the end of a multirun (job folders are named by
``specbench.config.job_dirname``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


def _fmt(value: Any, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def print_skipped(job_dir: str | Path, summary: dict) -> bool:
    """One line for a job another process holds (``run_job`` returned ``status: skipped``)."""
    if summary.get("status") != "skipped":
        return False
    print(f"[skipped] {summary.get('message') or Path(job_dir).name}: another process runs it "
          f"(on_locked=wait to wait for it)", flush=True)
    return True


def print_summary(job_dir: str | Path, summary: dict) -> None:
    if print_skipped(job_dir, summary):
        return
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
    if print_skipped(job_dir, summary):
        return
    agg = summary.get("aggregates", {})
    print(f"[done] {Path(job_dir).name}: {_fmt(agg.get('tokens_per_s'), '.2f', ' tok/s')}, "
          f"speedup {_fmt(agg.get('speedup'), '.3f', 'x')}, acceptance {_fmt(agg.get('acceptance_rate'), '.3f')}",
          flush=True)


class SweepReport(Callback):
    """Hydra callback (``hydra.callbacks.report``): at the end of a multirun, one line per
    status and the failed jobs with their errors. It reads the ``summary.json`` files
    written since the sweep started, so it works with any launcher on a shared disk."""

    def __init__(self) -> None:
        self.started = 0.0

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        import time

        self.started = time.time() - 1.0
        launcher = str(config.hydra.get("launcher", {}).get("_target_", ""))
        if "BasicLauncher" not in launcher:  # launchers that take one GPU count for every job
            from specbench.resources import mixed_gpu_warning

            note = mixed_gpu_warning(config)
            if note:
                print(f"note: {note}", flush=True)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        import json

        sweep_dir = Path(str(config.hydra.sweep.dir))
        by_status: dict[str, list[tuple[Path, dict]]] = {}
        for path in sorted(sweep_dir.glob("*/summary.json")):
            if path.stat().st_mtime < self.started:
                continue
            try:
                summary = json.loads(path.read_text())
            except ValueError:
                continue
            by_status.setdefault(summary.get("status", "unknown"), []).append((path.parent, summary))
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_status.items())) or "no job ran"
        print(f"\nsweep finished in {sweep_dir}: {counts}", flush=True)
        for folder, summary in by_status.get("failed", []):
            print(f"  FAILED {folder.name}: {summary.get('error')}", flush=True)
        for folder, _ in by_status.get("interrupted", []) + by_status.get("running", []):
            print(f"  unfinished {folder.name}: run the same command again to resume", flush=True)
        if by_status.get("failed"):
            raise SystemExit(1)  # a sweep with failed jobs must not look like a success
