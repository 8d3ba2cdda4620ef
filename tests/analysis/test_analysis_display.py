"""Display names (issue 42): how a table names a method is the method YAML's ``display``, written by the job into each
record (``method_display``, ``hetero_display``) and read back by ``analysis.metrics.display_names``, so renaming a
method in its YAML relabels no result (every committed record names itself, ``scripts/migrate_method_identity.py``);
only a hand-made row that names nothing is named by today's YAML."""

from __future__ import annotations

from analysis.frame import rows_to_frame
from analysis.gammatune.table2 import speedup_table
from analysis.gammatune.throughput import throughput_table
from analysis.hetero import hetero_table
from analysis.metrics import display_names, method_label, method_labels
from specbench.config.method import yaml_display

from helpers.analysis_records import record_row


def _job(method: str, display: str | None, wall_ms: float, gammas=(2, 4), **kw) -> list[dict]:
    extra = {} if display is None else {"method_display": display}
    return [record_row(method=method, gamma_init=g, prompt_id=p, wall_ms=wall_ms, tokens_per_s=10_000 / wall_ms,
                       new_tokens=10, **extra, **kw)
            for g in gammas for p in ("a", "b")]


def test_a_new_method_is_named_by_its_records_not_by_a_list_in_analysis():
    df = rows_to_frame(_job("specdecode", "SpecDecode", 100.0) + _job("my_policy", "MyPolicy (ours)", 80.0))
    assert yaml_display("my_policy") is None  # no YAML file, no list in analysis: only its records name it
    table = speedup_table(df)
    assert "MyPolicy (ours)" in set(table.display["Method"])
    assert "my_policy" not in set(table.display["Method"])
    assert "MyPolicy (ours)" in set(throughput_table(df, modeled=False).display["Method"])


def test_tags_and_twins_read_on_the_recorded_name():
    df = rows_to_frame(_job("my_policy", "MyPolicy", 80.0, method_key="my_policy[eta=0.5]")
                       + _job("specdecode_twin", "SpecDecode twin (as named)", 100.0))
    label = method_labels(df)
    assert label("my_policy[eta=0.5]") == "MyPolicy (η = 0.5)"
    assert label("specdecode_twin") == "SpecDecode twin (as named)"
    assert method_label("specdecode_twin") == "SpecDecode (A/A twin)"  # no record names it: its YAML does


def test_rows_without_a_name_are_named_by_todays_yaml():
    df = rows_to_frame(_job("gammatune", None, 80.0) + _job("my_policy", None, 90.0))
    assert display_names(df) == {}
    label = method_labels(df)
    assert label("gammatune") == "GammaTune" and label("my_policy") == "my_policy"


def test_a_renamed_method_gets_its_most_frequent_name_and_a_recorded_name_beats_the_frozen_one():
    rows = _job("gammatune", "GammaTune (renamed)", 80.0) + _job("gammatune", "GammaTune", 80.0, gammas=(8,))
    names = display_names(rows_to_frame(rows))
    assert names["gammatune"] == "GammaTune (renamed)"  # 4 records against 2
    assert method_label("gammatune", names) == "GammaTune (renamed)"


def test_a_cross_vocabulary_row_reads_the_rules_recorded_name():
    rows = []
    for method, hetero, display, rule_display, wall in (("ar", None, "AR", None, 100.0),
                                                        ("gammatune", "slem", "GammaTune", "SLEM (string match)", 70.0)):
        rows += [record_row(method=method, hetero=hetero, method_display=display, hetero_display=rule_display,
                            gamma_init=None if method == "ar" else 4, prompt_id=p, wall_ms=wall, new_tokens=10,
                            tokens_per_s=10_000 / wall, ar_cache="dynamic" if method == "ar" else None)
                 for p in ("a", "b")]
    table = hetero_table(rows_to_frame(rows))
    assert "SLEM (string match) + GammaTune" in set(table.display["Method"])


def test_a_summarys_display_is_no_variant_tag_of_a_record_keyed_from_its_config(tmp_path):
    import json

    from analysis.frame import load_records

    job = tmp_path / "job"
    job.mkdir()
    row = {k: v for k, v in record_row(method="gammatune").items() if k not in ("method_params", "method_key")}
    (job / "records.jsonl").write_text(json.dumps(row) + "\n")
    node = {"name": "gammatune", "runner": "speculative", "policy": "gammatune", "display": "GammaTune", "eta": 0.5,
            "delta": 2, "gamma_min": 1, "gamma_max": 32, "transient": True, "expand_on": "gamma"}
    (job / "summary.json").write_text(json.dumps({"status": "complete", "config": {"method": node}}))
    assert list(load_records(tmp_path)["method"]) == ["gammatune[eta=0.5]"]
