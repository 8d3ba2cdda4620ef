"""The scripts of ``scripts/`` that no other test runs: each one's command line parses (``--help``
exits 0 and names its options), so a renamed import or a broken argument parser fails here rather than
on the quiet machine that runs the benchmark an hour later; the package CLIs that were scripts until issue 30
(``python -m runners.jobs.export`` on a real job folder, ``runners.jobs.prefetch``, ``runners.replay lab``) too.

The benchmarks themselves are timed on purpose and are not run here (performance is measured by
scripts, not by tests)."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: every Python script with a command line, and an option its --help must show
HELP = {
    "bench_batch.py": "--batch-size",
    "bench_serving.py": "--levels",
    "llamacpp_fixtures.py": "--prompts",
    "bench_engine_costs.py": "--check-tokens",
    "bench_compiled_draft.py": "--reverse",
    "bench_before_after.py": "--before",
    "bench_interleave.py": "--repeats",
    "bench_linear_rows.py": "--rows",
    "bench_noise.py": "--threads",
    "bench_speedup.py": "--configs",
    "bench_sweep.py": "--launcher",
    "bench_vs_hf.py": "--variants",
    "build_token_map_gemma3.py": "--wordfreq",
    "compare_paper_costs.py": "folder",
    "compare_reruns.py": "second",
    "gpu_paper_costs.py": "--tiny",
    "gpu_pairs.py": "--tokens",
    "gpu_smoke.py": "usage",
    "gpu_timing.py": "--repeats",
    "hetero_acceptance.py": "usage",
    "migrate_method_identity.py": "--check",
    "peer_exactness.py": "--rules",
    "specdecode_bench_conformance.py": "--figure",
}
#: the package CLIs that were scripts (issue 30): module, arguments, an option their --help must show
MODULE_HELP = {
    "runners.jobs.export": ([], "dst"),
    "runners.jobs.prefetch": ([], "--dry-run"),
    "runners.replay": (["lab"], "confirm"),
    "runners.replay lab compare": (["lab", "compare"], "--single-token-catchup"),
}


def test_every_python_script_is_listed():
    scripts = {p.name for p in (ROOT / "scripts").glob("*.py")}
    assert scripts - set(HELP) <= {"render_slurm.py"}, "a new script: add it to HELP (render_slurm has its own test)"


@pytest.mark.parametrize("name", sorted(HELP))
def test_the_script_parses_its_command_line(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / name), run_name="__main__")
    out = capsys.readouterr().out
    assert exit_.value.code in (0, None), out
    assert HELP[name] in out


@pytest.mark.parametrize("name", sorted(MODULE_HELP))
def test_the_package_cli_parses_its_command_line(name, monkeypatch, capsys):
    module = name.split()[0]
    args, option = MODULE_HELP[name]
    monkeypatch.setattr(sys, "argv", [module, *args, "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    out = capsys.readouterr().out
    assert exit_.value.code in (0, None), out
    assert option in out


@pytest.mark.slow
def test_export_results_strips_output_texts_and_keeps_what_analysis_reads(tmp_path):
    job = tmp_path / "src" / "gamma=2,method=specdecode"
    job.mkdir(parents=True)
    record = {"pair": "tiny", "method": "specdecode", "prompt_id": "0", "turn": 1, "output_text": "secret",
              "output_sha": "abc", "new_tokens": 3, "wall_ms": 10.0}
    (job / "records.jsonl").write_text(json.dumps(record) + "\n")
    (job / "summary.json").write_text(json.dumps({"status": "complete", "traceback": "Traceback ...",
                                                  "provenance": {"host": "h"}}))
    (tmp_path / "src" / "latency").mkdir()
    (tmp_path / "src" / "latency" / "tiny.json").write_text("{}")
    (tmp_path / "src" / ".specbench").mkdir()  # an interleaved sweep's round orders and paired AR decodes
    (tmp_path / "src" / ".specbench" / "interleave.jsonl").write_text('{"round": 0}\n')
    (tmp_path / "src" / ".specbench" / "ar_paired.jsonl").write_text('{"ar_decode": "ab@0"}\n')
    proc = subprocess.run([sys.executable, "-m", "runners.jobs.export", str(tmp_path / "src"),
                           str(tmp_path / "dst")], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "exported 1 jobs ({'complete': 1})" in proc.stdout
    out = tmp_path / "dst" / "gamma=2,method=specdecode"
    (kept,) = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert "output_text" not in kept and kept["output_sha"] == "abc"
    assert "traceback" not in json.loads((out / "summary.json").read_text())
    assert (tmp_path / "dst" / "latency" / "tiny.json").exists()
    assert (tmp_path / "dst" / "interleave.jsonl").read_text() == '{"round": 0}\n'
    assert (tmp_path / "dst" / "ar_paired.jsonl").exists() and not (tmp_path / "dst" / ".specbench").exists()
    assert json.loads((tmp_path / "dst" / "provenance.json").read_text())["provenance"] == {"host": "h"}


@pytest.mark.slow
def test_gpu_smoke_says_why_it_ran_nothing_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: run scripts/gpu_smoke.sh itself")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_smoke.sh")], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PY": sys.executable},
                          timeout=300)
    assert proc.returncode == 2
    assert "no CUDA GPU here" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_gpu_pairs_jobs_each_prepare_on_the_gpu_pairs(monkeypatch):
    """scripts/gpu_pairs.py's jobs (issue 32) validate as jobs: the three GPU pairs x fp32/bf16/fp16 targets at T = 0
    with verify_lossless, and one T = 1 job each (the hetero pair then runs TLI); the draft keeps its own dtype
    except the SmolLM2 draft, cast with the target."""
    from omegaconf import OmegaConf

    from runners.jobs.build import prepare
    from specbench.config import compose

    monkeypatch.setenv("SPECBENCH_QUESTIONS", str(ROOT.parent / "shared/data/spec_bench/question.jsonl"))
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from gpu_pairs import jobs

    seen = []
    for _label, overrides in jobs(8):
        config = prepare(OmegaConf.to_container(compose(overrides), resolve=True)).config
        draft = config.pair.draft.model
        seen.append((config.pair.name, config.pair.target.dtype, draft.dtype if draft else None, config.hetero_rule,
                     config.verify_lossless))
        assert config.pair.target.device == "cuda" and config.max_new_tokens == 8
    assert len(seen) == 12 and {s[1] for s in seen} == {"float32", "bfloat16", "float16"}
    assert ("gemma3-270m_gemma3-270m-bf16", "float16", "bfloat16", None, True) in seen
    assert ("gemma3-270m_smollm2-135m", "bfloat16", "bfloat16", "slem", True) in seen
    assert ("gemma3-270m_smollm2-135m", "float32", "float32", "tli", True) in seen


def test_the_synced_timer_reads_both_clocks():
    """specbench.timing.SyncedTimer (scripts/gpu_timing.py): on the CPU both readings are the same perf_counter
    values; its marks and laps keep Timer's semantics."""
    from specbench.timing import SyncedTimer

    timer = SyncedTimer("cpu")
    timer.start()
    timer.mark("first")
    timer.lap("verify", mark="end")
    assert timer.read() == timer.wall_read() and set(timer.read()) == {"first", "end"}
    assert timer.read()["end"] >= timer.read()["first"] >= 0 and set(timer.phases()) == {"verify"}


def test_bench_vs_hf_times_the_engine_a_job_composes(monkeypatch):
    """Issue 52: ``bench_vs_hf.py`` measures the engine as a user gets it, the ``engine`` config a job composes
    (options ``auto``, resolved on the host), not a lever it forces; ``--engine KEY=VALUE`` overrides one option, and
    a target dtype other than the pair's is refused in one line (transformers' loop would run another target)."""
    from specbench.config import JobConfig, compose
    from specbench.registry import ConfigError

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_vs_hf

    engine = bench_vs_hf.engine_config([])
    assert engine == JobConfig.from_mapping(compose([])).engine
    assert (engine.fast_linear, engine.verify_buckets, engine.width) == ("auto", "auto", "auto")
    assert bench_vs_hf.engine_config(["fast_linear=head"]).fast_linear == "head"
    with pytest.raises(ConfigError, match="engine.dtype"):
        bench_vs_hf.engine_config(["dtype=auto"])


def test_bench_engine_costs_times_the_head_on_each_kernel(monkeypatch):
    """``bench_engine_costs.py``'s head items (issue 52): ``F.linear``, ``(W·xᵀ)ᵀ`` and oneDNN's reordered weight
    (``engine.fast_linear=onednn``'s kernel) each compute the head on the rows asked for, and oneDNN's linear op is
    counted among the linear layers of a step's breakdown."""
    import torch

    from runners.engine.linear_kernels import onednn_available

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_engine_costs

    weight = torch.randn(40, 8)
    kernels = ("linear", "mm") + (("onednn",) if onednn_available() else ())
    for kernel in kernels:
        for rows in (1, 6):
            out = bench_engine_costs.head_item(weight, rows, kernel)()
            assert out.shape == (rows, 40), kernel
    assert "mkldnn::_linear_pointwise" in bench_engine_costs.LINEAR_OPS


def test_bench_engine_costs_times_the_compiled_draft_through_its_compiled_step(monkeypatch):
    """``bench_engine_costs.py``'s compiled draft items run the step ``engine.draft_compile`` runs (the compiled
    forward, ``runners.engine.compiled_draft``), on a cache set back to the context after each call."""
    from runners.engine import kv
    from runners.engine.compiled_draft import compiled_step, use_compiled
    from specbench.models import apply_transform

    from helpers.tiny import tiny_model

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_engine_costs

    from runners.engine import compiled_draft

    # the item's bookkeeping, not the compilation (tests/engine/test_compiled_draft.py compiles for real)
    monkeypatch.setattr(compiled_draft.torch, "compile", lambda fn, **options: fn)
    draft = apply_transform(tiny_model(64, seed=4), "int8_dynamic")
    try:
        run = bench_engine_costs.compiled_draft_item(draft, 12)
        step = compiled_step(draft)
        run()
        run()
        assert step is not None and step.calls == 2
    finally:
        use_compiled(draft, False)
        kv.use_static(draft, None)


def test_bench_compiled_draft_times_each_variant_on_its_own_step(monkeypatch):
    """``bench_compiled_draft.py``'s variants are ``CompiledStep``s with their levers (the grouped products: parts of
    stacked weights; the grouped attention: the copy's config), each timed on its own static cache set back to the
    context after every step, their logits the same to float rounding (``torch.compile`` the identity here: eagerly,
    transformers' one-token attention packs the query rather than repeating the key/value heads)."""
    import torch

    from runners.engine import compiled_draft
    from specbench.models import apply_transform

    from helpers.tiny import tiny_model

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_compiled_draft

    monkeypatch.setattr(compiled_draft.torch, "compile", lambda fn, **options: fn)
    draft = apply_transform(tiny_model(64, seed=4), "int8_dynamic")
    logits = []
    for groups, attention in bench_compiled_draft.VARIANTS.values():
        step = compiled_draft.CompiledStep(draft, groups=groups, attention=attention)
        parts = [m for m in step.copy.modules() if isinstance(m, compiled_draft._GroupPart)]
        assert bool(parts) == groups
        assert (step.copy.config._attn_implementation == compiled_draft.ATTENTION) == attention
        run, one = bench_compiled_draft.timed_step(step, draft, 12, 8, 3)
        run()
        logits.append(one())
        assert step.calls == 4
    for other in logits[1:]:
        torch.testing.assert_close(other, logits[0], rtol=1e-6, atol=1e-6)


def test_bench_vs_hf_divides_by_the_fastest_target_alone(monkeypatch):
    """The baseline rule at report time: where the target alone on plain forwards decoded faster than on the step the
    probe chose, ``bench_vs_hf.py`` names it the fastest target alone; an engine that is not a target alone never is."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_vs_hf

    assert bench_vs_hf.fastest_alone({"ours": 30.0, "ar": 15.51, "ar-plain": 16.58, "hf": 14.0}) == "ar-plain"
    assert bench_vs_hf.fastest_alone({"ours": 30.0, "ar": 17.0, "ar-plain": 16.58}) == "ar"
    assert bench_vs_hf.fastest_alone({"ours": 30.0, "ar": 17.0}) == "ar"
