"""The long map's module tables (``docs/pages/house.md``), generated from the modules' own docstrings.

A page holds one block per package, written by ``python -m analysis.docs refresh`` and checked by
``python -m analysis.docs check`` (and ``tests/project/test_house_map.py``), as the record's fields are
(``analysis.docs``)::

    <!-- modules: methods -->
    ...one row per module of methods/: its path and its docstring's first paragraph...
    <!-- /modules -->

So a new module is named on the map by its own docstring and a refresh, never by a hand edit; a module without a
docstring cannot be rendered and fails the check. The modules are read as text (``ast``), never imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a block generated from the docstrings of one package's modules: ``<!-- modules: PACKAGE -->`` … ``<!-- /modules -->``
MODULES_RE = re.compile(r"(?P<open><!-- modules: (?P<package>[\w/]+) -->\n)(?P<body>.*?)(?P<close><!-- /modules -->)",
                        re.S)


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line, as Markdown (``x`` for reST's double backticks,
    pipes escaped for a table cell); a module without a docstring fails, naming it."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    if not doc or not doc.strip():
        raise ValueError(f"{path}: no module docstring (the house map is generated from it: say what the module is)")
    paragraph = " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
    return paragraph.replace("``", "`").replace("|", "\\|")


def render_modules(package: str, root: Path = ROOT) -> str:
    """A modules block's body: one table row per module of ``package`` (a folder under ``root``, subpackages
    included), by path, with its docstring's first paragraph."""
    folder = root / package
    if not folder.is_dir():
        raise ValueError(f"modules: no package folder {package!r}")
    lines = ["> Generated from the modules' docstrings (their first paragraph). "
             "Refresh: `python -m analysis.docs refresh`.", "", "| module | what it is |", "|---|---|"]
    for path in sorted(folder.rglob("*.py")):
        lines.append(f"| `{path.relative_to(root).as_posix()}` | {summary(path)} |")
    return "\n".join(lines) + "\n"


def module_blocks(text: str) -> list[re.Match]:
    return list(MODULES_RE.finditer(text))


def refresh_modules(text: str, root: Path = ROOT) -> str:
    """The Markdown with every modules block rewritten from the modules' docstrings."""
    out, end = [], 0
    for match in module_blocks(text):
        out += [text[end:match.start("body")], render_modules(match["package"], root)]
        end = match.end("body")
    return "".join([*out, text[end:]])


def stale_modules(doc: Path, root: Path = ROOT) -> list[str]:
    """One line per modules block of ``doc`` that differs from what the modules' docstrings render (or cannot be
    rendered: a module without a docstring)."""
    text = doc.read_text(encoding="utf-8")
    problems = []
    for match in module_blocks(text):
        line = text.count("\n", 0, match.start()) + 1
        try:
            expected = render_modules(match["package"], root)
        except (OSError, ValueError, SyntaxError) as err:
            problems.append(f"{doc.name}:{line}: {err}")
            continue
        if match["body"] != expected:
            problems.append(f"{doc.name}:{line}: the modules block of {match['package']}/ differs from its modules' "
                            "docstrings (run `python -m analysis.docs refresh`)")
    return problems


def without_module_blocks(text: str) -> str:
    """``text`` with each modules block replaced by as many newlines (line numbers kept): what a person wrote."""
    return MODULES_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
