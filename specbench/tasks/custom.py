"""``custom``: your own local rows (``task.data_files``, required; ``conf/task/custom.yaml``). Each row holds the
prompt in ``task.prompt_field`` (a string, or a list of strings: one per turn), and optionally an id
(``task.id_field``; default: the row number), a category (``task.category_field``; default: ``task.category``)
and a reference (``task.reference_field``); ``task.template`` builds the prompt from any ``{field}`` instead.
"""

from __future__ import annotations

from specbench.registry import ConfigError
from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.files import local_rows
from specbench.tasks.rows import reference, render

DEFAULTS = {"prompt_field": "prompt", "id_field": "id", "category_field": "category", "category": "custom"}
FIELDS: tuple[str, ...] = ()  # the rows' fields are the user's, named by the task.*_field settings
LOCAL_FILES = True


def source(cfg: TaskConfig) -> str:
    return f"loader {cfg.loader!r}"  # no source of its own: only task.data_files, refused when missing


@dataset("custom")
def load(cfg: TaskConfig) -> list[Prompt]:
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
            turns: tuple[str, ...] = (render(template, row, cfg),)
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
        ref = reference(row.get(reference_field)) if reference_field else None
        out.append(Prompt(pid, category, turns, ref))
    return out
