"""Protocol settings at the job boundary (issues 13 and 20): what is refused before any model loads,
how job folders are named, and what every record says about what ran. Tiny seeded models, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from runners.jobs.build import prepare
from runners.jobs.job import run_job
from specbench.config import JobConfig
from specbench.job_folders import NON_IDENTITY_KEYS, PRESENTATION_KEYS, config_drift, job_dirname
from specbench.record_io import read_records
from specbench.registry import ConfigError

from helpers import CONF, compose


def _cfg(*overrides: str) -> dict:
    return OmegaConf.to_container(compose(*overrides), resolve=True)


def _tiny(tiny_conf: Path, *overrides: str) -> dict:
    """The composed config with the tiny seeded pair of ``tiny_conf`` as its pair, 2 embedded prompts."""
    cfg = _cfg("task.n_prompts=2", "max_new_tokens=8", "warmup=0", *overrides)
    cfg["pair"] = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    return cfg


# ----------------------------------------------------------------------------- refused before loading


@pytest.mark.parametrize("overrides", [["method=ar_offloaded"], ["method=ar", "method.cache=offloaded"]])
def test_offloaded_ar_cache_is_refused_on_a_cpu_run_and_leaves_nothing(tmp_path, overrides):
    with pytest.raises(ConfigError, match="nothing to offload"):
        prepare(compose(*overrides))  # the default pair's target is on the CPU
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    with pytest.raises(ConfigError):
        run_job(compose(*overrides), job_dir, progress=False)
    assert not job_dir.exists()


def test_an_ar_method_takes_only_its_cache():
    with pytest.raises(ConfigError, match="method.cache"):
        prepare(compose("method=ar", "method.cache=gpu"))
    with pytest.raises(ConfigError, match="'threshold'"):
        prepare(compose("method=ar", "+method.threshold=0.4"))
    with pytest.raises(ConfigError, match="'cache'"):  # speculative loops keep their cache on the device
        prepare(compose("method=specdecode", "+method.cache=offloaded"))


@pytest.mark.parametrize(("key", "value", "message"), [
    ("top_k", "-1", "top_k"), ("top_p", "0", "top_p"), ("typical_p", "1.5", "typical_p"), ("top_k", "model", "top_k"),
])
def test_bad_sampling_processors_are_config_errors(key, value, message):
    with pytest.raises(ConfigError, match=message):
        JobConfig.from_mapping(_cfg(f"{key}={value}"))


def test_defaults_of_the_protocol_keys():
    job = JobConfig.from_mapping(_cfg())
    assert job.threads is None  # torch's own choice (issue 13 item 7)
    assert (job.top_k, job.top_p, job.typical_p, job.warmup_per_prompt) == (None, None, None, 0)
    assert job.task.prompt_format == "auto" and job.method.ar_cache is None
    assert JobConfig.from_mapping(_cfg("method=ar")).method.ar_cache == "dynamic"
    assert JobConfig.from_mapping(_cfg("top_k=checkpoint", "top_p=0.9")).top_k == "checkpoint"


# ----------------------------------------------------------------------------- job folders


def test_job_folders_name_a_data_file_by_its_stem():
    assert job_dirname("gamma=4,task.data_files=/very/long/path/question.jsonl") == "gamma=4,task.data_files=question"
    assert job_dirname("task.data_files=[/a/x.jsonl,/b/y.json.gz],z=1") == "task.data_files=x+y,z=1"
    assert job_dirname("") == "default"


def test_a_job_folder_name_never_exceeds_what_a_filesystem_holds(tmp_path):
    """``method.latency=/an/absolute/path.json`` and friends once made names over 255 bytes (OSError at
    the first write); a long name keeps a readable prefix and ends in a hash of the whole."""
    from specbench.job_folders import MAX_DIRNAME

    latency = tmp_path / "results" / "policy_lab" / "latency" / ("x" * 240 + ".json")
    long = f"gamma=4,method.latency={latency},method=cost_aware"
    name = job_dirname(long)
    assert len(name.encode()) <= MAX_DIRNAME < 255 and name.startswith("gamma=4,method.latency=_")
    assert job_dirname(long) == name and job_dirname(long.replace("gamma=4", "gamma=8")) != name
    assert job_dirname(long.replace("cost_aware", "smartspec")) != name  # the hash covers the cut-off part
    (tmp_path / name).mkdir()


def test_colliding_stems_get_a_short_hash(tmp_path):
    taken = tmp_path / "task.data_files=question"
    taken.mkdir()
    (taken / "summary.json").write_text(json.dumps({"config": {"task": {"data_files": "/a/question.jsonl"}}}))
    same = job_dirname("task.data_files=/a/question.jsonl", str(tmp_path))
    other = job_dirname("task.data_files=/b/question.jsonl", str(tmp_path))
    assert same == "task.data_files=question"  # the folder's own job: resumed, not renamed
    assert other.startswith("task.data_files=question-") and len(other) == len(same) + 9


def test_settings_that_change_a_measurement_are_named_in_the_folder():
    assert job_dirname("gamma=4,method=gammatune", None, False) == "gamma=4,method=gammatune,method.transient=false"
    assert job_dirname("method.transient=false,method=gammatune", None, False) == "method.transient=false,method=gammatune"
    assert job_dirname("method=hf_heuristic_carryover", None, False) == "method=hf_heuristic_carryover"
    assert job_dirname("gamma=4,method=gammatune", None, True) == "gamma=4,method=gammatune"
    assert job_dirname("method=ar", None, None, "offloaded") == "method=ar,method.cache=offloaded"
    assert job_dirname("method=ar_offloaded", None, None, "offloaded") == "method=ar_offloaded"


def test_config_yaml_wires_the_folder_names():
    conf = yaml.safe_load((CONF / "config.yaml").read_text())["hydra"]
    for where in (conf["run"]["dir"], conf["sweep"]["subdir"]):
        assert "oc.select:method.transient,null" in where and "oc.select:method.cache,null" in where
        assert "${results_dir}" in where
    assert tuple(conf["job"]["config"]["override_dirname"]["exclude_keys"]) == NON_IDENTITY_KEYS + PRESENTATION_KEYS


def test_config_drift_names_the_first_changed_setting():
    old = {"method": {"name": "gammatune", "transient": False}, "threads": 2, "gamma": 4}
    new = {"method": {"name": "gammatune", "transient": True, "expand_on": "gamma"}, "threads": None, "gamma": 4}
    assert config_drift(old, new) == "method.expand_on: None there, 'gamma' now"
    assert config_drift({**old, "method": new["method"]}, new) is None  # threads is not part of the job
    assert config_drift({"task": {"categories": ["a"]}}, {"task": {"categories": ("a",)}}) is None


@pytest.mark.slow
def test_a_folder_holding_another_config_is_refused_not_reused(tmp_path):
    job_dir = tmp_path / "method=gammatune"
    job_dir.mkdir()
    old = _cfg("method=gammatune", "method.transient=false")
    (job_dir / "summary.json").write_text(json.dumps({"status": "complete", "config": old}))
    before = (job_dir / "summary.json").read_text()
    with pytest.raises(ConfigError, match="method.transient: False there, True now"):
        run_job(compose("method=gammatune"), job_dir, progress=False)
    assert (job_dir / "summary.json").read_text() == before and job_dir.exists()


# ----------------------------------------------------------------------------- what records say


def test_records_say_what_ran(tiny_conf, tmp_path):
    spec = run_job(_tiny(tiny_conf, "method=gammatune", "method.transient=false"), tmp_path / "spec", progress=False)
    assert spec["status"] == "complete"
    for r in read_records(tmp_path / "spec" / "records.jsonl"):
        assert r["method_params"]["transient"] is False and r["method_params"]["expand_on"] == "gamma"
        assert r["prompt_format"] == "plain" and r["ar_cache"] is None and r["top_k"] is None
        assert r["target_vocab_size"] == r["draft_vocab_size"] and r["tokenizers_identical"] is True
        assert r["method_display"] == "GammaTune" and r["hetero_display"] is None  # its YAML's; one vocabulary
        assert r["method_key"] == "gammatune[carryover]"
        # hf-bench's TTFT waits for the first round; its TPOT spreads the rest over n - 1 tokens
        assert r["hfbench_ttft_ms"] >= r["ttft_ms"]
        assert r["hfbench_tpot_ms"] == pytest.approx((r["wall_ms"] - r["hfbench_ttft_ms"]) / (r["new_tokens"] - 1))
        assert r["hfbench_tokens_per_s"] == pytest.approx(1000.0 / r["hfbench_tpot_ms"])
    ar = run_job(_tiny(tiny_conf, "method=ar", "temperature=1.0", "top_k=checkpoint"), tmp_path / "ar", progress=False)
    assert ar["status"] == "complete"
    for r in read_records(tmp_path / "ar" / "records.jsonl"):
        assert r["ar_cache"] == "dynamic" and r["method_params"] == {"cache": "dynamic"}
        assert r["hfbench_ttft_ms"] == r["ttft_ms"] and r["target_vocab_size"] is None
        assert r["top_k"] == 50 and r["top_p"] is None  # transformers' defaults: the tiny model sets none
        assert r["method_display"] == "AR"
    named = run_job(_tiny(tiny_conf, "method=specdecode", "method.display=Mine", "task.n_prompts=1"),
                    tmp_path / "named", progress=False)
    assert named["status"] == "complete"
    assert {(r["method_display"], r["method_key"]) for r in read_records(tmp_path / "named" / "records.jsonl")} == \
        {("Mine", "specdecode")}  # a name, not a variant


def test_per_prompt_warmups_leave_a_carried_gamma_alone(tiny_conf, tmp_path):
    """hf-bench's two untimed generations before each timed one must not move a carried-over γ."""
    traces = []
    for warm in (0, 2):
        cfg = _tiny(tiny_conf, "method=hf_heuristic_carryover", "gamma=6", "max_new_tokens=12",
                    f"warmup_per_prompt={warm}")
        run_job(cfg, tmp_path / f"w{warm}", progress=False)
        traces.append([r["gamma_trace"] for r in read_records(tmp_path / f"w{warm}" / "records.jsonl")])
    assert traces[0] == traces[1]
    assert traces[0][1][0] != 6  # the second prompt starts from the carried γ, so carrying is exercised


def test_the_baseline_runs_on_the_methods_kernels_with_its_warmups(tiny_conf, tmp_path, monkeypatch):
    """Issue 40's baseline rule at batch 1: the target alone a speedup divides by steps on the fastest step the
    kernels of the method it is compared with allow (``verify_forward.step_forward``; on an emulated host where the
    transposed head pays: the loop's transposed copy, padded to the block the probe finds cheapest, whatever the
    loop's own bucket map) and gets the same untimed per-prompt warm-ups; records and summary name both sides, and
    the reference's cache key holds them, so a reference decoded on other kernels or warm-ups is never reused."""
    from runners.engine.speculative import AutoregressiveRunner
    from runners.jobs import ar_cache

    from helpers import emulated_host

    emulated_host.emulate(monkeypatch)

    decodes: list[tuple[str, tuple[int, ...]]] = []
    plain_generate = AutoregressiveRunner.generate

    def counting(self, prompt_ids, max_new_tokens, generator=None):
        decodes.append((str(self.describe()["fast_linear"]), tuple(prompt_ids)))
        return plain_generate(self, prompt_ids, max_new_tokens, generator)

    monkeypatch.setattr(AutoregressiveRunner, "generate", counting)
    monkeypatch.setattr(ar_cache, "_AR_REFERENCE", {})  # another test of this process may have decoded these keys
    fast = ("engine.fast_linear=auto", "engine.verify_buckets={1: [2, 2]}", "warmup_per_prompt=2")
    summary = run_job(_tiny(tiny_conf, "method=specdecode", *fast), tmp_path / "fast", progress=False)
    step = {"fast_linear": "all", "step": [12, 12], "min_rows": 1, "single_row": "first of two",
            "graphs": "eager"}  # the emulated host's cheapest step
    assert summary["baseline"] == {"kernels": step, "warmup": 0, "warmup_per_prompt": 2}
    assert summary["engine"]["fast_linear"] == "all" and summary["engine"]["buckets"] == {"1": [2, 2]}
    records = read_records(tmp_path / "fast" / "records.jsonl")
    for r in records:
        assert r["ar_baseline"] == summary["baseline"] and r["kernels"] == summary["engine"]
        assert r["lossless"] is True and r["schema_version"] == 5
    # each prompt's reference: its two untimed decodes, then the timed one, all on the loop's kernels
    assert len(decodes) == 3 * len(records) and {k for k, _ in decodes} == {"all"}
    entries = [json.loads(p.read_text()) for p in (tmp_path / ".specbench" / "ar_cache").glob("*.json")]
    assert {json.dumps(e["key"]["baseline"], sort_keys=True) for e in entries} == {
        json.dumps({"kernels": step, "warmup_per_prompt": 2}, sort_keys=True)}
    # the plain loop's job does not reuse those references: its baseline is another key
    decodes.clear()
    plain = run_job(_tiny(tiny_conf, "method=specdecode", "engine.fast_linear=false", "engine.verify_buckets=false"),
                    tmp_path / "plain", progress=False)
    assert plain["baseline"]["kernels"] == {"fast_linear": False, "step": None, "graphs": "eager"}
    assert len(decodes) == len(records) and {k for k, _ in decodes} == {"False"}
    assert all(r["ar_source"] == "decoded" for r in read_records(tmp_path / "plain" / "records.jsonl"))
    assert ar_cache.ENTRY_VERSION == 4


def test_every_job_of_a_sweep_divides_by_one_target_alone_with_fast_kernels_on(tiny_conf, tmp_path, monkeypatch):
    """Issue 50, item 6, at the job level: on an emulated host where the transposed head pays (``fast_linear=auto``
    on), the loop's 1-token padding depends on γ (its probe measures up to ``max(9, γ + 1)`` tokens: none at γ = 2,
    (12, 12) at γ = 16) but the
    target alone does not: jobs at γ = 2 and γ = 16 name one baseline, and the second takes the first's references
    (one key); with ``verify_buckets=false`` the target alone still transposes its one row."""
    from runners.jobs import ar_cache

    from helpers import emulated_host

    emulated_host.emulate(monkeypatch)
    monkeypatch.setattr(ar_cache, "_AR_REFERENCE", {})
    on = ("method=specdecode", "engine.fast_linear=auto", "engine.verify_buckets=auto")
    low = run_job(_tiny(tiny_conf, *on, "gamma=2"), tmp_path / "g2", progress=False)
    high = run_job(_tiny(tiny_conf, *on, "gamma=16"), tmp_path / "g16", progress=False)
    assert (low["engine"]["buckets"].get("1"), high["engine"]["buckets"]["1"]) == (None, [12, 12])
    assert low["baseline"] == high["baseline"] and low["baseline"]["kernels"] == {
        "fast_linear": "all", "step": [12, 12], "min_rows": 1, "single_row": "first of two", "graphs": "eager"}
    assert {r["ar_source"] for r in read_records(tmp_path / "g16" / "records.jsonl")} == {"cache"}
    unpadded = run_job(_tiny(tiny_conf, "method=ar", "engine.fast_linear=auto", "engine.verify_buckets=false"),
                       tmp_path / "ar", progress=False)
    assert unpadded["baseline"]["kernels"] == unpadded["engine"] == {"fast_linear": "all", "step": None, "min_rows": 1,
                                                                     "single_row": "first of two", "graphs": "eager"}
