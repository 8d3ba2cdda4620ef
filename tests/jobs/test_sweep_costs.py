"""Per-call costs timed inside an interleaved sweep (``runners.jobs.sweep_costs``) and the modeled walls the
analysis charges with them (``specbench.sweep_costs``, ``analysis.modeled``): tiny seeded models, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from analysis.frame import load_records
from analysis.modeled import modeled_frame
from runners.jobs.export import export
from runners.jobs.interleave import InterleavedSweep
from runners.jobs.sweep_costs import COSTS_FILE

from helpers import compose


def _tiny(tiny_conf: Path, *overrides: str) -> dict:
    cfg = OmegaConf.to_container(compose("task.n_prompts=3", "max_new_tokens=8", "warmup=0", *overrides), resolve=True)
    cfg["pair"] = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    return cfg


CELLS = [("method=specdecode", "gamma=2"), ("method=specdecode_twin", "gamma=2"), ("method=gammatune", "gamma=4"),
         ("method=ar",)]


@pytest.fixture(scope="module")
def sweep(tiny_conf, tmp_path_factory):
    root = tmp_path_factory.mktemp("costs")
    jobs = [(_tiny(tiny_conf, *cell, f"results_dir={root}"), root / ",".join(cell)) for cell in CELLS]
    outcomes = InterleavedSweep(jobs, root, seed=1, progress=False).run()
    assert [o.status for o in outcomes] == ["complete"] * len(CELLS)
    return root


def test_every_round_times_the_widths_the_jobs_verify_and_the_draft(sweep):
    rows = [json.loads(line) for line in (sweep / COSTS_FILE).read_text().splitlines()]
    assert {r["round"] for r in rows} == {0, 1, 2}
    for r in range(3):
        mine = [x for x in rows if x["round"] == r]
        target = sorted({x["k"] for x in mine if x["model"] == "target" and x["context"] > 0})
        assert target == list(range(1, 34))  # GammaTune's γ_max 32 verifies 33 tokens
        assert {x["k"] for x in mine if x["model"] == "draft" and x["context"] > 0} == {1, 2, 3, 4}
        prefills = [x for x in mine if x["context"] == 0]
        assert sorted(x["model"] for x in prefills) == ["draft", "target"]
        assert len({x["context"] for x in mine if x["context"] > 0}) == 1  # the round's input
        assert all(x["ms"] > 0 and x["drafter"] == "model" and x["pair"] == "tiny" for x in mine)


def test_the_records_of_a_sweep_get_modeled_walls_and_identical_work_reads_identical(sweep):
    df = load_records(sweep)
    assert df["modeled_wall_ms"].notna().all() and df["modeled_ar_wall_ms"].notna().all()
    spec = df[df["method"].isin(["specdecode", "specdecode_twin"])]
    by = {m: g.sort_values(["prompt_id", "turn"]) for m, g in spec.groupby("method")}
    # the same work (lossless, greedy, same γ): the same rounds, so the same modeled wall, record by record
    assert list(by["specdecode"]["drafted_trace"]) == list(by["specdecode_twin"]["drafted_trace"])
    assert np.allclose(by["specdecode"]["modeled_wall_ms"].to_numpy(), by["specdecode_twin"]["modeled_wall_ms"].to_numpy())
    ar = df[df["method"] == "ar"]
    assert np.allclose(ar["modeled_wall_ms"], ar["modeled_ar_wall_ms"])  # the target alone is its own reference
    modeled = modeled_frame(df)
    assert modeled is not None and len(modeled) == len(df)
    assert np.allclose(modeled["tokens_per_s"], modeled["new_tokens"] * 1000 / df["modeled_wall_ms"])


def test_export_keeps_the_costs_and_the_analysis_reads_them_there(sweep, tmp_path):
    export(sweep, tmp_path / "out")
    assert (tmp_path / "out" / "costs.jsonl").is_file()
    df = load_records(tmp_path / "out")
    assert df["modeled_wall_ms"].notna().all()


def test_a_sweep_without_costs_has_no_modeled_walls(tiny_conf, tmp_path):
    jobs = [(_tiny(tiny_conf, "method=specdecode", "gamma=2", "task.n_prompts=1", f"results_dir={tmp_path}"),
             tmp_path / "spec")]
    InterleavedSweep(jobs, tmp_path, seed=0, progress=False, costs=False).run()
    assert not (tmp_path / COSTS_FILE).exists()
    df = load_records(tmp_path)
    assert df["modeled_wall_ms"].isna().all() and modeled_frame(df) is None


def test_table2_gains_a_modeled_row_and_counts_its_agreement(sweep):
    from analysis.gammatune.table2 import speedup_table

    table = speedup_table(load_records(sweep))
    assert table is not None
    assert "modeled" in set(table.display["Source"])
    data = table.data[table.data["source"] == "measured"]
    assert data["modeled_mean"].notna().all()
    base = data[data["method"] == "specdecode"]
    assert np.allclose(base["modeled_mean"], 1.0) and base["modeled_inside"].isna().all()  # no test of the model
    assert "modeled inside the measured 95 % CI in" in table.caption
    # the paired check (issue 50, item 4): measured ÷ modeled per pair cell, from the one jackknife, its count
    cells = data[data["pair"] != "average"]
    assert cells["measured_over_modeled"].notna().all()
    assert np.allclose(cells.loc[cells["method"] == "specdecode", "measured_over_modeled"], 1.0)
    assert (cells["measured_over_modeled_lo"] <= cells["measured_over_modeled"]).all()
    assert "Paired check" in table.caption and "measured ÷ modeled excludes 1 in" in table.caption


def test_the_paired_count_leaves_out_cells_without_an_interval():
    from analysis.modeled import paired_agreement

    assert paired_agreement([(0.96, 0.99), (0.98, 1.02), (1.0, 1.0), (float("nan"), 1.1)]) == (
        "measured ÷ modeled excludes 1 in 1 of 2 cells")
    assert paired_agreement([(1.0, 1.0)]) == ""


def test_the_throughput_table_shows_the_modeled_speedup_over_ar(sweep):
    from analysis.gammatune.throughput import throughput_table

    table = throughput_table(load_records(sweep))
    assert table is not None and "Speedup modeled" in table.display
    means = table.data[table.data["scope"] == "mean over γ"]
    ar = means[means["method"] == "ar"]
    assert np.allclose(ar["modeled_speedup_vs_ar"], 1.0)  # the target alone over itself, by construction
    assert means["modeled_speedup_vs_ar"].notna().all()


def test_one_disturbed_round_does_not_move_the_fitted_cost():
    """A forward is timed once per round and disturbances only add time: the fit is a median (Theil–Sen slope,
    median intercept), so one round timed 6× slow leaves the cost where the other rounds put it. The least-squares
    mean this replaced moved the one-token cost by ~60 % here."""
    from specbench.sweep_costs import fit_forward

    rows = [{"k": k, "context": c, "ms": 10.0 * k + 0.01 * c} for c in (100, 120, 140, 160, 180, 200, 220, 240)
            for k in (1, 2)]
    clean = fit_forward(rows)
    rows[0] = {**rows[0], "ms": rows[0]["ms"] * 6}  # round 0's one-token forward, disturbed
    disturbed = fit_forward(rows)
    assert clean.step_ms[1] == pytest.approx(10.0 + 0.01 * clean.ref_context)
    assert clean.context_ms_per_token == pytest.approx(0.01)
    assert disturbed.step_ms[1] == pytest.approx(clean.step_ms[1], rel=0.02)
    assert disturbed.context_ms_per_token == pytest.approx(0.01, rel=0.05)
