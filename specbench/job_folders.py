"""Job folders: a job's folder named by its overrides, what of a config is the job's identity, and
whether a folder still holds the same job.

optimum-benchmark names a sweep's job folders by their overrides, not by time, so a re-run finds what is
done and does only what is missing; the STYLE guide asks the same (``method=gammatune,gamma=4``).

* ``job_dirname``: the folder name, the ``${job_dirname:...}`` resolver of ``conf/config.yaml``'s
  ``hydra.run.dir`` and ``hydra.sweep.subdir`` (registered by ``specbench.config.register_resolvers``).
  It reads the file system: a ``task.data_files`` stem that collides with another file's job already
  under ``results_dir`` (its ``summary.json``) gets a short hash.
* ``NON_IDENTITY_KEYS``: the settings that do not change what a job measures (left out of folder names
  and of the drift check); ``PRESENTATION_KEYS``: the nested keys that only name it (left out alike).
* ``config_drift``: the first setting in which a folder's recorded config and the new one differ
  (``runners.jobs`` refuses to extend a folder that holds another job).
* ``check_results_dir``: ``results_dir`` exists or can be created (checked before Hydra makes a folder,
  ``runners.jobs.preflight``).
* ``nothing_left_on_bad_config``: a job folder that held no results is removed when its config is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from specbench.checks import check_str
from specbench.registry import ConfigError

#: keys that do not change what a job measures: left out of job folder names (``hydra.job.config.
#: override_dirname.exclude_keys`` in conf/config.yaml) and of the check that a job folder holds
#: results of the same config (``config_drift``).
NON_IDENTITY_KEYS = ("results_dir", "overwrite", "logger", "threads", "cache_dir", "warmup", "model_budget", "on_locked",
                     "latency", "repeats", "host_probe")
#: nested keys that only name what ran (``method.display``, ``hetero.display``: how tables name a method and a
#: cross-vocabulary rule, ``specbench.config.method``): left out of folder names and of the drift check, so a folder
#: written before the YAML files had them resumes, and renaming a method in its YAML refuses no folder
PRESENTATION_KEYS = ("method.display", "hetero.display")


_ITEM_START = re.compile(r"^[+~]*[A-Za-z_][\w.@/-]*=")
_DATA_FILES_KEY = "task.data_files"


def _override_items(override_dirname: str) -> list[str]:
    """The ``key=value`` items of Hydra's ``override_dirname`` (``item_sep`` ``,``); a value holding
    commas (a list, ``[a,b]``) stays one item."""
    items: list[str] = []
    for piece in override_dirname.split(","):
        if items and not _ITEM_START.match(piece):
            items[-1] += "," + piece
        else:
            items.append(piece)
    return [i for i in items if i]


def _file_stem(path: str) -> str:
    name = Path(path.strip().strip("'\"")).name
    for suffix in (".gz", ".parquet", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "files"


def data_files_label(value: str) -> str:
    """A short folder label for a ``task.data_files`` value: the file's stem (``question`` for
    ``/data/question.jsonl``); for a list, the stems joined with ``+``."""
    value = value.strip()
    parts = value[1:-1].split(",") if value.startswith("[") and value.endswith("]") else [value]
    return "+".join(_file_stem(p) for p in parts if p.strip())


def _holds_other_data_files(folder: Path, value: str) -> bool:
    """Whether ``folder`` already holds a job whose ``task.data_files`` differs from ``value``."""
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    old = ((summary.get("config") or {}).get("task") or {}).get("data_files")
    new = value.strip().strip("'\"")
    if isinstance(old, list):
        old = "[" + ",".join(map(str, old)) + "]"
    return old is not None and str(old) != new and str(Path(str(old)).expanduser()) != str(Path(new).expanduser())


#: the longest job folder name (bytes); most filesystems allow 255
MAX_DIRNAME = 200


def job_dirname(override_dirname: str, results_dir: str | None = None, transient: Any = None,
                cache: Any = None) -> str:
    """A job folder named by its overrides (``gamma=4,method=gammatune``); ``default`` when none.

    * ``task.data_files=/some/path/question.jsonl`` is named by the file's stem
      (``task.data_files=question``), with a short hash of the full value appended
      (``question-1a2b3c4d``) when a job folder of that name already holds another file's job
      under ``results_dir`` (stems that collide).
    * Settings that change what a job measures are named even when a config file, not an
      override, set them: ``method.transient=false`` (γ carried over between prompts) unless
      the name already says ``transient=`` or ``carryover``, and ``method.cache=offloaded``
      unless it already says ``offloaded``.
    """
    items = _override_items(override_dirname.strip())
    data_files = [i for i, item in enumerate(items)
                  if item.partition("=")[0].lstrip("+~") == _DATA_FILES_KEY and item.partition("=")[2]]
    values = {i: items[i].partition("=")[2] for i in data_files}
    for i in data_files:
        items[i] = f"{items[i].partition('=')[0]}={data_files_label(values[i])}"
    if results_dir is not None and data_files:
        probe = re.sub(r"[/\\\s]+", "_", ",".join(items))
        if any(_holds_other_data_files(Path(results_dir) / probe, values[i]) for i in data_files):
            for i in data_files:
                digest = hashlib.sha256(values[i].strip().strip("'\"").encode()).hexdigest()[:8]
                items[i] += f"-{digest}"
    name = ",".join(items)
    if transient is False and "transient=" not in name and "carryover" not in name:
        name = ",".join(filter(None, [name, "method.transient=false"]))
    if cache == "offloaded" and "offloaded" not in name:
        name = ",".join(filter(None, [name, "method.cache=offloaded"]))
    name = re.sub(r"[/\\\s]+", "_", name or "default")
    if len(name.encode()) > MAX_DIRNAME:
        # a folder name may hold 255 bytes: keep a readable prefix and name the whole by its hash
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = name.encode()[: MAX_DIRNAME - 17].decode(errors="ignore") + "-" + digest
    return name


def config_drift(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> str | None:
    """The first setting (dotted key, with both values) in which two resolved job configs differ,
    ignoring ``NON_IDENTITY_KEYS`` and ``PRESENTATION_KEYS``; a key absent from ``old`` (written before it existed) counts as
    null, and matches a new value that is off (null, false, or a mapping of such: an option added
    later, off by default, e.g. ``engine``). None when they describe the same job."""
    keys = sorted(set(old) | set(new), key=str)
    for key in keys:
        if (not prefix and key in NON_IDENTITY_KEYS) or f"{prefix}{key}" in PRESENTATION_KEYS:
            continue
        where = f"{prefix}{key}"
        if key not in old and _is_off(new.get(key), where):
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            inner = config_drift(a, b, where + ".")
            if inner is not None:
                return inner
        elif a != b and not (isinstance(a, list | tuple) and isinstance(b, list | tuple) and list(a) == list(b)):
            return f"{where}: {a!r} there, {b!r} now"
    return None


#: settings added later whose default is named by a string, and what a config written before them ran
#: (``config_drift``): ``engine.graphs`` ``eager``, the dynamic cache every earlier job decoded on;
#: ``engine.dtype`` ``model``, the config's dtype; ``engine.width`` ``auto``, off for every float32 target and on GPU
#: (a CPU job with a half-precision target, written before it, ran without it: none is committed)
#: ``backend.name`` ``torch``: every job before the backends ran on our engine
OFF_DEFAULTS = {"engine.graphs": "eager", "engine.dtype": "model", "engine.width": "auto", "backend.name": "torch"}


def _is_off(value: Any, where: str = "") -> bool:
    """Null, false, a later setting at its default (``OFF_DEFAULTS``), or a mapping whose values are all off
    (``config_drift``)."""
    if isinstance(value, Mapping):
        return all(_is_off(v, f"{where}.{k}" if where else str(k)) for k, v in value.items())
    return value is None or value is False or (where in OFF_DEFAULTS and value == OFF_DEFAULTS[where])


def check_results_dir(value: Any, key: str = "results_dir") -> Path:
    """A folder that exists or can be created, as a ``Path``: its nearest existing ancestor (or itself)
    is a writable folder. Reads the file system, so ``run.py`` calls it before Hydra creates the job
    folder (``runners.jobs.preflight``), not ``JobConfig``."""
    path = Path(check_str(key, value)).expanduser()
    nearest = path
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise ConfigError(f"{key} {value!r} cannot be created: {nearest} is a file, not a folder")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ConfigError(f"{key} {value!r} cannot be created: {nearest} is not writable")
    return path


@contextlib.contextmanager
def nothing_left_on_bad_config(job_dir: str | os.PathLike) -> Iterator[None]:
    """Around validating a job: a ``ConfigError`` removes ``job_dir`` (the folder Hydra made for the job) unless it held
    results before (``records.jsonl`` or ``summary.json``), and propagates: a bad config leaves no folder behind."""
    job_dir = Path(job_dir)
    existed_before = (job_dir / "records.jsonl").exists() or (job_dir / "summary.json").exists()
    try:
        yield
    except ConfigError:
        if not existed_before:
            shutil.rmtree(job_dir, ignore_errors=True)
        raise
