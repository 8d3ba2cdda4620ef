"""One target in two dtypes (issue 52, item 1: "a target run in another dtype than its config names is a different
target, never compared with the other dtype"): ``pair.target.dtype=float32,bfloat16`` in one sweep gives records of
one pair name whose target ran in two dtypes; the frame names them ``<pair>@<dtype>`` (``analysis.frame``,
``split_by_dtype``) so their timings never pool and every speedup divides by a baseline of its own dtype, after any
device kind, and idempotently."""

from __future__ import annotations

import json

import pandas as pd

from analysis.frame import load_records, rows_to_frame, split_runs
from analysis.metrics import gamma_speedups, throughput_by

from helpers.analysis_records import record_row


def _rows(dtype: str | None, tokens_per_s: float, method: str = "gammatune", n: int = 2, pair: str = "p",
          device_id: str = "cpu@h") -> list[dict]:
    wall = 10.0 / tokens_per_s * 1000.0
    return [record_row(pair=pair, method=method, prompt_id=f"q{i}", new_tokens=10, wall_ms=wall,
                       tokens_per_s=tokens_per_s, device_id=device_id, target_dtype=dtype) for i in range(n)]


def test_one_pair_in_two_dtypes_is_two_pairs_and_never_compares_across():
    df = rows_to_frame(_rows("float32", 10.0, "specdecode") + _rows("float32", 20.0)
                       + _rows("bfloat16", 15.0, "specdecode") + _rows("bfloat16", 15.0))
    assert sorted(df["pair"].unique()) == ["p@bfloat16", "p@float32"]
    assert sorted(df["target"].unique()) == [f"{record_row()['target']}@bfloat16", f"{record_row()['target']}@float32"]
    cells = throughput_by(df, ["pair"]).set_index("pair")
    assert cells["n_records"].to_dict() == {"p@bfloat16": 4, "p@float32": 4}
    speedup = gamma_speedups(df, baseline="specdecode").set_index(["pair", "method"])["speedup"]
    assert round(speedup[("p@float32", "gammatune")], 6) == 2.0  # over its own dtype's SpecDecode
    assert round(speedup[("p@bfloat16", "gammatune")], 6) == 1.0


def test_a_pair_in_one_dtype_keeps_its_name_and_the_split_follows_the_device_kind():
    df = rows_to_frame(_rows("float32", 10.0) + _rows("bfloat16", 30.0, pair="q"))
    assert sorted(df["pair"].unique()) == ["p", "q"]
    both = rows_to_frame(_rows("float32", 10.0) + _rows("bfloat16", 12.0)
                         + _rows("bfloat16", 100.0, device_id="cuda:GPU-1@h"))
    assert sorted(both["pair"].unique()) == ["p@cpu@bfloat16", "p@cpu@float32", "p@cuda"]


def test_split_again_after_concatenating_folders_is_the_same():
    one = rows_to_frame(_rows("float32", 10.0))
    mixed = rows_to_frame(_rows("float32", 11.0) + _rows("bfloat16", 14.0))
    again = split_runs(pd.concat([one, mixed], ignore_index=True))
    assert again["pair"].value_counts().to_dict() == {"p@float32": 4, "p@bfloat16": 2}
    assert split_runs(again)["pair"].tolist() == again["pair"].tolist()


def test_load_records_reads_the_dtype_from_each_jobs_config(tmp_path):
    """The dtype a job ran is its summary's ``pair.target.dtype``: a folder with both is split on load."""
    for name, dtype, rate in (("dtype=float32", "float32", 10.0), ("dtype=bfloat16", "bfloat16", 14.0)):
        job = tmp_path / name
        job.mkdir()
        rows = _rows(None, rate)
        (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = {"pair": {"name": "p", "target": {"name": "t", "dtype": dtype}}, "method": {"name": "gammatune"}}
        (job / "summary.json").write_text(json.dumps({"status": "complete", "config": config}))
    df = load_records(tmp_path)
    assert sorted(df["pair"].unique()) == ["p@bfloat16", "p@float32"]
    assert set(df["target_dtype"]) == {"bfloat16", "float32"}
