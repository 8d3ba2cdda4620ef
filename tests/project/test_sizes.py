"""The house's size rule (issue 51, done-when): no module of the product over ``MAX_MODULE_LINES`` lines and no
function over ``MAX_FUNCTION_LINES``, checked here rather than remembered. The product is the four packages and
``run.py``; ``scripts/`` (one-off measurements) and ``tests/`` are outside the rule. A module that outgrows it is cut
by concept (``docs/pages/house.md``), not by line count."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("specbench", "methods", "runners", "analysis")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def product_modules() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py")) + [ROOT / "run.py"]


def oversized(paths: list[Path]) -> tuple[list[str], list[str]]:
    """``(modules over the line limit, functions over theirs)``, each as ``path: lines`` / ``path:name: lines``."""
    modules, functions = [], []
    for path in paths:
        text = path.read_text()
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if len(text.splitlines()) > MAX_MODULE_LINES:
            modules.append(f"{where}: {len(text.splitlines())}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    functions.append(f"{where}:{node.name}: {lines}")
    return modules, functions


def test_no_module_or_function_of_the_product_is_over_its_limit():
    paths = product_modules()
    assert len(paths) > 100  # the scan found the house, not an empty folder
    modules, functions = oversized(paths)
    assert modules == [], f"modules over {MAX_MODULE_LINES} lines (cut them by concept): {modules}"
    assert functions == [], f"functions over {MAX_FUNCTION_LINES} lines: {functions}"


def test_the_rule_sees_a_long_module_and_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_function = tmp_path / "long_function.py"
    long_function.write_text(f"def f():\n{body}\n")
    long_module = tmp_path / "long_module.py"
    long_module.write_text("\n".join(f"y{i} = {i}" for i in range(MAX_MODULE_LINES + 1)) + "\n")
    modules, functions = oversized([long_function, long_module])
    assert [m.split(":")[0].endswith("long_module.py") for m in modules] == [True]
    assert len(functions) == 1 and ":f: 81" in functions[0]


ISSUE_MENTION = re.compile(r"\bissues? [0-9]+", re.IGNORECASE)


def issue_mentions(paths: list[Path]) -> list[str]:
    """Lines of the product that name a tracker issue (history belongs to the docs and results/README.md)."""
    return [f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}:{i}" for p in paths
            for i, line in enumerate(p.read_text().splitlines(), 1) if ISSUE_MENTION.search(line)]


def test_no_product_code_names_an_issue(tmp_path):
    assert issue_mentions(product_modules()) == []
    named = tmp_path / "named.py"
    named.write_text('"""The rule (issue 40)."""\nx = 1  # Issues 51, 52\nissue = 3\n')
    assert issue_mentions([named]) == [f"{named}:1", f"{named}:2"]
