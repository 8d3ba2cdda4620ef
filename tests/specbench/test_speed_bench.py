"""SPEED-Bench as a task (issue 31, item 3): its rows, selection, placeholders, offline error, and its
categories reaching the records and the per-category table.

The fixture ``tests/fixtures/tasks/speed_bench.jsonl`` holds invented rows in the schema of the
Hub's ``nvidia/SPEED-Bench`` (config ``qualitative``): question_id, category, sub_category, turns,
source, src_id, difficulty, multiturn.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from analysis.categories import category_table
from analysis.frame import complete_only, load_records, rows_to_frame
from specbench.registry import ConfigError
from specbench.tasks import TASKS, files, load_task, speed_bench, task_source

from helpers import compose

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "speed_bench.jsonl"
YAML = Path(__file__).resolve().parents[2] / "conf" / "task" / "speed_bench.yaml"
ROLEPLAY = "ec2460a4c1ca5bbe3f79d405a1e2e4a5"  # the fixture's three-turn row
HUMANITIES = "6bacd4bd23daf49675383870b93258e6"  # two turns


def cfg(**overrides) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(YAML))
    return {**node, "data_files": str(FIXTURE), **overrides}


def fixture_rows() -> list[dict]:
    return files.read_rows(FIXTURE)


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_task_file_names_its_loader_and_restates_its_defaults():
    node = OmegaConf.to_container(OmegaConf.load(YAML))
    assert node["name"] == node["loader"] == YAML.stem == "speed_bench" and "speed_bench" in TASKS
    defaults = speed_bench.DEFAULTS
    assert {k: node[k] for k in defaults} == defaults
    assert defaults["path"] == "nvidia/SPEED-Bench" and defaults["subset"] == "qualitative"
    assert defaults["split"] == "test"


def test_rows_become_prompts_with_their_category_and_every_turn():
    prompts = load_task(cfg())
    rows = fixture_rows()
    assert [p.prompt_id for p in prompts] == [r["question_id"] for r in rows]
    assert [p.category for p in prompts] == [r["category"] for r in rows]
    assert [list(p.turns) for p in prompts] == [r["turns"] for r in rows]
    by_id = {p.prompt_id: p for p in prompts}
    assert len(by_id[ROLEPLAY].turns) == 3 and len(by_id[HUMANITIES].turns) == 2
    assert all(p.reference is None for p in prompts)  # SPEED-Bench has no reference answers
    assert {p.category for p in prompts} == {"coding", "math", "roleplay", "humanities", "multilingual", "writing"}


def test_composed_through_hydra_like_run_py():
    job = compose("task=speed_bench", f"task.data_files={FIXTURE}", "task.categories=[roleplay]")
    prompts = load_task(job.task)
    assert [p.prompt_id for p in prompts] == [ROLEPLAY] and job.task.name == "speed_bench"


def test_category_filter_and_the_error_listing_speed_benchs_categories():
    prompts = load_task(cfg(categories=["coding", "roleplay"]))
    assert [p.category for p in prompts] == ["coding", "roleplay", "coding"]
    with pytest.raises(ConfigError) as info:
        load_task(cfg(categories=["coding", "translation"]))  # a Spec-Bench category, not a SPEED-Bench one
    msg = str(info.value)
    assert "translation" in msg and "multilingual" in msg and "roleplay" in msg


def test_per_category_and_n_prompts():
    first_each = load_task(cfg(per_category=1))
    assert [p.category for p in first_each] == ["coding", "math", "roleplay", "humanities", "multilingual", "writing"]
    assert [p.category for p in load_task(cfg(n_prompts=3))] == ["coding", "math", "roleplay"]
    both = load_task(cfg(per_category=1, n_prompts=2, categories=["math", "coding"]))
    assert [p.prompt_id for p in both] == [fixture_rows()[0]["question_id"], fixture_rows()[1]["question_id"]]


def test_prepared_files_in_either_schema_read_alike(tmp_path):
    """Model-Optimizer's prepare_data.py writes the Hub's schema to test.parquet; NeMo-Skills' prepare.py
    writes ``<config>.jsonl`` with ``messages`` (one user message per turn) instead of ``turns``."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = fixture_rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test.parquet")
    messages = [{k: v for k, v in r.items() if k != "turns"} | {"messages": [{"role": "user", "content": t}
                                                                           for t in r["turns"]]} for r in rows]
    write_rows(tmp_path / "qualitative.jsonl", messages)
    expected = load_task(cfg())
    assert load_task(cfg(data_files=str(tmp_path / "test.parquet"))) == expected
    assert load_task(cfg(data_files=str(tmp_path / "qualitative.jsonl"))) == expected


def test_rows_still_holding_the_placeholder_are_refused_or_skipped(tmp_path, caplog):
    rows = fixture_rows()
    masked = [dict(rows[0], question_id="f" * 32, turns=[speed_bench.PLACEHOLDER + "\n\n{question}"]),
              dict(rows[2], question_id="e" * 32, turns=[speed_bench.PLACEHOLDER, "Go on."])]
    path = write_rows(tmp_path / "public.jsonl", rows + masked)
    with pytest.raises(ConfigError) as info:
        load_task(cfg(data_files=str(path)))
    msg = str(info.value)
    assert "\n" not in msg
    assert "2 of 10 rows" in msg and "coding 1, roleplay 1" in msg
    assert "task.data_files=" in msg and "task.unresolved=skip" in msg and "prepare" in msg
    with caplog.at_level(logging.WARNING, logger="specbench.tasks.speed_bench"):
        kept = load_task(cfg(data_files=str(path), unresolved="skip"))
    assert [p.prompt_id for p in kept] == [r["question_id"] for r in rows]
    assert any("2 of 10 rows" in r.getMessage() and "8 prompts remain" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match="task.unresolved"):
        load_task(cfg(unresolved="drop"))


def test_a_row_without_turns_or_a_field_is_named(tmp_path):
    row = {k: v for k, v in fixture_rows()[0].items() if k != "turns"}
    with pytest.raises(ConfigError, match=f"{row['question_id']}.*'turns'"):
        load_task(cfg(data_files=str(write_rows(tmp_path / "a.jsonl", [row]))))
    with pytest.raises(ConfigError, match="'category'"):
        load_task(cfg(data_files=str(write_rows(tmp_path / "b.jsonl", [{"question_id": "x", "turns": ["hi"]}]))))


def test_offline_without_a_cache_is_one_line_saying_how_to_give_files(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as info:
        load_task(cfg(data_files=None))
    msg = str(info.value)
    assert "\n" not in msg and "nvidia/SPEED-Bench" in msg and "speed_bench" in msg
    assert "task.data_files=" in msg and "prefetch" in msg and "question_id, category, turns" in msg


def test_task_source_names_the_hub_dataset():
    assert task_source(cfg(data_files=None)) == "datasets: nvidia/SPEED-Bench qualitative split=test revision=main"
    assert task_source(cfg(data_files=None, subset="throughput_1k")).endswith("throughput_1k split=test revision=main")
    assert "local files" in task_source(cfg())


# --------------------------------------------------------------------------- categories in the analysis


def _record(method: str, category: str, prompt: str, tokens_per_s: float, gamma: int | None = 2) -> dict:
    return {"pair": "p", "target": "t", "draft": None if method == "ar" else "d", "method": method,
            "task": "speed_bench", "category": category, "prompt_id": prompt, "turn": 1,
            "gamma_init": None if method == "ar" else gamma, "temperature": 0.0, "new_tokens": 10,
            "wall_ms": 10_000 / tokens_per_s, "tokens_per_s": tokens_per_s, "ttft_ms": 1.0,
            "job_status": "complete"}


def test_the_category_table_has_speed_benchs_categories_and_no_fixed_list():
    rows = [_record("ar", "multilingual", "a", 10.0), _record("ar", "roleplay", "b", 20.0),
            _record("specdecode", "multilingual", "a", 15.0), _record("specdecode", "roleplay", "b", 20.0)]
    table = category_table(rows_to_frame(rows))
    assert list(table.display.columns) == ["Pair", "Task", "Method", "Baseline", "multilingual", "roleplay", "All"]
    cell = table.data[table.data["category"] == "multilingual"].iloc[0]
    assert cell["speedup"] == pytest.approx(1.5) and cell["task"] == "speed_bench"  # 15 / 10


@pytest.mark.slow
def test_a_job_records_speed_bench_categories_and_asks_later_turns_after_its_answers(tiny_conf, tmp_path):
    from runners.jobs.run_one import run_cli_job

    # engine options off: the records' method is then plain ``specdecode``, the table's baseline without AR
    job = compose("warmup=0", "verify_lossless=false", "max_new_tokens=4", "gamma=2", "task=speed_bench",
                  f"task.data_files={FIXTURE}", "task.categories=[roleplay,coding,humanities]", "task.per_category=1",
                  "engine.fast_linear=false", "engine.verify_buckets=false")
    job.pair = OmegaConf.load(tiny_conf / "pair" / "tiny.yaml")
    assert run_cli_job(job, tmp_path / "job") == 0
    records = [json.loads(line) for line in (tmp_path / "job" / "records.jsonl").read_text().splitlines()]
    assert {r["task"] for r in records} == {"speed_bench"}
    assert {(r["prompt_id"], r["turn"]): r["category"] for r in records if r["prompt_id"] == ROLEPLAY} == {
        (ROLEPLAY, 1): "roleplay", (ROLEPLAY, 2): "roleplay", (ROLEPLAY, 3): "roleplay"}
    roleplay = sorted((r for r in records if r["prompt_id"] == ROLEPLAY), key=lambda r: r["turn"])
    assert roleplay[0]["prompt_tokens"] < roleplay[1]["prompt_tokens"] < roleplay[2]["prompt_tokens"]
    table = category_table(complete_only(load_records(tmp_path)))
    assert list(table.display.columns[4:]) == ["coding", "humanities", "roleplay", "All"]
    assert set(table.data["task"]) == {"speed_bench"} and set(table.data["baseline"]) == {"specdecode"}
