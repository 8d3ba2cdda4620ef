"""The γ-policy lab's commands (``python -m runners.replay lab``, ``runners.replay.lab``): ``traces`` and
``confirm`` build command lines whose overrides compose into valid jobs."""

from __future__ import annotations

from helpers.policy_lab import lab_script


def test_lab_traces_and_confirm_compose_valid_jobs(root, tmp_path, monkeypatch):
    """``python -m runners.replay lab traces`` and ``confirm`` (the lead's quiet-machine commands) build command
    lines whose overrides compose into valid jobs: the cost-reading policy gets the pair's latency file,
    a ``:key=value`` label becomes ``method.key=value``, later pairs reuse the first pair's target pass."""
    from runners.replay.compare import method_label
    from specbench.config import JobConfig, compose

    lab = lab_script(root)
    cmds: list[list[str]] = []
    monkeypatch.setattr(lab, "_run", lambda cmd: cmds.append(cmd) or 0)
    monkeypatch.setattr(lab, "compare_main", lambda args: 0)
    assert lab.main(["traces", "--out", str(tmp_path / "traces")]) == 0
    assert len(cmds) == len(lab.PAIRS) * len(lab.TASKS)
    assert all("--reuse-target" in c for c in cmds if f"pair={lab.PAIRS[0]}" not in c)
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "specdecode", "cost_aware:transient=false", "--tasks", "humaneval"]) == 0
    assert len(cmds) == 2 * len(lab.PAIRS)
    # one results folder per pair × task: the AR reference is decoded once for all its methods
    assert len({a for c in cmds for a in c if a.startswith("results_dir=")}) == len(lab.PAIRS)
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "specdecode", "--tasks", "humaneval", "--n-prompts", "5"]) == 0
    assert all([a for a in c if a.startswith("task.n_prompts=")] == ["task.n_prompts=5"] for c in cmds)
    assert JobConfig.from_mapping(compose([a for a in cmds[0][3:] if "=" in a and not a.startswith(
        ("results_dir=", "gamma="))])).task.n_prompts == 5
    cmds.clear()
    assert lab.main(["traces", "--out", str(tmp_path / "traces"), "--tasks", "specbench", "--per-category", "1",
                     "--threads", "2"]) == 0
    assert all("task.per_category=1" in c and "threads=2" in c and "task.per_category=2" not in c for c in cmds)
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "cost_aware:transient=false,latency=null", "--tasks", "humaneval"]) == 0
    online = JobConfig.from_mapping(compose([a for a in cmds[0][3:] if "=" in a and not a.startswith(
        ("results_dir=", "gamma="))])).method
    assert online.params["latency"] is None  # costs learnt online: no calibration file given
    assert method_label(online.name, dict(online.params)) == "cost_aware:transient=false,latency=none"
    assert method_label("specdecode", {}) == "specdecode"
    assert method_label("cost_aware", {"transient": False, "latency": "l.json", "adapt_costs": True}) == \
        "cost_aware:transient=false,adapt_costs=true"
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "specdecode", "cost_aware:transient=false", "--tasks", "humaneval"]) == 0
    for cmd in cmds:
        overrides = [a for a in cmd[3:] if "=" in a and not a.startswith(("results_dir=", "gamma="))]
        config = JobConfig.from_mapping(compose(overrides))
        if config.method.name == "cost_aware":
            assert config.method.params["transient"] is False
            assert config.method.params["latency"].endswith(f"{config.pair.name}.json")
        assert config.max_new_tokens == lab.MAX_NEW_TOKENS and config.verify_lossless
