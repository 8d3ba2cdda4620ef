"""Uncertainty in the analysis: the paired jackknife over prompt turns, resolved rankings, host drift
(``host_probe_ms``) and the A/A noise floor and its gate, on small synthetic records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.comparison import METHOD_LINK
from analysis.drift import drift_normalised, drift_summary, probe_cells
from analysis.frame import DuplicateRecords, load_records, rows_to_frame
from analysis.gammatune.table2 import speedup_table
from analysis.gammatune.throughput import throughput_table
from analysis.make_artefacts import main
from analysis.metrics import aa_original, method_label, ordered_methods, throughput
from analysis.noise_floor import noise_floor_table
from analysis.uncertainty import UNRESOLVED_MARK, Bootstrap, Design, Estimate, Jackknife, resolve, t_quantile

GAMMAS = (2, 4)


def _row(method: str, gamma: int | None, prompt: int, tokens: float, wall: float, **kw) -> dict:
    return {"pair": "p", "target": "tgt", "draft": None if gamma is None else "d", "method": method, "task": "t",
            "category": "c", "prompt_id": f"q{prompt}", "turn": 1, "gamma_init": gamma, "temperature": 0.0,
            "new_tokens": tokens, "wall_ms": wall, "tokens_per_s": tokens / wall * 1000.0, "ttft_ms": 1.0, **kw}


def _walls(n: int, seed: int = 0) -> np.ndarray:
    """Per-prompt wall times that differ a lot between prompts (the prompts' own spread)."""
    return np.random.default_rng(seed).uniform(200.0, 4000.0, n)


def _frame(factors: dict[str, float | np.ndarray], n: int = 20, seed: int = 0) -> pd.DataFrame:
    """Methods at γ 2 and 4 over ``n`` prompts of 100 tokens: wall = the prompt's base wall / factor
    (a factor 1.1 is 10 % faster on every prompt)."""
    base = _walls(n, seed)
    rows = [_row(method, gamma, i, 100.0, float(base[i] / np.broadcast_to(factor, (n,))[i]))
            for method, factor in factors.items() for gamma in GAMMAS for i in range(n)]
    return rows_to_frame(rows)


def _width(estimate: Estimate) -> float:
    lo, hi = estimate.interval()
    return hi - lo


# ---------------------------------------------------------------- the jackknife


def test_ci_contains_the_point_and_shrinks_with_more_prompts():
    widths = []
    for n in (10, 200):
        df = _frame({"specdecode": 1.0}, n=n)
        estimate = Bootstrap(df).estimate(df)
        lo, hi = estimate.interval()
        assert lo < estimate.point < hi
        assert estimate.point == pytest.approx(throughput(df))
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 3  # ~ 1/sqrt(20)


@pytest.mark.parametrize("pooling", ["pooled", "mean", "question"])
def test_point_estimate_is_the_tables_throughput(pooling):
    rows = [_row("specdecode", 2, i, 10.0 + 7 * i + t, 100.0 + 30 * i * t, turn=t) for i in range(5) for t in (1, 2)]
    df = rows_to_frame(rows)
    boot = Bootstrap(df, pooling)
    assert boot.estimate(df).point == pytest.approx(throughput(df, pooling))
    assert len(boot.index) == (5 if pooling == "question" else 10)  # questions, or prompt turns


def test_repeats_stay_with_their_turn():
    once = _frame({"specdecode": 1.0}, n=12)
    thrice = rows_to_frame([{**r, "repeat": k} for r in once.to_dict("records") for k in range(3)])
    a, b = Bootstrap(once), Bootstrap(thrice)
    assert len(b.index) == len(a.index) == 12  # units are prompt turns, not records
    # three identical timings of every turn weigh it three times in both sums: the same replicates exactly
    np.testing.assert_allclose(b.estimate(thrice).draws, a.estimate(once).draws)


def test_deterministic_and_the_old_name_still_works():
    df = _frame({"specdecode": 1.0})
    first = Jackknife(df).estimate(df).interval()
    assert Jackknife(df).estimate(df).interval() == first and Bootstrap is Jackknife
    assert len(Jackknife(df).estimate(df).draws) == 20  # one replicate per prompt turn left out


def test_the_interval_of_a_mean_is_students_t_interval():
    """For a mean of independent turns the jackknife variance is s²/n, so the interval is Student's
    (``analysis.uncertainty``, CI), on the log scale for a positive statistic."""
    x = np.random.default_rng(3).normal(0.0, 0.2, 7)
    loo = (x.sum() - x) / 6  # the mean of the other six, replicate by replicate
    lo, hi = Estimate(float(x.mean()), loo).interval()
    half = t_quantile(6) * x.std(ddof=1) / math.sqrt(7)
    assert (lo, hi) == pytest.approx((x.mean() - half, x.mean() + half))
    assert t_quantile(6) == pytest.approx(2.446912, abs=1e-6) and t_quantile(1) == pytest.approx(12.7062, abs=1e-4)
    lo, hi = Estimate(math.exp(x.mean()), np.exp(loo), log=True).interval()
    assert (math.log(lo), math.log(hi)) == pytest.approx((x.mean() - half, x.mean() + half))
    assert all(math.isnan(v) for v in Estimate(1.0, np.array([1.0])).interval())  # one cluster: df 0


def test_strata_are_left_out_within_their_task():
    """Two tasks of 5 and 3 prompt turns: 8 replicates, 6 degrees of freedom, and each task's spread
    measured around its own replicates' mean."""
    rows = [_row("specdecode", 2, i, 100.0, 1000.0 + 100.0 * i, task=task)
            for task, n in (("a", 5), ("b", 3)) for i in range(n)]
    jackknife = Jackknife(rows_to_frame(rows))
    assert jackknife.design.df == 6 and sorted(np.bincount(jackknife.design.strata)) == [3, 5]
    assert Design.single(4).variance(np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(3 / 4 * 5.0)


def test_paired_jackknife_keeps_the_ratio_of_correlated_cells_sharp():
    """GammaTune 10 % faster than SpecDecode on every prompt, prompts 20× apart in wall time: each
    cell's own interval is wide, the ratio's is a point. Leaving out different prompts in the two
    cells (an unpaired resampling) would give the ratio an interval about as wide as the cells'."""
    df = _frame({"specdecode": 1.0, "gammatune": 1.1})
    boot = Jackknife(df)
    sd, gt = (boot.estimate(df[(df["method"] == m) & (df["gamma_init"] == 2)]) for m in ("specdecode", "gammatune"))
    assert _width(sd) / sd.point > 0.2 and _width(gt) / gt.point > 0.2
    ratio = gt / sd
    assert ratio.point == pytest.approx(1.1) and _width(ratio) < 1e-9
    rng = np.random.default_rng(0)  # what an unpaired resampling would do: another prompt left out in the other cell
    unpaired = Estimate(ratio.point, gt.draws / rng.permutation(sd.draws), ratio.design, log=True)
    assert _width(unpaired) > 0.2

    table = speedup_table(df)
    cell = table.data[(table.data["method"] == "gammatune") & (table.data["pair"] == "p")].iloc[0]
    assert cell["ci_lo"] == pytest.approx(1.1) and cell["ci_hi"] == pytest.approx(1.1)
    # the marginal throughput intervals overlap, yet the paired difference resolves the two methods
    tput = throughput_table(df).data
    means = tput[tput["scope"] == "mean over γ"].set_index("method")
    assert means.loc["gammatune", "tokens_per_s_lo"] < means.loc["specdecode", "tokens_per_s_hi"]
    assert means.loc["gammatune", "tokens_per_s_resolved"] and means.loc["specdecode", "tokens_per_s_resolved"]
    assert cell["resolved"] and UNRESOLVED_MARK not in "".join(table.display.iloc[:, 2:].to_numpy().ravel())


# ---------------------------------------------------------------- resolved rankings


def _mean_estimate(values: np.ndarray) -> Estimate:
    """The mean of per-turn values with its delete-one replicates, as a positive statistic."""
    n = values.size
    return Estimate(float(values.mean()), (values.sum() - values) / (n - 1), log=True)


def test_resolve_marks_neighbours_whose_ratio_contains_one():
    rng = np.random.default_rng(0)
    shared = rng.normal(0.0, 0.3, 30)  # the prompts' spread, common to all three
    a = _mean_estimate(np.exp(shared + rng.normal(0, 0.05, 30)))
    b = _mean_estimate(np.exp(shared + rng.normal(0, 0.05, 30)) * 1.01)
    c = _mean_estimate(np.exp(shared + rng.normal(0, 0.05, 30)) * 1.5)
    ranked = resolve({"a": a, "b": b, "c": c})
    assert [ranked[k].rank for k in "cba"] == [1, 2, 3]
    assert ranked["c"].resolved  # 1.5× apart: resolved from b, its only neighbour
    assert not ranked["b"].resolved and not ranked["a"].resolved  # 1 % apart with per-turn noise 7 %
    assert resolve({"a": a})["a"].resolved


def test_a_ratio_whose_interval_reaches_into_the_aa_band_is_not_resolved():
    """``resolve``'s band (log scale): resolved only when the whole CI of the paired ratio lies beyond it."""
    rng = np.random.default_rng(1)
    shared = rng.normal(0.0, 0.3, 30)
    a = _mean_estimate(np.exp(shared + rng.normal(0, 0.02, 30)))
    b = _mean_estimate(np.exp(shared + rng.normal(0, 0.02, 30)) * 1.06)
    lo, hi = (b / a).interval()
    assert 1.0 < lo < 1.06 < hi  # the ratio's CI excludes 1 ...
    assert resolve({"a": a, "b": b})["b"].resolved
    assert not resolve({"a": a, "b": b}, band=math.log(lo) + 1e-6)["b"].resolved  # ... not a band that high
    assert resolve({"a": a, "b": b}, band=math.log(lo) - 1e-6)["b"].resolved


def test_table2_marks_overlapping_methods_not_resolved():
    noise = np.exp(np.random.default_rng(1).normal(0.0, 0.4, 20))  # HFHeuristic: SpecDecode's speed, ± noise
    df = _frame({"specdecode": 1.0, "hf_heuristic": noise, "gammatune": 2.0})
    table = speedup_table(df)
    data = table.data[table.data["pair"] == "p"].set_index("method")
    assert data.loc["gammatune", "resolved"] and not data.loc["hf_heuristic", "resolved"]
    assert not data.loc["specdecode", "resolved"]
    shown = table.display
    ci_rows = shown[shown["Source"] == "95 % CI"]["p"].tolist()  # order: SpecDecode, HFHeuristic, GammaTune
    assert [v.endswith(UNRESOLVED_MARK) for v in ci_rows] == [True, True, False]
    assert shown[shown["Method"] == "GammaTune"]["p"].iloc[0] == "2.00 ± 0.00×"  # the paper's cell, unchanged
    assert "mean ± sample std (ddof=1) across initial γ" in table.caption and "jackknife CI over prompt turns" \
        in table.caption and "≈: not resolved" in table.caption and METHOD_LINK in table.caption


# ---------------------------------------------------------------- drift


def _probed(probe_of: dict[tuple[str, int], float], n: int = 8) -> pd.DataFrame:
    """Same work in every cell; each cell's wall time and probe scaled by its host's slowness."""
    base = _walls(n)
    rows = [_row(m, g, i, 100.0, float(base[i] * p / 10.0), host_probe_ms=p)
            for (m, g), p in probe_of.items() for i in range(n)]
    return rows_to_frame(rows)


PROBES = {("specdecode", 2): 10.0, ("specdecode", 4): 10.0, ("gammatune", 2): 13.0, ("gammatune", 4): 10.2,
          ("hf_heuristic", 2): 10.0, ("hf_heuristic", 4): 10.0}


def test_drift_flags_a_cell_30_percent_slow_and_not_one_2_percent():
    df = _probed(PROBES)
    cells = probe_cells(df).set_index(["method", "gamma_init"])
    assert cells.loc[("gammatune", 2), "drifted"] and cells.loc[("gammatune", 2), "share"] == pytest.approx(0.3)
    assert not cells.loc[("gammatune", 4), "drifted"] and cells.loc[("gammatune", 4), "share"] == pytest.approx(0.02)
    assert cells["drifted"].sum() == 1
    lines = drift_summary(df)
    assert "max/min 1.30" in lines[0] and "1 of 6 cells" in lines[1] and "GammaTune γ=2 (+30%)" in lines[1]
    assert not probe_cells(df, threshold=0.35)["drifted"].any()


def test_drift_normalised_throughput_equalises_identical_work():
    df = _probed(PROBES)
    slow, fast = df[(df["method"] == "gammatune") & (df["gamma_init"] == 2)], df[df["method"] == "specdecode"]
    assert throughput(slow) == pytest.approx(throughput(fast[fast["gamma_init"] == 2]) / 1.3)  # raw: 30 % apart
    normalised = drift_normalised(df)
    for pooling in ("pooled", "mean"):
        values = {key: throughput(rows, pooling) for key, rows in normalised.groupby(["method", "gamma_init"])}
        assert max(values.values()) == pytest.approx(min(values.values()))
    assert throughput(df) == throughput(df.copy())  # the measured frame is left as it was
    assert drift_normalised(df.assign(host_probe_ms=None)) is None


# ---------------------------------------------------------------- A/A noise floor


def test_twin_is_the_noise_floor_not_a_row_of_table2():
    df = _frame({"specdecode": 1.0, "specdecode_twin": 1.02, "gammatune": 1.2})
    assert aa_original("specdecode_twin") == "specdecode" and aa_original("gammatune") is None
    assert aa_original("specdecode_twin[fused_prefill]") == "specdecode[fused_prefill]"
    assert method_label("specdecode_twin") == "SpecDecode (A/A twin)"
    assert ordered_methods(["gammatune", "specdecode_twin", "specdecode"]) == ["specdecode", "specdecode_twin",
                                                                               "gammatune"]
    table = speedup_table(df)
    assert "specdecode_twin" not in set(table.data["method"])
    assert not table.display["Method"].str.contains("twin").any() and "noise_floor" in table.caption
    assert "specdecode_twin" not in set(throughput_table(df).data["method"])
    with pytest.raises(ValueError, match="A/A twin"):
        speedup_table(df, baseline="specdecode_twin")
    floor = noise_floor_table(df)
    overall = floor.data[floor.data["scope"] == "mean over γ"].iloc[0]
    assert (overall["twin"], overall["original"], overall["n_gamma"]) == ("specdecode_twin", "specdecode", 2)
    assert overall["ratio"] == pytest.approx(1.02) and overall["ci_lo"] == pytest.approx(1.02)
    assert overall["max_abs_deviation"] == pytest.approx(0.02)
    assert set(floor.data["gamma_init"].dropna()) == set(GAMMAS)
    assert "SpecDecode (A/A twin) ÷ SpecDecode" in set(floor.display["A/A"])
    assert noise_floor_table(df[df["method"] != "specdecode_twin"]) is None


# ---------------------------------------------------------------- command line, old and new records


def _write(root: Path, df: pd.DataFrame, drop: tuple[str, ...] = ()) -> None:
    for (method, gamma), rows in df.groupby(["method", "gamma_init"], dropna=False):
        job = root / f"method={method},gamma={gamma:g}"
        job.mkdir(parents=True)
        lines = []
        for record in rows.drop(columns=[c for c in (*drop, "job_status", "job_dir", "source") if c in rows]) \
                .to_dict("records"):
            record = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}
            lines.append(json.dumps(record, default=str))
        (job / "records.jsonl").write_text("\n".join(lines) + "\n")
        (job / "summary.json").write_text(json.dumps({"status": "complete"}))


def test_cli_prints_noise_floor_and_drift_and_writes_named_alternatives(tmp_path, capsys):
    df = _probed({**PROBES, ("specdecode_twin", 2): 10.0, ("specdecode_twin", 4): 10.0}, n=6)
    _write(tmp_path / "sweep", df)
    out = tmp_path / "out"
    assert main([str(tmp_path / "sweep"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| GammaTune | measured |" in printed and "| | 95 % CI |" in printed.replace("|  |", "| |")
    assert "noise floor (p): specdecode_twin ÷ specdecode = 1.000 [1.000, 1.000]" in printed
    assert "drift (tgt):" in printed and "GammaTune γ=2 (+30%)" in printed
    assert "gammatune_table2_speedup_drift_normalised" in printed
    tables = {p.name for p in (out / "tables").iterdir()}
    for name in ("gammatune_table2_speedup", "gammatune_table2_speedup_drift_normalised", "gammatune_throughput",
                 "noise_floor", "drift"):
        assert {f"{name}.md", f"{name}.tex", f"{name}.csv", f"{name}.data.csv"} <= tables, name
    raw = pd.read_csv(out / "tables" / "gammatune_table2_speedup.data.csv")
    normalised = pd.read_csv(out / "tables" / "gammatune_table2_speedup_drift_normalised.data.csv")
    pick = lambda d: d[(d["method"] == "gammatune") & (d["pair"] == "p")]["mean"].iloc[0]  # noqa: E731
    assert pick(raw) < 0.95 and pick(normalised) == pytest.approx(1.0)  # same work everywhere, once normalised
    assert {"ci_lo", "ci_hi", "rank", "resolved"} <= set(raw.columns)
    assert "DRIFT-NORMALISED" in (out / "tables" / "gammatune_table2_speedup_drift_normalised.md").read_text()
    assert main([str(tmp_path / "sweep"), "--print-only", "--drift-threshold", "0.35"]) == 0
    assert "no cell's probe differs from its target's median by more than 35%" in capsys.readouterr().out


def test_old_records_without_the_new_fields_still_analyse(tmp_path, capsys):
    old = ("repeat", "host_probe_ms", "ar_decode", "interleave")
    _write(tmp_path / "sweep", _frame({"specdecode": 1.0, "gammatune": 1.1}, n=5).assign(schema_version=3), drop=old)
    assert '"repeat"' not in next((tmp_path / "sweep").glob("*/records.jsonl")).read_text()
    df = load_records(tmp_path / "sweep")
    assert (df["repeat"] == 0).all() and df["host_probe_ms"].isna().all()
    assert main([str(tmp_path / "sweep"), "--print-only"]) == 0
    printed = capsys.readouterr().out
    assert "| GammaTune | measured | 1.10 ± 0.00× |" in printed
    assert "drift: no record has host_probe_ms" in printed and "noise floor" not in printed


def test_repeats_load_and_a_repeat_written_twice_is_refused(tmp_path):
    line = json.dumps(_row("specdecode", 2, 0, 10.0, 100.0))
    job = tmp_path / "job"
    job.mkdir()
    (job / "records.jsonl").write_text(line + "\n" + line[:-1] + ', "repeat": 1}\n')
    assert sorted(load_records(tmp_path)["repeat"]) == [0, 1]
    (job / "records.jsonl").write_text(line + "\n" + line + "\n")
    with pytest.raises(DuplicateRecords, match="repeat 0"):
        load_records(tmp_path)
