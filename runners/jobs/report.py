"""What a job prints, and the sweep report at the end of a multirun (job folders are named by
``specbench.config.job_dirname``).

A multirun's driver writes ``<sweep dir>/.specbench/sweep.json`` before launching; a job running
on a node that does not see that file (a Ray or SLURM worker without the shared results folder)
fails at once with an error saying so (``check_sweep_folder_visible``) instead of writing records
into a local folder nobody reads, and the driver's report lists every job of the sweep that left no
``summary.json`` in the results folder as failed, so the sweep goes on and still says what is
missing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from specbench.summary import measured_costs

INVALID_JOBS = "invalid_jobs.jsonl"  # in a sweep's folder: the jobs refused by validation (they have no folder)
SWEEP_FILE = Path(".specbench") / "sweep.json"


def append_line(path: Path, row: Mapping[str, Any]) -> None:
    """Append one JSON line to a sweep's file (``INVALID_JOBS``, the interleaved launcher's logs)."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")


class ResultsFolderNotShared(RuntimeError):
    """This node does not see the results folder the sweep was started with."""


def check_sweep_folder_visible(sweep_dir: str | Path | None = None, timeout_s: float = 10.0) -> None:
    """In a multirun job: the driver's ``sweep.json`` must be visible here (module docstring). Retries
    for ``timeout_s`` (a network filesystem may show a new file late). ``sweep_dir``: the sweep's
    folder (default: Hydra's, when this process runs a multirun job; otherwise nothing is checked)."""
    import socket
    import time

    if sweep_dir is None:
        try:
            from hydra.core.hydra_config import HydraConfig
            from hydra.types import RunMode

            hc = HydraConfig.get()
            if hc.mode != RunMode.MULTIRUN:
                return
            sweep_dir = hc.sweep.dir
        except Exception:  # not under Hydra (tests, scripts): nothing to check
            return
    sweep_dir = Path(str(sweep_dir))
    deadline = time.time() + timeout_s
    while True:
        try:
            list(sweep_dir.iterdir())  # reading the folder revalidates a network filesystem's cache
            if (sweep_dir / SWEEP_FILE).exists():
                return
        except OSError:
            pass
        if time.time() > deadline:
            raise ResultsFolderNotShared(
                f"this node ({socket.gethostname()}) does not see the sweep's results folder {sweep_dir} (no "
                f"{SWEEP_FILE} there): mount it at the same path on every node; this job wrote nothing"
            )
        time.sleep(1.0)


def expected_jobs(config: Any) -> list[str] | None:
    """The job folder names a multirun launches (Hydra's basic sweeper: the product of the sweep's
    overrides, named like ``hydra.sweep.subdir``); None for another sweeper."""
    try:
        from hydra._internal.config_loader_impl import get_overrides_dirname
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from specbench.job_folders import job_dirname

        if "BasicSweeper" not in str(config.hydra.sweeper.get("_target_", "")):
            return None
        params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
        parser = OverridesParser.create()
        batches = BasicSweeper.split_arguments(parser.parse_overrides(params + list(config.hydra.overrides.task)), None)
        odn = config.hydra.job.config.override_dirname
        return [job_dirname(get_overrides_dirname(overrides=parser.parse_overrides(job), kv_sep=odn.kv_sep,
                                                  item_sep=odn.item_sep, exclude_keys=list(odn.exclude_keys)))
                for job in batches[0]]
    except Exception:  # Hydra internals moved: no list, no check
        return None


def _fmt(value: Any, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def print_skipped(job_dir: str | Path, summary: dict) -> bool:
    """One line for a job another process holds (``run_job`` returned ``status: skipped``)."""
    if summary.get("status") != "skipped":
        return False
    print(f"[skipped] {summary.get('message') or Path(job_dir).name}: another process runs it "
          f"(on_locked=wait to wait for it)", flush=True)
    return True


def _engine_ran(summary: Mapping[str, Any]) -> str:
    """What the job's loop ran on, as its summary's ``engine`` says (the options ``auto`` resolved on this host)."""
    engine = summary.get("engine") or {}
    if not engine:
        return "transformers' loop"
    buckets = engine.get("buckets") or {}
    width = f", width={engine['width']} (block-invariant, static target cache)" if engine.get("width") else ""
    compiled = ", draft_compile (the draft's forwards compiled)" if engine.get("draft_compile") else ""
    return (f"fast_linear={engine.get('fast_linear') or False}, {len(buckets)} padded block length(s), "
            f"fused_prefill={bool(engine.get('fused_prefill'))}, graphs={engine.get('graphs', 'eager')}{width}"
            f"{compiled}")


def cost_line(summary: Mapping[str, Any]) -> str | None:
    """One line on what a speculative job's parts cost on this host, whatever its speedup: a draft
    forward and a verification in target steps, α, Leviathan's bound at those costs (its best fixed γ, one draft
    forward per drafted token) and, where the job drafted otherwise (lookup rounds with no forward, a model capped
    below γ: forwards a round ≠ drafted tokens a round), the same model at its own drafting (``as_drafted``), and the
    engine options that ran; None when ``measured_costs`` says nothing."""
    costs = measured_costs(summary)
    if costs is None:
        return None
    gamma, bound = costs.best()
    verify = f"a verification {costs.v:.2f}" if costs.v_measured else "a verification (not measured: taken as 1)"
    ran = costs.as_drafted()
    drafted = (f" ({ran:.2f}x as it drafted: {costs.drafted:.2f} tokens for {costs.forwards:.2f} draft forwards a "
               f"round)") if ran is not None and abs(costs.forwards - costs.drafted) > 0.05 * costs.drafted else ""
    return (f"a draft forward {1 / costs.c:.2f} target steps, {verify} target steps, α = {costs.alpha:.2f}; "
            f"Leviathan's bound at these costs {bound:.2f}x (gamma={gamma}, a draft forward per token){drafted}; "
            f"engine: {_engine_ran(summary)}")


def headline_speedup(agg: Mapping[str, Any]) -> float | None:
    """The speedup a job prints: the pooled one after the outlier rule (``specbench.summary.speedup_figures``), or the
    pooled ``speedup`` where a summary predates it."""
    return agg["speedup_robust"] if agg.get("speedup_robust") is not None else agg.get("speedup")


def _outliers(agg: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((agg.get("speedup_outliers") or {}).get("turns") or [])


def _ci(bounds: Any) -> str:
    return f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds and None not in bounds else ""


def speedup_text(agg: Mapping[str, Any]) -> str:
    """The headline: the speedup after the outlier rule with its 95 % CI over the job's prompt turns and the median of
    per-turn ratios; where the rule handled a turn, the pooled figure as measured beside it."""
    flagged = _outliers(agg)
    text = _fmt(headline_speedup(agg), ".3f", "x")
    if agg.get("speedup_turns") is None:  # a summary written before the rule
        return text
    ci = _ci(agg.get("speedup_robust_interval" if flagged else "speedup_interval"))
    turns = agg["speedup_turns"]
    text += (f"{ci} (95 % CI over {turns} prompt turns)" if ci else f" (no interval over {turns} prompt turn(s))")
    text += f", median of per-turn ratios {_fmt(agg.get('speedup_median'), '.3f', 'x')}"
    if flagged:
        text += f"; pooled as measured {_fmt(agg.get('speedup'), '.3f', 'x')}{_ci(agg.get('speedup_interval'))}"
    return text


def fastest_text(agg: Mapping[str, Any], cfg: Mapping[str, Any]) -> str:
    """A width job's headline: the speedup over the fastest target alone of the target's dtype (the plain 1-token
    step, timed beside each reference: ``specbench.summary.fastest_figures``), with its interval and median."""
    dtype = ((cfg.get("pair") or {}).get("target") or {}).get("dtype") or "its dtype's"
    same, n = agg.get("fastest_same_outputs"), agg.get("n_records")
    return (f"{_fmt(agg['speedup_fastest'], '.3f', 'x')}{_ci(agg.get('speedup_fastest_interval'))} over the fastest "
            f"{dtype} target alone ({_fmt(agg.get('ar_fastest_tokens_per_s'), '.2f', ' tokens/s')}, the plain 1-token "
            f"step; its output equals the width's on {same} of {n} prompt turns), median of per-turn ratios "
            f"{_fmt(agg.get('speedup_fastest_median'), '.3f', 'x')}")


def _named(turns: list[Mapping[str, Any]]) -> str:
    return "; ".join(f"{t['label']} ({'its target alone' if t['side'] == 'target alone' else 'its verifications'} at "
                     f"{t['share_of_median']:.2f} of the job's median rate: {t['handled']})" for t in turns)


def outlier_warning(agg: Mapping[str, Any]) -> str | None:
    """One line naming the turns the outlier rule handled and what that did to the headline; None when it handled
    none."""
    flagged = _outliers(agg)
    if not flagged:
        return None
    count = "1 turn" if len(flagged) == 1 else f"{len(flagged)} turns"
    return (f"{count} far outside the job's own timings, {_named(flagged)}: the headline "
            f"{_fmt(headline_speedup(agg), '.3f', 'x')} is after the rule, the pooled figure as measured "
            f"{_fmt(agg.get('speedup'), '.3f', 'x')} (rule: {agg['speedup_outliers'].get('rule')}; "
            f"summary.json: aggregates.speedup_outliers)")


def one_turn_win(agg: Mapping[str, Any]) -> str | None:
    """One line when the headline beats the target alone only through one prompt turn: leaving out that turn (the
    jackknife's replicate, ``speedup_without_one``) puts it below 1; None otherwise."""
    without = agg.get("speedup_without_one") or {}
    speedup = headline_speedup(agg)
    if speedup is None or speedup < 1.0 or without.get("speedup") is None or without["speedup"] >= 1.0:
        return None
    return (f"faster than the target alone only through one turn: without {without['turn']} the speedup is "
            f"{without['speedup']:.3f}x (95 % CI of {speedup:.3f}x:"
            f"{_ci(agg.get('speedup_robust_interval') or agg.get('speedup_interval')) or ' n/a'})")


def slowdown_reason(summary: Mapping[str, Any]) -> str | None:
    """One line on why a speculative job ran slower than the target alone (its headline speedup < 1), from
    what it measured (``measured_costs``); it names the turn when the pooled figure won only through a turn the
    outlier rule handled, and says when a win rests on one turn (``one_turn_win``); None otherwise, and for a slower
    job that measured too little to say (AR, no draft forwards). The best fixed γ is Leviathan's expectation with
    ``c``, ``v`` and α (``specbench.summary.MeasuredCosts.expected``)."""
    agg = summary.get("aggregates") or {}
    speedup = headline_speedup(agg)
    if speedup is None:
        return None
    if speedup >= 1.0:
        return one_turn_win(agg)
    lead = "slower than the target alone"
    pooled, flagged = agg.get("speedup"), _outliers(agg)
    through_outlier = pooled is not None and pooled >= 1.0 and bool(flagged)
    if through_outlier:
        lead += (f" once the outlier rule has handled {_named(flagged)}: the pooled {pooled:.3f}x as measured won "
                 "only through it")
    costs = measured_costs(summary)
    if costs is None:
        return lead if through_outlier else None
    parts = [f"a draft forward costs {1 / costs.c:.2f} target steps (c = {costs.c:.1f})"]
    if costs.v_measured:
        parts.append(f"a verification {costs.v:.2f} target steps")
    parts.append(f"acceptance α = {costs.alpha:.2f}")
    best, bound = costs.best()
    tips = []
    engine = (summary.get("config") or {}).get("engine") or {}
    if not any(engine.get(k) for k in ("fast_linear", "verify_buckets", "fused_prefill")):
        tips.append("engine options: engine.fast_linear=auto engine.verify_buckets=auto engine.fused_prefill=auto")
    if "lookup" not in str((summary.get("config") or {}).get("pair", {}).get("name", "")):
        tips.append("a free draft first: pair=gemma3-270m_hybrid-lookup-int8 (CPU)")
    tips.append("a draft the target agrees with more")
    return (f"{lead}{'; ' if through_outlier else ': '}{', '.join(parts)}; Leviathan's model at these costs gives at most "
            f"{bound:.2f}x (gamma={best}). What pays: a cheaper draft or a cheaper verification "
            f"({'; '.join(tips)}).")


def print_summary(job_dir: str | Path, summary: dict) -> None:
    if print_skipped(job_dir, summary):
        return
    agg = summary.get("aggregates", {})
    cfg = summary.get("config", {})
    print()
    print(f"specbench: {cfg.get('method', {}).get('name')} on {cfg.get('pair', {}).get('name')}, "
          f"task {cfg.get('task', {}).get('name')}, gamma={cfg.get('gamma')}, temperature={cfg.get('temperature')}")
    print(f"  prompts        {agg.get('n_records')}  ({agg.get('new_tokens')} new tokens)")
    alone = _fmt(agg.get('ar_tokens_per_s'), '.2f', ' tokens/s')
    if _outliers(agg):
        alone = f"{_fmt(agg.get('ar_tokens_per_s_robust'), '.2f', ' tokens/s')} after the outlier rule, {alone} as measured"
    print(f"  throughput     {_fmt(agg.get('tokens_per_s'), '.2f', ' tokens/s')} (target alone: {alone})")
    width = ((summary.get("baseline") or {}).get("kernels") or {}).get("width")
    if agg.get("speedup_fastest") is not None:  # a width's job: the headline over the fastest target alone
        print(f"  speedup vs AR  {fastest_text(agg, cfg)}")
        print(f"  at the width   {speedup_text(agg)} (over the target alone at width {width}, the function this loop "
              f"matches token for token)")
    else:
        over = (f" (over the target alone at width {width}, the function this loop matches token for token; its plain "
                f"1-token step is faster and rounds otherwise: docs/pages/performance.md)") if width else ""
        print(f"  speedup vs AR  {speedup_text(agg)}{over}")
    warning = outlier_warning(agg)
    if warning:
        print(f"  warning        {warning}")
    costs = cost_line(summary)
    if costs:
        print(f"  costs          {costs}")
    reason = slowdown_reason(summary)
    if reason:
        print(f"  why            {reason}")
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
    flagged = _outliers(agg)
    note = (f" (after the outlier rule: {', '.join(t['label'] for t in flagged)}; pooled as measured "
            f"{_fmt(agg.get('speedup'), '.3f', 'x')})") if flagged else ""
    speedup = f"speedup {_fmt(headline_speedup(agg), '.3f', 'x')}{note}"
    if agg.get("speedup_fastest") is not None:  # a width's job: over the fastest target alone first
        speedup = f"speedup {_fmt(agg['speedup_fastest'], '.3f', 'x')} over the fastest target alone ({speedup} at the width)"
    print(f"[done] {Path(job_dir).name}: {_fmt(agg.get('tokens_per_s'), '.2f', ' tok/s')}, "
          f"{speedup}, acceptance {_fmt(agg.get('acceptance_rate'), '.3f')}", flush=True)


class SweepReport(Callback):
    """Hydra callback (``hydra.callbacks.report``): at the end of a multirun, one line per
    status and the failed jobs with their errors. It reads the ``summary.json`` files
    written since the sweep started, so it works with any launcher on a shared disk."""

    def __init__(self) -> None:
        self.started = 0.0
        self.expected: list[str] | None = None

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        import time

        self.started = time.time() - 1.0
        import socket

        from specbench.record_io import write_json_atomic

        sweep_dir = Path(str(config.hydra.sweep.dir))
        write_json_atomic(sweep_dir / SWEEP_FILE, {"host": socket.gethostname(), "started": self.started})
        self.expected = expected_jobs(config)
        launcher = str(config.hydra.get("launcher", {}).get("_target_", ""))
        if "BasicLauncher" not in launcher and "InterleavedLauncher" not in launcher:  # one GPU per job
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
        invalid = []
        path = sweep_dir / INVALID_JOBS
        if path.exists():
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            invalid = [r for r in rows if r.get("time", 0) >= self.started]
        if invalid:
            by_status["invalid"] = [(sweep_dir / r["job"], r) for r in invalid]
        refused = {r["job"] for r in invalid}  # listed as INVALID below, not as missing
        missing = [name for name in (self.expected or [])
                   if not (sweep_dir / name / "summary.json").exists() and name not in refused]
        if missing:
            by_status.setdefault("failed", []).extend(
                (sweep_dir / name, {"error": f"no summary.json in {sweep_dir} (a configuration error, or a worker "
                                             "that does not see the results folder: see the job's log)"})
                for name in missing)
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_status.items())) or "no job ran"
        print(f"\nsweep finished in {sweep_dir}: {counts}", flush=True)
        for folder, summary in by_status.get("failed", []):
            print(f"  FAILED {folder.name}: {summary.get('error')}", flush=True)
        for folder, row in by_status.get("invalid", []):
            print(f"  INVALID {folder.name} (not run, no folder): {row.get('error')}", flush=True)
        for folder, _ in by_status.get("interrupted", []) + by_status.get("running", []):
            print(f"  unfinished {folder.name}: run the same command again to resume", flush=True)
        if by_status.get("failed") or by_status.get("invalid"):
            raise SystemExit(1)  # a sweep with failed or refused jobs must not look like a success
