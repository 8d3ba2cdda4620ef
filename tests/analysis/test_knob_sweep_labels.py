"""The knob sweep labels every row by the knobs the row ran with (issue 51, item 3): a replayed row carries its own
``method_key`` and ``method_params`` (``runners.replay.grid``), so changing a default in ``conf/method`` after the
rows were written relabels none of them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from analysis.gammatune.knob_sweep import knob_sweep_table, replay_frame
from runners.replay.grid import load_method
from specbench.config.method import method_key, parse_spelling
from specbench.paths import CONF_DIR

SWEPT = ("gammatune", "gammatune_plus")
#: the sweep every table below holds: the same runs, whatever the defaults were when they were written
RUNS = [{"eta": eta, "delta": delta} for eta in (0.25, 0.5) for delta in (2, 3)]


def _conf(tmp_path: Path, **defaults) -> Path:
    """A copy of ``conf/`` whose swept methods' YAMLs have ``defaults`` instead (another day's defaults)."""
    (tmp_path / "method").mkdir(parents=True)
    for name in (*SWEPT, "specdecode"):
        node = yaml.safe_load((CONF_DIR / "method" / f"{name}.yaml").read_text(encoding="utf-8"))
        node.update({k: v for k, v in defaults.items() if k in node})
        (tmp_path / "method" / f"{name}.yaml").write_text(yaml.safe_dump(node), encoding="utf-8")
    return tmp_path


def _rows(conf: Path) -> pd.DataFrame:
    """The replay's rows of ``RUNS`` as a replay under ``conf`` writes them: the label names only the knobs off that
    day's default (as a sweep names its overrides); key and params as a job under ``conf`` states them."""
    defaults = yaml.safe_load((conf / "method" / "gammatune.yaml").read_text(encoding="utf-8"))
    labels = ["specdecode"]
    for name in SWEPT:
        for run in RUNS:
            off = ",".join(f"{k}={v}" for k, v in run.items() if v != defaults[k])
            labels.append(f"{name}:{off}" if off else name)
    rows = []
    for label in labels:
        spec = load_method(label, conf / "method")
        name, overrides = parse_spelling(label)
        params = dict(spec.params)
        # the wall time depends on the knobs that ran, so a mislabelled row moves a cell
        wall = 100.0 if name == "specdecode" else 90.0 - 40 * params["eta"] - 5 * params["delta"]
        for pair in ("p", "q"):
            for gamma in (2, 4):
                rows.append({"pair": pair, "target": "t", "draft": "d", "method": label, "task": "k",
                             "category": "c", "prompt_id": "a", "turn": 1, "gamma_init": gamma, "temperature": 0.0,
                             "new_tokens": 10, "wall_ms": wall + gamma, "tokens_per_s": 10 / (wall + gamma) * 1000,
                             "ttft_ms": 1.0, "max_new_tokens": 40, "source": "replay", "predicted": True,
                             "method_key": method_key(name, overrides, conf_dir=conf), "method_params": params})
    return pd.DataFrame(rows)


def _cells(conf: Path) -> dict[tuple, float]:
    table = knob_sweep_table(replay_frame(_rows(conf)))
    assert table is not None
    data = table.data
    return {(r["method"], r["pair"], r["eta"], r["delta"]): round(r["mean"], 12) for r in data.to_dict("records")}


def test_a_changed_default_relabels_no_row(tmp_path):
    today = _cells(_conf(tmp_path / "today"))
    changed = _cells(_conf(tmp_path / "changed", delta=3, eta=0.5))
    assert len(today) == len(SWEPT) * len(RUNS) * 3  # two pairs and their average, each run once
    assert changed == today
    # the row that ran at the changed day's defaults (no tag) is labelled by what it ran: η = 0.5, δ = 3
    assert ("gammatune", "p", 0.5, 3) in changed


def test_each_row_reads_its_own_params(tmp_path):
    rows = _rows(_conf(tmp_path, delta=3))
    frame = replay_frame(rows)
    untagged = frame[frame["method"] == "gammatune"]
    assert not untagged.empty and all(p["delta"] == 3 and p["eta"] == 0.25 for p in untagged["method_params"])
    table = knob_sweep_table(frame)
    at = table.data[(table.data["method_key"] == "gammatune") & (table.data["pair"] == "p")]
    assert list(zip(at["eta"], at["delta"])) == [(0.25, 3)]
    assert "δ = 3" in table.caption and "δ = 2" not in table.caption



def test_one_key_that_ran_two_ways_is_no_cell(tmp_path):
    """Rows of two days pooled under one key (``gammatune``: η = 0.25, δ = 2 one day, δ = 3 the other, each the
    default of its day) are no cell of the sweep, rather than a cell labelled by either day."""
    rows = pd.concat([_rows(_conf(tmp_path / "a")), _rows(_conf(tmp_path / "b", delta=3))], ignore_index=True)
    data = knob_sweep_table(replay_frame(rows)).data
    assert "gammatune" not in set(data["method_key"]) and "gammatune[delta=3]" in set(data["method_key"])
