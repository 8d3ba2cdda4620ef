"""The command line and its artefact registry (``analysis.make_artefacts``, ``analysis.artefacts``): every artefact written, a
results folder without some inputs skipped with a word, ``--list`` naming every artefact and nothing written that
it does not name, the registry refusing what it cannot run; analysis imports specbench only."""

from __future__ import annotations

import pytest

from analysis.make_artefacts import main


@pytest.mark.slow
def test_cli_writes_every_artefact(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(results), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "| GammaTune | measured |" in printed.out and "1.15 ± 0.11×" in printed.out
    assert "not complete" in printed.err and "skipped" in printed.err  # scrolls has no SpecDecode
    tables = {p.name for p in (out / "tables").iterdir()}
    figures = {p.name for p in (out / "figures").iterdir()}
    sb = "-specbench-t0"
    for name in (f"gammatune_table2_speedup{sb}", "gammatune_table1_latency", "hetero_speedup", "category_speedup",
                 "hetero_speedup_unfiltered", "hetero_speedup_ours", f"acceptance{sb}", f"gammatune_fig2a_trace{sb}"):
        assert {f"{name}.md", f"{name}.tex", f"{name}.csv", f"{name}.data.csv"} <= tables, name
    for name in (f"gammatune_fig1_throughput{sb}", f"gammatune_sensitivity{sb}", f"gammatune_fig2a_trace{sb}"):
        assert {f"{name}.png", f"{name}.pdf"} <= figures, name
    assert "gammatune_sensitivity-scrolls-t0.png" not in figures  # no initial γ there


def test_cli_default_out_print_only_and_missing_data(results, tmp_path, capsys):
    assert main([str(results), "--print-only", "--pooling", "mean"]) == 0
    assert "mean of per-prompt tokens/s" in capsys.readouterr().out
    assert not (results / "analysis").exists()
    only_ar = tmp_path / "only_ar"
    (only_ar / "job").mkdir(parents=True)
    src = next(results.glob("sweep3/*method=ar"))
    for name in ("records.jsonl", "summary.json"):
        (only_ar / "job" / name).write_text((src / name).read_text())
    assert main([str(only_ar)]) == 0  # default out: RESULTS_DIR/analysis
    assert (only_ar / "analysis" / "tables" / "gammatune_table1_latency.md").exists()
    assert "no speedup table" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 0
    assert "no records" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope")])


def test_list_names_every_artefact_without_a_results_folder(capsys):
    from analysis.artefacts import SCOPES, load

    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    known = load()
    assert len(known) >= 25
    for key, artefact in known.items():
        assert f"  {key} " in listed and artefact.about in listed, key
        assert artefact.about and "\n" not in artefact.about and artefact.needs, key
    assert all(f"{scope}:" in listed for scope in SCOPES)


@pytest.mark.slow
def test_every_file_the_cli_writes_is_a_registered_artefact(results, tmp_path):
    """The registry key is where an artefact is written: ``tables/<name>`` and ``figures/<name>``
    (a scenario's suffix ``-<task>-t<T>`` appended): nothing is written that ``--list`` does not name."""
    from analysis.artefacts import load

    out = tmp_path / "out"
    assert main([str(results), "--out", str(out)]) == 0
    keys = set(load())
    for path in [*(out / "tables").iterdir(), *(out / "figures").iterdir()]:
        stem = path.name.split(".", 1)[0]
        assert f"{path.parent.name}/{stem.split('-', 1)[0]}" in keys, path.name


def test_a_table_under_another_name_than_its_key_is_refused(complete, tmp_path, capsys):
    from analysis.artefacts import SCENARIO, Artefact, Inputs
    from analysis.gammatune.rounds import acceptance_table
    from analysis.make_artefacts import Report

    wrong = Artefact("tables/acceptance_rates", "acceptance table", "one line", SCENARIO, ("records",), acceptance_table)
    report = Report(tmp_path)
    assert report.make(wrong, Inputs(records=complete)) is None
    assert report.failed == ["acceptance table"] and not report.written
    assert "returned a table named 'acceptance'" in capsys.readouterr().err


def test_registry_refuses_what_it_cannot_run():
    from analysis.artefacts import SCENARIO, artefact, get

    with pytest.raises(ValueError, match="unknown needs"):
        artefact("tables/x", "x", about="x", scope=SCENARIO, needs=("record",))
    with pytest.raises(ValueError, match="tables/<name> or figures/<name>"):
        artefact("plots/x", "x", about="x", scope=SCENARIO, needs=("records",))
    with pytest.raises(ValueError, match="unknown scope"):
        artefact("tables/x", "x", about="x", scope="everything", needs=("records",))
    with pytest.raises(ValueError, match="registered twice"):
        artefact("tables/acceptance", "x", about="x", scope=SCENARIO, needs=("records",))(lambda records: None)
    with pytest.raises(ValueError, match="Did you mean 'tables/gammatune_table2_speedup'"):
        get("tables/gammatune_table2_sepedup")


def test_analysis_imports_only_specbench(root):
    """analysis → specbench only: no runners, methods (or torch through them)."""
    import subprocess
    import sys

    code = ("import sys, analysis.make_artefacts, analysis.wandb_source; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('runners', 'methods', 'wandb')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
