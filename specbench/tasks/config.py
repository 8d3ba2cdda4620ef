"""The task's typed config (``conf/task/*.yaml``) and the datasets it names.

``TaskConfig`` and the ``task.prompt_format`` values are validated at the boundary
(``specbench.config.JobConfig.from_mapping``; ``specbench.tasks.load_task`` validates a plain mapping the same
way). ``TASKS`` is the registry its ``loader`` key names: each dataset's module in this package declares its name
(``@dataset("<name>")`` on its ``load``, ``specbench.registry``'s one convention), and is imported the first time
the name is chosen (lm-evaluation-harness's lazy registry). A
dataset module declares what ``TaskModule`` says: its defaults, its rows' fields, its source and its loader.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from specbench.checks import check_choice, check_int, check_str, field_names, only_known
from specbench.registry import ConfigError, Registry

if TYPE_CHECKING:  # the loaders' return types; specbench.tasks.base imports nothing of this package
    from specbench.tasks.base import LoadedRows, Prompt

TRUNCATE = (None, "left", "right")  # a prompt longer than the model's positions: refused, or cut on this side
UNRESOLVED = (None, "error", "skip")  # rows still holding a source's placeholder text: refused, or left out
PROMPT_FORMATS = ("auto", "chat_template", "vicuna_v1.1", "plain")


def check_prompt_format(value: Any) -> str:
    """``auto`` (the tokenizer's chat template when it has one, else plain) | ``chat_template`` |
    ``vicuna_v1.1`` | ``plain`` (see ``specbench.tasks.format_turn``)."""
    return check_choice("task.prompt_format", value, PROMPT_FORMATS)


def legacy_chat_template(value: Any) -> str | None:
    """The ``prompt_format`` meant by the former ``task.chat_template`` key (summaries written before
    ``prompt_format`` existed): true -> chat_template, false -> plain, auto -> None (no preference)."""
    if isinstance(value, str) and value.lower() in ("true", "false", "auto"):
        value = {"true": True, "false": False, "auto": "auto"}[value.lower()]
    if value not in (True, False, "auto", None):
        raise ConfigError(f"task.chat_template (now task.prompt_format) must be auto, true or false, got {value!r}")
    return {True: "chat_template", False: "plain"}.get(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TaskConfig:
    """Where prompts come from (``specbench.tasks``): ``loader`` (a key of ``TASKS``), the loader's
    source settings, the selection common to every task (``categories``, ``per_category``,
    ``n_prompts``), and ``prompt_format`` (how a turn becomes the model's text). Loader-specific
    keys a loader does not use are ignored by it. The former ``chat_template`` key (true / false /
    auto) is still read from old summaries as ``prompt_format`` chat_template / plain / auto. ``truncate``:
    a prompt too long for the target's positions is refused (null, the default) or cut on the ``left``
    (its start) or ``right`` (its end) side, and the record says how many tokens went. ``unresolved``
    (``speed_bench``): rows whose text the public copy replaces by a placeholder are refused (``error``)
    or left out with a warning (``skip``)."""

    name: str
    loader: str
    url: str | None = None
    path: str | None = None
    subset: str | None = None
    split: str | None = None
    revision: str | None = None
    source: str | None = None
    data_files: Any = None
    template: str | None = None
    category: str | None = None
    prompt_field: str | None = None
    id_field: str | None = None
    category_field: str | None = None
    reference_field: str | None = None
    n_prompts: int | None = None
    per_category: int | None = None
    categories: tuple[str, ...] | None = None
    prompt_format: str = "auto"
    truncate: str | None = None
    unresolved: str | None = None

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any]) -> TaskConfig:
        if isinstance(node, TaskConfig):
            return node
        node = dict(node) if isinstance(node, Mapping) else node
        legacy = legacy_chat_template(node.pop("chat_template", None)) if isinstance(node, dict) else None
        values = only_known(node, "task", field_names(cls))
        loader = values.get("loader") or values.get("name")
        values["loader"] = check_str("task.loader", loader)
        values["name"] = str(values.get("name") or loader)
        check_int("task.n_prompts", values.get("n_prompts"), 1, optional=True)
        check_int("task.per_category", values.get("per_category"), 1, optional=True)
        cats = values.get("categories")
        if isinstance(cats, str):
            cats = [cats]
        if cats is not None and not all(isinstance(c, str) for c in cats):
            raise ConfigError(f"task.categories must be a list of names, got {cats!r}")
        values["categories"] = tuple(cats) if cats else None
        check_choice("task.truncate", values.get("truncate"), TRUNCATE)
        check_choice("task.unresolved", values.get("unresolved"), UNRESOLVED)
        fmt = check_prompt_format(values.get("prompt_format", cls.prompt_format))
        if legacy is not None:
            if fmt not in ("auto", legacy):
                raise ConfigError(f"task.chat_template and task.prompt_format={fmt} disagree; set prompt_format only")
            fmt = legacy
        values["prompt_format"] = fmt
        return cls(**values)

    def setting(self, key: str) -> Any:
        """``key``'s value, or the loader's default (its module's ``DEFAULTS``: ``loader_defaults``) when the
        config leaves it null (or empty); None when the loader has none."""
        return getattr(self, key) or loader_defaults(self.loader).get(key)


# --------------------------------------------------------------------------- the datasets


class TaskModule(Protocol):
    """What a dataset's module (``specbench/tasks/<name>.py``) declares, the name being the stem and ``name:`` of
    ``conf/task/<name>.yaml`` and its test fixture ``tests/fixtures/tasks/<name>.jsonl``:

    * ``DEFAULTS``: what it takes for a key its task config leaves null (``TaskConfig.setting``): the one place
      the code writes them; its ``conf/task/<name>.yaml`` restates them (``tests/specbench/test_tasks.py`` checks
      they agree);
    * ``FIELDS``: the fields its rows hold (named in the error for a source that cannot be read);
    * ``LOCAL_FILES``: whether ``task.data_files`` replaces its own source (``specbench.tasks.files``);
    * ``source(cfg)``: a one-line description of its own source (``specbench.tasks.task_source``);
    * ``load(cfg)``: every prompt of its source, in the source's order, or ``LoadedRows``
      (``specbench.tasks.load_task`` applies the selections common to every task).
    """

    DEFAULTS: Mapping[str, str]
    FIELDS: Sequence[str]
    LOCAL_FILES: bool

    def source(self, cfg: TaskConfig) -> str: ...

    def load(self, cfg: TaskConfig) -> list[Prompt] | LoadedRows: ...


#: the datasets by name, each declared by its module (``@dataset("<name>")`` on its ``load``), found by reading this
#: package's sources, each entry the dataset's module (``TaskModule``), imported the first time it is chosen
TASKS: Registry[TaskModule] = Registry("task loader", package=__package__, marker="dataset")


def dataset(name: str) -> Callable[[Callable], Callable]:
    """Declare the decorated ``load`` as dataset ``name``'s loader (``specbench.registry``'s convention): the registry's
    entry is the module that defines it, so its ``DEFAULTS``, ``FIELDS``, ``source`` and ``load`` are read from there."""

    def declare(load: Callable) -> Callable:
        TASKS.add(name, sys.modules[load.__module__])  # type: ignore[arg-type]
        return load

    return declare


def loader_defaults(loader: str) -> Mapping[str, str]:
    """``loader``'s ``DEFAULTS`` (its module imported on first use); empty for a name ``TASKS`` does not know
    (``load_task`` refuses it, naming the known ones)."""
    return TASKS.get(loader).DEFAULTS if loader in TASKS else {}
