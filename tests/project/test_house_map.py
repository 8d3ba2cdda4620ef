"""The long map (``docs/pages/house.md``) names every module of the four packages, and draws the layers the
import contracts enforce (issue 42: the map had fallen ten modules behind and drew ``jobs ─▶ replay``, which a
contract forbids)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOUSE = (ROOT / "docs" / "pages" / "house.md").read_text(encoding="utf-8")


def test_every_module_is_named_in_the_house_map():
    """Every module but a dataset's: a dataset is one module of ``specbench/tasks/`` found by its name (with its
    task file and fixture, ``tests/specbench/test_task_modules.py``), so adding one touches no map."""
    from specbench.tasks import TASKS

    missing = []
    for package in ("specbench", "methods", "runners", "analysis"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name in ("__init__.py", "__main__.py") or "hetero" in path.parts:
                continue
            if path.parent == ROOT / "specbench" / "tasks" and path.stem in TASKS.declared():
                continue  # a dataset module
            if f"`{path.name}`" not in HOUSE and f"{path.stem}.py" not in HOUSE:
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"name these in docs/pages/house.md's module table: {missing}"


def test_the_maps_do_not_draw_an_import_the_contracts_forbid():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # (tomllib is 3.11+; the project runs on 3.10)
    assert re.search(r'source_modules = \["runners\.jobs"\]\s*\nforbidden_modules = \["runners\.replay"\]', pyproject)
    for doc in (HOUSE, (ROOT / "README.md").read_text(encoding="utf-8")):
        assert "jobs ─▶ replay" not in doc and "jobs never imports replay" in doc


def test_no_test_module_imports_another():
    """What several test modules share lives in ``tests/helpers/`` (issue 42)."""
    modules = {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\s*(?:from|import)\s+(test_\w+)", line)
            if m and m.group(1) in modules:
                found.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not found, found
