"""W&B runs → the same frame (``analysis.wandb_source``): a fake API serving the synthetic results folder's jobs
(both ways W&B stores a table) gives the tables the local records give."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis.frame import complete_only
from analysis.gammatune.table2 import speedup_table
from analysis.wandb_source import fetch_frame, frame_from_runs, rows_from_run
from specbench.loggers import records_table

from helpers.analysis_records import record_row


class FakeFile:
    def __init__(self, payload: dict) -> None:
        self.payload = payload

    def download(self, root: str = ".", replace: bool = False):
        target = Path(root) / "media" / "table" / "records.table.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.payload))
        return open(target)


class FakeRun:
    def __init__(self, run_id, config, records, state="finished", status="complete", via_artifact=False):
        columns, data = records_table(records)
        self.id, self.state, self.path = run_id, state, ["me", "specbench", run_id]
        self.config = {k: {"value": v, "desc": None} for k, v in config.items()}  # old API wrapping
        self._payload = {"columns": columns, "data": data}
        self._via_artifact = via_artifact
        self.summary = {"status": status}
        if not via_artifact:
            self.summary["records"] = {"_type": "table-file", "path": "media/table/records.table.json"}

    def file(self, path):
        assert path == "media/table/records.table.json"
        return FakeFile(self._payload)

    def logged_artifacts(self):
        payload = self._payload

        class Artifact:
            type, name = "run_table", f"run-{self.id}-records:v0"

            def get(self, key):
                return type("Table", (), {"columns": payload["columns"], "data": payload["data"]})()

        return [Artifact()] if self._via_artifact else []


class FakeApi:
    def __init__(self, runs):
        self._runs = runs

    def runs(self, path, filters=None):
        assert path == "me/specbench"
        return list(self._runs)


def _fake_runs(results: Path) -> list[FakeRun]:
    runs = []
    for i, path in enumerate(sorted(results.rglob("records.jsonl"))):
        summary_path = path.parent / "summary.json"
        if not summary_path.exists():
            continue
        summary = json.loads(summary_path.read_text())
        records = [json.loads(line) for line in path.read_text().splitlines()]
        state = "failed" if summary["status"] == "failed" else "finished"
        runs.append(FakeRun(f"r{i}", summary["config"], records, state=state, status=None, via_artifact=i % 2 == 1))
    return runs


def test_rows_from_run_is_pure_and_decodes_cells():
    columns, data = records_table([record_row(gamma_trace=[2, 3], accepted_trace=[1, 0], extra={"k": 1})])
    table = {"columns": columns, "data": data}
    assert isinstance(data[0][columns.index("gamma_trace")], str)  # JSON-encoded in W&B
    rows = rows_from_run({"pair": {"value": {"name": "p"}}, "method": "gammatune", "max_new_tokens": 64}, table,
                         run_path="me/specbench/abc", state="crashed")
    assert rows[0]["gamma_trace"] == [2, 3] and rows[0]["extra"] == {"k": 1}
    assert rows[0]["job_status"] == "failed" and rows[0]["source"] == "wandb" and rows[0]["max_new_tokens"] == 64
    assert rows_from_run({}, None) == []
    assert rows_from_run({}, table, summary_status="complete")[0]["job_status"] == "complete"


def test_wandb_runs_give_the_same_tables(results, complete, paper):
    runs = _fake_runs(results)
    frame = fetch_frame("me/specbench", api=FakeApi(runs))
    assert set(frame["source"]) == {"wandb"} and len(frame) == 33  # every job with a summary
    assert set(frame.loc[frame["method"] == "hf_heuristic", "job_status"]) == {"failed"}
    remote = speedup_table(complete_only(frame), paper=paper)
    local = speedup_table(complete, paper=paper)
    pd.testing.assert_frame_equal(remote.display, local.display)
    assert frame_from_runs([]).empty
