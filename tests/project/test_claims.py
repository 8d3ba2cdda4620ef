"""Claims checked against the committed data (issue 50, item 2; ``analysis.claims``): every registered sentence is
still in its page and still holds; a committed number edited in a scratch copy, or the sentence edited, fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from analysis import claims, docs

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_claim_holds_against_the_committed_files():
    assert claims.CLAIMS, "no claim is registered"
    assert claims.problems() == []


def _scratch(tmp_path: Path) -> Path:
    """A copy of what the claims read: their pages and their sources."""
    for c in claims.CLAIMS:
        for rel in (c.doc, *c.sources):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, tmp_path / rel)
    assert claims.problems(tmp_path) == []
    return tmp_path


def test_a_committed_number_made_false_fails_its_claim(tmp_path):
    root = _scratch(tmp_path)
    board = root / "results/committed/policy_lab_default_pair/replay/analysis/tables/policy_leaderboard.data.csv"
    frame = pd.read_csv(board)
    frame.loc[frame["method"] == "adaedl", "x_best_fixed_at_best_lo"] = 1.01  # its interval now above 1
    frame.loc[frame["method"] == "adaedl", "verdict"] = "beats"
    frame.to_csv(board, index=False)
    found = claims.problems(root)
    assert len(found) == 1 and "default_pair_policies" in found[0] and "adaedl above 1" in found[0]

    root = _scratch(tmp_path / "again")
    log = root / "results/committed/gpu_paper_costs/compare.log"
    log.write_text(log.read_text().replace("  7.64 ", "  7.04 "))  # the captured 8B forward, k = 1
    found = claims.problems(root)
    assert len(found) == 1 and "captured_against_vllm" in found[0] and "1.19" in found[0]


def test_a_comparison_is_held_by_its_interval_not_its_point(tmp_path):
    # points unchanged, intervals moved: a tie whose interval no longer contains 1, a "below" whose interval reaches 1
    root = _scratch(tmp_path)
    board = root / "results/committed/policy_lab_default_pair/replay/analysis/tables/policy_leaderboard.data.csv"
    frame = pd.read_csv(board)
    frame.loc[frame["method"] == "svip", "x_best_fixed_mean_over_gamma_hi"] = 0.99
    frame.to_csv(board, index=False)
    found = claims.problems(root)
    assert len(found) == 1 and "default_pair_policies" in found[0] and "svip below 1" in found[0]
    frame.loc[frame["method"] == "svip", "x_best_fixed_mean_over_gamma_hi"] = 1.0666
    frame.loc[frame["method"] == "gammatune", "x_best_fixed_mean_over_gamma_hi"] = 1.01
    frame.to_csv(board, index=False)
    found = claims.problems(root)
    assert len(found) == 1 and "gammatune contains 1" in found[0]


def test_a_leaderboard_verdict_is_read_from_its_bounds(tmp_path):
    # the verdict column still says "trails", but the interval now reaches 1: the claim "all ten trail" must fail
    root = _scratch(tmp_path)
    board = root / "results/committed/specdecode_bench_lab/leaderboard_b1.md"
    row = "| specdecode-bench_llama3.1-8b_eagle | cnn | 1 | gammatune | 20 | 1.701 | 0.788 | 0.834 | [0.829, 0.839] |"
    assert board.read_text().count(row) == 1
    board.write_text(board.read_text().replace(row, row.replace("[0.829, 0.839]", "[0.829, 1.039]")))
    found = claims.problems(root)
    assert found and all("sdb_leaderboard_b1" in line or "eager_against_vllm_costs" in line for line in found)


def test_resolved_is_held_to_the_family_wise_rule_the_a_a_intervals_are(monkeypatch):
    # a family of ranking steps so large that no step is resolved at its level: "the one step resolved" must fail
    import analysis.noise_floor

    monkeypatch.setattr(analysis.noise_floor, "family_level", lambda n, level=0.95: 1 - 1e-12)
    found = [line for line in claims.problems() if "hf_heuristic_leads" in line]
    assert len(found) == 1 and "none family-wise" in found[0]


def test_a_sentence_edited_away_from_its_registration_fails(tmp_path):
    root = _scratch(tmp_path)
    page = root / "docs/pages/gpu.md"
    page.write_text(page.read_text().replace("0.41, 0.47, 0.58", "0.61, 0.47, 0.58"))
    found = claims.problems(root)
    assert len(found) == 1 and "ranking_across_cost_tables" in found[0] and "not in the page" in found[0]


def test_a_claims_figures_are_allowed_outside_a_block_and_only_they(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("captured, the forward costs 1.29× vLLM's fitted cost, but 1.31× elsewhere.\n")
    assert [s.figure for s in docs.stray_figures(page, allowed=docs.ALLOWED)] == ["1.29×", "1.31×"]
    page.write_text("the same forward on the H200 costs 1.29× vLLM's fitted cost; another 1.31× stands alone.\n")
    assert [s.figure for s in docs.stray_figures(page)] == ["1.31×"]
