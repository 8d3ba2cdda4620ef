"""The record declared once (issue 42, item 2).

Every field of ``specbench.records.Record`` carries its unit, group and definition; the analysis frame types
its columns from that declaration and ``docs/pages/records.md`` shows it, generated; one divisor
(``throughput_ms``) serves records, replayed rows and cells; the job writes the method's identity, so
``analysis`` keys a record by what it ran and reads no ``conf/``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict
from types import SimpleNamespace

import pandas as pd
import pytest

from analysis import docs
from analysis.frame import column_types, rows_to_frame
from analysis.policy_lab import _pooled, _time
from runners.replay.grid import MethodSpec, cells, job_batch_fields, load_method
from specbench.config.method import method_defaults, method_key
from specbench.records import (
    GROUPS,
    KINDS,
    RECORD_FIELDS,
    UNITS,
    Record,
    batch_fields,
    declaration,
    declare,
    throughput_ms,
)

from helpers import ROOT

PAGE = ROOT / "docs" / "pages" / "records.md"
EXAMPLE = {"number": 3, "text": "x", "flag": True, "list": [1, 2], "mapping": {"k": 1}}


# ----------------------------------------------------------------------------- the declaration

def test_every_field_is_declared_with_a_unit_a_group_and_a_definition():
    declared = declaration()
    assert [d.name for d in declared] == list(RECORD_FIELDS)
    for d in declared:
        assert d.unit in UNITS and d.group in GROUPS and d.kind in KINDS and len(d.doc.split()) >= 3, d
    assert {d.group for d in declared} == set(GROUPS)  # no group left empty
    assert {d.name: d.absent for d in declared if d.absent is not None} == {
        "repeat": 0, "batch_size": 1, "schema_version": 1, "backend": "torch"}


@pytest.mark.parametrize("unit,group,doc", [("furlongs", "timing", "a definition"),
                                            ("ms", "nowhere", "a definition"), ("ms", "timing", "  ")])
def test_a_field_without_a_known_unit_group_or_definition_is_refused(unit, group, doc):
    with pytest.raises(ValueError, match="known unit"):
        declare(unit, group, doc)


def _full_record() -> Record:
    """A record with every field given, a value of its declared kind."""
    values = {d.name: EXAMPLE[d.kind] for d in declaration()}
    values.update(schema_version=5, repeat=2, batch_size=4)
    return Record(**values)


def test_the_frame_types_every_declared_field_from_the_declaration():
    """A record of an old schema (most fields absent) and one with every field: each declared column holds its
    kind. A field the frame does not type (a list left NaN, a number left text) fails here."""
    sparse = {"pair": "p", "method": "specdecode", "prompt_id": "a", "turn": 1, "new_tokens": 4, "wall_ms": 10.0}
    df = rows_to_frame([sparse, asdict(_full_record())])
    types = column_types()
    for d in declaration():
        assert types[d.name] == d, d.name
        old, new = df[d.name].iloc[0], df[d.name].iloc[1]
        if d.kind == "number":
            assert pd.api.types.is_numeric_dtype(df[d.name]), d.name
            assert (old == d.absent) if d.absent is not None else (math.isnan(old) or d.name in sparse), d.name
        elif d.kind == "list":
            assert isinstance(old, list) and isinstance(new, list) and new, d.name
        elif d.kind == "mapping":
            assert isinstance(new, Mapping) and (old is None if d.nullable else old == {}), d.name
        else:
            assert (old is None or d.name in sparse) and new == EXAMPLE[d.kind], d.name
    assert df["repeat"].tolist() == [0, 2] and df["batch_size"].tolist() == [1, 4]
    assert df["schema_version"].tolist() == [1, 5]


def test_records_md_shows_every_declared_field_as_generated():
    text = PAGE.read_text(encoding="utf-8")
    assert docs.stale_fields(PAGE) == []
    for d in declaration():
        assert f"| `{d.name}` | {d.unit or '—'} |" in text, d.name


def test_a_stale_or_missing_fields_block_is_reported(tmp_path):
    page = tmp_path / "page.md"
    block = f"<!-- fields: timing -->\n{docs.render_fields('timing')}<!-- /fields -->\n"
    page.write_text(block, encoding="utf-8")
    missing = docs.stale_fields(page, tmp_path)
    assert len(missing) == len(GROUPS) - 1 and all("no fields block shows group" in p for p in missing)
    page.write_text(block.replace("`ttft_ms` | ms |", "`ttft_ms` | s |"), encoding="utf-8")
    assert any("differs from specbench/records.py" in p for p in docs.stale_fields(page, tmp_path))
    assert "| `ttft_ms` | ms |" in docs.refresh_text(page.read_text(encoding="utf-8"), tmp_path)


# ----------------------------------------------------------------------------- one divisor

def _rows(ar: bool = True) -> list[dict]:
    """Two batches of a replayed job, as ``runners.replay.grid`` writes their batch fields."""
    batches = [SimpleNamespace(rows=[SimpleNamespace(new_tokens=n) for n in (8, 12)], wall_ms=1000.0, new_tokens=20),
               SimpleNamespace(rows=[SimpleNamespace(new_tokens=10)], wall_ms=400.0, new_tokens=10)]
    walls = [(50.0, [1500.0, 1800.0]), (50.0, [700.0])] if ar else None
    fields = job_batch_fields(batches, 2, "per_row", walls)
    tokens = [8, 12, 10]
    return [{"pair": "p", "task": "t", "max_new_tokens": 32, "method": "m", "gamma_init": 2, "new_tokens": n,
             "wall_ms": 900.0, "drafted_trace": [], "accepted_trace": [], **f} for n, f in zip(tokens, fields)]


def test_a_replayed_row_has_a_records_batch_fields_and_no_others():
    for row in _rows():
        assert set(row) - {"pair", "task", "max_new_tokens", "method", "gamma_init", "drafted_trace",
                           "accepted_trace"} <= set(RECORD_FIELDS)
    assert [r["batch_share_ms"] for r in _rows()] == [400.0, 600.0, 400.0]


def test_one_divisor_for_records_replayed_rows_and_cells():
    rows = _rows()
    # a batched row: its share of the batch's wall; the AR side its share of the AR batch by the AR batch's tokens
    assert [throughput_ms(r) for r in rows] == [400.0, 600.0, 400.0]
    assert [throughput_ms(r, ar=True) for r in rows] == pytest.approx([720.0, 1080.0, 700.0])
    # batch 1, and a frame's row whose missing values are NaN
    assert throughput_ms({"wall_ms": 30.0, "ar_wall_ms": 60.0, "new_tokens": 3}, ar=True) == 60.0
    assert throughput_ms({"wall_ms": 30.0, "batch_share_ms": math.nan, "ar_batch_wall_ms": math.nan,
                          "ar_wall_ms": 60.0, "new_tokens": 3}, ar=True) == 60.0
    assert throughput_ms({"wall_ms": 30.0, "batch_share_ms": math.nan}) == 30.0
    # a record of its batch: the job's builder gives what the replay's gives
    job = batch_fields(2, 0, 2, 1000.0, 20, 8, "per_row", 1800.0, 20)
    assert throughput_ms({**job, "new_tokens": 8}) == 400.0 and throughput_ms({**job, "new_tokens": 8}, ar=True) == 720.0
    # a cell sums its rows' divisors; the lab pools a cell as it pools its rows
    (cell,) = cells(rows)
    assert cell["batch_share_ms"] == 1400.0 and cell["ar_share_ms"] == pytest.approx(2500.0)
    assert cell["tokens_per_s"] == pytest.approx(30 / 1.4) and cell["ar_tokens_per_s"] == pytest.approx(30 / 2.5)
    assert throughput_ms(cell, ar=True) == cell["ar_share_ms"]
    assert _pooled(pd.DataFrame([cell])) == pytest.approx(_pooled(pd.DataFrame(rows)))
    assert sum(_time(pd.DataFrame(rows), ar=True)) == pytest.approx(cell["ar_share_ms"])
    assert cells(_rows(ar=False))[0]["ar_share_ms"] is None


# ----------------------------------------------------------------------------- the method's identity

@pytest.fixture
def conf(tmp_path):
    (tmp_path / "method").mkdir()
    (tmp_path / "hetero").mkdir()
    (tmp_path / "method" / "gammatune.yaml").write_text("name: gammatune\nrunner: speculative\npolicy: gammatune\n"
                                                         "eta: 0.25\ndelta: 2\ntransient: true\n")
    (tmp_path / "hetero" / "slrs.yaml").write_text("name: slrs\nlookbehind: 10\nmax_nodes: 32\n")
    return tmp_path


def test_the_job_keys_a_method_by_its_yaml_at_run_time(conf):
    params = {"eta": 0.5, "delta": 2, "transient": False}
    assert method_key("gammatune", params, conf_dir=conf) == "gammatune[eta=0.5,carryover]"
    assert method_key("gammatune", {"eta": 0.25, "delta": 2.0}, conf_dir=conf) == "gammatune"
    assert method_key("gammatune", {"eta": 0.25}, "slrs", {"name": "slrs", "lookbehind": 10, "max_nodes": 8},
                      conf_dir=conf) == "gammatune[max_nodes=8]"
    assert method_key("no_yaml", {"transient": False, "eta": 1}, conf_dir=conf) == "no_yaml[carryover]"
    (conf / "method" / "gammatune.yaml").write_text("name: gammatune\neta: 0.5\ndelta: 2\ntransient: false\n")
    from specbench.config.method import _yaml_items

    _yaml_items.cache_clear()
    assert method_key("gammatune", params, conf_dir=conf) == "gammatune"  # today's default: no variant


def test_analysis_keys_a_record_by_what_it_ran_not_by_todays_defaults():
    base = {"pair": "p", "prompt_id": "a", "turn": 1, "new_tokens": 4, "wall_ms": 10.0, "method": "gammatune",
            "method_params": {"eta": 0.5}}
    df = rows_to_frame([{**base, "method_key": "gammatune"},  # 0.5 was the default when it ran
                        base,  # a row without a key: keyed as a job would key it today (eta 0.25)
                        {**base, "method_key": "gammatune[delta=3]", "engine": "fused_prefill", "pair": "q"},
                        {**base, "method_key": "gammatune[delta=3]", "pair": "q", "engine": "plain"}])
    assert df["method"].tolist() == ["gammatune", "gammatune[eta=0.5]", "gammatune[delta=3,fused_prefill]",
                                     "gammatune[delta=3,plain]"]


def test_a_replayed_label_is_keyed_as_the_same_overrides_of_a_job():
    delta = method_defaults("gammatune")["delta"]  # at its default: no tag
    assert MethodSpec(f"gammatune:eta=0.123,delta={delta}", "gammatune", {}).key == "gammatune[eta=0.123]"
    assert load_method("gammatune").key == "gammatune" == method_key("gammatune", load_method("gammatune").params)
    assert load_method("specdecode").key == "specdecode"


def test_analysis_reads_no_conf():
    for path in (ROOT / "analysis").rglob("*.py"):
        code = path.read_text(encoding="utf-8")
        assert not re.search(r"CONF_DIR|conf_dir|specbench\.paths|hydra|OmegaConf", code), path


def test_a_job_writes_its_method_key_and_analysis_keys_it_by_that(tmp_path):
    """A real (tiny) job with ``method.eta`` off its default writes ``gammatune[eta=0.125]`` into every record, and
    the frame keys the job by it."""
    from omegaconf import OmegaConf

    from analysis.frame import load_records
    from runners.jobs.job import run_job

    from helpers import compose, saved_pair_config, tiny

    tok, target, draft, _ = tiny.tiny_pair()
    cfg = compose("method=gammatune", "method.eta=0.125", "gamma=2", "task.n_prompts=1", "max_new_tokens=6",
                  "warmup=0", f"results_dir={tmp_path / 'results'}")
    cfg.pair = OmegaConf.create(saved_pair_config(tok, target, draft, tmp_path))
    run_job(cfg, tmp_path / "results" / "job", progress=False)
    records = [r for r in (tmp_path / "results" / "job" / "records.jsonl").read_text().splitlines() if r]
    assert records and all('"method_key": "gammatune[eta=0.125]"' in r for r in records)
    assert set(load_records(tmp_path / "results")["method"]) == {"gammatune[eta=0.125]"}
