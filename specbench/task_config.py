"""The task's typed config (``conf/task/*.yaml``): ``TaskConfig`` and the ``task.prompt_format`` values,
validated at the boundary (``specbench.config.JobConfig.from_mapping``; ``specbench.tasks.load_task``
validates a plain mapping the same way). What the loaders do with it: ``specbench.tasks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specbench.checks import check_choice, check_int, check_str, field_names, only_known
from specbench.registry import ConfigError

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
        """``key``'s value, or the loader's default (``LOADER_DEFAULTS``) when the config leaves it null
        (or empty); None when the loader has none."""
        return getattr(self, key) or LOADER_DEFAULTS.get(self.loader, {}).get(key)


# --------------------------------------------------------------------------- each loader's defaults

# The prompt wording of the heterogeneous-vocabularies benchmark (Timor et al. 2025). The paper does not
# print its prompts; these are the ones of its benchmark code (github.com/keyboardAnt/hf-bench,
# hf_bench/benchmark.py), which feeds them to the tokenizer as plain text, and takes the first 30 rows of
# each dataset/split below.
CNN_DAILYMAIL_TEMPLATE = "Summarize the following article:\n{article}\nSummary:\n"
HUMANEVAL_TEMPLATE = (
    "Implement the function so that it passes the tests.\nTests:\n{test}\nFunction:\n{prompt}\n\nYour code:\n"
)
SCROLLS_TEMPLATE = "Summarize the following text:\n{input}\nSummary:\n"
SPECBENCH_URL = "https://raw.githubusercontent.com/hemingkx/Spec-Bench/main/data/spec_bench/question.jsonl"
SPEED_BENCH_PATH = "nvidia/SPEED-Bench"  # Abramovich et al. 2026; the loader's docstring says where this is read
#: the Hub revision SPEED-Bench is read at unless ``task.revision`` names another: its default branch, named
#: (no commit of the dataset could be read where this was written, so none is pinned); a job's summary records
#: it and the commit ``datasets`` resolved it to (``specbench.tasks.TaskFacts``). Pin a commit with
#: ``task.revision=<sha>``.
SPEED_BENCH_REVISION = "main"

#: what a loader takes for a key its task config leaves null (``TaskConfig.setting``): the one place the
#: code writes them; ``conf/task/<loader>.yaml`` restates them and ``tests/specbench/test_tasks.py`` checks they agree.
LOADER_DEFAULTS: dict[str, dict[str, str]] = {
    "specbench": {"url": SPECBENCH_URL},
    "cnn_dailymail": {"path": "abisee/cnn_dailymail", "subset": "3.0.0", "split": "validation",
                      "template": CNN_DAILYMAIL_TEMPLATE, "category": "summarization"},
    "humaneval": {"source": "auto", "path": "openai/openai_humaneval", "subset": "openai_humaneval", "split": "test",
                  "template": HUMANEVAL_TEMPLATE, "category": "coding"},
    "scrolls": {"path": "tau/scrolls", "subset": "qasper", "split": "test", "template": SCROLLS_TEMPLATE},
    "speed_bench": {"path": SPEED_BENCH_PATH, "subset": "qualitative", "split": "test", "revision": SPEED_BENCH_REVISION,
                    "unresolved": "error"},
    "custom": {"prompt_field": "prompt", "id_field": "id", "category_field": "category", "category": "custom"},
}
