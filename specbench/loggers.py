"""Per-job experiment loggers: ``conf/logger/{none,wandb}.yaml``.

``build_logger(cfg)`` returns a ``JobLogger`` for ``cfg.name`` (a ``specbench.config.LoggerConfig``). A job uses it as::

    logger = build_logger(cfg)
    logger.start(config_dict, job_name)
    failed, summary = True, {}
    try:
        for i, record in enumerate(...):
            logger.log_record(asdict(record))       # step = i
        summary = {...}                             # what summary.json holds
        failed = summary.get("status") != "complete"
    finally:
        logger.finish(summary, failed=failed)       # always: a failed job never leaks

The W&B logger (``wandb`` imported lazily, only when chosen):

* ``start``: ``wandb.init(project, entity, group, name=job_name, config=config,
  tags, mode, dir, job_type="benchmark", reinit="finish_previous")``; ``group``
  defaults to the results folder's name (``config["results_dir"]``); the
  environment's ``WANDB_MODE`` (``offline`` / ``disabled``) wins over ``mode``.
* ``log_record``: the record's numeric fields as ``prompt/<field>`` with
  ``step`` = the record's index in the job (one per prompt turn).
* ``finish``: the summary's aggregates and ``status``/``error`` into the run
  summary, provenance into the run config, and two tables: ``records`` (one row
  per record, every ``Record`` field; lists and dicts JSON-encoded as strings)
  and ``traces`` (one row per round: prompt_id, turn, round, gamma, drafted,
  accepted). ``run.finish(exit_code=1 if failed else 0)`` is called in a
  ``finally``, so it runs even when logging the tables fails.

``python -m analysis --wandb ENTITY/PROJECT`` reads the ``records`` table back.
"""

from __future__ import annotations

import json
import logging
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.config import LoggerConfig
from specbench.records import RECORD_FIELDS
from specbench.registry import Registry

log = logging.getLogger(__name__)

RECORDS_TABLE = "records"
TRACES_TABLE = "traces"
TRACE_COLUMNS = ("prompt_id", "turn", "round", "gamma", "drafted", "accepted")
STEP_FIELDS = (
    "new_tokens", "prompt_tokens", "ttft_ms", "tpot_ms", "tokens_per_s", "wall_ms", "rounds", "drafted", "accepted",
    "acceptance_rate", "mean_accepted_per_round", "ar_tokens_per_s", "speedup", "lossless", "first_divergence",
)


class JobLogger(ABC):
    """One job's run in an experiment tracker."""

    name: str = ""

    @abstractmethod
    def start(self, config: Mapping[str, Any], job_name: str) -> None:
        """A job starts: ``config`` is its resolved config as a plain dict."""

    @abstractmethod
    def log_record(self, record: Mapping[str, Any]) -> None:
        """One record (``specbench.records.Record`` as a dict) was written."""

    @abstractmethod
    def finish(self, summary: Mapping[str, Any], failed: bool) -> None:
        """The job ended (``summary``: what ``summary.json`` holds). Must be called
        exactly once per ``start``, also when the job raised; a second call is a no-op."""


class NullLogger(JobLogger):
    """``logger=none``: logs nothing."""

    name = "none"

    def start(self, config: Mapping[str, Any], job_name: str) -> None:
        pass

    def log_record(self, record: Mapping[str, Any]) -> None:
        pass

    def finish(self, summary: Mapping[str, Any], failed: bool) -> None:
        pass


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not (isinstance(value, float) and not math.isfinite(value))


def encode_cell(value: Any) -> Any:
    """A table cell: lists and dicts as JSON strings (W&B tables need flat cells)."""
    return json.dumps(value, allow_nan=False) if isinstance(value, (list, dict, tuple)) else value


def records_table(records: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows) of the per-record table: every ``Record`` field, then any extra key."""
    columns = list(RECORD_FIELDS)
    for record in records:
        columns += [k for k in record if k not in columns]
    return columns, [[encode_cell(r.get(c)) for c in columns] for r in records]


def traces_table(records: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows) of the per-round traces, one row per round of every record."""
    rows = []
    for r in records:
        accepted = list(r.get("accepted_trace") or [])
        gammas = list(r.get("gamma_trace") or []) or [None] * len(accepted)
        drafted = list(r.get("drafted_trace") or []) or [None] * len(accepted)
        for i, (g, d, a) in enumerate(zip(gammas, drafted, accepted, strict=False)):
            rows.append([r.get("prompt_id"), r.get("turn"), i, g, d, a])
    return list(TRACE_COLUMNS), rows


class WandbLogger(JobLogger):
    """``logger=wandb``: one W&B run per job (module doc)."""

    name = "wandb"

    def __init__(
        self,
        project: str = "specbench",
        entity: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
        mode: str | None = None,
        dir: str | None = None,
        job_type: str = "benchmark",
    ) -> None:
        self.project, self.entity, self.group = project, entity, group
        self.tags, self.mode, self.dir, self.job_type = list(tags or []), mode, dir, job_type
        self._run: Any = None
        self._records: list[dict[str, Any]] = []

    def start(self, config: Mapping[str, Any], job_name: str) -> None:
        import wandb

        config = dict(config or {})
        group = self.group or Path(str(config.get("results_dir") or "results")).name
        if self.dir:
            Path(self.dir).mkdir(parents=True, exist_ok=True)
        self._records = []
        self._run = wandb.init(
            project=self.project, entity=self.entity, group=group, name=job_name, config=config,
            tags=self.tags or None, mode=os.environ.get("WANDB_MODE") or self.mode, dir=self.dir,
            job_type=self.job_type, reinit="finish_previous",
        )

    def log_record(self, record: Mapping[str, Any]) -> None:
        if self._run is None:
            raise RuntimeError("WandbLogger.log_record before start()")
        step = len(self._records)
        self._records.append(dict(record))
        metrics = {}
        for key in STEP_FIELDS:
            value = record.get(key)
            if isinstance(value, bool):
                value = int(value)
            if _is_number(value):
                metrics[f"prompt/{key}"] = value
        self._run.log(metrics, step=step)

    def finish(self, summary: Mapping[str, Any], failed: bool) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        try:
            import wandb

            summary = dict(summary or {})
            aggregates = summary.get("aggregates") or {}
            values = {k: (int(v) if isinstance(v, bool) else v) for k, v in aggregates.items()
                      if isinstance(v, bool) or _is_number(v)}
            values["status"] = summary.get("status") or ("failed" if failed else "complete")
            if summary.get("error"):
                values["error"] = str(summary["error"])
            run.summary.update(values)
            if summary.get("provenance"):
                run.config.update({"provenance": summary["provenance"]}, allow_val_change=True)
            tables = {}
            for key, build in ((RECORDS_TABLE, records_table), (TRACES_TABLE, traces_table)):
                columns, rows = build(self._records)
                tables[key] = wandb.Table(columns=columns, data=rows, allow_mixed_types=True)
            run.log(tables, step=len(self._records))
        finally:
            run.finish(exit_code=1 if failed else 0)


LOGGERS: Registry[type[JobLogger]] = Registry(
    "logger", {"none": "specbench.loggers:NullLogger", "wandb": "specbench.loggers:WandbLogger"}
)


def build_logger(cfg: LoggerConfig) -> JobLogger:
    """The logger ``cfg`` names (``conf/logger/<name>.yaml``)."""
    cls = LOGGERS.get(cfg.name)
    if cls is NullLogger:
        return NullLogger()
    return cls(project=cfg.project, entity=cfg.entity, group=cfg.group, tags=cfg.tags, mode=cfg.mode, dir=cfg.dir)
