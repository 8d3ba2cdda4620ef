"""Task rows from local files: ``task.data_files`` (a path, a glob, a list of them, or a ``{split:
path}`` mapping) read as rows of ``.json`` / ``.jsonl`` (optionally ``.gz``) or ``.parquet`` files.

Every dataset but ``embedded`` reads these when ``task.data_files`` is given (its ``TaskModule.LOCAL_FILES``);
a file that cannot be read is a ``ConfigError`` naming it and what is wrong, never a traceback.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specbench.registry import ConfigError
from specbench.tasks.config import TaskConfig

_GLOB_CHARS = set("*?[")


def _expand(item: str) -> list[Path]:
    pattern = os.path.expanduser(str(item))
    if _GLOB_CHARS & set(pattern):
        paths = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
        if not paths:
            raise ConfigError(f"task.data_files: no file matches {pattern!r}")
        return paths
    path = Path(pattern)
    if not path.is_file():
        raise ConfigError(f"task.data_files: file not found: {str(path)!r}")
    return [path]


def resolve_data_files(data_files: Any, split: str | None = None) -> list[Path]:
    """The local files named by ``task.data_files`` (a path, glob, list, or ``{split: ...}``)."""
    if isinstance(data_files, Mapping):
        if split not in data_files:
            raise ConfigError(f"task.data_files has no split {split!r}; it has {sorted(data_files)}")
        data_files = data_files[split]
    items = [data_files] if isinstance(data_files, (str, os.PathLike)) else list(data_files)
    if not items:
        raise ConfigError("task.data_files is empty")
    return [p for item in items for p in _expand(item)]


def _read_text(path: Path) -> str:
    """A data file's text; a file that is not UTF-8 (or not gzip when named ``.gz``) is a ``ConfigError``
    naming it and what is wrong, never a traceback."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        bom = path.read_bytes()[:4] if path.suffix != ".gz" else b""
        what = "UTF-16" if bom[:2] in (b"\xff\xfe", b"\xfe\xff") else "not UTF-8"
        raise ConfigError(
            f"data file {str(path)!r} is {what} text (byte {exc.start}: {exc.reason}); save it as UTF-8"
        ) from None
    except (gzip.BadGzipFile, EOFError, OSError) as exc:
        raise ConfigError(f"data file {str(path)!r} cannot be read: {type(exc).__name__}: {exc}") from None


def _json_lines(text: str, where: str) -> list[Any]:
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: line {i} is not JSON: {exc}") from None
    return rows


def rows_from_json_text(text: str, where: str, lines: bool = True) -> list[dict]:
    """Rows of JSON lines (``lines=True``), or of a ``.json`` file: an array of rows,
    an object holding one array of rows (``{"data": [...]}``), or JSON lines."""
    stripped = text.lstrip()
    if lines or not stripped:
        rows = _json_lines(text, where)
    else:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, list):
            rows = obj
        elif isinstance(obj, dict):
            lists = [v for v in obj.values() if isinstance(v, list) and v and isinstance(v[0], dict)]
            rows = lists[0] if len(obj) == 1 and lists else [obj]
        else:
            rows = _json_lines(text, where)
    bad = [i for i, r in enumerate(rows) if not isinstance(r, dict)]
    if bad:
        raise ConfigError(f"{where}: row {bad[0]} is not a JSON object")
    return rows


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Rows of one local ``.json``/``.jsonl`` (optionally ``.gz``) or ``.parquet`` file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"data file not found: {str(path)!r}")
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:  # pragma: no cover - pyarrow comes with datasets/pandas
            raise ConfigError(f"reading {str(path)!r} needs pyarrow (pip install pyarrow)") from exc
        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises its own errors for a file that is not parquet
            raise ConfigError(f"data file {str(path)!r} is not a readable parquet file: {exc}") from None
    core = suffixes[:-1] if suffixes and suffixes[-1] == ".gz" else suffixes
    if not core or core[-1] not in (".json", ".jsonl"):
        raise ConfigError(f"data file {str(path)!r}: expected .json, .jsonl (optionally .gz) or .parquet")
    return rows_from_json_text(_read_text(path), str(path), lines=core[-1] == ".jsonl")


def local_rows(cfg: TaskConfig) -> list[dict]:
    """The rows of every file ``task.data_files`` names (``task.split`` picks from a ``{split: path}``)."""
    rows: list[dict] = []
    for path in resolve_data_files(cfg.data_files, cfg.split):
        rows += read_rows(path)
    return rows
