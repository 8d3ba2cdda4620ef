"""Reading and writing the record files: ``records.jsonl`` (one JSON line per record, appended and fsynced as
each prompt turn finishes), replayed rows (``replay.jsonl``) and any JSON written atomically (``summary.json``).

What a record holds is ``specbench.records``'; this module only moves lines. A torn last line (a kill mid-write)
is skipped by every reader, never half-read.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


class RecordWriter:
    """Appends one JSON line per record and flushes + fsyncs it at once, so a crash loses at most the prompt in
    flight and never leaves half a line (a torn last line from a kill is dropped by ``read_records``)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, record: Any) -> None:
        """``record``: a ``specbench.records.Record`` (its ``to_json``) or a mapping."""
        to_json = getattr(record, "to_json", None)
        line = to_json() if callable(to_json) else json.dumps(dict(record), allow_nan=False)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete lines of a JSON-lines file (``records.jsonl``, ``replay.jsonl``); none when it does not exist
    (a torn final line is skipped)."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    with open(p, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # torn by a kill mid-write
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def write_jsonl(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> None:
    """``rows`` as a JSON-lines file, replacing it (replayed rows and cells: ``runners.replay.grid.write_grid``)."""
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, allow_nan=False) + "\n")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON to a temp file in the same folder, fsync, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
