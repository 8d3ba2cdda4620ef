"""W&B runs in, the same records frame out (``python -m analysis --wandb ENTITY/PROJECT``).

Each run logged by ``specbench.loggers.WandbLogger`` carries its job's resolved
config and a ``records`` table (one row per record, every ``Record`` field,
lists JSON-encoded). ``rows_from_run`` turns (config, table, run facts) into the
rows ``analysis.frame.load_records`` would have produced for the job folder:
the same pure function is tested on fake objects; ``fetch_frame`` is the thin
part that talks to ``wandb.Api`` (``api`` can be injected).

Run state → ``job_status``: the run summary's ``status`` when the logger wrote
one, else ``finished`` → complete, ``running`` → incomplete, anything else
(``failed``, ``crashed``, ``killed``) → failed.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.frame import job_rows, rows_to_frame

TABLE_KEY = "records"
_STATE = {"finished": "complete", "running": "incomplete", "pending": "incomplete"}


def decode_cell(value: Any) -> Any:
    """Undo ``specbench.loggers.encode_cell``: JSON lists/dicts back to Python."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def unwrap_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run config as plain values (old API versions wrap each as ``{"value": ..., "desc": ...}``)."""
    out = {}
    for key, value in dict(config or {}).items():
        if key.startswith("_"):
            continue
        if isinstance(value, Mapping) and "value" in value and set(value) <= {"value", "desc"}:
            value = value["value"]
        out[key] = value
    return out


def table_columns_data(table: Any) -> tuple[list[str], list[list[Any]]]:
    """(columns, data) of a ``wandb.Table`` or its JSON form ``{"columns", "data"}``."""
    if isinstance(table, Mapping):
        return list(table["columns"]), [list(r) for r in table["data"]]
    return list(table.columns), [list(r) for r in table.data]


def job_status(state: str | None, summary_status: str | None) -> str:
    if summary_status:
        return str(summary_status)
    return _STATE.get(str(state), "failed")


def rows_from_run(
    config: Mapping[str, Any] | None,
    table: Any,
    *,
    run_path: str = "",
    state: str | None = "finished",
    summary_status: str | None = None,
) -> list[dict[str, Any]]:
    """The records rows of one W&B run (module doc); ``[]`` when it has no table."""
    if table is None:
        return []
    columns, data = table_columns_data(table)
    records = [{c: decode_cell(v) for c, v in zip(columns, row, strict=False)} for row in data]
    config = unwrap_config(config)
    status = job_status(state, summary_status)
    summary = {"config": config, "status": status, "provenance": config.get("provenance")}
    return job_rows(records, summary, job_dir=run_path, source="wandb", status=status)


def load_run_table(run: Any, key: str = TABLE_KEY) -> Any:
    """A run's logged table: via the file its summary points to, else via its
    ``run_table`` artifact. ``None`` when the run has none."""
    ref = run.summary.get(key) if hasattr(run.summary, "get") else None
    path = ref.get("path") if hasattr(ref, "get") else None
    if path:
        with tempfile.TemporaryDirectory() as tmp:
            run.file(path).download(root=tmp, replace=True)
            return json.loads((Path(tmp) / path).read_text(encoding="utf-8"))
    for artifact in run.logged_artifacts():
        if getattr(artifact, "type", None) == "run_table" and key in getattr(artifact, "name", ""):
            return artifact.get(key)
    return None


def frame_from_runs(runs: Iterable[Any], load_table=load_run_table) -> pd.DataFrame:
    """The records frame of many runs (objects with ``config``, ``summary``, ``state``, ``path``/``id``)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        summary = run.summary if hasattr(run.summary, "get") else {}
        path = "/".join(run.path) if isinstance(getattr(run, "path", None), (list, tuple)) else str(run.id)
        rows += rows_from_run(run.config, load_table(run), run_path=path, state=getattr(run, "state", None),
                              summary_status=summary.get("status"))
    return rows_to_frame(rows)


def fetch_frame(project_path: str, api: Any = None, filters: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Every run of ``ENTITY/PROJECT`` (optionally filtered, W&B's MongoDB-style filters)."""
    if api is None:
        import wandb

        api = wandb.Api()
    return frame_from_runs(api.runs(project_path, filters=dict(filters or {})))
