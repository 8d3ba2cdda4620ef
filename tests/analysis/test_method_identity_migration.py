"""Every committed record states its own identity (issue 51, item 3): ``scripts/migrate_method_identity.py`` wrote
into the older ones what today's job and replay write, once, and nothing else; run again it changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specbench.record_io import read_records

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "committed"
sys.path.insert(0, str(ROOT / "scripts"))

import migrate_method_identity as migration  # noqa: E402

IDENTITY = {"records.jsonl": ("method_key", "method_display", "hetero_display"),
            "replay.jsonl": ("method_key", "method_display", "method_params")}


def _old_job(folder: Path) -> None:
    """A job of the older schema: a GammaTune record with η off its default, on SLEM with look-behind 5."""
    job = folder / "experiment=x,method=gammatune"
    job.mkdir(parents=True)
    record = {"pair": "p", "method": "gammatune", "hetero": "slem", "output_text": "é",
              "method_params": {"eta": 0.5, "delta": 2, "gamma_min": 1, "gamma_max": 32, "transient": True,
                                "expand_on": "gamma"}, "ar_cache": None, "wall_ms": 1.5}
    (job / "records.jsonl").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    config = {"method": {"name": "gammatune", "runner": "speculative", "policy": "gammatune", **record["method_params"]},
              "hetero": {"name": "auto", "lookbehind": 5}}
    (job / "summary.json").write_text(json.dumps({"status": "complete", "config": config}), encoding="utf-8")
    rows = [{"method": "gammatune_plus:delta=3", "wall_ms": 2.0}, {"method": "oracle", "wall_ms": 1.0}]
    (folder / "replay").mkdir()
    (folder / "replay" / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_the_migration_writes_what_todays_writers_write_and_nothing_else(tmp_path):
    _old_job(tmp_path)
    assert migration.main([str(tmp_path)]) == 0
    (record,) = read_records(tmp_path / "experiment=x,method=gammatune" / "records.jsonl")
    assert (record["method_key"], record["method_display"], record["hetero_display"]) == \
        ("gammatune[eta=0.5,lookbehind=5]", "GammaTune", "SLEM")
    assert (record["output_text"], record["wall_ms"], list(record)[:4]) == ("é", 1.5, ["pair", "method", "hetero",
                                                                                       "output_text"])
    plus, oracle = read_records(tmp_path / "replay" / "replay.jsonl")
    assert (plus["method_key"], plus["method_display"], plus["method_params"]["delta"],
            plus["method_params"]["threshold"]) == ("gammatune_plus[delta=3]", "GammaTune+", 3, 0.4)
    assert (oracle["method_key"], oracle["method_display"], oracle["method_params"]) == (None, None, {})


def test_a_second_run_changes_nothing(tmp_path):
    _old_job(tmp_path)
    migration.main([str(tmp_path)])
    files = sorted(tmp_path.rglob("*.jsonl"))
    before = [p.read_bytes() for p in files]
    assert migration.main([str(tmp_path), "--check"]) == 0  # nothing left to migrate
    migration.main([str(tmp_path)])
    assert [p.read_bytes() for p in files] == before


@pytest.mark.parametrize("name", sorted(IDENTITY))
def test_every_committed_line_states_its_identity(name):
    missing = {}
    for path in sorted(COMMITTED.rglob(name)):
        lines = read_records(path)
        lacking = [r.get("method") for r in lines if not all(k in r for k in IDENTITY[name])]
        if lacking:
            missing[str(path.relative_to(COMMITTED))] = len(lacking)
    assert not missing, f"run scripts/migrate_method_identity.py on: {missing}"
