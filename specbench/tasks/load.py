"""Loading a task: its dataset's module read (``read_task``), then the selections common to every task
(``categories``, ``per_category``, ``n_prompts``: ``select``), and what the load found out (``load_task_facts``,
``specbench.tasks.base.TaskFacts``); ``task_source``, the one-line description of where a task reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specbench.checks import check_int
from specbench.registry import ConfigError
from specbench.tasks.base import LoadedRows, Prompt, TaskFacts
from specbench.tasks.config import TASKS, TaskConfig


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


def read_task(cfg: TaskConfig | Mapping[str, Any]) -> LoadedRows:
    """Every row the task's dataset module reads (``TASKS``: its ``load``), as ``LoadedRows``; an unknown
    ``task.loader`` is refused naming the known ones."""
    cfg = TaskConfig.from_mapping(cfg)
    loaded = TASKS.get(cfg.loader).load(cfg)
    return loaded if isinstance(loaded, LoadedRows) else LoadedRows(list(loaded))


def load_task(cfg: TaskConfig | Mapping[str, Any]) -> list[Prompt]:
    """The prompts a task config selects (a plain mapping is validated into a ``TaskConfig`` first)."""
    return load_task_facts(cfg)[0]


def load_task_facts(cfg: TaskConfig | Mapping[str, Any]) -> tuple[list[Prompt], TaskFacts]:
    """``load_task``'s prompts and what the load found out (``TaskFacts``, ``specbench.tasks.base``)."""
    cfg = TaskConfig.from_mapping(cfg)
    loaded = read_task(cfg)
    prompts = loaded.kept
    if not prompts:
        raise ConfigError(f"task {cfg.name!r} has no prompts ({task_source(cfg)})")
    selected = select(prompts, cfg.categories, cfg.n_prompts, cfg.per_category)
    skipped: dict[str, int] = {}
    if loaded.left_out:  # the benchmark's own selection, on every row read: the rows of it this run lacks
        for p in select(loaded.prompts, cfg.categories, cfg.n_prompts, cfg.per_category):
            if p.prompt_id in loaded.left_out:
                skipped[p.category] = skipped.get(p.category, 0) + 1
    facts = TaskFacts(cfg.name, task_source(cfg), len(selected), loaded.revision, loaded.resolved_revision, skipped)
    for prompt in selected:  # a generation from nothing measures nothing: refuse it, naming the row
        for turn, text in enumerate(prompt.turns, start=1):
            if not text.strip():
                raise ConfigError(
                    f"task {cfg.name!r}: prompt {prompt.prompt_id!r} (turn {turn}) is empty; remove the row or "
                    f"fix its prompt field ({task_source(cfg)})"
                )
    return selected, facts


def task_source(cfg: TaskConfig | Mapping[str, Any]) -> str:
    """A one-line description of where ``load_task(cfg)`` reads its rows (for logs and dry runs): local files
    when ``task.data_files`` names some and the dataset reads them (``TaskModule.LOCAL_FILES``), else the
    dataset module's own ``source``; ``loader '<name>'`` for a name ``TASKS`` does not know."""
    cfg = TaskConfig.from_mapping(cfg)
    module = TASKS.get(cfg.loader) if cfg.loader in TASKS else None
    if cfg.data_files and (module is None or module.LOCAL_FILES):
        return f"local files {cfg.data_files!r}"
    return module.source(cfg) if module is not None else f"loader {cfg.loader!r}"
