"""Generated blocks of the README and the docs: every measured figure they state is read from a file.

The README and ``docs/pages/*.md`` state no measured figure (a speedup, tokens/s, ms, a share) typed by
hand. A figure appears inside a generated block, whose content this module writes from a committed file
under ``results/committed/`` (a table ``python -m analysis`` rendered), with a source line naming the
file, the machine and the date it was measured on::

    <!-- include: results/committed/<recipe>/analysis/tables/<table>.md [part=table] -->
    ...written by ``python -m analysis.docs refresh``; never edited by hand...
    <!-- /include -->

``part=table`` keeps the file's first Markdown table and drops its caption; ``rows=N`` (with it) keeps its
first N rows. ``lines=REGEX`` shows the lines of a text file (a committed log) that the regular expression
finds, verbatim, as an indented code block. A JSON file is shown as a table of the fields ``keys=a.b,c`` names (dotted paths). The machine and date come
from the file's own ``meta.provenance`` (a calibration JSON, which may predate the folder it was copied
into), else from the nearest ``provenance.json`` above the file (``python -m runners.jobs.export`` writes one per
recipe); a folder without one (the policy lab) names them in the marker: ``machine="…" date=YYYY-MM-DD``.
A committed folder run under rules since replaced holds a ``SUPERSEDED.md`` (:data:`SUPERSEDED`): its first
paragraph follows the source line of every block that shows a file of that folder (``superseded``), so no page
shows such a result without saying so.

The long map's module tables (``docs/pages/house.md``: ``<!-- modules: PACKAGE -->``) are generated from the
modules' docstrings (``analysis.module_map``). The record's field definitions are generated the same way, from their one declaration (``specbench.records``:
``Record``'s field metadata), one block per group of fields (``render_fields``)::

    <!-- fields: timing -->
    ...written by ``python -m analysis.docs refresh``...
    <!-- /fields -->

``python -m analysis.docs refresh`` rewrites every block from its file (a fields block from the declaration);
``python -m analysis.docs check`` (and ``tests/project/test_docs.py``) fails when a block differs from what its
file (or the declaration) renders, when a file is missing, or when a measured-looking figure (:data:`FIGURE_RE`)
stands outside every block and is not one of the explained exceptions of :data:`ALLOWED` or a registered claim's
(``analysis.claims``: a sentence with a check over the committed files behind it). Dated lab notes with no
committed file behind them belong in ``results/README.md``, the lab notebook, which this rule does not cover.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from analysis.module_map import refresh_modules, stale_modules, without_module_blocks

ROOT = Path(__file__).resolve().parents[1]
#: the files whose figures must come from committed files (the lab notebook results/README.md is not one)
DOC_GLOBS = ("README.md", "docs/pages/**/*.md")
#: the file that marks a committed folder as run under rules since replaced (module docstring)
SUPERSEDED = "SUPERSEDED.md"

INCLUDE_RE = re.compile(r"(?P<open><!-- include: (?P<args>[^\n]*?) -->\n)(?P<body>.*?)(?P<close><!-- /include -->)",
                        re.S)
COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
FENCE_RE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)

#: what a measured figure looks like: a ratio (1.54×, 1.2x, 1.16 × the best), a rate (21.1 tokens/s), a time
#: (70.9 ms, 45 s, 50 min), a share (16 %), a cost ratio (c = 5.0). Not matched: products of sizes
#: (10 × 64 tokens), config values (γ = 5, τ = 0.4, T = 1), section and equation numbers (eq. 7, Sec. 5).
FIGURE_RE = re.compile(
    r"""(?<![\w.])(?:
        \d[\d,]*(?:\.\d+)?\ ?×(?!\ ?\d)               # 1.54×, 1.16 × the best fixed γ (not 10 × 64)
      | \d[\d,]*(?:\.\d+)?x(?![\w])                   # 1.2x (not 0x10)
      | \d[\d,]*(?:\.\d+)?\ ?(?:tokens|tok)/s          # 21.1 tokens/s
      | \d[\d,]*(?:\.\d+)?\ ?ms(?![\w])                # 70.9 ms, 12 ms/token
      | \d[\d,]*(?:\.\d+)?\ ?(?:s|sec|min|minutes|seconds|h|hours)(?![\w/])   # 45 s, 50 min
      | \d[\d,]*(?:\.\d+)?\ ?%                         # 16 %, 0.5%
    )
    | \bc\ ?[=≈]\ ?\d                                  # c = 5.0 (a measured cost ratio)
    """,
    re.X,
)

#: figure-like text allowed outside a block: (a fragment of the line that holds it, why it is no measurement)
ALLOWED: tuple[tuple[str, str], ...] = (
    ("95 %", "a confidence level (the analysis' jackknife intervals), not a measurement"),
    ("(10 %)", "the default of `python -m analysis --drift-threshold`, a setting"),
    ("polling every 10 ms", "hf-bench's streamer design (a protocol fact from its source), not our measurement"),
    ("(target: ≤ 1 %)", "the loop's overhead target, a goal, not a measurement"),
    ("fails after 60 s", "the test suite's per-test limit (tests/conftest.py: FAST_TIMEOUT_S), a setting"),
    ("a `slow` one after 900 s", "the slow tests' limit (pyproject.toml: timeout), a setting"),
)


@dataclass(frozen=True)
class Block:
    """One generated block: the file it lives in, its 1-based line, the marker's arguments, its body."""

    doc: Path
    line: int
    path: str
    options: dict[str, str]
    body: str


@dataclass(frozen=True)
class Stray:
    """A measured-looking figure outside every block: where, what, and the line it stands in."""

    doc: Path
    line: int
    figure: str
    text: str

    def __str__(self) -> str:
        return f"{_rel(self.doc)}:{self.line}: {self.figure!r} outside a generated block: {self.text.strip()[:120]}"


def _rel(path: Path, root: Path = ROOT) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def doc_files(root: Path = ROOT) -> list[Path]:
    """The README and every docs page, in a stable order."""
    files: list[Path] = []
    for pattern in DOC_GLOBS:
        files.extend(sorted(root.glob(pattern)))
    return files


def parse_args(args: str) -> tuple[str, dict[str, str]]:
    """``PATH key=value …`` of a marker (shell quoting: ``machine="AMD EPYC, 2 cores"``)."""
    words = shlex.split(args)
    if not words:
        raise ValueError("an include marker names no file")
    options = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or key not in {"part", "rows", "keys", "lines", "machine", "date"}:
            raise ValueError(f"unknown include option {word!r} "
                             f"(known: part=table, rows=N, keys=a.b,c, lines=REGEX, machine=…, date=…)")
        options[key] = value
    if options.get("part", "table") != "table":
        raise ValueError(f"unknown part={options['part']!r} (known: part=table)")
    if "rows" in options and (not options["rows"].isdigit() or "part" not in options):
        raise ValueError(f"rows={options['rows']!r}: a positive count, with part=table")
    return words[0], options


def _unfenced(text: str) -> str:
    """``text`` with fenced code blanked out (same length, newlines kept): a marker shown as an example
    in a code block is no block."""
    return FENCE_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _includes(text: str) -> list[re.Match]:
    """The include blocks of ``text`` outside fenced code (matched on the unfenced text, same offsets)."""
    return list(INCLUDE_RE.finditer(_unfenced(text)))


def blocks(doc: Path, text: str | None = None) -> list[Block]:
    """The generated blocks of one Markdown file."""
    text = doc.read_text(encoding="utf-8") if text is None else text
    found = []
    for match in _includes(text):
        path, options = parse_args(match["args"])
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(doc, line, path, options, match["body"]))
    return found


def _provenance(file: Path, root: Path) -> dict | None:
    """The file's own provenance when it carries one (a calibration JSON's ``meta.provenance``: it may be
    older than the recipe folder it was copied into), else the nearest ``provenance.json`` above it."""
    if file.suffix == ".json" and file.is_file():
        own = (json.loads(file.read_text(encoding="utf-8")).get("meta") or {}).get("provenance")
        if isinstance(own, dict) and own.get("time_utc"):
            return {"file": file, "own": True, **own}
    for folder in file.parents:
        candidate = folder / "provenance.json"
        if candidate.is_file():
            return {"file": candidate, **json.loads(candidate.read_text(encoding="utf-8"))}
        if folder == root or folder == folder.parent:
            return None
    return None


def source_line(path: str, options: dict[str, str], root: Path = ROOT) -> str:
    """The block's first line: the file, the machine and the date it was measured on, and where those come from."""
    file = root / path
    prov = _provenance(file, root)
    if prov is not None:
        p = prov.get("provenance", prov)
        machine = ", ".join(str(x) for x in (
            p.get("cpu"),
            f"{p['cpu_count']} cores" if p.get("cpu_count") else None,
            f"{p['torch_threads']} torch threads" if p.get("torch_threads") else None,
            p.get("device"),
            ", ".join(p.get("cuda_devices") or []) or None,
        ) if x)
        packages = p.get("packages") or {}
        versions = ", ".join(f"{k} {packages[k]}" for k in ("torch", "transformers") if packages.get(k))
        date = str(p.get("time_utc", ""))[:10]
        where = "its own `meta.provenance`" if prov.get("own") else f"`{_rel(prov['file'], root)}`"
        return (f"> Generated from `{path}`: measured on {machine} ({versions}), {date}, as recorded in {where}. "
                f"Refresh: `python -m analysis.docs refresh`.")
    if "machine" in options and "date" in options:
        return (f"> Generated from `{path}`: measured on {options['machine']}, {options['date']} (named in this "
                f"block's marker: the folder has no provenance.json). Refresh: `python -m analysis.docs refresh`.")
    raise ValueError(f"{path}: no provenance.json above it; name the machine and date in the marker "
                     f"(machine=\"…\" date=YYYY-MM-DD)")


def superseded(file: Path, root: Path = ROOT) -> str | None:
    """The first paragraph of the nearest ``SUPERSEDED.md`` in a folder holding ``file`` (up to ``root``), joined
    into one line; None when no folder above it is marked (module docstring)."""
    for folder in file.parents:
        marker = folder / SUPERSEDED
        if marker.is_file():
            paragraph = marker.read_text(encoding="utf-8").strip().split("\n\n")[0]
            return " ".join(line.strip().lstrip("#").strip() for line in paragraph.splitlines() if line.strip())
        if folder == root or folder == folder.parent:
            return None
    return None


def head(path: str, options: dict[str, str], root: Path = ROOT) -> str:
    """A block's head: its source line, then, for a folder run under replaced rules, what ``superseded`` says."""
    note = superseded(root / path, root)
    return source_line(path, options, root) + (f"\n>\n> **Superseded.** {note}" if note else "")


def _first_table(text: str, rows: int | None = None) -> str:
    lines, started = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            started = True
            lines.append(line)
        elif started:
            break
    if not lines:
        raise ValueError("part=table: the file holds no Markdown table")
    if rows is not None and len(lines) > rows + 2:
        left = len(lines) - rows - 2
        lines = [*lines[:rows + 2], f"\n*… {left} more rows in the file.*"]
    return "\n".join(lines)


def _json_fields(file: Path, keys: str) -> str:
    """A two-column table of the named fields (dotted paths) of a JSON file."""
    data = json.loads(file.read_text(encoding="utf-8"))
    rows = ["| field | value |", "|---|---|"]
    for key in keys.split(","):
        value = data
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ValueError(f"{file.name}: no field {key!r}")
            value = value[part]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            shown = str(value)
        elif isinstance(value, int) or float(value).is_integer():
            shown = f"{int(value):,}"
        else:
            shown = f"{value:.4g}"
        rows.append(f"| `{key}` | {shown} |")
    return "\n".join(rows)


def render(path: str, options: dict[str, str], root: Path = ROOT) -> str:
    """A block's body as its file renders it today."""
    file = root / path
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no such file (an include must name a committed file)")
    if file.suffix == ".json":
        if "keys" not in options:
            raise ValueError(f"{path}: a JSON include names its fields (keys=a.b,c)")
        return f"{head(path, options, root)}\n\n{_json_fields(file, options['keys'])}\n"
    content = file.read_text(encoding="utf-8").strip()
    if "lines" in options:  # a log: the lines the regex finds, verbatim (a progress bar's \r fragments split off)
        pattern = re.compile(options["lines"])
        kept = [line.rstrip() for line in content.splitlines() if pattern.search(line)]
        if not kept:
            raise ValueError(f"{path}: no line matches lines={options['lines']!r}")
        content = "\n".join("    " + line for line in kept)  # an indented code block (a fence would hide the block)
    elif options.get("part") == "table":
        content = _first_table(content, int(options["rows"]) if "rows" in options else None)
    return f"{head(path, options, root)}\n\n{content}\n"


def refresh_text(text: str, root: Path = ROOT) -> str:
    """The Markdown with every block rewritten from its file, every fields block from the declaration, and every
    modules block from the modules' docstrings (``analysis.module_map``)."""
    out, end = [], 0
    for match in _includes(text):
        path, options = parse_args(match["args"])
        out += [text[end:match.start("body")], render(path, options, root)]
        end = match.end("body")
    return refresh_modules(refresh_fields("".join([*out, text[end:]])), root)


def stale_blocks(doc: Path, root: Path = ROOT) -> list[str]:
    """One line per block of ``doc`` that differs from (or cannot be rendered from) its file, and per fields block
    that differs from the record's declaration (``stale_fields``)."""
    problems = []
    for block in blocks(doc):
        try:
            expected = render(block.path, block.options, root)
        except (OSError, ValueError) as err:
            problems.append(f"{_rel(doc, root)}:{block.line}: {err}")
            continue
        if block.body != expected:
            problems.append(f"{_rel(doc, root)}:{block.line}: the block differs from {block.path} "
                            f"(run `python -m analysis.docs refresh`)")
    return problems + stale_fields(doc, root) + stale_modules(doc, root)


# ---------------------------------------------------------------------- the record's declared fields

#: a block generated from the record's declaration (``specbench.records``: ``Record``'s field metadata), one
#: per group of fields: ``<!-- fields: GROUP -->`` … ``<!-- /fields -->``; no measured figure, so no file or date
FIELDS_RE = re.compile(r"(?P<open><!-- fields: (?P<group>\w+) -->\n)(?P<body>.*?)(?P<close><!-- /fields -->)", re.S)


def render_fields(group: str) -> str:
    """A fields block's body: the group's title and what its fields share, then one table row per declared field
    (its name, unit and definition), in the declaration's order."""
    from specbench.records import GROUPS, declaration

    if group not in GROUPS:
        raise ValueError(f"fields: unknown group {group!r} (known: {', '.join(GROUPS)})")
    title, about = GROUPS[group]
    lines = ["> Generated from `specbench/records.py` (`Record`'s declared fields). "
             "Refresh: `python -m analysis.docs refresh`.", "", f"**{title}.** {about}", "",
             "| field | unit | definition |", "|---|---|---|"]
    for d in declaration():
        if d.group == group:
            lines.append(f"| `{d.name}` | {d.unit or '—'} | {d.doc.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def _field_blocks(text: str) -> list[re.Match]:
    return list(FIELDS_RE.finditer(_unfenced(text)))


def stale_fields(doc: Path, root: Path = ROOT) -> list[str]:
    """One line per fields block of ``doc`` that differs from the declaration, and, on a page that has fields
    blocks, one per group of the declaration none of them shows."""
    text = doc.read_text(encoding="utf-8")
    problems, shown = [], set()
    for match in _field_blocks(text):
        line = text.count("\n", 0, match.start()) + 1
        shown.add(match["group"])
        try:
            expected = render_fields(match["group"])
        except ValueError as err:
            problems.append(f"{_rel(doc, root)}:{line}: {err}")
            continue
        if match["body"] != expected:
            problems.append(f"{_rel(doc, root)}:{line}: the fields block differs from specbench/records.py's "
                            f"declaration (run `python -m analysis.docs refresh`)")
    if shown:
        from specbench.records import GROUPS

        problems += [f"{_rel(doc, root)}: no fields block shows group {g!r}" for g in GROUPS if g not in shown]
    return problems


def refresh_fields(text: str) -> str:
    """The Markdown with every fields block rewritten from the declaration."""
    out, end = [], 0
    for match in _field_blocks(text):
        out += [text[end:match.start("body")], render_fields(match["group"])]
        end = match.end("body")
    return "".join([*out, text[end:]])


def _outside(text: str) -> str:
    """``text`` without its generated blocks and HTML comments (each replaced by as many newlines, so line
    numbers are kept): what a person wrote."""
    for match in reversed(_includes(text)):
        text = text[:match.start()] + "\n" * match.group(0).count("\n") + text[match.end():]
    return COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), without_module_blocks(text))


def stray_figures(doc: Path, text: str | None = None, allowed=None) -> list[Stray]:
    """Measured-looking figures of ``doc`` outside its generated blocks and not explained by ``allowed`` (default:
    :data:`ALLOWED` and the registered claims' figures, ``analysis.claims``: a check stands behind those)."""
    if allowed is None:
        from analysis.claims import allowances

        allowed = ALLOWED + allowances()
    text = doc.read_text(encoding="utf-8") if text is None else text
    outside = _outside(text)
    strays = []
    for number, line in enumerate(outside.splitlines(), start=1):
        for match in FIGURE_RE.finditer(line):
            if any(_covers(line, fragment, match.span()) for fragment, _ in allowed):
                continue
            strays.append(Stray(doc, number, match.group(0), line))
    return strays


def _covers(line: str, fragment: str, span: tuple[int, int]) -> bool:
    start = line.find(fragment)
    while start >= 0:
        if start <= span[0] and span[1] <= start + len(fragment):
            return True
        start = line.find(fragment, start + 1)
    return False


def unused_allowances(files: list[Path], allowed=ALLOWED) -> list[str]:
    """Allowed fragments no document uses any more (an allowance outliving its text is removed)."""
    texts = [_outside(f.read_text(encoding="utf-8")) for f in files]
    return [fragment for fragment, _ in allowed if not any(fragment in t for t in texts)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["refresh", "check"])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md, docs/pages/)")
    args = parser.parse_args(argv)
    files = args.files or doc_files()
    if args.command == "refresh":
        for doc in files:
            text = doc.read_text(encoding="utf-8")
            new = refresh_text(text)
            if new != text:
                doc.write_text(new, encoding="utf-8")
                print(f"refreshed {_rel(doc)} ({len(blocks(doc, new))} blocks)")
        return 0
    problems = [p for doc in files for p in stale_blocks(doc)]
    problems += [str(s) for doc in files for s in stray_figures(doc)]
    for problem in problems:
        print(problem)
    if not problems:
        print(f"ok: {sum(len(blocks(d)) for d in files)} generated blocks in {len(files)} files, no stray figure")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
