"""SPEED-Bench, what a run of it was (issue 40, item 6): the Hub revision asked for (a named default) and the one
``datasets`` resolved, rows left out by ``task.unresolved=skip`` counted per category and named in the task's label
(``specbench.tasks.TaskFacts``), and the per-category table's acceptance, throughput and prompt turns.

Offline: ``datasets.load_dataset`` is replaced by a stand-in serving the project's fixture rows; nothing reaches
the Hub. The fixture ``tests/fixtures/tasks/speed_bench.jsonl`` holds invented rows in SPEED-Bench's schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from analysis.categories import category_table
from analysis.frame import rows_to_frame
from specbench.tasks import TaskFacts, files, load_task, load_task_facts, speed_bench
from specbench.tasks.sources import resolved_revision

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "speed_bench.jsonl"
YAML = Path(__file__).resolve().parents[2] / "conf" / "task" / "speed_bench.yaml"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cfg(**overrides) -> dict:
    return {**OmegaConf.to_container(OmegaConf.load(YAML)), "data_files": str(FIXTURE), **overrides}


def rows() -> list[dict]:
    return files.read_rows(FIXTURE)


def write_rows(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    return path


class _HubCopy:
    """What ``datasets.load_dataset`` returns, as far as the loader reads it: rows, and the cache files a Hub
    dataset is stored in (``<cache>/<name>/<config>/<version>/<commit>/<file>.arrow``)."""

    def __init__(self, items: list[dict], commit: str | None) -> None:
        self.items = items
        folder = f"/cache/nvidia___speed-bench/qualitative/0.0.0/{commit}" if commit else "/cache/in-memory"
        self.cache_files = [{"filename": f"{folder}/speed-bench-test.arrow"}]

    def to_list(self) -> list[dict]:
        return list(self.items)


@pytest.fixture
def hub(monkeypatch):
    """``datasets.load_dataset`` serving the fixture rows; the calls it got."""
    datasets = pytest.importorskip("datasets")
    calls: list[tuple[tuple, dict]] = []

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return _HubCopy(rows(), COMMIT)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


# ----------------------------------------------------------------------------- the revision


def test_the_revision_is_a_named_default_passed_to_datasets_and_the_resolved_commit_is_kept(hub):
    assert speed_bench.REVISION == "main"
    assert OmegaConf.load(YAML)["revision"] == speed_bench.DEFAULTS["revision"] == "main"
    prompts, facts = load_task_facts(cfg(data_files=None))
    assert hub == [(("nvidia/SPEED-Bench", "qualitative"), {"split": "test", "revision": "main"})]
    assert [p.prompt_id for p in prompts] == [r["question_id"] for r in rows()]
    assert (facts.revision, facts.resolved_revision) == ("main", COMMIT)
    assert facts.to_json()["resolved_revision"] == COMMIT and facts.source.endswith("revision=main")
    # a pinned commit is what is asked for; a null revision takes the named default
    load_task_facts(cfg(data_files=None, revision=COMMIT))
    assert hub[-1][1]["revision"] == COMMIT
    load_task_facts(cfg(data_files=None, revision=None))
    assert hub[-1][1]["revision"] == "main"
    # local files have no revision
    assert load_task_facts(cfg())[1].revision is None


def test_the_resolved_commit_is_read_from_the_datasets_cache_folder():
    assert resolved_revision(_HubCopy([], COMMIT)) == COMMIT
    assert resolved_revision(_HubCopy([], None)) is None
    assert resolved_revision(object()) is None


# ----------------------------------------------------------------------------- rows left out


def _public(tmp_path: Path, front: bool = False) -> Path:
    """The fixture with two rows of the public copy's placeholder (a coding and a roleplay one)."""
    fixture = rows()
    masked = [dict(fixture[0], question_id="f" * 32, turns=[speed_bench.PLACEHOLDER + "\n\n{question}"]),
              dict(fixture[2], question_id="e" * 32, turns=[speed_bench.PLACEHOLDER, "Go on."])]
    return write_rows(tmp_path / f"public{'_front' if front else ''}.jsonl", masked + fixture if front else fixture + masked)


def test_skipped_rows_are_counted_per_category_and_name_the_task(tmp_path):
    path = _public(tmp_path)
    prompts, facts = load_task_facts(cfg(data_files=str(path), unresolved="skip"))
    assert [p.prompt_id for p in prompts] == [r["question_id"] for r in rows()]
    assert dict(facts.skipped) == {"coding": 1, "roleplay": 1} and facts.n_skipped == 2
    assert facts.label == "speed_bench-skip2" and facts.prompts == len(rows())
    assert facts.to_json() == {"name": "speed_bench", "label": "speed_bench-skip2", "source": f"local files {str(path)!r}",
                               "revision": None, "resolved_revision": None, "prompts": len(rows()), "skipped": 2,
                               "skipped_by_category": {"coding": 1, "roleplay": 1}}
    # the count is of the selection: categories without a placeholder row lose nothing, and keep the name
    _, math = load_task_facts(cfg(data_files=str(path), unresolved="skip", categories=["math", "writing"]))
    assert math.label == "speed_bench" and math.n_skipped == 0
    _, coding = load_task_facts(cfg(data_files=str(path), unresolved="skip", categories=["coding"]))
    assert coding.label == "speed_bench-skip1" and dict(coding.skipped) == {"coding": 1}
    # the first N of the benchmark's order hold a placeholder row: counted, though N rows still run
    front = _public(tmp_path, front=True)
    kept, first = load_task_facts(cfg(data_files=str(front), unresolved="skip", n_prompts=3))
    assert len(kept) == 3 and first.label == "speed_bench-skip2"
    assert load_task_facts(cfg(data_files=str(path), unresolved="skip", n_prompts=3))[1].label == "speed_bench"
    # load_task is load_task_facts' prompts
    assert load_task(cfg(data_files=str(path), unresolved="skip")) == prompts


def test_a_whole_set_keeps_its_name():
    _, facts = load_task_facts(cfg(unresolved="skip"))
    assert facts.label == "speed_bench" and facts.n_skipped == 0 and dict(facts.skipped) == {}
    assert TaskFacts("specbench", "s", 3).label == "specbench"
    _, other = load_task_facts({"name": "embedded", "loader": "embedded"})
    assert other.label == "embedded" and other.revision is None


# ----------------------------------------------------------------------------- the per-category table


def _record(method: str, category: str, prompt: str, tokens_per_s: float, gamma: int | None = 2,
            accepted: int = 0, drafted: int = 0, rounds: int = 0, turn: int = 1) -> dict:
    record = {"pair": "p", "target": "t", "draft": None if method == "ar" else "d", "method": method,
              "task": "speed_bench", "category": category, "prompt_id": prompt, "turn": turn,
              "gamma_init": None if method == "ar" else gamma, "temperature": 0.0, "new_tokens": 10,
              "wall_ms": 10_000 / tokens_per_s, "tokens_per_s": tokens_per_s, "ttft_ms": 1.0, "job_status": "complete"}
    if method != "ar":
        record.update(accepted=accepted, drafted=drafted, rounds=rounds)
    return record


def test_the_category_table_has_acceptance_throughput_and_prompt_turns():
    """Per category: acceptance Σ accepted / Σ drafted and tokens per round (Σ accepted + Σ rounds) / Σ rounds of
    each initial γ's records, mean over γ; throughput mean over γ; n the distinct prompt turns."""
    rows_ = [_record("ar", "math", "a", 10.0), _record("ar", "math", "a", 10.0, turn=2),
             _record("ar", "roleplay", "b", 20.0),
             _record("specdecode", "math", "a", 15.0, 2, accepted=6, drafted=8, rounds=4),
             _record("specdecode", "math", "a", 15.0, 2, accepted=2, drafted=8, rounds=4, turn=2),
             _record("specdecode", "math", "a", 30.0, 4, accepted=3, drafted=12, rounds=3),
             _record("specdecode", "math", "a", 30.0, 4, accepted=3, drafted=12, rounds=3, turn=2),
             _record("specdecode", "roleplay", "b", 20.0, 2, accepted=1, drafted=4, rounds=2),
             _record("specdecode", "roleplay", "b", 10.0, 4, accepted=4, drafted=4, rounds=1)]
    table = category_table(rows_to_frame(rows_))
    data = table.data.set_index("category")
    math = data.loc["math"]
    assert math["acceptance"] == pytest.approx((8 / 16 + 6 / 24) / 2)
    assert math["tokens_per_round"] == pytest.approx(((8 + 8) / 8 + (6 + 6) / 6) / 2)
    assert math["tokens_per_s"] == pytest.approx((15.0 + 30.0) / 2) and math["speedup"] == pytest.approx(2.25)
    assert math["n_turns"] == 2 and math["n_gamma"] == 2
    roleplay = data.loc["roleplay"]
    assert roleplay["acceptance"] == pytest.approx((1 / 4 + 4 / 4) / 2) and roleplay["n_turns"] == 1
    assert data.loc["All", "n_turns"] == 3
    assert data.loc["All", "acceptance"] == pytest.approx((9 / 20 + 10 / 28) / 2)
    cell = table.display.iloc[0]
    assert cell["math"] == "2.25× (acc 0.38, n 2)" and cell["roleplay"] == "0.75× (acc 0.62, n 1)"
    assert "acceptance rate" in table.caption and "prompt turns" in table.caption
