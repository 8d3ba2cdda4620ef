"""InstructCoder (``specbench/tasks/instructcoder.py``), SpecDecode-Bench's code-editing workload: its prompt is the
one SpecDecode-Bench sends (``InstructCoderDataset.sample``: the code, a blank line, the instruction, the request for
code only), its reference the edited code, and without local files it reads the Hub dataset SpecDecode-Bench reads
(``likaixin/InstructCoder``, split ``train``), here from a stand-in for ``datasets.load_dataset``: the suite is
offline, so the real call fails, saying how to give local files."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from specbench.registry import ConfigError
from specbench.tasks import load_task, task_source

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "tasks" / "instructcoder.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]


def task(**overrides) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "task" / "instructcoder.yaml"))
    return {**node, **overrides}


def specdecode_bench_prompt(item: dict) -> str:
    """SpecDecode-Bench/vllm (commit 20be7b3), vllm/benchmarks/datasets_bench.py: InstructCoderDataset.sample."""
    return f"{item['input']}\n\n{item['instruction']} Just output the code, do not include any explanation."


def test_each_row_is_the_prompt_specdecode_bench_sends_with_the_edited_code_as_reference():
    prompts = load_task(task(data_files=str(FIXTURE), n_prompts=None))
    assert [p.turns for p in prompts] == [(specdecode_bench_prompt(row),) for row in ROWS]
    assert [p.reference for p in prompts] == [row["output"] for row in ROWS]
    assert [p.prompt_id for p in prompts] == [str(i) for i in range(len(ROWS))]  # no id field: the row number
    assert {p.category for p in prompts} == {"code_editing"}


def test_without_local_files_it_reads_the_hub_dataset_specdecode_bench_reads(monkeypatch):
    calls = []

    class Split:
        cache_files: list = []

        def to_list(self):
            return [dict(row) for row in ROWS[:2]]

    def load_dataset(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        return Split()

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    prompts = load_task(task(n_prompts=None))
    assert calls == [("likaixin/InstructCoder", None, {"split": "train"})]  # no subset, no revision: theirs
    assert [p.turns[0] for p in prompts] == [specdecode_bench_prompt(row) for row in ROWS[:2]]
    assert task_source(task()) == "datasets: likaixin/InstructCoder split=train"


def test_offline_the_hub_read_fails_saying_how_to_give_local_files():
    pytest.importorskip("datasets")
    with pytest.raises(ConfigError, match=r"likaixin/InstructCoder.*split 'train'.*task.data_files=.*instruction, "
                                          r"input, output"):
        load_task(task())
