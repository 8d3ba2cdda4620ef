"""Task rows from public sources: what the dataset modules share (each says which it reads).

* a URL (``specbench``) -- downloaded once with the standard library into ``$SPECBENCH_DATA_CACHE`` (default
  ``~/.cache/specbench/data``): ``fetch_url``. Not through ``datasets``' json builder: ``datasets`` >= 4 reads
  non-Hub ``https://`` URLs with fsspec's HTTP filesystem, which needs ``aiohttp``, no longer a dependency of
  ``datasets``.
* a Hub dataset (``cnn_dailymail``, ``humaneval``, ``speed_bench``) -- ``datasets.load_dataset(task.path,
  task.subset, split=task.split, revision=task.revision)`` (parquet on the Hub; cached by ``datasets``;
  ``revision``: the task's, else its loader's default, ``speed_bench``'s ``main``, else none passed):
  ``hub_dataset``, which also returns the commit ``datasets`` resolved the revision to, when its cache says
  (``resolved_revision``). A file of a Hub repository (``scrolls``' zip, ``sharegpt``'s JSON
  array) is read with ``huggingface_hub``.

All caches are the standard ones, so ``python -m runners.jobs.prefetch`` run once online lets a sweep run with
``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1``. A source that cannot be reached raises ``ConfigError``
saying how to set ``task.data_files`` (``unreachable``). A source setting the task config leaves null takes the
loader's default (``TaskConfig.setting``: its module's ``DEFAULTS``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specbench.registry import ConfigError
from specbench.tasks.config import TaskConfig
from specbench.tasks.files import local_rows

log = logging.getLogger(__name__)


def offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )


def unreachable(cfg: TaskConfig, what: str, fields: Sequence[str], exc: BaseException | None) -> ConfigError:
    """The error for a public source that could not be read (offline, no network, not cached)."""
    name = cfg.name
    why = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    mode = " Offline mode is on (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE)." if offline() else ""
    return ConfigError(
        f"task {name!r}: could not load {what}{why}.{mode} Fetch it once while online "
        f"(python -m runners.jobs.prefetch --task {name}), or give local files: "
        f"task.data_files=/path/to/rows.jsonl (a path or glob to json/jsonl/parquet files; "
        f"rows with the fields {', '.join(fields)})."
    )


def data_cache_dir() -> Path:
    env = os.environ.get("SPECBENCH_DATA_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specbench" / "data"


def url_cache_path(url: str) -> Path:
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return data_cache_dir() / f"{digest}-{url.rstrip('/').rsplit('/', 1)[-1]}"


def fetch_url(url: str, cfg: TaskConfig, fields: Sequence[str]) -> Path:
    """A local copy of ``url`` (downloaded once; offline mode only reads the cache)."""
    path = url_cache_path(url)
    if path.is_file():
        return path
    if offline():
        raise unreachable(cfg, f"{url} (not in the cache {str(path)!r})", fields, None)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as f:
            f.write(resp.read())
        os.replace(tmp, path)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise unreachable(cfg, url, fields, exc) from exc
    log.info("downloaded %s -> %s", url, path)
    return path


#: a Hub commit (``huggingface_hub``'s ``sha``: 40 hexadecimal digits)
COMMIT = re.compile(r"[0-9a-f]{40}")


def resolved_revision(ds: Any) -> str | None:
    """The Hub commit a ``datasets.Dataset`` was read at, as the library states it: its builder caches a Hub
    dataset under ``<name>/<config>/<version>/<commit>`` (``datasets.builder.DatasetBuilder._relative_data_dir``
    with the hash ``datasets.load`` gives a Hub module: the commit its ``revision`` resolved to, or the cached
    one offline), so a folder of its ``cache_files`` names it; None when none does (in memory, streamed)."""
    for entry in getattr(ds, "cache_files", None) or []:
        for part in Path(str(entry.get("filename", ""))).parts:
            if COMMIT.fullmatch(part):
                return part
    return None


def hub_rows(cfg: TaskConfig, path: str, subset: str | None, split: str, fields: Sequence[str]) -> list[dict]:
    """Rows of a Hub dataset through ``datasets`` (its cache works offline once filled): ``hub_dataset``'s rows."""
    return hub_dataset(cfg, path, subset, split, fields)[0]


def hub_dataset(cfg: TaskConfig, path: str, subset: str | None, split: str,
                fields: Sequence[str]) -> tuple[list[dict], str | None]:
    """Rows of a Hub dataset through ``datasets``, read at the task's revision (``TaskConfig.setting``: the
    task's ``revision``, else its loader's default; none passed when both are null), and the commit it resolved
    to (``resolved_revision``; None when the library does not say)."""
    what = f"the dataset {path!r}" + (f" (config {subset!r})" if subset else "") + f" split {split!r}"
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError(
            f"task {cfg.name!r} reads {path!r} with the `datasets` package: pip install 'specbench[data]', "
            "or give local files with task.data_files=/path/to/rows.jsonl"
        ) from exc
    kwargs: dict[str, Any] = {"split": split}
    revision = cfg.setting("revision")
    if revision:
        kwargs["revision"] = revision
        what += f" at revision {revision!r}"
    try:
        ds = datasets.load_dataset(path, subset, **kwargs)
    except Exception as exc:
        raise unreachable(cfg, what, fields, exc) from exc
    return ds.to_list(), resolved_revision(ds)


def task_rows(cfg: TaskConfig, fields: Sequence[str]) -> list[dict]:
    """A Hub dataset's rows, or the local files' when ``task.data_files`` names some: the task's own ``path``,
    ``subset`` and ``split`` settings (``hub_rows``, ``specbench.tasks.files.local_rows``)."""
    if cfg.data_files:
        return local_rows(cfg)
    return hub_rows(cfg, cfg.setting("path"), cfg.setting("subset"), cfg.setting("split"), fields)


def hub_source(cfg: TaskConfig, revision: bool = True) -> str:
    """``task_source`` of a Hub dataset read through ``datasets``: ``datasets: <path> [<subset>] split=<split>``,
    and `` revision=<revision>`` when ``revision`` and the task (or its loader's default) names one."""
    path, subset, split = cfg.setting("path"), cfg.setting("subset"), cfg.setting("split")
    named = cfg.setting("revision") if revision else None
    return f"datasets: {path}" + (f" {subset}" if subset else "") + f" split={split}" + (f" revision={named}" if named else "")
