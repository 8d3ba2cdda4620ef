"""The paper-scale leaderboard's figure (issue 41, item 4): ``scripts/specdecode_bench_conformance.py --figure``
draws it from the committed leaderboard tables, so a clean checkout re-makes it without the peer's data."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "specdecode_bench_conformance.py"
LAB = ROOT / "results" / "committed" / "specdecode_bench_lab"
TABLES = [LAB / "leaderboard_b1.md", LAB / "leaderboard_b8.md"]


def test_the_tables_read_back_row_for_row():
    read = runpy.run_path(str(SCRIPT))["read_leaderboard"]
    rows = read(TABLES)
    lines = sum(1 for t in TABLES for ln in t.read_text().splitlines() if ln.startswith("| specdecode-bench"))
    assert len(rows) == lines > 0
    assert {r["B"] for r in rows} == {1, 8}
    assert {r["workload"] for r in rows} == {"cnn", "gsm8k", "instructcoder", "sharegpt"}
    # every panel has its references: the best fixed γ reads 1 over itself, and the oracle bounds the policies at B = 1
    for (pair, workload, b) in {(r["pair"], r["workload"], r["B"]) for r in rows}:
        panel = {r["method"]: r for r in rows if (r["pair"], r["workload"], r["B"]) == (pair, workload, b)}
        assert panel["best_fixed_task"]["x_best_fixed"] == 1.0 and panel["oracle"]["x_oracle"] == 1.0
        if b == 1:
            assert all(r["x_oracle"] <= 1.0 for r in panel.values())


def test_the_figure_is_drawn_from_the_committed_tables(tmp_path):
    out = tmp_path / "fig" / "leaderboard.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--figure", str(out), *map(str, TABLES)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000


def test_a_file_without_a_table_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "notes.md"
    bad.write_text("no table here\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--figure", str(tmp_path / "x.png"), str(bad)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "no leaderboard table" in proc.stderr
    assert not (tmp_path / "x.png").exists()
