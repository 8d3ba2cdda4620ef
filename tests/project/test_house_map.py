"""The long map (``docs/pages/house.md``) names every module of the four packages (generated from their docstrings,
issue 51), and draws the layers the import contracts enforce (issue 42: the map had fallen ten modules behind and
drew ``jobs ─▶ replay``, which a contract forbids)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOUSE = (ROOT / "docs" / "pages" / "house.md").read_text(encoding="utf-8")


PACKAGES = ("specbench", "methods", "runners", "analysis")


def test_every_module_is_on_the_house_map_from_its_own_docstring():
    """The module tables are generated (``analysis.module_map``: one block per package, each current), so a new
    module is named by its docstring and ``python -m analysis.docs refresh``, never by a hand edit (issue 51)."""
    from analysis.module_map import module_blocks, stale_modules

    assert [m["package"] for m in module_blocks(HOUSE)] == list(PACKAGES)
    assert stale_modules(ROOT / "docs" / "pages" / "house.md", ROOT) == []
    missing = [str(p.relative_to(ROOT)) for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
               if f"| `{p.relative_to(ROOT).as_posix()}` |" not in HOUSE]
    assert not missing, missing


def test_a_new_module_makes_its_table_stale_until_a_refresh_and_needs_a_docstring(tmp_path):
    from analysis.module_map import refresh_modules, stale_modules

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "old.py").write_text('"""The old one.\n\nDetails."""\n', encoding="utf-8")
    page = tmp_path / "map.md"
    page.write_text(refresh_modules("# Map\n<!-- modules: pkg -->\n<!-- /modules -->\n", tmp_path), encoding="utf-8")
    assert stale_modules(page, tmp_path) == [] and "| `pkg/old.py` | The old one. |" in page.read_text()
    (tmp_path / "pkg" / "new.py").write_text('"""A new | piped one,\nover two lines."""\n', encoding="utf-8")
    assert "differs from its modules' docstrings" in stale_modules(page, tmp_path)[0]
    page.write_text(refresh_modules(page.read_text(), tmp_path), encoding="utf-8")
    assert stale_modules(page, tmp_path) == [] and "| `pkg/new.py` | A new \\| piped one, over two lines. |" in page.read_text()
    (tmp_path / "pkg" / "bare.py").write_text("x = 1\n", encoding="utf-8")
    assert "no module docstring" in stale_modules(page, tmp_path)[0]


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
