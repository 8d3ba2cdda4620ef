"""Job loggers: ``none`` and ``wandb`` (disabled / offline here: never online in tests)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from analysis.wandb_source import rows_from_run
from specbench.config import LoggerConfig
from specbench.loggers import LOGGERS, NullLogger, WandbLogger, build_logger, records_table, traces_table
from specbench.registry import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _records(n: int = 2) -> list[dict]:
    return [{
        "pair": "p", "target": "t", "draft": "d", "method": "gammatune", "task": "k", "category": "c",
        "prompt_id": f"q{i}", "turn": 0, "gamma_init": 2, "temperature": 0.0, "seed": 0, "new_tokens": 5,
        "tokens_per_s": 10.0 + i, "wall_ms": 500.0, "ttft_ms": 50.0, "tpot_ms": None, "lossless": True,
        "rounds": 2, "drafted": 4, "accepted": 3, "gamma_trace": [2, 3], "drafted_trace": [2, 2],
        "accepted_trace": [2, 1], "extra": {"note": "x"},
    } for i in range(n)]


SUMMARY = {"config": {}, "provenance": {"device": "cpu"}, "status": "complete", "error": None,
           "aggregates": {"n_records": 2, "tokens_per_s": 10.5, "lossless_all": True, "speedup": None}}


def test_logger_yaml_names_match_registry():
    for path in sorted((ROOT / "conf" / "logger").glob("*.yaml")):
        node = OmegaConf.load(path)
        assert node.name == path.stem and node.name in LOGGERS
        assert isinstance(build_logger(LoggerConfig.from_mapping(node)), LOGGERS.get(node.name))
    wandb_node = OmegaConf.load(ROOT / "conf" / "logger" / "wandb.yaml")
    assert wandb_node.project == "specbench" and wandb_node.entity is None and list(wandb_node.tags) == []


def test_build_logger_none_default_and_unknown():
    assert isinstance(build_logger(LoggerConfig.from_mapping({"name": "none"})), NullLogger)
    assert isinstance(build_logger(LoggerConfig()), NullLogger)
    logger = build_logger(LoggerConfig.from_mapping({"name": "wandb", "project": "x", "entity": "me", "tags": ["a"]}))
    assert isinstance(logger, WandbLogger) and (logger.project, logger.entity, logger.tags) == ("x", "me", ["a"])
    with pytest.raises(ConfigError, match="(?i)did you mean .wandb."):
        build_logger(LoggerConfig.from_mapping({"name": "wandbb"}))
    with pytest.raises(ConfigError, match="mode"):
        build_logger(LoggerConfig.from_mapping({"name": "wandb", "mode": "loud"}))
    null = NullLogger()
    null.start({}, "j"), null.log_record({}), null.finish({}, failed=False)


def test_tables_encode_lists_and_one_row_per_round():
    columns, rows = records_table(_records())
    assert columns[:3] == ["pair", "target", "draft"] and "extra" in columns
    assert json.loads(rows[0][columns.index("gamma_trace")]) == [2, 3]
    tcols, trows = traces_table(_records())
    assert tcols == ["prompt_id", "turn", "round", "gamma", "drafted", "accepted"]
    assert trows == [["q0", 0, 0, 2, 2, 2], ["q0", 0, 1, 3, 2, 1], ["q1", 0, 0, 2, 2, 2], ["q1", 0, 1, 3, 2, 1]]


# ---------------------------------------------------------------- a recording stand-in for wandb


class FakeRun:
    def __init__(self, calls):
        self.calls, self.summary, self.config = calls, {}, types.SimpleNamespace(update=self._config_update)

    def _config_update(self, values, allow_val_change=False):
        self.calls.append(("config", values))

    def log(self, values, step=None):
        self.calls.append(("log", values, step))

    def finish(self, exit_code=None):
        self.calls.append(("finish", exit_code))


@pytest.fixture
def fake_wandb(monkeypatch):
    calls: list = []
    module = types.ModuleType("wandb")

    def init(**kwargs):
        calls.append(("init", kwargs))
        module.run = FakeRun(calls)
        return module.run

    class Table:
        def __init__(self, columns, data, allow_mixed_types=False):
            self.columns, self.data = columns, data

    module.init, module.Table, module.calls = init, Table, calls
    monkeypatch.setitem(sys.modules, "wandb", module)
    monkeypatch.setenv("WANDB_MODE", "offline")
    return module


def test_wandb_logger_logs_steps_summary_and_tables(fake_wandb):
    logger = build_logger(LoggerConfig.from_mapping({"name": "wandb", "project": "specbench", "mode": "online"}))
    logger.start({"results_dir": "results/my_sweep", "gamma": 2}, "method=gammatune,gamma=2")
    for record in _records():
        logger.log_record(record)
    logger.finish(SUMMARY, failed=False)
    calls = fake_wandb.calls
    init = calls[0][1]
    assert init["project"] == "specbench" and init["name"] == "method=gammatune,gamma=2"
    assert init["group"] == "my_sweep"  # default: the results folder's name
    assert init["mode"] == "offline"  # WANDB_MODE wins over logger.mode
    assert init["config"] == {"results_dir": "results/my_sweep", "gamma": 2} and init["reinit"] == "finish_previous"
    steps = [c for c in calls if c[0] == "log"]
    assert [c[2] for c in steps] == [0, 1, 2]  # step = prompt index, then the tables
    assert steps[0][1]["prompt/tokens_per_s"] == 10.0 and steps[1][1]["prompt/tokens_per_s"] == 11.0
    assert steps[0][1]["prompt/lossless"] == 1 and "prompt/tpot_ms" not in steps[0][1]
    tables = steps[2][1]
    assert set(tables) == {"records", "traces"} and len(tables["records"].data) == 2 and len(tables["traces"].data) == 4
    assert fake_wandb.run.summary == {"n_records": 2, "tokens_per_s": 10.5, "lossless_all": 1, "status": "complete"}
    assert ("config", {"provenance": {"device": "cpu"}}) in calls
    assert calls[-1] == ("finish", 0)
    logger.finish(SUMMARY, failed=False)  # a second call is a no-op
    assert calls[-1] == ("finish", 0) and sum(c[0] == "finish" for c in calls) == 1


def _job(logger, fail_at: int | None):
    """What run.py does around a job (specbench.loggers module doc)."""
    logger.start({"results_dir": "results"}, "job")
    failed, summary = True, {}
    try:
        for i, record in enumerate(_records(3)):
            if i == fail_at:
                raise RuntimeError("out of memory")
            logger.log_record(record)
        summary = dict(SUMMARY)
        failed = False
    finally:
        logger.finish(summary or {"status": "failed", "error": "RuntimeError"}, failed=failed)


def test_finish_runs_when_the_job_raises(fake_wandb):
    with pytest.raises(RuntimeError, match="out of memory"):
        _job(build_logger(LoggerConfig.from_mapping({"name": "wandb"})), fail_at=1)
    assert fake_wandb.calls[-1] == ("finish", 1)
    assert fake_wandb.run.summary["status"] == "failed"


def test_finish_runs_when_logging_the_tables_fails(fake_wandb, monkeypatch):
    def broken_table(**kwargs):
        raise ValueError("bad table")

    monkeypatch.setattr(fake_wandb, "Table", broken_table)
    logger = build_logger(LoggerConfig.from_mapping({"name": "wandb"}))
    logger.start({}, "job")
    logger.log_record(_records(1)[0])
    with pytest.raises(ValueError, match="bad table"):
        logger.finish(SUMMARY, failed=False)
    assert fake_wandb.calls[-1] == ("finish", 0)


# ---------------------------------------------------------------- the real wandb, never online


def test_real_wandb_disabled_start_log_finish(monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    finished = []
    real_init = wandb.init

    def spying_init(**kwargs):
        run = real_init(**kwargs)
        real_finish = run.finish

        def finish(exit_code=None):
            finished.append(exit_code)
            return real_finish(exit_code=exit_code)

        run.finish = finish
        return run

    monkeypatch.setattr(wandb, "init", spying_init)
    logger = build_logger(LoggerConfig.from_mapping({"name": "wandb", "project": "specbench"}))
    _job(logger, fail_at=None)
    with pytest.raises(RuntimeError):
        _job(logger, fail_at=0)
    assert finished == [0, 1]
    assert wandb.run is None  # nothing leaks into the next job of a multirun


def test_real_wandb_offline_table_reads_back(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = build_logger(LoggerConfig.from_mapping({"name": "wandb", "dir": str(tmp_path)}))
    config = {"pair": {"name": "p"}, "method": {"name": "gammatune"}, "results_dir": "results/s"}
    logger.start(config, "job")
    for record in _records():
        logger.log_record(record)
    logger.finish(SUMMARY, failed=False)
    files = list(tmp_path.rglob("records_*.table.json"))
    assert len(files) == 1
    rows = rows_from_run(config, json.loads(files[0].read_text()), state="finished")
    assert [r["prompt_id"] for r in rows] == ["q0", "q1"]
    assert rows[0]["gamma_trace"] == [2, 3] and rows[0]["tpot_ms"] is None and rows[0]["job_status"] == "complete"
