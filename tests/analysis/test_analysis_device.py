"""One pair on two device kinds (``analysis.frame``, ``split_by_device``): since the top-level ``device`` key one
pair name runs on the CPU and on a GPU, and the tables group by ``pair``; the frame names such a pair
``<pair>@<kind>`` per kind so their timings never pool, keeps a pair seen on one kind as it was, and places a
record without ``device_id`` by its pair's other records."""

from __future__ import annotations

import json

import pandas as pd

from analysis.frame import column_types, load_records, rows_to_frame
from analysis.metrics import gamma_speedups, throughput_by
from analysis.run_names import device_kind, split_by_device

from helpers.analysis_records import record_row

CPU, GPU, GPU2 = "cpu@h", "cuda:GPU-1@h", "cuda:GPU-2@h"
TARGET = record_row()["target"]


def _rows(device_id, tokens_per_s: float, method: str = "gammatune", n: int = 2, pair: str = "p") -> list[dict]:
    """``n`` turns of ``pair`` on ``device_id`` (None: no ``device_id`` field at all) at ``tokens_per_s``."""
    wall = 10.0 / tokens_per_s * 1000.0
    device = {} if device_id is None else {"device_id": device_id}
    return [record_row(pair=pair, method=method, prompt_id=f"q{i}", new_tokens=10, wall_ms=wall,
                       tokens_per_s=tokens_per_s, **device) for i in range(n)]


def test_device_kind_of_an_id():
    assert device_kind("cpu@h") == "cpu"
    assert device_kind("cuda:GPU-8f3e-11aa@host-1") == "cuda"
    assert device_kind("cuda:0@h") == "cuda"
    assert device_kind("cuda:GPU-1@h,cpu@h") == "cpu+cuda"
    assert device_kind("cuda:GPU-1@h,cuda:GPU-2@h") == "cuda"
    assert device_kind(None) is None and device_kind(float("nan")) is None
    assert column_types()["device_kind"].kind == "text"


def test_one_pair_on_a_cpu_and_a_gpu_is_two_pairs_and_never_pools():
    df = rows_to_frame(_rows(CPU, 10.0) + _rows(GPU, 100.0, n=3))
    assert sorted(df["pair"].unique()) == ["p@cpu", "p@cuda"]
    assert df.groupby("pair")["device_kind"].agg(set).to_dict() == {"p@cpu": {"cpu"}, "p@cuda": {"cuda"}}
    cells = throughput_by(df, ["pair"]).set_index("pair")
    assert cells["n_records"].to_dict() == {"p@cpu": 2, "p@cuda": 3}
    assert cells["tokens_per_s"].round(6).to_dict() == {"p@cpu": 10.0, "p@cuda": 100.0}
    # each device's speedup over its own baseline, not over a CPU+GPU average
    both = rows_to_frame(_rows(CPU, 10.0, "specdecode") + _rows(CPU, 20.0)
                         + _rows(GPU, 100.0, "specdecode") + _rows(GPU, 150.0))
    speedup = gamma_speedups(both, baseline="specdecode").set_index(["pair", "method"])["speedup"]
    assert round(speedup[("p@cpu", "gammatune")], 6) == 2.0
    assert round(speedup[("p@cuda", "gammatune")], 6) == 1.5


def test_a_pair_on_one_kind_keeps_its_name():
    df = rows_to_frame(_rows(CPU, 10.0) + _rows(GPU, 100.0, pair="q") + _rows(GPU2, 90.0, pair="q"))
    assert sorted(df["pair"].unique()) == ["p", "q"]  # two GPUs are one kind
    assert set(df.loc[df["pair"] == "q", "device_kind"]) == {"cuda"}


def test_a_pair_spread_over_devices_is_its_own_kind():
    df = rows_to_frame(_rows(CPU, 10.0) + _rows(f"{GPU},{CPU}", 30.0) + _rows(f"{GPU},{GPU2}", 50.0))
    assert sorted(df["pair"].unique()) == ["p@cpu", "p@cpu+cuda", "p@cuda"]
    assert throughput_by(df, ["pair"]).set_index("pair")["n_records"].to_dict() == {
        "p@cpu": 2, "p@cpu+cuda": 2, "p@cuda": 2}


def test_a_record_without_device_id_follows_its_pairs_single_kind_else_stays_apart():
    one_kind = rows_to_frame(_rows(GPU, 100.0) + _rows(None, 10.0, n=1))
    assert set(one_kind["pair"]) == {"p"} and set(one_kind["device_kind"]) == {"cuda"}
    two_kinds = rows_to_frame(_rows(CPU, 10.0) + _rows(GPU, 100.0) + _rows(None, 50.0, n=1)
                              + _rows(None, 50.0, n=1, pair="old"))
    by_pair = two_kinds.groupby("pair")["device_kind"].agg(lambda s: set(s.dropna())).to_dict()
    assert by_pair == {"p": set(), "p@cpu": {"cpu"}, "p@cuda": {"cuda"}, "old": set()}
    assert throughput_by(two_kinds, ["pair"]).set_index("pair")["n_records"].to_dict() == {
        "old": 1, "p": 1, "p@cpu": 2, "p@cuda": 2}


def test_split_again_after_concatenating_folders():
    """Two folders' frames, each on one kind (or already split), concatenated and split again: the same names
    as one frame of all their rows."""
    cpu_folder = rows_to_frame(_rows(CPU, 10.0))
    mixed_folder = rows_to_frame(_rows(CPU, 12.0) + _rows(GPU, 100.0))
    assert set(cpu_folder["pair"]) == {"p"} and set(mixed_folder["pair"]) == {"p@cpu", "p@cuda"}
    again = split_by_device(pd.concat([cpu_folder, mixed_folder], ignore_index=True))
    assert again["pair"].value_counts().to_dict() == {"p@cpu": 4, "p@cuda": 2}
    assert split_by_device(again)["pair"].tolist() == again["pair"].tolist()


def test_load_records_splits_a_folder_holding_both(tmp_path):
    for name, device_id, rate in (("device=cpu", CPU, 10.0), ("device=cuda", GPU, 100.0)):
        job = tmp_path / name
        job.mkdir()
        (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(device_id, rate)))
    df = load_records(tmp_path)
    assert df.groupby("job_dir")["pair"].agg(set).to_dict() == {"device=cpu": {"p@cpu"}, "device=cuda": {"p@cuda"}}


def test_a_target_on_two_kinds_is_two_targets_for_the_tables_keyed_by_target():
    """The hf-bench, cross-vocabulary and category tables key by ``target``: it is named per kind as the pair is."""
    df = rows_to_frame(_rows(CPU, 10.0, pair="p") + _rows(GPU, 100.0, pair="q"))
    assert sorted(df["pair"].unique()) == ["p", "q"]  # each pair ran on one kind
    assert df.groupby("target")["device_kind"].agg(set).to_dict() == {f"{TARGET}@cpu": {"cpu"},
                                                                      f"{TARGET}@cuda": {"cuda"}}
    one = rows_to_frame(_rows(GPU, 100.0, pair="q"))
    assert set(one["target"]) == {TARGET}


def test_two_folders_one_per_device_are_two_pairs(tmp_path):
    from analysis.make_artefacts import load_folders

    for folder, device_id, rate in (("cpu_sweep", CPU, 10.0), ("gpu_sweep", GPU, 100.0)):
        job = tmp_path / folder / "job"
        job.mkdir(parents=True)
        (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(device_id, rate)))
    df = load_folders([tmp_path / "cpu_sweep", tmp_path / "gpu_sweep"])
    assert df.groupby("pair")["device_kind"].agg(set).to_dict() == {"p@cpu": {"cpu"}, "p@cuda": {"cuda"}}


def test_a_split_pair_is_predicted_only_by_a_calibration_timed_on_its_own_device(tmp_path):
    from analysis.leviathan import load_calibrations

    for name, device, c in (("p_cpu", "cpu", 5.0), ("p_gpu", "cuda:0", 2.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"latency_version": 1, "target": {}, "draft": {},
                                                          "meta": {"pair": "p", "c": c, "device": device}}))
    calibrations = load_calibrations(tmp_path)
    assert calibrations["p@cpu"] == 5.0 and calibrations["p@cuda"] == 2.0


def test_a_target_named_per_device_still_finds_the_papers_rows():
    from analysis.paper import model_key

    assert model_key("Llama-3.1-8B-Instruct@cuda") == model_key("meta-llama/Llama-3.1-8B-Instruct") != ""
    assert model_key("phi-4@cpu+cuda") == model_key("phi-4")
