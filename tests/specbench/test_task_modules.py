"""Datasets as modules (issue 42, item 3): a dataset is one module ``specbench/tasks/<name>.py``, one task file
``conf/task/<name>.yaml`` and one fixture ``tests/fixtures/tasks/<name>.jsonl``, each found by its name.

For every task file: its name is a key of the lazy registry ``TASKS``, whose entry is the dataset's module,
declaring what ``specbench.tasks.config.TaskModule`` says; it has a fixture, or is listed in ``NO_FIXTURE`` with
the reason; and loading the dataset from its fixture gives prompts, one per row. No module or fixture lies
without its task file, and the package's shared modules import no dataset module (only the registry names them,
as strings, imported on first use).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Mapping
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from specbench.tasks import TASKS, Prompt, load_task, task_source

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "specbench" / "tasks"
FIXTURES = ROOT / "tests" / "fixtures" / "tasks"
NAMES = sorted(p.stem for p in (ROOT / "conf" / "task").glob("*.yaml"))

#: task files whose dataset has no fixture, and why
NO_FIXTURE = {
    "embedded": "its rows ship inside the package (specbench/data/prompts.jsonl); it reads no task.data_files",
}
#: what a fixture is read with beyond its task file: ``custom`` reads the user's own field names, so its fixture
#: names them as a user's file would, and the test sets them as a user does
FIXTURE_SETTINGS = {
    "custom": {"prompt_field": "question", "id_field": "uid", "category_field": "topic", "reference_field": "answer"},
}


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.jsonl"


def fixture_cfg(name: str) -> dict:
    """The task file, reading the dataset's fixture (all of it), as ``run.py task=<name>
    task.data_files=tests/fixtures/tasks/<name>.jsonl`` would."""
    node = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "task" / f"{name}.yaml"))
    node["n_prompts"] = None
    if name not in NO_FIXTURE:
        node["data_files"] = str(fixture(name))
    return {**node, **FIXTURE_SETTINGS.get(name, {})}


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("name", NAMES)
def test_every_task_file_names_a_registered_module(name):
    node = OmegaConf.load(ROOT / "conf" / "task" / f"{name}.yaml")
    assert node["name"] == node["loader"] == name and name in TASKS
    module = TASKS.get(name)  # the registry's entry is the dataset's module, imported on first use
    assert module is importlib.import_module(f"specbench.tasks.{name}") and (PACKAGE / f"{name}.py").is_file()
    assert isinstance(module.DEFAULTS, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in module.DEFAULTS.items()
    )
    assert isinstance(module.FIELDS, tuple) and all(isinstance(f, str) for f in module.FIELDS)
    assert isinstance(module.LOCAL_FILES, bool) and callable(module.source) and callable(module.load)


def test_no_dataset_module_or_fixture_without_its_task_file():
    assert TASKS.names() == NAMES
    assert TASKS.declared() == {name: f"specbench.tasks.{name}" for name in NAMES}  # each module named as its dataset
    assert {p.stem for p in FIXTURES.glob("*.jsonl")} <= set(NAMES)
    assert set(NO_FIXTURE) <= set(NAMES) and all(NO_FIXTURE.values())


@pytest.mark.parametrize("name", NAMES)
def test_every_dataset_has_a_fixture_or_says_why_not(name):
    if name in NO_FIXTURE:
        assert not fixture(name).exists(), f"{name} has a fixture: take it out of NO_FIXTURE"
        assert not TASKS.get(name).LOCAL_FILES  # nothing a fixture could be given as
    else:
        assert fixture(name).is_file(), f"a new dataset needs its rows at {fixture(name).relative_to(ROOT)}"


@pytest.mark.parametrize("name", NAMES)
def test_each_dataset_loads_from_its_fixture(name):
    cfg = fixture_cfg(name)
    prompts = load_task(cfg)
    assert prompts and all(isinstance(p, Prompt) for p in prompts)
    assert all(p.turns and all(isinstance(t, str) and t.strip() for t in p.turns) for p in prompts)
    assert len({p.prompt_id for p in prompts}) == len(prompts)
    if name in NO_FIXTURE:
        assert task_source(cfg) == TASKS.get(name).source(cfg)
    else:  # one prompt per row, read from the fixture and nowhere else
        rows = [line for line in fixture(name).read_text(encoding="utf-8").splitlines() if line.strip()]
        assert len(prompts) == len(rows)
        assert task_source(cfg) == f"local files {cfg['data_files']!r}"


def test_the_shared_modules_import_no_dataset_and_no_dataset_another():
    datasets = {f"specbench.tasks.{name}" for name in NAMES}
    for path in PACKAGE.glob("*.py"):
        others = datasets - {f"specbench.tasks.{path.stem}"}
        assert not imported(path) & others, f"specbench/tasks/{path.name} imports a dataset module"
