"""ShareGPT (``specbench/tasks/sharegpt.py``), SpecDecode-Bench's chat workload, read as their vLLM fork reads it
(``SpecDecode-Bench/vllm``: ``vllm/benchmarks/datasets_bench.py`` at 20be7b3, ``ShareGPTDataset.load_data`` and
``.sample``; ``scripts/common.py: get_dataset`` at 00ff3b4 / a6ccf87, ``SEED = 42``): conversations of two turns
or more, shuffled by ``random.seed(42); random.shuffle``, the first turn the prompt and the second the reference.
Without local files it fetches the file SpecDecode-Bench downloads (``scripts/run-l3-8b.sh`` at 75a86ce:
``huggingface-cli download anon8231489123/ShareGPT_Vicuna_unfiltered ShareGPT_V3_unfiltered_cleaned_split.json
--repo-type dataset``), here from a stand-in for ``huggingface_hub.hf_hub_download``: the suite is offline, so the
real call fails, saying how to give local files.

The fixture (``tests/fixtures/tasks/sharegpt.jsonl``) holds rows in that file's shape (``id``, ``conversations``
of ``{"from": "human" | "gpt", "value": ...}`` turns), one a line; the file itself is one JSON array, which
``task.data_files`` reads the same (``test_the_file_as_one_json_array_reads_as_json_lines_do``)."""

from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from specbench.registry import ConfigError
from specbench.tasks import load_task, task_source

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "tasks" / "sharegpt.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]
REPO, FILE = "anon8231489123/ShareGPT_Vicuna_unfiltered", "ShareGPT_V3_unfiltered_cleaned_split.json"


def task(**overrides) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "task" / "sharegpt.yaml"))
    return {**node, "n_prompts": None, **overrides}


def specdecode_bench_requests(data: list[dict]) -> list[tuple[str, str, str]]:
    """(id, prompt, completion) in SpecDecode-Bench's order: ``ShareGPTDataset.load_data`` (the filter, then
    ``random.seed(self.random_seed)``, 42 from ``scripts/common.py``, and ``random.shuffle``) and the turns
    ``ShareGPTDataset.sample`` takes (before its chat template and its token-count filter)."""
    data = [entry for entry in data if "conversations" in entry and len(entry["conversations"]) >= 2]
    state = random.getstate()
    random.seed(42)
    random.shuffle(data)
    random.setstate(state)
    return [(e["id"], e["conversations"][0]["value"], e["conversations"][1]["value"]) for e in data]


def ours(prompts) -> list[tuple[str, str, str]]:
    assert all(len(p.turns) == 1 for p in prompts)
    return [(p.prompt_id, p.turns[0], p.reference) for p in prompts]


def write_array(path: Path, rows: list[dict]) -> Path:
    path.write_text(json.dumps(rows, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def test_each_conversation_is_the_request_specdecode_bench_sends_in_their_order():
    prompts = load_task(task(data_files=str(FIXTURE)))
    assert ours(prompts) == specdecode_bench_requests(ROWS)
    assert [p.prompt_id for p in prompts] != [row["id"] for row in ROWS]  # shuffled: not the file's order
    assert {p.category for p in prompts} == {"conversation"}
    assert [p.prompt_id for p in load_task(task(data_files=str(FIXTURE), n_prompts=2))] == [
        request[0] for request in specdecode_bench_requests(ROWS)[:2]]


def test_conversations_of_fewer_than_two_turns_are_dropped_before_the_shuffle(tmp_path):
    short = [{"id": "s0", "conversations": []}, {"id": "s1", "conversations": [ROWS[0]["conversations"][0]]}]
    rows = [short[0], *ROWS[:2], short[1], *ROWS[2:]]
    prompts = load_task(task(data_files=str(write_array(tmp_path / "rows.json", rows))))
    assert ours(prompts) == specdecode_bench_requests(rows)
    assert {p.prompt_id for p in prompts} == {row["id"] for row in ROWS}


def test_the_prompt_is_the_first_turn_whatever_its_role(tmp_path):
    """``conversations[0]`` and ``[1]`` whoever speaks them, as ``ShareGPTDataset.sample`` takes them."""
    row = {"id": "x_1", "conversations": [{"from": "gpt", "value": "Here is the rest."}, {"from": "human",
                                                                                        "value": "Thanks!"}]}
    prompts = load_task(task(data_files=str(write_array(tmp_path / "rows.json", [row]))))
    assert ours(prompts) == [("x_1", "Here is the rest.", "Thanks!")]


def test_the_file_as_one_json_array_reads_as_json_lines_do(tmp_path):
    array = write_array(tmp_path / FILE, ROWS)
    assert json.loads(array.read_text(encoding="utf-8")) == ROWS  # the real file's shape: one array
    assert load_task(task(data_files=str(array))) == load_task(task(data_files=str(FIXTURE)))


def test_a_turn_without_text_is_refused_naming_its_row(tmp_path):
    bad = {"id": "b_0", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt"}]}
    with pytest.raises(ConfigError, match=r"row 1 \(id 'b_0'\).*first two turns"):
        load_task(task(data_files=str(write_array(tmp_path / "rows.json", [ROWS[0], bad]))))


def test_without_local_files_it_fetches_the_file_specdecode_bench_downloads(monkeypatch, tmp_path):
    calls = []

    def hf_hub_download(repo_id, filename, **kwargs):
        calls.append((repo_id, filename, kwargs))
        return str(write_array(tmp_path / filename, ROWS))

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=hf_hub_download))
    prompts = load_task(task())
    assert calls == [(REPO, FILE, {"repo_type": "dataset", "revision": None})]  # no revision: theirs pins none
    assert ours(prompts) == specdecode_bench_requests(ROWS)
    assert task_source(task()) == f"huggingface_hub: {REPO}/{FILE}"
    load_task(task(revision="0" * 40))
    assert calls[-1][2] == {"repo_type": "dataset", "revision": "0" * 40}
    assert task_source(task(revision="0" * 40)) == f"huggingface_hub: {REPO}/{FILE} revision={'0' * 40}"


def test_offline_the_hub_read_fails_saying_how_to_give_local_files():
    pytest.importorskip("huggingface_hub")
    with pytest.raises(ConfigError, match=rf"{FILE} of the dataset repository '{REPO}'.*task.data_files=.*id, "
                                          r"conversations"):
        load_task(task())
