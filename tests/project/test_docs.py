"""The README and the docs state only what they can regenerate (issue 29, item 2).

Every measured figure sits in a generated block equal to the committed file it names (with that file's
machine and date), none stands outside one, the README stays a front door, its links resolve, and the
docs site builds strictly, failing on a broken link.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from analysis import docs

from helpers import ROOT

README = ROOT / "README.md"
PAGES = ROOT / "docs" / "pages"
DOC_FILES = docs.doc_files(ROOT)


def test_the_docs_exist_and_hold_generated_blocks():
    assert README in DOC_FILES and len(DOC_FILES) > 5, DOC_FILES
    assert sum(len(docs.blocks(f)) for f in DOC_FILES) >= 5


# ----------------------------------------------------------------------------- the real documents

@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_generated_block_equals_the_file_it_names(doc):
    assert docs.stale_blocks(doc, ROOT) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measured_figure_stands_outside_a_generated_block(doc):
    strays = docs.stray_figures(doc)
    assert not strays, "\n".join(map(str, strays)) + (
        "\nmove the figure into a generated block from results/committed/ (python -m analysis.docs), "
        "into the lab notebook results/README.md, or (a setting, not a measurement) into analysis.docs.ALLOWED")


def test_every_allowance_is_explained_and_still_needed():
    assert all(reason.strip() for _, reason in docs.ALLOWED)
    assert docs.unused_allowances(DOC_FILES) == []


def test_every_block_names_its_file_machine_and_date():
    for doc in DOC_FILES:
        for block in docs.blocks(doc):
            first = block.body.splitlines()[0]
            assert block.path.startswith("results/committed/"), f"{doc.name}:{block.line}: {block.path}"
            assert f"`{block.path}`" in first and "measured on" in first, first
            assert re.search(r"\b20\d\d-\d\d-\d\d\b", first), first


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for command in ("make run", "make test", "make test-fast", "make reproduce EXP=", "make docs",
                    "python run.py -m method=gammatune,gammatune_plus gamma=1,2,4,8"):
        assert command in text, command


def _slug(heading: str) -> str:
    """Python-Markdown's ``toc`` slugify (the ids mkdocs gives headings)."""
    value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _anchors(page: Path) -> set[str]:
    text = docs.FENCE_RE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"(?m)^#{1,6}\s+(.+?)\s*#*$", text)}


def test_the_readmes_links_resolve_anchors_included():
    """The README is not part of the site, so the strict build does not check its links: this does."""
    links = re.findall(r"\]\(([^)\s]+)\)", docs.FENCE_RE.sub("", README.read_text(encoding="utf-8")))
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = (README.parent / path) if path else README
        assert target.exists(), f"README links to {link}: no such file"
        if anchor:
            assert anchor in _anchors(target), f"README links to {link}: no such heading in {path}"


def test_every_page_is_in_the_sites_nav():
    config = (ROOT / "docs" / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"^\s+- [^:]+: (\S+\.md)\s*$", config, re.M))
    assert nav == {p.name for p in PAGES.glob("*.md")}


# ----------------------------------------------------------------------------- the tool, on a scratch tree

def _scratch(tmp_path: Path, table: str = "| a | b |\n|---|---|\n| x | 1.54× |\n\nA caption.\n") -> Path:
    recipe = tmp_path / "results" / "committed" / "recipe"
    (recipe / "analysis" / "tables").mkdir(parents=True)
    (recipe / "analysis" / "tables" / "t.md").write_text(table, encoding="utf-8")
    (recipe / "provenance.json").write_text(json.dumps({"provenance": {
        "time_utc": "2026-11-24T19:18:52+00:00", "cpu": "AMD EPYC", "cpu_count": 2, "torch_threads": 2,
        "device": "cpu", "packages": {"torch": "2.13.0+cpu", "transformers": "5.24.0"}}}), encoding="utf-8")
    (recipe / "stats.json").write_text(json.dumps({"a": {"b": 1961372886}, "r": 0.17559}), encoding="utf-8")
    return tmp_path


def test_refresh_writes_the_file_with_its_machine_and_date_and_check_catches_a_change(tmp_path):
    root = _scratch(tmp_path)
    doc = root / "page.md"
    doc.write_text("Before.\n\n<!-- include: results/committed/recipe/analysis/tables/t.md part=table -->\n"
                   "stale text typed by hand\n<!-- /include -->\n\nAfter.\n", encoding="utf-8")
    assert docs.stale_blocks(doc, root)  # a hand-typed body is not the file
    doc.write_text(docs.refresh_text(doc.read_text(encoding="utf-8"), root), encoding="utf-8")
    assert docs.stale_blocks(doc, root) == []
    text = doc.read_text(encoding="utf-8")
    assert "| x | 1.54× |" in text and "A caption." not in text  # part=table: the table, not its caption
    assert "AMD EPYC, 2 cores" in text and "2026-11-24" in text and "transformers 5.24.0" in text
    assert text.startswith("Before.") and text.endswith("After.\n")
    assert docs.stray_figures(doc) == []  # the figure is inside the block

    # the committed table is re-rendered with another figure: the block no longer matches
    (root / "results/committed/recipe/analysis/tables/t.md").write_text("| a | b |\n|---|---|\n| x | 1.60× |\n")
    assert docs.stale_blocks(doc, root)
    # and a figure typed by hand into the block is caught the same way
    doc.write_text(docs.refresh_text(doc.read_text(encoding="utf-8"), root).replace("1.60×", "1.70×"))
    assert docs.stale_blocks(doc, root)


def test_a_folder_marked_superseded_says_so_in_every_block_that_shows_it(tmp_path):
    """A committed folder run under replaced rules holds SUPERSEDED.md: its first paragraph follows the source line
    of every block showing one of its files; until a block is refreshed the check says it is stale."""
    root = _scratch(tmp_path)
    doc = root / "page.md"
    doc.write_text("<!-- include: results/committed/recipe/analysis/tables/t.md part=table -->\n<!-- /include -->\n"
                   "<!-- include: results/committed/recipe/stats.json keys=r -->\n<!-- /include -->\n")
    doc.write_text(docs.refresh_text(doc.read_text(), root))
    assert "Superseded" not in doc.read_text() and docs.stale_blocks(doc, root) == []
    (root / "results/committed/recipe" / docs.SUPERSEDED).write_text(
        "Ran before the rule\nthat replaced it.\n\nDetails nobody quotes.\n")
    assert len(docs.stale_blocks(doc, root)) == 2  # both blocks must now say so
    doc.write_text(docs.refresh_text(doc.read_text(), root))
    text = doc.read_text()
    assert text.count("> **Superseded.** Ran before the rule that replaced it.") == 2 and "Details" not in text
    assert docs.stale_blocks(doc, root) == []


def test_a_missing_file_or_provenance_fails_and_the_marker_may_name_machine_and_date(tmp_path):
    root = _scratch(tmp_path)
    doc = root / "page.md"
    doc.write_text("<!-- include: results/committed/nope.md -->\n<!-- /include -->\n")
    assert "no such file" in docs.stale_blocks(doc, root)[0]
    (root / "results" / "committed" / "loose.md").write_text("| a |\n|---|\n| 1 |\n")
    doc.write_text("<!-- include: results/committed/loose.md -->\n<!-- /include -->\n")
    assert "provenance" in docs.stale_blocks(doc, root)[0]
    doc.write_text('<!-- include: results/committed/loose.md machine="a CPU" date=2026-11-23 -->\n<!-- /include -->\n')
    body = docs.refresh_text(doc.read_text(), root)
    assert "a CPU, 2026-11-23" in body and "| 1 |" in body


def test_a_calibration_copied_into_a_newer_folder_keeps_its_own_date(tmp_path):
    """A latency JSON carries its own ``meta.provenance``; the folder's provenance.json (a later run of the
    recipe) does not date it."""
    root = _scratch(tmp_path)
    own = {"time_utc": "2026-11-23T16:00:52+00:00", "cpu": "AMD EPYC", "cpu_count": 2, "torch_threads": 2,
           "device": "cpu", "packages": {"torch": "2.13.0+cpu", "transformers": "5.23.0"}}
    (root / "results" / "committed" / "recipe" / "lat.json").write_text(json.dumps({"meta": {"c": 1.58, "provenance": own}}))
    line = docs.source_line("results/committed/recipe/lat.json", {}, root)
    assert "2026-11-23" in line and "transformers 5.23.0" in line and "its own `meta.provenance`" in line
    assert "2026-11-24" in docs.source_line("results/committed/recipe/stats.json", {}, root)  # no own: the folder's


def test_json_fields_and_rows_options(tmp_path):
    root = _scratch(tmp_path, "| a |\n|---|\n" + "".join(f"| {i} |\n" for i in range(10)))
    body = docs.render("results/committed/recipe/stats.json", {"keys": "a.b,r"}, root)
    assert "| `a.b` | 1,961,372,886 |" in body and "| `r` | 0.1756 |" in body
    with pytest.raises(ValueError, match="no field"):
        docs.render("results/committed/recipe/stats.json", {"keys": "a.c"}, root)
    body = docs.render("results/committed/recipe/analysis/tables/t.md", {"part": "table", "rows": "3"}, root)
    assert "| 2 |" in body and "| 3 |" not in body and "7 more rows" in body
    with pytest.raises(ValueError, match="unknown include option"):
        docs.parse_args("x.md colour=red")


def test_a_log_include_keeps_the_lines_its_regex_finds(tmp_path):
    root = _scratch(tmp_path)
    log = root / "results" / "committed" / "run.log"
    log.write_text("=== start\nok   a 12.5 tok/s\r\x1b[Kprogress 50%\rok   b 3.0 tok/s\nFAIL c\n")
    doc = root / "page.md"
    doc.write_text('<!-- include: results/committed/run.log lines="^(ok|FAIL) " machine="a GPU" date=2026-11-25 -->\n'
                   "<!-- /include -->\n")
    body = docs.refresh_text(doc.read_text(), root)
    assert "\n    ok   a 12.5 tok/s\n    ok   b 3.0 tok/s\n    FAIL c\n" in body and "progress" not in body
    assert docs.stale_blocks(doc, root)  # not refreshed on disk yet: stale
    doc.write_text(body)
    assert docs.stale_blocks(doc, root) == []  # and fresh once written
    with pytest.raises(ValueError, match="no line matches"):
        docs.render("results/committed/run.log", {"lines": "^nothing", "machine": "m", "date": "2026-11-25"}, root)


def test_a_marker_shown_in_a_code_fence_is_no_block_but_a_figure_there_is_stray(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text("```markdown\n<!-- include: results/committed/nope.md -->\nran at 21.1 tokens/s\n"
                   "<!-- /include -->\n```\n")
    assert docs.blocks(doc) == []
    assert [s.figure for s in docs.stray_figures(doc)] == ["21.1 tokens/s"]


MEASURED = ["ran at 21.1 tokens/s", "1.54× the target", "1.16 × the best fixed γ", "70.9 ms/token",
            "verify 131 ms (k = 2)", "c = 5.0", "first load ≈ 45 s", "about 16 % of a round", "a 1.2x speedup",
            "50 min on this CPU", "0.5% overhead"]
NOT_MEASURED = ["γ = 5", "τ = 0.4", "10 × 64 tokens", "3 jobs × 4 prompts × 32 tokens", "Sec. 5", "eq. 7",
                "T = 1", "0x1f", "`model_budget=70GB`", "Table 2", "2026-11-24", "`hetero.max_nodes` (32)",
                "pair × method × task", "Python ≥ 3.10", "Alg. 2 / 4 / 3 / 1", "γ ∈ {1..8, 12, 16, 20, 24}"]


@pytest.mark.parametrize("text", MEASURED)
def test_the_figure_pattern_catches_measurements(text, tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(text + "\n")
    assert docs.stray_figures(doc, allowed=()), text


@pytest.mark.parametrize("text", NOT_MEASURED)
def test_the_figure_pattern_leaves_settings_and_numbering_alone(text, tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(text + "\n")
    assert docs.stray_figures(doc, allowed=()) == [], text


def test_an_allowance_covers_only_its_own_fragment(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text("a 95 % CI, and a 95 % speedup measured at 1.5×\n")
    strays = docs.stray_figures(doc, allowed=(("95 % CI", "a confidence level"),))
    assert [s.figure for s in strays] == ["95 %", "1.5×"]


# ----------------------------------------------------------------------------- the site

def _build(docs_dir: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(docs_dir / "mkdocs.yml"), "-d", str(site)],
                          capture_output=True, text=True, timeout=300)


def test_the_site_builds_strictly_and_a_broken_link_or_anchor_fails(tmp_path):
    pytest.importorskip("mkdocs")
    copy = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", copy, ignore=shutil.ignore_patterns("site"))
    built = _build(copy, tmp_path / "site")
    assert built.returncode == 0, built.stderr[-2000:]
    assert (tmp_path / "site" / "performance" / "index.html").is_file()

    page = copy / "pages" / "performance.md"
    original = page.read_text(encoding="utf-8")
    for broken in ("[gone](no-such-page.md)", "[gone](records.md#no-such-heading)"):
        page.write_text(original + f"\n{broken}\n", encoding="utf-8")
        failed = _build(copy, tmp_path / "site2")
        assert failed.returncode != 0, broken
